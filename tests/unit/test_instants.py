"""A window's bounds from a client: a fraction of a second rounds up, never down, so that
`start <= t < end` over whole-second occurrences keeps exactly what the instants given keep."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from jobsched.domain.instants import MAX_INSTANT, parse_client_bound, parse_client_instant


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-01T05:00:00Z", datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)),
        ("2026-11-01T05:00:00.000Z", datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)),
        ("2026-11-01T05:00:00.5Z", datetime(2026, 11, 1, 5, 0, 1, tzinfo=UTC)),
        ("2026-11-01T05:00:00.000000001Z", datetime(2026, 11, 1, 5, 0, 1, tzinfo=UTC)),
        ("2026-11-01T06:59:59.9+02:00", datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)),
    ],
)
def test_a_fraction_rounds_a_bound_up(text, expected):
    assert parse_client_bound(text) == expected


def test_an_instant_keeps_its_whole_second_and_a_bound_past_the_last_is_refused():
    assert parse_client_instant("2026-11-01T05:00:00.5Z") == datetime(2026, 11, 1, 5, 0, 0, tzinfo=UTC)
    assert parse_client_bound("9998-12-31T23:59:59Z") == MAX_INSTANT
    with pytest.raises(ValueError, match="must lie between"):
        parse_client_bound("9998-12-31T23:59:59.5Z")
    with pytest.raises(ValueError, match="a string, not a number"):
        parse_client_bound(5)
