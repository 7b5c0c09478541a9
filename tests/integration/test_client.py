"""`jobsched.client.Client` against the real `api` handler (in process, each request routed in
as the API Gateway event local mode's front makes of it), against fake transports for its
retries and signing, and once over real HTTP against local mode."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from jobsched.client import (
    MAX_BATCH_JOBS,
    ApiError,
    ApiUnreachable,
    BulkDeadLettersBody,
    Client,
    ClientError,
    Conflict,
    CreatedJobView,
    Invalid,
    JobBody,
    JobView,
    NotFound,
    PreconditionRequired,
    RateLimited,
    RedirectRefused,
    ServerError,
    Unauthorized,
    Unavailable,
    UnexpectedResponse,
    UrllibTransport,
    VersionMismatch,
)
from jobsched.client.http import redirect_refusal
from jobsched.domain.runs import RunState

from tests.helpers import T0, StubApi

pytestmark = pytest.mark.integration

ENDPOINT = "https://api.example.com"
NOW = "2026-11-02T08:00:00Z"  # T0


class HandlerTransport:
    """Sends the client's requests into the `api` handler as `tenant`; records each exchange."""

    def __init__(self, tenant: str | None = "tenant-a") -> None:
        self.tenant = tenant
        self.exchanges: list[dict[str, Any]] = []

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, dict[str, str], bytes]:
        from jobsched.handlers import api
        from jobsched_local.apigw import rest_event
        from jobsched_local.lambda_context import InvocationContext

        parts = urlsplit(url)
        event = rest_event(
            method,
            parts.path,
            body=body,
            headers=dict(headers),
            query=parts.query,
            tenant=self.tenant,
            stage_in_path=False,
        )
        result = api.handler(event, InvocationContext(function_name="jobsched-api"))
        reply_headers = dict(result.get("headers") or {})
        for name, values in (result.get("multiValueHeaders") or {}).items():
            reply_headers[name] = ", ".join(values)
        raw = (result.get("body") or "").encode()
        self.exchanges.append({"method": method, "url": url, "headers": dict(headers), "reply": raw})
        return result["statusCode"], reply_headers, raw

    @property
    def last_answer(self) -> Any:
        return json.loads(self.exchanges[-1]["reply"])


@pytest.fixture
def wire(container: Any) -> HandlerTransport:
    return HandlerTransport()


@pytest.fixture
def client(wire: HandlerTransport) -> Client:
    return Client(ENDPOINT, transport=wire, sleep=_no_sleep)


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds}s: nothing here is retried")


def same_as_sent(model: Any, wire: HandlerTransport | _Answer) -> None:
    """The model holds exactly what the server answered: dumped back, it is that JSON."""
    assert model.model_dump(mode="json", by_alias=True) == wire.last_answer


def ext_job(**fields: Any) -> dict[str, Any]:
    """An external worker's job (no target): its run at NOW is due at once, claimable by lease."""
    return {"name": "n", "type": "ext", "runAt": NOW, **fields}


# --- every operation, through the server's models both ways ---


def test_jobs_round_trip_through_the_server_models(client: Client, wire: HandlerTransport, clock: Any):
    created = client.create_job(JobBody(name="nightly", type="report.build", cron="0 9 * * *"))
    assert isinstance(created, CreatedJobView) and created.signing_secret.startswith("whsec_")
    same_as_sent(created, wire)
    sent = json.loads(wire.exchanges[-1]["reply"])
    assert sent["cron"] == "0 9 * * *" and created.version == 1

    replayed = client.create_job(ext_job(name="once"), idempotency_key="k-1")
    again = client.create_job(ext_job(name="once"), idempotency_key="k-1")
    assert type(again) is JobView and again.job_id == replayed.job_id  # 200: no secret again
    same_as_sent(again, wire)

    job = client.get_job(created.job_id)
    same_as_sent(job, wire)
    assert job.next_fire_times and job.next_fire_times[0] == datetime(2026, 11, 2, 9, tzinfo=UTC)

    page = client.list_jobs(limit=1)
    same_as_sent(page, wire)
    assert len(page.items) == 1 and page.next_cursor

    updated = client.update_job(job, {"name": "renamed", "endAt": None})
    same_as_sent(updated, wire)
    assert (updated.name, updated.version) == ("renamed", 2)
    assert wire.exchanges[-1]["headers"]["if-match"] == '"1"'
    assert wire.exchanges[-1]["headers"]["content-type"] == "application/merge-patch+json"

    paused = client.pause_job(updated)
    same_as_sent(paused, wire)
    resumed = client.resume_job(paused)
    same_as_sent(resumed, wire)
    assert (paused.state, resumed.state, resumed.version) == ("PAUSED", "ACTIVE", 4)

    rotated = client.rotate_signing_secret(job.job_id)
    same_as_sent(rotated, wire)
    assert rotated.signing_secret != created.signing_secret

    summary = client.job_summary(job.job_id)
    same_as_sent(summary, wire)
    assert summary.job_id == job.job_id and len(summary.next_fire_times) == 5

    cancelled = client.cancel_job(resumed)
    same_as_sent(cancelled, wire)
    assert cancelled.state == "CANCELLED"
    assert wire.exchanges[-1]["method"] == "DELETE" and wire.exchanges[-1]["headers"]["if-match"] == '"4"'
    assert cancelled.expires_at is not None and cancelled.archived_at is None

    listed = client.list_jobs()
    same_as_sent(listed, wire)
    assert job.job_id in [j.job_id for j in listed.items]
    archived = client.archive_job(cancelled)
    same_as_sent(archived, wire)
    assert archived.archived_at is not None and archived.version == cancelled.version
    assert wire.exchanges[-1]["method"] == "POST" and wire.exchanges[-1]["url"].endswith("/archive")
    assert wire.exchanges[-1]["headers"]["if-match"] == '"5"'
    assert job.job_id not in [j.job_id for j in client.list_jobs().items]
    assert [j.job_id for j in client.iter_jobs(archived=True)] == [job.job_id]
    assert "archived=true" in wire.exchanges[-1]["url"]


def test_a_batch_create_round_trips_each_job_as_a_single_create(client: Client, wire: HandlerTransport):
    jobs: list[JobBody | dict[str, Any]] = [
        ext_job(name="a"),
        ext_job(name="b", cron="0 9 * * *"),
        JobBody(name="c", type="t", cron="0 9 * * *"),
    ]
    answer = client.create_jobs(jobs, idempotency_key="batch-1")
    same_as_sent(answer, wire)
    first, refused, last = answer.items
    assert isinstance(first.job, CreatedJobView) and first.status == 201
    assert refused.status == 400 and refused.job is None and refused.error is not None
    assert [e.field for e in refused.error.errors or []] == ["schedule"]
    assert isinstance(last.job, CreatedJobView) and last.job.name == "c"
    assert wire.exchanges[-1]["headers"]["idempotency-key"] == "batch-1"

    again = client.create_jobs(jobs, idempotency_key="batch-1")
    assert [item.status for item in again.items] == [200, 400, 200]
    assert type(again.items[0].job) is JobView and again.items[0].job.job_id == first.job.job_id
    same_as_sent(again, wire)

    with pytest.raises(Invalid) as too_many:
        client.create_jobs([ext_job() for _ in range(MAX_BATCH_JOBS + 1)])
    assert too_many.value.fields == ["jobs"]


def test_runs_leases_and_dead_letters_round_trip(client: Client, wire: HandlerTransport, clock: Any):
    hourly = client.create_job({"name": "hourly", "type": "ext", "cron": "0 * * * *"})
    triggered = client.trigger_job(hourly.job_id)
    same_as_sent(triggered, wire)
    assert triggered.trigger == "manual"

    backfilled = client.backfill_job(hourly.job_id, T0 - timedelta(hours=3), "2026-11-02T07:00:00Z")
    same_as_sent(backfilled, wire)
    # [start, end): 05:00 and 06:00; the 07:00 occurrence at end is not run.
    assert [key.split("@")[1] for key in backfilled.created] == [
        "2026-11-02T05:00:00Z",
        "2026-11-02T06:00:00Z",
    ]

    runs = client.list_runs(hourly.job_id, view="all", limit=100)
    same_as_sent(runs, wire)
    across = client.list_runs_across_jobs(job_id=hourly.job_id, trigger="backfill", limit=100)
    same_as_sent(across, wire)
    assert {r.run_key for r in across.items} == set(backfilled.created)

    detail = client.get_run(triggered.run_key)
    same_as_sent(detail, wire)
    assert detail.transitions and detail.transitions[0].to == RunState.PENDING

    cancelled = client.cancel_run(backfilled.created[0])
    same_as_sent(cancelled, wire)
    assert cancelled.state == "CANCELLED"

    # A lease: claimed, kept, failed for good: a dead letter.
    client.cancel_job(hourly.job_id)
    once = client.create_job(ext_job(name="once"))
    (lease,) = client.claim(["ext"], "ext-1", lease_seconds=30)
    same_as_sent(lease, _Answer(wire.last_answer["leases"][0]))
    assert lease.job_id == once.job_id and lease.fence == 1
    beat = client.heartbeat(lease.run_key, lease.fence, lease_seconds=120)
    same_as_sent(beat, wire)
    failed = client.complete(
        lease.run_key, lease.fence, "failed", error={"class": "BadInput", "message": "no", "retryable": False}
    )
    same_as_sent(failed, wire)
    assert failed.state == "DEAD" and failed.last_error_class == "BadInput"

    dead = client.list_dead_letters()
    same_as_sent(dead, wire)
    assert [r.run_key for r in dead.items] == [lease.run_key]

    dry = client.redrive_dead_letters(reason="fixed", run_keys=[lease.run_key], dry_run=True)
    same_as_sent(dry, wire)
    assert dry.dry_run and dry.run_keys == [lease.run_key]
    redriven = client.redrive_run(lease.run_key, reason="fixed", payload={"rows": 7})
    same_as_sent(redriven, wire)
    assert redriven.state == "PENDING" and redriven.redrives == 1
    assert client.get_run(lease.run_key).payload == {"rows": 7}

    (again,) = client.claim(["ext"], "ext-2")
    client.complete(
        again.run_key, again.fence, "failed", error={"class": "Oops", "message": "m", "retryable": False}
    )
    selection = BulkDeadLettersBody(reason="give up", job_id=once.job_id)
    dismissed = client.cancel_dead_letters(selection)
    same_as_sent(dismissed, wire)
    assert dismissed.run_keys == [lease.run_key] and dismissed.refused == []
    assert client.list_dead_letters().items == []
    bulk = client.redrive_dead_letters(reason="none left", job_id=once.job_id)
    assert bulk.count == 0

    (third,) = [client.create_job(ext_job(name="ok"))]
    (ok,) = client.claim(["ext"], "ext-3")
    done = client.complete(ok.run_key, ok.fence, "succeeded", result={"sent": True})
    same_as_sent(done, wire)
    assert done.state == "SUCCEEDED" and done.result == {"sent": True} and done.job_id == third.job_id


class _Answer:
    """One item of the last answer, for `same_as_sent`."""

    def __init__(self, item: Any) -> None:
        self.last_answer = item


def test_every_route_has_a_method(client: Client, wire: HandlerTransport):
    """The OpenAPI document lists every route; each is one of the client's methods."""
    methods = {
        ("post", "/v1/jobs"): "create_job",
        ("post", "/v1/jobs/batch"): "create_jobs",
        ("get", "/v1/jobs"): "list_jobs",
        ("get", "/v1/jobs/{job_id}"): "get_job",
        ("patch", "/v1/jobs/{job_id}"): "update_job",
        ("delete", "/v1/jobs/{job_id}"): "cancel_job",
        ("post", "/v1/jobs/{job_id}/pause"): "pause_job",
        ("post", "/v1/jobs/{job_id}/resume"): "resume_job",
        ("post", "/v1/jobs/{job_id}/archive"): "archive_job",
        ("post", "/v1/jobs/{job_id}/signing-secret"): "rotate_signing_secret",
        ("post", "/v1/jobs/{job_id}/trigger"): "trigger_job",
        ("post", "/v1/jobs/{job_id}/backfill"): "backfill_job",
        ("get", "/v1/jobs/{job_id}/summary"): "job_summary",
        ("get", "/v1/jobs/{job_id}/runs"): "list_runs",
        ("get", "/v1/runs"): "list_runs_across_jobs",
        ("get", "/v1/runs/{run_key}"): "get_run",
        ("post", "/v1/runs/{run_key}/redrive"): "redrive_run",
        ("post", "/v1/runs/{run_key}/cancel"): "cancel_run",
        ("get", "/v1/dead-letters"): "list_dead_letters",
        ("post", "/v1/dead-letters/redrive"): "redrive_dead_letters",
        ("post", "/v1/dead-letters/cancel"): "cancel_dead_letters",
        ("post", "/v1/leases"): "claim",
        ("post", "/v1/leases/{run_key}/heartbeat"): "heartbeat",
        ("post", "/v1/leases/{run_key}/complete"): "complete",
        ("post", "/v1/schedules/preview"): "preview_schedule",
        ("put", "/v1/calendars/{name}"): "put_calendar",
        ("get", "/v1/calendars/{name}"): "get_calendar",
        ("get", "/v1/calendars"): "list_calendars",
        ("delete", "/v1/calendars/{name}"): "delete_calendar",
    }
    document = client.openapi()
    routes = {(m, path) for path, item in document["paths"].items() for m in item if m != "parameters"}
    assert routes == set(methods)
    assert all(callable(getattr(client, name)) for name in methods.values())
    assert "swagger" in client.docs_page().lower()


def test_a_schedule_is_previewed_without_a_job(client: Client):
    shown = client.preview_schedule({"specs": [{"monthly": "last-weekday", "at": "17:00"}], "count": 2})
    assert [line.at.isoformat() for line in shown.fire_times] == [
        "2026-11-30T17:00:00+00:00",
        "2026-12-31T17:00:00+00:00",
    ]
    with pytest.raises(Invalid) as invalid:
        client.preview_schedule({"cron": "0 0 30 2 *"})
    assert invalid.value.fields == ["cron"]


def test_a_jobs_upcoming_fire_times_say_why_an_occurrence_does_not_fire(client: Client):
    client.put_calendar("closed", [{"date": "2026-11-03"}])
    job = client.create_job(
        {"name": "n", "type": "t", "cron": "0 9 * * *", "exclude": [{"calendar": "closed"}]}
    )
    assert job.upcoming_fire_times is None  # on the single job's answer only
    lines = client.get_job(job.job_id).upcoming_fire_times
    assert lines is not None
    assert [(line.at.isoformat(), line.fires, line.reason) for line in lines[:3]] == [
        ("2026-11-02T09:00:00+00:00", True, None),
        ("2026-11-03T09:00:00+00:00", False, "excluded by exclude.0 (calendar closed, its days in UTC)"),
        ("2026-11-04T09:00:00+00:00", True, None),
    ]


def test_calendars_round_trip_and_a_calendar_in_use_is_a_conflict(client: Client):
    created = client.put_calendar(
        "us-holidays", [{"date": "2026-11-26"}, {"startDate": "2026-12-24", "endDate": "2026-12-26"}]
    )
    assert (created.name, created.version, created.entry_count, created.used_by) == ("us-holidays", 1, 2, 0)
    replaced = client.put_calendar("us-holidays", [{"date": "2026-11-26"}])
    assert replaced.version == 2 and str(replaced.entries[0].date) == "2026-11-26"
    client.create_job(
        {"name": "n", "type": "t", "cron": "0 9 * * *", "exclude": [{"calendar": "us-holidays"}]}
    )
    assert client.get_calendar("us-holidays").used_by == 1
    assert [c.name for c in client.list_calendars().items] == ["us-holidays"]
    with pytest.raises(Conflict) as in_use:
        client.delete_calendar("us-holidays")
    assert in_use.value.code == "calendar_in_use"
    with pytest.raises(Invalid) as invalid:
        client.put_calendar("c", [{"date": "2026-11-26", "start": "2026-11-26T00:00:00Z"}])
    assert invalid.value.fields == ["entries.0"]
    with pytest.raises(NotFound):
        client.delete_calendar("nope")


# --- errors ---


def test_errors_carry_code_message_fields_and_status(client: Client):
    with pytest.raises(Invalid) as invalid:
        client.create_job({"name": "n", "type": "t", "cron": "0 25 * * *"})
    assert invalid.value.status == 400 and invalid.value.code == "invalid_request"
    assert invalid.value.fields == ["cron"] and "cron" in invalid.value.message

    with pytest.raises(NotFound) as missing:
        client.get_job("j_nosuchjob")
    assert (missing.value.status, missing.value.code) == (404, "not_found")

    job = client.create_job({"name": "n", "type": "t", "cron": "0 9 * * *"})
    with pytest.raises(PreconditionRequired) as unversioned:
        client.update_job(job.job_id, {"name": "x"})
    assert unversioned.value.status == 428

    paused = client.pause_job(job)
    with pytest.raises(Conflict) as conflict:
        client.trigger_job(job.job_id)
    assert conflict.value.status == 409 and not isinstance(conflict.value, VersionMismatch)
    assert client.resume_job(paused).state == "ACTIVE"


def test_a_stale_version_is_a_version_mismatch(client: Client):
    job = client.create_job({"name": "n", "type": "t", "cron": "0 9 * * *"})
    client.update_job(job, {"name": "first"})  # job (version 1) is now stale
    for stale in (
        lambda: client.update_job(job, {"name": "second"}),
        lambda: client.pause_job(job),
        lambda: client.cancel_job(job.job_id, version=1),
    ):
        with pytest.raises(VersionMismatch) as mismatch:
            stale()
        assert mismatch.value.status == 412 and mismatch.value.code == "version_mismatch"
        assert isinstance(mismatch.value, Conflict)
    assert client.get_job(job.job_id).name == "first"


def test_no_caller_is_unauthorized(container: Any):
    anonymous = Client(ENDPOINT, transport=HandlerTransport(tenant=None))
    with pytest.raises(Unauthorized) as refused:
        anonymous.list_jobs()
    assert refused.value.status == 401 and refused.value.code == "unauthenticated"


def test_an_answer_of_another_shape_is_unexpected():
    weird = Client(ENDPOINT, transport=Scripted((200, {}, {"jobId": "j_1", "surprise": True})))
    with pytest.raises(UnexpectedResponse) as unexpected:
        weird.get_job("j_1")
    assert unexpected.value.status == 200 and unexpected.value.body["surprise"] is True


def test_members_a_newer_server_adds_are_ignored(client: Client, wire: HandlerTransport):
    """An answer with members this version does not know, at the top and nested (a run list's
    items), still parses: a newer server may add fields; the server's own views refuse them."""
    from jobsched.api_models.views import RunList

    job = client.create_job(ext_job(name="newer"))
    newer = Client(
        ENDPOINT,
        transport=Scripted(
            (200, {}, {**client.get_job(job.job_id).model_dump(by_alias=True, mode="json"), "addedLater": 1})
        ),
    )
    assert newer.get_job(job.job_id).job_id == job.job_id
    runs = client.list_runs(job.job_id).model_dump(by_alias=True, mode="json")
    runs["items"] = [{**item, "addedLater": {"x": 1}} for item in runs["items"]]
    runs["addedLater"] = True
    assert runs["items"], "the job's run at NOW is listed"
    listed = Client(ENDPOINT, transport=Scripted((200, {}, runs))).list_runs(job.job_id)
    assert [r.run_key for r in listed.items] == [i["runKey"] for i in runs["items"]]
    with pytest.raises(ValueError):
        RunList.model_validate(runs)  # the server's own views still refuse unknown members


def test_members_a_newer_server_adds_inside_a_jobs_policies_are_ignored(
    client: Client, wire: HandlerTransport
):
    """A member added inside an object the domain models shape (a job's `dst`, a notification
    and its target) is ignored too: the client reads answers as the store reads stored items."""
    from jobsched.api_models.views import JobView

    job = client.create_job(ext_job(name="newer"))
    answer = client.get_job(job.job_id).model_dump(by_alias=True, mode="json")
    answer["dst"] = {**answer["dst"], "addedLater": 1}
    topic = "arn:aws:sns:eu-west-1:123456789012:tenant-a-alerts"
    target = {"kind": "sns", "topicArn": topic, "addedLater": 2}
    answer["notify"] = [{"on": ["dead"], "target": target, "addedLater": 3}]
    read = Client(ENDPOINT, transport=Scripted((200, {}, answer))).get_job(job.job_id)
    assert read.dst == client.get_job(job.job_id).dst and read.notify[0].target.kind == "sns"
    with pytest.raises(ValueError):
        JobView.model_validate(answer)  # the server's own views still refuse unknown members


# --- pages ---


def test_iterators_cross_pages(client: Client, wire: HandlerTransport, clock: Any):
    made = [client.create_job(ext_job(name=f"job {i}")).job_id for i in range(3)]
    wire.exchanges.clear()
    assert sorted(j.job_id for j in client.iter_jobs(page_size=1)) == sorted(made)
    cursors = [parse_qs(urlsplit(e["url"]).query).get("cursor") for e in wire.exchanges]
    assert len(wire.exchanges) >= 3 and cursors[0] is None and all(cursors[1:])

    hourly = client.create_job({"name": "hourly", "type": "ext", "cron": "0 * * * *"})
    created = client.backfill_job(hourly.job_id, "2026-11-01T20:00:00Z", "2026-11-02T02:00:00Z").created
    assert len(created) == 6
    keys = [r.run_key for r in client.iter_runs(hourly.job_id, page_size=2)]
    assert set(created) <= set(keys) and len(keys) == len(set(keys))
    across = [r.run_key for r in client.iter_runs_across_jobs(page_size=2, trigger="backfill")]
    assert sorted(across) == sorted(created)

    for i in range(3):
        key = client.create_job(ext_job(name=f"dead {i}", type="doomed")).job_id
        (lease,) = client.claim(["doomed"], "w")
        client.complete(
            lease.run_key, lease.fence, "failed", error={"class": "X", "message": "m", "retryable": False}
        )
        assert lease.job_id == key
    assert len(list(client.iter_dead_letters(page_size=1))) == 3


def test_an_iterator_asks_for_each_page_with_the_cursor_before():
    pages = [
        {"items": [RUN_ITEM], "nextCursor": "c1"},
        {"items": [], "nextCursor": "c2"},  # a page may be empty and still name the next
        {"items": [RUN_ITEM], "nextCursor": None},
    ]
    script = Scripted(*((200, {}, page) for page in pages))
    client = Client(ENDPOINT, transport=script)
    assert len(list(client.iter_runs_across_jobs(state=["DEAD", "RETRY_WAIT"], page_size=50))) == 2
    queries = [parse_qs(urlsplit(url).query) for _, url, _ in script.sent]
    assert [q.get("cursor") for q in queries] == [None, ["c1"], ["c2"]]
    assert queries[0]["state"] == ["DEAD,RETRY_WAIT"] and queries[0]["limit"] == ["50"]


RUN_ITEM = {
    "runKey": "j_a@2026-11-02T07:10:00Z",
    "jobId": "j_a",
    "jobType": "ext",
    "state": "DEAD",
    "trigger": "schedule",
    "priority": "default",
    "scheduledFor": "2026-11-02T07:10:00Z",
    "dueAt": "2026-11-02T07:10:00Z",
    "attempts": 3,
    "redrives": 0,
    "updatedAt": "2026-11-02T07:12:00Z",
}


# --- retries: time is injected, nothing sleeps ---


class Scripted:
    """A transport answering from a script of (status, headers, body); an exception in the
    script is raised instead. Records (method, url, headers) of each request."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, str, dict[str, str]]] = []

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, dict[str, str], bytes]:
        self.sent.append((method, url, dict(headers)))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        status, headers_out, payload = answer
        return status, headers_out, json.dumps(payload).encode()


RATE = {"code": "limit_exceeded", "message": "slow down"}
BUSY = {"code": "unavailable", "message": "storage unavailable"}
JOB_LIST: dict[str, Any] = {"items": [], "nextCursor": None}


def scripted_client(script: Scripted, **options: Any) -> tuple[Client, list[float]]:
    slept: list[float] = []
    defaults: dict[str, Any] = {"sleep": slept.append, "clock": lambda: 1_000_000.0, "jitter": lambda: 0.5}
    return Client(ENDPOINT, transport=script, **{**defaults, **options}), slept


def test_429_and_503_are_sent_again_after_their_retry_after():
    then = format_datetime(datetime.fromtimestamp(1_000_007, UTC), usegmt=True)  # 7 s after the clock
    script = Scripted(
        (429, {"Retry-After": "2"}, RATE), (503, {"retry-after": then}, BUSY), (200, {}, JOB_LIST)
    )
    client, slept = scripted_client(script)
    assert client.list_jobs().items == []
    assert slept == [2.0, 7.0]
    assert len(script.sent) == 3


def test_a_post_refused_with_429_is_sent_again():
    script = Scripted((429, {"Retry-After": "1"}, RATE), (201, {}, {"created": [], "existing": []}))
    client, slept = scripted_client(script)
    assert client.backfill_job("j_a", NOW, NOW).created == []
    assert slept == [1.0] and [m for m, _, _ in script.sent] == ["POST", "POST"]


def test_without_retry_after_the_backoff_grows_with_jitter():
    script = Scripted((503, {}, BUSY), (503, {}, BUSY), (503, {}, BUSY), (200, {}, JOB_LIST))
    client, slept = scripted_client(script, jitter=lambda: 0.5)
    client.list_jobs()
    assert slept == [0.375, 0.75, 1.5]  # half of 0.5, 1, 2 s, plus half that again at random (0.5)
    client, low = scripted_client(Scripted((503, {}, BUSY), (200, {}, JOB_LIST)), jitter=lambda: 0.0)
    client.list_jobs()
    assert low == [0.25]


def test_tries_are_bounded_and_the_last_answer_is_raised():
    script = Scripted((429, {"Retry-After": "3"}, RATE))
    client, slept = scripted_client(script, retries=2)
    with pytest.raises(RateLimited) as limited:
        client.list_jobs()
    assert len(script.sent) == 3 and slept == [3.0, 3.0]
    assert limited.value.retry_after == 3.0 and limited.value.code == "limit_exceeded"

    script = Scripted((503, {"Retry-After": "3600"}, BUSY))  # beyond what the client waits for
    client, slept = scripted_client(script)
    with pytest.raises(Unavailable) as busy:
        client.list_jobs()
    assert len(script.sent) == 1 and slept == [] and busy.value.retry_after == 3600.0


def test_a_request_that_may_have_been_applied_is_not_sent_again():
    # A 503 may follow a write the store applied before its answer was lost.
    answers: list[Any] = [
        (502, {}, {"message": "Internal server error"}),
        (503, {"Retry-After": "1"}, BUSY),
        TimeoutError("timed out"),
    ]
    for answer in answers:
        script = Scripted(answer, (200, {}, {}))
        client, slept = scripted_client(script)
        with pytest.raises((ServerError, ApiUnreachable)):
            client.trigger_job("j_a")
        assert len(script.sent) == 1 and slept == []


def test_a_safe_request_is_sent_again_after_a_lost_answer():
    script = Scripted(
        TimeoutError("timed out"), (504, {}, {"message": "Endpoint request timed out"}), (200, {}, JOB_LIST)
    )
    client, slept = scripted_client(script)
    client.list_jobs()
    assert len(script.sent) == 3 and len(slept) == 2

    created = {**CREATED, "version": 1}
    script = Scripted(ConnectionResetError("reset"), (201, {}, created))
    client, slept = scripted_client(script)
    assert client.create_job(ext_job(), idempotency_key="k").job_id == "j_a"
    assert len(script.sent) == 2 and script.sent[1][2]["idempotency-key"] == "k"


def test_a_refused_connection_is_reported_at_once():
    client = Client("http://127.0.0.1:1", sleep=_no_sleep)
    with pytest.raises(ApiUnreachable, match=r"cannot reach http://127\.0\.0\.1:1"):
        client.list_jobs()


CREATED = {
    "jobId": "j_a",
    "name": "n",
    "type": "ext",
    "runAt": NOW,
    "priority": "default",
    "missedRuns": "run-once",
    "catchUpWindow": 3600,
    "overlap": "allow",
    "dst": {"gap": "shift", "fold": "first"},
    "maxAttempts": 3,
    "retry": {"baseSeconds": 2.0, "capSeconds": 300.0, "maxAgeSeconds": 86400},
    "delivery": "at-least-once",
    "jitterSeconds": 0,
    "timeoutSeconds": 300,
    "pauseOnFailure": False,
    "state": "ACTIVE",
    "runsCreated": 1,
    "createdAt": NOW,
    "updatedAt": NOW,
    "signingSecret": "whsec_x",
}


# --- authentication ---


@pytest.fixture
def fake_credentials() -> Any:
    from botocore.credentials import Credentials

    return Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")


def test_sigv4_signs_with_the_credentials_for_the_hosts_region(fake_credentials: Any):
    script = Scripted((200, {}, {"runKey": "k"}))
    client = Client(
        "https://abc123.execute-api.eu-west-1.amazonaws.com/prod",
        sigv4=True,
        credentials=fake_credentials,
        transport=script,
    )
    with pytest.raises(UnexpectedResponse):  # the answer is no run; the request is what is checked
        client.cancel_run("j_a@2026-11-02T09:00:00Z")
    _, url, headers = script.sent[0]
    assert url.endswith("/prod/v1/runs/j_a%402026-11-02T09%3A00%3A00Z/cancel")
    authorization = headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"host", "x-amz-date", "x-amz-security-token"} <= set(signed)
    assert headers["X-Amz-Security-Token"] == "session-token"


def test_sigv4_region_explicit_then_botocores(fake_credentials: Any, monkeypatch: pytest.MonkeyPatch):
    script = Scripted((200, {}, JOB_LIST))
    explicit = Client(
        ENDPOINT,
        sigv4=True,
        region="ap-south-1",
        api_key="plan-key",
        credentials=fake_credentials,
        transport=script,
    )
    explicit.list_jobs()
    authorization = script.sent[-1][2]["Authorization"]
    assert "/ap-south-1/execute-api/" in authorization and "x-api-key" in authorization

    monkeypatch.setenv("AWS_DEFAULT_REGION", "sa-east-1")
    monkeypatch.delenv("AWS_REGION", raising=False)
    configured = Client(ENDPOINT, sigv4=True, credentials=fake_credentials, transport=script)
    configured.list_jobs()
    assert "/sa-east-1/execute-api/" in script.sent[-1][2]["Authorization"]


def test_each_try_is_signed_afresh(fake_credentials: Any):
    script = Scripted((429, {"Retry-After": "0"}, RATE), (200, {}, JOB_LIST))
    client = Client(ENDPOINT, sigv4=True, region="us-east-1", credentials=fake_credentials, transport=script,
                    sleep=lambda s: None)  # fmt: skip
    signed: list[str] = []
    sign = client.connection.sign

    def counted(method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        signed.append(url)
        return sign(method, url, data, headers)

    client.connection.sign = counted  # type: ignore[method-assign]
    client.list_jobs()
    assert len(script.sent) == 2 and len(signed) == 2
    assert all("Authorization" in headers for _, _, headers in script.sent)


def test_the_api_key_is_sent(container: Any):
    script = Scripted((200, {}, JOB_LIST))
    Client(ENDPOINT, api_key="k-1", transport=script).list_jobs()
    assert script.sent[0][2]["x-api-key"] == "k-1"


# --- redirects: over real HTTP, between two loopback hosts ---


@pytest.fixture
def here_and_there() -> Iterator[tuple[StubApi, StubApi]]:
    """The endpoint's server on 127.0.0.1, and another host's on 127.0.0.2 (both loopback)."""
    here, there = StubApi("127.0.0.1"), StubApi("127.0.0.2")
    yield here, there
    here.close()
    there.close()


CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-amz-date", "x-amz-security-token")


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("operation", ["read", "write"])
def test_a_redirect_to_another_host_is_refused_and_nothing_reaches_it(
    here_and_there: tuple[StubApi, StubApi], fake_credentials: Any, code: int, operation: str
):
    here, there = here_and_there
    for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs")):
        here.routes[(method, path)] = (code, {}, {"Location": f"{there.url}{path}"})
        there.routes[(method, path)] = (200, JOB_LIST if method == "GET" else CREATED, {})
    keyed = Client(here.url, api_key="tenant-secret", sleep=_no_sleep)
    signed = Client(here.url, sigv4=True, region="eu-west-1", credentials=fake_credentials, sleep=_no_sleep)
    raised: list[ClientError | None] = []
    for client in (keyed, signed):
        try:
            client.list_jobs() if operation == "read" else client.create_job(ext_job())
            raised.append(None)
        except ClientError as exc:
            raised.append(exc)
    leaked = [name for sent in there.requests for name in CREDENTIAL_HEADERS if name in sent["headers"]]
    assert leaked == []
    assert there.requests == []
    for refused in raised:
        assert isinstance(refused, RedirectRefused)
        assert refused.status == code and refused.code == "redirect_refused"
        assert refused.origin == there.url and refused.location == f"{there.url}/v1/jobs"
        assert f"another origin ({there.url})" in str(refused)
    assert len(here.requests) == 2 and "x-api-key" in here.requests[0]["headers"]


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_read_redirected_on_its_own_origin_is_followed_with_the_key(
    here_and_there: tuple[StubApi, StubApi], code: int
):
    here, _ = here_and_there
    here.routes[("GET", "/v1/jobs")] = (code, {}, {"Location": "/moved/v1/jobs?limit=5"})
    here.routes[("GET", "/moved/v1/jobs")] = (code, {}, {"Location": f"{here.url}/final/v1/jobs"})
    here.routes[("GET", "/final/v1/jobs")] = (200, JOB_LIST, {})
    assert Client(here.url, api_key="tenant-secret", sleep=_no_sleep).list_jobs().items == []
    assert [(sent["method"], sent["path"]) for sent in here.requests] == [
        ("GET", "/v1/jobs"),
        ("GET", "/moved/v1/jobs?limit=5"),
        ("GET", "/final/v1/jobs"),
    ]
    assert all(sent["headers"]["x-api-key"] == "tenant-secret" for sent in here.requests)


def test_a_head_redirected_on_its_own_origin_stays_a_head(here_and_there: tuple[StubApi, StubApi]):
    here, _ = here_and_there
    here.routes[("HEAD", "/v1/jobs")] = (301, {}, {"Location": "/moved/v1/jobs"})
    here.routes[("HEAD", "/moved/v1/jobs")] = (200, {}, {})
    status, _, _ = UrllibTransport(direct=True)("HEAD", f"{here.url}/v1/jobs", {"x-api-key": "k"}, None)
    assert status == 200
    assert [(sent["method"], sent["path"]) for sent in here.requests] == [
        ("HEAD", "/v1/jobs"),
        ("HEAD", "/moved/v1/jobs"),
    ]


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_write_redirected_on_its_own_origin_is_not_resent_nor_turned_into_a_read(
    here_and_there: tuple[StubApi, StubApi], code: int
):
    here, _ = here_and_there
    here.routes[("POST", "/v1/jobs")] = (code, {}, {"Location": "/moved/v1/jobs"})
    here.routes[("GET", "/moved/v1/jobs")] = (200, JOB_LIST, {})
    here.routes[("POST", "/moved/v1/jobs")] = (201, CREATED, {})
    with pytest.raises(RedirectRefused, match=r"a POST is never resent to another URL") as refused:
        Client(here.url, api_key="tenant-secret", sleep=_no_sleep).create_job(ext_job())
    assert refused.value.status == code and refused.value.location == f"{here.url}/moved/v1/jobs"
    assert [(sent["method"], sent["path"]) for sent in here.requests] == [("POST", "/v1/jobs")]


@pytest.mark.parametrize(
    ("method", "url", "location", "refused"),
    [
        ("GET", "http://a.test/v1", "http://A.test:80/v2", None),
        ("GET", "https://a.test/v1", "https://a.test:443/v2", None),
        ("HEAD", "http://a.test:8080/v1", "http://a.test:8080/v2", None),
        ("GET", "http://a.test/v1", "http://b.test/v1", "another origin (http://b.test:80)"),
        ("GET", "http://a.test/v1", "http://a.test:8080/v1", "another origin (http://a.test:8080)"),
        ("GET", "http://a.test/v1", "https://a.test/v1", "another origin (https://a.test:443)"),
        ("GET", "https://a.test/v1", "http://a.test/v1", "from https to http (http://a.test:80)"),
        ("GET", "https://a.test:443/v1", "http://a.test:443/v1", "from https to http (http://a.test:443)"),
        ("GET", "http://127.0.0.1:80/v1", "http://localhost/v1", "another origin (http://localhost:80)"),
        ("GET", "http://[::1]/v1", "http://[::2]/v1", "another origin (http://[::2]:80)"),
        ("GET", "http://a.test/v1", "http://a.test:99999/v1", "another origin (http://a.test:99999)"),
        ("GET", "http://a.test/v1", "ftp://a.test/v1", "another origin (ftp://a.test)"),
        ("PATCH", "http://a.test/v1/j", "http://a.test/v1/k", "a PATCH is never resent"),
    ],
)
def test_which_redirects_are_followed(method: str, url: str, location: str, refused: str | None):
    reason = redirect_refusal(method, url, location)
    assert reason is None if refused is None else refused in (reason or "")


# --- light to import ---


def test_importing_the_client_loads_no_server_code():
    code = (
        "import sys, jobsched.client; "
        "print([m for m in sys.modules if m.startswith(('aws_lambda_powertools', 'boto3', 'botocore',"
        " 'jobsched.settings', 'jobsched.wiring', 'jobsched.handlers', 'jobsched.services'))])"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


# --- over real HTTP, against local mode ---


@pytest.fixture(scope="module")
def local() -> Iterator[Any]:
    from tests.helpers import fast_local_mode

    with fast_local_mode({"key-a": "tenant-a"}) as runtime:
        yield runtime


def test_over_http_against_local_mode(local: Any):
    client = Client(str(local.api_url), api_key="key-a")
    job = client.create_job({"name": "over http", "type": "demo.hello", "cron": "0 9 * * *"})
    assert isinstance(job, CreatedJobView)
    assert client.get_job(job.job_id).name == "over http"
    assert job.job_id in {j.job_id for j in client.iter_jobs(page_size=1)}
    assert client.pause_job(job).state == "PAUSED"
    with pytest.raises(VersionMismatch):
        client.resume_job(job)  # job is the version before the pause
    with pytest.raises(Unauthorized):
        Client(str(local.api_url), api_key="wrong").list_jobs()
    with pytest.raises(ApiError) as missing:
        client.get_run(f"{job.job_id}@2026-11-02T09:00:00Z")
    assert missing.value.status == 404


def test_the_library_pages_example_runs_against_local_mode(
    local: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    page = Path(__file__).resolve().parents[2] / "docs" / "library" / "client.md"
    example = re.search(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert example is not None
    monkeypatch.setenv("JOBSCHED_URL", str(local.api_url))
    monkeypatch.setenv("JOBSCHED_KEY", "key-a")
    exec(compile(example.group(1), str(page), "exec"), {})
    out = capsys.readouterr().out
    assert "stale: 412 version_mismatch" in out and "ACTIVE" in out


def test_the_worker_pages_example_runs_against_local_mode(
    local: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """docs/library/worker.md's example, as it is: a job created, leased by the worker, its
    own write fenced, the run SUCCEEDED."""
    page = Path(__file__).resolve().parents[2] / "docs" / "library" / "worker.md"
    example = re.search(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert example is not None
    monkeypatch.setenv("JOBSCHED_URL", str(local.api_url))
    monkeypatch.setenv("JOBSCHED_KEY", "key-a")
    exec(compile(example.group(1), str(page), "exec"), {})
    assert capsys.readouterr().out.strip().splitlines()[-1] == "SUCCEEDED 1 [(1,)]"
