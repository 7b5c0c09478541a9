"""Routes for runs: a job's runs and summary, manual trigger, backfill, one run with its
history, redrive, cancel, and the dead letters.

Run keys sit in paths as `<jobId>@<instant>`; their ':' and '@' may arrive raw or
percent-encoded."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from ...api_models.requests import BackfillBody, BulkDeadLettersBody, RedriveBody
from ...api_models.views import (
    BackfillView,
    BulkDeadLettersView,
    JobSummaryView,
    RunDetailView,
    RunList,
    RunSummaryList,
    RunSummaryView,
    RunView,
)
from ...domain.errors import ValidationFailed
from ...domain.instants import parse_client_instant
from ...domain.run_listing import RunFilter
from ...domain.runs import RunState, Trigger
from ...services.runs import BulkAction, DeadLetterSelection
from ...wiring import container
from .common import (
    CHANGE_ERRORS,
    JOB_ID,
    NOT_GRANTED,
    RUN_KEY,
    Cursor,
    Limit,
    NoBody,
    documented,
    json_response,
    run_key_of,
)
from .identity import tenant_of

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
def trigger_job(job_id: Annotated[str, JOB_ID], body: NoBody = None) -> Response[RunView]:
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


# --- runs across jobs ---

States = Annotated[
    str | None,
    Query(
        max_length=200,
        description="states to keep, comma-separated (e.g. `DEAD,RETRY_WAIT`); any of them matches",
    ),
]
JobFilter = Annotated[
    str | None, Query(alias="jobId", pattern=r"^j_[0-9a-z]{1,64}$", description="one job's runs")
]
TypeFilter = Annotated[
    str | None, Query(alias="type", min_length=1, max_length=128, description="the job type")
]
ErrorFilter = Annotated[
    str | None,
    Query(alias="errorClass", min_length=1, max_length=128, description="the run's current error class"),
]
TimeFilter = Annotated[
    Literal["scheduled", "finished"],
    Query(alias="timeField", description="what `since` and `until` bound: the scheduled instant or the end"),
]
Since = Annotated[str | None, Query(max_length=64, description="RFC 3339 instant, inclusive")]
Until = Annotated[str | None, Query(max_length=64, description="RFC 3339 instant, exclusive")]


def _states(text: str | None) -> frozenset[RunState] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",")]
    unknown = [name for name in names if name not in RunState.__members__]
    if unknown or not names:
        raise ValidationFailed(
            "state", f"must be one or more of {', '.join(RunState.__members__)}, comma-separated"
        )
    return frozenset(RunState[name] for name in names)


def _instant(field: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_client_instant(text)
    except ValueError as exc:
        raise ValidationFailed(field, str(exc)) from None


@router.get("/v1/runs", responses=documented({200: ("OK", RunSummaryList)}))
def list_runs_across_jobs(
    state: States = None,
    job_id: JobFilter = None,
    job_type: TypeFilter = None,
    trigger: Annotated[Trigger | None, Query(description="how the run was made")] = None,
    error_class: ErrorFilter = None,
    time_field: TimeFilter = "scheduled",
    since: Since = None,
    until: Until = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> Response[RunSummaryList]:
    """The tenant's runs across its jobs, newest scheduled first, filtered (every filter
    given must match)."""
    run_filter = RunFilter(
        states=_states(state),
        job_id=job_id,
        job_type=job_type,
        trigger=trigger,
        error_class=error_class,
        time_field=time_field,
        since=_instant("since", since),
        until=_instant("until", until),
    )
    if run_filter.since and run_filter.until and run_filter.since >= run_filter.until:
        raise ValidationFailed("until", "must be later than since")
    page = container().run_service.list_across_jobs(
        tenant_of(router.current_event), run_filter, limit, cursor
    )
    items = [RunSummaryView.of(summary) for summary in page.items]
    return json_response(200, RunSummaryList(items=items, next_cursor=page.cursor))


# --- one run ---


@router.get("/v1/runs/<run_key>", responses=documented({200: ("OK", RunDetailView)}))
def get_run(run_key: Annotated[str, RUN_KEY]) -> Response[RunDetailView]:
    tenant = tenant_of(router.current_event)
    service = container().run_service
    detail = service.run_detail(tenant, run_key_of(run_key))
    waiting = service.waiting(tenant, [detail.run]).get(detail.run.run_key)
    view = RunDetailView.from_run(
        detail.run,
        waiting,
        region=container().settings.aws_region,
        definition_available=detail.definition_available,
    )
    return json_response(200, view)


@router.post(
    "/v1/runs/<run_key>/redrive",
    responses=documented({200: ("OK", RunView)}, (*CHANGE_ERRORS, NOT_GRANTED)),
)
def redrive_run(
    run_key: Annotated[str, RUN_KEY], body: Annotated[RedriveBody | None, Body()] = None
) -> Response[RunView]:
    tenant = tenant_of(router.current_event)
    reason = body.reason if body else None
    accept = body.accept_repeated_effect if body else False
    fix = body.fix() if body else None
    run = container().run_service.redrive(
        tenant, run_key_of(run_key), actor(tenant), reason, accept_repeated_effect=accept, fix=fix
    )
    return json_response(200, RunView.from_run(run))


@router.post("/v1/runs/<run_key>/cancel", responses=documented({200: ("OK", RunView)}, CHANGE_ERRORS))
def cancel_run(run_key: Annotated[str, RUN_KEY], body: NoBody = None) -> Response[RunView]:
    tenant = tenant_of(router.current_event)
    run = container().run_service.cancel_run(tenant, run_key_of(run_key), actor(tenant))
    return json_response(200, RunView.from_run(run))


@router.get("/v1/dead-letters", responses=documented({200: ("OK", RunList)}))
def list_dead_letters(limit: Limit = 50, cursor: Cursor = None) -> Response[RunList]:
    page = container().run_service.list_dead(tenant_of(router.current_event), limit, cursor)
    return json_response(
        200, RunList(items=[RunView.from_run(r) for r in page.items], next_cursor=page.cursor)
    )


def _bulk(action: BulkAction, body: BulkDeadLettersBody) -> Response[BulkDeadLettersView]:
    filters = {"jobId": body.job_id, "errorClass": body.error_class, "since": body.since, "until": body.until}
    if body.run_keys is not None:
        named = [name for name, value in {**filters, "cursor": body.cursor}.items() if value is not None]
        if named:
            raise ValidationFailed(named[0], "does not combine with runKeys: name the runs, or filter them")
    if body.since and body.until and body.since >= body.until:
        raise ValidationFailed("until", "must be later than since")
    fix = body.fix()
    if fix is not None:
        field = "target" if fix.target is not None else "payload"
        if action != "redrive":
            raise ValidationFailed(field, "applies only to a redrive")
        if body.job_id is None:
            raise ValidationFailed(field, "applies only to the dead letters of one job: filter by jobId")
    tenant = tenant_of(router.current_event)
    selection = DeadLetterSelection(
        reason=body.reason,
        dry_run=body.dry_run,
        run_keys=[run_key_of(key) for key in body.run_keys] if body.run_keys is not None else None,
        job_id=body.job_id,
        error_class=body.error_class,
        since=body.since,
        until=body.until,
        limit=body.limit,
        cursor=body.cursor,
        accept_repeated_effect=body.accept_repeated_effect,
        fix=fix,
    )
    outcome = container().run_service.bulk_dead_letters(tenant, action, selection, actor(tenant))
    return json_response(200, BulkDeadLettersView.of(outcome))


@router.post(
    "/v1/dead-letters/redrive",
    responses=documented({200: ("OK", BulkDeadLettersView)}, (*CHANGE_ERRORS, NOT_GRANTED)),
)
def redrive_dead_letters(body: Annotated[BulkDeadLettersBody, Body()]) -> Response[BulkDeadLettersView]:
    """Redrive many dead letters in one audited request: by `runKeys`, or one page of those
    the filters keep; `dryRun` answers what it would redrive."""
    return _bulk("redrive", body)


@router.post(
    "/v1/dead-letters/cancel", responses=documented({200: ("OK", BulkDeadLettersView)}, CHANGE_ERRORS)
)
def cancel_dead_letters(body: Annotated[BulkDeadLettersBody, Body()]) -> Response[BulkDeadLettersView]:
    """Dismiss many dead letters (each becomes CANCELLED, out of the dead letters, never to
    run) in one audited request; `dryRun` answers what it would dismiss."""
    return _bulk("discard", body)
