"""Routes for jobs: create, list, read, change (JSON merge patch), cancel, pause, resume,
archive, and rotate the webhook signing secret."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from pydantic import ValidationError

from ...api_models.problems import validation_failed
from ...api_models.requests import JobBatchBody, JobBody, merge_patch
from ...api_models.views import (
    CreatedJobView,
    ErrorBody,
    JobBatchItemView,
    JobBatchView,
    JobList,
    JobView,
    SigningSecretView,
)
from ...domain.errors import JobschedError
from ...domain.models import Job, JobSpec, JobState
from ...services.calendars import CalendarCache
from ...services.jobs import CreateRequest, CreateResult
from ...wiring import container
from .common import (
    CHANGE_ERRORS,
    ERRORS,
    JOB_ID,
    NOT_GRANTED,
    VERSIONED_ERRORS,
    Cursor,
    IfMatch,
    Limit,
    NoBody,
    documented,
    json_response,
    parse_if_match,
    required_if_match,
)
from .identity import tenant_of

router = Router()

ONE_JOB = documented({200: ("OK", JobView)}, VERSIONED_ERRORS)
# Answers that carry a secret are never kept by a cache on the way.
NO_STORE = {"Cache-Control": "no-store"}


def view(
    job: Job,
    *,
    with_fire_times: bool = False,
    with_reasons: bool = False,
    calendars: CalendarCache | None = None,
) -> JobView:
    """The job's view; `with_fire_times` adds nextFireTimes, `with_reasons` upcomingFireTimes
    (both computed from one read of each calendar the job references). `calendars`: the
    request's cache, so that a page of jobs reads each calendar once (default: one of its own)."""
    jobs = container().jobs
    calendars = calendars or jobs.calendar_cache()
    upcoming = jobs.next_fire_times(job, 5 if with_fire_times else 1, calendars=calendars)
    lines = jobs.upcoming_fire_times(job, calendars=calendars) if with_reasons else None
    missing = (
        [name for name in job.spec.schedule.calendar_names if calendars.get(job.tenant, name) is None]
        if with_reasons
        else None
    )
    return JobView.of(job, upcoming, with_fire_times=with_fire_times, lines=lines, missing_calendars=missing)


def job_response(
    job: Job, status: int = 200, *, with_next: bool = False, with_reasons: bool = False
) -> Response[JobView]:
    shown = view(job, with_fire_times=with_next, with_reasons=with_reasons)
    return json_response(status, shown, {"ETag": f'"{job.version}"'})


@router.post(
    "/v1/jobs",
    responses=documented(
        {
            201: ("created, with the job's signing secret (shown this once)", CreatedJobView),
            200: ("replayed: the job this idempotency key created, without its secret", JobView),
        },
        (*CHANGE_ERRORS, NOT_GRANTED),
    ),
)
def create_job(
    body: Annotated[JobBody, Body()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key", max_length=255)] = None,
) -> Response[CreatedJobView | JobView]:
    key = body.idempotency_key or idempotency_key
    tenant = tenant_of(router.current_event)
    result = container().jobs.create(tenant, body.to_spec(), idempotency_key=key, body_hash=body.body_hash())
    if not result.created:
        return job_response(result.job, 200)
    assert result.signing_secret is not None  # every job is created with one
    upcoming = container().jobs.next_fire_times(result.job, 1)
    shown = CreatedJobView.created(result.job, upcoming, result.signing_secret)
    return json_response(201, shown, {"ETag": f'"{result.job.version}"', **NO_STORE})


@router.post(
    "/v1/jobs/batch",
    responses=documented(
        {200: ("each job's answer, in the order sent: created, replayed or refused", JobBatchView)},
        CHANGE_ERRORS,
    ),
)
def create_jobs(
    body: Annotated[JobBatchBody, Body()],
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="idempotency-key",
            max_length=255,
            description="gives the job at index i the key `<this key>#<i>`, unless it has its own"
            " idempotencyKey",
        ),
    ] = None,
) -> Response[JobBatchView]:
    """Create up to 100 jobs in one request, each as `POST /v1/jobs` would, one after another
    in order: each is checked on its own and answered on its own (201 with its signing secret,
    200 replayed by its idempotency key, or the error body a single create gives, with the
    status it gives), so one job's mistake refuses that job alone. The tenant's job limit
    holds exactly as for single creates; the batch counts as one request of the rate."""
    tenant = tenant_of(router.current_event)
    answers: dict[int, CreateResult | JobschedError] = {}
    indexes: list[int] = []
    requests: list[CreateRequest] = []
    for index, raw in enumerate(body.jobs):
        try:
            item = JobBody.model_validate(raw)
            spec = item.to_spec()
        except ValidationError as exc:
            answers[index] = validation_failed(exc)
            continue
        except JobschedError as exc:
            answers[index] = exc
            continue
        key = item.idempotency_key or (f"{idempotency_key}#{index}" if idempotency_key else None)
        indexes.append(index)
        requests.append(CreateRequest(spec, key, item.body_hash()))
    answers.update(zip(indexes, container().jobs.create_many(tenant, requests), strict=True))
    calendars = container().jobs.calendar_cache()  # one read of each calendar for the batch
    items = [_batch_item(index, answers[index], calendars) for index in range(len(body.jobs))]
    statuses = [item.status for item in items]
    shown = JobBatchView(
        items=items,
        created=statuses.count(201),
        replayed=statuses.count(200),
        refused=len(items) - statuses.count(201) - statuses.count(200),
    )
    return json_response(200, shown, NO_STORE)


def _batch_item(
    index: int, answer: CreateResult | JobschedError, calendars: CalendarCache
) -> JobBatchItemView:
    if isinstance(answer, JobschedError):
        return JobBatchItemView(index=index, status=answer.status, error=ErrorBody(**answer.to_dict()))
    if not answer.created:
        return JobBatchItemView(index=index, status=200, job=view(answer.job, calendars=calendars))
    assert answer.signing_secret is not None  # every job is created with one
    upcoming = container().jobs.next_fire_times(answer.job, 1, calendars=calendars)
    return JobBatchItemView(
        index=index, status=201, job=CreatedJobView.created(answer.job, upcoming, answer.signing_secret)
    )


@router.get("/v1/jobs", responses=documented({200: ("OK", JobList)}))
def list_jobs(
    state: Annotated[JobState | None, Query()] = None,
    archived: Annotated[
        Literal["true", "false"],
        Query(description="`true`: archived jobs only; `false` (the default): every other job"),
    ] = "false",
    limit: Limit = 50,
    cursor: Cursor = None,
) -> Response[JobList]:
    page = container().jobs.list_jobs(
        tenant_of(router.current_event),
        state=state,
        limit=limit,
        cursor=cursor,
        archived=archived == "true",
    )
    calendars = container().jobs.calendar_cache()  # one read of each calendar for the page
    items = [view(j, calendars=calendars) for j in page.items]
    return json_response(200, JobList(items=items, next_cursor=page.cursor))


@router.get("/v1/jobs/<job_id>", responses=documented({200: ("OK", JobView)}, ERRORS))
def get_job(job_id: Annotated[str, JOB_ID]) -> Response[JobView]:
    """The job with `nextFireTimes`, and `upcomingFireTimes`: its schedule's next fire times
    with the occurrences its exclusions take off among them, each with why."""
    job = container().jobs.get(tenant_of(router.current_event), job_id)
    return job_response(job, with_next=True, with_reasons=True)


@router.patch(
    "/v1/jobs/<job_id>", responses=documented({200: ("OK", JobView)}, (*VERSIONED_ERRORS, NOT_GRANTED))
)
def update_job(
    job_id: Annotated[str, JOB_ID], patch: Annotated[dict[str, Any], Body()], if_match: IfMatch = None
) -> Response[JobView]:
    version = required_if_match(if_match)
    tenant = tenant_of(router.current_event)

    def build(job: Job) -> JobSpec:
        body, reset_anchor = merge_patch(job, patch)
        return body.to_spec(None if reset_anchor else job.spec.schedule.anchor)

    return job_response(container().jobs.update(tenant, job_id, version, build), with_next=True)


@router.delete("/v1/jobs/<job_id>", responses=ONE_JOB)
def cancel_job(
    job_id: Annotated[str, JOB_ID], if_match: IfMatch = None, body: NoBody = None
) -> Response[JobView]:
    return job_response(
        container().jobs.cancel(tenant_of(router.current_event), job_id, parse_if_match(if_match))
    )


@router.post("/v1/jobs/<job_id>/archive", responses=ONE_JOB)
def archive_job(
    job_id: Annotated[str, JOB_ID], if_match: IfMatch = None, body: NoBody = None
) -> Response[JobView]:
    """Archive an ended job (CANCELLED or COMPLETED; 409 for one still ACTIVE or PAUSED):
    `GET /v1/jobs` leaves it out unless asked `archived=true`; it stays readable by id until
    `expiresAt`, when the table deletes it. Its runs keep their own retention. Archiving an
    archived job returns it unchanged."""
    return job_response(
        container().jobs.archive(tenant_of(router.current_event), job_id, parse_if_match(if_match))
    )


@router.post("/v1/jobs/<job_id>/pause", responses=ONE_JOB)
def pause_job(
    job_id: Annotated[str, JOB_ID], if_match: IfMatch = None, body: NoBody = None
) -> Response[JobView]:
    return job_response(
        container().jobs.pause(tenant_of(router.current_event), job_id, parse_if_match(if_match))
    )


@router.post(
    "/v1/jobs/<job_id>/signing-secret",
    responses=documented({200: ("a new signing secret, shown this once", SigningSecretView)}, CHANGE_ERRORS),
)
def rotate_signing_secret(job_id: Annotated[str, JOB_ID], body: NoBody = None) -> Response[SigningSecretView]:
    """A new secret signs every delivery from now on; the ones before it keep signing beside it
    for 24 hours, so receivers can switch without missing a delivery."""
    rotated = container().jobs.rotate_signing_secret(tenant_of(router.current_event), job_id)
    return json_response(200, SigningSecretView.of(rotated), NO_STORE)


@router.post("/v1/jobs/<job_id>/resume", responses=ONE_JOB)
def resume_job(
    job_id: Annotated[str, JOB_ID], if_match: IfMatch = None, body: NoBody = None
) -> Response[JobView]:
    return job_response(
        container().jobs.resume(tenant_of(router.current_event), job_id, parse_if_match(if_match)),
        with_next=True,
    )
