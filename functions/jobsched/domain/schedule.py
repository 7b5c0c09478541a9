"""When a schedule fires: once, fixed rate, or cron in an IANA zone under a DST policy.

Nothing here reads the clock; the reference instant is always an argument. Every instant
returned is aware UTC with whole seconds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import islice
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from .cron import check_cron_expression, croniter_form, day_or, has_seconds_field, zone
from .instants import to_utc
from .models import DstFold, DstGap, DstPolicy, Schedule, ScheduleKind

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


def latest_fire_before(schedule: Schedule, before: datetime, *, not_before: datetime) -> datetime | None:
    """The last occurrence t with not_before <= t < before, or None.

    Costs about the occurrences in the last window searched, never all of [not_before, before):
    rates are computed, others are searched backwards in windows that double in length."""
    before, not_before = to_utc(before), to_utc(not_before)
    if before <= not_before:
        return None
    if schedule.kind is ScheduleKind.RATE and schedule.end_at is None:
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
        found = fires_between(schedule, start - _ONE_SECOND, before - _ONE_SECOND, limit=_SEARCH_LIMIT)
        if found and len(found) < _SEARCH_LIMIT:
            return found[-1]
        if found:  # too many in this window: the latest is in its last part
            width = max(_ONE_SECOND, (before - found[-1]) * 2)
            continue
        if start <= not_before:
            return None
        width *= 2


_SEARCH_LIMIT = 4096


def count_fires(schedule: Schedule, first: datetime, last: datetime, *, limit: int) -> int:
    """How many occurrences t with first <= t <= last, counted up to `limit` (then `limit`).
    Rates are counted in O(1)."""
    first, last = to_utc(first), to_utc(last)
    if last < first:
        return 0
    if schedule.kind is ScheduleKind.RATE:
        assert schedule.anchor is not None and schedule.every_seconds is not None
        lo = max(first, to_utc(schedule.start_at)) if schedule.start_at else first
        hi = min(last, to_utc(schedule.end_at)) if schedule.end_at else last
        anchor = to_utc(schedule.anchor)
        step = timedelta(seconds=schedule.every_seconds)
        lo = max(lo, anchor)
        if hi < lo:
            return 0
        first_k = -((anchor - lo) // step)  # ceil((lo - anchor) / step)
        last_k = (hi - anchor) // step
        return min(limit, max(0, last_k - first_k + 1))
    return len(fires_between(schedule, first - _ONE_SECOND, last, limit))


def upcoming(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    """The next `count` occurrences strictly after `after`."""
    if count <= 0:
        return []
    return list(islice(_occurrences(schedule, after), count))


def _occurrences(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """Ascending occurrences strictly after `after`, clipped to the schedule's bounds."""
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

    try:
        for instant in raw:
            if end is not None and instant > end:
                return
            yield instant
    except OverflowError:
        # Ran off the end of the datetime range (year 9999): no further occurrence.
        return


def _rate_times(anchor: datetime, every_seconds: int, after: datetime) -> Iterator[datetime]:
    step = timedelta(seconds=every_seconds)
    k = 0 if after < anchor else (after - anchor) // step + 1
    instant = anchor + k * step
    while True:
        yield instant
        instant += step


def _cron_times(expression: str, tz: ZoneInfo, policy: DstPolicy, after: datetime) -> Iterator[datetime]:
    """Walk naive wall-clock matches with croniter and map each one to UTC under the policy.

    The mapping is monotone non-decreasing, so skipping instants <= the last one emitted
    is enough to keep the output strictly increasing."""
    expression = _normalised(expression)
    local = after.astimezone(tz)
    wall = local.replace(tzinfo=None, fold=0)
    slack = _ZERO
    if local.fold == 0:
        # `after` is the first reading of a repeated hour: wall times up to one fold
        # earlier can still map (fold=last) to instants after it.
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
    while True:
        try:
            candidate = walker.get_next(datetime)
        except CroniterBadDateError:
            return  # no match within the horizon (e.g. Feb 30)
        except ValueError:
            return  # the next match would fall after year 9999
        if candidate - progress > _HORIZON:
            return
        instant, gap_end = _wall_to_utc(candidate, tz, policy)
        if gap_end is not None and gap_end > candidate:
            # Every wall time inside the gap maps to the same instant (or to none), so
            # jump past it instead of visiting each one (matters for per-second crons).
            walker.set_current(gap_end - _ONE_SECOND)
        if instant is None or instant <= last:
            continue
        last = instant
        progress = candidate
        yield instant


def _offset(wall: datetime, tz: ZoneInfo, fold: int) -> timedelta:
    offset = wall.replace(tzinfo=tz, fold=fold).utcoffset()
    assert offset is not None
    return offset


def _wall_to_utc(wall: datetime, tz: ZoneInfo, policy: DstPolicy) -> tuple[datetime | None, datetime | None]:
    """Map a naive wall time to (instant or None when skipped, end-of-gap wall time if in a gap)."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return to_utc(first), None
    first_utc = first.astimezone(UTC)
    if first_utc.astimezone(tz).replace(tzinfo=None, fold=0) != wall:
        # In a gap fold=0 reads the pre-transition offset and fold=1 the post-transition
        # one, so the transition lies between the two readings.
        transition = _transition(second.astimezone(UTC), first_utc, tz)
        gap_end = transition.astimezone(tz).replace(tzinfo=None, fold=0)
        return (transition if policy.gap is DstGap.SHIFT else None), gap_end
    return to_utc(first if policy.fold is DstFold.FIRST else second), None


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
