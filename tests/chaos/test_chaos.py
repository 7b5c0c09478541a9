"""The fault-injection harness in `make test`: a small fixed-seed run must come out clean,
and deliberately broken workers must make the checker fail (so a clean run means something)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from jobsched.domain.runs import RunState, Transition

from chaos import MUST_BE_ZERO, ChaosConfig, FaultRates, run_chaos
from chaos.checker import Ack, StreamAudit, TrackedJob, _holder_violations, _repeated_before_deadline
from chaos.ledger import Call

pytestmark = pytest.mark.integration

T0 = datetime(2026, 10, 25, 0, 50, tzinfo=UTC)
QUIET = FaultRates.none()


def test_small_fixed_seed_run_is_clean():
    lines: list[str] = []
    report = run_chaos(ChaosConfig(seed=8, runs=150), out=lines.append)
    figures = report.figures
    detail = "\n".join([figures.line(), *map(str, figures.violations[:20]), *report.unexpected])
    assert report.settled, detail
    assert not report.unexpected, detail
    for name in MUST_BE_ZERO:
        assert getattr(figures, name) == 0, f"{name}\n{detail}"
    assert figures.due >= 100 and figures.terminal >= 100
    # The faults really happened, and the system really had to defend against them.
    for fault in ("crash_after_effect", "crash_before_effect", "duplicate_delivery", "lost_stream_batch"):
        assert report.faults[fault] > 0, report.faults
    assert figures.duplicates_suppressed > 0 and figures.repairs > 0


def test_checker_catches_effects_outside_idempotency():
    # A worker frozen between its effect and its completion loses its lease: the attempt that
    # claims next must wait for the frozen one's in-progress record, not act again.
    faults = replace(QUIET, freeze_worker=0.5, max_frozen=10, duplicate_delivery=0.2)
    report = run_chaos(
        ChaosConfig(seed=3, runs=40, window_seconds=180, faults=faults, broken="no-idempotency"),
        out=lambda line: None,
    )
    assert report.figures.duplicate_effects > 0, report.figures.line()
    assert report.failed
    assert any(v.figure == "duplicate_effects" for v in report.figures.violations)


def test_a_success_that_dies_before_its_completion_is_repeated_only_after_its_deadline():
    """The window no design closes: each such death may cost a second effect, never before the
    dead invocation's deadline (its in-progress record); without the record it comes at once."""
    faults = replace(QUIET, crash_before_completion=0.3, duplicate_delivery=0.2)
    config = ChaosConfig(seed=4, runs=40, window_seconds=180, faults=faults)
    report = run_chaos(config, out=lambda line: None)
    figures = report.figures
    assert report.faults["crash_before_completion"] > 0, report.faults
    assert figures.duplicate_effects == 0, figures.line()
    assert figures.effects_repeated_after_deadline > 0, figures.line()
    broken = run_chaos(replace(config, broken="no-idempotency"), out=lambda line: None)
    assert broken.figures.duplicate_effects > 0, broken.figures.line()


def test_checker_catches_completions_that_ignore_the_fence():
    faults = replace(QUIET, freeze_worker=0.5, max_frozen=10)
    report = run_chaos(
        ChaosConfig(seed=5, runs=40, window_seconds=180, faults=faults, broken="ignore-fence"),
        out=lambda line: None,
    )
    assert report.figures.stale_fence_writes > 0, report.figures.line()
    assert report.failed


# --- the checker's rules on hand-made histories (fast) ---


def _t(source, target, fence, actor, seconds=0):
    return Transition(
        at=T0 + timedelta(seconds=seconds), actor=actor, source=source, target=target, fence=fence, attempt=1
    )


def test_completion_under_a_superseded_fence_is_flagged():
    history = [
        _t(None, RunState.PENDING, 0, "sweeper"),
        _t(RunState.PENDING, RunState.LEASED, 1, "worker:a"),
        _t(RunState.LEASED, RunState.LEASED, 2, "worker:b"),
        _t(RunState.LEASED, RunState.SUCCEEDED, 1, "worker:a"),
    ]
    assert _holder_violations(history, None, 0)
    clean = [*history[:3], _t(RunState.LEASED, RunState.SUCCEEDED, 2, "worker:b")]
    assert _holder_violations(clean, None, 0) == []
    # Another worker may end an expired lease under the current fence, not succeed it.
    reaped = [*history[:3], _t(RunState.LEASED, RunState.DEAD, 2, "worker:c")]
    assert _holder_violations(reaped, None, 0) == []
    taken = [*history[:3], _t(RunState.LEASED, RunState.SUCCEEDED, 2, "worker:c")]
    assert _holder_violations(taken, None, 0)


def test_pause_window_decides_what_counts():
    job = TrackedJob("j_x", "acme", [Ack("pause", 10, T0), Ack("resume", 20, T0 + timedelta(seconds=60))])
    assert job.active_at(T0 - timedelta(seconds=1))
    assert not job.active_at(T0 + timedelta(seconds=30))
    assert job.active_at(T0 + timedelta(seconds=61))
    assert job.stopped_at_seq(15) and not job.stopped_at_seq(5) and not job.stopped_at_seq(25)


def test_stream_audit_flags_a_history_rewrite():
    from jobsched.domain.lifecycle import advance
    from jobsched.domain.models import Job, JobSpec, Schedule, ScheduleKind
    from jobsched.domain.runs import make_run
    from jobsched.store.runs import RunStore

    spec = JobSpec(name="n", type="t", schedule=Schedule(kind=ScheduleKind.ONCE, at=T0))
    job = Job(job_id="j_x", tenant="acme", spec=spec, created_at=T0, updated_at=T0)
    store = RunStore(None, "runs", 1)
    pending = make_run(job, T0, now=T0, actor="sweeper")
    lease = T0 + timedelta(seconds=60)
    a = advance(
        pending, RunState.LEASED, now=T0, actor="worker:a", fence=1, attempt=1, lease_expires_at=lease
    ).model_copy(update={"rev": 1})
    b = advance(
        a, RunState.LEASED, now=T0, actor="worker:b", fence=2, attempt=2, lease_expires_at=lease
    ).model_copy(update={"rev": 2})
    # The stale holder overwrites b with its own copy: fence goes back, b's claim vanishes.
    stale = advance(a, RunState.SUCCEEDED, now=T0, actor="worker:a").model_copy(update={"rev": 3})
    audit = StreamAudit()
    for old, new in ((None, pending), (pending, a), (a, b)):
        audit.observe(_record(store, old, new))
    assert audit.violations == []
    audit.observe(_record(store, b, stale))
    assert {v.figure for v in audit.violations} == {"stale_fence_writes"}


def _record(store, old, new):
    dynamodb = {"NewImage": store.to_item(new)}
    if old is not None:
        dynamodb["OldImage"] = store.to_item(old)
    return {"eventName": "MODIFY" if old else "INSERT", "dynamodb": dynamodb}


def _call(seq, seconds, acted=True):
    return Call("j@t", "chaos.ok", 1, seq, T0 + timedelta(seconds=seconds), acted)


def test_a_repeated_effect_is_excused_only_after_a_dead_invocations_deadline():
    deadline = T0 + timedelta(seconds=900)
    first, failed = _call(1, 10), _call(2, 20, acted=False)
    assert _repeated_before_deadline([first, failed], []) is None
    assert _repeated_before_deadline([first, _call(3, 30)], []) is not None
    assert _repeated_before_deadline([first, _call(3, 500)], [deadline]) is not None
    assert _repeated_before_deadline([first, _call(3, 900)], [deadline]) is None
    # One death excuses one repeat.
    assert _repeated_before_deadline([first, _call(3, 900), _call(4, 1000)], [deadline]) is not None
