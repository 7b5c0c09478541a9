"""Routes for schedules not saved: preview one (its next fire times, and why an occurrence
does not fire or fires where it does)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from ...api_models.requests import SchedulePreviewBody
from ...api_models.views import SchedulePreviewView
from ...wiring import container
from .common import documented, json_response
from .identity import tenant_of

router = Router()


@router.post(
    "/v1/schedules/preview",
    responses=documented({200: ("the schedule's next fire times; nothing is saved", SchedulePreviewView)}),
)
def preview_schedule(body: Annotated[SchedulePreviewBody, Body()]) -> Response[SchedulePreviewView]:
    tenant = tenant_of(router.current_event)  # the calendars referenced are the caller's
    spec = body.to_spec(container().clock.now())
    lines = container().jobs.preview(tenant, spec, after=body.after, count=body.count)
    return json_response(200, SchedulePreviewView.of(lines))
