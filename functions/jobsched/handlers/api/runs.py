"""Routes for runs: a job's runs and summary, manual trigger, backfill, one run with its
history, redrive, cancel, and the dead letters.

Run keys sit in paths as `<jobId>@<instant>`; their ':' and '@' may arrive raw or
percent-encoded."""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from ...wiring import container
from .common import CHANGE_ERRORS, JOB_ID, RUN_KEY, Cursor, Limit, documented, json_response, run_key_of
from .identity import tenant_of
from .requests import BackfillBody, RedriveBody
from .views import BackfillView, JobSummaryView, RunDetailView, RunList, RunView

router = Router()

View = Annotated[
    Literal["history", "upcoming", "all"],
    Query(
        description="`history`: runs due by now, newest first (the default); `upcoming`: runs"
        " made ahead of their instant, soonest first; `all`: both, newest scheduled first"
    ),
]


def actor(tenant: str) -> str:
    return f"api:{tenant}"


# --- runs of a job ---


@router.get("/v1/jobs/<job_id>/runs", responses=documented({200: ("OK", RunList)}))
def list_runs(
    job_id: Annotated[str, JOB_ID], limit: Limit = 50, cursor: Cursor = None, view: View = "history"
) -> Response[RunList]:
    tenant = tenant_of(router.current_event)
    service = container().run_service
    page = service.list_runs(tenant, job_id, limit, cursor, view)
    waiting = service.waiting(tenant, page.items)
    items = [RunView.from_run(r, waiting.get(r.run_key)) for r in page.items]
    return json_response(200, RunList(items=items, next_cursor=page.cursor))


@router.get("/v1/jobs/<job_id>/summary", responses=documented({200: ("OK", JobSummaryView)}))
def job_summary(job_id: Annotated[str, JOB_ID]) -> Response[JobSummaryView]:
    summary = container().run_service.summary(tenant_of(router.current_event), job_id)
    upcoming = container().jobs.next_fire_times(summary.job, 5)
    return json_response(200, JobSummaryView.of(summary.job, upcoming, summary.last_runs, summary.counters))


@router.post("/v1/jobs/<job_id>/trigger", responses=documented({201: ("OK", RunView)}, CHANGE_ERRORS))
def trigger_job(job_id: Annotated[str, JOB_ID]) -> Response[RunView]:
    tenant = tenant_of(router.current_event)
    run = container().run_service.trigger(tenant, job_id, actor(tenant))
    return json_response(201, RunView.from_run(run))


@router.post("/v1/jobs/<job_id>/backfill", responses=documented({201: ("OK", BackfillView)}, CHANGE_ERRORS))
def backfill_job(
    job_id: Annotated[str, JOB_ID], body: Annotated[BackfillBody, Body()]
) -> Response[BackfillView]:
    tenant = tenant_of(router.current_event)
    result = container().run_service.backfill(tenant, job_id, body.start, body.end, actor(tenant))
    return json_response(201, BackfillView(created=result.created, existing=result.existing))


# --- one run ---


@router.get("/v1/runs/<run_key>", responses=documented({200: ("OK", RunDetailView)}))
def get_run(run_key: Annotated[str, RUN_KEY]) -> Response[RunDetailView]:
    tenant = tenant_of(router.current_event)
    service = container().run_service
    run = service.get_run(tenant, run_key_of(run_key))
    return json_response(200, RunDetailView.from_run(run, service.waiting(tenant, [run]).get(run.run_key)))


@router.post("/v1/runs/<run_key>/redrive", responses=documented({200: ("OK", RunView)}, CHANGE_ERRORS))
def redrive_run(
    run_key: Annotated[str, RUN_KEY], body: Annotated[RedriveBody | None, Body()] = None
) -> Response[RunView]:
    tenant = tenant_of(router.current_event)
    reason = body.reason if body else None
    accept = body.accept_repeated_effect if body else False
    run = container().run_service.redrive(
        tenant, run_key_of(run_key), actor(tenant), reason, accept_repeated_effect=accept
    )
    return json_response(200, RunView.from_run(run))


@router.post("/v1/runs/<run_key>/cancel", responses=documented({200: ("OK", RunView)}, CHANGE_ERRORS))
def cancel_run(run_key: Annotated[str, RUN_KEY]) -> Response[RunView]:
    tenant = tenant_of(router.current_event)
    run = container().run_service.cancel_run(tenant, run_key_of(run_key), actor(tenant))
    return json_response(200, RunView.from_run(run))


@router.get("/v1/dead-letters", responses=documented({200: ("OK", RunList)}))
def list_dead_letters(limit: Limit = 50, cursor: Cursor = None) -> Response[RunList]:
    page = container().run_service.list_dead(tenant_of(router.current_event), limit, cursor)
    return json_response(
        200, RunList(items=[RunView.from_run(r) for r in page.items], next_cursor=page.cursor)
    )
