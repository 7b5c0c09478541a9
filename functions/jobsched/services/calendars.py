"""Named calendars: a tenant's writes and reads of them, and their resolution into the
schedules that reference them (`CalendarCache`), once per calendar per invocation."""

from __future__ import annotations

from dataclasses import dataclass

from ..domain.calendars import MAX_CALENDARS_PER_TENANT, Calendar, UnresolvedCalendar
from ..domain.errors import ConcurrentUpdate, Conflict, NotFound, ValidationFailed
from ..domain.instants import Clock
from ..domain.models import Schedule
from ..domain.schedule import resolve
from ..observability import logger
from ..store.calendars import CalendarInUse, CalendarStore, stamped

_WRITE_ATTEMPTS = 5


class CalendarInUseError(Conflict):
    code = "calendar_in_use"


@dataclass(frozen=True)
class StoredCalendar:
    calendar: Calendar
    users: int  # the tenant's live jobs referencing it


class CalendarCache:
    """The calendars one invocation reads (the sweeper's, an API request's): each (tenant,
    name) is read once, a missing one included, whatever the number of jobs resolved."""

    def __init__(self, store: CalendarStore | None) -> None:
        self._store = store
        self._read: dict[tuple[str, str], Calendar | None] = {}
        self.reads = 0

    def get(self, tenant: str, name: str) -> Calendar | None:
        key = (tenant, name)
        if key not in self._read:
            self.reads += 1
            self._read[key] = self._store.get(tenant, name) if self._store is not None else None
        return self._read[key]

    def resolved(self, tenant: str, schedule: Schedule) -> Schedule:
        """`schedule` with the tenant's calendars it references resolved (domain.schedule.
        resolve): only the tenant's own, by name. Raises UnresolvedCalendar naming the field
        of one the tenant does not have."""
        names = schedule.calendar_names
        if not names:
            return schedule
        found = {name: calendar for name in names if (calendar := self.get(tenant, name)) is not None}
        return resolve(schedule, found)

    def checked(self, tenant: str, schedule: Schedule) -> Schedule:
        """`resolved`, with a calendar the tenant does not have a ValidationFailed naming the
        field (`exclude.<i>.calendar`, `specs.<i>.holidays`): a write's or a preview's check."""
        try:
            return self.resolved(tenant, schedule)
        except UnresolvedCalendar as exc:
            raise missing_calendar(exc.field, exc.name) from None


def calendar_field(schedule: Schedule, name: str) -> str:
    """The field of `schedule` that first references calendar `name`, as the API spells it."""
    for index, exclusion in enumerate(schedule.exclude or ()):
        if exclusion.calendar == name:
            return f"exclude.{index}.calendar"
    for index, spec in enumerate(schedule.specs or ()):
        if spec.holidays == name:
            return f"specs.{index}.holidays"
    return "schedule"


def missing_calendar(field: str, name: str) -> ValidationFailed:
    return ValidationFailed(field, f"no calendar named {name!r}: create it first (PUT /v1/calendars/{name})")


class CalendarService:
    def __init__(self, store: CalendarStore, clock: Clock, *, max_calendars: int = MAX_CALENDARS_PER_TENANT):
        self._store = store
        self._clock = clock
        self.max_calendars = max_calendars

    def cache(self) -> CalendarCache:
        """A fresh cache: one per invocation, so every read in it sees one state of each calendar."""
        return CalendarCache(self._store)

    def put(self, tenant: str, calendar: Calendar) -> tuple[Calendar, bool]:
        """Create the tenant's calendar, or replace its entries (a new version): (the calendar
        as written, whether it was created). The change applies to every occurrence computed
        from then on, runs already made untouched. Raises LimitExceeded (the tenant's number
        of calendars), ConcurrentUpdate."""
        for _ in range(_WRITE_ATTEMPTS):
            now = self._clock.now()
            previous = self._store.get(tenant, calendar.name)
            written = stamped(calendar, now, previous)
            try:
                if previous is None:
                    self._store.create(tenant, written, max_calendars=self.max_calendars)
                else:
                    self._store.replace(tenant, written, read_version=previous.version)
            except ConcurrentUpdate:
                continue
            logger.info("calendar written", extra={"calendar": calendar.name, "version": written.version})
            return written, previous is None
        raise ConcurrentUpdate(f"calendar {calendar.name} is changing concurrently; retry")

    def get(self, tenant: str, name: str) -> StoredCalendar:
        calendar = self._store.get(tenant, name)
        if calendar is None:
            raise NotFound(f"calendar {name} not found")
        return StoredCalendar(calendar, self._store.users(tenant, name))

    def list_calendars(self, tenant: str) -> list[Calendar]:
        """The tenant's calendars, by name."""
        return self._store.list_for_tenant(tenant)

    def delete(self, tenant: str, name: str) -> Calendar:
        """Delete the tenant's calendar; returns it as it was. Raises NotFound, or
        CalendarInUseError (409) while a live job (ACTIVE or PAUSED) references it: update
        or cancel those jobs first."""
        calendar = self._store.get(tenant, name)
        if calendar is None:
            raise NotFound(f"calendar {name} not found")
        try:
            self._store.delete(tenant, name)
            return calendar
        except CalendarInUse as exc:
            raise CalendarInUseError(
                f"calendar {name} is referenced by {exc.users} active or paused jobs: remove the "
                "reference from them (or cancel them) first",
                users=exc.users,
            ) from None
