"""The overlap policy: may an occurrence start while an earlier run of its job is still open?

The earlier run that matters is the job's latest earlier scheduled run that was not SKIPPED:
a skipped run never executed, so the one before it may still be executing. A run skipped
behind a live run names that run in `overlapped_by`, so one read finds it however many
occurrences were skipped behind it; a run skipped for any other reason (a pause's
occurrences, one record each) names only its previous, so the walk passes those with one
query for the latest run before it that was not skipped. `earlier_run_key` says which key
to read next while walking back; `overlap_verdict` judges the run found. Both are pure."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from .effects import excluded_until
from .models import Overlap
from .runs import TERMINAL_STATES, Run, RunState

# Reads the walk back to the earlier run that matters may take (a skip behind a live run is
# one read, a stretch of other skips one query): past this the walk gives up and the
# occurrence runs, logged and counted (OverlapWalkLimit).
OVERLAP_WALK_LIMIT = 20
RUNNING_STATES = frozenset({RunState.LEASED, RunState.RETRY_WAIT})


class OverlapVerdict(StrEnum):
    RUN = "run"  # nothing earlier is open
    SKIP = "skip"  # an earlier run is open: this occurrence is skipped
    BUFFER = "buffer"  # buffer-one: this is the one occurrence waiting behind a running run


def applies(run: Run, *, claimed: bool = False) -> bool:
    """Whether the overlap policy judges `run` at all: a scheduled run of a job whose policy
    is not `allow` that has not started: no attempt counted (an attempt held by its job's
    pause, or given back, did not start; a retry, a reclaimed lease, an attempt whose worker
    died, is past the point where the run could be skipped) and never redriven (an
    operator's explicit choice). Manual runs and backfills are outside it (backfills are
    chained). `claimed`: `run` is as its claim wrote it, the first attempt counted (the
    judgement again under the claim, services.attempt)."""
    return (
        run.policies.overlap is not Overlap.ALLOW
        and run.previous_run_key is not None
        and run.attempt == (1 if claimed else 0)
        and run.redrives == 0
    )


def earlier_run_key(run: Run) -> str | None:
    """Where the walk goes from `run`: the live run it was skipped behind, else its previous."""
    return run.overlapped_by or run.previous_run_key


def effect_may_run(run: Run, now: datetime) -> bool:
    """Whether an attempt of `run` may still be executing its effect at `now` although the
    run has ended: it failed on a timeout (or was cancelled or died) while the attempt's
    in-progress record still promises the effect may run until its deadline."""
    until = excluded_until(run)
    return until is not None and until > now


def overlap_verdict(policy: Overlap, earlier: Run | None, now: datetime) -> OverlapVerdict:
    """The verdict at `now` on an occurrence whose earlier run that matters is `earlier`
    (None: none).

    `skip`: any open earlier run skips it. `buffer-one`: an earlier run that is executing
    (LEASED, or RETRY_WAIT between its attempts) buffers it; an earlier run still waiting to
    start is itself the buffered one, so this occurrence is skipped. An earlier run that has
    ended counts as executing while its effect may still run (`effect_may_run`)."""
    if policy is Overlap.ALLOW or earlier is None:
        return OverlapVerdict.RUN
    ended = earlier.state in TERMINAL_STATES
    if ended and not effect_may_run(earlier, now):
        return OverlapVerdict.RUN
    if policy is Overlap.BUFFER_ONE and (ended or earlier.state in RUNNING_STATES):
        return OverlapVerdict.BUFFER
    return OverlapVerdict.SKIP
