"""Parsing and checking of cron expressions and time zones (the syntax; the math is in schedule)."""

from __future__ import annotations

import re
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
