"""The listing across jobs, pure: paging merged lanes answers every kept run exactly once,
newest first, however the lanes are filled and however little each read gets; and what a
filter keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.run_listing import LaneRead, RunFilter, RunSummary, merge_lanes
from jobsched.domain.runs import RunState, Trigger

T0 = datetime(2026, 11, 2, 8, tzinfo=UTC)


def summary(job: int, second: int, state: RunState = RunState.SUCCEEDED, **fields) -> RunSummary:
    at = T0 + timedelta(seconds=second)
    return RunSummary(
        run_key=f"j_{job}@{at:%Y-%m-%dT%H:%M:%SZ}",
        job_id=f"j_{job}",
        job_type="t",
        state=state,
        trigger=Trigger.SCHEDULE,
        priority="default",
        scheduled_for=at,
        due_at=at,
        attempts=1,
        redrives=0,
        updated_at=at,
        **fields,
    )


def read(lane: list[RunSummary], before: str | None, run_filter: RunFilter, budget: int) -> LaneRead:
    """What the store's read of one lane returns: at most `budget` items below `before`
    (newest first), the kept ones, the last one read, and whether the lane is read out."""
    below = [
        s for s in sorted(lane, key=lambda s: s.order, reverse=True) if before is None or s.order < before
    ]
    taken = below[:budget]
    return LaneRead(
        [s for s in taken if run_filter.matches(s)],
        taken[-1].order if taken else None,
        exhausted=len(taken) == len(below),
    )


@settings(max_examples=300, deadline=None)
@given(
    lanes=st.lists(st.lists(st.integers(0, 400), max_size=30, unique=True), min_size=1, max_size=4),
    dead=st.sets(st.integers(0, 400)),
    limit=st.integers(1, 6),
    budget=st.integers(1, 8),
    only_dead=st.booleans(),
)
def test_paging_answers_every_kept_run_once_newest_first(lanes, dead, limit, budget, only_dead):
    runs = [
        [summary(n, s, RunState.DEAD if s in dead else RunState.SUCCEEDED) for s in seconds]
        for n, seconds in enumerate(lanes)
    ]
    run_filter = RunFilter(states=frozenset({RunState.DEAD})) if only_dead else RunFilter()
    answered: list[str] = []
    before: str | None = None
    for _ in range(10_000):
        page, before = merge_lanes([read(lane, before, run_filter, budget) for lane in runs], limit)
        assert len(page) <= limit
        answered += [s.order for s in page]
        if before is None:
            break
    else:
        raise AssertionError("paging did not end")
    expected = sorted((s.order for lane in runs for s in lane if run_filter.matches(s)), reverse=True)
    assert answered == expected


def test_a_finished_range_leaves_out_runs_not_finished_and_bounds_scheduled_from_above():
    open_run = summary(1, 0, RunState.RETRY_WAIT)
    done = summary(1, 10, finished_at=T0 + timedelta(seconds=30))
    since = RunFilter(time_field="finished", since=T0 + timedelta(seconds=20))
    assert not since.matches(open_run) and since.matches(done)
    assert RunFilter(time_field="finished").matches(open_run)
    assert since.order_bounds() == (None, None)
    until = RunFilter(time_field="finished", until=T0 + timedelta(seconds=30, microseconds=5))
    assert until.order_bounds() == (None, None)  # a run may end before its instant
    assert RunFilter(until=until.until).order_bounds()[1] == "2026-11-02T08:00:30Z~"
    assert until.matches(done)


def test_a_fractional_until_keeps_the_whole_second_before_it():
    run = summary(1, 30)
    until = RunFilter(until=T0 + timedelta(seconds=30, microseconds=500_000))
    low, high = until.order_bounds()
    assert until.matches(run) and high is not None and run.order <= high and low is None
    assert not RunFilter(until=T0 + timedelta(seconds=30)).matches(run)
