"""Every change a run can go through, as one table: where it starts, where it may end, who
may write it, and what else must hold.

`domain.lifecycle` implements each row as a pure function marked `@transition("name")`: the
mark refuses a run in any other state before the function runs (TransitionRefused), and
stamps the row on the run it returns. The store derives its conditional write from that
row (store.runs.RunStore.commit): every write is conditioned on the state and revision it
was computed from, and a HOLDER row's also on the fence of the lease it was computed under,
so a worker that lost its lease can never write it. The state machine (`ALLOWED`) is derived
from the table, never written beside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import wraps
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from .runs import OPEN_STATES, RunState

if TYPE_CHECKING:
    from .runs import Run

P = ParamSpec("P")


class Writer(StrEnum):
    HOLDER = "holder"  # the lease holder, under its fence
    ANYONE = "anyone"  # whoever read the run: conditioned on its state and revision


@dataclass(frozen=True)
class Rule:
    name: str
    sources: frozenset[RunState]
    targets: frozenset[RunState]  # where it may go; empty: it keeps its state (a note, a touch)
    writer: Writer
    guard: str  # what else must hold, checked by the lifecycle function


_S = RunState
_OPEN = frozenset(OPEN_STATES)
_WAITING = frozenset({_S.PENDING, _S.QUEUED, _S.RETRY_WAIT})
_NONE: frozenset[RunState] = frozenset()


def _rule(
    name: str, sources: frozenset[RunState], targets: frozenset[RunState], writer: Writer, guard: str
) -> Rule:
    return Rule(name, sources, targets, writer, guard)


TRANSITIONS: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        # --- the attempt ---
        _rule(
            "claim",
            _WAITING | {_S.LEASED},
            frozenset({_S.LEASED}),
            Writer.ANYONE,
            "claimable: waiting and not chained or held, or LEASED with its lease expired",
        ),
        _rule(
            "record_in_progress",
            frozenset({_S.LEASED}),
            _NONE,
            Writer.HOLDER,
            "the effect verdict is START (no saved result, no other live record)",
        ),
        _rule(
            "effect_started", frozenset({_S.LEASED}), _NONE, Writer.HOLDER, "at-most-once, before the effect"
        ),
        _rule("heartbeat", frozenset({_S.LEASED}), _NONE, Writer.HOLDER, "the lease is the holder's"),
        _rule("succeed", frozenset({_S.LEASED}), frozenset({_S.SUCCEEDED}), Writer.HOLDER, "-"),
        _rule(
            "fail",
            frozenset({_S.LEASED}),
            frozenset({_S.RETRY_WAIT, _S.DEAD}),
            Writer.HOLDER,
            "RETRY_WAIT while attempt_refusal allows the next attempt at its backoff, else DEAD",
        ),
        _rule(
            "in_progress_elsewhere",
            frozenset({_S.LEASED}),
            frozenset({_S.RETRY_WAIT}),
            Writer.HOLDER,
            "the effect verdict is WAIT: due when the earlier record surely expired",
        ),
        _rule(
            "hold",
            frozenset({_S.LEASED}),
            frozenset({_S.PENDING}),
            Writer.HOLDER,
            "the job was found paused before the effect",
        ),
        _rule(
            "missed",
            frozenset({_S.LEASED}),
            frozenset({_S.SKIPPED}),
            Writer.HOLDER,
            "first attempt; the job's resume decided this occurrence of its pause does not run",
        ),
        _rule(
            "overlapped",
            frozenset({_S.LEASED}),
            frozenset({_S.SKIPPED}),
            Writer.HOLDER,
            "first attempt, judged again under its claim: an earlier run of its job is open",
        ),
        _rule(
            "buffered",
            frozenset({_S.LEASED}),
            frozenset({_S.PENDING}),
            Writer.HOLDER,
            "first attempt of a buffer-one run, judged again under its claim: an earlier run of its"
            " job is executing; published again at deferred_until",
        ),
        _rule(
            "give_back",
            frozenset({_S.LEASED}),
            frozenset({_S.PENDING}),
            Writer.HOLDER,
            "the check between the claim and the effect could not be made (the store refused a"
            " read or write): no effect started; published again at deferred_until",
        ),
        _rule(
            "save_result",
            _OPEN | {_S.DEAD},
            _NONE,
            Writer.ANYONE,
            "the in-progress record on the run is the saving attempt's (store.run_idempotency)",
        ),
        # --- repairs and refusals ---
        _rule(
            "lease_expired",
            frozenset({_S.LEASED}),
            frozenset({_S.RETRY_WAIT, _S.DEAD, _S.SKIPPED, _S.PENDING}),
            Writer.ANYONE,
            "the lease is past; DEAD when attempt_refusal allows no further attempt, SKIPPED"
            " instead when the job's resume decided this occurrence of its pause does not run;"
            " claimed inside its job's pause (it began nothing): held (PENDING) while the pause"
            " stands, else waiting again, the attempt given back either way",
        ),
        _rule(
            "refused",
            _WAITING,
            frozenset({_S.DEAD}),
            Writer.ANYONE,
            "attempt_refusal (attempts, age, at-most-once) or undeliverable",
        ),
        _rule(
            "requeue", frozenset({_S.QUEUED}), frozenset({_S.PENDING}), Writer.ANYONE, "its message is lost"
        ),
        _rule(
            "touch", _OPEN, _NONE, Writer.ANYONE, "recorded: republish, unchain, or a repair deadline moved"
        ),
        _rule("note", _OPEN, _NONE, Writer.ANYONE, "unrecorded bookkeeping"),
        # --- publishing and waiting ---
        _rule(
            "queued",
            frozenset({_S.PENDING, _S.RETRY_WAIT}),
            frozenset({_S.QUEUED}),
            Writer.ANYONE,
            "on its queue (or available to lease)",
        ),
        _rule(
            "defer",
            _WAITING,
            frozenset({_S.PENDING}),
            Writer.ANYONE,
            "a worker may not start it yet: published again at deferred_until",
        ),
        # --- the caller's and the policies' ---
        _rule(
            "cancel",
            _OPEN,
            frozenset({_S.CANCELLED}),
            Writer.ANYONE,
            "a LEASED run's holder then fails its fenced completion",
        ),
        _rule("skip", _WAITING, frozenset({_S.SKIPPED}), Writer.ANYONE, "overlap, or missed while paused"),
        _rule(
            "redrive",
            frozenset({_S.DEAD}),
            frozenset({_S.PENDING}),
            Writer.ANYONE,
            "an at-most-once run that may have acted only with acceptRepeatedEffect",
        ),
        _rule(
            "discard",
            frozenset({_S.DEAD}),
            frozenset({_S.CANCELLED}),
            Writer.ANYONE,
            "a dead letter dismissed by the caller: it leaves the dead letters, never to run",
        ),
    )
}


def _derived_state_machine() -> dict[RunState, frozenset[RunState]]:
    moves: dict[RunState, set[RunState]] = {state: set() for state in RunState}
    for rule in TRANSITIONS.values():
        for source in rule.sources:
            moves[source] |= rule.targets
    return {state: frozenset(targets) for state, targets in moves.items()}


# Every move between two states a transition may make, derived from the table (a run may
# always keep its state: a note, a touch, a claim of an expired lease).
ALLOWED: dict[RunState, frozenset[RunState]] = _derived_state_machine()


def can_move(source: RunState, target: RunState) -> bool:
    return target is source or target in ALLOWED[source]


class TransitionRefused(ValueError):
    """The run is not in a state this transition starts from (or its guard does not hold)."""


def transition(
    name: str,
) -> Callable[[Callable[Concatenate[Run, P], Run]], Callable[Concatenate[Run, P], Run]]:
    """Mark a lifecycle function as the table's row `name`: a run outside the row's sources
    is refused before the function runs, a result whose state is outside the row's targets
    is refused after it, and the result carries the row (`applied_rule`)."""
    rule = TRANSITIONS[name]

    def mark(function: Callable[Concatenate[Run, P], Run]) -> Callable[Concatenate[Run, P], Run]:
        @wraps(function)
        def checked(run: Run, *args: P.args, **kwargs: P.kwargs) -> Run:
            if run.state not in rule.sources:
                raise TransitionRefused(
                    f"run {run.run_key} is {run.state.value}: {name} cannot start from it"
                )
            result = function(run, *args, **kwargs)
            if result.state is not run.state and result.state not in rule.targets:
                raise TransitionRefused(f"run {run.run_key}: {name} cannot end in {result.state.value}")
            result._rule = rule
            return result

        checked.rule = rule  # type: ignore[attr-defined]
        return checked

    return mark


def applied_rule(run: Run) -> Rule | None:
    """The row of the transition that produced `run`, or None (read from the store, built)."""
    rule: Any = run._rule
    return rule if isinstance(rule, Rule) else None
