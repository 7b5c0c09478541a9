"""When the reconciler must look at an open run if nothing else has moved it on.

The deadline is stored on every open run (the sparse `open` index), so the reconciler
reads only runs that are overdue, never the whole table."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .runs import Run, RunState

SQS_MAX_DELAY = timedelta(seconds=900)


@dataclass(frozen=True)
class RepairTimings:
    publish_grace: timedelta = timedelta(seconds=60)  # PENDING/RETRY_WAIT not yet QUEUED
    queue_dwell: timedelta = timedelta(minutes=15)  # QUEUED but never claimed
    lease_grace: timedelta = timedelta(seconds=30)  # LEASED past its lease expiry
    blocked_check: timedelta = timedelta(minutes=5)  # buffered run waiting on another


def repair_deadline(run: Run, timings: RepairTimings) -> datetime | None:
    state = run.state
    if state in (RunState.PENDING, RunState.RETRY_WAIT):
        if run.blocked_by:
            return run.updated_at + timings.blocked_check
        if run.due_at - run.updated_at > SQS_MAX_DELAY:
            # Too far out for an SQS delay: the outbox leaves it; the reconciler re-touches it later.
            return run.due_at - SQS_MAX_DELAY
        return run.updated_at + timings.publish_grace
    if state is RunState.QUEUED:
        return max(run.due_at, run.updated_at) + timings.queue_dwell
    if state is RunState.LEASED:
        assert run.lease_expires_at is not None
        return run.lease_expires_at + timings.lease_grace
    return None
