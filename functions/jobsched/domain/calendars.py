"""Named calendars: a tenant's dates, date ranges and instant ranges kept under a name, which
its jobs' schedules reference (an exclusion `{"calendar": name}`, a business-day rule's
`holidays`). A reference is resolved to the calendar's current entries by the service layer
(domain.schedule.resolve) before any occurrence is computed: the stored job keeps the name."""

from __future__ import annotations

from bisect import bisect_right
from datetime import date, datetime
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .cron import shown
from .instants import Instant
from .models import (
    CALENDAR_NAME_PATTERN,
    CALENDAR_NAME_RULE,
    MAX_CALENDARS_PER_JOB,
    Exclusion,
    Model,
    ScheduleSpec,
    check_calendar_name,
    rule_on,
    writing,
)

__all__ = ["CALENDAR_NAME_PATTERN", "CALENDAR_NAME_RULE", "MAX_CALENDARS_PER_JOB"]

# Each bound keeps a calendar one small item and its resolution cheap (see docs/operate/limits.md).
MAX_CALENDAR_ENTRIES = 1000
MAX_CALENDARS_PER_TENANT = 100


_Date = date  # the type, where a field is named `date`


class CalendarEntry(Model):
    """One entry of a calendar, exactly one form:
    - `date`: one local day;
    - `start_date`..`end_date`: local days, both included;
    - `start`..`end`: the instants t with start <= t < end.
    Local days are read in the zone of the reference that uses the calendar."""

    date: _Date | None = None
    start_date: _Date | None = None
    end_date: _Date | None = None
    start: Instant | None = None
    end: Instant | None = None

    @model_validator(mode="after")
    def _one_form(self) -> CalendarEntry:
        forms = [
            name
            for name, given in (
                ("date", self.date is not None),
                ("dates", self.start_date is not None or self.end_date is not None),
                ("instants", self.start is not None or self.end is not None),
            )
            if given
        ]
        if len(forms) != 1:
            raise rule_on((), "exactly one of date, startDate/endDate or start/end is required")
        if forms == ["dates"]:
            if self.start_date is None or self.end_date is None:
                raise rule_on(
                    "end_date" if self.end_date is None else "start_date", "is required with its pair"
                )
            if self.end_date < self.start_date:
                raise rule_on("end_date", "must not be before startDate")
        if forms == ["instants"]:
            if self.start is None or self.end is None:
                raise rule_on("end" if self.end is None else "start", "is required with its pair")
            if self.end <= self.start:
                raise rule_on("end", "must be after start")
        for name in ("date", "start_date", "end_date"):
            day = getattr(self, name)
            if day is not None and not 1970 <= day.year <= 9998:
                raise rule_on(name, "must be in 1970 to 9998")
        return self

    @property
    def days(self) -> tuple[_Date, _Date] | None:
        """The local days it covers (first, last), or None for an instant range."""
        if self.date is not None:
            return self.date, self.date
        if self.start_date is not None and self.end_date is not None:
            return self.start_date, self.end_date
        return None


class Calendar(Model):
    """A tenant's calendar as stored: its name, its entries, and the version its writes count."""

    name: str
    entries: list[CalendarEntry] = Field(default_factory=list)
    version: int = 1
    created_at: Instant | None = None
    updated_at: Instant | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_calendar_name(value)

    @field_validator("entries")
    @classmethod
    def _few_entries(cls, value: list[CalendarEntry], info: ValidationInfo) -> list[CalendarEntry]:
        if writing(info) and len(value) > MAX_CALENDAR_ENTRIES:
            raise ValueError(f"holds at most {MAX_CALENDAR_ENTRIES} entries; got {len(value)}")
        return value

    def day_ranges(self) -> tuple[tuple[date, date], ...]:
        """Its local days as sorted, merged ranges (first, last); instant ranges left out."""
        return merged_days(entry.days for entry in self.entries if entry.days is not None)

    def instant_ranges(self) -> list[tuple[datetime, datetime]]:
        """Its instant ranges [start, end), as given."""
        return [(e.start, e.end) for e in self.entries if e.start is not None and e.end is not None]


def merged_days(ranges: Any) -> tuple[tuple[date, date], ...]:
    """Day ranges (first, last) sorted and merged, adjacent ones joined."""
    merged: list[tuple[date, date]] = []
    for first, last in sorted(ranges):
        if merged and first.toordinal() <= merged[-1][1].toordinal() + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


def in_days(ranges: tuple[tuple[date, date], ...], day: date) -> bool:
    """Whether `day` lies in one of the sorted, merged `ranges` (a binary search)."""
    at = bisect_right(ranges, (day, date.max)) - 1
    return at >= 0 and ranges[at][0] <= day <= ranges[at][1]


class CalendarExclusion(Exclusion):
    """An exclusion `{"calendar": name}` resolved (domain.schedule.resolve): the instants its
    calendar covers now, as sorted, merged spans [a, b). Built by the resolution only, never
    read from a client or a store; it serialises as the reference it resolves."""

    spans: tuple[tuple[datetime, datetime], ...] = ()


class HolidaySpec(ScheduleSpec):
    """A business-day spec whose `holidays` calendar is resolved: the calendar's local days,
    sorted and merged. Built by the resolution only; it serialises as the spec it resolves."""

    holiday_days: tuple[tuple[date, date], ...] = ()


class UnresolvedCalendar(ValueError):
    """A schedule referencing a calendar reached occurrence computation unresolved (a bug),
    or its calendar is missing from those given to the resolution (`field` names where)."""

    def __init__(self, name: str, field: str) -> None:
        super().__init__(f"{field}: calendar {shown(name)} is not resolved")
        self.name = name
        self.field = field
