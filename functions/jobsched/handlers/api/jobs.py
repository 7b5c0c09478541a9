"""Routes for jobs: create, list, read, change (JSON merge patch), cancel, pause, resume."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query

from ...domain.models import Job, JobSpec, JobState
from ...wiring import container
from .common import (
    CHANGE_ERRORS,
    ERRORS,
    JOB_ID,
    VERSIONED_ERRORS,
    Cursor,
    IfMatch,
    Limit,
    documented,
    json_response,
    parse_if_match,
    required_if_match,
)
from .identity import tenant_of
from .requests import JobBody, merge_patch
from .views import JobList, JobView

router = Router()

ONE_JOB = documented({200: ("OK", JobView)}, VERSIONED_ERRORS)
NOT_GRANTED = 403  # target_not_granted: the job names a target its tenant was not granted


def view(job: Job, *, with_fire_times: bool = False) -> JobView:
    upcoming = container().jobs.next_fire_times(job, 5 if with_fire_times else 1)
    return JobView.of(job, upcoming, with_fire_times=with_fire_times)


def job_response(job: Job, status: int = 200, *, with_next: bool = False) -> Response[JobView]:
    return json_response(status, view(job, with_fire_times=with_next), {"ETag": f'"{job.version}"'})


@router.post(
    "/v1/jobs",
    responses=documented(
        {201: ("created", JobView), 200: ("replayed: the job this idempotency key created", JobView)},
        (*CHANGE_ERRORS, NOT_GRANTED),
    ),
)
def create_job(
    body: Annotated[JobBody, Body()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key", max_length=255)] = None,
) -> Response[JobView]:
    key = body.idempotency_key or idempotency_key
    result = container().jobs.create(
        tenant_of(router.current_event), body.to_spec(), idempotency_key=key, body_hash=body.body_hash()
    )
    return job_response(result.job, 201 if result.created else 200)


@router.get("/v1/jobs", responses=documented({200: ("OK", JobList)}))
def list_jobs(
    state: Annotated[JobState | None, Query()] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> Response[JobList]:
    page = container().jobs.list_jobs(
        tenant_of(router.current_event), state=state, limit=limit, cursor=cursor
    )
    return json_response(200, JobList(items=[view(j) for j in page.items], next_cursor=page.cursor))


@router.get("/v1/jobs/<job_id>", responses=documented({200: ("OK", JobView)}, ERRORS))
def get_job(job_id: Annotated[str, JOB_ID]) -> Response[JobView]:
    return job_response(container().jobs.get(tenant_of(router.current_event), job_id), with_next=True)


@router.patch(
    "/v1/jobs/<job_id>", responses=documented({200: ("OK", JobView)}, (*VERSIONED_ERRORS, NOT_GRANTED))
)
def update_job(
    job_id: Annotated[str, JOB_ID], patch: Annotated[dict[str, Any], Body()], if_match: IfMatch = None
) -> Response[JobView]:
    version = required_if_match(if_match)

    def build(job: Job) -> JobSpec:
        body, reset_anchor = merge_patch(job, patch)
        return body.to_spec(None if reset_anchor else job.spec.schedule.anchor)

    return job_response(
        container().jobs.update(tenant_of(router.current_event), job_id, version, build), with_next=True
    )


@router.delete("/v1/jobs/<job_id>", responses=ONE_JOB)
def cancel_job(job_id: Annotated[str, JOB_ID], if_match: IfMatch = None) -> Response[JobView]:
    return job_response(
        container().jobs.cancel(tenant_of(router.current_event), job_id, parse_if_match(if_match))
    )


@router.post("/v1/jobs/<job_id>/pause", responses=ONE_JOB)
def pause_job(job_id: Annotated[str, JOB_ID], if_match: IfMatch = None) -> Response[JobView]:
    return job_response(
        container().jobs.pause(tenant_of(router.current_event), job_id, parse_if_match(if_match))
    )


@router.post("/v1/jobs/<job_id>/resume", responses=ONE_JOB)
def resume_job(job_id: Annotated[str, JOB_ID], if_match: IfMatch = None) -> Response[JobView]:
    return job_response(
        container().jobs.resume(tenant_of(router.current_event), job_id, parse_if_match(if_match)),
        with_next=True,
    )
