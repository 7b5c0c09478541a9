"""Schedule math: exact DST cases worked out by hand, plus property tests over many zones.

Transition facts used below (checked against zoneinfo):
- Europe/London 2026-03-29: 01:00 GMT -> 02:00 BST at 01:00Z; 2026-10-25: 02:00 BST -> 01:00 GMT at 01:00Z.
- America/New_York 2026-03-08: 02:00 EST -> 03:00 EDT at 07:00Z; 2026-11-01: 02:00 EDT -> 01:00 EST at 06:00Z.
- Australia/Lord_Howe 2026-04-05: 02:00 +11:00 -> 01:30 +10:30 at 2026-04-04T15:00Z;
  2026-10-04: 02:00 +10:30 -> 02:30 +11:00 at 2026-10-03T15:30Z.
- Pacific/Apia: 2011-12-29 23:59:59 -10:00 is followed by 2011-12-31 00:00 +14:00 at 2011-12-30T10:00Z.
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.cron import check_cron_expression, croniter_form, day_or, has_seconds_field
from jobsched.domain.models import DstFold, DstGap, DstPolicy, Schedule
from jobsched.domain.schedule import fires_between, fires_in, next_fire, uncovered, upcoming

ONE_SECOND = timedelta(seconds=1)


def z(text: str) -> datetime:
    """A UTC instant from 'YYYY-MM-DDTHH:MM[:SS]'."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def cron(expr: str, tz: str, gap: str = "shift", fold: str = "first", **kw: object) -> Schedule:
    return Schedule(kind="cron", cron=expr, time_zone=tz, dst=DstPolicy(gap=gap, fold=fold), **kw)


def rate(every: int, anchor: datetime, **kw: object) -> Schedule:
    return Schedule(kind="rate", every_seconds=every, anchor=anchor, **kw)


# --- Europe/London ---------------------------------------------------------------------


@pytest.mark.parametrize("fold", ["first", "last"])
def test_london_gap_shift_runs_at_the_transition(fold: str) -> None:
    s = cron("30 1 * * *", "Europe/London", gap="shift", fold=fold)
    # 03-28 01:30 GMT; 03-29 01:30 does not exist -> 02:00 BST = 01:00Z; 03-30 01:30 BST = 00:30Z.
    assert upcoming(s, z("2026-03-28T00:00"), 3) == [
        z("2026-03-28T01:30"),
        z("2026-03-29T01:00"),
        z("2026-03-30T00:30"),
    ]


@pytest.mark.parametrize("fold", ["first", "last"])
def test_london_gap_skip_has_no_run_that_day(fold: str) -> None:
    s = cron("30 1 * * *", "Europe/London", gap="skip", fold=fold)
    assert upcoming(s, z("2026-03-28T00:00"), 3) == [
        z("2026-03-28T01:30"),
        z("2026-03-30T00:30"),
        z("2026-03-31T00:30"),
    ]
    assert fires_between(s, z("2026-03-28T12:00"), z("2026-03-29T23:00"), 10) == []


@pytest.mark.parametrize(
    ("fold", "expected"),
    [("first", z("2026-10-25T00:30")), ("last", z("2026-10-25T01:30"))],  # 01:30 BST / 01:30 GMT
)
def test_london_fold_runs_once(fold: str, expected: datetime) -> None:
    s = cron("30 1 * * *", "Europe/London", fold=fold)
    assert fires_between(s, z("2026-10-24T12:00"), z("2026-10-25T23:00"), 10) == [expected]
    assert next_fire(s, z("2026-10-24T12:00")) == expected
    # The day after: 01:30 GMT.
    assert next_fire(s, expected) == z("2026-10-26T01:30")


def test_london_fold_both_runs_at_each_reading_and_none_at_neither() -> None:
    both = cron("30 1 * * *", "Europe/London", fold="both")
    assert fires_between(both, z("2026-10-24T12:00"), z("2026-10-26T12:00"), 10) == [
        z("2026-10-25T00:30"),  # 01:30 BST
        z("2026-10-25T01:30"),  # 01:30 GMT
        z("2026-10-26T01:30"),
    ]
    # From between the two readings, the second is still ahead.
    assert next_fire(both, z("2026-10-25T00:30")) == z("2026-10-25T01:30")
    none = cron("30 1 * * *", "Europe/London", fold="none")
    assert fires_between(none, z("2026-10-24T12:00"), z("2026-10-26T12:00"), 10) == [z("2026-10-26T01:30")]
    # Not a gap: the spring day's 01:30 (which does not exist) is shifted as before.
    assert next_fire(none, z("2026-03-28T12:00")) == z("2026-03-29T01:00")


@pytest.mark.parametrize(
    ("fold", "repeated_hour"),
    [
        ("both", ["00:00", "00:15", "00:30", "00:45", "01:00", "01:15", "01:30", "01:45"]),
        ("none", []),
    ],
)
def test_london_quarter_hourly_across_fall_back_both_and_none(fold: str, repeated_hour: list[str]) -> None:
    s = cron("*/15 * * * *", "Europe/London", fold=fold)
    assert fires_between(s, z("2026-10-24T23:50"), z("2026-10-25T02:00"), 100) == [
        *[z(f"2026-10-25T{hm}") for hm in repeated_hour],
        z("2026-10-25T02:00"),
    ]


@pytest.mark.parametrize(
    ("zone_name", "expression", "after", "readings"),
    [
        # New York: 01:30 EDT = 05:30Z, 01:30 EST = 06:30Z on 2026-11-01.
        ("America/New_York", "30 1 * * *", "2026-10-31T12:00", ["2026-11-01T05:30", "2026-11-01T06:30"]),
        # Lord Howe's half-hour fold: 01:45 +11:00 = 14:45Z, 01:45 +10:30 = 15:15Z on 04-04.
        ("Australia/Lord_Howe", "45 1 * * *", "2026-04-04T00:00", ["2026-04-04T14:45", "2026-04-04T15:15"]),
    ],
)
def test_fold_both_and_none_in_other_zones(
    zone_name: str, expression: str, after: str, readings: list[str]
) -> None:
    assert upcoming(cron(expression, zone_name, fold="both"), z(after), 2) == [z(t) for t in readings]
    assert z(readings[0]) not in upcoming(cron(expression, zone_name, fold="none"), z(after), 2)
    assert z(readings[1]) not in upcoming(cron(expression, zone_name, fold="none"), z(after), 2)


def test_london_fold_last_seen_from_inside_the_first_reading() -> None:
    s = cron("30 1 * * *", "Europe/London", fold="last")
    # 00:30Z and 00:00Z read 01:30 / 01:00 BST; the run at 01:30 GMT is still ahead.
    assert next_fire(s, z("2026-10-25T00:30")) == z("2026-10-25T01:30")
    assert next_fire(s, z("2026-10-25T00:59:59")) == z("2026-10-25T01:30")
    assert next_fire(s, z("2026-10-25T01:30")) == z("2026-10-26T01:30")
    first = cron("30 1 * * *", "Europe/London", fold="first")
    assert next_fire(first, z("2026-10-25T00:30")) == z("2026-10-26T01:30")
    assert next_fire(first, z("2026-10-25T00:29:59")) == z("2026-10-25T00:30")


@pytest.mark.parametrize("gap", ["shift", "skip"])
def test_london_quarter_hourly_across_spring_forward(gap: str) -> None:
    s = cron("*/15 * * * *", "Europe/London", gap=gap)
    got = fires_between(s, z("2026-03-29T00:00"), z("2026-03-29T02:00"), 100)
    # 01:00-01:45 local do not exist. Shifted they all land on 01:00Z, which is also the
    # real 02:00 BST, so both policies give one run there and nothing else in the gap.
    assert got == [
        z("2026-03-29T00:15"),
        z("2026-03-29T00:30"),
        z("2026-03-29T00:45"),
        z("2026-03-29T01:00"),
        z("2026-03-29T01:15"),
        z("2026-03-29T01:30"),
        z("2026-03-29T01:45"),
        z("2026-03-29T02:00"),
    ]
    london = ZoneInfo("Europe/London")
    for t in got:
        wall = t.astimezone(london)
        assert not (wall.date().isoformat() == "2026-03-29" and wall.hour == 1)


@pytest.mark.parametrize(
    ("fold", "repeated_hour"),
    [
        # 01:00-01:45 BST are 00:00Z-00:45Z; 01:00-01:45 GMT are 01:00Z-01:45Z.
        ("first", ["00:00", "00:15", "00:30", "00:45"]),
        ("last", ["01:00", "01:15", "01:30", "01:45"]),
    ],
)
def test_london_quarter_hourly_across_fall_back(fold: str, repeated_hour: list[str]) -> None:
    s = cron("*/15 * * * *", "Europe/London", fold=fold)
    got = fires_between(s, z("2026-10-24T23:00"), z("2026-10-25T02:00"), 100)
    expected = (
        [z("2026-10-24T23:15"), z("2026-10-24T23:30"), z("2026-10-24T23:45")]  # 00:15-00:45 BST
        + [z(f"2026-10-25T{hm}") for hm in repeated_hour]
        + [z("2026-10-25T02:00")]  # 02:00 GMT
    )
    assert got == expected
    assert len(set(got)) == len(got)


# --- America/New_York ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "expected"),
    [
        ("shift", [z("2026-03-08T07:00"), z("2026-03-09T06:30")]),  # gap -> 03:00 EDT; then 02:30 EDT
        ("skip", [z("2026-03-09T06:30"), z("2026-03-10T06:30")]),
    ],
)
@pytest.mark.parametrize("fold", ["first", "last"])
def test_new_york_gap(gap: str, fold: str, expected: list[datetime]) -> None:
    s = cron("30 2 * * *", "America/New_York", gap=gap, fold=fold)
    # 03-07 02:30 EST = 07:30Z is before the start.
    assert upcoming(s, z("2026-03-07T12:00"), 2) == expected


@pytest.mark.parametrize(
    ("fold", "expected"),
    [("first", z("2026-11-01T05:30")), ("last", z("2026-11-01T06:30"))],  # 01:30 EDT / 01:30 EST
)
@pytest.mark.parametrize("gap", ["shift", "skip"])
def test_new_york_fold(gap: str, fold: str, expected: datetime) -> None:
    s = cron("30 1 * * *", "America/New_York", gap=gap, fold=fold)
    assert upcoming(s, z("2026-10-31T12:00"), 2) == [expected, z("2026-11-02T06:30")]


# --- Australia/Lord_Howe (30-minute shift) -------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "expected"),
    [
        # 10-04 02:15 does not exist -> 02:30 +11:00 = 10-03T15:30Z; 10-05 02:15 +11:00 = 10-04T15:15Z.
        ("shift", [z("2026-10-03T15:30"), z("2026-10-04T15:15")]),
        ("skip", [z("2026-10-04T15:15"), z("2026-10-05T15:15")]),
    ],
)
def test_lord_howe_gap(gap: str, expected: list[datetime]) -> None:
    s = cron("15 2 * * *", "Australia/Lord_Howe", gap=gap)
    # 10-03 02:15 +10:30 = 10-02T15:45Z, before the start.
    assert upcoming(s, z("2026-10-03T00:00"), 2) == expected


@pytest.mark.parametrize(
    ("fold", "expected"),
    [("first", z("2026-04-04T14:45")), ("last", z("2026-04-04T15:15"))],  # 01:45 +11:00 / +10:30
)
def test_lord_howe_fold(fold: str, expected: datetime) -> None:
    s = cron("45 1 * * *", "Australia/Lord_Howe", fold=fold)
    # Next day 01:45 +10:30 = 04-05T15:15Z.
    assert upcoming(s, z("2026-04-04T00:00"), 2) == [expected, z("2026-04-05T15:15")]


# --- Pacific/Apia (a whole missing day) ----------------------------------------------------


def test_apia_missing_day_shift() -> None:
    s = cron("0 9 * * *", "Pacific/Apia", gap="shift")
    # 12-29 09:00 -10:00 = 12-29T19:00Z; 12-30 09:00 -> the transition 12-30T10:00Z;
    # 12-31 09:00 +14:00 = 12-30T19:00Z.
    assert upcoming(s, z("2011-12-29T00:00"), 3) == [
        z("2011-12-29T19:00"),
        z("2011-12-30T10:00"),
        z("2011-12-30T19:00"),
    ]


def test_apia_missing_day_skip() -> None:
    s = cron("0 9 * * *", "Pacific/Apia", gap="skip")
    assert upcoming(s, z("2011-12-29T00:00"), 3) == [
        z("2011-12-29T19:00"),
        z("2011-12-30T19:00"),  # 12-31 09:00 +14:00
        z("2011-12-31T19:00"),
    ]


def test_apia_every_second_crosses_the_missing_day_quickly() -> None:
    s = cron("* * * * * *", "Pacific/Apia", gap="shift")
    began = time.perf_counter()
    got = fires_between(s, z("2011-12-30T09:59:58"), z("2011-12-30T10:00:02"), 100)
    assert time.perf_counter() - began < 1.0
    assert got == [z("2011-12-30T09:59:59")] + [z(f"2011-12-30T10:00:0{i}") for i in range(3)]


# --- Cron syntax variants ------------------------------------------------------------------


def test_six_field_cron_with_seconds() -> None:
    s = cron("*/10 * * * * *", "Europe/London")
    assert upcoming(s, z("2026-06-01T12:00:05"), 3) == [
        z("2026-06-01T12:00:10"),
        z("2026-06-01T12:00:20"),
        z("2026-06-01T12:00:30"),
    ]
    # Across spring-forward: 01:00:00-01:59:50 local all shift onto 01:00:00Z (= 02:00:00 BST).
    assert upcoming(s, z("2026-03-29T00:59:45"), 3) == [
        z("2026-03-29T00:59:50"),
        z("2026-03-29T01:00:00"),
        z("2026-03-29T01:00:10"),
    ]


@pytest.mark.parametrize("expr", ["@hourly", "@HOURLY"])
@pytest.mark.parametrize("gap", ["shift", "skip"])
def test_hourly_alias(expr: str, gap: str) -> None:
    s = cron(expr, "Europe/London", gap=gap)
    # 01:00 local is in the gap; 02:00 BST = 01:00Z exists either way; 03:00 BST = 02:00Z.
    assert upcoming(s, z("2026-03-29T00:10"), 2) == [z("2026-03-29T01:00"), z("2026-03-29T02:00")]


def test_impossible_date_returns_none_quickly() -> None:
    s = cron("0 0 30 2 *", "Europe/London")
    began = time.perf_counter()
    assert next_fire(s, z("2026-01-01T00:00")) is None
    assert upcoming(s, z("2026-01-01T00:00"), 5) == []
    assert fires_between(s, z("2026-01-01T00:00"), z("2036-01-01T00:00"), 5) == []
    assert time.perf_counter() - began < 1.0


def test_leap_day_cron_finds_the_next_leap_year() -> None:
    s = cron("0 12 29 2 *", "UTC")
    assert next_fire(s, z("2026-01-01T00:00")) == z("2028-02-29T12:00")
    assert next_fire(s, z("2097-01-01T00:00")) == z("2104-02-29T12:00")  # 2100 is not a leap year


def test_inputs_are_normalised_and_outputs_are_whole_utc_seconds() -> None:
    s = cron("0 9 * * *", "Europe/Berlin")
    after = datetime(2026, 6, 1, 8, 59, 59, 999_999, tzinfo=ZoneInfo("Europe/Berlin"))
    got = next_fire(s, after)
    assert got == z("2026-06-01T07:00")  # 09:00 CEST
    assert got is not None and got.tzinfo is UTC and got.microsecond == 0


def test_max_runs_is_left_to_the_caller() -> None:
    s = cron("0 * * * *", "UTC", max_runs=1)
    assert len(upcoming(s, z("2026-01-01T00:00"), 5)) == 5


# --- Rate and once -------------------------------------------------------------------------


def test_rate_ignores_dst() -> None:
    s = rate(900, z("2026-03-29T00:00"))
    got = upcoming(s, z("2026-03-29T00:00"), 12)  # spans London's 01:00Z jump
    assert got[0] == z("2026-03-29T00:15")
    assert all(b - a == timedelta(seconds=900) for a, b in pairwise(got))
    assert fires_between(s, z("2026-10-25T00:50"), z("2026-10-25T01:20"), 10) == [
        z("2026-10-25T01:00"),
        z("2026-10-25T01:15"),
    ]


def test_rate_arithmetic() -> None:
    anchor = z("2026-01-01T00:00")
    s = rate(900, anchor)
    assert next_fire(s, anchor - ONE_SECOND) == anchor
    assert next_fire(s, anchor) == anchor + timedelta(seconds=900)
    assert next_fire(s, anchor + timedelta(seconds=901)) == anchor + timedelta(seconds=1800)
    # Far from the anchor: computed, not looped.
    assert next_fire(s, z("2030-06-15T10:07:00")) == z("2030-06-15T10:15:00")


def test_rate_anchored_in_the_future_starts_at_the_anchor() -> None:
    anchor = z("2030-01-01T00:00")
    s = rate(3600, anchor)
    assert upcoming(s, z("2026-01-01T00:00"), 2) == [anchor, z("2030-01-01T01:00")]


def test_once() -> None:
    at = z("2026-05-01T09:00")
    s = Schedule(kind="once", at=at)
    assert next_fire(s, z("2026-04-01T00:00")) == at
    assert next_fire(s, at) is None
    assert next_fire(s, z("2026-06-01T00:00")) is None
    assert upcoming(s, z("2026-04-01T00:00"), 5) == [at]
    assert fires_between(s, z("2026-04-01T00:00"), at, 5) == [at]
    assert fires_between(s, z("2026-04-01T00:00"), at - ONE_SECOND, 5) == []
    outside = Schedule(kind="once", at=at, end_at=z("2026-04-30T00:00"))
    assert next_fire(outside, z("2026-04-01T00:00")) is None
    too_early = Schedule(kind="once", at=at, start_at=z("2026-05-02T00:00"))
    assert next_fire(too_early, z("2026-04-01T00:00")) is None


# --- Bounds and limits ---------------------------------------------------------------------


def test_start_and_end_bounds_are_inclusive() -> None:
    s = cron("0 9 * * *", "UTC", start_at=z("2026-05-10T09:00"), end_at=z("2026-05-12T09:00"))
    assert next_fire(s, z("2026-05-01T00:00")) == z("2026-05-10T09:00")
    assert fires_between(s, z("2026-01-01T00:00"), z("2027-01-01T00:00"), 100) == [
        z("2026-05-10T09:00"),
        z("2026-05-11T09:00"),
        z("2026-05-12T09:00"),
    ]
    assert next_fire(s, z("2026-05-12T09:00")) is None


def test_fires_in_is_half_open() -> None:
    s = cron("0 * * * *", "UTC")
    hours = [z(f"2026-05-10T0{h}:00") for h in (1, 2, 3, 4)]
    assert fires_in(s, z("2026-05-10T01:00"), z("2026-05-10T05:00"), 100) == hours
    assert fires_in(s, z("2026-05-10T01:00"), z("2026-05-10T01:00:01"), 100) == hours[:1]
    assert fires_in(s, z("2026-05-10T00:59:59"), z("2026-05-10T01:00"), 100) == []
    assert fires_in(s, z("2026-05-10T01:00"), z("2026-05-10T01:00"), 100) == []
    assert fires_in(s, z("2026-05-10T05:00"), z("2026-05-10T01:00"), 100) == []
    assert fires_in(s, z("2026-05-10T01:00"), z("2026-05-10T05:00"), 2) == hours[:2]


def test_rate_bounds() -> None:
    s = rate(3600, z("2026-01-01T00:00"), start_at=z("2026-01-01T02:30"), end_at=z("2026-01-01T05:00"))
    assert upcoming(s, z("2025-01-01T00:00"), 10) == [
        z("2026-01-01T03:00"),
        z("2026-01-01T04:00"),
        z("2026-01-01T05:00"),
    ]


def test_limits() -> None:
    s = cron("* * * * *", "UTC")
    assert len(fires_between(s, z("2026-01-01T00:00"), z("2026-01-02T00:00"), 7)) == 7
    assert fires_between(s, z("2026-01-01T00:00"), z("2026-01-02T00:00"), 0) == []
    assert fires_between(s, z("2026-01-01T00:00"), z("2025-01-01T00:00"), 10) == []
    assert upcoming(s, z("2026-01-01T00:00"), 0) == []


# --- Properties ----------------------------------------------------------------------------

ZONES = [
    "Europe/London",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "Asia/Kolkata",
    "UTC",
    "America/Sao_Paulo",
    "Europe/Berlin",
]
CRONS = [
    "30 1 * * *",
    "30 2 * * *",
    "45 1 * * *",
    "15 2 * * *",
    "0 0 * * *",
    "30 23 * * *",
    "15,45 1-3 * * *",
    "*/15 * * * *",
    "0 * * * *",
    "@hourly",
    "@daily",
    "0 9 * * 1-5",
    "0 0 1 * *",
    "0 30 1 * * *",
    "*/20 59 1,2 * * *",
    "30 0 2 * * *",
    "30 1 */8 * SUN-WED",  # both day fields, one starred: a day must match both
    "30 1 1,15 * SUN",  # both restricted: a day matches either
    "0 30 2 */2 * 0",
]
RANGE_START = int(datetime(2010, 1, 1, tzinfo=UTC).timestamp())
RANGE_END = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp())


@functools.cache
def transitions(name: str) -> tuple[datetime, ...]:
    """Offset changes of a zone in 2010-2030, to aim start instants near them."""
    tz = ZoneInfo(name)
    found = []
    t = datetime(2009, 12, 1, tzinfo=UTC)
    offset = t.astimezone(tz).utcoffset()
    while t < datetime(2031, 1, 1, tzinfo=UTC):
        later = t + timedelta(days=1)
        if later.astimezone(tz).utcoffset() != offset:
            lo, hi = t, later
            while hi - lo > ONE_SECOND:
                mid = lo + (hi - lo) // 2
                if mid.astimezone(tz).utcoffset() == offset:
                    lo = mid
                else:
                    hi = mid
            found.append(hi)
            offset = hi.astimezone(tz).utcoffset()
        t = later
    return tuple(found)


@st.composite
def instants(draw: st.DrawFn, zone_name: str) -> datetime:
    near = transitions(zone_name)
    pick_near = draw(st.booleans()) if near else False
    if pick_near:
        return draw(st.sampled_from(near)) + timedelta(seconds=draw(st.integers(-2 * 86400, 86400)))
    return datetime.fromtimestamp(draw(st.integers(RANGE_START, RANGE_END)), UTC)


@st.composite
def cron_cases(draw: st.DrawFn) -> tuple[Schedule, datetime]:
    name = draw(st.sampled_from(ZONES))
    s = cron(
        draw(st.sampled_from(CRONS)),
        name,
        gap=draw(st.sampled_from(list(DstGap))).value,
        fold=draw(st.sampled_from(list(DstFold))).value,
    )
    return s, draw(instants(name))


def chain(s: Schedule, after: datetime, n: int, until: datetime | None = None) -> list[datetime]:
    """Occurrences by calling next_fire from each previous one."""
    out: list[datetime] = []
    while len(out) < n:
        t = next_fire(s, after)
        if t is None or (until is not None and t > until):
            break
        out.append(t)
        after = t
    return out


def wall(t: datetime, tz: ZoneInfo) -> datetime:
    return t.astimezone(tz).replace(tzinfo=None, fold=0)


def exists(w: datetime, tz: ZoneInfo) -> bool:
    return wall(w.replace(tzinfo=tz).astimezone(UTC), tz) == w


normalised = functools.cache(check_cron_expression)


def matches(expr: str, w: datetime) -> bool:
    expr = croniter_form(normalised(expr))
    walker = croniter(expr, w - ONE_SECOND, second_at_beginning=has_seconds_field(expr), day_or=day_or(expr))
    return walker.get_next(datetime) == w


def ambiguous(w: datetime, tz: ZoneInfo) -> bool:
    """Whether the wall time happens twice (clocks going back)."""
    return w.replace(tzinfo=tz, fold=0).utcoffset() != w.replace(tzinfo=tz, fold=1).utcoffset() and exists(
        w, tz
    )


def is_transition(t: datetime, tz: ZoneInfo) -> bool:
    return t.astimezone(tz).utcoffset() != (t - ONE_SECOND).astimezone(tz).utcoffset()


PROPERTY = settings(max_examples=120, deadline=None)


@PROPERTY
@given(cron_cases())
def test_property_cron_occurrences(case: tuple[Schedule, datetime]) -> None:
    s, start = case
    assert s.cron is not None and s.time_zone is not None
    tz = ZoneInfo(s.time_zone)
    got = chain(s, start, 10)
    assert got, "every listed cron fires within the horizon"
    assert got[0] > start
    assert all(a < b for a, b in pairwise(got))
    assert all(t.tzinfo is UTC and t.microsecond == 0 for t in got)
    # Re-entering just before any occurrence finds that occurrence again.
    for t in got:
        assert next_fire(s, t - ONE_SECOND) == t

    walls = [wall(t, tz) for t in got]
    if s.dst.fold is not DstFold.BOTH:
        assert len(set(walls)) == len(walls), "a repeated local time runs once"
    else:
        assert all(walls.count(w) <= 2 for w in walls), "a repeated local time runs at most twice"
    for t in got:
        if ambiguous(wall(t, tz), tz):
            # An ambiguous local time: the chosen reading follows the fold policy.
            reading = t.astimezone(tz).fold
            assert s.dst.fold is not DstFold.NONE
            assert reading == {DstFold.FIRST: 0, DstFold.LAST: 1}.get(s.dst.fold, reading)

    for t, w in zip(got, walls, strict=True):
        if not matches(s.cron, w):
            # Only a gap shift may run at a wall time the cron does not name.
            assert s.dst.gap is DstGap.SHIFT and is_transition(t, tz), (t, w)

    # Completeness: every existing wall-clock match in the window ran exactly once, in order.
    expr = croniter_form(normalised(s.cron))
    walker = croniter(
        expr,
        min(min(walls), wall(start, tz)) - timedelta(hours=2) - ONE_SECOND,
        second_at_beginning=has_seconds_field(expr),
        day_or=day_or(expr),
    )
    expected: list[datetime] = []
    while (m := walker.get_next(datetime)) <= max(walls):
        if not exists(m, tz):
            continue
        if not ambiguous(m, tz):
            expected.append(m.replace(tzinfo=tz).astimezone(UTC))
        elif s.dst.fold is not DstFold.NONE:
            readings = [m.replace(tzinfo=tz, fold=fold).astimezone(UTC) for fold in (0, 1)]
            expected += {DstFold.FIRST: readings[:1], DstFold.LAST: readings[1:]}.get(s.dst.fold, readings)
    # Instants: under `both` a fold's two readings interleave with other walls' in time.
    found = [t for t, w in zip(got, walls, strict=True) if matches(s.cron, w)]
    assert found == sorted(t for t in expected if start < t <= got[-1])


@PROPERTY
@given(cron_cases(), st.integers(0, 4 * 86400))
def test_property_fires_between_equals_repeated_next_fire(
    case: tuple[Schedule, datetime], window_seconds: int
) -> None:
    s, start = case
    until = start + timedelta(seconds=window_seconds)
    expected = chain(s, start, 10_000, until)
    assert fires_between(s, start, until, 10_000) == expected
    assert fires_between(s, start, until, 3) == expected[:3]
    assert upcoming(s, start, 5) == chain(s, start, 5)


@PROPERTY
@given(
    st.integers(RANGE_START, RANGE_END),
    st.integers(RANGE_START, RANGE_END),
    st.integers(1, 366 * 24 * 3600),
)
def test_property_rate(anchor_ts: int, after_ts: int, every: int) -> None:
    anchor = datetime.fromtimestamp(anchor_ts, UTC)
    after = datetime.fromtimestamp(after_ts, UTC)
    s = rate(every, anchor)
    got = upcoming(s, after, 6)
    assert len(got) == 6
    assert got[0] > after and got[0] >= anchor
    assert got[0] == anchor or got[0] - timedelta(seconds=every) <= after
    assert all(b - a == timedelta(seconds=every) for a, b in pairwise(got))
    assert all((t - anchor) % timedelta(seconds=every) == timedelta(0) for t in got)
    assert fires_between(s, after, got[-1], 100) == got


# --- uncovered: the stretches of a range no stored record holds ---


def _every(seconds: int) -> Schedule:
    return Schedule(kind="rate", every_seconds=seconds, anchor=z("2026-11-02T08:00:00Z"))


def test_uncovered_names_the_stretches_between_and_after_the_records():
    schedule = _every(10)
    first, last = z("2026-11-02T08:00:00Z"), z("2026-11-02T08:02:00Z")
    covered = [
        (z("2026-11-02T08:00:00Z"), z("2026-11-02T08:00:00Z")),  # a run
        (z("2026-11-02T08:00:30Z"), z("2026-11-02T08:01:00Z")),  # a range
    ]
    assert uncovered(schedule, first, last, covered) == [
        (z("2026-11-02T08:00:10Z"), z("2026-11-02T08:00:20Z")),
        (z("2026-11-02T08:01:10Z"), z("2026-11-02T08:02:00Z")),
    ]
    assert uncovered(schedule, first, last, [(first, last)]) == []
    assert uncovered(schedule, first, last, []) == [(first, last)]


@settings(max_examples=300, deadline=None)
@given(
    every=st.integers(1, 90),
    length=st.integers(0, 60),
    spans=st.lists(st.tuples(st.integers(-5, 70), st.integers(0, 8)), max_size=12),
)
def test_uncovered_and_the_records_hold_every_occurrence_of_the_range_exactly(every, length, spans):
    """Records at occurrences (k-th, spanning n more), possibly outside the range or
    overlapping each other: the stretches returned hold exactly the occurrences of [first,
    last] that no record holds."""
    schedule = _every(every)
    anchor = z("2026-11-02T08:00:00Z")
    at = [anchor + timedelta(seconds=every * k) for k in range(-10, 90)]
    first, last = at[10], at[10 + length]
    covered = [(at[10 + k], at[10 + k + n]) for k, n in spans]
    held = {t for a, b in covered for t in at if a <= t <= b}
    stretches = uncovered(schedule, first, last, covered)
    returned = [t for a, b in stretches for t in at if a <= t <= b]
    assert len(returned) == len(set(returned))  # disjoint
    assert set(returned) == {t for t in at if first <= t <= last} - held
    assert all(a <= b for a, b in stretches) and stretches == sorted(stretches)
