"""A job's count of succeeded runs, kept without a write per run.

A run's success is counted in one of two ways, never both (`Run.counted_by_fold`):

- **by a fold**, for a run a recurring schedule made ahead of its instant that will be
  folded within `FOLD_EVERY` (its job fires again then, late enough: `made_counted_at_end`),
  never redriven: the usual path, whose completion writes nothing more;
- **by its completion**, one `ADD` to the job's counters after the run ends, for every other
  run: manual, backfill, made at or after its own instant, a one-time job's or one of a job
  with `maxRuns`, the last before a gap of more than `FOLD_EVERY` (no sweep of its job meets
  it in time), and a redriven run (a fold may have passed it while it was DEAD).

A fold reads the job's runs in key order after its mark (`FoldMark.to`, an instant: every run
scheduled at or before it was folded) up to the present, strongly consistently, counts the
succeeded ones the fold owns, and moves the mark in one conditional write of the counters
item. Runs it passes that are still open are remembered by key (`FoldMark.open`, at most
`MAX_OPEN`) and read again by the next fold. The job's count is then the stored count plus
what the runs after the mark (and the remembered ones) hold now: exact at every read that
reads them all (`Folded.complete`), whenever the last fold was.

Why the mark stays `FOLD_LAG` behind the present for a job still making runs: a run the fold
owns is made ahead of its instant (its `created_at` before its `scheduled_for`) by the
sweeper or the API and written within `MAX_WRITE_DELAY` of being made (the longest timeout
of those functions, checked against the stack's in the tests), so a run not yet written when
a fold reads is scheduled after `read time - MAX_WRITE_DELAY`; with clocks apart by up to
`MAX_CLOCK_SKEW` either way, a mark at `now - FOLD_LAG` is never passed by a run the fold has
not seen. A job that stopped making runs (no longer ACTIVE for `FOLD_LAG`) is folded to its
end.

When folds run (`fold_due`): the sweeper folds a job it advances when its last fold is
`FOLD_EVERY` old, every `FOLD_EVERY_RUNS` runs, and when the job's next occurrence is
`FOLD_EVERY` away or there is none; a read of the job's counters folds it. A run the fold owns
has a later occurrence of its job between `FOLD_LAG + MAX_AHEAD` and `FOLD_EVERY` after it, so
while the job stays ACTIVE a sweep that may fold it comes every `FOLD_EVERY` at most, and one
that must comes within `3 * FOLD_EVERY`: well inside the shortest retention (1 day).

What is lost: a success the fold owns that no fold met before the table's TTL removed the run
(`retentionDays`): only a job paused, cancelled or rescheduled to fire rarely, and not read for
longer than its runs' retention, can lose the successes of its runs since its last fold."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .effects import MAX_CLOCK_SKEW
from .models import Job, JobState, ScheduleKind
from .runs import TERMINAL_STATES, Run, RunState, Trigger
from .schedule import index_schedule, next_fire

# The longest a function that makes runs (the API, 28 s; the sweeper, 50 s) lives.
MAX_WRITE_DELAY = timedelta(seconds=60)
FOLD_LAG = timedelta(minutes=2)  # >= MAX_WRITE_DELAY + 2 * MAX_CLOCK_SKEW, rounded up
MAX_AHEAD = timedelta(hours=1)  # the most a run is made ahead (horizonSeconds, sweepAheadSeconds)
MAX_OPEN = 20  # open runs a mark remembers; past them the mark waits
FOLD_EVERY = timedelta(hours=6)
FOLD_EVERY_RUNS = 1000
assert FOLD_LAG >= MAX_WRITE_DELAY + 2 * MAX_CLOCK_SKEW


def made_counted_at_end(job: Job, scheduled_for: datetime, now: datetime, trigger: Trigger) -> bool:
    """Whether a run of `job` at `scheduled_for`, made at `now` with `trigger`, has its success
    counted by its completion rather than by a fold: a manual or backfill run; a run made at
    or after its instant (a fold may already have passed it); a one-time job's run, or one of
    a job with `maxRuns` (its last run has no sweep after it); a run with no later occurrence
    of its job between `FOLD_LAG + MAX_AHEAD` and `FOLD_EVERY` after it (no sweep is sure to
    fold it in time). A sweep looks at the job at each instant its schedule without calendars
    fires at (`index_schedule`), whatever the calendars it references exclude."""
    schedule = index_schedule(job.spec.schedule)
    if trigger is not Trigger.SCHEDULE or scheduled_for <= now:
        return True
    if schedule.kind is ScheduleKind.ONCE or schedule.max_runs is not None:
        return True
    if schedule.kind is ScheduleKind.RATE and schedule.anchor is None:
        schedule = schedule.model_copy(update={"anchor": scheduled_for})  # fires from this run on
    later = next_fire(schedule, scheduled_for + FOLD_LAG + MAX_AHEAD - timedelta(seconds=1))
    return later is None or later > scheduled_for + FOLD_EVERY


@dataclass(frozen=True)
class FoldMark:
    """Where a job's fold stands: every run scheduled at or before `to` was folded (None:
    none yet), except the open ones named in `open` (run keys), which the next fold reads
    again; `counted`: the successes folds stored, of the job's `succeeded` (the rest are its
    completions'). `rev` counts the folds written: a fold is written only over the mark it
    read."""

    to: datetime | None = None
    open: tuple[str, ...] = ()
    rev: int = 0
    counted: int = 0


@dataclass(frozen=True)
class Folded:
    """A fold's outcome: the `mark` to store, the successes `added` by moving to it (stored
    with the mark), and the successes `beyond` it (counted in the answer, not stored)."""

    mark: FoldMark
    added: int
    beyond: int = 0
    moved: bool = False  # whether `mark` differs from the mark read (a write is due)
    complete: bool = True  # whether every run after the mark was read (else `beyond` is a floor)

    @property
    def counted(self) -> int:
        """Every success the folds own, as this fold read them: those stored before it, those
        it adds and those beyond its mark."""
        return self.mark.counted + self.beyond if self.moved else self.mark.counted + self.added + self.beyond


def fold_limit(job: Job, now: datetime) -> datetime | None:
    """How far a fold of `job` at `now` may move its mark: `now - FOLD_LAG` while the job may
    still make runs it owns (ACTIVE, or left ACTIVE less than FOLD_LAG ago: `updated_at`),
    else None (to the end)."""
    if job.state is JobState.ACTIVE or job.updated_at > now - FOLD_LAG:
        return now - FOLD_LAG
    return None


def _succeeded(run: Run) -> int:
    return 1 if run.state is RunState.SUCCEEDED and run.counted_by_fold else 0


def fold(
    mark: FoldMark,
    after: list[Run],
    reread: list[Run],
    *,
    limit: datetime | None,
    read_all: bool,
) -> Folded:
    """Fold the runs read after `mark.to` (`after`, in key order: by instant, a scheduled run
    before the manual ones of its second) and the remembered open runs as read again
    (`reread`; one not found is gone: TTL) into a new mark, up to `limit` (None: all).

    Runs are taken a whole second at a time, so a mark never splits the runs of one instant.
    The mark stops before a second whose open runs would make it remember more than MAX_OPEN,
    and before the last second read when `read_all` is False (that second may go on in the
    next page). A run the fold does not own (`counted_by_fold` False) is neither counted nor
    remembered: its completion counts it."""
    added = 0
    still_open: list[str] = []
    for run in reread:
        if run.state in TERMINAL_STATES:
            added += _succeeded(run)
        else:
            still_open.append(run.run_key)
    groups: list[list[Run]] = []
    for run in after:
        if groups and groups[-1][0].scheduled_for == run.scheduled_for:
            groups[-1].append(run)
        else:
            groups.append([run])
    last_read = len(groups) if read_all else len(groups) - 1
    to = mark.to
    beyond = 0
    stopped: str | None = None  # why the mark stopped: "partial", "limit" or "open"
    for index, group in enumerate(groups):
        at = group[0].scheduled_for
        opened = [r.run_key for r in group if r.state not in TERMINAL_STATES and r.counted_by_fold]
        if stopped is None and index >= last_read:
            stopped = "partial"
        if stopped is None and limit is not None and at > limit:
            stopped = "limit"
        if stopped is None and len(still_open) + len(opened) > MAX_OPEN:
            stopped = "open"
        if stopped is None:
            added += sum(_succeeded(r) for r in group)
            still_open.extend(opened)
            to = at
        else:
            beyond += sum(_succeeded(r) for r in group)
    reached_limit = stopped == "limit" or (stopped is None and read_all)
    if reached_limit and limit is not None and (to is None or to < limit):
        to = limit  # every run up to the limit was read: the mark moves past the empty stretch
    new = FoldMark(to=to, open=tuple(still_open), rev=mark.rev + 1, counted=mark.counted + added)
    moved = (new.to, new.open) != (mark.to, mark.open)
    return Folded(mark=new if moved else mark, added=added, beyond=beyond, moved=moved, complete=read_all)


def fold_due(job: Job, advanced: Job, now: datetime) -> bool:
    """Whether the sweeper, advancing `job` to `advanced` at `now`, should fold its runs: its
    last fold by a sweeper is FOLD_EVERY old (or it never had one: a job from before folds),
    the runs it made crossed a multiple of FOLD_EVERY_RUNS, or its next occurrence is
    FOLD_EVERY away or there is none (no sweep meets it sooner)."""
    if job.counts_folded_at is None or now - job.counts_folded_at >= FOLD_EVERY:
        return True
    if advanced.next_run_at is None or advanced.next_run_at - now >= FOLD_EVERY:
        return True
    return job.runs_created // FOLD_EVERY_RUNS != advanced.runs_created // FOLD_EVERY_RUNS
