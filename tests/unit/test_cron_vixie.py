"""Cron semantics as Vixie cron and cronie define them, checked against an independent
implementation: cronsim (a cronie-compatible evaluator on PyPI) on random expressions.

The either-or rule for days: when day-of-month and day-of-week are both restricted, a day
matching either fires; when either field starts with `*` (`*`, `*/8`), a day must match
both. `26,52 * */8 * SUN-WED` fires only on the 1st, 9th, 17th and 25th that fall on
Sunday to Wednesday.

Where the two are not compared, and why: cronsim evaluates a naive or zone-aware clock
with cronie's DST handling, while jobsched maps wall-clock matches to instants under the
job's own gap/fold policy (tests/unit/test_schedule.py), so the comparison runs in UTC;
cronsim has no seconds field, so 6-field expressions are checked as their 5-field
minutes times the seconds field; and a one-value range with a step (`5-5/2`), which
cronsim reads as `5-59/2`, is checked by example (cron reads it as 5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.cron import day_or
from jobsched.domain.models import Schedule
from jobsched.domain.schedule import upcoming

cronsim = pytest.importorskip("cronsim")

# Both implementations search at least this far for the next match; beyond it they may
# differ on purpose (jobsched gives up after eight years, as a job that rare is a mistake).
CUTOFF = timedelta(days=365 * 7)
COUNT = 12

FIELDS = {  # name: (low, high, names)
    "minute": (0, 59, []),
    "hour": (0, 23, []),
    "day_of_month": (1, 31, []),
    "month": (1, 12, ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]),
    "day_of_week": (0, 7, ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]),
}


@st.composite
def element(draw: st.DrawFn, low: int, high: int, names: list[str]) -> str:
    """One element of a list: a value, a range, either with a step, or a name."""
    kind = draw(
        st.sampled_from(
            ["value", "range", "range-step", "name"] if names else ["value", "range", "range-step"]
        )
    )
    if kind == "name":
        return draw(st.sampled_from(names))
    a = draw(st.integers(low, high))
    if kind == "value":
        return str(a)
    if kind == "range-step" and a < high:
        # A one-value range with a step (5-5/2) is left out: cronsim reads it as 5-max/2,
        # cron as 5 (test_a_range_of_one_value_is_that_value).
        return f"{a}-{draw(st.integers(a + 1, high))}/{draw(st.integers(1, max(1, high - low)))}"
    return f"{a}-{draw(st.integers(a, high))}"


@st.composite
def field(draw: st.DrawFn, name: str) -> str:
    low, high, names = FIELDS[name]
    shape = draw(st.sampled_from(["star", "star-step", "list"]))
    if shape == "star":
        return "*"
    if shape == "star-step":
        return f"*/{draw(st.integers(1, high - low + 1))}"
    return ",".join(draw(st.lists(element(low, high, names), min_size=1, max_size=3)))


@st.composite
def expressions(draw: st.DrawFn) -> str:
    return " ".join(draw(field(name)) for name in FIELDS)


def starts() -> st.SearchStrategy[datetime]:
    return st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31)).map(
        lambda d: d.replace(microsecond=0)
    )


def reference(expression: str, start: datetime, count: int = COUNT) -> list[datetime] | None:
    """cronsim's next fire times (UTC), strictly after `start`, up to the cutoff; None when
    cronsim refuses the expression (an impossible date such as Feb 30)."""
    try:
        found = cronsim.CronSim(expression, start)
    except cronsim.CronSimError:
        return None
    limit = start + CUTOFF
    return [t.replace(tzinfo=UTC) for t in islice(found, count) if t <= limit]


def ours(expression: str, start: datetime, count: int = COUNT) -> list[datetime]:
    schedule = Schedule(kind="cron", cron=expression, time_zone="UTC")
    limit = (start + CUTOFF).replace(tzinfo=UTC)
    return [t for t in upcoming(schedule, start.replace(tzinfo=UTC), count) if t <= limit]


DIFFERENTIAL = settings(max_examples=400, deadline=None, derandomize=True)


@DIFFERENTIAL
@given(expressions(), starts())
def test_five_field_expressions_fire_as_cronie_does(expression: str, start: datetime) -> None:
    expected = reference(expression, start)
    if expected is None:
        return  # never fires; jobsched refuses such a job when it is written
    got = ours(expression, start)
    assert got == expected[: len(got)] and len(got) == min(len(expected), COUNT), expression


SECONDS = ["0", "30", "*/20", "15,45", "0-10/5"]


def seconds_of(spec: str) -> list[int]:
    out: set[int] = set()
    for part in spec.split(","):
        body, _, step = part.partition("/")
        low, high = (0, 59) if body == "*" else (int(body.split("-")[0]), int(body.split("-")[-1]))
        out.update(range(low, high + 1, int(step or 1)))
    return sorted(out)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(expressions(), starts(), st.sampled_from(SECONDS))
def test_six_field_expressions_are_the_five_field_minutes_at_each_second(
    expression: str, start: datetime, seconds: str
) -> None:
    minutes = reference(expression, start - timedelta(minutes=1), COUNT)
    if not minutes:
        return
    expected = [m + timedelta(seconds=s) for m in minutes for s in seconds_of(seconds)]
    expected = [t for t in expected if t > start.replace(tzinfo=UTC)][:COUNT]
    got = ours(f"{seconds} {expression}", start, len(expected))
    assert got == expected, f"{seconds} {expression}"


@pytest.mark.parametrize(
    ("expression", "first_days"),
    [
        # One field starts with '*': both must match (1, 9, 17, 25 that are Sun-Wed).
        ("26,52 * */8 * SUN-WED", ["2026-11-09", "2026-11-17", "2026-11-25"]),
        ("0 0 */8 * MON", ["2026-11-09", "2027-01-25", "2027-02-01"]),
        ("0 0 1,15 * */3", ["2026-11-15", "2027-05-01", "2027-05-15"]),
        # Both restricted without '*': either matches.
        ("0 0 1-31/8 * SUN-WED", ["2026-11-03", "2026-11-04", "2026-11-08"]),
        ("0 0 1 * MON", ["2026-11-09", "2026-11-16", "2026-11-23"]),
        # A plain '*' in one field leaves the other alone.
        ("0 0 * * MON", ["2026-11-09", "2026-11-16", "2026-11-23"]),
        ("0 0 */10 * *", ["2026-11-11", "2026-11-21", "2026-12-01"]),
    ],
)
def test_the_either_or_rule_for_days(expression: str, first_days: list[str]) -> None:
    start = datetime(2026, 11, 2, 1, 0)
    days = sorted({t.date().isoformat() for t in ours(expression, start, 200)})[:3]
    assert days == first_days
    assert days == sorted({t.date().isoformat() for t in reference(expression, start, 200) or []})[:3]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [("26,52 * */8 * SUN-WED", False), ("0 0 1 * MON", True), ("0 0 * * *", False), ("@daily", True)],
)
def test_day_or_follows_the_first_character_of_the_day_fields(expression: str, expected: bool) -> None:
    assert day_or(expression) is expected
    assert day_or("0 " + expression) is expected or expression.startswith("@")


def test_the_rule_holds_on_a_dst_day() -> None:
    """London springs forward on Sunday 2026-03-29; 29 is no */8 day, so an AND cron does
    not fire then, gap or not. The next days that are both are Wednesday 1 April and
    Sunday 17 May (9, 17 and 25 April are Thursday to Saturday)."""
    schedule = Schedule(kind="cron", cron="30 1 */8 * SUN-WED", time_zone="Europe/London")
    got = upcoming(schedule, datetime(2026, 3, 28, tzinfo=UTC), 2)
    assert got == [datetime(2026, 4, 1, 0, 30, tzinfo=UTC), datetime(2026, 5, 17, 0, 30, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("expression", "first"),
    [
        ("0 0 * * 0-0", "2026-11-08T00:00:00+00:00"),  # Sunday, not every day
        ("0 0 * * MON-MON", "2026-11-09T00:00:00+00:00"),
        ("0 0 * * 5-5/2", "2026-11-06T00:00:00+00:00"),  # Friday only, not */2
        ("0 0 * * 3-3,5", "2026-11-04T00:00:00+00:00"),
        ("0 5-5 * * *", "2026-11-02T05:00:00+00:00"),
    ],
)
def test_a_range_of_one_value_is_that_value(expression: str, first: str) -> None:
    got = ours(expression, datetime(2026, 11, 2, 1, 0), 2)
    assert got[0].isoformat() == first
    assert got[1] - got[0] >= timedelta(days=1)
