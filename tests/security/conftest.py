"""Fixtures shared with the webhook suite: moto's secret stores, a receiver on loopback and
the test's wall-clock instant (receivers check signatures against their own clock)."""

from tests.integration.test_webhook_security import now, receiver, stores  # noqa: F401
