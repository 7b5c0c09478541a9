"""When a schedule fires: once, fixed rate, cron in an IANA zone under a DST policy, or a
union of crons and rates (one occurrence per instant, however many of its specs fire then);
less the instants its exclusions cover.

Nothing here reads the clock; the reference instant is always an argument. Every instant
returned is aware UTC with whole seconds."""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from itertools import islice, takewhile
from typing import Any
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from .calendars import (
    Calendar,
    CalendarExclusion,
    HolidaySpec,
    UnresolvedCalendar,
    in_days,
)
from .cron import (
    check_cron_expression,
    check_time_of_day,
    croniter_form,
    day_or,
    has_seconds_field,
    monthly_cron,
    monthly_day,
    zone,
)
from .instants import UnrepresentableInstant, to_utc
from .models import DstFold, DstGap, DstPolicy, Exclusion, Schedule, ScheduleKind, ScheduleSpec

_ONE_SECOND = timedelta(seconds=1)
_ZERO = timedelta(0)
# Longest wall-clock stretch searched for the next match. Eight years because a Feb 29
# cron has no match between 2096 and 2104.
_HORIZON_YEARS = 8
_HORIZON = timedelta(days=366 * _HORIZON_YEARS)

# Validating an expression builds a croniter; remembering the pure str -> str result keeps
# next_fire cheap when a sweep evaluates the same expressions over and over.
_normalised = lru_cache(maxsize=1024)(check_cron_expression)


def next_fire(schedule: Schedule, after: datetime) -> datetime | None:
    """First occurrence strictly after `after`, within start_at/end_at; None when there is none.

    max_runs is not considered: the caller counts runs."""
    return next(_occurrences(schedule, after), None)


def fires_between(schedule: Schedule, after: datetime, until: datetime, limit: int) -> list[datetime]:
    """Occurrences t with after < t <= until, ascending, at most `limit` of them."""
    if limit <= 0:
        return []
    until = to_utc(until)
    found: list[datetime] = []
    for instant in _occurrences(schedule, after):
        if instant > until:
            break
        found.append(instant)
        if len(found) >= limit:
            break
    return found


def fires_in(schedule: Schedule, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """Occurrences t with start <= t < end (a half-open window, as a backfill's), ascending,
    at most `limit` of them; none when end <= start. Bounds may carry fractions of a second:
    occurrences are whole seconds, so each bound counts as the whole second at or after it
    (an end of 05:00:00.5 keeps 05:00:00)."""
    start, end = whole_second_up(start), whole_second_up(end)
    return fires_between(schedule, start - _ONE_SECOND, end - _ONE_SECOND, limit)


def whole_second_up(instant: datetime) -> datetime:
    """`instant` in UTC, a fraction of a second rounded up to the next whole second."""
    whole = to_utc(instant)
    return whole if whole == instant else whole + _ONE_SECOND


def latest_fire_before(schedule: Schedule, before: datetime, *, not_before: datetime) -> datetime | None:
    """The last occurrence t with not_before <= t < before, or None.

    Costs about the occurrences in the last window searched, never all of [not_before, before):
    rates are computed, others are searched backwards in windows that double in length."""
    before, not_before = to_utc(before), to_utc(not_before)
    if before <= not_before:
        return None
    if schedule.kind is ScheduleKind.UNION:
        # The union's latest is the latest of its members' latest ones.
        latest_each = [latest_fire_before(m, before, not_before=not_before) for m in members(schedule)]
        return max((t for t in latest_each if t is not None), default=None)
    if schedule.kind is ScheduleKind.RATE and schedule.end_at is None and not schedule.exclude:
        assert schedule.anchor is not None and schedule.every_seconds is not None
        step = timedelta(seconds=schedule.every_seconds)
        anchor = to_utc(schedule.anchor)
        if schedule.start_at is not None:
            not_before = max(not_before, to_utc(schedule.start_at))
        if before <= anchor:
            return None
        latest = anchor + ((before - _ONE_SECOND - anchor) // step) * step
        return latest if latest >= not_before else None
    width = _ONE_SECOND
    while True:
        start = max(not_before, before - width)
        found = fires_in(schedule, start, before, limit=_SEARCH_LIMIT)
        if found and len(found) < _SEARCH_LIMIT:
            return found[-1]
        if found:  # too many in this window: the latest is in its last part
            width = max(_ONE_SECOND, (before - found[-1]) * 2)
            continue
        if start <= not_before:
            return None
        width *= 2


_SEARCH_LIMIT = 4096


def uncovered(
    schedule: Schedule, first: datetime, last: datetime, covered: list[tuple[datetime, datetime]]
) -> list[tuple[datetime, datetime]]:
    """The stretches (first occurrence, last occurrence) of [first, last] that no span of
    `covered` holds, ascending. `first` must be an occurrence; each span is a stored
    record's (scheduled_for, skipped_through or scheduled_for), in any order. Costs about the
    spans, never the occurrences between them."""
    first, last = to_utc(first), to_utc(last)
    stretches: list[tuple[datetime, datetime]] = []
    cursor: datetime | None = first
    for start, end in sorted((to_utc(a), to_utc(b)) for a, b in covered):
        if cursor is None or cursor > last:
            break
        if end < cursor:
            continue
        if start > cursor:
            before = latest_fire_before(schedule, min(start, last + _ONE_SECOND), not_before=cursor)
            if before is not None:
                stretches.append((cursor, before))
        cursor = next_fire(schedule, end)
    if cursor is not None and cursor <= last:
        stretches.append((cursor, last))
    return stretches


def count_fires(schedule: Schedule, first: datetime, last: datetime) -> int:
    """How many occurrences t with first <= t <= last, exactly, without visiting each one.

    Rates are counted in O(1). A cron is counted by calendar arithmetic on wall time
    (whole matching days, then hours, minutes, seconds at the two ends), which costs about
    the matching days in the range; only the hours around a DST transition are walked.
    A union adds to its densest member's count the occurrences of the others that no member
    counted before fires at; exclusions of dates and instants take off the occurrences in
    their spans, and an exclusion cron has every occurrence walked: so a count walks up to
    `count_walk(schedule, first, last)` occurrences; bound that first (`countable_through`)."""
    first, last = to_utc(first), to_utc(last)
    if schedule.exclude:
        return _count_unexcluded(schedule, first, last)
    if schedule.kind is ScheduleKind.UNION:
        parts = members(schedule)
        if len(parts) > 1:
            return _count_union(parts, first, last)
        schedule = parts[0]
    if schedule.monthly is not None:
        # A calendar rule's days are walked: a handful a month.
        return sum(1 for _ in takewhile(lambda t: t <= last, _occurrences(schedule, first - _ONE_SECOND)))
    if schedule.start_at is not None:
        first = max(first, to_utc(schedule.start_at))
    if schedule.end_at is not None:
        last = min(last, to_utc(schedule.end_at))
    if last < first:
        return 0
    if schedule.kind is ScheduleKind.RATE:
        assert schedule.anchor is not None and schedule.every_seconds is not None
        anchor = to_utc(schedule.anchor)
        step = timedelta(seconds=schedule.every_seconds)
        lo = max(first, anchor)
        if last < lo:
            return 0
        first_k = -((anchor - lo) // step)  # ceil((lo - anchor) / step)
        last_k = (last - anchor) // step
        return max(0, last_k - first_k + 1)
    if schedule.kind is ScheduleKind.ONCE:
        assert schedule.at is not None
        return int(first <= to_utc(schedule.at) <= last)
    assert schedule.cron is not None and schedule.time_zone is not None
    tz = zone(schedule.time_zone)
    counter = _WallCounter(_normalised(schedule.cron))
    total = 0
    cursor = first
    for window_lo, window_hi in _dst_windows(tz, first, last):
        if cursor < window_lo:
            total += counter.count(*_plain_wall(cursor, window_lo - _ONE_SECOND, tz))
        # Around a transition wall time maps to instants under the job's DST policy: walk it.
        lo = max(cursor, window_lo)
        total += len(fires_between(schedule, lo - _ONE_SECOND, window_hi, limit=_WINDOW_LIMIT))
        cursor = window_hi + _ONE_SECOND
    if cursor <= last:
        total += counter.count(*_plain_wall(cursor, last, tz))
    return total


# A DST window is at most a day (Pacific/Apia skipped 2011-12-30) either side of its
# transition: at most 2 * 86,400 occurrences for a per-second cron.
_WINDOW_LIMIT = 2 * 86_400 + 1
# Transitions are found by reading the UTC offset this often; zones never change offset twice
# within six hours.
_OFFSET_PROBE = timedelta(hours=6)
_PROBE_MARGIN = timedelta(days=1)


def _dst_windows(tz: ZoneInfo, first: datetime, last: datetime) -> list[tuple[datetime, datetime]]:
    """UTC ranges [T - d, T + d] around each offset change T (d = the change), clipped to
    [first, last] and merged. Outside them wall time is UTC plus one constant offset, and no
    wall time from a gap or fold maps there."""
    windows: list[tuple[datetime, datetime]] = []
    # A change up to a day outside the range still shapes its ends (a shifted gap occurrence
    # at the range's first instant, a fold's second reading): probe a day either side.
    probe, end = first - _PROBE_MARGIN, last + _PROBE_MARGIN
    offset = probe.astimezone(tz).utcoffset()
    while probe < end:
        following = min(probe + _OFFSET_PROBE, end)
        next_offset = following.astimezone(tz).utcoffset()
        if next_offset != offset:
            assert offset is not None and next_offset is not None
            transition = _transition(probe, following, tz)
            change = abs(next_offset - offset)
            lo, hi = max(first, transition - change), min(last, transition + change)
            if lo > hi:
                probe, offset = following, next_offset
                continue
            if windows and lo <= windows[-1][1] + _ONE_SECOND:
                windows[-1] = (windows[-1][0], max(windows[-1][1], hi))
            else:
                windows.append((lo, hi))
        probe, offset = following, next_offset
    return windows


def _plain_wall(lo: datetime, hi: datetime, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The naive wall-clock range of a UTC range that holds no offset change."""
    offset = lo.astimezone(tz).utcoffset()
    assert offset is not None
    return (lo + offset).replace(tzinfo=None), (hi + offset).replace(tzinfo=None)


class _WallCounter:
    """Counts a cron's naive wall-clock matches in a range by calendar units.

    Each level is the expression with the finer fields pinned to 0 (days: `0 0 0 dom mon
    dow`), so croniter decides which days, hours and minutes match, day-of-month/-week rule
    included; within a matching unit every combination of the finer fields matches."""

    _UNITS = (timedelta(days=1), timedelta(hours=1), timedelta(minutes=1))

    def __init__(self, expression: str) -> None:
        self._day_or = day_or(expression)
        fields = croniter_form(_ALIASES.get(expression, expression)).split(" ")
        if len(fields) == 5:
            fields = ["0", *fields]
        minute, hour = fields[1:3]
        rest = fields[3:]
        self._levels = [
            " ".join(["0", "0", "0", *rest]),
            " ".join(["0", "0", hour, *rest]),
            " ".join(["0", minute, hour, *rest]),
            " ".join(fields),
        ]
        expanded = croniter(self._levels[3], second_at_beginning=True).expanded
        sizes = {0: 60, 1: 24, 5: 60}  # croniter's order: minute, hour, dom, month, dow, second
        # `*` anywhere in a list (`*,5`) is every value.
        n = {i: (sizes[i] if "*" in expanded[i] else len(set(expanded[i]))) for i in sizes}
        self._per_unit = (n[1] * n[0] * n[5], n[0] * n[5], n[5])

    def count(self, a: datetime, b: datetime, level: int = 0) -> int:
        """Matches t with a <= t <= b (naive, whole seconds)."""
        if a > b:
            return 0
        if level == 3:
            return self._matches(3, a, b + _ONE_SECOND)
        unit = self._UNITS[level]
        start_of_a = _floor(a, level)
        whole_from = start_of_a if start_of_a == a else start_of_a + unit
        whole_to = _floor(b + _ONE_SECOND, level)
        if whole_from >= whole_to:
            return self.count(a, b, level + 1)
        return (
            self.count(a, whole_from - _ONE_SECOND, level + 1)
            + self._matches(level, whole_from, whole_to) * self._per_unit[level]
            + self.count(whole_to, b, level + 1)
        )

    def _matches(self, level: int, lo: datetime, hi: datetime) -> int:
        """Matches of one level's expression in [lo, hi)."""
        walker = croniter(
            self._levels[level],
            lo - _ONE_SECOND,
            second_at_beginning=True,
            max_years_between_matches=_HORIZON_YEARS,
            day_or=self._day_or,
        )
        found = 0
        while True:
            try:
                candidate = walker.get_next(datetime)
            except (CroniterBadDateError, ValueError):
                return found
            if candidate >= hi:
                return found
            found += 1


_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _floor(instant: datetime, level: int) -> datetime:
    if level == 0:
        return instant.replace(hour=0, minute=0, second=0)
    if level == 1:
        return instant.replace(minute=0, second=0)
    return instant.replace(second=0)


def members(schedule: Schedule) -> list[Schedule]:
    """The single-spec schedules a union is made of, each with the union's bounds, DST policy
    and anchor (max_runs left to the caller, as for any schedule); `[schedule]` otherwise."""
    if schedule.kind is not ScheduleKind.UNION:
        return [schedule]
    assert schedule.specs is not None
    return [_member(schedule, spec) for spec in schedule.specs]


class HolidayMember(Schedule):
    """The member a business-day spec with resolved holidays becomes (`members`): a monthly
    cron whose rule counts its calendar's days as holidays."""

    holiday_days: tuple[tuple[date, date], ...] = ()


def _member(schedule: Schedule, spec: ScheduleSpec) -> Schedule:
    # Built without validation: the union and its specs were validated as they were read.
    cron = spec.cron
    if spec.monthly is not None and spec.at is not None:
        cron = monthly_cron(spec.monthly, spec.at)
    extra: dict[str, Any] = {}
    if isinstance(spec, HolidaySpec):
        extra = {"holiday_days": spec.holiday_days}
    elif spec.holidays is not None:
        raise UnresolvedCalendar(spec.holidays, "holidays")
    built = HolidayMember if extra else Schedule
    return built.model_construct(
        **extra,
        kind=ScheduleKind.RATE if spec.every_seconds is not None else ScheduleKind.CRON,
        at=None,
        cron=cron,
        monthly=spec.monthly,
        time_zone=spec.time_zone,
        every_seconds=spec.every_seconds,
        anchor=schedule.anchor,
        start_at=schedule.start_at,
        end_at=schedule.end_at,
        max_runs=None,
        dst=schedule.dst,
        specs=None,
        exclude=schedule.exclude,
    )


def count_walk(schedule: Schedule, first: datetime, last: datetime) -> int:
    """At most how many occurrences `count_fires` walks to count [first, last] of
    `schedule`: for a union of several specs, every spec's but the densest one's; under an
    exclusion cron, every spec's as well (the merged walk steps through each spec's own).
    Costs each spec's count, never a walk of the union (a calendar rule's days excepted)."""
    parts = members(without_exclusions(schedule))
    counts = [count_fires(part, first, last) for part in parts]
    walk = sum(counts) - max(counts) if len(parts) > 1 else 0
    if any(exclusion.cron is not None for exclusion in schedule.exclude or ()):
        walk += sum(counts)
    walk += sum(count for part, count in zip(parts, counts, strict=True) if part.monthly is not None)
    return walk


# Occurrences a count may walk for one skipped range: a range whose count would walk
# more is recorded in several, one a sweep pass (`countable_through`).
MAX_COUNT_WALK = 10_000


def countable_through(
    schedule: Schedule, first: datetime, last: datetime, walk: int | None = None
) -> datetime:
    """The latest occurrence t <= `last` such that counting [first, t] walks at most `walk`
    (default MAX_COUNT_WALK) occurrences (`count_walk`), `first` at least; `last` itself
    when counting the whole range does. `first` must be an occurrence. The walk is
    non-decreasing in t (a member's added occurrences add to the sum at least what they add
    to the maximum), so t is found by bisection over seconds, counting each member at each
    step."""
    first, last = to_utc(first), to_utc(last)
    walk = MAX_COUNT_WALK if walk is None else walk
    if last <= first or count_walk(schedule, first, last) <= walk:
        return last
    lo, hi = first, last  # count_walk(lo) <= walk < count_walk(hi)
    while hi - lo > _ONE_SECOND:
        mid = lo + timedelta(seconds=(hi - lo) // _ONE_SECOND // 2)
        if count_walk(schedule, first, mid) <= walk:
            lo = mid
        else:
            hi = mid
    return latest_fire_before(schedule, lo + _ONE_SECOND, not_before=first) or first


def _count_union(parts: list[Schedule], first: datetime, last: datetime) -> int:
    counts = [count_fires(part, first, last) for part in parts]
    order = sorted(range(len(parts)), key=lambda i: -counts[i])
    total = counts[order[0]]
    for position in range(1, len(order)):
        own = parts[order[position]]
        earlier = [parts[i] for i in order[:position]]
        for instant in fires_between(own, first - _ONE_SECOND, last, counts[order[position]]):
            if not any(_fires_at(other, instant) for other in earlier):
                total += 1
    return total


def _fires_at(schedule: Schedule, instant: datetime) -> bool:
    """Whether a single-spec schedule fires at `instant` (a rate's by arithmetic)."""
    if schedule.kind is ScheduleKind.RATE and schedule.end_at is None and schedule.start_at is None:
        assert schedule.anchor is not None and schedule.every_seconds is not None
        anchor = to_utc(schedule.anchor)
        return instant >= anchor and (instant - anchor) % timedelta(seconds=schedule.every_seconds) == _ZERO
    return next_fire(schedule, instant - _ONE_SECOND) == instant


def _merged(streams: list[Iterator[datetime]]) -> Iterator[datetime]:
    """Ascending streams merged into one, each instant once."""
    last: datetime | None = None
    for instant in heapq.merge(*streams):
        if instant != last:
            last = instant
            yield instant


def upcoming(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    """The next `count` occurrences strictly after `after`."""
    if count <= 0:
        return []
    return list(islice(_occurrences(schedule, after), count))


def _occurrences(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """Ascending occurrences strictly after `after`, clipped to the schedule's bounds."""
    if schedule.exclude:
        yield from _unexcluded(schedule, after)
        return
    if schedule.kind is ScheduleKind.UNION:
        yield from _merged([_occurrences(part, after) for part in members(schedule)])
        return
    after = to_utc(after)
    if schedule.start_at is not None:
        # Instants are whole seconds, so "> start_at - 1s" is ">= start_at".
        after = max(after, to_utc(schedule.start_at) - _ONE_SECOND)
    end = to_utc(schedule.end_at) if schedule.end_at is not None else None

    raw: Iterator[datetime]
    if schedule.kind is ScheduleKind.ONCE:
        assert schedule.at is not None
        at = to_utc(schedule.at)
        raw = iter([at] if at > after else [])
    elif schedule.kind is ScheduleKind.RATE:
        assert schedule.anchor is not None and schedule.every_seconds is not None
        raw = _rate_times(to_utc(schedule.anchor), schedule.every_seconds, after)
    else:
        assert schedule.cron is not None and schedule.time_zone is not None
        raw = _cron_times(schedule.cron, zone(schedule.time_zone), schedule.dst, after)
        if schedule.monthly is not None:
            holidays = schedule.holiday_days if isinstance(schedule, HolidayMember) else ()
            raw = _on_rule_days(raw, schedule.monthly, zone(schedule.time_zone), holidays)

    try:
        for instant in raw:
            if end is not None and instant > end:
                return
            yield instant
    except (OverflowError, UnrepresentableInstant):
        # Ran off the end of the datetime range (year 9999), or a wall time there is no
        # instant in UTC (9999-12-31T23:00 at UTC-12): no further occurrence.
        return


# --- exclusions ---

# An occurrence search gives up (no further occurrence) after this many occurrences in a row
# that exclusions cover one by one (an exclusion cron to the second), as it does past eight
# years without a match; ranges and coarser crons are jumped over whole.
MAX_EXCLUDED_IN_A_ROW = 2_000


def without_exclusions(schedule: Schedule) -> Schedule:
    """`schedule` as it fires before its exclusions take any occurrence off."""
    return schedule.model_copy(update={"exclude": None}) if schedule.exclude else schedule


def resolve(schedule: Schedule, calendars: Mapping[str, Calendar]) -> Schedule:
    """`schedule` with each calendar it references (`Schedule.calendar_names`) replaced by
    that calendar's entries in `calendars` as they stand: an exclusion `{"calendar": n}`
    becomes the instants its entries cover (its days read in the exclusion's zone), a
    business-day spec's `holidays` the calendar's days. `schedule` itself when it references
    none. Raises UnresolvedCalendar naming the field (`exclude.<i>.calendar`,
    `specs.<i>.holidays`) of a calendar `calendars` lacks."""
    if not schedule.calendar_names:
        return schedule
    exclude = list(schedule.exclude) if schedule.exclude is not None else None
    for index, exclusion in enumerate(exclude or ()):
        if exclusion.calendar is None:
            continue
        calendar = calendars.get(exclusion.calendar)
        if calendar is None:
            raise UnresolvedCalendar(exclusion.calendar, f"exclude.{index}.calendar")
        assert exclusion.time_zone is not None and exclude is not None
        tz = zone(exclusion.time_zone)
        spans = [_days_span(first, last, tz) for first, last in calendar.day_ranges()]
        spans += [(to_utc(a), to_utc(b)) for a, b in calendar.instant_ranges()]
        exclude[index] = CalendarExclusion.model_construct(**dict(exclusion), spans=_merged_spans(spans))
    specs = list(schedule.specs) if schedule.specs is not None else None
    for index, spec in enumerate(specs or ()):
        if spec.holidays is None:
            continue
        calendar = calendars.get(spec.holidays)
        if calendar is None:
            raise UnresolvedCalendar(spec.holidays, f"specs.{index}.holidays")
        assert specs is not None
        specs[index] = HolidaySpec.model_construct(**dict(spec), holiday_days=calendar.day_ranges())
    return schedule.model_copy(update={"exclude": exclude, "specs": specs})


def index_schedule(schedule: Schedule) -> Schedule:
    """What a job's `next_run_at` follows (the sweeper's `due` index): `schedule` with no
    calendar's entries taken into account, so that it fires at least at every instant the
    resolved schedule fires at, whatever the calendars come to hold. Calendar exclusions are
    left out; a business-day spec with `holidays` fires every day at its time (any day of
    its month may become its day). `schedule` itself when it references no calendar."""
    if not schedule.calendar_names:
        return schedule
    exclude = [e for e in schedule.exclude or () if e.calendar is None] or None
    specs = None
    if schedule.specs is not None:
        specs = [_every_day(spec) if spec.holidays is not None else spec for spec in schedule.specs]
    return schedule.model_copy(update={"exclude": exclude, "specs": specs})


def _every_day(spec: ScheduleSpec) -> ScheduleSpec:
    assert spec.at is not None
    hour, minute, second = check_time_of_day(spec.at)
    return ScheduleSpec.model_construct(cron=f"{second} {minute} {hour} * * *", time_zone=spec.time_zone)


def excluded_by(schedule: Schedule, instant: datetime) -> int | None:
    """The index of the first of the schedule's exclusions that covers `instant`, or None."""
    instant = to_utc(instant)
    for index, exclusion in enumerate(schedule.exclude or ()):
        if _covered_until(exclusion, instant) is not None:
            return index
    return None


def count_excluded(schedule: Schedule, first: datetime, before: datetime) -> int:
    """How many occurrences t with first <= t < before the schedule's exclusions take off,
    counted through the latest occurrence up to which a count walks at most MAX_COUNT_WALK
    (`countable_through`; all of them when the range is within it): those after it are left
    out, so the cost is bounded whatever the range. `first` should be an occurrence."""
    first = to_utc(first)
    if not schedule.exclude or before <= first:
        return 0
    last = countable_through(schedule, first, to_utc(before) - _ONE_SECOND)
    return count_fires(without_exclusions(schedule), first, last) - count_fires(schedule, first, last)


def _unexcluded(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """The occurrences of `schedule` without its exclusions that none of them covers."""
    exclusions = schedule.exclude or []
    raw = without_exclusions(schedule)
    stream = _occurrences(raw, after)
    origin, in_a_row = to_utc(after), 0
    covered_until: datetime | None = None  # every instant before it is covered
    stepped = 0  # occurrences stepped over inside it
    while (instant := next(stream, None)) is not None:
        if covered_until is not None and instant < covered_until:
            in_a_row += 1
            stepped += 1
            if in_a_row > MAX_EXCLUDED_IN_A_ROW:
                return
            if stepped >= _STEPS_BEFORE_A_JUMP:
                # Many occurrences inside: search on from its end (a new walker) instead.
                stream, stepped = _occurrences(raw, covered_until - _ONE_SECOND), 0
            continue
        ends = [_covered_until(exclusion, instant) for exclusion in exclusions]
        covered_until = max((end for end in ends if end is not None), default=None)
        stepped = 0
        if covered_until is None:
            origin, in_a_row = instant, 0
            yield instant
            continue
        in_a_row += 1
        if in_a_row > MAX_EXCLUDED_IN_A_ROW or covered_until - origin > _HORIZON:
            return


# Occurrences stepped over inside a covered stretch before the search jumps to its end: a
# jump builds a new walker, dearer than a few steps.
_STEPS_BEFORE_A_JUMP = 8


def _covered_until(exclusion: Exclusion, instant: datetime) -> datetime | None:
    """None when `exclusion` does not cover `instant`; else an instant after it up to which
    (excluded) it covers every instant: the end of its span, or of the wall-clock day, hour,
    minute or second its cron matches whole."""
    if exclusion.start is not None and exclusion.end is not None:
        return exclusion.end if exclusion.start <= instant < exclusion.end else None
    if isinstance(exclusion, CalendarExclusion):
        at = bisect_right(exclusion.spans, (instant, _LATEST)) - 1
        if at >= 0 and exclusion.spans[at][0] <= instant < exclusion.spans[at][1]:
            return exclusion.spans[at][1]
        return None
    if exclusion.calendar is not None:
        raise UnresolvedCalendar(exclusion.calendar, "calendar")
    assert exclusion.time_zone is not None
    tz = zone(exclusion.time_zone)
    wall = instant.astimezone(tz).replace(tzinfo=None)
    if exclusion.start_date is not None and exclusion.end_date is not None:
        if not exclusion.start_date <= wall.date() <= exclusion.end_date:
            return None
        end_wall = datetime.combine(exclusion.end_date + timedelta(days=1), time())
    else:
        assert exclusion.cron is not None
        expression = _normalised(exclusion.cron)
        if not _wall_matches(expression, wall):
            return None
        level = _whole_unit(expression)
        end_wall = wall + _ONE_SECOND if level == 3 else _floor(wall, level) + _WallCounter._UNITS[level]
    return max(instant + _ONE_SECOND, _first_instant_at(end_wall, tz))


def _wall_matches(expression: str, wall: datetime) -> bool:
    """Whether a (normalised) cron matches a naive wall time: a 5-field one to the minute."""
    seconds, minutes, hours, days = _fields_of(expression)
    return (
        (seconds is None or wall.second in seconds)
        and (minutes is None or wall.minute in minutes)
        and (hours is None or wall.hour in hours)
        and _day_matches(days, wall.date())
    )


@lru_cache(maxsize=1024)
def _fields_of(
    expression: str,
) -> tuple[frozenset[int] | None, frozenset[int] | None, frozenset[int] | None, str]:
    """A (normalised) cron's seconds, minutes and hours (None: any; seconds also None for a
    5-field cron), and its days as a 6-field expression matching each of them at midnight."""
    counter = _WallCounter(expression)
    fields = counter._levels[3].split(" ")
    expanded = croniter(counter._levels[3], second_at_beginning=True).expanded

    def values(index: int) -> frozenset[int] | None:
        return None if "*" in expanded[index] else frozenset(int(v) for v in expanded[index])

    seconds = values(5) if has_seconds_field(expression) else None
    day_or_flag = "|" if counter._day_or else "&"
    return seconds, values(0), values(1), day_or_flag + " ".join(["0", "0", "0", *fields[3:]])


@lru_cache(maxsize=4096)
def _day_matches(days: str, day: date) -> bool:
    """Whether a day expression of `_fields_of` matches `day` (croniter decides the day rules:
    either-or, `L`, `#`); remembered per day, so the occurrences of one day ask once."""
    midnight = datetime.combine(day, time())
    walker = croniter(days[1:], midnight - _ONE_SECOND, second_at_beginning=True, day_or=days[0] == "|")
    try:
        return bool(walker.get_next(datetime) == midnight)
    except (CroniterBadDateError, ValueError):
        return False


@lru_cache(maxsize=1024)
def _whole_unit(expression: str) -> int:
    """The coarsest wall-clock unit (0 day, 1 hour, 2 minute, 3 second) that a (normalised)
    cron matches whole whenever it matches one instant of it: the finer fields are all `*`
    (a 5-field cron matches whole minutes)."""
    fields = croniter(croniter_form(expression), second_at_beginning=has_seconds_field(expression)).expanded
    full = ["*" in values for values in fields]  # croniter's order: minute, hour, dom, month, dow, second
    if len(full) > 5 and has_seconds_field(expression) and not full[5]:
        return 3
    if not full[0]:
        return 2
    return 1 if not full[1] else 0


def _first_instant_at(wall: datetime, tz: ZoneInfo) -> datetime:
    """The first instant whose wall time in `tz` is `wall` or later: its first reading, or
    the end of the DST gap it falls in."""
    first, second = to_utc(wall.replace(tzinfo=tz, fold=0)), to_utc(wall.replace(tzinfo=tz, fold=1))
    if first <= second:
        return first
    # In a gap fold=0 reads the offset before it and fold=1 the one after: the gap ends between.
    return _transition(second, first, tz)


_LATEST = datetime.max.replace(tzinfo=UTC)


def _exclusion_spans(exclusion: Exclusion) -> tuple[tuple[datetime, datetime], ...]:
    """The instants [a, b) a date, instant or (resolved) calendar exclusion covers."""
    if isinstance(exclusion, CalendarExclusion):
        return exclusion.spans
    if exclusion.start is not None and exclusion.end is not None:
        return ((to_utc(exclusion.start), to_utc(exclusion.end)),)
    if exclusion.calendar is not None:
        raise UnresolvedCalendar(exclusion.calendar, "calendar")
    assert exclusion.start_date is not None and exclusion.end_date is not None
    assert exclusion.time_zone is not None
    return (_days_span(exclusion.start_date, exclusion.end_date, zone(exclusion.time_zone)),)


def _days_span(first: date, last: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The instants [a, b) of the local days first..last in `tz`."""
    first_day = datetime.combine(first, time())
    after_last = datetime.combine(last + timedelta(days=1), time())
    return _first_instant_at(first_day, tz), _first_instant_at(after_last, tz)


def _merged_spans(spans: list[tuple[datetime, datetime]]) -> tuple[tuple[datetime, datetime], ...]:
    merged: list[tuple[datetime, datetime]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return tuple(merged)


def _count_unexcluded(schedule: Schedule, first: datetime, last: datetime) -> int:
    exclusions = schedule.exclude or []
    if any(exclusion.cron is not None for exclusion in exclusions):
        stream = _occurrences(schedule, first - _ONE_SECOND)
        return sum(1 for _ in takewhile(lambda instant: instant <= last, stream))
    raw = without_exclusions(schedule)
    total = count_fires(raw, first, last)
    merged = _merged_spans([span for exclusion in exclusions for span in _exclusion_spans(exclusion)])
    for a, b in merged:
        lo, hi = max(first, a), min(last, b - _ONE_SECOND)
        if lo <= hi:
            total -= count_fires(raw, lo, hi)
    return total


# A calendar rule's occurrence search gives up (no further occurrence) past this long without
# a day the rule names: every rule names a day at least every other month, so only holidays
# covering every business day for over a year reach it (a search to year 9999 otherwise).
MAX_RULE_DAY_GAP = timedelta(days=400)


def _on_rule_days(
    instants: Iterator[datetime], rule: str, tz: ZoneInfo, holidays: tuple[tuple[date, date], ...] = ()
) -> Iterator[datetime]:
    """The instants whose local date is the day of its month the calendar rule names (a
    business-day rule's holidays being the local days of `holidays`)."""

    def holiday(day: date) -> bool:
        return in_days(holidays, day)

    days: dict[tuple[int, int], int | None] = {}  # the rule's day of each month walked
    missing_since: datetime | None = None
    for instant in instants:
        local = instant.astimezone(tz)
        month = (local.year, local.month)
        if month not in days:
            days[month] = monthly_day(rule, local.year, local.month, holiday)
        if days[month] == local.day:
            missing_since = None
            yield instant
            continue
        missing_since = missing_since or instant
        if instant - missing_since > MAX_RULE_DAY_GAP:
            return  # holidays leave the rule no day for over a year: no further occurrence


def _rate_times(anchor: datetime, every_seconds: int, after: datetime) -> Iterator[datetime]:
    step = timedelta(seconds=every_seconds)
    k = 0 if after < anchor else (after - anchor) // step + 1
    instant = anchor + k * step
    while True:
        yield instant
        instant += step


def _cron_times(expression: str, tz: ZoneInfo, policy: DstPolicy, after: datetime) -> Iterator[datetime]:
    """Walk naive wall-clock matches with croniter and map each one to UTC under the policy.

    A wall time's first reading is monotone non-decreasing in it, and its other reading (a
    fold's, under `both`) comes later still: so an instant is emitted once the walk's first
    reading has reached it, and skipping instants <= the last one emitted keeps the output
    strictly increasing."""
    expression = _normalised(expression)
    local = after.astimezone(tz)
    wall = local.replace(tzinfo=None, fold=0)
    slack = _ZERO
    if local.fold == 0:
        # `after` is the first reading of a repeated hour: wall times up to one fold
        # earlier can still map (fold=last or both) to instants after it.
        slack = max(_offset(wall, tz, 0) - _offset(wall, tz, 1), _ZERO)
    walker = croniter(
        croniter_form(expression),
        wall - slack - _ONE_SECOND,
        second_at_beginning=has_seconds_field(expression),
        max_years_between_matches=_HORIZON_YEARS,
        day_or=day_or(expression),
    )

    last = after
    progress = wall
    waiting: list[datetime] = []  # mapped, not yet emitted (a fold's second readings)
    while True:
        try:
            candidate = walker.get_next(datetime)
        except (CroniterBadDateError, ValueError):
            # No match within the horizon (Feb 30), or after year 9999.
            candidate = None
        if candidate is None or candidate - progress > _HORIZON:
            yield from sorted(t for t in waiting if t > last)
            return
        instants, gap_end = _wall_to_utc(candidate, tz, policy)
        if gap_end is not None and gap_end > candidate:
            # Every wall time inside the gap maps to the same instant (or to none), so
            # jump past it instead of visiting each one (matters for per-second crons).
            walker.set_current(gap_end - _ONE_SECOND)
        for instant in instants:
            heapq.heappush(waiting, instant)
        reached = instants[0] if instants else None
        while waiting and reached is not None and waiting[0] <= reached:
            instant = heapq.heappop(waiting)
            if instant <= last:
                continue
            last = instant
            progress = candidate
            yield instant


def _offset(wall: datetime, tz: ZoneInfo, fold: int) -> timedelta:
    offset = wall.replace(tzinfo=tz, fold=fold).utcoffset()
    assert offset is not None
    return offset


def _wall_to_utc(
    wall: datetime, tz: ZoneInfo, policy: DstPolicy
) -> tuple[tuple[datetime, ...], datetime | None]:
    """Map a naive wall time to (its instants under the policy, ascending: none when skipped,
    two for a fold under `both`; the end-of-gap wall time if in a gap)."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return (to_utc(first),), None
    first_utc = first.astimezone(UTC)
    if first_utc.astimezone(tz).replace(tzinfo=None, fold=0) != wall:
        # In a gap fold=0 reads the pre-transition offset and fold=1 the post-transition
        # one, so the transition lies between the two readings.
        transition = _transition(second.astimezone(UTC), first_utc, tz)
        gap_end = transition.astimezone(tz).replace(tzinfo=None, fold=0)
        return ((transition,) if policy.gap is DstGap.SHIFT else ()), gap_end
    readings = {
        DstFold.FIRST: (to_utc(first),),
        DstFold.LAST: (to_utc(second),),
        DstFold.BOTH: (to_utc(first), to_utc(second)),
        DstFold.NONE: (),
    }
    return readings[policy.fold], None


def _transition(before: datetime, at_or_after: datetime, tz: ZoneInfo) -> datetime:
    """The first second whose UTC offset differs from the one at `before` (bisection)."""
    lo = to_utc(before)
    hi = to_utc(at_or_after)
    old_offset = lo.astimezone(tz).utcoffset()
    while hi - lo > _ONE_SECOND:
        mid = lo + timedelta(seconds=(hi - lo) // _ONE_SECOND // 2)
        if mid.astimezone(tz).utcoffset() == old_offset:
            lo = mid
        else:
            hi = mid
    return hi


# --- preview ---


@dataclass(frozen=True)
class Previewed:
    """One line of a preview: an instant the schedule fires at (`fires`), or one an exclusion
    took off; `specs` are the union's specs that fire then (None for any other schedule);
    `reason` says why it is excluded, or how a DST rule placed it (None when neither)."""

    at: datetime
    fires: bool
    reason: str | None
    specs: tuple[int, ...] | None


def preview(schedule: Schedule, after: datetime, count: int) -> list[Previewed]:
    """The next `count` instants strictly after `after` the schedule fires at, ascending,
    with the occurrences its exclusions took off among them (at most `count` of those, the
    earliest), each with its reason. max_runs is not considered (the caller counts runs).
    Costs about the lines listed: the excluded ones are read between consecutive fires."""
    if count <= 0:
        return []
    raw = without_exclusions(schedule)
    parts = members(raw)
    lines: list[Previewed] = []
    excluded_left = count
    cursor = to_utc(after)
    for instant in upcoming(schedule, after, count):
        if schedule.exclude and excluded_left > 0:
            between = fires_between(raw, cursor, instant - _ONE_SECOND, excluded_left)
            for skipped in between:
                lines.append(_excluded_line(schedule, parts, skipped))
            excluded_left -= len(between)
        lines.append(_fired_line(schedule, parts, instant))
        cursor = instant
    return lines


def _firing_specs(schedule: Schedule, parts: list[Schedule], instant: datetime) -> tuple[int, ...] | None:
    if schedule.kind is not ScheduleKind.UNION:
        return None
    return tuple(i for i, part in enumerate(parts) if _fires_at(part, instant))


def _excluded_line(schedule: Schedule, parts: list[Schedule], instant: datetime) -> Previewed:
    index = excluded_by(schedule, instant)
    assert index is not None and schedule.exclude is not None
    reason = f"excluded by exclude.{index} ({describe_exclusion(schedule.exclude[index])})"
    return Previewed(instant, False, reason, _firing_specs(schedule, parts, instant))


def _fired_line(schedule: Schedule, parts: list[Schedule], instant: datetime) -> Previewed:
    specs = _firing_specs(schedule, parts, instant)
    chosen = [parts[i] for i in specs] if specs is not None else parts
    reasons = [r for r in (_dst_reason(part, instant) for part in chosen) if r is not None]
    return Previewed(instant, True, "; ".join(dict.fromkeys(reasons)) or None, specs)


def _dst_reason(part: Schedule, instant: datetime) -> str | None:
    """How the DST policy placed a cron's occurrence at `instant`, or None when it did not
    have to (the wall time happens once and the cron names it)."""
    if part.kind is not ScheduleKind.CRON or part.time_zone is None or part.cron is None:
        return None
    tz = zone(part.time_zone)
    local = instant.astimezone(tz)
    wall = local.replace(tzinfo=None, fold=0)
    shown = f"{wall:%H:%M:%S} {local.tzname()}"
    if _offset(wall, tz, 0) != _offset(wall, tz, 1):  # a real instant's wall: a fold, not a gap
        reading = "second" if local.fold else "first"
        return (
            f"{wall:%Y-%m-%d %H:%M:%S} happens twice in {part.time_zone} (clocks go back): "
            f"this is its {reading} reading ({shown}), as dst.fold={part.dst.fold.value} says"
        )
    if not _wall_matches(_normalised(part.cron), wall):
        return (
            f"the local times before {wall:%H:%M:%S} do not exist in {part.time_zone} on "
            f"{wall:%Y-%m-%d} (clocks go forward): moved to the end of the gap ({shown}), "
            f"as dst.gap={part.dst.gap.value} says"
        )
    return None


def describe_exclusion(exclusion: Exclusion) -> str:
    """An exclusion in a few words: `cron * * * * SAT,SUN in Europe/London`."""
    if exclusion.calendar is not None:
        return f"calendar {exclusion.calendar}, its days in {exclusion.time_zone}"
    if exclusion.cron is not None:
        return f"cron {exclusion.cron} in {exclusion.time_zone}"
    if exclusion.start_date is not None:
        return f"dates {exclusion.start_date} to {exclusion.end_date} in {exclusion.time_zone}"
    assert exclusion.start is not None and exclusion.end is not None
    return (
        f"from {to_utc(exclusion.start):%Y-%m-%dT%H:%M:%SZ} until {to_utc(exclusion.end):%Y-%m-%dT%H:%M:%SZ}"
    )
