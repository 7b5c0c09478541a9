"""What a run's status shows: why an open run is not running (one sentence for the API's
`waitingFor`, the CLI and the console) and which error is the run's own. Derived from the
stored run and what is known around it; pure: no reads here.

What a worker decides without writing (a tenant-limit or buffered deferral that leaves the
message in its queue) is not on the run; the caller reads what stands for it now (the
tenant's live leases, the earlier run that buffers this one) and passes it in, so the
sentence says what holds at the time of the read, not what a worker last saw."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .instants import format_instant
from .models import JobState
from .runs import PAUSED_HOLD, Run, RunState

# The reason `lifecycle.defer` writes is "deferred: <why>", <why> as the worker names it.
_DEFERRED = "deferred: "


@dataclass(frozen=True)
class Surroundings:
    """What the run's own fields do not say, as read by the caller.

    external: no registered handler runs the run's type and it has no target (external
    workers lease it); job_state: its job's state (None: not read, or the job is gone);
    tenant_leases / tenant_limit: the tenant's live leases and TENANT_CONCURRENCY (0: no
    limit; None: not read); buffered_behind: the running earlier run this one waits for
    under `overlap: buffer-one` (None: none, or not read)."""

    external: bool = False
    job_state: JobState | None = None
    tenant_leases: int | None = None
    tenant_limit: int = 0
    buffered_behind: str | None = None


def waiting_for(run: Run, now: datetime, around: Surroundings = Surroundings()) -> str | None:
    """Why `run` is not running at `now`; None when it is running (a live lease) or finished.

    The first that applies, in this order: job paused (held), buffered behind <run key>
    (chained or overlap), its lease expired, waiting for its retry at <instant>, not due yet,
    job paused (not yet held), deferred by a worker (tenant limit, buffered, not due) until
    <instant>, waiting for an external worker, tenant at its concurrency limit, and otherwise
    waiting for a worker (QUEUED) or to be published (PENDING)."""
    if not run.is_open or run.lease_live(now):
        return None
    if run.blocked_by == PAUSED_HOLD:
        return "job paused (held until it is resumed)"
    if run.blocked_by:
        return f"buffered behind {run.blocked_by}"
    if around.buffered_behind:
        return f"buffered behind {around.buffered_behind}"
    if run.state is RunState.LEASED:
        expired = format_instant(run.lease_expires_at) if run.lease_expires_at else "?"
        return f"its lease expired at {expired}; waiting to be claimed again or repaired"
    if run.state is RunState.RETRY_WAIT and run.due_at > now:
        return f"waiting for its retry at {format_instant(run.due_at)}"
    if run.due_at > now:
        return f"not due yet (due at {format_instant(run.due_at)})"
    if around.job_state is JobState.PAUSED:
        return "job paused"
    deferred = _deferral(run, now)
    if deferred is not None:
        return deferred
    if around.external:
        return f"waiting for an external worker (no handler for type {run.job_type}, no target)"
    leases, limit = around.tenant_leases, around.tenant_limit
    if limit > 0 and leases is not None and leases >= limit:
        return f"tenant at its concurrency limit ({leases} of {limit} leased)"
    if run.state is RunState.PENDING:
        return "waiting to be published to its queue"
    return "waiting for a worker"


def _deferral(run: Run, now: datetime) -> str | None:
    """What a worker's deferral through the outbox (`deferred_until` ahead; the run is PENDING,
    or QUEUED once the outbox published it with the delay) says: its latest transition that
    names a deferral gives the worker's reason."""
    if run.deferred_until is None or run.deferred_until <= now:
        return None
    until = format_instant(run.deferred_until)
    why = next(
        (
            t.reason.removeprefix(_DEFERRED)
            for t in reversed(run.history)
            if t.reason and t.reason.startswith(_DEFERRED)
        ),
        "",
    )
    if why == "tenant_limit":
        return f"tenant at its concurrency limit (looks again at {until})"
    if why == "buffered":
        behind = run.previous_run_key or "its earlier run"
        return f"buffered behind {behind} (looks again at {until})"
    return f"deferred by a worker until {until}"


def current_error(run: Run) -> tuple[str | None, str | None]:
    """(error class, message) the run shows as its error: its latest failure, unless it
    SUCCEEDED since (a success after retries or a redrive has no error of its own; the
    failures stay in its history and attempts). (None, None) when there is none."""
    if run.state is RunState.SUCCEEDED:
        return None, None
    return run.last_error_class, run.last_error_message
