"""Every handler driven through its real entry point on moto, recording which AWS calls each
function makes: the evidence the IAM test holds the roles against.

Calls are attributed to the function whose handler is running (worker threads included);
calls the harness makes itself to set up or inspect state are attributed to "harness"."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from unittest import mock

import boto3
from botocore.awsrequest import AWSResponse
from botocore.response import StreamingBody
from jobsched.cdk.names import API, EVENTS, NOTIFIER, OUTBOX, RECONCILER, ROUTES, SWEEPER, WORKER
from jobsched.domain.errors import PermanentError
from jobsched.domain.events import RunEventsLevel
from jobsched.domain.instants import ManualClock, format_instant
from jobsched.domain.lifecycle import advance
from jobsched.domain.runs import RunState
from jobsched.store.schema import ALL_TABLES, DEFINITIONS, EVENT_BUS_NAME, RUNS, TableSpec

from tests.helpers import T0, ApiClient, create_queues

REGION = "us-east-1"
ACCOUNT = "123456789012"
TARGET_QUEUE = "jobsched-target-inbox"
TARGET_FUNCTION = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:jobsched-target-report"
TARGET_MACHINE = "jobsched-target-flow"
# A tenant's own account and role: the flows' roleArn target sends to a queue there.
TENANT_ACCOUNT = "111111111111"
TENANT_ROLE = f"arn:aws:iam::{TENANT_ACCOUNT}:role/jobsched-target-flow"
TENANT_QUEUE = "tenant-inbox"
# What the operator grants in the stack the IAM tests hold the flows against (the `variant`
# synth): tenant-a's targets in this account, and the tenants' roles.
FLOW_CONTEXT: dict[str, Any] = {
    "tenantTargets": {
        "tenant-a": [
            "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:jobsched-target-*",
            "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:jobsched-target-*",
            "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/default",
            "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:stateMachine:jobsched-target-*",
            "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:jobsched-target-*",
        ]
    },
    "assumableRoles": ["arn:${AWS::Partition}:iam::*:role/jobsched-target-*"],
}
GRANTS_PARAMETER = "/Jobsched/target-grants"
SERVICES = ("dynamodb", "sqs", "lambda", "events", "stepfunctions", "ssm", "sts", "sns")
TARGET_TOPIC = "jobsched-target-alerts"
NOTIFICATIONS_QUEUE = "jobsched-notifications"
SECOND_TICK_QUEUE = "jobsched-second-ticks"
HARNESS = "harness"
ASSUMED_SUFFIX = ", as the tenant's role"  # calls made with a tenant's assumed credentials
SHARDS = 4


@dataclass
class Call:
    function: str
    service: str
    operation: str
    params: dict[str, Any]


@dataclass
class Recorder:
    current: str = HARNESS
    calls: list[Call] = field(default_factory=list)
    routes: set[tuple[str, str]] = field(default_factory=set)  # (method, route path) the API served
    # (namespace, metric, dimension names) of every EMF record the handlers printed
    metrics: set[tuple[str, str, tuple[str, ...]]] = field(default_factory=set)

    def read_metrics(self, output: str) -> None:
        for line in output.splitlines():
            if not line.startswith('{"_aws"'):
                continue
            record = json.loads(line)
            for directive in record["_aws"]["CloudWatchMetrics"]:
                dimensions = tuple(sorted(d for group in directive["Dimensions"] for d in group))
                for metric in directive["Metrics"]:
                    self.metrics.add((directive["Namespace"], metric["Name"], dimensions))

    @contextmanager
    def acting_as(self, function: str) -> Iterator[None]:
        previous, self.current = self.current, function
        try:
            yield
        finally:
            self.current = previous

    def before_parameter_build(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        self.calls.append(Call(self.current, service, model.name, copy.deepcopy(params)))

    def as_assumed(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        self.calls.append(Call(self.current + ASSUMED_SUFFIX, service, model.name, copy.deepcopy(params)))

    def by_function(self, function: str) -> list[Call]:
        return [c for c in self.calls if c.function == function]


class Hooks:
    """A loopback webhook receiver: 200 to everything, each request body kept."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[bytes] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner.requests.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/alerts"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _lambda_stub(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
    """moto cannot run a Lambda function without Docker: answer Invoke as a function would."""
    body = b'{"ok": true}'
    parsed = {
        "StatusCode": 200,
        "Payload": StreamingBody(io.BytesIO(body), len(body)),
        "ResponseMetadata": {"HTTPStatusCode": 200},
    }
    return AWSResponse("https://lambda.invalid", 200, {}, None), parsed  # type: ignore[arg-type]


def _context(name: str) -> Any:
    from jobsched_local.lambda_context import InvocationContext

    return InvocationContext(function_name=f"jobsched-{name}", timeout_seconds=300)


class Flows:
    def __init__(self, recorder: Recorder) -> None:
        from jobsched import aws as aws_clients
        from jobsched import wiring
        from jobsched.settings import Settings
        from jobsched.targets import registry

        self.recorder = recorder
        self.clock = ManualClock(T0)
        self.ddb = boto3.client("dynamodb")  # harness clients: not recorded
        self.sqs = boto3.client("sqs")
        self.streams = boto3.client("dynamodbstreams")
        for spec in ALL_TABLES:
            self.ddb.create_table(**spec.create_table_request())
        urls = create_queues(self.sqs)
        self.queue_urls: dict[str, str] = urls["urls"]
        self.target_queue_url = self.sqs.create_queue(QueueName=TARGET_QUEUE)["QueueUrl"]
        self.notifications_url = self.sqs.create_queue(QueueName=NOTIFICATIONS_QUEUE)["QueueUrl"]
        self.second_tick_url = self.sqs.create_queue(QueueName=SECOND_TICK_QUEUE)["QueueUrl"]
        self.target_topic_arn = boto3.client("sns").create_topic(Name=TARGET_TOPIC)["TopicArn"]
        self.hooks = Hooks()
        self.target_machine_arn = boto3.client("stepfunctions").create_state_machine(
            name=TARGET_MACHINE,
            definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/jobsched-target-flow",
        )["stateMachineArn"]
        # The grants as the deploy writes them, and a queue in the tenant's own account.
        from jobsched.cdk.config import Config

        document = Config(**{_snake(k): _tupled(v) for k, v in FLOW_CONTEXT.items()}).grants_document(
            {"partition": "aws", "region": REGION, "account": ACCOUNT}
        )
        boto3.client("ssm").put_parameter(
            Name=GRANTS_PARAMETER, Type="String", Value=document.model_dump_json(by_alias=True)
        )
        tenant = boto3.client("sts").assume_role(RoleArn=TENANT_ROLE, RoleSessionName="harness")[
            "Credentials"
        ]
        self.tenant_queue_url = boto3.client(
            "sqs",
            aws_access_key_id=tenant["AccessKeyId"],
            aws_secret_access_key=tenant["SecretAccessKey"],
            aws_session_token=tenant["SessionToken"],
        ).create_queue(QueueName=TENANT_QUEUE)["QueueUrl"]

        aws_clients.client.cache_clear()
        for service in SERVICES:
            # The cached clients every function uses (called as the functions call them: the
            # cache keys on the call's form).
            for client in (aws_clients.client(service), aws_clients.client(service, quick=True)):
                client.meta.events.register("before-parameter-build", recorder.before_parameter_build)
        aws_clients.client("lambda").meta.events.register("before-call.lambda.Invoke", _lambda_stub)
        # The targets' clients (one per service and timeout) are made as runs need them.
        aws_clients._effect_client.cache_clear()
        make_effect_client = aws_clients.effect_client

        def recorded_effect_client(service: str, timeout_seconds: float) -> Any:
            client = make_effect_client(service, timeout_seconds)
            events = client.meta.events
            events.register("before-parameter-build", recorder.before_parameter_build, unique_id="flows")
            events.register("before-call.lambda.Invoke", _lambda_stub, unique_id="flows-invoke")
            return client

        self._effect_patch = mock.patch.object(aws_clients, "effect_client", recorded_effect_client)
        self._effect_patch.start()
        make_role_client = aws_clients.role_effect_client

        def recorded_role_client(service: str, timeout_seconds: float, credentials: Any) -> Any:
            client = make_role_client(service, timeout_seconds, credentials)
            client.meta.events.register("before-parameter-build", recorder.as_assumed, unique_id="flows")
            return client

        self._role_patch = mock.patch.object(aws_clients, "role_effect_client", recorded_role_client)
        self._role_patch.start()

        self._registered = ["iamflow.ok", "iamflow.slow", "iamflow.fail"]
        registry.add("iamflow.ok", lambda payload, invocation: {"done": invocation.run_key})
        registry.add("iamflow.slow", self._slow)
        registry.add("iamflow.fail", self._fail)
        # A short lease, so the heartbeat runs while the slow handler works: below the
        # deployable minimum, so set past the model's validation. Sweeps make runs to the
        # horizon only, so each sweep of the flows finds a job due.
        settings = Settings(
            shard_count=SHARDS,
            sweep_ahead_seconds=120,
            queue_urls=urls["urls"],
            dlq_urls=urls["dlq_urls"],
            target_grants_parameter=GRANTS_PARAMETER,
            notifications_queue_url=self.notifications_url,
            second_tick_queue_url=self.second_tick_url,
            http_allow_destinations=("127.0.0.1/32",),
        ).model_copy(update={"lease_seconds": 3})
        self.container = wiring.Container(settings, self.clock)
        wiring.override(self.container)
        self.api = ApiClient("tenant-a")
        self._stream_seen: dict[tuple[str, str], int] = {}
        boto3.client("events").create_event_bus(Name=EVENT_BUS_NAME)
        self.jobs: dict[str, str] = {}

    def close(self) -> None:
        from jobsched import aws as aws_clients
        from jobsched import wiring
        from jobsched.targets import registry

        for name in self._registered:
            registry._handlers.pop(name, None)
        wiring.override(None)
        self._effect_patch.stop()
        self._role_patch.stop()
        self.hooks.close()
        aws_clients.client.cache_clear()
        aws_clients._effect_client.cache_clear()

    def _slow(self, payload: Any, invocation: Any) -> str:
        """Works until the worker's heartbeat has extended the lease at least once."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any(
            c.function == WORKER
            and c.operation == "UpdateItem"
            and c.params.get("TableName") == RUNS.default_name
            for c in list(self.recorder.calls)
        ):
            time.sleep(0.05)
        return "late"

    @staticmethod
    def _fail(payload: Any, invocation: Any) -> None:
        raise PermanentError("rejected", error_class="Rejected")

    # --- the API ---

    def call(self, method: str, path: str, route: str, body: Any = None, **kw: Any) -> Any:
        with self.recorder.acting_as(API):
            response = self.api.request(method, path, body, **kw)
        self.recorder.routes.add((method, route))
        assert response.status < 500, (method, path, response)
        return response

    def create(self, name: str, body: dict[str, Any], **kw: Any) -> str:
        response = self.call("POST", "/v1/jobs", "/v1/jobs", {"name": name, **body}, **kw)
        assert response.status == 201, response
        self.jobs[name] = response.body["jobId"]
        return str(response.body["jobId"])

    def api_setup(self) -> None:
        soon = format_instant(T0 + timedelta(seconds=10))
        every_minute = {"cron": "* * * * *"}
        self.create("ok", {"type": "iamflow.ok", **every_minute}, headers={"idempotency-key": "flow-ok"})
        told = [
            {"kind": "sqs", "queueUrl": self.target_queue_url},
            {"kind": "sns", "topicArn": self.target_topic_arn},
            {"kind": "eventbridge"},
            {"kind": "http", "url": self.hooks.url},
            {"kind": "sqs", "queueUrl": self.tenant_queue_url, "roleArn": TENANT_ROLE},
        ]
        self.create(
            "fail",
            {
                "type": "iamflow.fail",
                **every_minute,
                "maxAttempts": 1,
                "pauseOnFailure": True,
                "priority": "high",
                "notify": [{"on": ["dead"], "target": target} for target in told],
            },
        )
        self.create("slow", {"type": "iamflow.slow", "runAt": soon})
        self.create("external", {"type": "iamflow.external", "runAt": soon})
        self.create("chain", {"type": "iamflow.ok", **every_minute, "overlap": "skip"})
        self.create("paused", {"type": "iamflow.ok", "every": 60})
        targets = {
            "sqs": {"kind": "sqs", "queueUrl": self.target_queue_url},
            "lambda": {"kind": "lambda", "functionArn": TARGET_FUNCTION},
            "eventbridge": {"kind": "eventbridge"},
            "stepfunctions": {"kind": "stepfunctions", "stateMachineArn": self.target_machine_arn},
            "own-role": {"kind": "sqs", "queueUrl": self.tenant_queue_url, "roleArn": TENANT_ROLE},
        }
        priorities = {"sqs": "high", "lambda": "low"}  # every priority queue sees traffic
        for kind, target in targets.items():
            body = {"type": "iamflow.target", "runAt": soon, "target": target}
            self.create(kind, {**body, "priority": priorities.get(kind, "default")})
        refused = {"type": "iamflow.target", "runAt": soon, "target": {**targets["lambda"]}}
        with self.recorder.acting_as(API):
            response = ApiClient("tenant-b").post("/v1/jobs", {"name": "not granted", **refused})
        assert response.status == 403, response  # tenant-b was granted nothing
        # Many at once: one written with its first run in its creation's transaction.
        batch = {
            "jobs": [
                {"name": "batched", "type": "iamflow.ok", "runAt": soon},
                {"name": "batched cron", "type": "iamflow.ok", "cron": "0 0 1 1 *"},
            ]
        }
        answer = self.call(
            "POST", "/v1/jobs/batch", "/v1/jobs/batch", batch, headers={"idempotency-key": "flow-batch"}
        )
        assert [item["status"] for item in answer.body["items"]] == [201, 201], answer
        ok = self.jobs["ok"]
        self.call("GET", "/v1/jobs", "/v1/jobs")
        etag = self.call("GET", f"/v1/jobs/{ok}", "/v1/jobs/{id}").headers["ETag"]
        self.call(
            "PATCH", f"/v1/jobs/{ok}", "/v1/jobs/{id}", {"payload": {"n": 1}}, headers={"if-match": etag}
        )
        self.call("POST", f"/v1/jobs/{self.jobs['paused']}/pause", "/v1/jobs/{id}/pause")
        rotated = self.call("POST", f"/v1/jobs/{ok}/signing-secret", "/v1/jobs/{id}/signing-secret")
        assert rotated.status == 200, rotated
        preview = {"specs": [{"cron": "0 9 * * MON-FRI"}, {"monthly": "last-day", "at": "17:00"}], "count": 3}
        previewed = self.call("POST", "/v1/schedules/preview", "/v1/schedules/preview", preview)
        assert previewed.status == 200 and len(previewed.body["fireTimes"]) == 3, previewed
        entries = {"entries": [{"date": "2026-12-25"}]}
        assert self.call("PUT", "/v1/calendars/hols", "/v1/calendars/{name}", entries).status == 201
        self.call("GET", "/v1/calendars", "/v1/calendars")
        assert self.call("GET", "/v1/calendars/hols", "/v1/calendars/{name}").body["entryCount"] == 1
        assert self.call("DELETE", "/v1/calendars/hols", "/v1/calendars/{name}").status == 200
        self.call("GET", "/openapi.json", "/openapi.json")
        self.call("GET", "/docs", "/docs")

    def api_later(self) -> None:
        """Ten minutes on: resume (with missed occurrences), runs, leases, redrive, cancel."""
        paused = self.jobs["paused"]
        assert self.call("POST", f"/v1/jobs/{paused}/resume", "/v1/jobs/{id}/resume").status == 200
        assert self.call("DELETE", f"/v1/jobs/{paused}", "/v1/jobs/{id}").status == 200
        assert self.call("POST", f"/v1/jobs/{paused}/archive", "/v1/jobs/{id}/archive").status == 200
        ok, chain = self.jobs["ok"], self.jobs["chain"]
        self.call("GET", f"/v1/jobs/{ok}/runs", "/v1/jobs/{id}/runs")
        self.call("GET", f"/v1/jobs/{ok}/summary", "/v1/jobs/{id}/summary")
        assert self.call("POST", f"/v1/jobs/{ok}/trigger", "/v1/jobs/{id}/trigger").status == 201
        window = {
            "start": format_instant(T0 + timedelta(minutes=3)),
            "end": format_instant(T0 + timedelta(minutes=6)),
        }
        backfill = self.call("POST", f"/v1/jobs/{chain}/backfill", "/v1/jobs/{id}/backfill", window)
        assert backfill.status == 201, backfill

        claim = {"types": ["iamflow.external"], "workerId": "ext-1", "leaseSeconds": 60}
        (lease,) = self.call("POST", "/v1/leases", "/v1/leases", claim).body["leases"]
        key, fence = lease["runKey"], lease["fence"]
        beat = self.call(
            "POST", f"/v1/leases/{key}/heartbeat", "/v1/leases/{runKey}/heartbeat", {"fence": fence}
        )
        assert beat.status == 200, beat
        failure = {
            "fence": fence,
            "outcome": "failed",
            "error": {"class": "Bad", "message": "no", "retryable": False},
        }
        done = self.call("POST", f"/v1/leases/{key}/complete", "/v1/leases/{runKey}/complete", failure)
        assert done.body["state"] == "DEAD", done
        self.call("GET", "/v1/dead-letters", "/v1/dead-letters")
        assert self.call("GET", "/v1/runs", "/v1/runs", query="state=DEAD").status == 200
        bulk = {"reason": "look first", "dryRun": True, "runKeys": [key]}
        dry = self.call("POST", "/v1/dead-letters/redrive", "/v1/dead-letters/redrive", bulk)
        assert dry.status == 200 and dry.body["runKeys"] == [key], dry
        listed = {"reason": "look first", "dryRun": True, "errorClass": "Bad"}
        assert self.call("POST", "/v1/dead-letters/cancel", "/v1/dead-letters/cancel", listed).status == 200
        self.call("GET", f"/v1/runs/{key}", "/v1/runs/{runKey}")
        assert self.call("POST", f"/v1/runs/{key}/redrive", "/v1/runs/{runKey}/redrive", {}).status == 200
        assert self.call("POST", f"/v1/runs/{key}/cancel", "/v1/runs/{runKey}/cancel").status == 200

    # --- the glue Lambda would provide ---

    def stream_records(self, spec: TableSpec = RUNS, reader: str = OUTBOX) -> list[dict[str, Any]]:
        """The table's stream records `reader` has not had yet, in the shape Lambda delivers them."""
        arn = self.ddb.describe_table(TableName=spec.default_name)["Table"]["LatestStreamArn"]
        records: list[dict[str, Any]] = []
        for shard in self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            iterator = self.streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                response = self.streams.get_records(ShardIterator=iterator, Limit=1000)
                records.extend(json.loads(json.dumps(response["Records"], default=str)))
                if not response["Records"]:
                    break
                iterator = response.get("NextShardIterator")
        # Each reader has its own position in each table's stream (moto's shard ids are shared).
        position = (reader, spec.logical_id)
        fresh = records[self._stream_seen.get(position, 0) :]
        self._stream_seen[position] = len(records)
        shaped = []
        for record in fresh:
            record = json.loads(json.dumps(record, default=str))
            record.update(eventVersion="1.1", eventSourceARN=arn)
            record["dynamodb"]["ApproximateCreationDateTime"] = int(self.clock.now().timestamp())
            shaped.append(record)
        return shaped

    def run_outbox(self) -> None:
        from jobsched.handlers import outbox

        records = self.stream_records()
        for start in range(0, len(records), 100):
            with self.recorder.acting_as(OUTBOX):
                result = outbox.handler({"Records": records[start : start + 100]}, _context(OUTBOX))
            assert result == {"batchItemFailures": []}, result

    def run_events(self) -> None:
        """The events consumer over both tables' streams, from the start (its own position)."""
        from jobsched.handlers import events

        for spec in (RUNS, DEFINITIONS):
            records = [
                r
                for r in self.stream_records(spec, EVENTS)
                if events.matches_filter(r, RunEventsLevel.ALL, spec)
            ]
            assert records, f"the flows changed {spec.logical_id}"
            for start in range(0, len(records), 100):
                with self.recorder.acting_as(EVENTS):
                    result = events.handler({"Records": records[start : start + 100]}, _context(EVENTS))
                assert result == {"batchItemFailures": []}, result

    def run_notifier(self) -> int:
        """The notifier over what the events consumer queued (the failing job's dead runs)."""
        from jobsched.handlers import notifier

        for built in ("grants", "target_authority", "target_runner", "notifier"):
            self.container.__dict__.pop(built, None)
        delivered = 0
        while True:
            messages = self.sqs.receive_message(QueueUrl=self.notifications_url, MaxNumberOfMessages=5).get(
                "Messages", []
            )
            if not messages:
                return delivered
            for message in messages:
                self.sqs.delete_message(
                    QueueUrl=self.notifications_url, ReceiptHandle=message["ReceiptHandle"]
                )
            records = [
                self.sqs_record("", m["Body"], m["MessageId"], url=self.notifications_url) for m in messages
            ]
            with self.recorder.acting_as(NOTIFIER):
                result = notifier.handler({"Records": records}, _context(NOTIFIER))
            assert result == {"batchItemFailures": []}, result
            delivered += len(messages)

    def sqs_record(
        self, key: str, body: str, message_id: str | None = None, *, url: str | None = None
    ) -> dict[str, Any]:
        url = url or self.queue_urls[key]
        return {
            "messageId": message_id or str(uuid.uuid4()),
            "receiptHandle": "flow",
            "body": body,
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": str(int(self.clock.now().timestamp() * 1000)),
            },
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{url.rsplit('/', 1)[-1]}",
            "awsRegion": REGION,
        }

    def run_worker(self) -> int:
        from jobsched.handlers import worker

        # The worker is a function of its own: it reads the grants itself, not from the API's cache.
        for built in ("grants", "target_authority", "worker", "jobs"):
            self.container.__dict__.pop(built, None)
        delivered = 0
        for key, url in self.queue_urls.items():
            while True:
                messages = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                event = {"Records": [self.sqs_record(key, m["Body"], m["MessageId"]) for m in messages]}
                with self.recorder.acting_as(WORKER):
                    result = worker.handler(event, _context(WORKER))
                assert result == {"batchItemFailures": []}, result
                delivered += len(messages)
        return delivered

    def deliver_early(self) -> None:
        """A message for a run that is not due yet: the worker defers it with a fresh message."""
        from jobsched.handlers import worker
        from jobsched.store.queues import RunMessage

        runs = self.container.runs.list_for_job(self.jobs["ok"], limit=100, cursor=None).items
        soon = self.clock.now() + timedelta(seconds=5)
        early = [r for r in runs if r.state in (RunState.PENDING, RunState.QUEUED) and r.due_at > soon]
        assert early, "the sweep horizon leaves a run in the future"
        record = self.sqs_record(early[0].priority.value, RunMessage.of(early[0]).to_json())
        with self.recorder.acting_as(WORKER):
            assert worker.handler({"Records": [record]}, _context(WORKER)) == {"batchItemFailures": []}

    def run_sweeper(self) -> None:
        from jobsched.handlers import sweeper

        with self.recorder.acting_as(SWEEPER):
            sweeper.handler({"shards": list(range(SHARDS))}, _context(SWEEPER))

    def sweep_losing_a_race(self) -> None:
        """A client edit lands between the sweeper's read and its write: it re-reads and retries."""
        from jobsched.handlers import sweeper

        self.clock.advance(60)
        raced: list[str] = []

        def edit_first(params: dict[str, Any], model: Any, **_: Any) -> None:
            if model.name == "PutItem" and params.get("TableName") == DEFINITIONS.default_name and not raced:
                job_id = params["Item"]["job_id"]["S"]
                raced.append(job_id)
                self.ddb.update_item(
                    TableName=DEFINITIONS.default_name,
                    Key={"job_id": {"S": job_id}},
                    UpdateExpression="SET rev = rev + :one",
                    ExpressionAttributeValues={":one": {"N": "1"}},
                )

        from jobsched import aws as aws_clients

        events = aws_clients.client("dynamodb").meta.events
        events.register("before-parameter-build.dynamodb.PutItem", edit_first)
        try:
            with self.recorder.acting_as(SWEEPER):
                for shard in range(SHARDS):
                    sweeper.handler({"shard": shard}, _context(SWEEPER))
        finally:
            events.unregister("before-parameter-build.dynamodb.PutItem", edit_first)
        assert raced, "some job was due, so the sweeper wrote one"

    def sweep_folding_counters(self) -> None:
        """A job's counters, folded by a read while one of its runs was open, are folded again
        by the sweeper 6 hours on: it reads the runs after the mark and the open one again."""
        from jobsched.domain.run_counts import FOLD_EVERY, FOLD_LAG
        from jobsched.handlers import sweeper

        job_id = self.create("folded", {"type": "iamflow.ok", "cron": "* * * * *"})
        self.clock.advance(120)
        self.container.sweeper.sweep()
        runs = self.container.runs.list_for_job(job_id, limit=10, cursor=None).items
        run = min((r for r in runs if r.counted_by_fold), key=lambda r: r.scheduled_for)
        now = self.clock.now()
        leased = advance(
            run, RunState.LEASED, now=now, actor="worker:slow", fence=run.fence + 1, attempt=1,
            lease_owner="slow", lease_expires_at=now + timedelta(hours=12), first_attempt_at=now,
        )  # fmt: skip
        self.container.runs.commit(run, lambda _: leased)
        self.clock.advance((FOLD_LAG + timedelta(minutes=1)).total_seconds())
        self.container.run_service.summary("tenant-a", job_id)  # the fold remembers the open run
        self.clock.advance(FOLD_EVERY.total_seconds())
        with self.recorder.acting_as(SWEEPER):
            sweeper.handler({"shards": list(range(SHARDS))}, _context(SWEEPER))
        folded = self.container.definitions.get(job_id)
        assert folded is not None and folded.counts_folded_at == self.clock.now()

    def crash_holding_a_lease(self) -> None:
        """A worker claims a run and dies: the reconciler must expire the lease."""
        job_id = self.create(
            "crash", {"type": "iamflow.ok", "cron": "* * * * *", "maxAttempts": 1, "pauseOnFailure": True}
        )
        runs = self.container.runs.list_for_job(job_id, limit=10, cursor=None).items
        run = min(runs, key=lambda r: r.scheduled_for)
        now = self.clock.now()
        leased = advance(
            run,
            RunState.LEASED,
            now=now,
            actor="worker:crashed",
            fence=run.fence + 1,
            attempt=run.attempt + 1,
            lease_owner="crashed",
            lease_expires_at=now + timedelta(seconds=30),
            first_attempt_at=now,
        )
        self.container.runs.commit(run, lambda _: leased)

    def run_reconciler(self) -> None:
        from jobsched.handlers import reconciler

        for shard in range(SHARDS):
            with self.recorder.acting_as(RECONCILER):
                reconciler.handler({"shard": shard}, _context(RECONCILER))

    # --- the whole story ---

    def run(self) -> None:
        self.api_setup()
        self.clock.advance(600)
        self.api_later()
        self.run_sweeper()
        self.sweep_losing_a_race()
        self.run_outbox()
        assert self.run_worker() >= 6  # the targets, the slow and the failing run at least
        self.deliver_early()
        self.run_outbox()
        self.crash_holding_a_lease()
        self.clock.advance(3600)
        self.run_reconciler()
        self.run_events()
        assert self.run_notifier() >= 5  # each of the failing job's notifications, at least once
        assert self.hooks.requests, "the webhook notification arrived"
        self.sweep_folding_counters()


def _snake(name: str) -> str:
    import re

    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _tupled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: tuple(v) for k, v in value.items()}
    return tuple(value)


def record_all_flows(function_env: dict[str, str] | None = None) -> Recorder:
    """`function_env`: the variables the template sets on the functions that are plain values
    (Powertools' among them, which decide the metrics' dimensions); resource names are not
    taken, the flows make their own tables and queues."""
    from jobsched import settings
    from jobsched_local.moto_transactions import install as serialise_moto
    from moto import mock_aws

    # The worker's records run on threads of their own: moto's DynamoDB is not safe for that
    # (a transaction's table copy races another thread's write), local mode's lock is.
    serialise_moto()
    recorder = Recorder()
    printed = io.StringIO()
    # As in Lambda: real AWS endpoints (here moto), metrics on, whatever ran before in this process.
    lambda_like = {k: v for k, v in os.environ.items() if k != "JOBSCHED_AWS_ENDPOINT_URL"}
    lambda_like.update(function_env or {})
    lambda_like["POWERTOOLS_METRICS_DISABLED"] = "false"
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, lambda_like, clear=True))
        stack.callback(settings.settings.cache_clear)
        settings.settings.cache_clear()
        stack.enter_context(mock_aws())
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        stack.enter_context(contextlib.redirect_stdout(printed))
        flows = Flows(recorder)
        try:
            flows.run()
        finally:
            flows.close()
    recorder.read_metrics(printed.getvalue())
    assert recorder.routes == {(r.method, r.path) for r in ROUTES}, "the flows call every route"
    return recorder
