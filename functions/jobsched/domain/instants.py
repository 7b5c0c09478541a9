"""Instants: always timezone-aware UTC with whole-second precision, written as RFC 3339 `...Z`.

Every instant the scheduler stores or compares passes through here, so sort order of the
stored strings equals time order and run keys are byte-for-byte stable."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Protocol

from pydantic import AfterValidator, BeforeValidator, PlainSerializer

INSTANT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# The instants a client may send: wide enough for any schedule, narrow enough that every
# offset, window and horizon added to or taken from one stays inside datetime's range.
MIN_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
MAX_INSTANT = datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)
INSTANT_RULE = "must be an RFC 3339 instant such as 2026-11-02T09:00:00Z"
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)


def to_utc(value: datetime) -> datetime:
    """Normalise an aware datetime to UTC, dropping sub-second precision."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must be an RFC 3339 instant with a UTC offset (e.g. 2026-11-02T09:00:00Z)")
    try:
        return value.astimezone(UTC).replace(microsecond=0)
    except OverflowError:
        # 0001-01-01T00:30:00+01:00 or 9999-12-31T23:30:00-01:00: no such instant in UTC.
        raise UnrepresentableInstant("is outside the range of representable instants") from None


class UnrepresentableInstant(ValueError):
    """A time with an offset whose instant lies outside 0001-01-01..9999-12-31 in UTC."""


def format_instant(value: datetime) -> str:
    return to_utc(value).strftime(INSTANT_FORMAT)


def parse_instant(text: str) -> datetime:
    """Parse RFC 3339 (`Z` or an offset). Raises ValueError with the rule on bad input."""
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise ValueError("must be an RFC 3339 instant such as 2026-11-02T09:00:00Z") from exc
    return to_utc(parsed)


def parse_client_instant(value: Any) -> datetime:
    """An instant as a client sends it: an RFC 3339 string (never a number) from 1970 to 9998."""
    if not isinstance(value, str):
        raise ValueError(f"{INSTANT_RULE} (a string, not a {_json_type(value)})")
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ValueError(INSTANT_RULE)
    wall, fraction, offset = match.groups()
    text = f"{wall.replace(' ', 'T').replace('t', 'T')}.{(fraction or '0')[:6]:0<6}{offset.upper()}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{INSTANT_RULE}; this one names no real date or time") from None
    span = f"must lie between {format_instant(MIN_INSTANT)} and {format_instant(MAX_INSTANT)}"
    try:
        instant = to_utc(parsed)
    except ValueError:
        raise ValueError(span) from None
    if not MIN_INSTANT <= instant <= MAX_INSTANT:
        raise ValueError(span)
    return instant


def parse_client_bound(value: Any) -> datetime:
    """A window's bound as a client sends it (`parse_client_instant`'s rules), in UTC to the
    microsecond, not truncated: a truncated 05:00:00.5 as an end would leave the occurrence
    at 05:00:00 out of `start <= t < end` (domain.schedule.fires_in counts a bound with a
    fraction as the next whole second)."""
    whole = parse_client_instant(value)  # the rules, and the range
    match = _RFC3339.fullmatch(value)
    assert match is not None  # parse_client_instant accepted it
    return whole + timedelta(microseconds=int(((match.group(2) or "") + "000000")[:6]))


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}
    return names.get(type(value), "null" if value is None else type(value).__name__)


def epoch_seconds(value: datetime) -> int:
    return int(to_utc(value).timestamp())


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(int(seconds), tz=UTC)


# Pydantic field type for every instant in the models.
Instant = Annotated[datetime, AfterValidator(to_utc), PlainSerializer(format_instant, return_type=str)]
# What the API accepts from a client: an RFC 3339 string only, within MIN_INSTANT..MAX_INSTANT.
ClientInstant = Annotated[
    datetime, BeforeValidator(parse_client_instant), PlainSerializer(format_instant, return_type=str)
]
# A bound of a window of occurrences ([start, end)): as ClientInstant, to the microsecond.
ClientBound = Annotated[
    datetime, BeforeValidator(parse_client_bound), PlainSerializer(format_instant, return_type=str)
]


class Clock(Protocol):
    """Time is always injected: services take a Clock, tests pass a controllable one."""

    def now(self) -> datetime:
        """Whole seconds: what is recorded (history, leases, schedules)."""
        ...

    def precise(self) -> datetime:
        """Sub-second: for SQS delays and for waiting out the last fraction before a due instant."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Block until `event` is set (by another thread) or `seconds` have passed on this
        clock. Returns whether it was set. Every wait of the run lifecycle on work done
        elsewhere (an effect, a heartbeat's interval) goes through here, so a simulation
        that moves time itself moves these waits with it."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC).replace(microsecond=0)

    def precise(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told to (tests, simulations, benchmarks). It may be moved
    by fractions of a second (`advance`, `sleep`); `now` is whole seconds all the same, as
    SystemClock's, and `precise` keeps the fraction."""

    def __init__(self, start: datetime) -> None:
        self._now = to_utc(start)

    def now(self) -> datetime:
        return self._now.replace(microsecond=0)

    def precise(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """In real time: the event is another thread's, and this clock moves only when told."""
        return event.wait(max(0.0, seconds))

    def set(self, value: datetime) -> None:
        self._now = to_utc(value)

    def advance(self, seconds: float) -> datetime:
        from datetime import timedelta

        self._now = self._now + timedelta(seconds=seconds)
        return self._now
