"""May an attempt start a run's effect, replay a result already saved, or must it wait?

The run item holds the effect's idempotency record (see store.run_idempotency):
- in progress: `effect_fence` names the attempt that may be executing the effect, until
  `effect_until`, that attempt's invocation deadline (after it, Lambda has ended that
  invocation and every thread in it);
- completed: `saved_result` (with `result_saved_at`) is what the effect returned when the
  completion itself could not record it.

`effect_verdict` is the one answer, pure: a function of the run as read, the asking
attempt's fence and its clock. Clocks differ: the deadline was written by one worker's clock
and is read by another's, each at most MAX_CLOCK_SKEW off true time, so an earlier record
excludes a new start until its deadline plus twice that."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .runs import Run

# The most any component's clock may be off true time (NTP keeps Lambda's to milliseconds;
# the chaos harness skews each component's by up to this much).
MAX_CLOCK_SKEW = timedelta(seconds=3)
# How long after an earlier attempt's recorded deadline its record still excludes a start.
RECORD_GRACE = 2 * MAX_CLOCK_SKEW


class EffectDecision(StrEnum):
    START = "start"  # no other attempt may be executing it and nothing is saved: act
    REPLAY = "replay"  # an earlier attempt's result is saved: complete with it, do not act
    WAIT = "wait"  # an earlier attempt may still be executing it: act no earlier than `until`


@dataclass(frozen=True)
class EffectVerdict:
    decision: EffectDecision
    until: datetime | None = None  # WAIT: the earliest instant a new attempt may start
    result: Any = None  # REPLAY: the saved result, as stored (0, false, "" and {} included)


def effect_verdict(run: Run, fence: int, now: datetime) -> EffectVerdict:
    """The verdict for the attempt holding `fence`, by its clock's `now`.

    REPLAY whenever a result is saved (one effect per run, across attempts and redrives);
    WAIT while another attempt's in-progress record has not surely expired (its deadline plus
    RECORD_GRACE, which is also `until`); START otherwise, including when the in-progress
    record is the asking attempt's own (a write retried after a lost answer)."""
    if run.result_saved_at is not None:
        return EffectVerdict(EffectDecision.REPLAY, result=run.saved_result)
    if run.effect_fence is not None and run.effect_fence != fence:
        until = excluded_until(run)
        if until is not None and now < until:
            return EffectVerdict(EffectDecision.WAIT, until=until)
    return EffectVerdict(EffectDecision.START)


def excluded_until(run: Run) -> datetime | None:
    """Until when the run's in-progress record excludes another attempt's start, or None."""
    if run.effect_fence is None or run.effect_until is None or run.result_saved_at is not None:
        return None
    return run.effect_until + RECORD_GRACE


def record_deadline(precise_now: datetime, remaining_seconds: float, lifetime_seconds: float) -> datetime:
    """The deadline an in-progress record promises: the invocation's end (`remaining_seconds`
    from `precise_now`, bounded by the records' `lifetime_seconds`), rounded UP to the whole
    second runs store, so the stored instant is never before the real end."""
    end = precise_now + timedelta(seconds=max(0.0, min(remaining_seconds, lifetime_seconds)))
    whole = end.replace(microsecond=0)
    return whole if whole == end else whole + timedelta(seconds=math.ceil(end.microsecond / 1e6))
