"""A job's counters as the API shows them, its `succeeded` kept by folds of its runs
(domain.run_counts) instead of a write per run."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ..domain.errors import StorageUnavailable
from ..domain.instants import Clock
from ..domain.models import Job
from ..domain.run_counts import Folded, FoldMark, fold, fold_limit
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.ports import RunStorePort

MAX_PAGES = 10  # of 1 MB each: a fold reads at most about 10,000 runs of 1 KB
READ_AHEAD = timedelta(minutes=1)  # past the present: a run claimed early by a clock ahead
ONE_SECOND = timedelta(seconds=1)


class JobCounts:
    def __init__(self, definitions: DefinitionStore, runs: RunStorePort, clock: Clock) -> None:
        self._definitions = definitions
        self._runs = runs
        self._clock = clock

    def counters(self, job: Job) -> dict[str, int]:
        """The job's counters (store.definitions.STAT_NAMES), `succeeded` counting every
        succeeded run, its fold moved on first (`fold`). Raises StorageUnavailable when the
        counters or the runs cannot be read; a fold that cannot be written is logged, and the
        answer holds all the same."""
        counts, folded = self.fold(job)
        counts["succeeded"] += folded.added + folded.beyond
        return counts

    def fold(self, job: Job) -> tuple[dict[str, int], Folded]:
        """Fold the job's runs after its stored mark, up to the present (a run may be claimed
        a moment before its instant by a clock ahead: `READ_AHEAD` more), and store the new
        mark with what it added, if no other fold moved the mark since (domain.run_counts.
        fold); returns the counters as read (before this fold's addition) and the fold.

        With no mark stored, a fold starts at the job's `counts_folded_at` (a new job's
        creation: its runs from that second on) or, for a job written before folds (none),
        after the present second, counting nothing up to it: its completions had counted those
        runs. That first mark is always written.
        Raises StorageUnavailable when the counters or the runs cannot be read; a write that
        cannot be made is logged (the next fold moves the mark)."""
        now = self._clock.now()
        counts, mark = self._definitions.counters(job.job_id)
        first = job.counts_folded_at - ONE_SECOND if job.counts_folded_at is not None else now
        start = mark or FoldMark(to=first)
        after, read_all = self._runs.runs_after(job.job_id, start.to, now + READ_AHEAD, max_pages=MAX_PAGES)
        reread = self._runs.get_many(list(start.open)) if start.open else []
        folded = fold(start, after, reread, limit=fold_limit(job, now), read_all=read_all)
        if mark is None and not folded.moved:
            folded = replace(folded, mark=replace(folded.mark, rev=start.rev + 1), moved=True)
        if folded.moved:
            try:
                written = self._definitions.save_fold(job.job_id, mark, folded.mark, folded.added)
            except StorageUnavailable:
                written = False
            if not written:
                logger.info("job counters not folded this time", extra={"job_id": job.job_id})
        return counts, folded
