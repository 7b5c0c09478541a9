"""Routes for the tenant's named calendars: create or replace (PUT), read, list, delete.
A calendar is the caller's own: another tenant's of the same name is never seen (404)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from ...api_models.requests import CalendarBody
from ...api_models.views import CalendarList, CalendarSummaryView, CalendarView
from ...domain.models import CALENDAR_NAME_PATTERN
from ...wiring import container
from .common import CHANGE_ERRORS, NoBody, documented, json_response
from .identity import tenant_of

router = Router()

CalendarName = Annotated[str, Path(pattern=CALENDAR_NAME_PATTERN, description="the calendar's name")]


@router.put(
    "/v1/calendars/<name>",
    responses=documented(
        {201: ("created", CalendarView), 200: ("replaced: a new version", CalendarView)}, CHANGE_ERRORS
    ),
)
def put_calendar(name: CalendarName, body: Annotated[CalendarBody, Body()]) -> Response[CalendarView]:
    tenant = tenant_of(router.current_event)
    service = container().calendars
    calendar, created = service.put(tenant, body.to_calendar(name))
    stored = service.get(tenant, name) if not created else None
    used_by = stored.users if stored is not None else 0
    return json_response(201 if created else 200, CalendarView.with_entries(calendar, used_by))


@router.get("/v1/calendars/<name>", responses=documented({200: ("OK", CalendarView)}))
def get_calendar(name: CalendarName) -> Response[CalendarView]:
    stored = container().calendars.get(tenant_of(router.current_event), name)
    return json_response(200, CalendarView.with_entries(stored.calendar, stored.users))


@router.get("/v1/calendars", responses=documented({200: ("the tenant's calendars, by name", CalendarList)}))
def list_calendars() -> Response[CalendarList]:
    calendars = container().calendars.list_calendars(tenant_of(router.current_event))
    return json_response(200, CalendarList(items=[CalendarSummaryView.of(c) for c in calendars]))


@router.delete(
    "/v1/calendars/<name>",
    responses=documented({200: ("deleted: the calendar as it was", CalendarView)}, CHANGE_ERRORS),
)
def delete_calendar(name: CalendarName, body: NoBody = None) -> Response[CalendarView]:
    deleted = container().calendars.delete(tenant_of(router.current_event), name)
    return json_response(200, CalendarView.with_entries(deleted, 0))
