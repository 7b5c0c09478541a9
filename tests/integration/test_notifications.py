"""Notifications a tenant sets on a job, end to end on moto through the public API: a run
that dies, is skipped or starts late is told to each target kind (SNS, SQS, EventBridge, a
signed webhook) once, with a stable id across stream redelivery; targets are authorised as
run targets are (a tenant naming a target it was not granted gets a 403 naming the field, and
a grant revoked later makes the delivery refused, not retried); a failing target is retried
by the queue and counted, and never touches the run."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from jobsched.domain.events import RunEventsLevel
from jobsched.domain.runs import RunState
from jobsched.handlers import events as events_handler
from jobsched.handlers import notifier as notifier_handler
from jobsched.store.schema import RUNS
from jobsched_local.glue import lambda_stream_record, read_stream
from jobsched_local.lambda_context import InvocationContext
from jobsched_local.moto_backend import create_event_bus
from standardwebhooks.webhooks import Webhook

from tests.helpers import grant

pytestmark = pytest.mark.integration


def events_context() -> InvocationContext:
    """A fresh invocation of the events function: its 60 s start now, not at import."""
    return InvocationContext(function_name="jobsched-events", timeout_seconds=60)


def notifier_context() -> InvocationContext:
    """A fresh invocation of the notifier function (as `events_context`)."""
    return InvocationContext(function_name="jobsched-notifier", timeout_seconds=60)


ACCOUNT = "123456789012"


class Hooks:
    """A loopback webhook receiver: answers `status` (200 unless told otherwise) and keeps
    every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.status = 200
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append((dict(self.headers.items()), body))
                self.send_response(owner.status)
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


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    server = Hooks()
    yield server
    server.close()


@pytest.fixture
def sinks(container, hooks) -> dict[str, Any]:
    """tenant-a's own notification targets on moto, each observed through an SQS queue: a
    queue, a topic subscribed to a queue, a bus whose rule forwards to a queue; and the
    notifications queue the events consumer fills. Granted to tenant-a, with loopback HTTP."""
    sqs, sns, events = boto3.client("sqs"), boto3.client("sns"), boto3.client("events")
    create_event_bus(events, sqs)  # the stack's own bus, which the events consumer publishes to

    def queue(name: str) -> tuple[str, str]:
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        return url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]

    alerts_url, alerts_arn = queue("tenant-a-alerts")
    topic_seen_url, topic_seen_arn = queue("topic-seen")
    bus_seen_url, bus_seen_arn = queue("bus-seen")
    topic = sns.create_topic(Name="tenant-a-alerts")["TopicArn"]
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=topic_seen_arn, Attributes={"RawMessageDelivery": "true"}
    )
    bus = events.create_event_bus(Name="tenant-a-bus")["EventBusArn"]
    events.put_rule(
        Name="all", EventBusName="tenant-a-bus", EventPattern=json.dumps({"source": [{"prefix": ""}]})
    )
    events.put_targets(Rule="all", EventBusName="tenant-a-bus", Targets=[{"Id": "q", "Arn": bus_seen_arn}])
    notifications_url, _ = queue("jobsched-notifications")
    container.settings = container.settings.model_copy(
        update={"notifications_queue_url": notifications_url, "http_allow_destinations": ("127.0.0.1/32",)}
    )
    for built in ("notification_queue", "http_targets"):
        container.__dict__.pop(built, None)
    grant(container, {"tenant-a": (alerts_arn, topic, bus)})
    return {
        "targets": {
            "sqs": {"kind": "sqs", "queueUrl": alerts_url},
            "sns": {"kind": "sns", "topicArn": topic},
            "eventbridge": {"kind": "eventbridge", "eventBusName": "tenant-a-bus"},
            "http": {"kind": "http", "url": hooks.url},
        },
        "seen": {"sqs": alerts_url, "sns": topic_seen_url, "eventbridge": bus_seen_url},
        "notifications": notifications_url,
    }


def drain(url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs")
    found: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], AttributeNames=["All"]
        ).get("Messages")
        if not messages:
            return found
        found += [dict(m) for m in messages]
        for m in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


_iterators: dict[str, str] = {}


def flow_events(level: RunEventsLevel = RunEventsLevel.FAILURES) -> list[dict[str, Any]]:
    """Feed the Runs stream's new records (through the mapping's filter at `level`) to the
    events consumer; the records fed."""
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=RUNS.default_name)["Table"]["LatestStreamArn"]
    shaped = [lambda_stream_record(r, arn, "us-east-1") for r in read_stream(streams, arn, _iterators)]
    records = [r for r in shaped if events_handler.matches_filter(r, level, RUNS)]
    if records:
        assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    return records


def notify_once(sinks: dict[str, Any]) -> dict[str, Any]:
    """Run the notifier over what the notifications queue holds, as its mapping would."""
    messages = drain(sinks["notifications"])
    records = [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "eventSourceARN": f"arn:aws:sqs:us-east-1:{ACCOUNT}:jobsched-notifications",
        }
        for m in messages
    ]
    return {
        "count": len(messages),
        "result": notifier_handler.handler({"Records": records}, notifier_context()),
    }


@pytest.fixture(autouse=True)
def _fresh_stream_position():
    _iterators.clear()
    yield


def external_job(api, notify: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    created = api.post(
        "/v1/jobs", {"name": "nightly", "type": "ext", "every": 3600, "notify": notify, **fields}
    )
    assert created.status == 201, created
    return created.body


def fail_for_good(api, types: tuple[str, ...] = ("ext",)) -> str:
    (lease,) = api.post("/v1/leases", {"types": list(types), "workerId": "w"}).body["leases"]
    done = api.post(
        f"/v1/leases/{lease['runKey']}/complete",
        {
            "fence": lease["fence"],
            "outcome": "failed",
            "error": {"class": "Boom", "message": "no", "retryable": False},
        },
    )
    assert done.status == 200, done
    return str(lease["runKey"])


def test_a_dead_run_is_told_to_every_target_kind_once(api, container, sinks, hooks, clock):
    targets = sinks["targets"]
    job = external_job(api, [{"on": ["dead"], "target": t} for t in targets.values()])
    run_key = fail_for_good(api)  # the job's first run, made when it was created
    flow_events()
    assert notify_once(sinks) == {"count": 4, "result": {"batchItemFailures": []}}
    bodies = {kind: [json.loads(m["Body"]) for m in drain(url)] for kind, url in sinks["seen"].items()}
    (on_queue,), (on_topic,), (on_bus,) = bodies["sqs"], bodies["sns"], bodies["eventbridge"]
    assert on_queue["type"] == on_topic["type"] == on_bus["detail"]["type"] == "jobsched.run.dead"
    assert on_queue["subject"] == run_key and on_queue["data"]["errorClass"] == "Boom"
    assert on_bus["detail-type"] == "jobsched.run.dead"
    ((headers, body),) = hooks.requests
    # Signed with the job's own secret: the receiver verifies it as a customer would.
    sent_at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC)
    expected = Webhook(job["signingSecret"]).sign(headers["webhook-id"], sent_at, body.decode())
    assert headers["webhook-signature"] == expected
    assert json.loads(body)["id"] == on_queue["id"] and headers["Idempotency-Key"] == f"{on_queue['id']}#n3"
    assert sum(container.metrics.total("NotificationsDelivered", kind=k) for k in targets) == 4
    # The run is DEAD as it was: notifications never write it.
    assert api.get(f"/v1/runs/{run_key}").body["state"] == "DEAD"


def test_the_same_stream_records_again_queue_the_same_notification_ids(api, container, sinks):
    external_job(api, [{"on": ["dead"], "target": sinks["targets"]["sqs"]}])
    fail_for_good(api)
    records = flow_events()
    events_handler.handler({"Records": records}, events_context())  # a retried batch
    ids = [json.loads(m["Body"])["id"] for m in drain(sinks["notifications"])]
    assert len(ids) == 2 and len(set(ids)) == 1 and ids[0].endswith("#n0")


def test_a_tenant_cannot_notify_a_target_it_was_not_granted(api, other_api, sinks):
    for target, field in (
        (sinks["targets"]["sqs"], "notify.0.target.queueUrl"),
        (sinks["targets"]["sns"], "notify.0.target.topicArn"),
        (sinks["targets"]["eventbridge"], "notify.0.target.eventBusName"),
    ):
        refused = other_api.post(
            "/v1/jobs",
            {"name": "x", "type": "ext", "every": 3600, "notify": [{"on": ["dead"], "target": target}]},
        )
        assert refused.status == 403, refused
        assert refused.body["errors"][0]["field"] == field
    job = external_job(api, [{"on": ["dead"], "target": sinks["targets"]["sqs"]}])
    assert other_api.get(f"/v1/jobs/{job['jobId']}").status == 404  # not tenant-b's to see


def test_a_grant_revoked_after_the_job_was_written_refuses_the_delivery_for_good(api, container, sinks):
    external_job(api, [{"on": ["dead"], "target": sinks["targets"]["sqs"]}])
    fail_for_good(api)
    flow_events()
    grant(container, {"tenant-a": ()})
    assert notify_once(sinks) == {"count": 1, "result": {"batchItemFailures": []}}  # not retried
    assert drain(sinks["seen"]["sqs"]) == []
    assert container.metrics.total("NotificationsRefused", kind="sqs") == 1


def test_a_failing_webhook_is_retried_by_the_queue_and_counted(api, container, sinks, hooks):
    external_job(api, [{"on": ["dead"], "target": sinks["targets"]["http"]}])
    run_key = fail_for_good(api)
    flow_events()
    hooks.status = 503
    outcome = notify_once(sinks)
    assert outcome["count"] == 1 and len(outcome["result"]["batchItemFailures"]) == 1
    assert container.metrics.total("NotificationFailures", kind="http") == 1
    assert api.get(f"/v1/runs/{run_key}").body["state"] == "DEAD"


def test_notification_fields_are_checked_and_named(api, sinks):
    cases = [
        ({"on": ["late"], "target": sinks["targets"]["sqs"]}, "notify.0.lateSeconds"),
        ({"on": ["dead"], "lateSeconds": 60, "target": sinks["targets"]["sqs"]}, "notify.0.lateSeconds"),
        ({"on": ["dead", "dead"], "target": sinks["targets"]["sqs"]}, "notify.0.on"),
        ({"on": [], "target": sinks["targets"]["sqs"]}, "notify.0.on"),
        ({"on": ["failed"], "target": sinks["targets"]["sqs"]}, "notify.0.on.0"),
        ({"on": ["dead"], "target": {"kind": "sns", "topicArn": "my-topic"}}, "notify.0.target.sns.topicArn"),
        ({"on": ["dead"], "target": {"kind": "lambda", "functionArn": "f"}}, "notify.0.target.kind"),
    ]
    for notification, field in cases:
        refused = api.post("/v1/jobs", {"name": "x", "type": "ext", "every": 3600, "notify": [notification]})
        assert refused.status == 400, (notification, refused)
        assert field in {e["field"] for e in refused.body["errors"]}, (notification, refused.body)
    too_many = [{"on": ["dead"], "target": sinks["targets"]["sqs"]}] * 6
    refused = api.post("/v1/jobs", {"name": "x", "type": "ext", "every": 3600, "notify": too_many})
    assert refused.status == 400 and refused.body["errors"][0]["field"] == "notify"


def test_a_run_not_started_late_seconds_after_it_was_due_is_told_once(api, container, sinks, clock):
    job = external_job(api, [{"on": ["late"], "lateSeconds": 60, "target": sinks["targets"]["sqs"]}])
    (run_key,) = [r["runKey"] for r in api.get(f"/v1/jobs/{job['jobId']}/runs").body["items"]]
    clock.advance(30)
    assert container.reconciler.reconcile_all().late == 0
    clock.advance(31)
    assert container.reconciler.reconcile_all().late == 1
    clock.advance(120)
    assert container.reconciler.reconcile_all().late == 0  # once per run
    flow_events()
    notify_once(sinks)
    (told,) = [json.loads(m["Body"]) for m in drain(sinks["seen"]["sqs"])]
    assert told["type"] == "jobsched.run.late" and told["id"] == f"{run_key}#late"
    assert told["data"]["state"] == told["data"]["from"] and told["data"]["actor"] == "reconciler"
    # Still claimable: being late changes nothing about the run's course.
    (lease,) = api.post("/v1/leases", {"types": ["ext"], "workerId": "w"}).body["leases"]
    assert lease["runKey"] == run_key
    flow_events()
    assert drain(sinks["notifications"]) == []  # the late start is not told twice


def test_a_first_claim_after_the_late_instant_is_late_when_nothing_noted_it(api, sinks, clock):
    job = external_job(api, [{"on": ["late"], "lateSeconds": 5, "target": sinks["targets"]["sqs"]}])
    (run_key,) = [r["runKey"] for r in api.get(f"/v1/jobs/{job['jobId']}/runs").body["items"]]
    clock.advance(10)
    api.post("/v1/leases", {"types": ["ext"], "workerId": "w"})  # before any reconciler tick
    flow_events()
    notify_once(sinks)
    (told,) = [json.loads(m["Body"]) for m in drain(sinks["seen"]["sqs"])]
    assert told["id"] == f"{run_key}#late" and told["data"]["state"] == "LEASED"


def test_a_run_claimed_in_time_is_never_late(api, container, sinks, clock):
    external_job(api, [{"on": ["late"], "lateSeconds": 60, "target": sinks["targets"]["sqs"]}])
    api.post("/v1/leases", {"types": ["ext"], "workerId": "w"})
    clock.advance(600)
    assert container.reconciler.reconcile_all().late == 0
    flow_events()
    assert drain(sinks["notifications"]) == []


def test_skipped_occurrences_of_a_pause_are_told(api, container, sinks, clock):
    job = external_job(
        api, [{"on": ["skipped"], "target": sinks["targets"]["sqs"]}], every=60, missedRuns="skip"
    )
    job_id = job["jobId"]
    container.sweeper.sweep()
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.advance(300)
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    container.sweeper.sweep()
    flow_events()
    notify_once(sinks)
    told = [json.loads(m["Body"]) for m in drain(sinks["seen"]["sqs"])]
    assert told and {t["type"] for t in told} == {"jobsched.run.skipped"}
    skipped = api.get(f"/v1/jobs/{job_id}/runs", query="limit=100").body["items"]
    assert {t["subject"] for t in told} <= {r["runKey"] for r in skipped if r["state"] == RunState.SKIPPED}


def test_notifications_are_sent_when_no_run_events_are_published(api, container, sinks):
    container.settings = container.settings.model_copy(update={"run_events": RunEventsLevel.NONE})
    quiet = api.post("/v1/jobs", {"name": "quiet", "type": "ext", "every": 3600}).body
    job = external_job(api, [{"on": ["dead"], "target": sinks["targets"]["sqs"]}])
    assert quiet["jobId"] != job["jobId"]
    fail_for_good(api)
    fail_for_good(api)
    records = flow_events(RunEventsLevel.NONE)
    # The filter passes only the runs of jobs with notifications.
    assert {r["dynamodb"]["Keys"]["job_id"]["S"] for r in records} == {job["jobId"]}
    notify_once(sinks)
    assert len(drain(sinks["seen"]["sqs"])) == 1


def test_a_run_with_a_target_is_noted_late_at_its_late_instant_and_still_repaired(
    api, container, sinks, clock
):
    """A run on a queue is looked at first at its due instant plus the publish grace; the entry
    then waits for the late instant (not the 15-minute requeue), and it is still repaired."""
    body = {"name": "queued", "type": "report.build", "every": 3600, "target": sinks["targets"]["sqs"]}
    notify = [{"on": ["late"], "lateSeconds": 120, "target": sinks["targets"]["sqs"]}]
    created = api.post("/v1/jobs", {**body, "notify": notify})
    assert created.status == 201, created
    runs = container.runs.list_for_job(created.body["jobId"], limit=10, cursor=None).items
    assert container.outbox.publish(runs) == []  # QUEUED on its queue, as the outbox does
    drain(sinks["seen"]["sqs"])
    for queue_url in container.settings.queue_urls.values():
        drain(queue_url)  # and the message is lost: nothing claims it
    clock.advance(25)
    assert container.reconciler.reconcile_all().late == 0  # looked at early: not overdue, not late
    clock.advance(100)
    assert container.reconciler.reconcile_all().late == 1
    # The message was lost: it is requeued at the queue dwell from the run's last write (the
    # note, here: a late run's requeue comes up to lateSeconds later than another's).
    clock.advance(780)
    assert container.reconciler.reconcile_all().requeue == 0
    clock.advance(130)
    assert container.reconciler.reconcile_all().requeue == 1


def test_a_notification_webhook_must_carry_the_event(api, sinks):
    target = {**sinks["targets"]["http"], "method": "GET"}
    refused = api.post(
        "/v1/jobs",
        {"name": "x", "type": "ext", "every": 3600, "notify": [{"on": ["dead"], "target": target}]},
    )
    assert refused.status == 400 and refused.body["errors"][0]["field"] == "notify.0.target.method", refused


def test_free_text_sqs_refuses_reaches_the_queue_escaped(api, container, sinks):
    job = external_job(api, [{"on": ["dead"], "target": sinks["targets"]["sqs"]}])
    (lease,) = api.post("/v1/leases", {"types": ["ext"], "workerId": "w"}).body["leases"]
    error = {"class": "Boom", "message": "bad \uffff\ufffe\x01 bytes", "retryable": False}
    api.post(
        f"/v1/leases/{lease['runKey']}/complete",
        {"fence": lease["fence"], "outcome": "failed", "error": error},
    )
    flow_events()
    (queued,) = drain(sinks["notifications"])
    assert queued["Body"].isascii() and json.loads(queued["Body"])["jobId"] == job["jobId"]


def two_tenants_dead_runs(api, other_api, container, sinks) -> tuple[list[dict[str, Any]], str]:
    """tenant-a's run dies, then tenant-b's, each told by a notification (an SQS queue, a
    webhook): their Runs stream records in that order, through the mapping's filter. With an
    events failures queue configured; its URL."""
    failures = boto3.client("sqs").create_queue(QueueName="jobsched-events-failures")["QueueUrl"]
    container.settings = container.settings.model_copy(update={"events_failures_queue_url": failures})
    container.__dict__.pop("record_delivery", None)
    external_job(api, [{"on": ["dead"], "target": sinks["targets"]["sqs"]}])
    external_job(other_api, [{"on": ["dead"], "target": sinks["targets"]["http"]}])
    fail_for_good(api)
    fail_for_good(other_api)
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=RUNS.default_name)["Table"]["LatestStreamArn"]
    shaped = [lambda_stream_record(r, arn, "us-east-1") for r in read_stream(streams, arn, {})]
    records = [r for r in shaped if events_handler.matches_filter(r, RunEventsLevel.FAILURES, RUNS)]
    assert [r["dynamodb"]["NewImage"]["tenant"]["S"] for r in records] == ["tenant-a", "tenant-b"]
    return records, failures


def written_at(record: dict[str, Any], seconds: float = 0) -> Any:
    """The host's clock `seconds` after the record was written (its ApproximateCreationDateTime)."""
    written = datetime.fromtimestamp(record["dynamodb"]["ApproximateCreationDateTime"], UTC)
    return lambda: written + timedelta(seconds=seconds)


def test_a_record_the_bus_refuses_for_good_holds_another_tenants_notice_minutes_not_hours(
    api, other_api, container, sinks, monkeypatch
):
    """tenant-a's dead run's event is refused by the bus on every try; tenant-b's run dies
    just after, in the same lane. Lambda retries from tenant-a's record, and held every
    record behind it for six hours (10,000 retries). Once tenant-a's record is five minutes
    old it is set aside: its events kept, replayable as they are, on the events failures
    queue and counted; its own delivery and tenant-b's are queued."""
    from jobsched.services.record_delivery import SET_ASIDE_AFTER_SECONDS

    records, failures = two_tenants_dead_runs(api, other_api, container, sinks)
    client = container.event_publisher._client
    real = client.put_events

    def put_events(Entries: list[dict[str, Any]]) -> dict[str, Any]:
        mine = [e for e in Entries if json.loads(e["Detail"])["tenant"] != "tenant-a"]
        answers = iter(real(Entries=mine)["Entries"] if mine else [])
        refused = {"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}
        return {
            "Entries": [
                refused if json.loads(e["Detail"])["tenant"] == "tenant-a" else next(answers) for e in Entries
            ]
        }

    container.event_publisher._sleep = lambda seconds: None
    with mock.patch.object(client, "put_events", put_events):
        # A minute old: retried (every record of the batch failed: the invocation fails),
        # and tenant-b's notice waits behind it.
        monkeypatch.setattr(container.record_delivery, "_now", written_at(records[0], 60))
        with pytest.raises(BatchProcessingError, match="All records failed"):
            events_handler.handler({"Records": records}, events_context())
        assert drain(sinks["notifications"]) == []
        # Lambda retries from tenant-a's record, five minutes after it was written.
        monkeypatch.setattr(
            container.record_delivery, "_now", written_at(records[0], SET_ASIDE_AFTER_SECONDS)
        )
        assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    queued = [json.loads(m["Body"]) for m in drain(sinks["notifications"])]
    assert sorted(m["tenant"] for m in queued) == ["tenant-a", "tenant-b"]
    (kept,) = drain(failures)
    body = json.loads(kept["Body"])
    assert body["setAside"]["sequenceNumber"] == records[0]["dynamodb"]["SequenceNumber"]
    assert body["setAside"]["stream"] == records[0]["eventSourceARN"]
    assert "sendMessageBatch" not in body  # its delivery went: only its events are kept
    (request,) = body["putEvents"]
    (entry,) = request["Entries"]
    detail = json.loads(entry["Detail"])
    assert detail["type"] == "jobsched.run.dead" and detail["tenant"] == "tenant-a"
    assert container.metrics.total("EventRecordsSetAside") == 1
    # Replayed as it is, once the bus takes it.
    assert boto3.client("events").put_events(**request)["FailedEntryCount"] == 0


def test_a_delivery_the_queue_refuses_for_good_is_set_aside_and_the_next_tenants_queued(
    api, other_api, container, sinks, monkeypatch
):
    """The notifications queue refuses tenant-a's delivery on every try (not as the sender's
    fault): five minutes on, the delivery is kept to be sent again as it is, and tenant-b's
    delivery, which went in the same call, is not queued a second time; each run's event
    went to the bus once."""
    from jobsched.services.record_delivery import SET_ASIDE_AFTER_SECONDS

    records, failures = two_tenants_dead_runs(api, other_api, container, sinks)
    queue = container.notification_queue
    real = queue._client.send_message_batch

    def send_message_batch(QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        theirs = [e for e in Entries if json.loads(e["MessageBody"])["tenant"] == "tenant-a"]
        taken = (
            real(QueueUrl=QueueUrl, Entries=[e for e in Entries if e not in theirs])
            if len(theirs) < len(Entries)
            else {}
        )
        refused = [{"Id": e["Id"], "SenderFault": False, "Code": "InternalError"} for e in theirs]
        return {"Successful": taken.get("Successful", []), "Failed": refused}

    queue._sleep = lambda seconds: None
    monkeypatch.setattr(queue._client, "send_message_batch", send_message_batch)
    monkeypatch.setattr(container.record_delivery, "_now", written_at(records[0], SET_ASIDE_AFTER_SECONDS))
    assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    monkeypatch.undo()
    assert [json.loads(m["Body"])["tenant"] for m in drain(sinks["notifications"])] == ["tenant-b"]
    assert container.metrics.total("EventsPublished") == 2
    (kept,) = drain(failures)
    body = json.loads(kept["Body"])
    assert "putEvents" not in body and body["setAside"]["reason"] == "deliveries not queued"
    (request,) = body["sendMessageBatch"]
    assert request["QueueUrl"] == sinks["notifications"]
    assert boto3.client("sqs").send_message_batch(**request).get("Failed", []) == []
    assert [json.loads(m["Body"])["tenant"] for m in drain(sinks["notifications"])] == ["tenant-a"]


def padded_webhook(url: str, chars: int) -> dict[str, Any]:
    """A webhook target with 12 headers of `chars` Latin-1 characters each: 2 bytes apiece in
    the job, 6 (`\\u00e9`) in a delivery message."""
    return {"kind": "http", "url": url, "headers": {f"X-Pad-{i}": "\xe9" * chars for i in range(12)}}


def written_before_the_rule(api, notify: list[dict[str, Any]], monkeypatch, *, type: str, count: int) -> None:
    """`count` jobs written before job writes refused targets too large for a delivery message."""
    from jobsched.domain import models

    with monkeypatch.context() as before:
        before.setattr(models, "MAX_NOTIFY_TARGET_BYTES", 10**7, raising=False)
        for _ in range(count):
            external_job(api, notify, type=type)


def dead_runs_in_order(
    api, other_api, container, first: tuple[str, int], then_b: str
) -> list[dict[str, Any]]:
    """`first` = (type, count) of tenant-a's runs to kill, then tenant-b's run of `then_b`:
    their Runs stream records in that order, through the mapping's filter."""
    kind, count = first
    for _ in range(count):
        fail_for_good(api, (kind,))
    fail_for_good(other_api, (then_b,))
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=RUNS.default_name)["Table"]["LatestStreamArn"]
    shaped = [lambda_stream_record(r, arn, "us-east-1") for r in read_stream(streams, arn, {})]
    records = [r for r in shaped if events_handler.matches_filter(r, RunEventsLevel.FAILURES, RUNS)]
    assert [r["dynamodb"]["NewImage"]["tenant"]["S"] for r in records] == ["tenant-a"] * count + ["tenant-b"]
    return records


def queues_of_256_kib(container, sinks) -> str:
    """The notifications queue and an events failures queue at AWS's default size (256 KiB);
    the latter's URL."""
    sqs = boto3.client("sqs")
    sqs.set_queue_attributes(
        QueueUrl=sinks["notifications"], Attributes={"MaximumMessageSize": str(256 * 1024)}
    )
    failures = sqs.create_queue(
        QueueName="jobsched-events-failures", Attributes={"MaximumMessageSize": str(256 * 1024)}
    )["QueueUrl"]
    container.settings = container.settings.model_copy(update={"events_failures_queue_url": failures})
    container.__dict__.pop("record_delivery", None)
    container.notification_queue._sleep = lambda seconds: None
    return failures


def test_a_delivery_too_large_for_the_queue_is_left_out_and_never_holds_another_tenant(
    api, other_api, container, sinks, hooks, monkeypatch
):
    """tenant-a's jobs (written before the rule) notify a webhook whose headers make each
    delivery ~288 KB once escaped: over the queue's 256 KiB. Four of its runs die, then
    tenant-b's. Before, the call carrying them was refused whole (`BatchRequestTooLong`) and
    taken as a passing failure: every record was held, and five minutes on tenant-a's (then
    tenant-b's) was set aside; with 256 KiB queues, not even that. Now tenant-a's deliveries
    are left out (counted, logged with the tenant, job and run) on the first pass and
    tenant-b's is queued: nothing held, nothing set aside."""
    failures = queues_of_256_kib(container, sinks)
    written_before_the_rule(
        api, [{"on": ["dead"], "target": padded_webhook(hooks.url, 4000)}], monkeypatch, type="pad", count=4
    )
    external_job(other_api, [{"on": ["dead"], "target": sinks["targets"]["http"]}], type="vict")
    records = dead_runs_in_order(api, other_api, container, ("pad", 4), "vict")
    monkeypatch.setattr(container.record_delivery, "_now", written_at(records[0], 60))
    with mock.patch("jobsched.services.notifications.logger") as log:
        assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    assert [json.loads(m["Body"])["tenant"] for m in drain(sinks["notifications"])] == ["tenant-b"]
    assert drain(failures) == []
    assert container.metrics.total("NotificationsRejected") == 4
    assert container.metrics.total("EventRecordsSetAside") == 0
    left_out = [c.kwargs["extra"] for c in log.error.call_args_list]
    assert {(e["tenant"], e["error_code"]) for e in left_out} == {("tenant-a", "TooLarge")}
    assert all(e["run_key"] and e["job_id"] for e in left_out)


def test_deliveries_are_sent_in_calls_the_queue_takes_and_a_call_refused_for_size_one_by_one(
    api, other_api, container, sinks, hooks, monkeypatch
):
    """tenant-a's four deliveries take ~100 KB each, tenant-b's a few: each call holds at most
    256 KiB (SendMessageBatch's limit), and every delivery is queued. On a queue that takes
    less (64 KiB) a call is refused whole (`InvalidParameterValue`): it goes again one entry
    a call, tenant-a's are left out for good and tenant-b's is queued."""
    queues_of_256_kib(container, sinks)
    for _ in range(4):
        external_job(api, [{"on": ["dead"], "target": padded_webhook(hooks.url, 1400)}], type="pad")
    external_job(other_api, [{"on": ["dead"], "target": sinks["targets"]["http"]}], type="vict")
    records = dead_runs_in_order(api, other_api, container, ("pad", 4), "vict")
    client = container.notification_queue._client
    real = client.send_message_batch
    calls: list[int] = []

    def send_message_batch(QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        calls.append(sum(len(e["MessageBody"].encode()) for e in Entries))
        return real(QueueUrl=QueueUrl, Entries=Entries)

    monkeypatch.setattr(client, "send_message_batch", send_message_batch)
    assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    assert len(calls) > 1 and all(size <= 256 * 1024 for size in calls)
    assert sorted(json.loads(m["Body"])["tenant"] for m in drain(sinks["notifications"])) == [
        "tenant-a"
    ] * 4 + ["tenant-b"]
    boto3.client("sqs").set_queue_attributes(
        QueueUrl=sinks["notifications"], Attributes={"MaximumMessageSize": str(64 * 1024)}
    )
    assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    assert [json.loads(m["Body"])["tenant"] for m in drain(sinks["notifications"])] == ["tenant-b"]
    assert container.metrics.total("NotificationsRejected") == 4


@pytest.mark.parametrize(("deliveries", "failures_kib"), [(2, 256), (1, 64)])
def test_a_record_too_large_to_set_aside_is_kept_as_a_pointer(
    api, other_api, container, sinks, hooks, monkeypatch, deliveries, failures_kib
):
    """tenant-a's run has deliveries of ~150 KB each, which the notifications queue refuses
    (not as the sender's fault) on every try. Five minutes on the record is set aside, but
    its requests exceed the failures queue (two of them over 256 KiB; one on a queue set to
    64 KiB, which refuses it): before, the set aside failed and the record held tenant-b's
    notice behind it for six hours. Now a pointer to the record (table, keys, sequence
    number, the ids) is kept and tenant-b's is queued."""
    from jobsched.services.record_delivery import SET_ASIDE_AFTER_SECONDS

    failures = queues_of_256_kib(container, sinks)
    boto3.client("sqs").set_queue_attributes(
        QueueUrl=failures, Attributes={"MaximumMessageSize": str(failures_kib * 1024)}
    )
    target = padded_webhook(hooks.url, 2000)
    external_job(api, [{"on": ["dead"], "target": target}] * deliveries, type="pad")
    external_job(other_api, [{"on": ["dead"], "target": sinks["targets"]["http"]}], type="vict")
    records = dead_runs_in_order(api, other_api, container, ("pad", 1), "vict")
    client = container.notification_queue._client
    real = client.send_message_batch

    def send_message_batch(QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        theirs = [e for e in Entries if json.loads(e["MessageBody"])["tenant"] == "tenant-a"]
        mine = [e for e in Entries if e not in theirs]
        taken = real(QueueUrl=QueueUrl, Entries=mine) if mine else {}
        refused = [{"Id": e["Id"], "SenderFault": False, "Code": "InternalError"} for e in theirs]
        return {"Successful": taken.get("Successful", []), "Failed": refused}

    monkeypatch.setattr(client, "send_message_batch", send_message_batch)
    monkeypatch.setattr(container.record_delivery, "_now", written_at(records[0], SET_ASIDE_AFTER_SECONDS))
    assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    assert [json.loads(m["Body"])["tenant"] for m in drain(sinks["notifications"])] == ["tenant-b"]
    (kept,) = drain(failures)
    body = json.loads(kept["Body"])
    assert "sendMessageBatch" not in body and body["setAside"]["pointerOnly"] is True
    assert body["setAside"]["sequenceNumber"] == records[0]["dynamodb"]["SequenceNumber"]
    assert body["setAside"]["table"] == RUNS.default_name and body["setAside"]["keys"]
    assert len(body["notificationIds"]) == deliveries and len(kept["Body"]) < 4096


def test_a_notification_target_too_large_for_a_delivery_is_refused_at_write(api, sinks, hooks):
    """Twelve headers of 4,000 Latin-1 characters fit the job's 100 KB (2 bytes each) but not
    a delivery message (6 bytes each, escaped): create, batch create and PATCH answer 400
    naming the target and the rule."""
    notify = [{"on": ["dead"], "target": padded_webhook(hooks.url, 4000)}]
    job = {"name": "x", "type": "ext", "every": 3600}
    created = external_job(api, [])
    answers = [
        api.post("/v1/jobs", {**job, "notify": notify}),
        api.patch(f"/v1/jobs/{created['jobId']}", {"notify": notify}, headers={"If-Match": '"1"'}),
    ]
    batch = api.post("/v1/jobs/batch", {"jobs": [{**job, "notify": notify}]})
    (item,) = batch.body["items"]
    for status, errors in [(a.status, a.body["errors"]) for a in answers] + [
        (item["status"], item["error"]["errors"])
    ]:
        assert status == 400, errors
        (error,) = [e for e in errors if e["field"] == "notify.0.target"]
        assert "bytes in a delivery message" in error["rule"] and "at most" in error["rule"], error
