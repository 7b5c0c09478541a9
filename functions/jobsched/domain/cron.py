"""Parsing and checking of cron expressions and time zones (the syntax; the math is in schedule)."""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import date
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter

_RANDOM_OR_HASHED = re.compile(r"(?:^|[,/\-(])[RH](?:$|[,/\-(])", re.IGNORECASE)
_ALIASES = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def has_seconds_field(expression: str) -> bool:
    """6 fields means a leading seconds field (Quartz, Spring, Temporal order)."""
    return len(expression.split()) == 6


def shown(text: str, limit: int = 64) -> str:
    """Client text quoted in an error message: ASCII-escaped (always encodable) and cut short."""
    quoted = ascii(text[:limit])[1:-1]
    return f"'{quoted}{'...' if len(text) > limit else ''}'"


def day_or(expression: str) -> bool:
    """Vixie cron's either-or rule for a (normalised) expression, as croniter's `day_or`.

    When day-of-month and day-of-week are both restricted a day matches either; when
    either field starts with `*` (`*`, `*/8`, `*,5`; and `?`, which croniter reads as `*`)
    a day must match both, which makes the starred field no restriction unless it has a
    step. Vixie and cronie decide by that first character, not by what the field
    expands to: `*/8` in day-of-month with `SUN-WED` fires on the 1st, 9th, 17th and 25th
    when they fall on Sunday to Wednesday, while `1-31/8` with `SUN-WED` fires on both."""
    fields = expression.split()
    if len(fields) < 5:
        return True  # an alias: no day fields to combine
    day_of_month, day_of_week = fields[-3], fields[-1]
    return not (day_of_month.startswith(("*", "?")) or day_of_week.startswith(("*", "?")))


_ONE_VALUE_RANGE = re.compile(r"(\w+)-(\w+)(?:/\d+)?")


def croniter_form(expression: str) -> str:
    """The expression as croniter must be given it to mean what cron means.

    croniter reads a range of one value (`5-5`, `MON-MON`, `3-3,5`) as `*`, and `5-5/2` as
    `*/2`; in cron each is that one value. Such ranges are passed on as the value itself."""
    fields = expression.split(" ")
    for index, text in enumerate(fields):
        parts = text.split(",")
        for position, part in enumerate(parts):
            match = _ONE_VALUE_RANGE.fullmatch(part)
            if match and match.group(1).lower() == match.group(2).lower():
                parts[position] = match.group(1)
        fields[index] = ",".join(parts)
    return " ".join(fields)


def check_cron_expression(expression: str) -> str:
    """Return the normalised expression or raise ValueError naming the rule broken."""
    if not all(" " <= ch <= "~" or ch in "\t\n\r" for ch in expression):
        raise ValueError("must be printable ASCII (digits, names such as MON or JAN, and * , - / ?)")
    normalised = " ".join(expression.split())
    if not normalised:
        raise ValueError("must not be empty")
    if normalised.lower() in _ALIASES:
        return normalised.lower()
    fields = normalised.split(" ")
    if len(fields) not in (5, 6):
        raise ValueError(
            f"must have 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading "
            f"seconds field; got {len(fields)}"
        )
    for token in fields:
        # croniter's R (random) and H (hashed) pick values per evaluation or per key: run keys
        # would stop being stable, so they are refused.
        if _RANDOM_OR_HASHED.search(token):
            raise ValueError(f"{shown(token)}: random (R) and hashed (H) values are not supported")
    if not croniter.is_valid(croniter_form(normalised), second_at_beginning=len(fields) == 6):
        raise ValueError(f"{shown(normalised, 256)} is not a valid cron expression")
    return normalised


# Files of the zone database that are no IANA zone name a schedule should carry: leap-second
# ("right/") and POSIX-rule ("posix/") copies, the default-rules file, the host's own zone.
_NOT_ZONE_NAMES = ("right/", "posix/", "posixrules", "localtime", "Factory")


@lru_cache(maxsize=1)
def canonical_zone_names() -> frozenset[str]:
    """The IANA names a job may be written with (links such as US/Eastern included)."""
    return frozenset(n for n in available_timezones() if not n.startswith(_NOT_ZONE_NAMES))


def check_time_zone_name(name: str) -> None:
    """Raise ValueError unless `name` is an IANA zone name of the database (checked on write)."""
    if name not in canonical_zone_names():
        raise ValueError(f"{shown(name)} is not an IANA time zone name (e.g. Europe/London)")


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """Resolve an IANA zone name; raise ValueError for anything else."""
    if not name or name != name.strip() or name.startswith(("/", ".")) or ".." in name or not name.isascii():
        raise ValueError(f"{shown(name)} is not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, IsADirectoryError) as exc:
        raise ValueError(f"{shown(name)} is not an IANA time zone name (e.g. Europe/London)") from exc


# --- calendar rules: a day of each month, as a union's spec says it (`monthly`) ---

WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")  # date.weekday() order
_ORDINALS = {"1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5}
_TIME_OF_DAY = re.compile(r"([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?", re.ASCII)
MONTHLY_RULE = (
    "must be last-day, last-weekday (the last Monday to Friday), 'last <DAY>', "
    "'<1st|2nd|3rd|4th|5th> <DAY>' (DAY one of MON TUE WED THU FRI SAT SUN), "
    "first-business-day, last-business-day or 'nearest-business-day <1-31>'"
)
# Rules whose day depends on business days: Monday to Friday, less the spec's holidays.
FIRST_BUSINESS_DAY = "first-business-day"
LAST_BUSINESS_DAY = "last-business-day"
NEAREST_BUSINESS_DAY = "nearest-business-day"
_NEAREST = re.compile(r"nearest-business-day (0?[1-9]|[12]\d|3[01])", re.ASCII)


def check_monthly(text: str) -> str:
    """The rule normalised (`last-day`, `last-weekday`, `last FRI`, `2nd TUE`,
    `last-business-day`, `nearest-business-day 15`), or ValueError."""
    words = text.strip().split()
    single = ("last-day", "last-weekday", FIRST_BUSINESS_DAY, LAST_BUSINESS_DAY)
    if len(words) == 1 and words[0].lower() in single:
        return words[0].lower()
    nearest = _NEAREST.fullmatch(" ".join(words).lower())
    if nearest is not None:
        return f"{NEAREST_BUSINESS_DAY} {int(nearest.group(1))}"
    which = words[0].lower() if len(words) == 2 else ""
    if (which == "last" or which in _ORDINALS) and words[1].upper() in WEEKDAYS:
        return f"{which} {words[1].upper()}"
    raise ValueError(MONTHLY_RULE)


def is_business_day_rule(rule: str) -> bool:
    """Whether a (normalised) rule's day is a business day (and so depends on holidays)."""
    return rule in (FIRST_BUSINESS_DAY, LAST_BUSINESS_DAY) or rule.startswith(NEAREST_BUSINESS_DAY)


def check_time_of_day(text: str) -> tuple[int, int, int]:
    """`HH:MM` or `HH:MM:SS` (24-hour) as (hour, minute, second), or ValueError."""
    match = _TIME_OF_DAY.fullmatch(text)
    if match is None:
        raise ValueError("must be a time of day written HH:MM or HH:MM:SS (00:00 to 23:59:59)")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def monthly_day(
    rule: str, year: int, month: int, holiday: Callable[[date], bool] = lambda day: False
) -> int | None:
    """The day of `month` a (normalised) rule names; None when the month has none (a 5th, or
    no business day). A business day is a Monday to Friday that is not a `holiday`:
    - first-business-day, last-business-day: the month's first or last one;
    - nearest-business-day N: day N (the month's last day when it has fewer), when it is one;
      else the business day of the month nearest to it, the earlier of two as near (so with
      weekends alone a Saturday gives the Friday before, a Sunday the Monday after). Never
      a day of another month."""
    days = calendar.monthrange(year, month)[1]
    if is_business_day_rule(rule):
        return _business_day(rule, year, month, days, holiday)
    if rule == "last-day":
        return days
    if rule == "last-weekday":
        day = days
        while calendar.weekday(year, month, day) >= 5:
            day -= 1
        return day
    which, name = rule.split(" ")
    weekday = WEEKDAYS.index(name)
    first = 1 + (weekday - calendar.weekday(year, month, 1)) % 7
    if which == "last":
        return first + 7 * ((days - first) // 7)
    day = first + 7 * (_ORDINALS[which] - 1)
    return day if day <= days else None


def monthly_cron(rule: str, at: str) -> str:
    """A 6-field cron firing at `at` on every day that can be the rule's day (the days it
    may fall on): the rule's occurrences are those of its days (`monthly_day`)."""
    hour, minute, second = check_time_of_day(at)
    if is_business_day_rule(rule):
        days = "*"  # holidays may move the day anywhere in its month
    elif rule.startswith("last"):
        days = "22-31"
    else:
        n = _ORDINALS[rule.split(" ")[0]]
        days = f"{7 * (n - 1) + 1}-{min(7 * n, 31)}"
    return f"{second} {minute} {hour} {days} * *"


def _business_day(rule: str, year: int, month: int, days: int, holiday: Callable[[date], bool]) -> int | None:
    def business(day: int) -> bool:
        return calendar.weekday(year, month, day) < 5 and not holiday(date(year, month, day))

    if rule == FIRST_BUSINESS_DAY:
        return next((day for day in range(1, days + 1) if business(day)), None)
    if rule == LAST_BUSINESS_DAY:
        return next((day for day in range(days, 0, -1) if business(day)), None)
    target = min(int(rule.split(" ")[1]), days)
    for distance in range(days):
        for day in (target - distance, target + distance):  # the earlier first: ties go back
            if 1 <= day <= days and business(day):
                return day
    return None
