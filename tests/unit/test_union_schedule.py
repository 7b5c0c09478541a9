"""Union schedules (several cron and rate specs): one occurrence per instant however many specs
fire at it, each spec in its own zone; counting, searching back and bounding a count agree
with walking the merged occurrences."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.models import WRITE, Schedule
from jobsched.domain.schedule import (
    count_fires,
    count_walk,
    countable_through,
    fires_between,
    fires_in,
    latest_fire_before,
    members,
    next_fire,
    upcoming,
)
from pydantic import ValidationError

from .test_cron_vixie import expressions

ONE_SECOND = timedelta(seconds=1)
T0 = datetime(2026, 11, 2, tzinfo=UTC)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def union(*specs: dict, **kw: object) -> Schedule:
    return Schedule.model_validate({"kind": "union", "specs": list(specs), **kw})


def cron(expression: str, zone: str = "UTC") -> dict:
    return {"cron": expression, "time_zone": zone}


def test_weekdays_at_nine_and_saturdays_at_noon():
    s = union(cron("0 9 * * MON-FRI", "Europe/London"), cron("0 12 * * SAT", "Europe/London"))
    # 2026-11-02 is a Monday; London is on GMT, so local times are UTC.
    assert upcoming(s, z("2026-11-02T00:00"), 7) == [
        z("2026-11-02T09:00"),
        z("2026-11-03T09:00"),
        z("2026-11-04T09:00"),
        z("2026-11-05T09:00"),
        z("2026-11-06T09:00"),
        z("2026-11-07T12:00"),
        z("2026-11-09T09:00"),
    ]


def test_an_instant_two_specs_fire_at_is_one_occurrence():
    s = union(cron("0 9 * * *"), cron("0 9 * * MON"), {"every_seconds": 86_400}, anchor=z("2026-11-02T09:00"))
    assert upcoming(s, z("2026-11-01T23:00"), 3) == [
        z("2026-11-02T09:00"),
        z("2026-11-03T09:00"),
        z("2026-11-04T09:00"),
    ]
    assert count_fires(s, z("2026-11-02T00:00"), z("2026-11-30T00:00")) == 28


def test_each_spec_keeps_its_own_zone_across_its_own_dst_change():
    # 09:00 in London and in New York; New York leaves EDT on 2026-11-01, London left BST on 10-25.
    s = union(cron("0 9 * * *", "Europe/London"), cron("0 9 * * *", "America/New_York"))
    assert upcoming(s, z("2026-10-31T00:00"), 4) == [
        z("2026-10-31T09:00"),  # 09:00 GMT
        z("2026-10-31T13:00"),  # 09:00 EDT
        z("2026-11-01T09:00"),
        z("2026-11-01T14:00"),  # 09:00 EST
    ]


def test_bounds_and_dst_policy_of_the_union_hold_for_every_spec():
    s = union(
        cron("30 1 * * *", "Europe/London"),
        {"every_seconds": 3600},
        anchor=z("2026-03-28T00:15"),
        start_at=z("2026-03-29T00:00"),
        end_at=z("2026-03-29T02:00"),
        dst={"gap": "skip", "fold": "first"},
    )
    # London's 01:30 does not exist on 03-29 (gap skipped); the rate runs 00:15, 01:15.
    assert upcoming(s, z("2026-03-28T00:00"), 5) == [z("2026-03-29T00:15"), z("2026-03-29T01:15")]


def test_latest_fire_before_a_union_is_its_members_latest():
    s = union(cron("0 9 * * MON-FRI"), cron("0 12 * * SAT"))
    assert latest_fire_before(s, z("2026-11-09T00:00"), not_before=z("2026-11-02T00:00")) == z(
        "2026-11-07T12:00"
    )
    assert latest_fire_before(s, z("2026-11-02T09:00"), not_before=z("2026-11-02T00:00")) is None


def test_a_union_of_one_spec_fires_as_that_spec():
    one = union(cron("*/7 * * * *", "Asia/Kathmandu"))
    plain = Schedule(kind="cron", cron="*/7 * * * *", time_zone="Asia/Kathmandu")
    assert upcoming(one, T0, 50) == upcoming(plain, T0, 50)
    assert count_fires(one, T0, T0 + timedelta(days=3)) == count_fires(plain, T0, T0 + timedelta(days=3))
    assert members(plain) == [plain]


@pytest.mark.parametrize(
    ("data", "field", "rule"),
    [
        ({"kind": "union", "specs": []}, ("specs",), "at least one spec"),
        ({"kind": "union", "specs": [{"cron": "0 9 * * *"}]}, ("specs", 0, "time_zone"), "required"),
        (
            {"kind": "union", "specs": [{"every_seconds": 5, "cron": "* * * * *"}]},
            ("specs", 0),
            "exactly one",
        ),
        (
            {"kind": "union", "specs": [{"every_seconds": 5, "time_zone": "UTC"}]},
            ("specs", 0, "time_zone"),
            "only",
        ),
        ({"kind": "union", "specs": [cron("0 25 * * *")]}, ("specs", 0, "cron"), "not a valid cron"),
        ({"kind": "union", "specs": [cron("0 9 * * *", "Mars/Base")]}, ("specs", 0, "time_zone"), "IANA"),
        (
            {"kind": "union", "cron": "0 9 * * *", "specs": [cron("0 9 * * *")]},
            ("specs",),
            "cannot be combined",
        ),
        (
            {"kind": "cron", "cron": "0 9 * * *", "time_zone": "UTC", "specs": [cron("0 9 * * *")]},
            ("specs",),
            "only",
        ),
        ({"kind": "union", "specs": [cron("0 9 * * *")] * 11}, ("specs",), "at most 10"),
    ],
)
def test_a_malformed_union_names_the_field_and_the_rule(data, field, rule):
    with pytest.raises(ValidationError) as caught:
        Schedule.model_validate(data, context=WRITE)
    error = caught.value.errors()[0]
    loc = tuple(error["loc"]) + tuple(error.get("ctx", {}).get("loc", ()))
    assert loc == field, caught.value
    assert rule in error["msg"], error["msg"]


def test_a_stored_union_over_the_spec_limit_still_reads():
    """The limit holds for writes; a job stored under a larger one stays readable."""
    assert (
        len(Schedule.model_validate({"kind": "union", "specs": [cron("0 9 * * *")] * 11}).specs or ()) == 11
    )


# --- properties: the union is the sorted set of its members' occurrences ---

ZONES = ["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe"]


@st.composite
def unions(draw: st.DrawFn) -> Schedule:
    specs = []
    for _ in range(draw(st.integers(min_value=2, max_value=4))):
        form = draw(st.sampled_from(["cron", "every", "monthly"]))
        if form == "cron":
            specs.append(cron(draw(expressions()), draw(st.sampled_from(ZONES))))
        elif form == "monthly":
            rule = draw(st.sampled_from(["last-day", "last-weekday", "2nd TUE", "last SUN", "5th FRI"]))
            specs.append({"monthly": rule, "at": "01:30", "time_zone": draw(st.sampled_from(ZONES))})
        else:
            specs.append({"every_seconds": draw(st.sampled_from([60, 90, 300, 3600, 5400, 86_400]))})
    anchor = draw(st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 1, 1)))
    return union(*specs, anchor=anchor.replace(microsecond=0, second=0, tzinfo=UTC))


starts = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31)).map(
    lambda d: d.replace(microsecond=0, tzinfo=UTC)
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(unions(), starts)
def test_property_a_union_fires_at_each_instant_any_member_fires_at_once(schedule: Schedule, start: datetime):
    end = start + timedelta(days=3)
    expected = sorted({t for m in members(schedule) for t in fires_between(m, start, end, 5000)})
    assert fires_between(schedule, start, end, 10_000) == expected
    if expected:
        assert next_fire(schedule, start) == expected[0]
        assert latest_fire_before(schedule, end + ONE_SECOND, not_before=start) == expected[-1]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(unions(), starts, st.integers(min_value=0, max_value=5 * 86_400))
def test_property_counting_a_union_agrees_with_walking_it(schedule: Schedule, first: datetime, length: int):
    last = first + timedelta(seconds=length)
    walked = fires_between(schedule, first - ONE_SECOND, last, 100_000)
    assert count_fires(schedule, first, last) == len(walked)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(unions(), starts, st.integers(min_value=1, max_value=400))
def test_property_countable_through_is_the_latest_occurrence_within_the_walk(
    schedule: Schedule, start: datetime, walk: int
):
    first = next_fire(schedule, start - ONE_SECOND)
    assert first is not None
    last = first + timedelta(days=4)
    through = countable_through(schedule, first, last, walk)
    assert first <= through <= last
    if through < last:
        assert fires_in(schedule, through, through + ONE_SECOND, 1) == [through]  # an occurrence
        assert count_walk(schedule, first, through) <= walk or through == first
        later = next_fire(schedule, through)
        assert later is not None and count_walk(schedule, first, later) > walk
    else:
        assert count_walk(schedule, first, last) <= walk


def test_counting_a_long_range_under_an_exclusion_cron_builds_a_bounded_number_of_walkers(monkeypatch):
    """A week of a per-second union under an exclusion cron: bounding the walk counts each
    spec (no walk of the union at each step of the search), and the excluded ones are counted
    only as far as that bound, so neither builds a cron walker per occurrence of the week."""
    from jobsched.domain import schedule as schedule_math

    s = union(cron("* * * * * *"), cron("*/2 * * * * *"), exclude=[cron("0 0 1 1 *")])
    first, last = T0, T0 + timedelta(days=7)
    built = 0
    real = schedule_math.croniter

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal built
        built += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(schedule_math, "croniter", counted)
    through = countable_through(s, first, last)
    assert count_walk(s, first, through) <= schedule_math.MAX_COUNT_WALK < count_walk(s, first, last)
    assert schedule_math.count_excluded(s, first, last) == 0
    assert built <= schedule_math.MAX_COUNT_WALK, built


def test_counting_a_dense_count_walks_only_the_sparser_specs():
    """Every second plus weekdays at 09:00 over 30 days: the densest member is counted by
    arithmetic, the other walked (22 occurrences, Nov 2 to Dec 1), so the count takes no
    walk of 2.6 million."""
    s = union({"every_seconds": 1}, cron("0 9 * * MON-FRI"), anchor=T0)
    first, last = T0, T0 + timedelta(days=30) - ONE_SECOND
    assert count_walk(s, first, last) == 22
    assert count_fires(s, first, last) == 30 * 86_400
    assert countable_through(s, first, last) == last
