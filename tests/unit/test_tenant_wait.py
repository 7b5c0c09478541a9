"""A run whose tenant is at its concurrency limit looks again soon at first (a slot held by a
short run frees within a second), then every 5 s (a tenant held at its limit by long runs)."""

from __future__ import annotations

from jobsched.services.worker import DEFER_IN_PLACE, tenant_wait


def test_the_first_looks_come_soon_and_then_every_five_seconds():
    assert [tenant_wait(n) for n in range(1, 8)] == [1, 2, 4, 5, 5, 5, 5]


def test_a_missing_or_odd_receive_count_waits_the_shortest():
    assert tenant_wait(0) == 1 and tenant_wait(-3) == 1


def test_every_wait_leaves_the_message_in_its_queue():
    assert all(tenant_wait(n) <= DEFER_IN_PLACE for n in range(1, 100))
