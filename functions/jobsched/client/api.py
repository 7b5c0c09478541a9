"""`Client`: every operation of the jobsched HTTP API as a typed method. Requests are built
from, and answers parsed into, the server's own models (`jobsched.api_models`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from ..api_models.requests import (
    BackfillBody,
    BulkDeadLettersBody,
    CalendarBody,
    ClaimBody,
    CompleteBody,
    HeartbeatBody,
    JobBody,
    RedriveBody,
    ReportedError,
    SchedulePreviewBody,
)
from ..api_models.views import (
    BackfillView,
    BulkDeadLettersView,
    CalendarList,
    CalendarView,
    CreatedJobView,
    HeartbeatView,
    JobBatchView,
    JobList,
    JobSummaryView,
    JobView,
    LeaseList,
    LeaseView,
    RunDetailView,
    RunList,
    RunSummaryList,
    RunSummaryView,
    RunView,
    SchedulePreviewView,
    SigningSecretView,
)
from ..domain.instants import format_instant
from ..domain.models import TOLERANT, JobState, Target
from ..domain.runs import RunState, Trigger
from .errors import UnexpectedResponse, shape_problems
from .http import Connection, Reply, Transport, etag, quote_segment

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

RunsView = Literal["history", "upcoming", "all"]
TimeField = Literal["scheduled", "finished"]
Instant = datetime | str
JobRef = JobView | str
Version = int | str  # a job's version (3), or its ETag as the server sent it ('"3"')
MERGE_PATCH = "application/merge-patch+json"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # a field not given (as opposed to one given as None)


def _instant(value: Instant) -> str:
    """An RFC 3339 string as given, or an aware datetime formatted as one (to the second).
    Raises ValueError for a naive datetime."""
    return value if isinstance(value, str) else format_instant(value)


def _dump(model: BaseModel) -> dict[str, Any]:
    """The body as the API spells it: aliases, JSON types, only the fields that were set."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


class _Page(Protocol[T_co]):
    @property
    def items(self) -> Sequence[T_co]: ...

    @property
    def next_cursor(self) -> str | None: ...


def _pages(fetch: Callable[[str | None], _Page[T]], cursor: str | None) -> Iterator[T]:
    """The items of every page from `cursor` on, each page fetched when the one before is used up."""
    while True:
        page = fetch(cursor)
        yield from page.items
        cursor = page.next_cursor
        if not cursor:
            return


class Client:
    """The jobsched API at `endpoint` (its base URL, a stage path included).

    Authentication: `api_key` is sent as `x-api-key` (local mode's keys, or an API Gateway
    usage plan); `sigv4` signs every request for `execute-api` with botocore's credentials
    (or `credentials`) in `region`, else the region in an execute-api host name, else
    botocore's configured one. Retries: up to `retries` more tries of an answer 429 (after
    its Retry-After), and of a safe request (a GET, a create with an idempotency key, or a
    call marked `idempotent`) that got no answer, 502, 503 or 504. `timeout` is per try.
    `transport` replaces urllib (a callable `(method, url, headers, body) -> (status,
    headers, body)`); `sleep`, `clock` and `jitter` replace time.sleep, time.time and
    random.random.

    Every method raises `ApiError` (its subclass for the status: Invalid, Unauthorized,
    Forbidden, NotFound, Conflict, VersionMismatch, PreconditionRequired, RateLimited,
    ServerError, Unavailable) for an error answer, `ApiUnreachable` when there is no answer,
    `SigningUnavailable` when SigV4 has no credentials or region, and `UnexpectedResponse`
    when a success is not the documented shape (a server of another version). Methods that
    build a request body from arguments raise pydantic's ValidationError, sending nothing,
    when an argument is not of the body's types."""

    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None = None,
        sigv4: bool = False,
        region: str | None = None,
        timeout: float = 30,
        retries: int = 3,
        transport: Transport | None = None,
        credentials: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.connection = Connection(
            endpoint,
            api_key=api_key,
            sigv4=sigv4,
            region=region,
            timeout=timeout,
            retries=retries,
            transport=transport,
            credentials=credentials,
            sleep=sleep,
            clock=clock,
            jitter=jitter,
        )

    @classmethod
    def over(cls, connection: Connection) -> Client:
        """A client on an existing connection (its endpoint, authentication and retries)."""
        client = cls.__new__(cls)
        client.connection = connection
        return client

    @property
    def endpoint(self) -> str:
        return self.connection.endpoint

    @property
    def api_key(self) -> str | None:
        return self.connection.api_key

    @property
    def sigv4(self) -> bool:
        return self.connection.sigv4

    # --- plumbing ---

    def _send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
    ) -> Reply:
        return self.connection.request(method, path, body, headers, query, idempotent=idempotent)

    @staticmethod
    def _parse(model: type[M], reply: Reply) -> M:
        try:
            # Members a newer server added are ignored, not refused (api_models.views).
            return model.model_validate(reply.body, context=TOLERANT)
        except ValidationError as exc:
            raise UnexpectedResponse(reply.status, reply.body, shape_problems(exc)) from None

    def _get(self, model: type[M], path: str, query: Mapping[str, Any] | None = None) -> M:
        return self._parse(model, self._send("GET", path, query=query))

    @staticmethod
    def _job_path(job: JobRef, suffix: str = "") -> str:
        job_id = job.job_id if isinstance(job, JobView) else job
        return f"/v1/jobs/{quote_segment(job_id)}{suffix}"

    @staticmethod
    def _if_match(job: JobRef, version: Version | None) -> dict[str, str]:
        if version is None and isinstance(job, JobView):
            version = job.version
        return {"if-match": etag(version)} if version is not None else {}

    # --- jobs ---

    def create_job(
        self, job: JobBody | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> CreatedJobView | JobView:
        """`POST /v1/jobs`. `job`: a JobBody, or a mapping in the API's spelling validated
        into one. With `idempotency_key` (header; or `idempotencyKey` in the body) the
        request is safe to repeat, and is repeated after a lost answer.

        Returns CreatedJobView (201: with the signing secret, shown this once) or, when the
        key was used before with the same body, the job it made as a JobView (200).
        Raises Invalid, Forbidden (`target_not_granted`), Conflict
        (`idempotency_key_reused`), RateLimited (e.g. the tenant's job limit)."""
        body = job if isinstance(job, JobBody) else JobBody.model_validate(job)
        headers = {"idempotency-key": idempotency_key} if idempotency_key else None
        repeatable = bool(idempotency_key or body.idempotency_key)
        reply = self._send("POST", "/v1/jobs", _dump(body), headers=headers, idempotent=repeatable)
        return self._parse(CreatedJobView if reply.status == 201 else JobView, reply)

    def create_jobs(
        self, jobs: Iterable[JobBody | Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> JobBatchView:
        """`POST /v1/jobs/batch`: up to MAX_BATCH_JOBS (100) jobs in one request, each created
        as `create_job` would one after another. `jobs`: JobBody models, or mappings in the
        API's spelling validated into them. With `idempotency_key` the job at index i gets the
        key `<idempotency_key>#<i>` unless it has its own `idempotencyKey`; the request is
        then safe to repeat (each job replays), and is repeated after a lost answer.

        Returns JobBatchView: one item per job, in order, with `status` 201 (`job` is a
        CreatedJobView with its signing secret), 200 (replayed: the JobView its key made) or
        the refusal's status with `error` (the error body a single create gives). Raises
        Invalid when the request itself is refused (no jobs, more than 100) and the errors of
        any request (Unauthorized, RateLimited, Unavailable...)."""
        bodies = [job if isinstance(job, JobBody) else JobBody.model_validate(job) for job in jobs]
        headers = {"idempotency-key": idempotency_key} if idempotency_key else None
        repeatable = bool(idempotency_key) or all(body.idempotency_key for body in bodies)
        payload = {"jobs": [_dump(body) for body in bodies]}
        reply = self._send("POST", "/v1/jobs/batch", payload, headers=headers, idempotent=repeatable)
        return self._parse(JobBatchView, reply)

    def get_job(self, job_id: str) -> JobView:
        """`GET /v1/jobs/{id}`: the job with its next five fire times (`next_fire_times`), and
        its schedule's as a preview lists them (`upcoming_fire_times`: the occurrences its
        exclusions take off among them too, each line with why). Raises NotFound."""
        return self._get(JobView, self._job_path(job_id))

    def list_jobs(
        self,
        *,
        state: JobState | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        archived: bool = False,
    ) -> JobList:
        """`GET /v1/jobs`: one page (`items`, `next_cursor`) of the tenant's jobs, in `state`
        when given; the archived ones alone with `archived`, else every other one.
        `limit`: 1-100 (the API's default 50)."""
        query = {"state": state, "limit": limit, "cursor": cursor, "archived": "true" if archived else None}
        return self._get(JobList, "/v1/jobs", query)

    def iter_jobs(
        self,
        *,
        state: JobState | str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        archived: bool = False,
    ) -> Iterator[JobView]:
        """Every job (in `state`; archived ones alone with `archived`), page after page from
        `cursor`, fetched as iterated."""
        return _pages(
            lambda c: self.list_jobs(state=state, limit=page_size, cursor=c, archived=archived), cursor
        )

    def update_job(self, job: JobRef, patch: Mapping[str, Any], *, version: Version | None = None) -> JobView:
        """`PATCH /v1/jobs/{id}` with `patch` as a JSON merge patch (RFC 7396: a null removes
        a field, an object merges, anything else replaces), sent with If-Match: `version`
        (a number, or an ETag as the server sent it), else the version of `job` when it is
        a JobView. Without either the API answers 428.

        Returns the job as changed. Raises VersionMismatch (the job changed since;
        `current_version`), PreconditionRequired, Invalid, NotFound, Conflict."""
        headers = {"content-type": MERGE_PATCH, **self._if_match(job, version)}
        return self._parse(JobView, self._send("PATCH", self._job_path(job), dict(patch), headers=headers))

    def pause_job(self, job: JobRef, *, version: Version | None = None) -> JobView:
        """`POST /v1/jobs/{id}/pause`; conditional on `version` (or a JobView's version)
        when known, else unconditional. Raises VersionMismatch, Conflict, NotFound."""
        return self._job_action("POST", job, "/pause", version)

    def resume_job(self, job: JobRef, *, version: Version | None = None) -> JobView:
        """`POST /v1/jobs/{id}/resume`; If-Match as for pause_job. Raises VersionMismatch,
        Conflict, NotFound."""
        return self._job_action("POST", job, "/resume", version)

    def cancel_job(self, job: JobRef, *, version: Version | None = None) -> JobView:
        """`DELETE /v1/jobs/{id}`: the job is cancelled (its open runs too); If-Match as for
        pause_job. Returns the cancelled job. Raises VersionMismatch, Conflict, NotFound."""
        return self._job_action("DELETE", job, "", version)

    def archive_job(self, job: JobRef, *, version: Version | None = None) -> JobView:
        """`POST /v1/jobs/{id}/archive`: the ended (cancelled or completed) job is left out of
        `list_jobs` unless asked for `archived`; it is deleted at its `expires_at`, its runs
        at their own retention. If-Match as for pause_job. Returns the archived job (an
        archived one unchanged). Raises Conflict (the job is still ACTIVE or PAUSED),
        VersionMismatch, NotFound."""
        return self._job_action("POST", job, "/archive", version)

    def _job_action(self, method: str, job: JobRef, suffix: str, version: Version | None) -> JobView:
        headers = self._if_match(job, version)
        return self._parse(JobView, self._send(method, self._job_path(job, suffix), headers=headers))

    def rotate_signing_secret(self, job_id: str) -> SigningSecretView:
        """`POST /v1/jobs/{id}/signing-secret`: a new webhook signing secret (shown this once);
        the previous ones keep signing until `previous_secrets_retire_at`. Raises NotFound,
        Conflict, RateLimited."""
        return self._parse(SigningSecretView, self._send("POST", self._job_path(job_id, "/signing-secret")))

    def trigger_job(self, job_id: str) -> RunView:
        """`POST /v1/jobs/{id}/trigger`: a manual run, due now. Raises NotFound, Conflict."""
        return self._parse(RunView, self._send("POST", self._job_path(job_id, "/trigger")))

    def backfill_job(self, job_id: str, start: Instant, end: Instant) -> BackfillView:
        """`POST /v1/jobs/{id}/backfill`: a run for each fire time t with start <= t < end
        (RFC 3339 strings or aware datetimes; one at `end` is not run). Returns the run keys
        `created` and those `existing`. Raises Invalid (naming `start` when start >= end,
        `end` when it is in the future, both past 1,000 fire times), NotFound, Conflict."""
        body = BackfillBody.model_validate({"start": _instant(start), "end": _instant(end)})
        return self._parse(BackfillView, self._send("POST", self._job_path(job_id, "/backfill"), _dump(body)))

    def job_summary(self, job_id: str) -> JobSummaryView:
        """`GET /v1/jobs/{id}/summary`: next fire times, last runs and counters. Raises NotFound."""
        return self._get(JobSummaryView, self._job_path(job_id, "/summary"))

    # --- schedules ---

    def preview_schedule(self, schedule: SchedulePreviewBody | Mapping[str, Any]) -> SchedulePreviewView:
        """`POST /v1/schedules/preview`: a schedule not saved (`cron`, `specs`, `exclude`,
        `dst`... as a job's body spells them; `count`, `after`): its next fire times, and the
        occurrences its exclusions take off among them, each with why. Saves nothing. Raises
        Invalid as creating a job of that schedule would."""
        body = (
            schedule
            if isinstance(schedule, SchedulePreviewBody)
            else SchedulePreviewBody.model_validate(schedule)
        )
        reply = self._send("POST", "/v1/schedules/preview", _dump(body), idempotent=True)
        return self._parse(SchedulePreviewView, reply)

    # --- calendars ---

    @staticmethod
    def _calendar_path(name: str) -> str:
        return f"/v1/calendars/{quote_segment(name)}"

    def put_calendar(self, name: str, entries: CalendarBody | Iterable[Mapping[str, Any]]) -> CalendarView:
        """`PUT /v1/calendars/{name}`: create the tenant's calendar `name`, or replace all its
        entries (a new version), each `{"date": ...}`, `{"startDate": ..., "endDate": ...}`
        or `{"start": ..., "end": ...}`. Safe to repeat (the same entries), and repeated after a
        lost answer. Returns the calendar as written. Raises Invalid (an entry, the name, more
        than 1,000 entries), RateLimited (the tenant's number of calendars)."""
        body = (
            entries
            if isinstance(entries, CalendarBody)
            else CalendarBody.model_validate({"entries": list(entries)})
        )
        reply = self._send("PUT", self._calendar_path(name), _dump(body), idempotent=True)
        return self._parse(CalendarView, reply)

    def get_calendar(self, name: str) -> CalendarView:
        """`GET /v1/calendars/{name}`: the calendar's entries and how many live jobs use it
        (`used_by`). Raises NotFound (another tenant's calendar of that name included)."""
        return self._get(CalendarView, self._calendar_path(name))

    def list_calendars(self) -> CalendarList:
        """`GET /v1/calendars`: every calendar of the tenant, by name (without entries)."""
        return self._get(CalendarList, "/v1/calendars")

    def delete_calendar(self, name: str) -> CalendarView:
        """`DELETE /v1/calendars/{name}`: returns the calendar as it was. Raises NotFound,
        Conflict (`calendar_in_use`: an active or paused job references it)."""
        return self._parse(CalendarView, self._send("DELETE", self._calendar_path(name)))

    # --- runs of a job ---

    def list_runs(
        self,
        job_id: str,
        *,
        view: RunsView | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RunList:
        """`GET /v1/jobs/{id}/runs`: one page of the job's runs in `view` (`history`, the
        API's default: due by now, newest first; `upcoming`; `all`). Raises NotFound."""
        query = {"limit": limit, "cursor": cursor, "view": view}
        return self._get(RunList, self._job_path(job_id, "/runs"), query)

    def iter_runs(
        self, job_id: str, *, view: RunsView | None = None, page_size: int = 100, cursor: str | None = None
    ) -> Iterator[RunView]:
        """Every run of the job in `view`, page after page, fetched as iterated."""
        return _pages(lambda c: self.list_runs(job_id, view=view, limit=page_size, cursor=c), cursor)

    # --- runs across jobs ---

    def list_runs_across_jobs(
        self,
        *,
        state: RunState | str | Iterable[RunState | str] | None = None,
        job_id: str | None = None,
        job_type: str | None = None,
        trigger: Trigger | str | None = None,
        error_class: str | None = None,
        time_field: TimeField | None = None,
        since: Instant | None = None,
        until: Instant | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RunSummaryList:
        """`GET /v1/runs`: one page of the tenant's runs, newest scheduled first, that every
        filter given matches: `state` (one or several: any matches), `job_id`, `job_type`,
        `trigger`, `error_class`, and `since` (inclusive) / `until` (exclusive) bounding
        `time_field` (`scheduled`, the API's default, or `finished`). A page may hold fewer
        than `limit` runs and still have a `next_cursor`. Raises Invalid."""
        states = state if state is None or isinstance(state, str) else ",".join(state)
        query = {
            "state": states,
            "jobId": job_id,
            "type": job_type,
            "trigger": trigger,
            "errorClass": error_class,
            "timeField": time_field,
            "since": _instant(since) if since is not None else None,
            "until": _instant(until) if until is not None else None,
            "limit": limit,
            "cursor": cursor,
        }
        return self._get(RunSummaryList, "/v1/runs", query)

    def iter_runs_across_jobs(
        self, *, page_size: int = 100, cursor: str | None = None, **filters: Any
    ) -> Iterator[RunSummaryView]:
        """Every run `filters` (list_runs_across_jobs' keywords) keep, page after page."""
        return _pages(lambda c: self.list_runs_across_jobs(**filters, limit=page_size, cursor=c), cursor)

    # --- one run ---

    def get_run(self, run_key: str) -> RunDetailView:
        """`GET /v1/runs/{key}`: the run with its target, payload, attempts and transitions.
        Raises NotFound."""
        return self._get(RunDetailView, f"/v1/runs/{quote_segment(run_key)}")

    def cancel_run(self, run_key: str) -> RunView:
        """`POST /v1/runs/{key}/cancel`: an open run becomes CANCELLED. Raises NotFound,
        Conflict (it is finished)."""
        return self._parse(RunView, self._send("POST", f"/v1/runs/{quote_segment(run_key)}/cancel"))

    def redrive_run(
        self,
        run_key: str,
        *,
        reason: str | None = None,
        accept_repeated_effect: bool = False,
        target: Target | Mapping[str, Any] | None = None,
        payload: Any = UNSET,
    ) -> RunView:
        """`POST /v1/runs/{key}/redrive`: a DEAD run runs again, with a fresh series of
        attempts. `target` and `payload` (given: even None) replace the run's own from now
        on. `accept_repeated_effect`: required for an at-most-once run whose effect may have
        started. Returns the reopened run. Raises Invalid, Forbidden (`target_not_granted`),
        NotFound, Conflict (not dead; `effect_may_repeat`)."""
        fields: dict[str, Any] = {"reason": reason} if reason is not None else {}
        if accept_repeated_effect:
            fields["accept_repeated_effect"] = True
        if target is not None:
            fields["target"] = target
        if payload is not UNSET:
            fields["payload"] = payload
        body = RedriveBody.model_validate(fields)
        path = f"/v1/runs/{quote_segment(run_key)}/redrive"
        return self._parse(RunView, self._send("POST", path, _dump(body)))

    # --- dead letters ---

    def list_dead_letters(self, *, limit: int | None = None, cursor: str | None = None) -> RunList:
        """`GET /v1/dead-letters`: one page of the tenant's DEAD runs."""
        return self._get(RunList, "/v1/dead-letters", {"limit": limit, "cursor": cursor})

    def iter_dead_letters(self, *, page_size: int = 100, cursor: str | None = None) -> Iterator[RunView]:
        """Every dead letter, page after page, fetched as iterated."""
        return _pages(lambda c: self.list_dead_letters(limit=page_size, cursor=c), cursor)

    def redrive_dead_letters(
        self, selection: BulkDeadLettersBody | None = None, **fields: Any
    ) -> BulkDeadLettersView:
        """`POST /v1/dead-letters/redrive`: redrive many dead letters in one audited request,
        those of `selection` (or a BulkDeadLettersBody made of `fields`: `reason`, and
        `run_keys`, or the filters `job_id`, `error_class`, `since`, `until`, `cursor`; also
        `dry_run`, `limit`, `accept_repeated_effect`, and a fix: `target`, `payload`).
        Returns what was redriven, what was refused and why, and `next_cursor` when more
        match. Raises Invalid, Forbidden, RateLimited."""
        return self._bulk("redrive", selection, fields)

    def cancel_dead_letters(
        self, selection: BulkDeadLettersBody | None = None, **fields: Any
    ) -> BulkDeadLettersView:
        """`POST /v1/dead-letters/cancel`: dismiss many dead letters (each becomes CANCELLED)
        in one audited request; `selection`/`fields` as for redrive_dead_letters, without a
        fix. Raises Invalid, RateLimited."""
        return self._bulk("cancel", selection, fields)

    def _bulk(
        self, action: str, selection: BulkDeadLettersBody | None, fields: dict[str, Any]
    ) -> BulkDeadLettersView:
        if selection is None:
            for name in ("since", "until"):
                if isinstance(fields.get(name), datetime):
                    fields[name] = _instant(fields[name])
            selection = BulkDeadLettersBody.model_validate(fields)
        elif fields:
            raise TypeError("give a selection or its fields, not both")
        reply = self._send("POST", f"/v1/dead-letters/{action}", _dump(selection))
        return self._parse(BulkDeadLettersView, reply)

    # --- leases (external workers) ---

    def claim(
        self, types: list[str], worker_id: str, *, max_runs: int = 1, lease_seconds: int = 60
    ) -> list[LeaseView]:
        """`POST /v1/leases`: lease up to `max_runs` (1-10) due runs of `types` for
        `lease_seconds` (10-900) as `worker_id`. Returns the leases (none: nothing due);
        each carries the `fence` its heartbeats and completion must send."""
        body = ClaimBody.model_validate(
            {"types": types, "worker_id": worker_id, "max_runs": max_runs, "lease_seconds": lease_seconds}
        )
        return self._parse(LeaseList, self._send("POST", "/v1/leases", _dump_all(body))).leases

    def heartbeat(
        self, run_key: str, fence: int, *, lease_seconds: int = 60, idempotent: bool = False
    ) -> HeartbeatView:
        """`POST /v1/leases/{key}/heartbeat`: the lease runs `lease_seconds` from now.
        `idempotent`: also send it again after no answer, 502, 503 or 504 (a renewal under
        the same fence may be repeated: it renews the same lease, or is refused).
        Raises Conflict (`stale_fence`: the lease is gone), NotFound."""
        body = HeartbeatBody.model_validate({"fence": fence, "lease_seconds": lease_seconds})
        path = f"/v1/leases/{quote_segment(run_key)}/heartbeat"
        reply = self._send("POST", path, _dump_all(body), idempotent=idempotent)
        return self._parse(HeartbeatView, reply)

    def complete(
        self,
        run_key: str,
        fence: int,
        outcome: Literal["succeeded", "failed"],
        *,
        result: Any = None,
        error: ReportedError | Mapping[str, Any] | None = None,
        idempotent: bool = False,
    ) -> RunView:
        """`POST /v1/leases/{key}/complete` under `fence`: `succeeded` with `result`, or
        `failed` with `error` (`class`, `message`, `retryable`). Returns the run as it
        ends up (SUCCEEDED, RETRY_WAIT, DEAD). `idempotent`: also send it again after no
        answer, 502, 503 or 504 (the fence makes a repeat harmless: a completion that
        already landed is refused as `stale_fence`, never applied twice).
        Raises Conflict (`stale_fence`), Invalid."""
        fields: dict[str, Any] = {"fence": fence, "outcome": outcome}
        if result is not None:
            fields["result"] = result
        if error is not None:
            fields["error"] = error
        body = CompleteBody.model_validate(fields)
        path = f"/v1/leases/{quote_segment(run_key)}/complete"
        return self._parse(RunView, self._send("POST", path, _dump(body), idempotent=idempotent))

    # --- the API's own documents ---

    def openapi(self) -> dict[str, Any]:
        """`GET /openapi.json`: the API's OpenAPI document."""
        document = self._send("GET", "/openapi.json").body
        if not isinstance(document, dict):
            raise UnexpectedResponse(200, document, "not a JSON object")
        return document

    def docs_page(self) -> str:
        """`GET /docs`: the Swagger UI page (one self-contained HTML file)."""
        page = self._send("GET", "/docs", headers={"accept": "text/html"}).body
        return page if isinstance(page, str) else str(page)

    def local_events(self, after: int, *, limit: int = 100) -> dict[str, Any]:
        """Local mode only, `GET /local/events`: the caller's events the bus received after
        position `after` (`{"items": [CloudEvent, ...], "cursor": N}`). Raises NotFound
        elsewhere (a deployed stack's events are read from its bus)."""
        page = self._send("GET", "/local/events", query={"after": after, "limit": limit}).body
        if not isinstance(page, dict):
            raise UnexpectedResponse(200, page, "not a JSON object")
        return page


def _dump_all(model: BaseModel) -> dict[str, Any]:
    """Every field, defaults included (the lease bodies: what was asked is sent as asked)."""
    return model.model_dump(mode="json", by_alias=True)
