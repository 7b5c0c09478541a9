"""Calendar references in a schedule, resolved (domain.schedule.resolve): an exclusion
`{"calendar": name}` leaves out what the calendar's entries cover, its days read in the
exclusion's zone; an unresolved reference never passes for an empty calendar; and what the
due index follows (`index_schedule`) fires at every instant the resolved schedule does."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.calendars import MAX_CALENDAR_ENTRIES, Calendar, UnresolvedCalendar
from jobsched.domain.models import MAX_CALENDARS_PER_JOB, WRITE, Schedule
from jobsched.domain.schedule import (
    count_excluded,
    count_fires,
    fires_between,
    index_schedule,
    next_fire,
    preview,
    resolve,
    upcoming,
)
from pydantic import ValidationError


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def daily(zone: str = "UTC", *more: dict, **kw: object) -> Schedule:
    exclude = [{"calendar": "hols", "time_zone": zone}, *more]
    return Schedule.model_validate(
        {"kind": "cron", "cron": "0 9 * * *", "time_zone": zone, "exclude": exclude, **kw}, context=WRITE
    )


def calendar(*entries: dict) -> Calendar:
    return Calendar.model_validate({"name": "hols", "entries": list(entries)}, context=WRITE)


def test_dates_ranges_and_instants_of_a_calendar_are_left_out():
    hols = calendar(
        {"date": "2026-12-25"},
        {"startDate": "2026-12-28", "endDate": "2026-12-29"},
        {"start": "2026-12-31T14:00:00Z", "end": "2026-12-31T15:00:00Z"},
    )
    s = resolve(daily("America/New_York"), {"hols": hols})
    assert upcoming(s, z("2026-12-24T00:00"), 4) == [
        z("2026-12-24T14:00"),
        z("2026-12-26T14:00"),
        z("2026-12-27T14:00"),
        z("2026-12-30T14:00"),
    ]
    assert next_fire(s, z("2026-12-30T14:00")) == z("2027-01-01T14:00")
    assert count_excluded(s, z("2026-12-24T14:00"), z("2027-01-01T14:00")) == 4
    assert count_fires(s, z("2026-12-24T14:00"), z("2027-01-01T14:00")) == 5


def test_a_calendars_days_are_read_in_the_zone_of_the_reference():
    # 09:00 in Tokyo on the 25th is 00:00Z on the 25th; in Honolulu it is 19:00Z on the 25th.
    hols = calendar({"date": "2026-12-25"})
    assert next_fire(resolve(daily("Asia/Tokyo"), {"hols": hols}), z("2026-12-24T01:00")) == z(
        "2026-12-26T00:00"
    )
    assert next_fire(resolve(daily("Pacific/Honolulu"), {"hols": hols}), z("2026-12-24T20:00")) == z(
        "2026-12-26T19:00"
    )


def test_preview_names_the_calendar_that_left_an_occurrence_out():
    s = resolve(
        daily("UTC", {"cron": "* * * * SAT,SUN", "time_zone": "UTC"}),
        {"hols": calendar({"date": "2026-12-25"})},
    )
    lines = preview(s, z("2026-12-24T10:00"), 2)
    assert [(line.at, line.fires, line.reason) for line in lines] == [
        (z("2026-12-25T09:00"), False, "excluded by exclude.0 (calendar hols, its days in UTC)"),
        (z("2026-12-26T09:00"), False, "excluded by exclude.1 (cron * * * * SAT,SUN in UTC)"),
        (z("2026-12-28T09:00"), True, None),
        (z("2026-12-29T09:00"), True, None),
    ]


def test_an_unresolved_reference_raises_instead_of_counting_as_empty():
    with pytest.raises(UnresolvedCalendar):
        next_fire(daily(), z("2026-12-24T00:00"))
    with pytest.raises(UnresolvedCalendar) as caught:
        resolve(daily(), {})
    assert caught.value.field == "exclude.0.calendar"


def test_resolution_is_by_name_only_and_keeps_the_reference_as_written():
    s = daily()
    resolved = resolve(s, {"hols": calendar({"date": "2026-12-25"}), "other": calendar()})
    assert resolved.model_dump(mode="json") == s.model_dump(
        mode="json"
    )  # a resolved schedule stores as written
    assert (
        resolve(Schedule.model_validate({"kind": "cron", "cron": "0 9 * * *", "time_zone": "UTC"}), {})
        is not None
    )


def test_a_calendar_covering_everything_ends_the_occurrence_stream_without_spinning():
    hols = calendar({"startDate": "1970-01-01", "endDate": "9998-12-31"})
    s = resolve(daily(), {"hols": hols})
    assert next_fire(s, z("2026-12-24T00:00")) is None
    assert next_fire(index_schedule(daily()), z("2026-12-24T00:00")) == z("2026-12-24T09:00")


@pytest.mark.parametrize(
    ("data", "field", "text"),
    [
        (
            {"entries": [{"date": "2026-01-01", "start": "2026-01-01T00:00:00Z"}]},
            ("entries", 0),
            "exactly one",
        ),
        (
            {"entries": [{"startDate": "2026-01-02", "endDate": "2026-01-01"}]},
            ("entries", 0, "end_date"),
            "before",
        ),
        ({"entries": [{"startDate": "2026-01-02"}]}, ("entries", 0, "end_date"), "pair"),
        (
            {"entries": [{"start": "2026-01-02T00:00:00Z", "end": "2026-01-02T00:00:00Z"}]},
            ("entries", 0, "end"),
            "after",
        ),
        ({"entries": [{"date": "1969-12-31"}]}, ("entries", 0, "date"), "1970"),
        ({"entries": [{"date": "2026-01-01"}] * (MAX_CALENDAR_ENTRIES + 1)}, ("entries",), "at most 1000"),
        ({"name": "a/b"}, ("name",), "letters"),
        ({"name": "x" * 65}, ("name",), "letters"),
        ({"name": "-a"}, ("name",), "letters"),
    ],
)
def test_a_calendar_breaking_a_rule_names_the_field(data, field, text):
    with pytest.raises(ValidationError) as caught:
        Calendar.model_validate({"name": "hols", **data}, context=WRITE)
    error = caught.value.errors()[0]
    loc = tuple(error["loc"]) + tuple(error.get("ctx", {}).get("loc", ()))
    assert loc == field, caught.value
    assert text in error["msg"], error["msg"]


@pytest.mark.parametrize(
    "names", [[f"c{n}" for n in range(6)], ["c"] * 6], ids=["distinct", "one, six times"]
)
def test_a_schedule_references_calendars_at_most_a_few_times_naming_exclude(names):
    """Each reference is resolved on its own (in its own zone), so the same calendar six
    times costs what six calendars do: refused alike, naming `exclude`."""
    assert len(names) == MAX_CALENDARS_PER_JOB + 1
    exclude = [
        {"calendar": name, "time_zone": zone}
        for name, zone in zip(names, ["UTC", "Asia/Tokyo"] * 3, strict=True)
    ]
    with pytest.raises(ValidationError) as caught:
        Schedule.model_validate(
            {"kind": "cron", "cron": "0 9 * * *", "time_zone": "UTC", "exclude": exclude}, context=WRITE
        )
    error = caught.value.errors()[0]
    assert tuple(error["loc"]) + tuple(error.get("ctx", {}).get("loc", ())) == ("exclude",), error
    assert "at most 5 times in all; got 6" in error["msg"]
    allowed = exclude[:MAX_CALENDARS_PER_JOB]
    assert Schedule.model_validate(
        {"kind": "cron", "cron": "0 9 * * *", "time_zone": "UTC", "exclude": allowed}, context=WRITE
    ).calendar_names


# --- properties ---

DAYS = st.integers(min_value=0, max_value=60)


@st.composite
def entries(draw: st.DrawFn) -> list[dict]:
    start = date(2026, 10, 1)
    found: list[dict] = []
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        kind = draw(st.sampled_from(["date", "dates", "instants"]))
        first = start + timedelta(days=draw(DAYS))
        if kind == "date":
            found.append({"date": str(first)})
        elif kind == "dates":
            found.append(
                {"startDate": str(first), "endDate": str(first + timedelta(days=draw(st.integers(0, 4))))}
            )
        else:
            a = datetime.combine(first, datetime.min.time(), UTC) + timedelta(
                minutes=draw(st.integers(0, 2880))
            )
            b = a + timedelta(minutes=draw(st.integers(1, 3000)))
            found.append({"start": a.strftime("%Y-%m-%dT%H:%M:%SZ"), "end": b.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return found


def covered(instant: datetime, zone: str, listed: list[dict]) -> bool:
    """Whether a calendar of `listed` entries covers `instant`, read entry by entry."""
    from zoneinfo import ZoneInfo

    local_day = instant.astimezone(ZoneInfo(zone)).date()
    for entry in listed:
        if "date" in entry and local_day == date.fromisoformat(entry["date"]):
            return True
        if "startDate" in entry and date.fromisoformat(entry["startDate"]) <= local_day <= date.fromisoformat(
            entry["endDate"]
        ):
            return True
        if "start" in entry and z(entry["start"][:-1]) <= instant < z(entry["end"][:-1]):
            return True
    return False


@settings(max_examples=80, deadline=None, derandomize=True)
@given(entries(), st.sampled_from(["UTC", "Europe/London", "America/New_York", "Asia/Kathmandu"]))
def test_property_a_resolved_calendar_leaves_out_exactly_what_its_entries_cover(listed, zone):
    raw = Schedule.model_validate({"kind": "cron", "cron": "0 */5 * * *", "time_zone": zone})
    s = resolve(daily(zone).model_copy(update={"cron": "0 */5 * * *"}), {"hols": calendar(*listed)})
    after, until = z("2026-09-30T00:00"), z("2026-12-15T00:00")
    expected = [t for t in fires_between(raw, after, until, 1000) if not covered(t, zone, listed)]
    assert fires_between(s, after, until, 1000) == expected
    assert count_fires(s, after + timedelta(seconds=1), until) == len(expected)
    # The due index fires at every instant the resolved schedule fires at.
    index = set(fires_between(index_schedule(s), after, until, 1000))
    assert set(expected) <= index
