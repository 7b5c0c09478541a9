"""Instants: always timezone-aware UTC with whole-second precision, written as RFC 3339 `...Z`.

Every instant the scheduler stores or compares passes through here, so sort order of the
stored strings equals time order and run keys are byte-for-byte stable."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Protocol

from pydantic import AfterValidator, PlainSerializer

INSTANT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def to_utc(value: datetime) -> datetime:
    """Normalise an aware datetime to UTC, dropping sub-second precision."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must be an RFC 3339 instant with a UTC offset (e.g. 2026-11-02T09:00:00Z)")
    return value.astimezone(UTC).replace(microsecond=0)


def format_instant(value: datetime) -> str:
    return to_utc(value).strftime(INSTANT_FORMAT)


def parse_instant(text: str) -> datetime:
    """Parse RFC 3339 (`Z` or an offset). Raises ValueError with the rule on bad input."""
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise ValueError("must be an RFC 3339 instant such as 2026-11-02T09:00:00Z") from exc
    return to_utc(parsed)


def epoch_seconds(value: datetime) -> int:
    return int(to_utc(value).timestamp())


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(int(seconds), tz=UTC)


# Pydantic field type for every instant in the models.
Instant = Annotated[datetime, AfterValidator(to_utc), PlainSerializer(format_instant, return_type=str)]


class Clock(Protocol):
    """Time is always injected: services take a Clock, tests pass a controllable one."""

    def now(self) -> datetime:
        """Whole seconds: what is recorded (history, leases, schedules)."""
        ...

    def precise(self) -> datetime:
        """Sub-second: for SQS delays and for waiting out the last fraction before a due instant."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC).replace(microsecond=0)

    def precise(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to (tests, simulations, benchmarks)."""

    def __init__(self, start: datetime) -> None:
        self._now = to_utc(start)

    def now(self) -> datetime:
        return self._now

    def precise(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def set(self, value: datetime) -> None:
        self._now = to_utc(value)

    def advance(self, seconds: float) -> datetime:
        from datetime import timedelta

        self._now = self._now + timedelta(seconds=seconds)
        return self._now
