"""Signed webhooks and secrets by reference, through the public surface: the API creates the
job and answers with its signing secret once, the worker delivers to a receiver on loopback,
and the receiver verifies the delivery with the `standardwebhooks` package, as a customer's
would. Header secrets live in moto's Secrets Manager and SSM; no API answer, CLI output, log
line, run history or stored item of a run that used one carries its value."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import pytest
from jobsched.domain.errors import PermanentError
from jobsched.domain.grants import Grants, GrantsDocument
from jobsched.domain.models import HttpTarget, JobSpec
from jobsched.domain.runs import RunState
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Received as ReceivedMessage
from jobsched.targets.secrets import SecretReader
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.helpers import ApiClient, boto3_client, create_queues, grant

SECRET_VALUE = "tok-9f2c41d7e85b3a60"  # what the receiver must get and nothing else may show
PARAMETER_VALUE = "key-51c0e7a2b9d4f386"
FIELD_SECRET = "fld-0d9e8c7b6a5f4e3d"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """Records every request. `/hook` answers 200 echoing the headers back (as httpbin does);
    `/reject` answers 400 with them too, so a secret would reach the run's error if nothing
    scrubbed it."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append(Received(self.path, dict(self.headers.items()), body))
                echoed = json.dumps({"headers": dict(self.headers.items())}).encode()
                self.send_response(200 if urlsplit(self.path).path == "/hook" else 400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(echoed)))
                self.end_headers()
                self.wfile.write(echoed)

            do_GET = do_PUT = do_POST

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def stores():
    """A moto account with the schema's tables, the queues, one secret and one parameter per
    tenant-a, and tenant-b's own secret."""
    from jobsched import aws as aws_clients
    from jobsched.store.schema import ALL_TABLES
    from moto import mock_aws

    with mock_aws():
        aws_clients.client.cache_clear()
        ddb = boto3.client("dynamodb")
        for spec in ALL_TABLES:
            ddb.create_table(**spec.create_table_request())
        queues = create_queues(boto3.client("sqs"))
        sm = boto3.client("secretsmanager")
        ssm = boto3.client("ssm")
        arns = {
            "token": sm.create_secret(Name="tenant-a/hook-token", SecretString=SECRET_VALUE)["ARN"],
            "json": sm.create_secret(
                Name="tenant-a/hook-json", SecretString=json.dumps({"key": FIELD_SECRET, "other": "x"})
            )["ARN"],
            "b": sm.create_secret(Name="tenant-b/hook-token", SecretString="tok-of-tenant-b-0000")["ARN"],
        }
        ssm.put_parameter(Name="/tenant-a/api-key", Value=PARAMETER_VALUE, Type="SecureString")
        arns["parameter"] = ssm.get_parameter(Name="/tenant-a/api-key")["Parameter"]["ARN"]
        yield queues, arns
    aws_clients.client.cache_clear()


def granted(tenant_targets: dict[str, Any]) -> Callable[[], Grants]:
    """The grants SecretReader checks before every read, as the container gives them."""
    fixed = Grants(GrantsDocument.from_maps(tenant_targets))
    return lambda: fixed


GRANTS = {
    "tenant-a": (
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:tenant-a/*",
        "arn:aws:ssm:*:*:parameter/tenant-a/*",
    ),
    "tenant-b": ("arn:aws:secretsmanager:us-east-1:123456789012:secret:tenant-b/*",),
}


@pytest.fixture
def now() -> datetime:
    # Receivers check the timestamp against their own clock (5 minutes either way).
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def system(stores, now):
    from jobsched import wiring
    from jobsched.domain.instants import ManualClock
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched.settings import Settings

    queues, _ = stores
    settings = Settings(
        shard_count=4,
        sweep_ahead_seconds=120,
        queue_urls=queues["urls"],
        dlq_urls=queues["dlq_urls"],
        http_allow_destinations=("127.0.0.1/32",),
        target_grants=GrantsDocument.from_maps(GRANTS),
    )
    built = wiring.Container(settings, ManualClock(now), RecordedMetrics())
    wiring.override(built)
    yield built
    wiring.override(None)


@pytest.fixture
def arns(stores) -> dict[str, str]:
    return stores[1]


@pytest.fixture
def api(system) -> ApiClient:
    return ApiClient("tenant-a")


@pytest.fixture
def other_api(system) -> ApiClient:
    return ApiClient("tenant-b")


def job_body(now: datetime, target: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An hourly job whose first occurrence is now (a rate counts from its creation)."""
    return {"name": "hook", "type": "webhook.test", "every": "PT1H", "target": target, **fields}


def http_target(url: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "http", "url": url, **fields}


def deliver(system, key: str):
    job_id, instant = key.split("@", 1)
    return system.worker.process(ReceivedMessage(key, job_id, instant, "default"))


def first_run_key(api: ApiClient, job_id: str) -> str:
    runs = api.get(f"/v1/jobs/{job_id}/runs").body["items"]
    return min(runs, key=lambda r: r["scheduledFor"])["runKey"]


def trigger(api: ApiClient, job_id: str) -> str:
    response = api.post(f"/v1/jobs/{job_id}/trigger")
    assert response.status == 201, response
    return response.body["runKey"]


def verified(secret: str, request: Received) -> Any:
    """What a receiver does: verify with the package, or raise WebhookVerificationError."""
    return Webhook(secret).verify(request.body, request.headers)


# --- signed deliveries -------------------------------------------------------------------


def test_a_delivery_verifies_with_the_secret_the_create_answer_returned(api, system, receiver, now):
    created = api.post("/v1/jobs", job_body(now, http_target(receiver.url("/hook"))))
    assert created.status == 201, created
    secret = created.body["signingSecret"]
    assert secret.startswith("whsec_")
    assert created.headers.get("Cache-Control") == "no-store"
    job_id = created.body["jobId"]

    key = first_run_key(api, job_id)
    assert deliver(system, key).outcome is AttemptOutcome.SUCCEEDED
    [request] = receiver.requests
    envelope = verified(secret, request)
    assert envelope["runKey"] == key and envelope["jobId"] == job_id
    assert request.headers["webhook-id"] == f"{key}#1"
    assert request.headers["webhook-timestamp"] == str(int(now.timestamp()))
    assert request.headers["Idempotency-Key"] == key
    # Anyone else's secret, or a changed body, does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(request.body.replace(b"webhook.test", b"webhook.evil"), request.headers)


def test_the_secret_is_shown_only_on_the_answer_that_created_it(api, system, receiver, now):
    body = job_body(now, http_target(receiver.url("/hook")), idempotencyKey="once")
    created = api.post("/v1/jobs", body)
    secret, job_id = created.body["signingSecret"], created.body["jobId"]
    replay = api.post("/v1/jobs", body)
    assert replay.status == 200 and "signingSecret" not in replay.body
    answers = [
        replay,
        api.get(f"/v1/jobs/{job_id}"),
        api.get("/v1/jobs"),
        api.patch(f"/v1/jobs/{job_id}", {"name": "renamed"}, headers={"if-match": '"1"'}),
        api.post(f"/v1/jobs/{job_id}/pause"),
        api.get(f"/v1/jobs/{job_id}/summary"),
    ]
    for answer in answers:
        assert answer.status < 300, answer
        assert secret not in json.dumps(answer.body) and "whsec_" not in json.dumps(answer.body)
    # The secret's own item is no job: the store never reads it as one.
    assert system.definitions.get("signing#" + job_id) is None
    assert api.get(f"/v1/jobs/{quote('signing#' + job_id, safe='')}").status == 404  # no such job


def test_no_signing_secret_is_recorded_in_a_trace(api, system, receiver, now, monkeypatch):
    """The API's traces (X-Ray, kept 30 days, read by anyone the account lets) record what its
    handler did, never the answer that carries a job's secret: neither the create nor a
    rotation. Records what the tracer would put on its segments."""
    from jobsched.observability import tracer

    recorded: list[Any] = []

    def record(
        method_name: str | None = None, data: Any = None, subsegment: Any = None, capture_response: Any = None
    ) -> None:
        if data is not None and capture_response:
            recorded.append(data)

    monkeypatch.setattr(tracer, "_add_response_as_metadata", record)
    created = api.post("/v1/jobs", job_body(now, http_target(receiver.url("/hook"))))
    assert created.status == 201, created
    rotated = api.post(f"/v1/jobs/{created.body['jobId']}/signing-secret")
    assert rotated.status == 200, rotated
    traced = json.dumps(recorded, default=str)
    for secret in (created.body["signingSecret"], rotated.body["signingSecret"]):
        assert secret not in traced
    assert "whsec_" not in traced


def test_a_rotation_signs_with_both_secrets_for_24_hours_then_the_new_one_only(api, system, receiver, now):
    created = api.post("/v1/jobs", job_body(now, http_target(receiver.url("/hook"))))
    old, job_id = created.body["signingSecret"], created.body["jobId"]

    rotated = api.post(f"/v1/jobs/{job_id}/signing-secret")
    assert rotated.status == 200, rotated
    assert rotated.headers.get("Cache-Control") == "no-store"
    new = rotated.body["signingSecret"]
    assert new.startswith("whsec_") and new != old
    retire = (now + timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert rotated.body["previousSecretsRetireAt"] == [retire]

    assert deliver(system, trigger(api, job_id)).outcome is AttemptOutcome.SUCCEEDED
    during = receiver.requests[-1]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert verified(old, during) == verified(new, during)  # receivers on either secret accept it

    system.clock.advance(24 * 3600)
    assert deliver(system, trigger(api, job_id)).outcome is AttemptOutcome.SUCCEEDED
    after = receiver.requests[-1]
    # The receiver's clock is a day behind ours here, so compare what it would compute.
    expected = Webhook(new).sign(after.headers["webhook-id"], system.clock.now(), after.body.decode())
    assert after.headers["webhook-signature"] == expected
    assert Webhook(old).sign(after.headers["webhook-id"], system.clock.now(), after.body.decode()) != expected


def test_rotation_is_per_tenant_and_bounded(api, other_api, system, receiver, now):
    job_id = api.post("/v1/jobs", job_body(now, http_target(receiver.url("/hook")))).body["jobId"]
    assert other_api.post(f"/v1/jobs/{job_id}/signing-secret").status == 404
    for _ in range(4):  # the first secret and four more sign at once
        assert api.post(f"/v1/jobs/{job_id}/signing-secret").status == 200
    refused = api.post(f"/v1/jobs/{job_id}/signing-secret")
    assert refused.status == 429 and "retires at" in refused.body["message"], refused


def test_a_job_stored_before_signing_gets_its_first_secret_by_rotation(api, system, receiver, now):
    """Jobs created before jobs had secrets are delivered unsigned until their owner asks for one."""
    spec = JobSpec.model_validate(job_body_spec(receiver.url("/hook"), now))
    job = system.jobs.create("tenant-a", spec).job
    system.definitions._db.delete_item(
        TableName=system.definitions._table, Key={"job_id": {"S": f"signing#{job.job_id}"}}
    )
    assert deliver(system, trigger(api, job.job_id)).outcome is AttemptOutcome.SUCCEEDED
    assert "webhook-signature" not in receiver.requests[-1].headers

    first = api.post(f"/v1/jobs/{job.job_id}/signing-secret")
    assert first.status == 200 and first.body["previousSecretsRetireAt"] == []
    assert deliver(system, trigger(api, job.job_id)).outcome is AttemptOutcome.SUCCEEDED
    verified(first.body["signingSecret"], receiver.requests[-1])


def test_a_stored_job_with_framing_headers_is_still_delivered_whole_and_signed(api, system, receiver, now):
    """Jobs written before framing headers were refused: the worker leaves those headers out,
    so the body arrives whole (a chunked claim would have the receiver misread it) and the
    signature survives (a Connection header naming it would have a proxy strip it)."""
    headers = {"Transfer-Encoding": "chunked", "Connection": "close, webhook-signature", "X-Trace": "t"}
    spec = JobSpec.model_validate(job_body_spec(receiver.url("/hook"), now, headers))
    job = system.jobs.create("tenant-a", spec).job
    secret = api.post(f"/v1/jobs/{job.job_id}/signing-secret").body["signingSecret"]
    assert deliver(system, trigger(api, job.job_id)).outcome is AttemptOutcome.SUCCEEDED
    request = receiver.requests[-1]
    assert verified(secret, request)["jobId"] == job.job_id
    assert request.headers["X-Trace"] == "t"
    assert "chunked" not in request.headers.get("Transfer-Encoding", "")
    assert "webhook-signature" not in request.headers.get("Connection", "")


def job_body_spec(url: str, now: datetime, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": "legacy",
        "type": "webhook.test",
        "target": {"kind": "http", "url": url, "headers": headers or {}},
        "schedule": {"kind": "rate", "every_seconds": 3600},
    }


# --- secrets by reference ------------------------------------------------------------------


def referencing(arns: dict[str, str]) -> dict[str, Any]:
    return {
        "Authorization": {"valueFrom": arns["token"], "prefix": "Bearer "},
        "X-Api-Key": {"valueFrom": arns["parameter"]},
        "X-Field-Token": {"valueFrom": arns["json"], "jsonKey": "key"},
        "X-Trace": "plain-literal",
    }


def cli_output(api: ApiClient, *argv: str) -> str:
    """What `jobsched <argv>` prints, against a front that hands its requests to the API handler."""
    import jobsched_cli

    class Front(BaseHTTPRequestHandler):
        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else None
            parts = urlsplit(self.path)
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("if-match", "content-type")}
            answer = api.request(self.command, parts.path, raw_body=raw, headers=headers, query=parts.query)
            data = json.dumps(answer.body).encode() if answer.body is not None else b""
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _relay

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            code = jobsched_cli.main(["--endpoint", f"http://127.0.0.1:{server.server_address[1]}", *argv])
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0, out.getvalue()
    return out.getvalue()


def test_referenced_secrets_reach_the_receiver_and_nothing_else(api, system, receiver, arns, now, capfd):
    created = api.post(
        "/v1/jobs", job_body(now, http_target(receiver.url("/hook"), headers=referencing(arns)))
    )
    assert created.status == 201, created
    job_id = created.body["jobId"]
    ok_key = first_run_key(api, job_id)
    assert deliver(system, ok_key).outcome is AttemptOutcome.SUCCEEDED
    [request] = receiver.requests
    assert request.headers["Authorization"] == f"Bearer {SECRET_VALUE}"
    assert request.headers["X-Api-Key"] == PARAMETER_VALUE
    assert request.headers["X-Field-Token"] == FIELD_SECRET
    assert request.headers["X-Trace"] == "plain-literal"

    # A delivery the receiver refuses, echoing the headers into its error.
    patched = api.patch(
        f"/v1/jobs/{job_id}",
        {"target": {"url": receiver.url("/reject")}},
        headers={"if-match": f'"{created.body["version"]}"'},
    )
    assert patched.status == 200, patched
    failed_key = trigger(api, job_id)
    assert deliver(system, failed_key).outcome is AttemptOutcome.DEAD
    assert len(receiver.requests) == 2

    answers = [
        created,
        patched,
        api.get(f"/v1/jobs/{job_id}"),
        api.get("/v1/jobs"),
        api.get(f"/v1/jobs/{job_id}/runs"),
        api.get(f"/v1/jobs/{job_id}/summary"),
        api.get(f"/v1/runs/{quote(ok_key, safe='')}"),
        api.get(f"/v1/runs/{quote(failed_key, safe='')}"),
        api.get("/v1/dead-letters"),
    ]
    cli = [
        cli_output(api, "jobs", "get", job_id),
        cli_output(api, "--json", "jobs", "get", job_id),
        cli_output(api, "runs", "get", ok_key),
        cli_output(api, "runs", "get", failed_key),
        cli_output(api, "--json", "runs", "get", failed_key),
        cli_output(api, "runs", "list", job_id),
    ]
    runs = [system.runs.get_by_key(ok_key), system.runs.get_by_key(failed_key)]
    history = [t.model_dump_json() for run in runs for t in run.history]
    items = [
        json.dumps(item, default=str)
        for table in (system.settings.definitions_table, system.settings.runs_table)
        for item in boto3.client("dynamodb").scan(TableName=table)["Items"]
    ]
    logs = capfd.readouterr()

    run_detail = answers[7].body
    assert run_detail["lastErrorClass"] == "HTTP400" and "[secret]" in run_detail["lastErrorMessage"]
    assert "[secret]" in json.dumps(answers[6].body["result"])  # the echo, scrubbed
    assert arns["token"] in json.dumps(answers[2].body)  # the reference itself is shown
    everything = {
        "api": [json.dumps(a.body) for a in answers],
        "cli": cli,
        "history": history,
        "stored items": items,
        "logs": [logs.out, logs.err],
    }
    for where, texts in everything.items():
        for text in texts:
            for value in (SECRET_VALUE, PARAMETER_VALUE, FIELD_SECRET):
                assert value not in text, f"{value} appears in {where}"
    assert all(text for text in cli) and history and items


@pytest.mark.parametrize(
    ("headers", "field", "rule"),
    [
        (
            {"Authorization": "Bearer abc"},
            "target.http.headers.Authorization",
            "its name says it carries one",
        ),
        ({"X-Api-Key": "abc"}, "target.http.headers.X-Api-Key", "secret reference"),
        ({"X-Auth-Token": "abc"}, "target.http.headers.X-Auth-Token", "secret reference"),
        ({"Cookie": "sid=abc"}, "target.http.headers.Cookie", "secret reference"),
        ({"X-Forward": "Basic dXNlcjpwYXNz"}, "target.http.headers.X-Forward", "its value has the form"),
        ({"X-Note": "AKIAIOSFODNN7EXAMPLE"}, "target.http.headers.X-Note", "its value has the form"),
        (
            {"Authorization": {"valueFrom": "tenant-a/hook-token"}},
            "target.http.headers.Authorization.valueFrom",
            "must be the ARN",
        ),
        (
            {"Authorization": {"valueFrom": "arn:aws:s3:::bucket/key"}},
            "target.http.headers.Authorization.valueFrom",
            "'s3' is not a secret store",
        ),
        (
            {"Authorization": {"valueFrom": "arn:aws:ssm:us-east-1:123456789012:parameter/x", "value": "x"}},
            "target.http.headers.Authorization.value",
            "is not a known field",
        ),
        ({"Authorization": 7}, "target.http.headers.Authorization", "must be a string or a secret reference"),
        (
            {
                "Authorization": {
                    "valueFrom": "arn:aws:ssm:us-east-1:123456789012:parameter/x",
                    "jsonKey": "k",
                }
            },
            "target.http.headers.Authorization.jsonKey",
            "Secrets Manager secrets only",
        ),
        (
            {
                "Authorization": {
                    "valueFrom": "arn:aws:ssm:us-east-1:123456789012:parameter/x",
                    "prefix": "B\r\n",
                }
            },
            "target.http.headers.Authorization.prefix",
            "printable ASCII",
        ),
        (
            {
                "Authorization": {
                    "valueFrom": "arn:aws:ssm:us-east-1:123456789012:parameter/x",
                    "prefix": "B" * 65,
                }
            },
            "target.http.headers.Authorization.prefix",
            "at most 64",
        ),
        ({"X-Trace": "x" * 4097}, "target.http.headers", "at most 4096"),
        ({"webhook-signature": "v1,forged"}, "target.http.headers", "set by the scheduler"),
        # Only visible Latin-1 text reaches the wire as it was written (as for secret values).
        ({"X-Trace": "a\x0bb"}, "target.http.headers", "visible Latin-1"),
        ({"X-Trace": "a\x7fb"}, "target.http.headers", "visible Latin-1"),
        ({"X-Trace": "\u0100"}, "target.http.headers", "visible Latin-1"),
        ({"X-Trace": "line\u2028break"}, "target.http.headers", "visible Latin-1"),
        # The connection's own framing is the transport's: a target's would break the request.
        ({"Transfer-Encoding": "chunked"}, "target.http.headers", "set by the transport"),
        ({"Connection": "close, webhook-signature"}, "target.http.headers", "set by the transport"),
        ({"keep-alive": "timeout=5"}, "target.http.headers", "set by the transport"),
        ({"TE": "trailers"}, "target.http.headers", "set by the transport"),
        ({"Upgrade": "h2c"}, "target.http.headers", "set by the transport"),
        ({"Expect": "100-continue"}, "target.http.headers", "set by the transport"),
    ],
)
def test_bad_header_values_are_refused_naming_the_field(api, system, now, headers, field, rule):
    response = api.post("/v1/jobs", job_body(now, http_target("https://example.com/hook", headers=headers)))
    assert response.status == 400, response
    [error] = response.body["errors"]
    assert error["field"] == field and rule in error["rule"], error
    for literal in (v for v in headers.values() if isinstance(v, str)):
        assert literal not in json.dumps(response.body)  # a refused value is never echoed back


def test_a_secret_not_granted_to_the_tenant_is_refused_when_the_job_is_written(
    api, other_api, system, arns, now
):
    headers = {"Authorization": {"valueFrom": arns["token"]}}  # tenant-a's
    refused = other_api.post("/v1/jobs", job_body(now, http_target("https://example.com/h", headers=headers)))
    assert refused.status == 403, refused
    assert refused.body["code"] == "target_not_granted"
    assert refused.body["errors"] == [
        {"field": "target.http.headers.Authorization.valueFrom", "rule": refused.body["errors"][0]["rule"]}
    ]
    own = other_api.post(
        "/v1/jobs",
        job_body(
            now, http_target("https://example.com/h", headers={"Authorization": {"valueFrom": arns["b"]}})
        ),
    )
    assert own.status == 201, own
    moved = other_api.patch(
        f"/v1/jobs/{own.body['jobId']}", {"target": {"headers": headers}}, headers={"if-match": '"1"'}
    )
    assert moved.status == 403 and moved.body["code"] == "target_not_granted", moved


def refused_naming(response: Any, field: str) -> None:
    """The error body of a reference the tenant was not granted: 403, naming the field only."""
    assert response.status == 403, response
    assert response.body["code"] == "target_not_granted", response
    assert [error["field"] for error in response.body["errors"]] == [field], response
    assert SECRET_VALUE not in json.dumps(response.body)


def notifying(url: str, headers: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"on": ["dead"], "target": http_target(url, headers=headers)}]


NOTIFY_FIELD = "notify.0.target.http.headers.Authorization.valueFrom"


def test_a_webhook_naming_a_secret_not_granted_is_refused_when_the_job_is_created(
    other_api, system, arns, now
):
    """A notification's webhook is a target the tenant writes, as the job's own is: its
    references pass the same check, in a single create and in each job of a batch."""
    theirs = {"Authorization": {"valueFrom": arns["token"]}}  # tenant-a's
    body = job_body(
        now, http_target("https://example.com/h"), notify=notifying("https://example.com/n", theirs)
    )
    refused_naming(other_api.post("/v1/jobs", body), NOTIFY_FIELD)
    assert other_api.get("/v1/jobs").body["items"] == []  # nothing written
    own = {"Authorization": {"valueFrom": arns["b"]}}
    created = other_api.post(
        "/v1/jobs",
        job_body(now, http_target("https://example.com/h"), notify=notifying("https://example.com/n", own)),
    )
    assert created.status == 201, created


def test_a_webhook_naming_a_secret_not_granted_refuses_its_job_of_a_batch(other_api, system, arns, now):
    theirs = {"Authorization": {"valueFrom": arns["token"]}}  # tenant-a's
    own = {"Authorization": {"valueFrom": arns["b"]}}
    jobs = [
        job_body(now, http_target("https://example.com/h"), notify=notifying("https://example.com/n", refs))
        for refs in (theirs, own)
    ]
    batch = other_api.post("/v1/jobs/batch", {"jobs": jobs})
    assert batch.status == 200 and (batch.body["created"], batch.body["refused"]) == (1, 1), batch
    refused, created = batch.body["items"]
    assert refused["status"] == 403 and refused["error"]["code"] == "target_not_granted", refused
    assert [error["field"] for error in refused["error"]["errors"]] == [NOTIFY_FIELD], refused
    assert created["status"] == 201, created


def test_a_webhook_naming_a_secret_not_granted_is_refused_when_the_job_is_changed(
    other_api, system, arns, now
):
    theirs = {"Authorization": {"valueFrom": arns["token"]}}  # tenant-a's
    own = {"Authorization": {"valueFrom": arns["b"]}}
    created = other_api.post(
        "/v1/jobs",
        job_body(now, http_target("https://example.com/h"), notify=notifying("https://example.com/n", own)),
    )
    assert created.status == 201, created
    job_url = f"/v1/jobs/{created.body['jobId']}"
    before = other_api.get(job_url).body
    moved = other_api.patch(
        job_url, {"notify": notifying("https://example.com/n2", theirs)}, headers={"if-match": '"1"'}
    )
    refused_naming(moved, NOTIFY_FIELD)
    assert other_api.get(job_url).body == before  # nothing written
    kept = other_api.patch(
        job_url, {"notify": notifying("https://example.com/n2", own)}, headers={"if-match": '"1"'}
    )
    assert kept.status == 200, kept
    assert kept.body["notify"][0]["target"]["url"] == "https://example.com/n2"


def dead_run(api: ApiClient, system, receiver: Receiver, now: datetime) -> tuple[str, str]:
    """A job of the tenant whose first run died (its receiver answered 400): (job id, run key)."""
    created = api.post("/v1/jobs", job_body(now, http_target(receiver.url("/reject"))))
    assert created.status == 201, created
    key = first_run_key(api, created.body["jobId"])
    assert deliver(system, key).outcome is AttemptOutcome.DEAD
    return created.body["jobId"], key


def test_a_redrive_fix_naming_a_secret_not_granted_is_refused_before_anything_is_written(
    other_api, system, receiver, arns, now
):
    _, key = dead_run(other_api, system, receiver, now)
    run_url = f"/v1/runs/{quote(key, safe='')}"
    before = other_api.get(run_url).body
    theirs = http_target(receiver.url("/hook"), headers={"Authorization": {"valueFrom": arns["token"]}})
    refused_naming(
        other_api.post(f"{run_url}/redrive", {"reason": "moved", "target": theirs}),
        "target.http.headers.Authorization.valueFrom",
    )
    assert other_api.get(run_url).body == before  # nothing written
    mine = http_target(receiver.url("/hook"), headers={"Authorization": {"valueFrom": arns["b"]}})
    redriven = other_api.post(f"{run_url}/redrive", {"reason": "moved", "target": mine})
    assert redriven.status == 200, redriven
    assert deliver(system, key).outcome is AttemptOutcome.SUCCEEDED
    [request] = [r for r in receiver.requests if r.path == "/hook"]
    assert request.headers["Authorization"] == "tok-of-tenant-b-0000"


def test_a_bulk_redrive_fix_naming_a_secret_not_granted_refuses_the_whole_request(
    other_api, system, receiver, arns, now
):
    """The fix is one value for every run the request redrives: refused, it changes none,
    dry run or not."""
    job_id, key = dead_run(other_api, system, receiver, now)
    theirs = http_target(receiver.url("/hook"), headers={"Authorization": {"valueFrom": arns["token"]}})
    body = {"reason": "moved", "jobId": job_id, "target": theirs}
    for dry_run in (True, False):
        refused_naming(
            other_api.post("/v1/dead-letters/redrive", {**body, "dryRun": dry_run}),
            "target.http.headers.Authorization.valueFrom",
        )
    assert system.runs.get_by_key(key).state is RunState.DEAD
    mine = http_target(receiver.url("/hook"), headers={"Authorization": {"valueFrom": arns["b"]}})
    done = other_api.post("/v1/dead-letters/redrive", {**body, "target": mine})
    assert done.status == 200 and done.body["runKeys"] == [key], done
    assert deliver(system, key).outcome is AttemptOutcome.SUCCEEDED
    [request] = [r for r in receiver.requests if r.path == "/hook"]
    assert request.headers["Authorization"] == "tok-of-tenant-b-0000"


def test_a_grant_withdrawn_after_the_write_stops_the_delivery_before_any_request(
    api, system, receiver, arns, now
):
    created = api.post(
        "/v1/jobs",
        job_body(
            now, http_target(receiver.url("/hook"), headers={"Authorization": {"valueFrom": arns["token"]}})
        ),
    )
    assert created.status == 201, created
    grant(system, {})  # the operator withdrew every grant
    key = first_run_key(api, created.body["jobId"])
    assert deliver(system, key).outcome is AttemptOutcome.DEAD
    assert receiver.requests == []
    run = api.get(f"/v1/runs/{quote(key, safe='')}").body
    assert run["lastErrorClass"] == "TargetNotGranted", run


def test_a_cached_secret_is_still_authorised_for_every_tenant_that_asks(system, arns):
    reader = SecretReader(boto3_client, granted(GRANTS), max_age=300)
    target = HttpTarget(
        kind="http", url="https://example.com", headers={"Authorization": {"valueFrom": arns["token"]}}
    )
    assert reader.header_values("tenant-a", target) == {"Authorization": SECRET_VALUE}  # now cached
    with pytest.raises(PermanentError) as refused:
        reader.header_values("tenant-b", target)
    assert refused.value.error_class == "TargetNotGranted"
    assert SECRET_VALUE not in refused.value.message


def test_a_grant_withdrawn_stops_a_reader_that_already_holds_the_value(system, arns):
    """The reader asks for the grants as they are now on every read: a long-lived worker whose
    cache still holds the value reads nothing once the grant is gone."""
    current = {"grants": granted(GRANTS)()}
    reader = SecretReader(boto3_client, lambda: current["grants"], max_age=300)
    target = HttpTarget(
        kind="http", url="https://example.com", headers={"Authorization": {"valueFrom": arns["token"]}}
    )
    assert reader.header_values("tenant-a", target) == {"Authorization": SECRET_VALUE}  # now cached
    current["grants"] = Grants()  # the operator withdrew every grant
    with pytest.raises(PermanentError) as refused:
        reader.header_values("tenant-a", target)
    assert refused.value.error_class == "TargetNotGranted"


def test_secret_grants_reach_the_functions_in_the_grants_parameter(stores, arns, now):
    """As the stack ships them: one SSM parameter holds every grant, AWS targets and secrets
    alike, and the API authorises a header's reference with it."""
    from jobsched import wiring
    from jobsched.domain.instants import ManualClock
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched.settings import Settings

    queues, _ = stores
    document = GrantsDocument.from_maps(
        GRANTS, home={"partition": "aws", "region": "us-east-1", "account": "123456789012"}
    )
    boto3.client("ssm").put_parameter(
        Name="/jobsched-test/target-grants", Value=document.model_dump_json(by_alias=True), Type="String"
    )
    settings = Settings(
        shard_count=4,
        queue_urls=queues["urls"],
        dlq_urls=queues["dlq_urls"],
        target_grants_parameter="/jobsched-test/target-grants",
    )
    wiring.override(wiring.Container(settings, ManualClock(now), RecordedMetrics()))
    try:
        headers = {"Authorization": {"valueFrom": arns["token"]}}  # tenant-a's
        body = job_body(now, http_target("https://example.com/h", headers=headers))
        assert ApiClient("tenant-a").post("/v1/jobs", body).status == 201
        refused = ApiClient("tenant-b").post("/v1/jobs", body)
        assert refused.status == 403 and refused.body["code"] == "target_not_granted", refused
    finally:
        wiring.override(None)


def test_a_missing_secret_is_permanent_and_names_the_header_not_a_value(system, arns):
    reader = SecretReader(boto3_client, granted(GRANTS))
    gone = arns["token"].rsplit(":", 1)[0] + ":tenant-a/deleted-AbCdEf"
    target = HttpTarget(kind="http", url="https://example.com", headers={"X-Api-Key": {"valueFrom": gone}})
    with pytest.raises(PermanentError) as failed:
        reader.header_values("tenant-a", target)
    assert failed.value.error_class == "SecretUnavailable"
    assert "X-Api-Key" in failed.value.message and "ResourceNotFoundException" in failed.value.message


def test_a_secret_in_another_region_is_permanent_and_says_so(system, arns):
    elsewhere = arns["token"].replace(":us-east-1:", ":eu-west-1:")
    grants = {"tenant-a": (elsewhere,)}
    target = HttpTarget(
        kind="http", url="https://example.com", headers={"X-Api-Key": {"valueFrom": elsewhere}}
    )
    with pytest.raises(PermanentError, match="is in eu-west-1; this worker reads secrets of us-east-1"):
        SecretReader(boto3_client, granted(grants)).header_values("tenant-a", target)


def test_a_literal_credential_stored_before_the_rule_is_redacted_and_must_be_replaced(api, system, now):
    """Jobs written before literals were refused still read; no answer shows the literal, and
    a change must replace it with a reference rather than write the redaction back."""
    spec = JobSpec.model_validate(
        job_body_spec("https://example.com/h", now, {"Authorization": "Bearer old-literal-1"})
    )
    job = system.jobs.create("tenant-a", spec).job
    shown = api.get(f"/v1/jobs/{job.job_id}")
    assert shown.body["target"]["headers"] == {"Authorization": "[redacted]"}
    assert "old-literal-1" not in json.dumps(api.get("/v1/jobs").body)
    renamed = api.patch(f"/v1/jobs/{job.job_id}", {"name": "renamed"}, headers={"if-match": '"1"'})
    assert renamed.status == 400, renamed
    assert renamed.body["errors"][0]["field"] == "target.http.headers.Authorization"
