"""When the reconciler must look at an open run if nothing else has moved it on.

A check time no later than the deadline is stored on every open run (the sparse `open`
index), so the reconciler reads only runs that may be overdue, never the whole table."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .effects import excluded_until
from .lifecycle import series_started_at
from .runs import PAUSED_HOLD, Run, RunState

SQS_MAX_DELAY = timedelta(seconds=900)


@dataclass(frozen=True)
class RepairTimings:
    """How long each open state may go unmoved before the reconciler repairs the run.

    A run that should have started (it is due, or its lease expired) and has not is started
    again within grace + the wait for the shard's next pass (up to 30 s: a rule's tick each
    minute and its second tick half a minute later) + the pass over the shard (under 20 s
    for a burst of a few hundred repairs) + the publish path (a few seconds, more when the
    worker's invocation is throttled): with these graces under 90 s. A grace only has to
    cover the usual path's own latency (the stream and outbox, seconds; a heartbeat every
    third of the lease); a repair made too early is harmless (a second message is suppressed
    by the worker's conditional claim)."""

    publish_grace: timedelta = timedelta(seconds=10)  # PENDING/RETRY_WAIT not yet QUEUED
    queue_dwell: timedelta = timedelta(minutes=15)  # QUEUED but never claimed
    lease_grace: timedelta = timedelta(seconds=10)  # LEASED past its lease expiry
    blocked_check: timedelta = timedelta(minutes=5)  # buffered run waiting on another
    hold_check: timedelta = timedelta(seconds=20)  # just held for a paused job: resumed meanwhile?


def repair_deadline(run: Run, timings: RepairTimings, *, waits_for_lease: bool = False) -> datetime | None:
    """When the run is overdue if nothing moves it on; None when it is closed or nothing can.

    `waits_for_lease`: the run is for external workers (no target, a type no handler runs). A
    QUEUED one waits in the claimable index, not on a queue, so only the retry policy's max age
    can end its wait (it dies `Unclaimed`): that instant is its deadline, looked at once, and
    never, without a max age. (Looked at every `queue_dwell`, an every-second job nobody
    leases cost its shard 96 reads and writes a run over its day.)"""
    state = run.state
    if state in (RunState.PENDING, RunState.RETRY_WAIT):
        if run.blocked_by:
            if run.blocked_by == PAUSED_HOLD and run.history and run.history[-1].at == run.updated_at:
                # Just held (a recorded transition; the reconciler's deferrals are not): a
                # resume may have come just before the hold landed, so settle it soon.
                return run.updated_at + timings.hold_check
            return run.updated_at + timings.blocked_check
        if run.due_at - run.updated_at > SQS_MAX_DELAY:
            # Too far out for an SQS delay: the outbox leaves it; the reconciler re-touches it later.
            return run.due_at - SQS_MAX_DELAY
        # Published at once with an SQS delay, so a lost publish shows when the run is due and
        # nothing has claimed it. (Not earlier: that would make every run made ahead of its
        # time an index entry to move when it is queued.)
        return max(run.due_at, run.updated_at) + timings.publish_grace
    if state is RunState.QUEUED:
        if waits_for_lease:
            max_age = run.policies.retry.max_age_seconds
            return None if max_age is None else series_started_at(run) + timedelta(seconds=max_age)
        return max(run.due_at, run.updated_at) + timings.queue_dwell
    if state is RunState.LEASED:
        assert run.lease_expires_at is not None
        return run.lease_expires_at + timings.lease_grace
    return None


def check_at(run: Run, timings: RepairTimings, *, waits_for_lease: bool = False) -> datetime | None:
    """When the reconciler looks at the run: its key in the open index.

    Never later than the repair deadline, and the same through the usual PENDING → QUEUED →
    LEASED path (due time plus the publish grace), so those writes do not move the index
    entry. A run still open then (a long execution, a backlog) is looked at, found not yet
    overdue, and its entry moved once to the real deadline.

    A run whose job asked to be told when it is late is looked at no later than the instant it
    becomes late (`Run.late_watch`), so the reconciler notes it then (once: the note ends the
    watch)."""
    deadline = repair_deadline(run, timings, waits_for_lease=waits_for_lease)
    late = run.late_watch
    if deadline is None:
        return late
    settle = max(run.due_at, run.created_at) + timings.publish_grace
    # After a retry, redrive or re-claim there is no usual path left: the deadline itself.
    check = deadline if settle <= run.updated_at else min(settle, deadline)
    return check if late is None else min(check, late)


def stranded_since(run: Run) -> datetime | None:
    """When a run the reconciler found overdue should have moved on: when it became due and
    nothing published it (PENDING/RETRY_WAIT) or claimed it (QUEUED), or when its lease
    expired (LEASED) — or, if an attempt's in-progress record still excluded a start then,
    when that record ended. None for a run blocked behind another or held for a paused job
    (it waits on purpose), and for an open state nothing repairs.

    Guarantees: never after the run's repair deadline, except behind an in-progress record
    that outlasts the lease (the repair comes first; its lag counts 0). The repair's lag is
    measured from it (the RepairLag metric, and chaos's restart figure against its 90 s goal)."""
    state = run.state
    if state in (RunState.PENDING, RunState.RETRY_WAIT):
        return None if run.blocked_by else max(run.due_at, run.updated_at)
    if state is RunState.QUEUED:
        return max(run.due_at, run.updated_at)
    if state is RunState.LEASED:
        assert run.lease_expires_at is not None
        record_end = excluded_until(run)
        return run.lease_expires_at if record_end is None else max(run.lease_expires_at, record_end)
    return None
