"""domain.transitions: the one table of a run's changes. Every lifecycle transition is a row,
refuses a run outside the row's sources, ends only where the row says, and the state
machine is derived from the rows."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobsched.domain import lifecycle
from jobsched.domain.runs import Run, RunState
from jobsched.domain.transitions import (
    ALLOWED,
    TRANSITIONS,
    TransitionRefused,
    Writer,
    applied_rule,
    can_move,
)

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def run(state: RunState, **fields) -> Run:
    base = {
        "run_key": "j_x@2026-11-02T08:00:00Z",
        "job_id": "j_x",
        "tenant": "t",
        "job_type": "ok",
        "scheduled_for": T0,
        "due_at": T0,
        "state": state,
        "fence": 1,
        "attempt": 1,
        "definition_version": 1,
        "created_at": T0,
        "updated_at": T0,
    }
    return Run.model_validate({**base, **fields})


ARGS: dict[str, dict[str, Any]] = {
    "claim": {"now": T0, "owner": "w", "actor": "worker:w", "lease_seconds": 60},
    "record_in_progress": {"now": T0, "until": T0},
    "effect_started": {"now": T0},
    "heartbeat": {"until": T0},
    "succeed": {"now": T0, "actor": "worker:w", "result": 1},
    "fail": {"now": T0, "actor": "worker:w", "error_class": "E", "message": "m", "retryable": True},
    "in_progress_elsewhere": {"now": T0, "actor": "worker:w", "until": T0 + timedelta(seconds=9)},
    "hold": {"now": T0, "actor": "worker:w"},
    "missed": {"now": T0, "actor": "worker:w"},
    "overlapped": {"now": T0, "actor": "worker:w", "overlapped_by": "j_x@2026-11-02T07:59:00Z"},
    "buffered": {"now": T0, "actor": "worker:w", "until": T0 + timedelta(seconds=5)},
    "give_back": {"now": T0, "actor": "worker:w", "until": T0 + timedelta(seconds=5)},
    "save_result": {"now": T0, "result": 1},
    "lease_expired": {"now": T0 + timedelta(hours=1), "actor": "reconciler"},
    "refused": {"refusal": lifecycle.Refusal("MaxAge", "too old"), "now": T0, "actor": "reconciler"},
    "requeue": {"now": T0, "actor": "reconciler"},
    "touch": {"now": T0, "actor": "reconciler", "reason": "r"},
    "note": {"now": T0, "actor": "reconciler", "reason": "r"},
    "queued": {"now": T0, "actor": "outbox"},
    "defer": {"now": T0, "actor": "worker:w", "until": T0, "reason": "tenant_limit"},
    "cancel": {"now": T0, "actor": "api:t", "reason": "r"},
    "skip": {"now": T0, "actor": "worker:w", "reason": "overlap"},
    "redrive": {"now": T0, "actor": "api:t", "reason": "r"},
    "discard": {"now": T0, "actor": "api:t", "reason": "r"},
}


def test_every_transition_in_lifecycle_is_a_row_of_the_table():
    marked = {
        name
        for name, fn in inspect.getmembers(lifecycle, inspect.isfunction)
        if getattr(fn, "rule", None) is not None
    }
    assert marked == set(TRANSITIONS) == set(ARGS)


@pytest.mark.parametrize("name", sorted(TRANSITIONS))
@pytest.mark.parametrize("state", list(RunState))
def test_a_row_starts_only_from_its_sources_and_ends_only_at_its_targets(name, state):
    rule = TRANSITIONS[name]
    fn = getattr(lifecycle, name)
    subject = run(state, lease_expires_at=T0 + timedelta(seconds=60) if state is RunState.LEASED else None)
    if state not in rule.sources:
        with pytest.raises(TransitionRefused):
            fn(subject, **ARGS[name])
        return
    try:
        result = fn(subject, **ARGS[name])
    except TransitionRefused:
        return  # its guard said no (a claim of a live lease, a lease that has not expired)
    assert result.state is state or result.state in rule.targets
    assert applied_rule(result) is rule
    assert can_move(state, result.state)


def test_the_state_machine_is_derived_from_the_rows():
    for source, targets in ALLOWED.items():
        for target in targets:
            assert any(source in r.sources and target in r.targets for r in TRANSITIONS.values())
    assert (
        ALLOWED[RunState.SUCCEEDED] == ALLOWED[RunState.SKIPPED] == ALLOWED[RunState.CANCELLED] == frozenset()
    )
    assert ALLOWED[RunState.DEAD] == frozenset({RunState.PENDING, RunState.CANCELLED})


def test_only_the_lease_holders_rows_are_fenced():
    holder = {name for name, rule in TRANSITIONS.items() if rule.writer is Writer.HOLDER}
    assert holder == {
        "record_in_progress",
        "effect_started",
        "heartbeat",
        "succeed",
        "fail",
        "in_progress_elsewhere",
        "hold",
        "missed",
        "overlapped",
        "buffered",
        "give_back",
    }


def test_the_overlap_policy_judges_only_runs_not_started():
    from jobsched.domain.models import Overlap, Policies
    from jobsched.domain.overlap import applies

    policies = Policies(overlap=Overlap.SKIP)
    fresh = run(
        RunState.QUEUED, fence=0, attempt=0, policies=policies, previous_run_key="j_x@2026-11-02T07:59:00Z"
    )
    assert applies(fresh)
    # A retry, or a lease being taken over, has started: skipping it now would drop a run
    # whose effect may have happened (and a LEASED run cannot be skipped at all).
    assert not applies(fresh.model_copy(update={"state": RunState.RETRY_WAIT, "fence": 1, "attempt": 1}))
    assert not applies(fresh.model_copy(update={"state": RunState.LEASED, "fence": 1, "attempt": 1}))
    assert not applies(fresh.model_copy(update={"previous_run_key": None}))
    # Held by its job's pause (claimed, the attempt given back): it has not started, so the
    # resume's release is judged like a fresh run; a redrive is the operator's choice.
    held = fresh.model_copy(update={"state": RunState.PENDING, "fence": 1, "attempt": 0})
    assert applies(held)
    assert not applies(held.model_copy(update={"redrives": 1}))
    # Judged again under its first claim (services.attempt), never under a later one.
    first_claim = fresh.model_copy(update={"state": RunState.LEASED, "fence": 1, "attempt": 1})
    assert applies(first_claim, claimed=True)
    assert not applies(first_claim.model_copy(update={"attempt": 2}), claimed=True)
    assert not applies(fresh, claimed=True)


def test_a_redrive_replaces_only_the_target_and_payload_it_is_given():
    from jobsched.domain.models import RunFix

    dead = run(RunState.DEAD, payload={"rows": 0})
    fix = RunFix.model_validate({"target": {"kind": "eventbridge", "eventBusName": "a-bus"}})
    fixed = lifecycle.redrive(dead, now=T0, actor="api:t", reason="r", fixes=fix.fields())
    assert fixed.state is RunState.PENDING and fixed.target == fix.target
    assert fixed.payload == {"rows": 0}  # not given: kept
    cleared = lifecycle.redrive(dead, now=T0, actor="api:t", reason="r", fixes={"payload": None})
    assert cleared.payload is None and cleared.target is None
    with pytest.raises(ValueError, match="only target and payload"):
        lifecycle.redrive(dead, now=T0, actor="api:t", reason="r", fixes={"job_type": "other"})


def test_no_code_outside_the_lifecycle_changes_a_runs_state_with_advance():
    # `advance` is the lifecycle's own tool: a caller outside it would move a run without a
    # row of the table (no sources checked, no rule stamped). The outbox's put-back once did.
    import ast
    from pathlib import Path

    import jobsched

    package = Path(jobsched.__file__).parent
    callers = set()
    for path in package.rglob("*.py"):
        if path == package / "domain" / "lifecycle.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("lifecycle")
            for alias in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = node.func
                name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
                owner = getattr(called.value, "id", "") if isinstance(called, ast.Attribute) else ""
                via_module = owner == "lifecycle"
                if name == "advance" and (via_module or "advance" in imported):
                    callers.add(str(path.relative_to(package)))
    assert callers == set()
