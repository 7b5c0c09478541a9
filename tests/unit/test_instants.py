"""A window's bounds from a client keep their fraction of a second, and the window's
occurrences count a bound with a fraction as the next whole second: `start <= t < end` over
whole-second occurrences keeps exactly what the instants given keep."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from jobsched.domain.instants import MAX_INSTANT, parse_client_bound, parse_client_instant
from jobsched.domain.models import Schedule, ScheduleKind
from jobsched.domain.schedule import fires_in, whole_second_up

EVERY_SECOND = Schedule(kind=ScheduleKind.RATE, every_seconds=1, anchor=datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-01T05:00:00Z", datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)),
        ("2026-11-01T05:00:00.000Z", datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)),
        ("2026-11-01T05:00:00.5Z", datetime(2026, 11, 1, 5, 0, 0, 500000, tzinfo=UTC)),
        ("2026-11-01T05:00:00.000000001Z", datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)),
        ("2026-11-01T06:59:59.9+02:00", datetime(2026, 11, 1, 4, 59, 59, 900000, tzinfo=UTC)),
    ],
)
def test_a_bound_keeps_its_fraction_to_the_microsecond(text, expected):
    assert parse_client_bound(text) == expected


def test_a_bound_with_a_fraction_counts_as_the_next_whole_second():
    at = datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)
    assert whole_second_up(at) == at
    assert whole_second_up(parse_client_bound("2026-11-01T04:59:59.2Z")) == at
    window = fires_in(
        EVERY_SECOND,
        parse_client_bound("2026-11-01T04:59:58.5Z"),
        parse_client_bound("2026-11-01T05:00:00.5Z"),
        10,
    )
    assert window == [datetime(2026, 11, 1, 4, 59, 59, tzinfo=UTC), at]


def test_an_instant_keeps_its_whole_second_and_a_bound_keeps_the_rules():
    assert parse_client_instant("2026-11-01T05:00:00.5Z") == datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)
    assert parse_client_bound("9998-12-31T23:59:59.5Z") > MAX_INSTANT  # the range is the instant's
    with pytest.raises(ValueError, match="a string, not a number"):
        parse_client_bound(5)
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_client_bound("2026-11-01 05:00")
