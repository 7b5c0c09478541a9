"""Exclusions: occurrences a schedule does not fire at after all. Hand-worked cases across DST
and month ends, and properties against a plain per-instant check (cronsim for the crons, an
evaluator independent of croniter)."""

from __future__ import annotations

import functools
import time
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import cronsim
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.models import WRITE, Schedule
from jobsched.domain.schedule import (
    count_excluded,
    count_fires,
    countable_through,
    excluded_by,
    fires_between,
    fires_in,
    latest_fire_before,
    next_fire,
    upcoming,
    without_exclusions,
)
from pydantic import ValidationError

ONE_SECOND = timedelta(seconds=1)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def schedule(exclude: list[dict], **fields: object) -> Schedule:
    base: dict[str, object] = {"kind": "cron", "cron": "0 9 * * *", "time_zone": "Europe/London"}
    return Schedule.model_validate({**base, **fields, "exclude": exclude})


def test_a_freeze_and_weekends_are_left_out():
    s = schedule(
        [
            {"start_date": "2026-12-20", "end_date": "2027-01-03", "time_zone": "Europe/London"},
            {"cron": "* * * * SAT,SUN", "time_zone": "Europe/London"},
        ]
    )
    # Friday 18 December runs; the weekend, the freeze and its last weekend do not.
    assert upcoming(s, z("2026-12-18T00:00"), 4) == [
        z("2026-12-18T09:00"),
        z("2027-01-04T09:00"),
        z("2027-01-05T09:00"),
        z("2027-01-06T09:00"),
    ]
    assert excluded_by(s, z("2026-12-19T09:00")) == 1  # a Saturday before the freeze
    assert excluded_by(s, z("2026-12-21T09:00")) == 0  # the freeze is listed first
    assert excluded_by(s, z("2026-12-18T09:00")) is None
    assert count_fires(s, z("2026-12-18T00:00"), z("2027-01-31T23:59:59")) == 1 + 20
    assert count_excluded(s, z("2026-12-18T00:00"), z("2027-02-01T00:00")) == 45 - 21


def test_a_five_field_exclusion_cron_covers_whole_minutes():
    s = schedule([{"cron": "30 9 * * *", "time_zone": "UTC"}], cron="*/20 * * * * *", time_zone="UTC")
    assert upcoming(s, z("2026-11-02T09:29:30"), 3) == [
        z("2026-11-02T09:29:40"),
        z("2026-11-02T09:31:00"),  # 09:30:00, :20 and :40 are excluded
        z("2026-11-02T09:31:20"),
    ]


def test_a_six_field_exclusion_cron_is_refused_on_a_write_and_read_back_to_the_second():
    exclusion = [{"cron": "20 30 9 * * *", "time_zone": "UTC"}]
    with pytest.raises(ValidationError, match="must have 5 fields"):
        fields = {"kind": "cron", "cron": "*/20 * * * * *", "time_zone": "UTC", "exclude": exclusion}
        Schedule.model_validate(fields, context=WRITE)
    s = schedule(exclusion, cron="*/20 * * * * *", time_zone="UTC")  # as stored before the rule
    assert upcoming(s, z("2026-11-02T09:29:59"), 2) == [z("2026-11-02T09:30:00"), z("2026-11-02T09:30:40")]


def test_dates_follow_the_zone_across_its_dst_change():
    # New York springs forward on 2026-03-08: the day runs from 05:00Z (EST) to 04:00Z next (EDT).
    s = schedule(
        [{"start_date": "2026-03-08", "end_date": "2026-03-08", "time_zone": "America/New_York"}],
        kind="rate",
        cron=None,
        time_zone=None,
        every_seconds=3600,
        anchor=z("2026-03-01T00:00"),
    )
    assert fires_between(s, z("2026-03-08T03:00"), z("2026-03-09T06:00"), 10) == [
        z("2026-03-08T04:00"),
        z("2026-03-09T04:00"),
        z("2026-03-09T05:00"),
        z("2026-03-09T06:00"),
    ]
    assert count_fires(s, z("2026-03-08T00:00"), z("2026-03-09T23:00")) == 48 - 23


def test_a_date_whose_midnight_falls_in_a_dst_gap_starts_at_the_gap_end():
    # Beirut springs forward at 00:00 on 2026-03-29 (EET +2 -> EEST +3): that day's first
    # instant is 01:00 EEST, 2026-03-28T22:00Z.
    s = schedule(
        [{"start_date": "2026-03-29", "end_date": "2026-03-29", "time_zone": "Asia/Beirut"}],
        kind="rate",
        cron=None,
        time_zone=None,
        every_seconds=900,
        anchor=z("2026-03-01T00:00"),
    )
    assert excluded_by(s, z("2026-03-28T21:45")) is None
    assert excluded_by(s, z("2026-03-28T22:00")) == 0
    assert excluded_by(s, z("2026-03-29T20:45")) == 0
    assert excluded_by(s, z("2026-03-29T21:00")) is None  # 00:00 EEST on 03-30
    assert count_fires(s, z("2026-03-28T21:00"), z("2026-03-29T21:45")) == 4 + 4


def test_a_covered_hour_ending_inside_a_dst_gap_ends_at_the_gap_end():
    # Goose Bay sprang forward at 00:01 on 2010-03-14 (AST -4 -> ADT -3, at 04:01Z): the
    # excluded hour 00:00-00:59 ends at 01:00, which never happened; 01:01 ADT came next.
    s = schedule(
        [{"cron": "* 0 * * *", "time_zone": "America/Goose_Bay"}],
        kind="rate",
        cron=None,
        time_zone=None,
        every_seconds=60,
        anchor=z("2010-03-01T00:00"),
    )
    assert fires_between(s, z("2010-03-14T03:58"), z("2010-03-14T04:02"), 5) == [
        z("2010-03-14T03:59"),  # 23:59 AST
        z("2010-03-14T04:01"),  # 01:01 ADT: 04:00Z, 00:00 AST, is excluded
        z("2010-03-14T04:02"),
    ]


def test_dates_and_month_ends_in_a_leap_year():
    s = schedule(
        [{"start_date": "2028-02-28", "end_date": "2028-03-01", "time_zone": "UTC"}],
        cron="0 12 L * *",  # the last day of each month
        time_zone="UTC",
    )
    assert upcoming(s, z("2028-01-01T00:00"), 2) == [z("2028-01-31T12:00"), z("2028-03-31T12:00")]


def test_instants_are_half_open():
    s = schedule(
        [{"start": z("2026-11-02T10:00"), "end": z("2026-11-02T12:00")}],
        kind="rate",
        cron=None,
        time_zone=None,
        every_seconds=3600,
        anchor=z("2026-11-02T00:00"),
    )
    assert fires_between(s, z("2026-11-02T08:30"), z("2026-11-02T13:00"), 10) == [
        z("2026-11-02T09:00"),
        z("2026-11-02T12:00"),
        z("2026-11-02T13:00"),
    ]
    assert latest_fire_before(s, z("2026-11-02T12:00"), not_before=z("2026-11-02T00:00")) == z(
        "2026-11-02T09:00"
    )


def test_exclusions_that_cover_everything_end_the_search_quickly():
    started = time.monotonic()
    everything = schedule([{"cron": "* * * * *", "time_zone": "UTC"}], cron="* * * * * *", time_zone="UTC")
    assert next_fire(everything, z("2026-11-02T00:00")) is None  # eight years of whole days jumped
    second_by_second = schedule(
        [{"cron": "0-58 * * * * *", "time_zone": "UTC"}], cron="0 * * * * *", time_zone="UTC"
    )
    assert next_fire(second_by_second, z("2026-11-02T00:00")) is None  # too many in a row
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("exclusion", "field", "rule"),
    [
        ({"cron": "0 9 * * *", "start": "2026-11-02T00:00:00Z"}, ("exclude", 0), "exactly one"),
        ({}, ("exclude", 0), "exactly one"),
        ({"cron": "0 9 * * *"}, ("exclude", 0, "time_zone"), "required"),
        ({"start_date": "2026-12-20", "time_zone": "UTC"}, ("exclude", 0, "end_date"), "with its pair"),
        (
            {"start_date": "2026-12-20", "end_date": "2026-12-19", "time_zone": "UTC"},
            ("exclude", 0, "end_date"),
            "before",
        ),
        (
            {"start_date": "2026-12-20", "end_date": "2026-12-21"},
            ("exclude", 0, "time_zone"),
            "required with startDate",
        ),
        (
            {"start": "2026-11-02T00:00:00Z", "end": "2026-11-02T00:00:00Z"},
            ("exclude", 0, "end"),
            "after start",
        ),
        (
            {"start": "2026-11-02T00:00:00Z", "end": "2026-11-03T00:00:00Z", "time_zone": "UTC"},
            ("exclude", 0, "time_zone"),
            "only",
        ),
        ({"cron": "0 25 * * *", "time_zone": "UTC"}, ("exclude", 0, "cron"), "not a valid cron"),
    ],
)
def test_a_malformed_exclusion_names_the_field_and_the_rule(exclusion, field, rule):
    with pytest.raises(ValidationError) as caught:
        Schedule.model_validate(
            {"kind": "cron", "cron": "0 9 * * *", "time_zone": "UTC", "exclude": [exclusion]}, context=WRITE
        )
    error = caught.value.errors()[0]
    loc = tuple(error["loc"]) + tuple(error.get("ctx", {}).get("loc", ()))
    assert loc == field, caught.value
    assert rule in error["msg"], error["msg"]


def test_a_one_time_schedule_takes_no_exclusions_and_a_job_at_most_twenty():
    with pytest.raises(ValidationError, match="recurring"):
        Schedule.model_validate({"kind": "once", "at": "2026-11-02T09:00:00Z", "exclude": []}, context=WRITE)
    many = [{"cron": "0 9 * * *", "time_zone": "UTC"}] * 21
    with pytest.raises(ValidationError, match="at most 20"):
        Schedule.model_validate(
            {"kind": "cron", "cron": "0 9 * * *", "time_zone": "UTC", "exclude": many}, context=WRITE
        )


# --- properties: an occurrence fires when no exclusion covers it, checked instant by instant ---

ZONES = ["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Beirut"]
FIVE_FIELD = [
    "* * * * SAT,SUN",
    "0-29 * * * *",
    "* 9-17 * * MON-FRI",
    "15 */2 * * *",
    "* * 1,15 * *",
    "* * * 3 *",
]


def covered(exclusion: dict, instant: datetime) -> bool:
    """Whether `exclusion` covers `instant`, by the definitions alone (cronsim for a cron)."""
    if "start" in exclusion:
        return exclusion["start"] <= instant < exclusion["end"]
    wall = instant.astimezone(ZoneInfo(exclusion["time_zone"])).replace(tzinfo=None)
    if "start_date" in exclusion:
        return exclusion["start_date"] <= wall.date() <= exclusion["end_date"]
    return cron_matches(exclusion["cron"], wall.replace(second=0))


@functools.lru_cache(maxsize=100_000)
def cron_matches(expression: str, minute: datetime) -> bool:
    return next(cronsim.CronSim(expression, minute - ONE_SECOND)) == minute


@st.composite
def exclusions(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(["cron", "dates", "instants"]))
    if kind == "cron":
        return {"cron": draw(st.sampled_from(FIVE_FIELD)), "time_zone": draw(st.sampled_from(ZONES))}
    start = draw(st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31)))
    if kind == "dates":
        length = draw(st.integers(min_value=0, max_value=3))
        first = start.date()
        return {
            "start_date": first,
            "end_date": first + timedelta(days=length),
            "time_zone": draw(st.sampled_from(ZONES)),
        }
    begin = start.replace(microsecond=0, tzinfo=UTC)
    return {
        "start": begin,
        "end": begin + timedelta(seconds=draw(st.integers(min_value=1, max_value=3 * 86_400))),
    }


@st.composite
def excluded_schedules(draw: st.DrawFn) -> tuple[Schedule, list[dict]]:
    excl = draw(st.lists(exclusions(), min_size=1, max_size=3))
    fields: dict[str, object]
    if draw(st.booleans()):
        expression = draw(st.sampled_from(["*/15 * * * *", "0 * * * *", "30 1 * * *", "0 9 * * MON-FRI"]))
        fields = {"kind": "cron", "cron": expression, "time_zone": draw(st.sampled_from(ZONES))}
    else:
        fields = {
            "kind": "rate",
            "every_seconds": draw(st.sampled_from([300, 1800, 3600])),
            "anchor": z("2026-01-01T00:07"),
        }
    return Schedule.model_validate({**fields, "exclude": excl}), excl


starts = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31)).map(
    lambda d: d.replace(microsecond=0, tzinfo=UTC)
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(excluded_schedules(), starts)
def test_property_the_occurrences_are_those_no_exclusion_covers(case, start):
    s, excl = case
    end = start + timedelta(days=4)
    raw = fires_between(without_exclusions(s), start, end, 5000)
    expected = [t for t in raw if not any(covered(e, t) for e in excl)]
    assert fires_between(s, start, end, 5000) == expected
    assert count_fires(s, start + ONE_SECOND, end) == len(expected)
    assert count_excluded(s, start + ONE_SECOND, end + ONE_SECOND) == len(raw) - len(expected)
    assert latest_fire_before(s, end + ONE_SECOND, not_before=start + ONE_SECOND) == (
        expected[-1] if expected else None
    )
    for t in raw:
        assert (excluded_by(s, t) is None) == (t in expected)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(excluded_schedules(), starts, st.integers(min_value=1, max_value=300))
def test_property_a_count_under_exclusion_crons_is_bounded_by_its_walk(case, start, walk):
    s, _ = case
    first = next_fire(s, start - ONE_SECOND)
    if first is None:
        return
    last = first + timedelta(days=5)
    through = countable_through(s, first, last, walk)
    assert first <= through <= last
    if through < last:
        assert fires_in(s, through, through + ONE_SECOND, 1) == [through]


def test_the_same_date_is_a_date_whatever_the_exclusion_spells():
    assert (
        Schedule.model_validate(
            {
                "kind": "cron",
                "cron": "0 9 * * *",
                "time_zone": "UTC",
                "exclude": [{"start_date": date(2026, 12, 20), "end_date": "2026-12-20", "time_zone": "UTC"}],
            }
        ).exclude
        is not None
    )
