"""The reconciler on moto: each stranded state is repaired after its deadline and not before."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from jobsched.domain.errors import JobschedError
from jobsched.domain.instants import format_instant
from jobsched.domain.lifecycle import advance
from jobsched.domain.metrics import Unit
from jobsched.domain.models import DeliveryGuarantee, HttpTarget, Policies, RetryPolicy
from jobsched.domain.repair import RepairTimings
from jobsched.domain.runs import Run, RunState, created
from jobsched.handlers.outbox import matches_filter
from jobsched.services.reconciler import Reconciler
from jobsched.store.runs import RunStore
from jobsched.store.schema import RUNS

from tests.helpers import T0, claimed

TARGET = HttpTarget(kind="http", url="https://hooks.example.com/run")


@pytest.fixture(autouse=True)
def stream_only(request, container):
    """What each repair writes is checked with the repair's own publish off (the runs move
    on through their write's stream record alone); the tests marked `sends` keep it."""
    if "sends" not in request.keywords:
        container.reconciler._publish = None


PUBLISH_GRACE = int(RepairTimings().publish_grace.total_seconds())  # 10 s
LEASE_GRACE = int(RepairTimings().lease_grace.total_seconds())  # 10 s


def make_run(
    *,
    job_id: str = "j_rec1",
    at: datetime = T0,
    due_in: float = 0,
    state: RunState = RunState.PENDING,
    **fields: Any,
) -> Run:
    """A run written at `at`, due `due_in` seconds later, built by hand as the sweeper would."""
    scheduled = at + timedelta(seconds=due_in)
    return created(
        Run(
            run_key=f"{job_id}@{format_instant(scheduled)}",
            job_id=job_id,
            tenant="tenant-a",
            job_type="report.build",
            scheduled_for=scheduled,
            due_at=scheduled,
            state=state,
            definition_version=1,
            target=TARGET,
            created_at=at,
            updated_at=at,
            **fields,
        ),
        actor="sweeper",
    )


def leased(*, job_id: str = "j_lease1", attempt: int = 1, lease_for: int = 60, **fields: Any) -> Run:
    return make_run(
        job_id=job_id,
        state=RunState.LEASED,
        fence=attempt,
        attempt=attempt,
        lease_owner="worker-1",
        lease_expires_at=T0 + timedelta(seconds=lease_for),
        first_attempt_at=T0,
        **fields,
    )


def insert(container, run: Run) -> Run:
    assert container.runs.insert(run)
    return stored(container, run)


def stored(container, run: Run) -> Run:
    current = container.runs.get_by_key(run.run_key)
    assert current is not None
    return current


def raw_item(run: Run) -> dict[str, Any]:
    return boto3.client("dynamodb").get_item(
        TableName=RUNS.default_name,
        Key={"job_id": {"S": run.job_id}, "sk": {"S": "R#" + format_instant(run.scheduled_for)}},
    )["Item"]


def reconciler_entries(run: Run) -> list:
    return [h for h in run.history if h.actor == "reconciler"]


def as_stream_record(item: dict[str, Any], sequence: str, event_name: str = "MODIFY") -> dict[str, Any]:
    return {
        "eventID": sequence,
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {"NewImage": item, "SequenceNumber": sequence, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }


# --- PENDING never published ---


def test_unpublished_pending_run_is_retouched_after_the_grace_and_not_before(container, clock):
    run = insert(container, make_run())
    before = raw_item(run)

    clock.set(T0 + timedelta(seconds=PUBLISH_GRACE - 1))
    report = container.reconciler.reconcile_all()
    assert report.examined == 0 and report.repaired == []
    assert raw_item(run) == before

    clock.set(T0 + timedelta(seconds=PUBLISH_GRACE))
    report = container.reconciler.reconcile_all()

    assert report.republish == 1 and report.repaired == [run.run_key]
    after = stored(container, run)
    assert after.state is RunState.PENDING
    assert after.rev == run.rev + 1
    assert after.updated_at == clock.now()
    (entry,) = reconciler_entries(after)
    assert (entry.source, entry.target, entry.reason, entry.at) == (
        RunState.PENDING,
        RunState.PENDING,
        "republish",
        clock.now(),
    )
    # The write changes the item, so the stream emits a record the outbox's filter lets through.
    item = raw_item(run)
    assert item != before
    assert item["deadline_at"]["S"] == format_instant(clock.now() + timedelta(seconds=PUBLISH_GRACE))
    assert matches_filter(as_stream_record(item, "1"))


def test_retouched_run_is_not_repaired_again_within_the_grace(container, clock):
    run = insert(container, make_run())
    clock.set(T0 + timedelta(seconds=PUBLISH_GRACE))
    container.reconciler.reconcile_all()
    clock.set(T0 + timedelta(seconds=2 * PUBLISH_GRACE - 1))
    assert container.reconciler.reconcile_all().repaired == []
    clock.set(T0 + timedelta(seconds=2 * PUBLISH_GRACE))
    assert container.reconciler.reconcile_all().repaired == [run.run_key]
    assert len(reconciler_entries(stored(container, run))) == 2


def test_retry_wait_due_in_two_hours_waits_until_within_the_sqs_delay(container, clock, aws):
    run = insert(
        container, make_run(state=RunState.RETRY_WAIT, due_in=7200, attempt=1, fence=1, first_attempt_at=T0)
    )
    publish_at = T0 + timedelta(seconds=7200 - 900)

    clock.set(publish_at - timedelta(seconds=1))
    assert container.reconciler.reconcile_all().repaired == []
    assert stored(container, run) == run

    clock.set(publish_at)
    assert container.reconciler.reconcile_all().republish == 1
    after = stored(container, run)
    assert after.state is RunState.RETRY_WAIT
    assert reconciler_entries(after)[-1].reason == "republish"

    # The outbox can now publish it with the longest SQS delay.
    assert container.outbox.publish([after]) == []
    assert stored(container, run).state is RunState.QUEUED


# --- QUEUED but the message is gone ---


def test_queued_run_whose_message_was_lost_goes_back_to_pending_after_the_dwell(container, clock):
    run = insert(container, make_run(state=RunState.QUEUED))

    clock.set(T0 + timedelta(minutes=15) - timedelta(seconds=1))
    assert container.reconciler.reconcile_all().repaired == []

    clock.set(T0 + timedelta(minutes=15))
    report = container.reconciler.reconcile_all()

    assert report.requeue == 1
    after = stored(container, run)
    assert after.state is RunState.PENDING
    (entry,) = reconciler_entries(after)
    assert (entry.source, entry.target, entry.reason) == (RunState.QUEUED, RunState.PENDING, "requeue")
    assert matches_filter(as_stream_record(raw_item(run), "1"))


def test_queued_run_with_future_due_waits_for_due_plus_dwell(container, clock):
    run = insert(container, make_run(state=RunState.QUEUED, due_in=600))
    clock.set(T0 + timedelta(seconds=600 + 899))
    assert container.reconciler.reconcile_all().repaired == []
    clock.set(T0 + timedelta(seconds=600 + 900))
    assert container.reconciler.reconcile_all().repaired == [run.run_key]


# --- LEASED by a worker that died ---


def test_expired_lease_with_attempts_left_goes_to_retry_wait(container, clock):
    run = insert(container, leased(attempt=1))

    clock.set(T0 + timedelta(seconds=60 + LEASE_GRACE - 1))
    assert container.reconciler.reconcile_all().repaired == []

    clock.set(T0 + timedelta(seconds=60 + LEASE_GRACE))
    report = container.reconciler.reconcile_all()

    assert report.lease_expired == 1
    after = stored(container, run)
    assert after.state is RunState.RETRY_WAIT
    assert after.due_at == clock.now()
    assert after.last_error_class == "LeaseExpired"
    assert after.lease_owner is None and after.lease_expires_at is None
    assert after.fence == run.fence and after.attempt == run.attempt
    (entry,) = reconciler_entries(after)
    assert (entry.source, entry.target, entry.error_class, entry.fence) == (
        RunState.LEASED,
        RunState.RETRY_WAIT,
        "LeaseExpired",
        run.fence,
    )
    # Due now: the outbox publishes it on the stream record this write produces.
    assert matches_filter(as_stream_record(raw_item(run), "1"))


def test_expired_lease_at_max_attempts_goes_to_dead(container, clock):
    run = insert(container, leased(attempt=3))  # default policy: 3 attempts
    clock.set(T0 + timedelta(seconds=90))

    assert container.reconciler.reconcile_all().lease_expired == 1

    after = stored(container, run)
    assert after.state is RunState.DEAD
    assert after.last_error_class == "LeaseExpired"
    assert after.finished_at == clock.now()
    assert "deadline_at" not in raw_item(run)  # left the open index
    assert raw_item(run)["dead_tenant"]["S"] == "tenant-a"


def test_run_dead_from_an_expired_lease_is_copied_to_its_dlq(container, clock, aws):
    run = insert(container, leased(attempt=3))
    clock.set(T0 + timedelta(seconds=90))

    report = container.reconciler.reconcile_all()

    assert report.dead == 1
    messages = boto3.client("sqs").receive_message(QueueUrl=aws["dlq_urls"]["default"])["Messages"]
    body = json.loads(messages[0]["Body"])
    assert body["runKey"] == run.run_key and body["reason"].startswith("LeaseExpired:")


def test_expired_lease_past_max_age_goes_to_dead(container, clock):
    policies = Policies(retry=RetryPolicy(max_attempts=5, max_age_seconds=60))
    run = insert(container, leased(attempt=1, policies=policies))
    clock.set(T0 + timedelta(seconds=90))
    container.reconciler.reconcile_all()
    assert stored(container, run).state is RunState.DEAD


def test_expired_lease_after_an_at_most_once_effect_started_is_not_retried(container, clock):
    policies = Policies(delivery=DeliveryGuarantee.AT_MOST_ONCE)
    run = insert(container, leased(attempt=1, policies=policies, effect_started_at=T0))
    clock.set(T0 + timedelta(seconds=90))
    container.reconciler.reconcile_all()
    assert stored(container, run).state is RunState.DEAD


def test_live_lease_is_left_alone(container, clock):
    run = insert(container, leased(lease_for=600))
    clock.set(T0 + timedelta(seconds=300))
    report = container.reconciler.reconcile_all()
    assert report.repaired == [] and report.stale == 0
    assert stored(container, run) == run


def test_lease_extended_after_the_read_is_left_alone(container, clock):
    run = insert(container, leased(lease_for=60))
    clock.set(T0 + timedelta(seconds=90))
    (read,) = container.runs.overdue(container.runs.open_shard_of(run.job_id), clock.now(), limit=10)[0]

    # The heartbeat lands between the reconciler's read and its write.
    container.runs.extend_lease(run, T0 + timedelta(seconds=600))

    assert container.reconciler.repair(read) is None
    after = stored(container, run)
    assert after.state is RunState.LEASED
    assert reconciler_entries(after) == []
    # Its index entry still says "look at T0 + 60 s": looked at again, it moves, nothing else.
    report = container.reconciler.reconcile_all()
    assert (report.examined, report.moved, report.repaired) == (1, 1, [])
    assert container.reconciler.reconcile_all().examined == 0


# --- blocked (buffer-one overlap) ---


def test_blocked_run_is_unblocked_once_its_blocker_finished(container, clock):
    blocker = insert(container, make_run(job_id="j_blk", at=T0 - timedelta(minutes=1), state=RunState.QUEUED))
    waiting = insert(container, make_run(job_id="j_blk", due_in=0, blocked_by=blocker.run_key))
    finished = advance(blocker, RunState.CANCELLED, now=T0, actor="api:tenant-a", reason="cancelled")
    container.runs.commit(blocker, lambda _: finished)

    clock.set(T0 + timedelta(minutes=5))
    report = container.reconciler.reconcile_all()

    assert report.unblocked == 1 and report.repaired == [waiting.run_key]
    after = stored(container, waiting)
    assert after.blocked_by is None
    assert reconciler_entries(after)[-1].reason == "unblocked"
    assert matches_filter(as_stream_record(raw_item(waiting), "1"))


def test_blocked_run_whose_blocker_is_missing_is_unblocked(container, clock):
    waiting = insert(container, make_run(blocked_by="j_gone@2026-11-02T07:00:00Z"))
    clock.set(T0 + timedelta(minutes=5))
    assert container.reconciler.reconcile_all().unblocked == 1
    assert stored(container, waiting).blocked_by is None


def test_blocked_run_whose_blocker_is_open_only_has_its_deadline_moved(container, clock):
    blocker = insert(container, leased(job_id="j_blk2", lease_for=3600))
    waiting = insert(container, make_run(job_id="j_blk2", due_in=60, blocked_by=blocker.run_key))

    clock.set(T0 + timedelta(minutes=5))
    report = container.reconciler.reconcile_all()

    assert report.repaired == [] and report.deferred == 1
    after = stored(container, waiting)
    assert after.blocked_by == blocker.run_key
    assert after.history == waiting.history
    assert raw_item(waiting)["deadline_at"]["S"] == format_instant(clock.now() + timedelta(minutes=5))
    assert not matches_filter(as_stream_record(raw_item(waiting), "1"))
    # Not read again until the new deadline.
    clock.set(T0 + timedelta(minutes=9))
    assert container.reconciler.reconcile_all().examined == 0


# --- races and cost ---


def test_two_reconcilers_racing_on_one_run_repair_it_once(container, clock):
    run = insert(container, make_run())
    clock.set(T0 + timedelta(seconds=120))
    (read,) = container.runs.overdue(container.runs.open_shard_of(run.job_id), clock.now(), limit=10)[0]
    first = Reconciler(container.runs, clock, shard_count=4)
    second = Reconciler(container.runs, clock, shard_count=4)

    assert first.repair(read) == "republish"
    assert second.repair(read) is None  # the same stale read: its conditional write fails

    assert len(reconciler_entries(stored(container, run))) == 1


def test_repair_after_another_writer_moved_the_run_is_skipped(container, clock):
    run = insert(container, make_run(state=RunState.QUEUED))
    clock.set(T0 + timedelta(minutes=20))
    (read,) = container.runs.overdue(container.runs.open_shard_of(run.job_id), clock.now(), limit=10)[0]
    container.runs.commit(run, lambda r: claimed(r, at=clock.now(), lease_for=60, owner="w1"))

    assert container.reconciler.repair(read) is None
    assert stored(container, run).state is RunState.LEASED


class CountingDynamo:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[str] = []
        self.items_returned = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            response = attr(*args, **kwargs)
            if name in ("query", "scan"):
                self.items_returned += len(response.get("Items", []))
            return response

        return call


def test_reconciler_reads_only_overdue_runs(container, clock):
    for i in range(50):
        insert(container, make_run(job_id=f"j_fresh{i}", at=T0))  # deadline T0 + 60 s
    stranded = [
        insert(container, make_run(job_id=f"j_old{i}", at=T0 - timedelta(minutes=5))) for i in range(2)
    ]
    counting = CountingDynamo(boto3.client("dynamodb"))
    store = RunStore(counting, RUNS.default_name, 4)

    report = Reconciler(store, clock, shard_count=4).reconcile_all()

    assert report.examined == 2
    assert sorted(report.repaired) == sorted(r.run_key for r in stranded)
    assert counting.items_returned == 2
    assert "scan" not in counting.calls
    assert counting.calls.count("query") == 4  # one per shard


def test_pages_through_every_overdue_run(container, clock):
    runs = [insert(container, make_run(job_id=f"j_page{i}", at=T0 - timedelta(minutes=5))) for i in range(7)]
    report = Reconciler(container.runs, clock, shard_count=4, batch_limit=2).reconcile_all()
    assert sorted(report.repaired) == sorted(r.run_key for r in runs)


def test_one_invocation_is_bounded_per_shard(container, clock):
    for i in range(5):
        insert(container, make_run(job_id="j_samejob", at=T0 - timedelta(minutes=5), due_in=-i))
    bounded = Reconciler(container.runs, clock, shard_count=4, batch_limit=2, max_per_shard=3)
    assert bounded.reconcile_all().examined == 3
    assert bounded.reconcile_all().examined == 2  # the rest on the next tick


def test_repairs_emit_metrics_by_kind(container, clock):
    insert(container, make_run(job_id="j_m1", at=T0 - timedelta(minutes=2)))
    insert(container, make_run(job_id="j_m2", at=T0 - timedelta(minutes=20), state=RunState.QUEUED))

    container.reconciler.reconcile_all()

    recorded = container.metrics
    assert recorded.values("RepairsMade", kind="republish") == [1.0]
    assert recorded.values("RepairsMade", kind="requeue") == [1.0]
    assert ("RepairsMade", Unit.COUNT, ("kind",)) in recorded.shapes()
    # 2 min past due (the publish deadline is due + the grace), 5 min past the dwell deadline.
    assert sorted(recorded.values("RepairLatency")) == [120.0 - PUBLISH_GRACE, 300.0]


def test_a_run_item_it_cannot_read_holds_back_no_repair_of_its_shard_and_is_reported(
    container, clock, caplog
):
    """Three stranded runs of one job (one shard): the one whose item this release cannot read
    (a state it does not have) is passed over, reported and counted (UnreadableRuns), and
    stays overdue; the others are repaired, one a newer release wrote with members this
    release does not know among them."""
    old = T0 - timedelta(minutes=5)
    first, bad, newer = (insert(container, make_run(job_id="j_mixed", at=old, due_in=i)) for i in range(3))
    ddb = boto3.client("dynamodb")
    key = {"job_id": {"S": bad.job_id}, "sk": {"S": "R#" + format_instant(bad.scheduled_for)}}
    ddb.update_item(
        TableName=RUNS.default_name,
        Key=key,
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "ARCHIVED"}},
    )
    doc = json.loads(raw_item(newer)["doc"]["S"])
    doc["added_later"] = {"any": "value"}
    doc["history"][0]["added_later"] = 1
    ddb.update_item(
        TableName=RUNS.default_name,
        Key={"job_id": {"S": newer.job_id}, "sk": {"S": "R#" + format_instant(newer.scheduled_for)}},
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": json.dumps(doc)}},
    )
    container.metrics.clear()
    caplog.set_level("ERROR")

    report = container.reconciler.reconcile_all()

    assert sorted(report.repaired) == sorted([first.run_key, newer.run_key]) and report.failed == 0
    assert report.unreadable == [bad.run_key] and report.as_dict()["unreadable"] == [bad.run_key]
    assert container.metrics.values("UnreadableRuns") == [1.0]
    logged = [r for r in caplog.records if r.getMessage() == "unreadable run item"]
    assert [r.__dict__["key"] for r in logged] == [bad.run_key]
    assert container.reconciler.reconcile_all().unreadable == [bad.run_key]  # still overdue


# --- the handler ---


def invoke(event: dict[str, Any]) -> dict[str, Any]:
    from jobsched.handlers import reconciler
    from jobsched_local.lambda_context import InvocationContext

    return reconciler.handler(event, InvocationContext(function_name="jobsched-reconciler"))


SCHEDULED_EVENT = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-11-02T08:05:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/jobsched-reconciler"],
    "detail": {},
}


def test_handler_repairs_every_shard_on_a_scheduled_event(container, clock):
    runs = [insert(container, make_run(job_id=f"j_hd{i}", at=T0 - timedelta(minutes=5))) for i in range(6)]
    result = invoke(SCHEDULED_EVENT)
    assert result["shards"] == [0, 1, 2, 3]
    assert sorted(result["repaired"]) == sorted(r.run_key for r in runs)
    assert result["repairs"]["republish"] == 6


def test_handler_repairs_only_the_shard_named_in_the_rule_input(container, clock):
    runs = [insert(container, make_run(job_id=f"j_hs{i}", at=T0 - timedelta(minutes=5))) for i in range(8)]
    shard = container.runs.open_shard_of(runs[0].job_id)
    expected = sorted(r.run_key for r in runs if container.runs.open_shard_of(r.job_id) == shard)

    result = invoke({"shard": shard})

    assert result["shards"] == [shard]
    assert sorted(result["repaired"]) == expected
    others = [r for r in runs if r.run_key not in expected]
    assert others and all(stored(container, r) == r for r in others)


def second_tick_event(*bodies: str) -> dict[str, Any]:
    """The SQS event the second-tick queue's mapping delivers: one record per body."""
    return {
        "Records": [
            {
                "messageId": f"m-{number}",
                "receiptHandle": f"r-{number}",
                "body": body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1793000000000"},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:jobsched-SecondTickQueue",
            }
            for number, body in enumerate(bodies)
        ]
    }


def test_second_tick_repairs_only_the_shard_its_record_names(container, clock):
    runs = [insert(container, make_run(job_id=f"j_st{i}", at=T0 - timedelta(minutes=5))) for i in range(8)]
    shard = container.runs.open_shard_of(runs[0].job_id)
    expected = [r for r in runs if container.runs.open_shard_of(r.job_id) == shard]

    result = invoke(second_tick_event(json.dumps({"shard": shard})))

    assert result == {"batchItemFailures": []}
    assert expected
    for run in runs:  # repaired (re-touched, so published again), or left as it was
        assert (stored(container, run) == run) == (run not in expected), run.job_id


@pytest.mark.parametrize(
    "body",
    ["", "not json", "[]", "{}", '{"shard": "1"}', '{"shard": -1}', '{"shard": true}', '{"shard": 1.5}'],
)
def test_second_tick_drops_a_record_that_names_no_shard_and_repairs_nothing(container, clock, body):
    runs = [insert(container, make_run(job_id=f"j_sb{i}", at=T0 - timedelta(minutes=5))) for i in range(4)]

    result = invoke(second_tick_event(body))

    assert result == {"batchItemFailures": []}  # dropped: retrying cannot help
    assert all(stored(container, r) == r for r in runs)


def test_second_tick_reports_a_failed_pass_and_still_makes_the_others(container, clock, monkeypatch):
    runs = [insert(container, make_run(job_id=f"j_sf{i}", at=T0 - timedelta(minutes=5))) for i in range(8)]
    shards = sorted({container.runs.open_shard_of(r.job_id) for r in runs})
    assert len(shards) >= 2
    failing, working = shards[0], shards[1]
    real = container.reconciler.reconcile_shard

    def reconcile_shard(shard: int):
        if shard == failing:
            raise JobschedError("throttled after retries")
        return real(shard)

    monkeypatch.setattr(container.reconciler, "reconcile_shard", reconcile_shard)

    result = invoke(second_tick_event(json.dumps({"shard": failing}), json.dumps({"shard": working})))

    assert result == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}
    for run in runs:
        shard = container.runs.open_shard_of(run.job_id)
        assert (stored(container, run) != run) == (shard == working), run.job_id
    assert container.metrics.total("SecondTickPasses") == 1
    # One record a batch (the mapping's size): its pass failing fails the invocation, which
    # the function's error alarm sees, as it sees a rule's pass fail.
    with pytest.raises(BatchProcessingError):
        invoke(second_tick_event(json.dumps({"shard": failing})))


@pytest.fixture
def second_tick_queue(container):
    """A delaying queue like the stack's, and the reconciler's sender pointed at it."""
    from jobsched.store.second_ticks import SecondTicks

    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="second-ticks", Attributes={"DelaySeconds": "30"})["QueueUrl"]
    container.__dict__["second_ticks"] = SecondTicks(sqs, url, container.metrics)
    return url


def test_a_rules_tick_sends_its_shards_second_tick_before_its_pass(container, clock, second_tick_queue):
    from jobsched.handlers.reconciler import second_tick_shard

    sqs = boto3.client("sqs")
    order: list[str] = []
    sent: list[dict[str, Any]] = []
    ticks = container.second_ticks
    real_send, real_pass = ticks._client.send_message, container.reconciler.reconcile_shard

    def send_message(**kwargs: Any) -> Any:
        order.append("send")
        sent.append(kwargs)
        return real_send(**kwargs)

    def reconcile_shard(shard: int) -> Any:
        order.append("pass")
        return real_pass(shard)

    ticks._client = SimpleNamespace(send_message=send_message)
    container.reconciler.reconcile_shard = reconcile_shard

    invoke({"shard": 4 + 3})  # taken modulo the shard count (4), as the pass takes it

    assert order == ["send", "pass"]
    (call,) = sent
    assert "DelaySeconds" not in call  # the queue's own 30 s apply
    assert second_tick_shard(call["MessageBody"]) == 3  # what the second tick reads
    attributes = sqs.get_queue_attributes(QueueUrl=second_tick_queue, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"


def test_the_second_tick_is_sent_with_few_tries_and_short_timeouts(container):
    """The send comes before the pass: an SQS brownout must not eat the pass's 50 s (the
    stores' clients try 6 times with a 10 s read timeout); two tries of at most 3 s each."""
    config = container.second_ticks._client.meta.config
    assert config.retries["total_max_attempts"] == 2 and config.retries["mode"] == "standard"
    assert config.connect_timeout == 1 and config.read_timeout == 2


def test_a_second_tick_not_sent_costs_only_that_tick(container, clock, second_tick_queue):
    runs = [insert(container, make_run(job_id=f"j_ns{i}", at=T0 - timedelta(minutes=5))) for i in range(8)]
    shard = container.runs.open_shard_of(runs[0].job_id)
    boto3.client("sqs").delete_queue(QueueUrl=second_tick_queue)  # every send now refused

    result = invoke({"shard": shard})

    assert result["shards"] == [shard] and result["repaired"]  # the pass is made all the same
    assert container.metrics.total("SecondTicksNotSent") == 1


def test_the_second_tick_and_every_shard_pass_send_no_second_tick(container, clock, second_tick_queue):
    sqs = boto3.client("sqs")
    invoke(second_tick_event(json.dumps({"shard": 1})))  # a second tick makes no third
    invoke(SCHEDULED_EVENT)  # every shard, from an event naming none: no rule sends it
    attributes = sqs.get_queue_attributes(QueueUrl=second_tick_queue, AttributeNames=["All"])["Attributes"]
    assert (
        attributes["ApproximateNumberOfMessages"] == attributes["ApproximateNumberOfMessagesDelayed"] == "0"
    )


# --- end to end: committed but never published, then published by the outbox ---


def stream_records_since(start: int = 0) -> list[dict[str, Any]]:
    """The Runs stream as moto holds it, converted to the records Lambda would deliver."""
    ddb = boto3.client("dynamodb")
    streams = boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=RUNS.default_name)["Table"]["LatestStreamArn"]
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for record in streams.get_records(ShardIterator=iterator)["Records"]:
            record = json.loads(json.dumps(record, default=str))
            record["eventVersion"] = "1.1"
            record["eventSourceARN"] = arn
            record["dynamodb"]["ApproximateCreationDateTime"] = int(T0.timestamp())
            records.append(record)
    return records[start:]


def test_pending_run_never_published_reaches_the_queue_after_repair(container, clock, aws):
    from jobsched.handlers import outbox
    from jobsched_local.lambda_context import InvocationContext

    run = make_run(job_id="j_e2e", due_in=30)
    assert container.runs.insert(run)
    (insert_record,) = stream_records_since()
    assert insert_record["eventName"] == "INSERT" and matches_filter(insert_record)
    # The outbox never ran for that record (lost invocation); nothing is on the queue.
    sqs = boto3.client("sqs")
    url = aws["urls"]["default"]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []

    # Due at +30: a lost publish shows the publish grace after that.
    clock.set(T0 + timedelta(seconds=30 + PUBLISH_GRACE - 1))
    assert container.reconciler.reconcile_all().repaired == []
    clock.set(T0 + timedelta(seconds=30 + PUBLISH_GRACE))
    assert container.reconciler.reconcile_all().repaired == [run.run_key]

    (retouch,) = stream_records_since(1)
    assert retouch["eventName"] == "MODIFY" and matches_filter(retouch)
    assert outbox.handler({"Records": [retouch]}, InvocationContext(function_name="jobsched-outbox")) == {
        "batchItemFailures": []
    }

    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["runKey"] for m in messages] == [run.run_key]
    after = stored(container, run)
    assert after.state is RunState.QUEUED
    assert [(h.actor, h.target) for h in after.history] == [
        ("sweeper", RunState.PENDING),
        ("reconciler", RunState.PENDING),
        ("outbox", RunState.QUEUED),
    ]
    # The outbox's own write does not come back to it.
    assert not any(matches_filter(r) for r in stream_records_since(2))


def test_redriven_run_is_requeued_again_rather_than_dead_lettered(container, clock):
    run = make_run(state=RunState.QUEUED)
    for _ in range(3):  # three requeues without a claim, then dead, then a redrive
        run = advance(run, RunState.PENDING, now=T0, actor="reconciler", reason="requeue")
        run = advance(run, RunState.QUEUED, now=T0, actor="outbox")
    run = advance(run, RunState.DEAD, now=T0, actor="reconciler", error_class="Undeliverable")
    run = advance(run, RunState.PENDING, now=T0, actor="api:tenant-a", reason="redrive", attempt=0)
    run = advance(run, RunState.QUEUED, now=T0, actor="outbox")
    insert(container, run)
    clock.advance(timedelta(minutes=16).total_seconds())
    container.reconciler.reconcile_all()
    assert stored(container, run).state is RunState.PENDING


def test_queued_run_for_external_workers_waits_until_its_max_age(container, clock):
    external = make_run(
        state=RunState.QUEUED, policies=Policies(retry=RetryPolicy(max_age_seconds=3600))
    ).model_copy(update={"target": None})
    insert(container, external)
    reconciler = Reconciler(container.runs, clock, shard_count=4, is_external=lambda run: run.target is None)
    clock.advance(timedelta(minutes=16).total_seconds())
    reconciler.reconcile_all()
    assert stored(container, external).state is RunState.QUEUED  # not requeued: it waits to be leased
    clock.advance(timedelta(minutes=50).total_seconds())
    reconciler.reconcile_all()
    after = stored(container, external)
    assert after.state is RunState.DEAD and after.last_error_class == "Unclaimed"


# --- the open index's check time ---


def test_the_usual_path_leaves_the_open_index_entry_where_insert_put_it(container, clock):
    run = insert(container, make_run(job_id="j_chk1", due_in=120))
    entry = raw_item(run)["deadline_at"]
    assert entry["S"] == format_instant(run.due_at + timedelta(seconds=PUBLISH_GRACE))

    clock.set(T0 + timedelta(seconds=1))
    queued = container.runs.commit(
        run, lambda r: advance(r, RunState.QUEUED, now=clock.now(), actor="outbox")
    )
    assert raw_item(run)["deadline_at"] == entry
    clock.set(run.due_at)
    container.runs.commit(queued, lambda r: claimed(r, at=clock.now(), lease_for=300))
    assert raw_item(run)["deadline_at"] == entry


def test_a_run_still_leased_at_its_check_time_has_its_entry_moved_once_and_can_still_complete(
    container, clock
):
    run = insert(container, leased(job_id="j_chk2", lease_for=600))
    assert raw_item(run)["deadline_at"]["S"] == format_instant(T0 + timedelta(seconds=PUBLISH_GRACE))

    clock.set(T0 + timedelta(seconds=61))
    report = container.reconciler.reconcile_all()
    assert (report.examined, report.moved, report.repaired) == (1, 1, [])
    after = raw_item(run)
    assert after["deadline_at"]["S"] == format_instant(T0 + timedelta(seconds=600 + LEASE_GRACE))
    assert stored(container, run) == run  # bookkeeping only: rev and history unchanged

    clock.set(T0 + timedelta(seconds=120))
    assert container.reconciler.reconcile_all().examined == 0  # not read again every tick

    # The lease holder's completion, conditioned on the rev it read, still goes through.
    done = container.runs.commit(
        run, lambda r: advance(r, RunState.SUCCEEDED, now=clock.now(), actor="worker:w"), holder=True
    )
    assert done.state is RunState.SUCCEEDED
    assert "deadline_at" not in raw_item(run)


def test_moving_the_entry_of_a_run_that_changed_meanwhile_does_nothing(container, clock):
    run = insert(container, leased(job_id="j_chk3", lease_for=600))
    clock.set(T0 + timedelta(seconds=10))
    container.runs.extend_lease(run, T0 + timedelta(seconds=900))
    assert container.runs.move_check(run, T0 + timedelta(seconds=630)) is False
    assert raw_item(run)["deadline_at"]["S"] == format_instant(T0 + timedelta(seconds=PUBLISH_GRACE))


# --- what one job and one tenant may cost a shard ---


def test_a_never_leased_external_run_is_looked_at_once_before_its_max_age(container, clock):
    """An external job's run that nobody leases waits in the claimable index: nothing repairs
    it until its max age, so the reconciler reads it once (its usual check, 10 s after due) and
    then only when it dies, not every 15 minutes for its whole day."""
    external = make_run(state=RunState.QUEUED).model_copy(update={"target": None, "job_type": "render.video"})
    insert(container, external)
    looked = 0
    for _ in range(24 * 4):  # a day of ticks, one every 15 minutes
        clock.advance(15 * 60)
        looked += container.reconciler.reconcile_all().examined
    assert looked == 2  # its usual check, then its death
    after = stored(container, external)
    assert after.state is RunState.DEAD and after.last_error_class == "Unclaimed"


def _jobs_in_one_shard(container, prefix: str, count: int, shard: int) -> list[str]:
    found: list[str] = []
    n = 0
    while len(found) < count:
        job_id = f"j_{prefix}{n}"
        n += 1
        if container.runs.open_shard_of(job_id) == shard:
            found.append(job_id)
    return found


def test_a_hostile_tenant_with_many_overdue_runs_pushes_no_other_tenants_repair_back(container, clock):
    """Three jobs of one tenant hold 90 runs whose leases expired long ago, ahead of another
    tenant's run in the same shard: the other tenant's run is repaired at the first tick, and
    the hostile tenant gets no more than its share of the shard per tick."""
    shard = container.runs.open_shard_of("j_victim")
    for job_id in _jobs_in_one_shard(container, "hog", 3, shard):
        for i in range(30):
            hog = leased(job_id=job_id, lease_for=-600 - i).model_copy(update={"tenant": "hog"})
            insert(
                container,
                hog.model_copy(
                    update={
                        "run_key": f"{job_id}@{format_instant(T0 + timedelta(seconds=i))}",
                        "scheduled_for": T0 + timedelta(seconds=i),
                    }
                ),
            )
    victim = insert(
        container, leased(job_id="j_victim", lease_for=-60).model_copy(update={"tenant": "tenant-b"})
    )
    reconciler = Reconciler(
        container.runs,
        clock,
        shard_count=4,
        batch_limit=10,
        max_per_shard=40,
        max_per_job=5,
        max_per_tenant=15,
    )

    first = reconciler.reconcile_shard(shard)
    assert victim.run_key in first.repaired
    assert stored(container, victim).state is RunState.RETRY_WAIT
    assert len([k for k in first.repaired if not k.startswith("j_victim")]) == 15
    hog_repaired = len(first.repaired) - 1
    while later := reconciler.reconcile_shard(shard).examined:
        assert later <= 15  # the tenant's share a tick, whatever its backlog
        hog_repaired += later
    assert hog_repaired == 90  # and all of it, in turn


# --- how soon a stranded run is repaired ---

# A pass over each shard every 30 s: its rule's tick each minute and the second tick the
# pass sends half a minute later (store.second_ticks). With one pass a minute the budget
# below does not hold (phase 59: 10 + 59 + 20 + 30 > 90).
TICK = 30
RESTART_GOAL = 90  # a stranded run starts again within 90 s of when it should have
# Stream, outbox and a worker's receive after the repair, and a throttled worker invocation
# the poller invokes again (up to 20 s in chaos), generously.
PUBLISH_PATH = 30
PASS = 20  # the pass over the shard before it reaches the run (a burst of a few hundred repairs)


def _first_repair(container, clock, run: Run, start: datetime, phase: int) -> datetime:
    """Tick every TICK seconds from start + phase until the run is repaired; when it was."""
    tick = start + timedelta(seconds=phase)
    while tick < start + timedelta(minutes=10):
        clock.set(tick)
        if run.run_key in container.reconciler.reconcile_all().repaired:
            return tick
        tick += timedelta(seconds=TICK)
    raise AssertionError(f"{run.run_key} not repaired within 10 minutes")


@pytest.mark.parametrize("phase", [0, 1, 9, 10, 11, 19, 20, 21, 29])
def test_a_lost_publish_is_repaired_in_time_to_start_within_90_s_of_due(container, clock, phase):
    run = insert(container, make_run(job_id=f"j_late{phase}", at=T0 - timedelta(seconds=120), due_in=120))
    repaired = _first_repair(container, clock, run, T0, phase)
    assert (repaired - run.due_at).total_seconds() + PASS + PUBLISH_PATH <= RESTART_GOAL


@pytest.mark.parametrize("phase", [0, 1, 9, 10, 11, 19, 20, 21, 29])
def test_a_dead_workers_run_is_repaired_in_time_to_start_within_90_s_of_its_lease(container, clock, phase):
    run = insert(container, leased(job_id=f"j_died{phase}", lease_for=60))
    assert run.lease_expires_at is not None
    repaired = _first_repair(container, clock, run, run.lease_expires_at, phase)
    assert (repaired - run.lease_expires_at).total_seconds() + PASS + PUBLISH_PATH <= RESTART_GOAL
    assert stored(container, run).state is RunState.RETRY_WAIT  # due at once: published now


# --- a lowered shardCount ---


def test_a_lowered_shard_count_still_repairs_open_runs_written_above_it(aws, clock):
    """Runs left open at shardCount 8 keep their open-index shard; reconcilers at shardCount 2
    (one invocation per shard, as the rules invoke them) repair every one of them."""
    from tests.integration.test_sweeper import containers_with_shards

    wide, narrow = containers_with_shards(aws, clock, 8, 2)
    wide.definitions.record_shard_count()
    runs = [make_run(job_id=f"j_wide{i}") for i in range(24)]
    for run in runs:
        assert wide.runs.insert(run)
    old_shards = {wide.runs.open_shard_of(run.job_id) for run in runs}
    assert max(old_shards) >= 2  # some runs sit above the new count
    clock.set(T0 + timedelta(seconds=PUBLISH_GRACE))

    reports = [narrow.reconciler.reconcile_shard(shard) for shard in (0, 1)]

    assert sorted(s for r in reports for s in r.shards) == list(range(8))
    assert sorted(key for r in reports for key in r.repaired) == sorted(run.run_key for run in runs)


# --- the repair sends what it repaired ---


@pytest.mark.sends
@pytest.mark.parametrize("stranded", ["never published", "lease expired", "message lost"])
def test_a_repaired_run_is_sent_by_the_repair_without_its_stream_record(container, clock, aws, stranded):
    """The stream record of the repair's write is lost too (a stream shard held up by a
    failing batch): the run still reaches its queue, sent by the repair itself, once."""
    sqs = boto3.client("sqs")
    url = aws["urls"]["default"]
    if stranded == "never published":
        run = insert(container, make_run())
        clock.set(T0 + timedelta(seconds=PUBLISH_GRACE))
    elif stranded == "lease expired":
        run = insert(container, leased(attempt=1))
        clock.set(T0 + timedelta(seconds=60 + LEASE_GRACE))
    else:
        run = insert(container, make_run(state=RunState.QUEUED))
        clock.set(T0 + timedelta(minutes=15))
    report = container.reconciler.reconcile_all()
    assert report.repaired == [run.run_key], report
    after = stored(container, run)
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    assert after.state is RunState.QUEUED, after.history[-1]
    assert [json.loads(m["Body"])["runKey"] for m in messages] == [run.run_key]


@pytest.mark.sends
def test_a_repair_whose_send_fails_is_still_made_and_the_stream_record_publishes_it(
    container, clock, aws, monkeypatch
):
    run = insert(container, make_run())
    clock.set(T0 + timedelta(seconds=PUBLISH_GRACE))

    def throttled(queue, entries):
        raise RuntimeError("ThrottlingException: SendMessageBatch")

    monkeypatch.setattr(container.queues, "publish", throttled)
    report = container.reconciler.reconcile_all()
    assert report.republish == 1 and report.repaired == [run.run_key] and report.failed == 0
    after = stored(container, run)
    # The outbox put it back: PENDING, its stream record (or the next tick) publishes it.
    assert after.state is RunState.PENDING, after.history[-1]


class RefusingTwice:
    """A client whose named calls are refused as throttled (after the SDK's own retries) the
    first `times` times each, as a busy partition or a new table's capacity would."""

    def __init__(self, client: Any, calls: tuple[str, ...], times: int = 2) -> None:
        self._client = client
        self._left = dict.fromkeys(calls, times)

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if self._left.get(name, 0) <= 0:
            return call

        def refused(**kwargs: Any) -> Any:
            self._left[name] -= 1
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, name)

        return refused


@pytest.mark.parametrize("refused", ["query", "batch_get_item"])
def test_a_read_refused_after_the_sdk_retries_is_tried_again_within_the_tick(container, clock, refused):
    """One lost read must not cost every overdue run of its shard a tick (a minute late): the
    pass tries it again after a pause, and the run is repaired by this tick."""
    run = insert(container, make_run(job_id="j_throttled", at=T0 - timedelta(minutes=5)))
    store = RunStore(RefusingTwice(boto3.client("dynamodb"), (refused,)), RUNS.default_name, 4)
    pauses: list[float] = []
    clock.sleep = pauses.append
    report = Reconciler(store, clock, shard_count=4).reconcile_all()
    assert report.repaired == [run.run_key] and report.failed == 0
    assert len(pauses) == 2


def test_a_read_refused_every_time_loses_only_its_own_shards_tick(container, clock):
    """Refused at each of its tries and once more at the end of the pass: the run waits for
    the next tick, and only its shard's pass is the worse for it."""
    run = insert(container, make_run(job_id="j_throttled", at=T0 - timedelta(minutes=5)))
    store = RunStore(
        RefusingTwice(boto3.client("dynamodb"), ("batch_get_item",), times=4), RUNS.default_name, 4
    )
    clock.sleep = lambda seconds: None
    reconciler = Reconciler(store, clock, shard_count=4)
    assert reconciler.reconcile_all().failed == 1
    assert reconciler.reconcile_all().repaired == [run.run_key]


@pytest.mark.sends
def test_a_repair_whose_send_is_refused_once_is_sent_again_within_the_tick(
    container, clock, aws, monkeypatch
):
    """A refused send put the run back to PENDING; the repair sends it again after a pause,
    not a tick (a minute) later."""
    run = insert(container, make_run())
    clock.set(T0 + timedelta(seconds=PUBLISH_GRACE))
    real = container.queues.publish
    refusals = iter([True])

    def refused_once(queue, entries):
        if next(refusals, False):
            raise RuntimeError("ThrottlingException: SendMessageBatch")
        return real(queue, entries)

    monkeypatch.setattr(container.queues, "publish", refused_once)
    pauses: list[float] = []
    monkeypatch.setattr(clock, "sleep", pauses.append)
    assert container.reconciler.reconcile_all().repaired == [run.run_key]
    after = stored(container, run)
    assert after.state is RunState.QUEUED, after.history[-1]
    assert [h.reason for h in after.history].count("publish failed") == 1
    messages = boto3.client("sqs").receive_message(QueueUrl=aws["urls"]["default"], MaxNumberOfMessages=10)
    assert [json.loads(m["Body"])["runKey"] for m in messages.get("Messages", [])] == [run.run_key]
    assert pauses == [0.5]


def test_a_pass_waits_out_refusals_only_within_its_budget(container, clock):
    """Every read refused: the pass pauses at most MAX_PAUSES_PER_PASS_SECONDS in all, then
    gives its tick up, well inside the reconciler's 50 s."""
    from jobsched.services.reconciler import MAX_PAUSES_PER_PASS_SECONDS

    for i in range(4):
        insert(container, make_run(job_id=f"j_budget{i}", at=T0 - timedelta(minutes=5)))
    store = RunStore(
        RefusingTwice(boto3.client("dynamodb"), ("batch_get_item",), times=99), RUNS.default_name, 4
    )
    pauses: list[float] = []
    clock.sleep = pauses.append
    reconciler = Reconciler(store, clock, shard_count=1, batch_limit=1)
    assert reconciler.reconcile_all().failed >= 2
    assert sum(pauses) <= MAX_PAUSES_PER_PASS_SECONDS


class RefusingRuns:
    """A client that refuses, as throttled after the SDK's retries, the next `times` calls of
    `call` that name one of `values` (a job id, a run's sort key); the rest reach the table."""

    def __init__(self, client: Any, call: str, values: set[str], times: int) -> None:
        self._client = client
        self._call = call
        self._values = values
        self.left = times

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if name != self._call:
            return call

        def maybe_refused(**kwargs: Any) -> Any:
            if self.left > 0 and any(f'"{value}"' in json.dumps(kwargs) for value in self._values):
                self.left -= 1
                from botocore.exceptions import ClientError

                raise ClientError(
                    {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, name
                )
            return call(**kwargs)

        return maybe_refused


@pytest.mark.parametrize("stranded", ["never published", "lease expired"])
def test_a_repair_whose_write_is_refused_once_is_made_again_within_the_tick(container, clock, stranded):
    """The store refuses the repair's write (throttled after the SDK's retries, or a timeout):
    the pass tries it again before it ends, and the run is repaired at this tick, not a minute
    later at the next."""
    if stranded == "never published":
        run = insert(container, make_run(job_id="j_refused"))
        clock.set(T0 + timedelta(seconds=PUBLISH_GRACE))
        repaired = RunState.PENDING
    else:
        run = insert(container, leased(job_id="j_refused", attempt=1))
        clock.set(T0 + timedelta(seconds=60 + LEASE_GRACE))
        repaired = RunState.RETRY_WAIT
    client = RefusingRuns(boto3.client("dynamodb"), "put_item", {run.job_id}, times=1)
    store = RunStore(client, RUNS.default_name, 4)
    pauses: list[float] = []
    clock.sleep = pauses.append

    report = Reconciler(store, clock, shard_count=4).reconcile_all()

    assert client.left == 0  # the first write was refused
    assert report.repaired == [run.run_key] and report.failed == 0 and report.examined == 1
    after = stored(container, run)
    assert after.state is repaired and after.rev == run.rev + 1 and after.updated_at == clock.now()
    assert sum(pauses) <= 0.5


def test_a_late_runs_repair_refused_after_its_late_note_is_still_made_within_the_tick(container, clock):
    """A run that has become late is noted (a write) before its repair: the note lands, the
    repair's write is refused. Tried again, the repair is judged from the run as first read,
    not from the note (which would put the run's deadline a grace past now)."""
    from jobsched.domain.models import Notification, NotifyOn

    notify = [Notification(on=[NotifyOn.LATE], late_seconds=45, target=TARGET)]
    run = insert(
        container, make_run(job_id="j_late_refused", notify=notify, late_at=T0 + timedelta(seconds=45))
    )
    clock.set(T0 + timedelta(seconds=60))
    assert run.late_unnoticed(clock.now())

    class RefusingTheRepair(RefusingRuns):
        def __getattr__(self, name: str) -> Any:
            call = getattr(self._client, name)
            if name != "put_item":
                return call

            def maybe_refused(**kwargs: Any) -> Any:
                if self.left > 0 and "republish" in json.dumps(kwargs):
                    self.left -= 1
                    from botocore.exceptions import ClientError

                    raise ClientError(
                        {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, name
                    )
                return call(**kwargs)

            return maybe_refused

    client = RefusingTheRepair(boto3.client("dynamodb"), "put_item", set(), times=1)
    clock.sleep = lambda seconds: None
    report = Reconciler(RunStore(client, RUNS.default_name, 4), clock, shard_count=4).reconcile_all()

    assert client.left == 0  # the repair's first write was refused
    assert report.repaired == [run.run_key] and report.failed == 0 and report.late == 1
    after = stored(container, run)
    assert [(h.reason, h.at) for h in reconciler_entries(after)] == [
        ("late", clock.now()),
        ("republish", clock.now()),
    ]


def test_a_batch_refused_for_one_jobs_hot_partition_holds_back_no_other_jobs_run(container, clock):
    """One job's partition refuses every read this tick (a hot key): the other runs that
    shared its batch are read again without it and repaired at this tick; the hot job's run
    waits for the next."""
    hot_job, *cold_jobs = _jobs_in_one_shard(container, "hot", 4, shard=0)
    hot = insert(container, make_run(job_id=hot_job, at=T0 - timedelta(minutes=5)))
    cold = [insert(container, make_run(job_id=job_id, at=T0 - timedelta(minutes=5))) for job_id in cold_jobs]
    client = RefusingRuns(boto3.client("dynamodb"), "batch_get_item", {hot.job_id}, times=99)
    clock.sleep = lambda seconds: None
    reconciler = Reconciler(RunStore(client, RUNS.default_name, 4), clock, shard_count=4, batch_limit=10)

    first = reconciler.reconcile_shard(0)

    assert sorted(first.repaired) == sorted(run.run_key for run in cold)
    assert first.failed == 1
    client.left = 0  # the burst is over
    assert reconciler.reconcile_shard(0).repaired == [hot.run_key]
