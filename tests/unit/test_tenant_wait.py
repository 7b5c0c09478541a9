"""A run whose tenant is at its concurrency limit looks again soon at first (a slot held by a
short run frees within a second), then backs off to every 30 s at most (a tenant held at its
limit by long runs costs a read, a query and a visibility change per look, not one every 5 s),
and the runs of a burst deferred together do not come back as one herd."""

from __future__ import annotations

import heapq
import itertools
import math

from hypothesis import given
from hypothesis import strategies as st
from jobsched.services.worker import DEFER_IN_PLACE, TENANT_WAIT_LONGEST, tenant_wait

# (waited since due, the bound of its wait): 1, 2, 4, 8, 16 s, then 30 s.
SCHEDULE = [
    (-5.0, 1),
    (0.0, 1),
    (0.99, 1),
    (1.0, 2),
    (2.9, 2),
    (3.0, 4),
    (6.9, 4),
    (7.0, 8),
    (14.9, 8),
    (15.0, 16),
    (30.9, 16),
    (31.0, 30),
    (3600.0, 30),
    (1e12, 30),
]


def _bound(waited: float) -> int:
    return next(bound for at, bound in reversed(SCHEDULE) if waited >= at) if waited >= -5 else 1


def test_the_schedule_of_bounds_is_pinned() -> None:
    for waited, bound in SCHEDULE:
        waits = {tenant_wait(waited, f"job-{i}#t", 3) for i in range(400)}
        assert min(waits) == math.ceil(bound / 2) and max(waits) == bound, (waited, bound, waits)


@given(
    waited=st.floats(min_value=-1e9, max_value=1e12, allow_nan=False),
    run_key=st.text(max_size=300),
    receive_count=st.integers(min_value=0, max_value=10**6),
)
def test_every_wait_is_in_the_upper_half_of_its_bound(
    waited: float, run_key: str, receive_count: int
) -> None:
    bound = _bound(waited)
    assert math.ceil(bound / 2) <= tenant_wait(waited, run_key, receive_count) <= bound


def test_the_first_looks_come_soon_and_then_back_off() -> None:
    # Waiting from the due instant: the bounds are 1, 2, 4, 8, 16, then 30 s.
    for key in ("job-a#2026-12-05T00:00:00Z", "job-b#2026-12-05T00:00:01Z"):
        waited = 0.0
        looks: list[float] = []
        while waited < 100:
            waited += tenant_wait(waited, key, len(looks) + 1)
            looks.append(waited)
        assert looks[0] == 1
        assert all(later > earlier for earlier, later in itertools.pairwise(looks))
        assert max(b - a for a, b in itertools.pairwise(looks)) <= TENANT_WAIT_LONGEST
        assert len(looks) <= 16  # backing off: a look every second would be 100


def test_a_run_not_yet_due_by_this_clock_waits_the_shortest() -> None:
    assert tenant_wait(-1.5, "job#1", 1) == 1


def test_every_wait_leaves_the_message_in_its_queue() -> None:
    assert all(tenant_wait(s / 10, f"job#{s}", s % 7 + 1) <= DEFER_IN_PLACE for s in range(-100, 10_000))


def test_runs_deferred_together_look_again_at_different_seconds() -> None:
    # 1,000 runs of one tenant deferred in the same second, long past their due instant.
    waits = [tenant_wait(120, f"job-{i}#2026-12-05T00:00:00Z", 5) for i in range(1_000)]
    assert len(set(waits)) == TENANT_WAIT_LONGEST - math.ceil(TENANT_WAIT_LONGEST / 2) + 1
    assert max(waits.count(w) for w in set(waits)) < 150  # about 1,000 / 16 a second


def _burst_p99(runs: int, slots: int, effect_seconds: float) -> float:
    """Seconds from due to start for the 99th percentile run of `runs` due at once with
    `slots` free, each run holding its slot `effect_seconds`, a look taking 5 ms of one worker,
    and a run that finds no free slot waiting `tenant_wait` before its next look."""
    looks = [(0.0, i, 1) for i in range(runs)]
    heapq.heapify(looks)
    held: list[float] = []
    started: list[float] = []
    worker_free = 0.0
    while looks:
        at, i, receive = heapq.heappop(looks)
        at = worker_free = max(at, worker_free) + 0.005
        while held and held[0] <= at:
            heapq.heappop(held)
        if len(held) < slots:
            heapq.heappush(held, at + effect_seconds)
            started.append(at)
        else:
            heapq.heappush(looks, (at + tenant_wait(at, f"job-{i}#t", receive), i, receive + 1))
    return sorted(started)[math.ceil(0.99 * runs) - 1]


def test_a_burst_of_one_tenant_keeps_its_slots_busy() -> None:
    # 1,000 one-second runs, 50 slots: 20 s if the slots never stand idle. Waits drawn all
    # alike bring the waiting runs back as one herd every 30 s: about 450 s.
    assert _burst_p99(1_000, 50, 1.0) < 60
