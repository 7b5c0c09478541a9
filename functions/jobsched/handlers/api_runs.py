"""Routes for runs: history, manual trigger, backfill, dead letters, redrive, cancel, and the
lease protocol external workers use (claim, heartbeat, complete with the fence).

Included by `api` (which owns the resolver and the error handlers). Run keys sit in paths
as `<jobId>@<instant>`; their ':' and '@' may arrive raw or percent-encoded."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import Field, model_validator

from ..domain.instants import ClientInstant, format_instant
from ..domain.models import JOB_TYPE_PATTERN
from ..domain.runs import Run, RunState, Transition
from ..wiring import container
from .api import ERRORS, JOB_ID, json_response, tenant_of_request
from .api_models import ApiModel, StrictBool, StrictInt

router = Router()

RUN_KEY = Path(min_length=1, max_length=256, description="run key, `<jobId>@<RFC 3339 instant>`")
Limit = Annotated[int, Query(ge=1, le=100)]
Cursor = Annotated[str | None, Query(max_length=4096)]
JobType = Annotated[str, Field(pattern=JOB_TYPE_PATTERN)]


# --- request bodies ---


class BackfillBody(ApiModel):
    start: ClientInstant
    end: ClientInstant


class RedriveBody(ApiModel):
    reason: str | None = Field(default=None, max_length=500)


class ClaimBody(ApiModel):
    types: list[JobType] = Field(min_length=1, max_length=10)
    max_runs: StrictInt = Field(default=1, ge=1, le=10, alias="max")
    lease_seconds: StrictInt = Field(default=60, ge=10, le=900)
    worker_id: str = Field(min_length=1, max_length=128)


MAX_FENCE = 10**18  # far beyond any lease count; keeps the number exact in DynamoDB


class HeartbeatBody(ApiModel):
    fence: StrictInt = Field(ge=0, le=MAX_FENCE)
    lease_seconds: StrictInt = Field(default=60, ge=10, le=900)


class ReportedError(ApiModel):
    error_class: str = Field(alias="class", min_length=1, max_length=128)
    message: str = Field(max_length=4000)
    retryable: StrictBool = True


class CompleteBody(ApiModel):
    fence: StrictInt = Field(ge=0, le=MAX_FENCE)
    outcome: Literal["succeeded", "failed"]
    result: Any = None
    error: ReportedError | None = None

    @model_validator(mode="after")
    def _error_only_on_failure(self) -> CompleteBody:
        if self.error is not None and self.outcome == "succeeded":
            raise ValueError("error: only applies when outcome is failed")
        return self


# --- response shapes (also the OpenAPI document) ---


class RunView(ApiModel):
    run_key: str
    job_id: str
    state: RunState
    trigger: str
    scheduled_for: str
    due_at: str
    attempt: int
    fence: int
    redrives: int
    definition_version: int
    priority: str
    reason: str | None = None
    last_error_class: str | None = None
    last_error_message: str | None = None
    result: Any = None
    created_at: str
    updated_at: str
    finished_at: str | None = None
    lease_expires_at: str | None = None
    skipped_through: str | None = None
    skipped_count: int | None = None
    blocked_by: str | None = None


class AttemptView(ApiModel):
    attempt: int
    fence: int
    started_at: str
    ended_at: str | None = None
    outcome: str | None = Field(
        default=None, description="succeeded | failed | dead | cancelled | lease_expired; null while running"
    )
    error_class: str | None = None


class TransitionView(ApiModel):
    at: str
    actor: str
    from_: RunState | None = Field(default=None, alias="from")
    to: RunState
    fence: int
    attempt: int
    error_class: str | None = None
    error_message: str | None = None
    reason: str | None = None


class RunDetailView(RunView):
    attempts: list[AttemptView]
    transitions: list[TransitionView]
    history_dropped: int = 0  # transitions left out to keep the run in its byte budget


class RunList(ApiModel):
    items: list[RunView]
    next_cursor: str | None = None


class BackfillView(ApiModel):
    created: list[str]
    existing: list[str]


class LeaseView(ApiModel):
    run_key: str
    job_id: str
    type: str
    scheduled_for: str
    attempt: int
    fence: int
    lease_expires_at: str
    payload: Any = None


class LeaseList(ApiModel):
    leases: list[LeaseView]


class HeartbeatView(ApiModel):
    run_key: str
    fence: int
    lease_expires_at: str


class CountersView(ApiModel):
    missed: int
    overlap_skipped: int
    succeeded: int
    dead: int
    cancelled: int


class JobSummaryView(ApiModel):
    job_id: str
    next_fire_times: list[str]
    last_runs: list[RunView]
    counters: CountersView


# --- mapping ---


def _iso(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


def run_summary(run: Run) -> dict[str, Any]:
    return {
        "runKey": run.run_key,
        "jobId": run.job_id,
        "state": run.state.value,
        "trigger": run.trigger.value,
        "scheduledFor": _iso(run.scheduled_for),
        "dueAt": _iso(run.due_at),
        "attempt": run.attempt,
        "fence": run.fence,
        "redrives": run.redrives,
        "definitionVersion": run.definition_version,
        "priority": run.priority.value,
        "reason": run.reason,
        "lastErrorClass": run.last_error_class,
        "lastErrorMessage": run.last_error_message,
        "result": run.result,
        "createdAt": _iso(run.created_at),
        "updatedAt": _iso(run.updated_at),
        "finishedAt": _iso(run.finished_at),
        "leaseExpiresAt": _iso(run.lease_expires_at),
        "skippedThrough": _iso(run.skipped_through),
        "skippedCount": run.skipped_count,
        "blockedBy": run.blocked_by,
    }


# How the transition that ends a lease reads as the outcome of that attempt.
_ATTEMPT_OUTCOMES = {
    RunState.SUCCEEDED: "succeeded",
    RunState.RETRY_WAIT: "failed",
    RunState.DEAD: "dead",
    RunState.CANCELLED: "cancelled",
    RunState.LEASED: "lease_expired",  # another claim took over an expired lease
}


def attempts_of(history: list[Transition]) -> list[dict[str, Any]]:
    """One entry per claim (a transition into LEASED), ended by the next transition out of it."""
    attempts: list[dict[str, Any]] = []
    for index, entry in enumerate(history):
        if entry.target is not RunState.LEASED:
            continue
        # Heartbeats record nothing, so the next move out of LEASED ends this lease.
        ending = next((later for later in history[index + 1 :] if later.source is RunState.LEASED), None)
        attempts.append(
            {
                "attempt": entry.attempt,
                "fence": entry.fence,
                "startedAt": _iso(entry.at),
                "endedAt": _iso(ending.at) if ending else None,
                "outcome": _ATTEMPT_OUTCOMES.get(ending.target) if ending else None,
                "errorClass": ending.error_class if ending else None,
            }
        )
    return attempts


def transition_view(entry: Transition) -> dict[str, Any]:
    return {
        "at": _iso(entry.at),
        "actor": entry.actor,
        "from": entry.source.value if entry.source else None,
        "to": entry.target.value,
        "fence": entry.fence,
        "attempt": entry.attempt,
        "errorClass": entry.error_class,
        "errorMessage": entry.error_message,
        "reason": entry.reason,
    }


def run_detail(run: Run) -> dict[str, Any]:
    return {
        **run_summary(run),
        "attempts": attempts_of(run.history),
        "transitions": [transition_view(t) for t in run.history],
        "historyDropped": run.history_dropped,
    }


def lease_view(run: Run) -> dict[str, Any]:
    return {
        "runKey": run.run_key,
        "jobId": run.job_id,
        "type": run.job_type,
        "scheduledFor": _iso(run.scheduled_for),
        "attempt": run.attempt,
        "fence": run.fence,
        "leaseExpiresAt": _iso(run.lease_expires_at),
        "payload": run.payload,
    }


def run_key_of(raw: str) -> str:
    """Path segments may carry the key percent-encoded (`%40`, `%3A`) or raw."""
    return unquote(raw)


def actor() -> str:
    return f"api:{tenant_of_request()}"


def _ok(model: type[ApiModel], status: int = 200) -> dict[int, Any]:
    return {status: {"description": "OK", "content": {"application/json": {"model": model}}}, **ERRORS}


# --- runs of a job ---


@router.get("/v1/jobs/<job_id>/runs", responses=_ok(RunList))
def list_runs(job_id: Annotated[str, JOB_ID], limit: Limit = 50, cursor: Cursor = None) -> Response[RunList]:
    page = container().run_service.list_runs(tenant_of_request(), job_id, limit, cursor)
    return json_response(200, {"items": [run_summary(r) for r in page.items], "nextCursor": page.cursor})


@router.get("/v1/jobs/<job_id>/summary", responses=_ok(JobSummaryView))
def job_summary(job_id: Annotated[str, JOB_ID]) -> Response[JobSummaryView]:
    summary = container().run_service.summary(tenant_of_request(), job_id)
    stats = summary.counters
    return json_response(
        200,
        {
            "jobId": summary.job.job_id,
            "nextFireTimes": [format_instant(t) for t in container().jobs.next_fire_times(summary.job, 5)],
            "lastRuns": [run_summary(r) for r in summary.last_runs],
            "counters": {
                "missed": stats.get("missed", 0),
                "overlapSkipped": stats.get("overlap_skipped", 0),
                "succeeded": stats.get("succeeded", 0),
                "dead": stats.get("dead", 0),
                "cancelled": stats.get("cancelled", 0),
            },
        },
    )


@router.post("/v1/jobs/<job_id>/trigger", responses=_ok(RunView, 201))
def trigger_job(job_id: Annotated[str, JOB_ID]) -> Response[RunView]:
    run = container().run_service.trigger(tenant_of_request(), job_id, actor())
    return json_response(201, run_summary(run))


@router.post("/v1/jobs/<job_id>/backfill", responses=_ok(BackfillView, 201))
def backfill_job(
    job_id: Annotated[str, JOB_ID], body: Annotated[BackfillBody, Body()]
) -> Response[BackfillView]:
    result = container().run_service.backfill(tenant_of_request(), job_id, body.start, body.end, actor())
    return json_response(201, {"created": result.created, "existing": result.existing})


# --- one run ---


@router.get("/v1/runs/<run_key>", responses=_ok(RunDetailView))
def get_run(run_key: Annotated[str, RUN_KEY]) -> Response[RunDetailView]:
    run = container().run_service.get_run(tenant_of_request(), run_key_of(run_key))
    return json_response(200, run_detail(run))


@router.post("/v1/runs/<run_key>/redrive", responses=_ok(RunView))
def redrive_run(
    run_key: Annotated[str, RUN_KEY], body: Annotated[RedriveBody | None, Body()] = None
) -> Response[RunView]:
    reason = body.reason if body else None
    run = container().run_service.redrive(tenant_of_request(), run_key_of(run_key), actor(), reason)
    return json_response(200, run_summary(run))


@router.post("/v1/runs/<run_key>/cancel", responses=_ok(RunView))
def cancel_run(run_key: Annotated[str, RUN_KEY]) -> Response[RunView]:
    run = container().run_service.cancel_run(tenant_of_request(), run_key_of(run_key), actor())
    return json_response(200, run_summary(run))


@router.get("/v1/dead-letters", responses=_ok(RunList))
def list_dead_letters(limit: Limit = 50, cursor: Cursor = None) -> Response[RunList]:
    page = container().run_service.list_dead(tenant_of_request(), limit, cursor)
    return json_response(200, {"items": [run_summary(r) for r in page.items], "nextCursor": page.cursor})


# --- leases for external workers ---


@router.post("/v1/leases", responses=_ok(LeaseList))
def claim_leases(body: Annotated[ClaimBody, Body()]) -> Response[LeaseList]:
    runs = container().run_service.claim(
        tenant_of_request(), body.types, body.max_runs, body.lease_seconds, body.worker_id
    )
    return json_response(200, {"leases": [lease_view(r) for r in runs]})


@router.post("/v1/leases/<run_key>/heartbeat", responses=_ok(HeartbeatView))
def heartbeat_lease(
    run_key: Annotated[str, RUN_KEY], body: Annotated[HeartbeatBody, Body()]
) -> Response[HeartbeatView]:
    run = container().run_service.heartbeat(
        tenant_of_request(), run_key_of(run_key), body.fence, body.lease_seconds
    )
    return json_response(
        200, {"runKey": run.run_key, "fence": run.fence, "leaseExpiresAt": _iso(run.lease_expires_at)}
    )


@router.post("/v1/leases/<run_key>/complete", responses=_ok(RunView))
def complete_lease(
    run_key: Annotated[str, RUN_KEY], body: Annotated[CompleteBody, Body()]
) -> Response[RunView]:
    error = body.error
    run = container().run_service.complete(
        tenant_of_request(),
        run_key_of(run_key),
        body.fence,
        body.outcome,
        result=body.result,
        error_class=error.error_class if error else None,
        error_message=error.message if error else None,
        retryable=error.retryable if error else True,
    )
    return json_response(200, run_summary(run))
