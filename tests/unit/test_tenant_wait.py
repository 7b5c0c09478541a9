"""A run whose tenant is at its concurrency limit looks again soon at first (a slot held by a
short run frees within a second), then backs off to every 30 s (a tenant held at its limit by
long runs costs a read, a query and a visibility change per look, not one every 5 s)."""

from __future__ import annotations

from jobsched.services.worker import DEFER_IN_PLACE, tenant_wait


def test_the_first_looks_come_soon_and_then_back_off():
    # Waiting from the due instant: looks at about 1, 3, 7, 15, 31, 61, 91 ... s.
    waited, looks = 0.0, []
    while waited < 100:
        waited += tenant_wait(waited)
        looks.append(waited)
    assert looks == [1, 3, 7, 15, 31, 61, 91, 121]


def test_a_run_held_for_long_looks_every_thirty_seconds_whatever_its_message():
    assert tenant_wait(60) == tenant_wait(3600) == 30


def test_a_run_not_yet_due_by_this_clock_waits_the_shortest():
    assert tenant_wait(-1.5) == 1


def test_every_wait_leaves_the_message_in_its_queue():
    assert all(tenant_wait(s / 10) <= DEFER_IN_PLACE for s in range(-100, 10_000))
