"""The outbox on moto: delays, queues, the QUEUED transition, failures and the stream handler."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError
from jobsched.domain.instants import epoch_seconds, format_instant
from jobsched.domain.lifecycle import touch
from jobsched.domain.models import HttpTarget, Priority
from jobsched.domain.runs import LATE_REASON, Run, RunState, created
from jobsched.services.outbox import Outbox, priority_router
from jobsched.store.queues import RunQueues
from jobsched.store.runs import RunStore

from tests.helpers import claimed

if TYPE_CHECKING:  # the stubs are a dev dependency the 3.13 lane does not install
    from mypy_boto3_sqs.type_defs import MessageTypeDef

TARGET = HttpTarget(kind="http", url="https://hooks.example.com/run")


def make_run(
    clock,
    *,
    job_id: str = "j_outbox1",
    due_in: float = 0,
    state: RunState = RunState.PENDING,
    priority: Priority = Priority.DEFAULT,
    tenant: str = "tenant-a",
    **fields: Any,
) -> Run:
    now = clock.now()
    scheduled = now + timedelta(seconds=due_in)
    run = Run(
        run_key=f"{job_id}@{format_instant(scheduled)}",
        job_id=job_id,
        tenant=tenant,
        job_type="report.build",
        scheduled_for=scheduled,
        due_at=scheduled,
        state=state,
        definition_version=1,
        priority=priority,
        target=TARGET,
        payload={"n": 1},
        created_at=now,
        updated_at=now,
        **fields,
    )
    return created(run, actor="sweeper")


def stored(container, run: Run) -> Run:
    current = container.runs.get_by_key(run.run_key)
    assert current is not None
    return current


def insert(container, run: Run) -> Run:
    assert container.runs.insert(run)
    return stored(container, run)


def receive_all(url: str) -> list[MessageTypeDef]:
    response = boto3.client("sqs").receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )
    return list(response.get("Messages", []))


def metric(container, name: str) -> float:
    return container.metrics.total(name)


class RecordingSqs:
    """Forwards to moto, keeping every SendMessageBatch request; can fail chosen calls or entries."""

    def __init__(self, inner: Any, *, fail_entry_of: set[str] | None = None, raise_error: bool = False):
        self._inner = inner
        self.fail_entry_of = fail_entry_of or set()
        self.raise_error = raise_error
        self.batches: list[dict[str, Any]] = []
        self.before_send: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send_message_batch(self, **request: Any) -> dict[str, Any]:
        self.batches.append(request)
        if self.before_send:
            self.before_send()
        if self.raise_error:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "boom"}}, "SendMessageBatch")
        doomed = [
            e for e in request["Entries"] if json.loads(e["MessageBody"])["runKey"] in self.fail_entry_of
        ]
        kept = [e for e in request["Entries"] if e not in doomed]
        response = self._inner.send_message_batch(QueueUrl=request["QueueUrl"], Entries=kept) if kept else {}
        failed = [
            {"Id": e["Id"], "SenderFault": False, "Code": "InternalError", "Message": "injected"}
            for e in doomed
        ]
        return {"Successful": response.get("Successful", []), "Failed": failed}

    def entries(self) -> list[dict[str, Any]]:
        return [entry for batch in self.batches for entry in batch["Entries"]]


@pytest.fixture
def sqs(container) -> RecordingSqs:
    """Install a recording SQS client in the container before the outbox is built."""
    recording = RecordingSqs(boto3.client("sqs"))
    settings = container.settings
    container.queues = RunQueues(recording, settings.queue_urls, settings.dlq_urls, fair=settings.fair_queues)
    return recording


# --- delays and queues ---


@pytest.mark.parametrize(("due_in", "delay"), [(30, 30), (0, 0), (-120, 0), (900, 900)])
def test_publish_sets_delay_to_time_until_due(container, clock, sqs, due_in, delay):
    run = insert(container, make_run(clock, due_in=due_in))

    assert container.outbox.publish([run]) == []

    (entry,) = sqs.entries()
    assert entry["DelaySeconds"] == delay
    assert sqs.batches[0]["QueueUrl"] == container.settings.queue_urls["default"]
    after = stored(container, run)
    assert after.state is RunState.QUEUED
    assert after.rev == run.rev + 1
    last = after.history[-1]
    assert (last.actor, last.source, last.target, last.at) == (
        "outbox",
        RunState.PENDING,
        RunState.QUEUED,
        clock.now(),
    )
    assert metric(container, "RunsPublished") == 1


def test_overdue_publish_records_lag(container, clock, sqs):
    run = insert(container, make_run(clock, due_in=-120))
    container.outbox.publish([run])
    assert container.metrics.values("SchedulePublishLag") == [120.0]


def test_on_time_publish_records_no_lag(container, clock, sqs):
    run = insert(container, make_run(clock, due_in=30))
    container.outbox.publish([run])
    assert not container.metrics.values("SchedulePublishLag")


def test_run_due_beyond_sqs_delay_limit_is_left_pending(container, clock, sqs):
    run = insert(container, make_run(clock, due_in=2000))

    assert container.outbox.publish([run]) == []

    assert sqs.batches == []
    assert stored(container, run) == run
    assert metric(container, "PublishSkippedFarFuture") == 1


def test_each_priority_goes_to_its_own_queue(container, clock, sqs):
    runs = [
        insert(container, make_run(clock, job_id=f"j_{p.value}", priority=p))
        for p in (Priority.HIGH, Priority.DEFAULT, Priority.LOW)
    ]
    container.outbox.publish(runs)

    urls = container.settings.queue_urls
    for priority in ("high", "default", "low"):
        (message,) = receive_all(urls[priority])
        assert json.loads(message["Body"])["priority"] == priority


def test_runs_for_external_workers_become_claimable_without_a_message(container, clock):
    from jobsched.domain.models import Priority as P

    run = insert(
        container,
        make_run(clock, priority=P.DEFAULT).model_copy(
            update={"target": None, "job_type": "only.external.workers"}
        ),
    )
    outcome = container.outbox.publish_detailed([run])
    assert outcome.published == [run.run_key]
    assert all(receive_all(url) == [] for url in container.settings.queue_urls.values())
    assert stored(container, run).state is RunState.QUEUED
    claimable, _ = container.runs.claimable(run.tenant, "only.external.workers", clock.now(), limit=10)
    assert [r.run_key for r in claimable] == [run.run_key]


def test_message_is_a_pointer_grouped_by_tenant(container, clock):
    run = insert(container, make_run(clock, tenant="tenant-z"))
    container.outbox.publish([run])

    (message,) = receive_all(container.settings.queue_urls["default"])
    assert json.loads(message["Body"]) == {
        "runKey": run.run_key,
        "jobId": run.job_id,
        "scheduledFor": format_instant(run.scheduled_for),
        "tenant": "tenant-z",
        "priority": "default",
        "dueAt": format_instant(run.due_at),
    }
    # The group is the tenant's digest: a tenant id does not fit MessageGroupId's rule.
    assert message["Attributes"]["MessageGroupId"] == hashlib.sha256(b"tenant-z").hexdigest()


def test_many_runs_share_batches_of_ten(container, clock, sqs):
    runs = [insert(container, make_run(clock, job_id=f"j_many{i}", due_in=i)) for i in range(23)]
    assert container.outbox.publish(runs) == []
    assert [len(b["Entries"]) for b in sqs.batches] == [10, 10, 3]
    assert all(stored(container, r).state is RunState.QUEUED for r in runs)


def test_retry_wait_run_becomes_queued(container, clock, sqs):
    run = insert(container, make_run(clock, state=RunState.RETRY_WAIT, due_in=45, attempt=1, fence=1))
    assert container.outbox.publish([run]) == []
    assert sqs.entries()[0]["DelaySeconds"] == 45
    after = stored(container, run)
    assert after.state is RunState.QUEUED
    assert (after.history[-1].source, after.history[-1].actor) == (RunState.RETRY_WAIT, "outbox")


@pytest.mark.parametrize(
    "state", [RunState.QUEUED, RunState.LEASED, RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED]
)
def test_runs_in_other_states_are_ignored(container, clock, sqs, state):
    extra: dict[str, Any] = {}
    if state is RunState.LEASED:
        extra = {"lease_owner": "w1", "lease_expires_at": clock.now() + timedelta(seconds=60), "fence": 1}
    run = insert(container, make_run(clock, state=state, **extra))
    assert container.outbox.publish([run]) == []
    assert sqs.batches == []
    assert stored(container, run) == run


def test_blocked_run_is_ignored(container, clock, sqs):
    run = insert(container, make_run(clock, blocked_by="j_outbox1@2026-11-02T07:00:00Z"))
    assert container.outbox.publish([run]) == []
    assert sqs.batches == []


def test_same_run_twice_in_one_call_is_sent_once(container, clock, sqs):
    run = insert(container, make_run(clock))
    assert container.outbox.publish([run, run]) == []
    assert len(sqs.entries()) == 1
    assert metric(container, "OutboxStaleTransition") == 0


def test_republishing_an_already_queued_run_is_harmless(container, clock, sqs):
    run = insert(container, make_run(clock))
    container.outbox.publish([run])
    # A retried stream batch delivers the old PENDING image again (Lambda retries a batch
    # after the invocation that failed it, which may have died before it sent): the run as
    # that image plus the outbox's one mark is sent again, and marked no second time.
    clock.advance(1)
    assert container.outbox.publish([run]) == []
    assert stored(container, run).state is RunState.QUEUED
    assert len([h for h in stored(container, run).history if h.actor == "outbox"]) == 1
    assert len(sqs.entries()) == 2  # the second message is dropped by the worker's claim
    assert metric(container, "OutboxStaleTransition") == 0


class Died(BaseException):
    """The invocation ended here (a crash, its timeout): nothing after this point ran."""


def test_a_batch_retried_after_its_invocation_died_before_sending_sends_its_runs(container, clock, sqs):
    runs = [insert(container, make_run(clock, job_id=f"j_die{i}")) for i in range(3)]

    def die() -> None:
        raise Died()

    sqs.before_send = die
    with pytest.raises(Died):
        container.outbox.publish(runs)  # marked every run QUEUED, sent none
    assert {stored(container, r).state for r in runs} == {RunState.QUEUED}
    sqs.before_send = None
    clock.advance(30)  # Lambda retries the batch: the same records, the runs' PENDING images
    assert container.outbox.publish(runs) == []
    sent = [json.loads(e["MessageBody"])["runKey"] for e in sqs.entries()[3:]]
    assert sorted(sent) == sorted(r.run_key for r in runs)
    assert all(len([h for h in stored(container, r).history if h.actor == "outbox"]) == 1 for r in runs)


def test_a_retried_batch_sends_a_run_noted_late_since_its_mark(container, clock, sqs):
    run = insert(container, make_run(clock))

    def die() -> None:
        raise Died()

    sqs.before_send = die
    with pytest.raises(Died):
        container.outbox.publish([run])  # marked QUEUED, not sent
    sqs.before_send = None
    clock.advance(2)
    # The reconciler notes the run late (its due instant passed unclaimed): it stays QUEUED.
    container.runs.commit(
        stored(container, run),
        lambda r: touch(
            r, now=clock.now(), actor="reconciler", reason=LATE_REASON, late_noticed_at=clock.now()
        ),
    )
    clock.advance(30)  # Lambda retries the batch: the run's PENDING image again
    assert container.outbox.publish([run]) == []
    # The first entry is the send that never came (the invocation died in it).
    assert [json.loads(e["MessageBody"])["runKey"] for e in sqs.entries()[1:]] == [run.run_key]
    assert metric(container, "OutboxStaleTransition") == 0


def test_a_retried_record_is_not_sent_once_the_run_moved_past_the_mark(container, clock, sqs):
    run = insert(container, make_run(clock))
    container.outbox.publish([run])
    container.runs.commit(
        stored(container, run), lambda r: claimed(r, at=clock.now(), lease_for=60, owner="w1")
    )
    clock.advance(1)
    assert container.outbox.publish([run]) == []
    assert len(sqs.entries()) == 1
    assert metric(container, "OutboxStaleTransition") == 1


# --- failures ---


def put_back(container, run: Run) -> Run:
    """The run as stored after a failed send: marked QUEUED, then put back to PENDING."""
    after = stored(container, run)
    assert after.state is RunState.PENDING and after.rev == run.rev + 2
    mark, back = after.history[-2:]
    assert (mark.actor, mark.source, mark.target) == ("outbox", run.state, RunState.QUEUED)
    assert (back.actor, back.source, back.target, back.reason) == (
        "outbox",
        RunState.QUEUED,
        RunState.PENDING,
        "publish failed",
    )
    return after


def test_failed_entry_is_reported_and_run_is_put_back_to_pending(container, clock, sqs):
    good = insert(container, make_run(clock, job_id="j_good"))
    bad = insert(container, make_run(clock, job_id="j_bad"))
    sqs.fail_entry_of = {bad.run_key}

    assert container.outbox.publish([good, bad]) == [bad.run_key]

    assert stored(container, good).state is RunState.QUEUED
    put_back(container, bad)
    assert metric(container, "PublishFailed") == 1 and metric(container, "RunsPublished") == 1


def test_send_error_reports_every_run_of_the_batch(container, clock, sqs):
    runs = [insert(container, make_run(clock, job_id=f"j_err{i}")) for i in range(3)]
    sqs.raise_error = True

    assert sorted(container.outbox.publish(runs)) == sorted(r.run_key for r in runs)
    for run in runs:
        put_back(container, run)


def test_a_put_back_run_is_published_again_from_its_own_record(container, clock, sqs):
    run = insert(container, make_run(clock))
    sqs.raise_error = True
    container.outbox.publish([run])
    sqs.raise_error = False

    # The put-back's stream record: published; the retried old record: stale, not sent again.
    assert container.outbox.publish([put_back(container, run), run]) == []
    assert stored(container, run).state is RunState.QUEUED
    assert len(sqs.entries()) == 2  # the failed send and this one


def test_failed_sends_in_a_row_leave_the_run_to_the_reconciler(container, clock, sqs):
    from jobsched.domain import lifecycle
    from jobsched.services.outbox import QUICK_RETRIES

    run = insert(container, make_run(clock))
    sqs.raise_error = True
    for _ in range(QUICK_RETRIES):
        assert container.outbox.publish([run]) == [run.run_key]
        run = put_back(container, run)
    sends = len(sqs.batches)

    outcome = container.outbox.publish_detailed([run])
    assert outcome.left_for_repair == [run.run_key] and outcome.failed == []
    assert len(sqs.batches) == sends and stored(container, run) == run

    # The reconciler's republish (a touch) starts the count again.
    touched = container.runs.commit(
        run, lambda r: lifecycle.touch(r, now=clock.now(), actor="reconciler", reason="republish")
    )
    sqs.raise_error = False
    assert container.outbox.publish([touched]) == []
    assert stored(container, run).state is RunState.QUEUED


class MarkLandsThenFails:
    """DynamoDB as the SDK sees it when a write's answer is lost: the outbox's QUEUED mark is
    applied by the table, then either the read times out (`timeout`) or the SDK re-sends the
    request, whose condition now fails against the write it made (`replay`)."""

    def __init__(self, inner: Any, mode: str) -> None:
        self._inner = inner
        self.mode = mode
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_item(self, **request: Any) -> Any:
        if not (self.armed and request["Item"].get("state") == {"S": "QUEUED"}):
            return self._inner.put_item(**request)
        self.armed = False
        self._inner.put_item(**request)
        if self.mode == "timeout":
            from botocore.exceptions import ReadTimeoutError

            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com/")
        return self._inner.put_item(**request)  # ConditionalCheckFailed: the table has it


def outbox_over(container, clock, ddb: Any) -> Outbox:
    runs = RunStore(ddb, container.settings.runs_table, container.settings.shard_count)
    return Outbox(runs, container.queues, clock, container.router)


def test_a_mark_whose_answer_was_replayed_is_still_sent(container, clock, sqs):
    run = insert(container, make_run(clock))
    outbox = outbox_over(container, clock, MarkLandsThenFails(boto3.client("dynamodb"), "replay"))

    assert outbox.publish([run]) == []

    # Marked QUEUED once (by this outbox) and sent: never QUEUED without a message.
    assert stored(container, run).state is RunState.QUEUED
    assert [json.loads(e["MessageBody"])["runKey"] for e in sqs.entries()] == [run.run_key]


def test_a_mark_that_landed_behind_a_timeout_is_put_back_when_its_send_fails(container, clock, sqs):
    run = insert(container, make_run(clock))
    outbox = outbox_over(container, clock, MarkLandsThenFails(boto3.client("dynamodb"), "timeout"))
    sqs.raise_error = True

    assert outbox.publish([run]) == [run.run_key]

    # The mark's outcome was unknown, and it had landed: put back, so its record publishes it.
    after = stored(container, run)
    assert after.state is RunState.PENDING and after.history[-1].reason == "publish failed"


def test_unconfigured_queue_reports_failure(container, clock):
    urls = {k: v for k, v in container.settings.queue_urls.items() if k != "high"}
    outbox = Outbox(
        container.runs, RunQueues(boto3.client("sqs"), urls, {}, fair=True), clock, container.router
    )
    run = insert(container, make_run(clock, priority=Priority.HIGH))
    assert outbox.publish([run]) == [run.run_key]
    assert stored(container, run).state is RunState.PENDING


def test_run_claimed_before_outbox_marks_it_queued_is_not_sent(container, clock, sqs):
    run = insert(container, make_run(clock))
    # A worker claimed it from an earlier message (a republish) before this record arrived.
    container.runs.commit(run, lambda r: claimed(r, at=clock.now(), lease_for=60, owner="w1"))

    assert container.outbox.publish([run]) == []

    after = stored(container, run)
    assert after.state is RunState.LEASED
    assert all(h.actor != "outbox" for h in after.history)
    assert sqs.batches == []
    assert metric(container, "OutboxStaleTransition") == 1


def test_the_run_is_queued_before_its_message_is_sent(container, clock, sqs):
    run = insert(container, make_run(clock))
    seen: list[Run] = []
    sqs.before_send = lambda: seen.append(stored(container, run))

    assert container.outbox.publish([run]) == []

    # What a worker reads once the message is there is the run as the outbox leaves it.
    assert [r.state for r in seen] == [RunState.QUEUED]
    assert seen[0] == stored(container, run)


# --- routing ---


def test_target_less_run_without_handler_goes_to_external_workers(container, clock):
    route = priority_router(lambda job_type: job_type == "known.type")
    base = make_run(clock)
    assert route(base) == "default"
    assert route(base.model_copy(update={"target": None, "job_type": "known.type"})) == "default"
    assert route(base.model_copy(update={"target": None, "job_type": "other.type"})) == "external"


def test_the_containers_router_uses_the_handler_registry(clock, container):
    from jobsched.targets.registry import registry

    route = container.router
    run = make_run(clock, priority=Priority.LOW).model_copy(
        update={"target": None, "job_type": "outbox.test.t1"}
    )
    assert route(run) == "external"
    registry.add("outbox.test.t1", lambda payload, invocation: None)
    try:
        assert route(run) == "low"
    finally:
        registry._handlers.pop("outbox.test.t1", None)


# --- the stream handler ---


STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/jobsched-runs/stream/2026-11-01T00:00:00.000"


def stream_record(store: RunStore, run: Run, sequence: str, *, event_name: str = "INSERT") -> dict[str, Any]:
    """A DynamoDB stream record exactly as Lambda delivers it."""
    image = store.to_item(run)
    return {
        "eventID": f"evt-{sequence}",
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": epoch_seconds(run.updated_at),
            "Keys": {"job_id": image["job_id"], "sk": image["sk"]},
            "NewImage": image,
            **({"OldImage": image} if event_name == "MODIFY" else {}),
            "SequenceNumber": sequence,
            "SizeBytes": len(json.dumps(image)),
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": STREAM_ARN,
    }


def invoke(event: dict[str, Any]) -> dict[str, Any]:
    from jobsched.handlers import outbox
    from jobsched_local.lambda_context import InvocationContext

    return outbox.handler(event, InvocationContext(function_name="jobsched-outbox"))


class PutBackFails:
    """DynamoDB refusing the outbox's put-back (a QUEUED run written back to PENDING) after the
    SDK's retries: the run stays QUEUED with no message sent."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_item(self, **request: Any) -> Any:
        if request["Item"].get("state") == {"S": "PENDING"} and "publish failed" in json.dumps(
            request["Item"]
        ):
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}},
                "PutItem",
            )
        return self._inner.put_item(**request)


def test_handler_fails_no_record_whose_run_was_put_back(container, clock, sqs):
    runs = [insert(container, make_run(clock, job_id=f"j_h{i}", due_in=10 * i)) for i in range(3)]
    sqs.fail_entry_of = {runs[1].run_key}
    event = {"Records": [stream_record(container.runs, r, f"{100 + i}") for i, r in enumerate(runs)]}

    # The put-back's own record publishes the run again: failing this record would only
    # spend the batch's retries, which a later death between marks and sends needs.
    assert invoke(event) == {"batchItemFailures": []}
    # One SendMessageBatch for the whole stream batch.
    assert len(sqs.batches) == 1 and len(sqs.entries()) == 3
    assert [stored(container, r).state for r in runs] == [RunState.QUEUED, RunState.PENDING, RunState.QUEUED]
    put_back(container, runs[1])


def test_handler_fails_exactly_the_record_whose_run_may_stand_queued_unsent(
    container, clock, sqs, monkeypatch
):
    from jobsched.wiring import container as wired

    runs = [insert(container, make_run(clock, job_id=f"j_u{i}", due_in=10 * i)) for i in range(3)]
    sqs.fail_entry_of = {runs[1].run_key}
    outbox = wired().outbox
    monkeypatch.setattr(
        outbox,
        "_runs",
        RunStore(
            PutBackFails(boto3.client("dynamodb")),
            container.settings.runs_table,
            container.settings.shard_count,
        ),
    )
    event = {"Records": [stream_record(container.runs, r, f"{400 + i}") for i, r in enumerate(runs)]}

    assert invoke(event) == {"batchItemFailures": [{"itemIdentifier": "401"}]}
    assert stored(container, runs[1]).state is RunState.QUEUED  # marked, not sent, not put back

    # The retried record finds the run as its image plus this outbox's mark: sent now.
    sqs.fail_entry_of = set()
    assert invoke({"Records": [event["Records"][1]]}) == {"batchItemFailures": []}
    sent = [json.loads(e["MessageBody"])["runKey"] for e in sqs.entries()]
    assert sent.count(runs[1].run_key) == 2 and stored(container, runs[1]).state is RunState.QUEUED


def test_handler_fails_the_record_of_a_run_noted_late_while_its_send_failed(container, clock, sqs):
    run = insert(container, make_run(clock, job_id="j_late"))
    other = insert(container, make_run(clock, job_id="j_other"))
    record = stream_record(container.runs, run, "500")

    def noted_late_then_refused() -> None:
        # While the send is under way (SDK retries), the reconciler notes the marked run late.
        container.runs.commit(
            stored(container, run),
            lambda r: touch(
                r, now=clock.now(), actor="reconciler", reason=LATE_REASON, late_noticed_at=clock.now()
            ),
        )
        raise ClientError({"Error": {"Code": "InternalError", "Message": "boom"}}, "SendMessageBatch")

    sqs.before_send = noted_late_then_refused
    # The put-back meets the note: the run stays QUEUED, unsent, so its record must fail;
    # the other run is put back to PENDING, and its put-back's record publishes it.
    event = {"Records": [record, stream_record(container.runs, other, "501")]}
    assert invoke(event) == {"batchItemFailures": [{"itemIdentifier": "500"}]}
    assert stored(container, run).state is RunState.QUEUED
    put_back(container, other)

    sqs.before_send = None
    assert invoke({"Records": [record]}) == {"batchItemFailures": []}
    # After the refused batch of both: the retried record's run, sent.
    assert [json.loads(e["MessageBody"])["runKey"] for e in sqs.entries()[2:]] == [run.run_key]


def test_handler_passes_over_records_the_filter_rejects(container, clock, sqs):
    pending = insert(container, make_run(clock, job_id="j_p"))
    queued = insert(container, make_run(clock, job_id="j_q", state=RunState.QUEUED))
    event = {
        "Records": [
            stream_record(container.runs, queued, "200", event_name="MODIFY"),
            stream_record(container.runs, pending, "201"),
        ]
    }
    assert invoke(event) == {"batchItemFailures": []}
    assert [json.loads(e["MessageBody"])["runKey"] for e in sqs.entries()] == [pending.run_key]


def test_handler_fails_an_unreadable_run_record(container, clock, sqs):
    good = insert(container, make_run(clock, job_id="j_ok"))
    broken = stream_record(container.runs, good, "301")
    broken["dynamodb"]["NewImage"]["doc"] = {"S": "{not json"}
    event = {"Records": [stream_record(container.runs, good, "300"), broken]}

    assert invoke(event) == {"batchItemFailures": [{"itemIdentifier": "301"}]}


def test_handler_publishes_what_a_newer_release_wrote_and_fails_only_what_it_cannot_read(
    container, clock, sqs, caplog
):
    """A run image with members this release does not know is published; one it cannot read
    (a trigger it does not have) fails its record alone (retried, then named in the outbox
    failure queue: nothing else would publish it), logged with its run key and counted
    (UnreadableRuns); the runs after it in the batch are published all the same."""
    newer, bad, after = (
        insert(container, make_run(clock, job_id=f"j_{name}")) for name in ("new", "bad", "aft")
    )
    newer_record = stream_record(container.runs, newer, "310")
    image = newer_record["dynamodb"]["NewImage"]
    doc = json.loads(image["doc"]["S"])
    doc["added_later"] = {"any": "value"}
    doc["history"][0]["added_later"] = 1
    image["doc"] = {"S": json.dumps(doc)}
    image["added_later"] = {"S": "an attribute of its own"}
    broken = stream_record(container.runs, bad, "311")
    broken["dynamodb"]["NewImage"]["doc"] = {"S": json.dumps({**doc, "trigger": "lunar"})}
    event = {"Records": [newer_record, broken, stream_record(container.runs, after, "312")]}
    container.metrics.clear()
    caplog.set_level("ERROR")

    assert invoke(event) == {"batchItemFailures": [{"itemIdentifier": "311"}]}
    assert [json.loads(e["MessageBody"])["runKey"] for e in sqs.entries()] == [newer.run_key, after.run_key]
    assert container.metrics.values("UnreadableRuns") == [1.0]
    logged = [r for r in caplog.records if r.getMessage() == "unreadable run item"]
    assert [r.__dict__["key"] for r in logged] == [bad.run_key]
