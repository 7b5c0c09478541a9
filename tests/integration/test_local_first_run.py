"""A run whose message is visible at once (the first run of a new `every` job, due the
instant it is made) is not lost to the outbox's own QUEUED write.

Local mode's glue drives the real handlers here as it does in `jobsched local`: the stream
source hands the Runs stream to the outbox, the queue source hands the queue to the worker.
The AWS calls are held at the boto3 boundary so that a worker reads the run as soon as its
message is on the queue, and claims it only once the outbox is done: what a loaded machine
(a second local-mode instance, other jobs) made happen once in ~150 runs, when the outbox
sent the message first and marked the run QUEUED after: the worker read the run PENDING,
its claim at that rev lost to the mark, it took the run for someone else's and deleted the
message; the run then sat QUEUED with no message until the reconciler's 15 minutes."""

from __future__ import annotations

import json
import threading
from typing import Any

import boto3
from jobsched import aws as clients
from jobsched.domain.runs import RunState
from jobsched.handlers import outbox as outbox_handler
from jobsched.handlers import worker as worker_handler
from jobsched.store.runs import RUN_PREFIX
from jobsched.store.schema import RUNS
from jobsched_local.glue import Invoker, QueueSource, StreamSource

SAFETY = 10.0  # seconds any one wait may take (never reached when the order holds)


class HeldCalls:
    """Holds AWS calls of the handlers (through botocore's event hooks on the clients they
    share) in one order: the outbox's send, then the worker's read of the run, then the
    outbox's return, then the worker's claim."""

    def __init__(self) -> None:
        self.sent = threading.Event()
        self.worker_read = threading.Event()
        self.outbox_done = threading.Event()
        self.read_states: list[str] = []
        sqs, ddb = clients.client("sqs"), clients.client("dynamodb")
        self._hooks = [
            (sqs, "after-call.sqs.SendMessageBatch", self._after_send),
            (ddb, "after-call.dynamodb.GetItem", self._after_read),
            (ddb, "before-call.dynamodb.PutItem", self._before_put),
        ]
        for client, event, hook in self._hooks:
            client.meta.events.register(event, hook)

    def remove(self) -> None:
        for client, event, hook in self._hooks:
            client.meta.events.unregister(event, hook)

    def _after_send(self, **_: Any) -> None:
        self.sent.set()
        self.worker_read.wait(SAFETY)  # the outbox goes on only once the worker has read

    def _after_read(self, parsed: dict[str, Any], **_: Any) -> None:
        item = parsed.get("Item") or {}
        if self.sent.is_set() and item.get("sk", {}).get("S", "").startswith(RUN_PREFIX):
            self.read_states.append(item["state"]["S"])
            self.worker_read.set()

    def _before_put(self, params: dict[str, Any], **_: Any) -> None:
        item = json.loads(params["body"]).get("Item", {})
        if item.get("state", {}).get("S") == RunState.LEASED.value:
            self.outbox_done.wait(SAFETY)  # the claim lands after the outbox's last write


def test_the_first_run_of_an_every_job_is_claimed_from_the_message_it_was_queued_with(
    api, container, clock, aws
):
    import jobsched.demo_handlers  # noqa: F401  (registers demo.hello, as local mode does)

    stream_arn = boto3.client("dynamodb").describe_table(TableName=RUNS.default_name)["Table"][
        "LatestStreamArn"
    ]
    streams = StreamSource(
        boto3.client("dynamodbstreams"),
        stream_arn,
        Invoker("outbox", outbox_handler.handler),
        region="us-east-1",
        matches=outbox_handler.matches_filter,
    )
    sqs = boto3.client("sqs")
    url = aws["urls"]["default"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue = QueueSource(
        sqs, url, arn, Invoker("worker", worker_handler.handler, concurrent=True), region="us-east-1"
    )

    created = api.post("/v1/jobs", {"name": "flaky-every-5s", "type": "demo.hello", "every": 5})
    assert created.status == 201, created
    made = container.runs.list_for_job(created.body["jobId"], limit=100, cursor=None).items
    first = min(made, key=lambda run: run.scheduled_for)
    assert first.state is RunState.PENDING and first.due_at == clock.now()  # its delay is 0

    held = HeldCalls()
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            assert streams.poll() >= 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            held.outbox_done.set()

    outbox_thread = threading.Thread(target=publish, daemon=True)
    try:
        outbox_thread.start()
        assert held.sent.wait(SAFETY), "the outbox sent nothing"
        assert queue.poll() == 1  # one invocation, inline: received, run, settled
        outbox_thread.join(SAFETY)
    finally:
        held.remove()
    assert not errors, errors

    after = container.runs.get_by_key(first.run_key)
    assert after is not None
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    visible = attributes["ApproximateNumberOfMessages"]
    in_flight = attributes["ApproximateNumberOfMessagesNotVisible"]
    # Not QUEUED with its message gone: claimed and run from that message, which is deleted.
    assert (after.state, visible, in_flight) == (RunState.SUCCEEDED, "0", "0"), [
        (h.actor, h.target.value) for h in after.history
    ]
    assert held.read_states[:1] == [RunState.QUEUED.value]  # the worker read it as the outbox left it
