"""A worker invocation's batch: records run at once, each with its full budget; partial
failures stay exact; deferrals leave their message in the queue instead of re-sending it,
and never push it into the DLQ."""

from __future__ import annotations

import itertools
import json
import sys
import threading
from datetime import timedelta
from typing import Any

import boto3
import pytest
from jobsched.handlers import worker as worker_handler
from jobsched.services.attempt import AttemptOutcome
from jobsched.store.queues import RunMessage
from jobsched.store.schema import QUEUES
from jobsched.targets import HandlerRegistry
from jobsched_local.glue import Invoker, QueueSource
from jobsched_local.lambda_context import InvocationContext

from tests.helpers import claimed, make_worker
from tests.integration.test_worker import delivery, one_run, queue_messages, sqs_record, stored

FUNCTION_TIMEOUT = 300
DEFAULT = next(q for q in QUEUES if q.key == "default")


class SteppedContext(InvocationContext):
    """A Lambda context whose clock moves only when a test says so."""

    elapsed = 0.0

    def get_remaining_time_in_millis(self) -> int:
        return int((self.timeout_seconds - self.elapsed) * 1000)


def invoke(event: dict[str, Any], context: InvocationContext | None = None) -> Any:
    context = context or InvocationContext(function_name="jobsched-worker", timeout_seconds=FUNCTION_TIMEOUT)
    return worker_handler.handler(event, context)


def test_one_slow_record_leaves_every_other_record_its_full_budget(container, clock):
    """Sequentially, the slow record (first in the batch) would use 280 of the invocation's
    300 s and leave each fast record 15 s of its 60."""
    context = SteppedContext(function_name="jobsched-worker", timeout_seconds=FUNCTION_TIMEOUT)
    fast_count = 6
    budgets: dict[str, float] = {}
    fast_done = threading.Semaphore(0)
    registry = HandlerRegistry()

    @registry.register("slow")
    def slow(payload, invocation):
        budgets[invocation.run_key] = invocation.timeout_seconds
        # Takes 280 s of the invocation, after the fast records have had their turn (a
        # sequential batch never gets them going: the wait gives up and the time passes).
        for _ in range(fast_count):
            fast_done.acquire(timeout=5)
        context.elapsed += 280
        return "slow"

    @registry.register("fast")
    def fast(payload, invocation):
        budgets[invocation.run_key] = invocation.timeout_seconds
        fast_done.release()
        return "fast"

    container.__dict__["worker"] = make_worker(container, registry)
    _, slow_run = one_run(container, clock, job_type="slow", name="slow", timeoutSeconds=290)
    fast_runs = [
        one_run(container, clock, job_type="fast", name=f"fast{i}", timeoutSeconds=60)[1]
        for i in range(fast_count)
    ]
    records = [sqs_record(r, f"m{i}") for i, r in enumerate([slow_run, *fast_runs])]

    assert invoke({"Records": records}, context) == {"batchItemFailures": []}
    assert {budgets[r.run_key] for r in fast_runs} == {60}
    assert budgets[slow_run.run_key] == 290
    assert {stored(container, r).state.value for r in [slow_run, *fast_runs]} == {"SUCCEEDED"}


def test_partial_failures_name_exactly_the_failed_and_the_deferred_records(container, clock, monkeypatch):
    registry = HandlerRegistry()
    registry.register("ok")(lambda payload, invocation: "ok")
    container.__dict__["worker"] = make_worker(container, registry)
    good = [one_run(container, clock, name=f"good{i}")[1] for i in range(5)]
    broken = [one_run(container, clock, name=f"broken{i}")[1] for i in range(2)]
    _, early = one_run(container, clock, name="early", runAt="2026-11-02T08:00:30Z")
    real_get = container.runs.get
    broken_jobs = {r.job_id for r in broken}

    def flaky_get(job_id, scheduled_for):
        if job_id in broken_jobs:
            raise ConnectionError("store unreachable")
        return real_get(job_id, scheduled_for)

    monkeypatch.setattr(container.runs, "get", flaky_get)
    early_record = received_record(container, early, "m-early")
    records = [
        sqs_record(good[0], "g0"),
        sqs_record(broken[0], "b0"),
        sqs_record(good[1], "g1"),
        early_record,
        sqs_record(good[2], "g2"),
        sqs_record(broken[1], "b1"),
        sqs_record(good[3], "g3"),
        sqs_record(good[4], "g4"),
    ]
    response = invoke({"Records": records})
    failed = sorted(f["itemIdentifier"] for f in response["batchItemFailures"])
    assert failed == ["b0", "b1", "m-early"]
    monkeypatch.undo()
    assert {stored(container, r).state.value for r in good} == {"SUCCEEDED"}
    assert {stored(container, r).state.value for r in broken} == {"PENDING"}


def test_a_batch_of_deferrals_is_not_a_failed_invocation(container, clock):
    container.__dict__["worker"] = make_worker(container, HandlerRegistry())
    _, early = one_run(container, clock, runAt="2026-11-02T08:00:30Z")
    response = invoke({"Records": [received_record(container, early, "m-early")]})
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-early"}]}


def received_record(container, run, message_id: str) -> dict[str, Any]:
    """`run`'s message as Lambda would hand it over: really received, with its receipt handle."""
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    sqs.send_message(QueueUrl=url, MessageBody=RunMessage.of(run).to_json())
    (message,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"])["Messages"]
    record = sqs_record(run, message_id)
    record["receiptHandle"] = message["ReceiptHandle"]
    record["attributes"] = message["Attributes"]
    return record


def in_flight(container, queue="default") -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=container.queues.urls[queue], AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessagesNotVisible"])


def buffered_run(container, clock):
    """A buffer-one job's second run, waiting behind its first, which a live worker holds."""
    from jobsched.api_models.requests import JobBody

    spec = JobBody.model_validate({"name": "n", "type": "ok", "every": 60, "overlap": "buffer-one"}).to_spec()
    job = container.jobs.create("tenant-a", spec).job
    first, second, *_ = sorted(
        container.runs.list_for_job(job.job_id, limit=10, cursor=None).items, key=lambda r: r.scheduled_for
    )
    container.runs.commit(first, lambda _: claimed(first, at=clock.now(), lease_for=3600, owner="x"))
    clock.set(second.due_at)
    return second


@pytest.mark.parametrize("receives", [1, DEFAULT.deferral_receives])
def test_a_short_deferral_leaves_the_message_in_the_queue(container, clock, receives):
    worker = make_worker(container, HandlerRegistry())
    run = buffered_run(container, clock)
    record = received_record(container, run, "m")
    d = delivery(run)
    d = type(d)(**{**d.__dict__, "receipt_handle": record["receiptHandle"], "receive_count": receives})
    result = worker.process(d)
    assert result.outcome is AttemptOutcome.DEFERRED and result.error_class == "buffered"
    assert result.redeliver  # not acknowledged: it comes back after the delay
    assert queue_messages(container, "default") == 0  # nothing was sent
    assert in_flight(container) == 1


def test_past_its_spare_receives_a_deferral_hands_the_run_to_the_outbox(container, clock):
    worker = make_worker(container, HandlerRegistry())
    run = buffered_run(container, clock)
    record = received_record(container, run, "m")
    d = delivery(run)
    d = type(d)(
        **{
            **d.__dict__,
            "receipt_handle": record["receiptHandle"],
            "receive_count": DEFAULT.deferral_receives + 1,
        }
    )
    result = worker.process(d)
    assert result.outcome is AttemptOutcome.DEFERRED and not result.redeliver  # acknowledged
    # The worker sends nothing (Lambda's recursive-loop guard would cut a worker -> SQS ->
    # worker chain): the run is PENDING again, for the outbox to publish after the wait.
    assert queue_messages(container, "default") == 0
    deferred = stored(container, run)
    assert deferred.state.value == "PENDING" and deferred.deferred_until == clock.now() + timedelta(seconds=5)


def test_a_long_wait_hands_the_run_to_the_outbox(container, clock):
    worker = make_worker(container, HandlerRegistry())
    _, run = one_run(container, clock, runAt="2026-11-02T08:01:30Z")  # 90 s away
    record = received_record(container, run, "m")
    d = delivery(run)
    d = type(d)(**{**d.__dict__, "receipt_handle": record["receiptHandle"]})
    result = worker.process(d)
    assert result.error_class == "not_due" and not result.redeliver
    assert queue_messages(container, "default") == 0
    assert stored(container, run).deferred_until == clock.now() + timedelta(seconds=90)


def test_a_run_deferred_for_minutes_never_reaches_the_dlq(container, clock, monkeypatch):
    """Through local mode's SQS event source (the glue Lambda's poller plays) and the worker
    handler, on a simulated clock: a buffered run is deferred every 5 s for 10 minutes. Its
    message never reaches the DLQ, the worker itself sends nothing, and the outbox (fed each
    write of the run, as the stream feeds it) publishes it again once per
    deferral_receives + 1 deferrals."""
    from chaos.faults import sqs_on_clock

    container.__dict__["worker"] = make_worker(container, HandlerRegistry())
    run = buffered_run(container, clock)
    container.queues.publish("default", [(run, 0)])
    sent: list[str] = []
    publish = container.queues.publish

    def counting(queue, items):
        sent.extend(r.run_key for r, _ in items)
        return publish(queue, items)

    monkeypatch.setattr(container.queues, "publish", counting)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    invoker = Invoker("worker", worker_handler.handler, timeout_seconds=FUNCTION_TIMEOUT, concurrent=True)
    source = QueueSource(sqs, url, arn, invoker, region="us-east-1")
    from jobsched.services.outbox import Outbox

    outbox = Outbox(container.runs, container.queues, clock, lambda _run: "default")
    deliveries = 0
    seen_rev = stored(container, run).rev
    with sqs_on_clock(clock):
        for _ in range(120):
            deliveries += source.poll()
            now = stored(container, run)
            if now.rev != seen_rev:  # a write: the stream hands it to the outbox
                seen_rev = now.rev
                outbox.publish([now])
            clock.advance(6)
    assert deliveries >= 90  # deferred every ~6 s
    assert queue_messages(container, "default", dlq=True) == 0
    assert stored(container, run).state.value in ("PENDING", "QUEUED")
    assert queue_messages(container, "default") + in_flight(container) == 1  # one message for it
    assert 1 <= len(sent) <= deliveries // (DEFAULT.deferral_receives + 1) + 1


def deployed_visibility(container, queue: str = "default") -> int:
    """Give `queue` the visibility timeout the stack deploys (six worker timeouts), not local
    mode's: what a failed record would wait out without its backoff."""
    from jobsched.cdk.dead_letters import visibility_timeout

    seconds = visibility_timeout(next(q for q in QUEUES if q.key == queue))
    boto3.client("sqs").set_queue_attributes(
        QueueUrl=container.queues.urls[queue], Attributes={"VisibilityTimeout": str(seconds)}
    )
    return seconds


def worker_source(container) -> QueueSource:
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    invoker = Invoker("worker", worker_handler.handler, timeout_seconds=FUNCTION_TIMEOUT)
    return QueueSource(sqs, url, arn, invoker, region="us-east-1")


def test_a_record_that_keeps_failing_reaches_the_dlq_within_15_minutes(container, clock, monkeypatch):
    """Through local mode's SQS event source and the worker handler on a simulated clock, with
    the deployed 5,400 s visibility timeout: the store fails before the claim on every delivery
    (an unexpected error, not a deferral). Each failure sets the message's visibility to the
    jittered backoff, so the message spends all maxReceiveCount receives and reaches the DLQ
    inside 15 minutes (without the backoff it would come back once, after 90 minutes), and
    every failure is counted as RecordFailed."""
    from chaos.faults import sqs_on_clock

    container.__dict__["worker"] = make_worker(container, HandlerRegistry())
    _, run = one_run(container, clock)
    assert deployed_visibility(container) == 5400

    def throttled(run_key):
        raise ConnectionError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(container.runs, "get_by_key", throttled)
    source = worker_source(container)
    started = clock.now()
    deliveries = 0
    with sqs_on_clock(clock):
        container.queues.publish("default", [(run, 0)])
        while queue_messages(container, "default", dlq=True) == 0 and clock.now() - started < timedelta(
            minutes=15
        ):
            deliveries += source.poll()
            clock.advance(5)
    assert queue_messages(container, "default", dlq=True) == 1
    assert clock.now() - started <= timedelta(minutes=15)
    assert deliveries == DEFAULT.max_receive_count
    assert container.metrics.total("RecordFailed") == DEFAULT.max_receive_count


def cannot_load(monkeypatch) -> None:
    """The worker's code fails to import (a bad deploy: a module or a layer package broken)."""
    from jobsched.handlers import worker_entry

    monkeypatch.setitem(sys.modules, worker_entry.WORKER_HANDLER, None)


def cannot_build(monkeypatch) -> None:
    """The worker's code loads, but its services cannot be built (a setting that does not parse)."""

    def broken():
        raise RuntimeError("InvalidSettings: SHARD_COUNT")

    monkeypatch.setattr(worker_handler, "container", broken)


@pytest.mark.parametrize("fault", [cannot_load, cannot_build], ids=["import", "services"])
def test_a_worker_that_cannot_start_dead_letters_its_message_in_minutes(
    container, clock, monkeypatch, capsys, fault
):
    """Through local mode's SQS event source and the function's deployed entry point, with the
    deployed 5,400 s visibility timeout: every invocation fails before the worker starts. A
    failure there changed no visibility, so each receive waited the whole timeout: ten
    receives, 15 hours to the DLQ. The entry point holds the batch for 30 s first: each
    receive comes back within that, the message reaches the DLQ inside 15 minutes after its
    maxReceiveCount receives, and every failure is counted for the worker-cannot-start alarm."""
    from jobsched.cdk.dead_letters import DEAD_LETTER_WITHIN_SECONDS
    from jobsched.handlers import worker_entry

    from chaos.faults import sqs_on_clock

    _, run = one_run(container, clock)
    assert deployed_visibility(container) == 5400
    fault(monkeypatch)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    invoker = Invoker("worker", worker_entry.handler, timeout_seconds=FUNCTION_TIMEOUT)
    source = QueueSource(sqs, url, arn, invoker, region="us-east-1")
    started = clock.now()
    receives = []
    with sqs_on_clock(clock):
        container.queues.publish("default", [(run, 0)])
        while queue_messages(container, "default", dlq=True) == 0 and clock.now() - started < timedelta(
            seconds=DEAD_LETTER_WITHIN_SECONDS
        ):
            if source.poll():
                receives.append(clock.now())
            clock.advance(5)
    assert queue_messages(container, "default", dlq=True) == 1
    assert len(receives) == DEFAULT.max_receive_count == invoker.errors
    waits = [later - earlier for earlier, later in itertools.pairwise(receives)]
    assert max(waits) <= timedelta(seconds=worker_entry.START_HOLD_SECONDS + 5), waits
    assert clock.now() - started <= timedelta(seconds=DEAD_LETTER_WITHIN_SECONDS)
    printed = capsys.readouterr().out.splitlines()
    counted = [json.loads(line) for line in printed if "WorkerStartFailed" in line]
    assert len(counted) == DEFAULT.max_receive_count
    assert counted[0]["_aws"]["CloudWatchMetrics"] == [
        {
            "Namespace": "jobsched",
            "Dimensions": [["service"]],
            "Metrics": [{"Name": "WorkerStartFailed", "Unit": "Count"}],
        }
    ]
    assert counted[0]["service"] and counted[0]["WorkerStartFailed"] == 1


def test_a_batch_whose_records_all_failed_is_not_a_worker_that_cannot_start(container, clock, monkeypatch):
    """Every record of the batch ran and failed (the batch processor's error): each record
    already backed off, and the worker did start."""
    from jobsched.handlers import worker_entry

    container.__dict__["worker"] = make_worker(container, HandlerRegistry())
    _, run = one_run(container, clock)

    def throttled(run_key):
        raise ConnectionError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(container.runs, "get_by_key", throttled)
    counted: list[str] = []
    monkeypatch.setattr(worker_entry, "start_failed", counted.append)
    container.queues.publish("default", [(run, 0)])
    source = worker_source(container)
    source._invoke = Invoker("worker", worker_entry.handler, timeout_seconds=FUNCTION_TIMEOUT)
    assert source.poll() == 1
    assert source._invoke.errors == 1 and counted == []
    assert container.metrics.total("RecordFailed") == 1


def test_a_throttled_batch_still_waits_out_six_worker_timeouts(container, clock):
    """The backoff is the handler's own, for the records it failed: a batch the poller received
    but Lambda could not hand to the function (throttled) is left to the queue's visibility
    timeout, six worker timeouts, so Lambda's own retries of it come first."""
    from chaos.faults import sqs_on_clock

    _, run = one_run(container, clock)
    visibility = deployed_visibility(container)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    with sqs_on_clock(clock):
        container.queues.publish("default", [(run, 0)])
        (received,) = sqs.receive_message(QueueUrl=url)["Messages"]  # the poller; never invoked
        clock.advance(visibility - 1)
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
        clock.advance(2)
        (again,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"])["Messages"]
    assert again["MessageId"] == received["MessageId"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert queue_messages(container, "default", dlq=True) == 0


class Killed(BaseException):
    """The invocation dies where it is (out of memory, the runtime gone): nothing is caught."""


def test_an_invocation_that_dies_before_its_claim_is_redelivered_within_a_minute(
    container, clock, monkeypatch
):
    """With the deployed 5,400 s visibility timeout, a message whose invocation died before its
    claim (and before any heartbeat) waited an hour and a half, or the reconciler's 15-minute
    dwell, to run again. The handler holds every message of its batch for the lease (plus 5 s)
    first: it comes back within about a minute."""
    from jobsched.services.worker import MESSAGE_AFTER_LEASE

    from chaos.faults import sqs_on_clock

    container.__dict__["worker"] = make_worker(container, HandlerRegistry())
    _, run = one_run(container, clock)
    deployed_visibility(container)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    def dies(record, **_):
        raise Killed()

    monkeypatch.setattr(worker_handler, "process_record", dies)
    with sqs_on_clock(clock):
        container.queues.publish("default", [(run, 0)])
        (message,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"])["Messages"]
        record = {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message["Attributes"],
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "eventSourceARN": arn,
            "awsRegion": "us-east-1",
        }
        with pytest.raises(Killed):
            invoke({"Records": [record]})
        held = container.worker.lease_seconds + MESSAGE_AFTER_LEASE
        clock.advance(held - 1)
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
        clock.advance(2)
        (again,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert again["MessageId"] == message["MessageId"]
