"""Runs across a tenant's jobs: what each run shows in a listing, which runs a filter keeps,
and how one newest-first page is merged from the tenant's lanes. Pure.

Every run item carries a lane (`<tenant>#<n>`, n from its job id, RUN_LANES of them) and an
order (`<scheduled_for>#<run key>`, unique and sorted by instant): the `runs_by_tenant`
index sorts each lane's runs newest first. A tenant's runs are spread over RUN_LANES lanes,
not kept in one index partition, so that one busy tenant's writes cannot throttle the
index (and through its back-pressure the table) for every tenant. A page reads each lane
below the cursor's position and keeps only what no unread item can outrank (`merge_lanes`)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, Field

from .instants import Instant, format_instant
from .models import Model, Priority
from .run_status import current_error
from .runs import Run, RunState, Trigger

RUN_LANES = 4  # changing it moves a run to another lane only when it is next written: never change it
TimeField = Literal["scheduled", "finished"]


def run_lane(tenant: str, job_id: str) -> str:
    """The lane a run of `job_id` is listed in: all of a job's runs share one."""
    return f"{tenant}#{zlib.crc32(job_id.encode()) % RUN_LANES}"


def lanes_of(tenant: str) -> list[str]:
    return [f"{tenant}#{n}" for n in range(RUN_LANES)]


def run_order(run_key: str, scheduled_for: datetime) -> str:
    """A run's place in its lane: by instant, then by key (unique)."""
    return f"{format_instant(scheduled_for)}#{run_key}"


class RunSummary(Model):
    """What a run shows in a listing, made from the run as read. Its texts are bounded by the
    run's byte budget (domain.budget): an error class 128 bytes, a reason 512."""

    run_key: str
    job_id: str
    job_type: str
    state: RunState
    trigger: Trigger
    priority: Priority
    scheduled_for: Instant
    due_at: Instant
    attempts: int = Field(description="attempts started in the current series")
    redrives: int
    started_at: Instant | None = None  # the current attempt series' first attempt
    finished_at: Instant | None = None
    error_class: str | None = None  # the run's own current error (domain.runs.current_error)
    reason: str | None = None
    skipped_count: int | None = None
    updated_at: Instant

    @classmethod
    def of(cls, run: Run) -> RunSummary:
        error_class, _ = current_error(run)
        return cls(
            run_key=run.run_key,
            job_id=run.job_id,
            job_type=run.job_type,
            state=run.state,
            trigger=run.trigger,
            priority=run.priority,
            scheduled_for=run.scheduled_for,
            due_at=run.due_at,
            attempts=run.attempt,
            redrives=run.redrives,
            started_at=run.first_attempt_at,
            finished_at=run.finished_at,
            error_class=error_class,
            reason=run.reason,
            skipped_count=run.skipped_count,
            updated_at=run.updated_at,
        )

    @property
    def order(self) -> str:
        return run_order(self.run_key, self.scheduled_for)


class RunFilter(Model):
    """Which runs a listing keeps: every given field must match (states: any of them).
    `since`/`until` bound `time_field` (scheduled instant, or end; a run not finished has no
    end and is left out by a finished range), since inclusive, until exclusive."""

    states: frozenset[RunState] | None = None
    job_id: str | None = None
    job_type: str | None = None
    trigger: Trigger | None = None
    error_class: str | None = None
    time_field: TimeField = "scheduled"
    # As given, to the microsecond (an Instant would round a bound to its whole second).
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None

    def matches(self, run: RunSummary) -> bool:
        if self.states is not None and run.state not in self.states:
            return False
        if self.job_id is not None and run.job_id != self.job_id:
            return False
        if self.job_type is not None and run.job_type != self.job_type:
            return False
        if self.trigger is not None and run.trigger is not self.trigger:
            return False
        if self.error_class is not None and run.error_class != self.error_class:
            return False
        at = run.scheduled_for if self.time_field == "scheduled" else run.finished_at
        if self.time_field == "finished" and at is None and (self.since or self.until):
            return False
        if at is not None and self.since is not None and at < self.since:
            return False
        return not (at is not None and self.until is not None and at >= self.until)

    def order_bounds(self) -> tuple[str | None, str | None]:
        """The range of run orders that can match: (lowest, highest) inclusive, None for
        open. Only a scheduled range bounds them: a run may end before its scheduled instant
        (one made ahead, then cancelled or skipped by a pause)."""
        # Whole seconds (a run's instant is one); "~" sorts above "#<run key>" after one.
        low = (
            format_instant(self.since.replace(microsecond=0))
            if self.since and self.time_field == "scheduled"
            else None
        )
        high = (
            format_instant(self.until.replace(microsecond=0)) + "~"
            if self.until and self.time_field == "scheduled"
            else None
        )
        return low, high

    def digest(self) -> str:
        """The filter as a string, for binding a cursor to it."""
        return self.model_dump_json(exclude_none=True)


@dataclass(frozen=True)
class LaneRead:
    """What a page read of one lane found: the matching runs (newest first), the order of
    the last item read (matching or not; None when nothing was read), and whether the lane
    has nothing below that."""

    matches: Sequence[RunSummary]
    lowest_read: str | None
    exhausted: bool


def merge_lanes(reads: Sequence[LaneRead], limit: int) -> tuple[list[RunSummary], str | None]:
    """One page from every lane's read: the newest `limit` matching runs that no unread item
    can outrank, and the position the next page starts below (None: every lane is read
    out). A lane not read out has unread items below its lowest read, so nothing below the
    highest such point (the frontier) may be answered yet; the next page starts at the last
    run answered when the page is full, else at the frontier. The position always moves
    down, so paging ends."""
    frontier = max(
        (r.lowest_read for r in reads if not r.exhausted and r.lowest_read is not None), default=None
    )
    merged = sorted((run for read in reads for run in read.matches), key=lambda run: run.order, reverse=True)
    page = [run for run in merged if frontier is None or run.order >= frontier][:limit]
    if len(page) == limit and (frontier is not None or len(merged) > limit):
        return page, page[-1].order
    return page, frontier
