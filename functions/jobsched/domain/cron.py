"""Parsing and checking of cron expressions and time zones (the syntax; the math is in schedule)."""

from __future__ import annotations

import re
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

_RANDOM_OR_HASHED = re.compile(r"(?:^|[,/\-(])[RH](?:$|[,/\-(])", re.IGNORECASE)
_ALIASES = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def has_seconds_field(expression: str) -> bool:
    """6 fields means a leading seconds field (Quartz, Spring, Temporal order)."""
    return len(expression.split()) == 6


def check_cron_expression(expression: str) -> str:
    """Return the normalised expression or raise ValueError naming the rule broken."""
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
            raise ValueError(f"'{token}': random (R) and hashed (H) values are not supported")
    if not croniter.is_valid(normalised, second_at_beginning=len(fields) == 6):
        raise ValueError(f"'{normalised}' is not a valid cron expression")
    return normalised


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """Resolve an IANA zone name; raise ValueError for anything else."""
    if not name or name != name.strip() or name.startswith(("/", ".")) or ".." in name:
        raise ValueError(f"'{name}' is not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, IsADirectoryError) as exc:
        raise ValueError(f"'{name}' is not an IANA time zone name (e.g. Europe/London)") from exc
