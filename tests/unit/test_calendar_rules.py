"""Calendar rules (a union's `monthly` specs): last day, last weekday, nth and last day of the
week of each month. Hand-worked cases across DST, leap years and month ends; properties
against the `calendar` module and against croniter's own `L` and `#` forms."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.models import WRITE, Schedule
from jobsched.domain.schedule import count_fires, fires_between, latest_fire_before, upcoming
from pydantic import ValidationError

WEEKDAYS = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def monthly(rule: str, at: str, zone: str = "UTC", **kw: object) -> Schedule:
    return Schedule.model_validate(
        {"kind": "union", "specs": [{"monthly": rule, "at": at, "time_zone": zone}], **kw}, context=WRITE
    )


@pytest.mark.parametrize(
    ("rule", "at", "zone", "after", "expected"),
    [
        # Leap year: February's last day is the 29th in 2028, the 28th in 2027.
        (
            "last-day",
            "12:00",
            "UTC",
            "2027-01-15",
            ["2027-01-31T12:00", "2027-02-28T12:00", "2027-03-31T12:00"],
        ),
        (
            "last-day",
            "12:00",
            "UTC",
            "2028-01-31T12:00",
            ["2028-02-29T12:00", "2028-03-31T12:00", "2028-04-30T12:00"],
        ),
        # The last Monday to Friday: 2026-01-31 is a Saturday, 05-31 a Sunday, 03-31 a Tuesday.
        (
            "last-weekday",
            "17:00",
            "Europe/London",
            "2026-01-01",
            [
                "2026-01-30T17:00",
                "2026-02-27T17:00",
                "2026-03-31T16:00",
                "2026-04-30T16:00",
                "2026-05-29T16:00",
            ],
        ),
        # New York leaves EST on 2026-03-08: the 2nd Tuesday moves from 14:00Z to 13:00Z.
        (
            "2nd TUE",
            "09:00",
            "America/New_York",
            "2026-02-01",
            ["2026-02-10T14:00", "2026-03-10T13:00", "2026-04-14T13:00"],
        ),
        # A 5th Monday only in the months that have one.
        (
            "5th MON",
            "00:00:30",
            "UTC",
            "2026-01-01",
            ["2026-03-30T00:00:30", "2026-06-29T00:00:30", "2026-08-31T00:00:30", "2026-11-30T00:00:30"],
        ),
        (
            "last FRI",
            "18:00",
            "UTC",
            "2026-01-01",
            ["2026-01-30T18:00", "2026-02-27T18:00", "2026-03-27T18:00"],
        ),
        # London's last Sundays of March and October are its DST days: 01:30 on 03-29 does not
        # exist (shifted to the transition, 01:00Z), and on 10-25 happens twice (first: 00:30Z).
        ("last SUN", "01:30", "Europe/London", "2026-03-01", ["2026-03-29T01:00", "2026-04-26T00:30"]),
        ("last SUN", "01:30", "Europe/London", "2026-10-01", ["2026-10-25T00:30", "2026-11-29T01:30"]),
    ],
)
def test_hand_worked_cases(rule, at, zone, after, expected):
    assert upcoming(monthly(rule, at, zone), z(after), len(expected)) == [z(t) for t in expected]


def test_the_dst_policy_holds_for_a_rule():
    skip = monthly("last SUN", "01:30", "Europe/London", dst={"gap": "skip", "fold": "last"})
    assert upcoming(skip, z("2026-03-01T00:00"), 1) == [z("2026-04-26T00:30")]  # March's is skipped
    assert upcoming(skip, z("2026-10-01T00:00"), 1) == [z("2026-10-25T01:30")]  # the fold's last reading


def test_a_rule_is_counted_and_searched_back_as_it_is_walked():
    s = monthly("last-weekday", "17:00", "Europe/London")
    first, last = z("2026-01-01T00:00"), z("2030-12-31T23:59:59")
    assert count_fires(s, first, last) == 60
    assert latest_fire_before(s, z("2026-06-01T00:00"), not_before=first) == z("2026-05-29T16:00")


@pytest.mark.parametrize(
    ("spec", "field", "rule"),
    [
        (
            {"monthly": "last-week", "at": "09:00", "time_zone": "UTC"},
            ("specs", 0, "monthly"),
            "must be last-day",
        ),
        (
            {"monthly": "6th MON", "at": "09:00", "time_zone": "UTC"},
            ("specs", 0, "monthly"),
            "must be last-day",
        ),
        (
            {"monthly": "2nd TUESDAY", "at": "09:00", "time_zone": "UTC"},
            ("specs", 0, "monthly"),
            "must be last-day",
        ),
        ({"monthly": "last-day", "at": "24:00", "time_zone": "UTC"}, ("specs", 0, "at"), "HH:MM"),
        ({"monthly": "last-day", "at": "9:00", "time_zone": "UTC"}, ("specs", 0, "at"), "HH:MM"),
        ({"monthly": "last-day", "time_zone": "UTC"}, ("specs", 0, "at"), "required with monthly"),
        ({"cron": "0 9 * * *", "at": "09:00", "time_zone": "UTC"}, ("specs", 0, "at"), "applies only"),
        (
            {"monthly": "last-day", "cron": "0 9 * * *", "at": "09:00", "time_zone": "UTC"},
            ("specs", 0),
            "exactly one",
        ),
        ({"monthly": "last-day", "at": "09:00"}, ("specs", 0, "time_zone"), "required with monthly"),
    ],
)
def test_a_malformed_rule_names_the_field_and_the_rule(spec, field, rule):
    with pytest.raises(ValidationError) as caught:
        Schedule.model_validate({"kind": "union", "specs": [spec]}, context=WRITE)
    error = caught.value.errors()[0]
    loc = tuple(error["loc"]) + tuple(error.get("ctx", {}).get("loc", ()))
    assert loc == field, caught.value
    assert rule in error["msg"], error["msg"]


def test_a_rule_is_stored_normalised():
    s = monthly("  2ND tue ", "09:00")
    assert s.specs is not None and s.specs[0].monthly == "2nd TUE"


# --- properties ---

RULES = [
    "last-day",
    "last-weekday",
    *[f"{n} {d}" for n in ("1st", "2nd", "3rd", "4th", "5th", "last") for d in WEEKDAYS],
]
ZONES = ["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"]


def day_by_the_calendar(rule: str, year: int, month: int) -> int | None:
    """The rule's day of the month, read off `calendar.monthcalendar`'s weeks."""
    weeks = calendar.monthcalendar(year, month)
    if rule == "last-day":
        return max(day for week in weeks for day in week)
    if rule == "last-weekday":
        return max(day for week in weeks for day in week[:5])
    which, name = rule.split(" ")
    days = [week[WEEKDAYS.index(name)] for week in weeks if week[WEEKDAYS.index(name)]]
    if which == "last":
        return days[-1]
    n = int(which[0])
    return days[n - 1] if n <= len(days) else None


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    st.sampled_from(RULES),
    st.integers(min_value=1990, max_value=2060),
    st.integers(min_value=0, max_value=23),
    st.integers(min_value=0, max_value=59),
)
def test_property_one_occurrence_a_month_on_the_calendars_day(rule, year, hour, minute):
    s = monthly(rule, f"{hour:02d}:{minute:02d}")
    found = fires_between(
        s,
        datetime(year, 1, 1, tzinfo=UTC) - timedelta(seconds=1),
        datetime(year, 12, 31, 23, 59, tzinfo=UTC),
        20,
    )
    expected = [
        datetime(year, month, day, hour, minute, tzinfo=UTC)
        for month in range(1, 13)
        if (day := day_by_the_calendar(rule, year, month)) is not None
    ]
    assert found == expected


CRONITER_FORMS = {
    "last-day": "L * *",
    **{f"last {d}": f"* * L{i}" for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])},
}
CRONITER_FORMS.update(
    {
        f"{n} {d}": f"* * {i}#{n[0]}"
        for n in ("1st", "2nd", "3rd", "4th", "5th")
        for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
    }
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    st.sampled_from(sorted(CRONITER_FORMS)),
    st.sampled_from(ZONES),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1)),
    st.sampled_from(["00:30", "01:30", "02:15", "09:00", "23:59"]),
)
def test_property_a_rule_fires_as_croniters_own_form_does(rule, zone, start, at):
    """croniter spells most rules as a cron (`L`, `L5`, `2#3`): the same instants, DST included."""
    hour, minute = at.split(":")
    cron = Schedule.model_validate(
        {"kind": "cron", "cron": f"{int(minute)} {int(hour)} {CRONITER_FORMS[rule]}", "time_zone": zone}
    )
    after = start.replace(tzinfo=UTC)
    assert upcoming(monthly(rule, at, zone), after, 14) == upcoming(cron, after, 14)
