"""The worker on moto, one test per failure window. An effect ledger counts every effect
a Python handler performs, so "one effect per run" is checked, not assumed."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections import Counter
from datetime import timedelta

import boto3
import pytest
from jobsched.domain.effects import RECORD_GRACE
from jobsched.domain.errors import PermanentError, RetryableError
from jobsched.domain.runs import RunState
from jobsched.services import worker as worker_module
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Received
from jobsched.targets import HandlerRegistry

from tests.helpers import T0, claimed, make_worker


class Ledger:
    """Every effect, by run key: the property under test is that no key appears twice."""

    def __init__(self) -> None:
        self.effects: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def effect(self, run_key: str) -> None:
        with self.lock:
            self.effects[run_key] += 1


@pytest.fixture
def ledger():
    return Ledger()


@pytest.fixture
def registry(ledger):
    reg = HandlerRegistry()

    @reg.register("ok")
    def ok(payload, invocation):
        ledger.effect(invocation.run_key)
        return {"done": invocation.run_key, "attempt": invocation.attempt}

    @reg.register("down")
    def down(payload, invocation):
        ledger.calls[invocation.run_key] += 1
        raise RetryableError("downstream 503", error_class="HTTP503")

    @reg.register("bad")
    def bad(payload, invocation):
        ledger.calls[invocation.run_key] += 1
        raise PermanentError("payload rejected", error_class="HTTP400")

    @reg.register("slow")
    def slow(payload, invocation):
        time.sleep(1.5)
        ledger.effect(invocation.run_key)
        return "late"

    return reg


@pytest.fixture
def worker(container, registry):
    return make_worker(container, registry)


def one_run(container, clock, job_type="ok", **body):
    """A one-time job due now; creation materialises its single run."""
    from jobsched.api_models.requests import JobBody

    fields = {"name": "n", "type": job_type, "runAt": "2026-11-02T08:00:00Z", **body}
    spec = JobBody.model_validate({k: v for k, v in fields.items() if v is not None})
    job = container.jobs.create("tenant-a", spec.to_spec()).job
    runs = container.runs.list_for_job(job.job_id, limit=10, cursor=None).items
    return job, min(runs, key=lambda r: r.scheduled_for)


def delivery(run, queue="default"):
    return Received(run.run_key, run.job_id, run.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ"), queue)


def stored(container, run):
    return container.runs.get_by_key(run.run_key)


def queue_messages(container, queue, dlq=False):
    sqs = boto3.client("sqs")
    url = (container.queues.dlq_urls if dlq else container.queues.urls)[queue]
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesDelayed"])


def test_run_succeeds_with_history(container, clock, worker, ledger):
    _, run = one_run(container, clock)
    result = worker.process(delivery(run))
    assert result.outcome is AttemptOutcome.SUCCEEDED
    done = stored(container, run)
    assert done.state is RunState.SUCCEEDED and done.fence == 1 and done.attempt == 1
    assert done.result == {"done": run.run_key, "attempt": 1}
    assert [(t.source, t.target, t.actor, t.fence) for t in done.history] == [
        (None, RunState.PENDING, "sweeper", 0),
        (RunState.PENDING, RunState.LEASED, "worker:w1", 1),
        (RunState.LEASED, RunState.SUCCEEDED, "worker:w1", 1),
    ]
    assert ledger.effects[run.run_key] == 1
    assert container.definitions.counters(run.job_id)[0]["succeeded"] == 1


def test_duplicate_deliveries_have_one_effect(container, clock, worker, ledger):
    _, run = one_run(container, clock)
    outcomes = [worker.process(delivery(run)).outcome for _ in range(3)]
    assert outcomes == [AttemptOutcome.SUCCEEDED, AttemptOutcome.DUPLICATE, AttemptOutcome.DUPLICATE]
    assert ledger.effects[run.run_key] == 1


def test_a_late_duplicate_after_success_writes_nothing_and_acts_nothing(container, clock, worker, ledger):
    # Past the lease and past a day (the idempotency records' lifetime): the finished run
    # itself answers, with no replay, no effect and no write.
    _, run = one_run(container, clock)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    done = stored(container, run)
    for later in (61, 86_400):
        clock.advance(later)
        assert worker.process(delivery(run)).outcome is AttemptOutcome.DUPLICATE
    assert stored(container, run) == done
    assert ledger.effects[run.run_key] == 1


def test_concurrent_duplicate_deliveries_have_one_effect(container, clock, registry, ledger):
    from tests.helpers import SerializedClient

    container.runs._db = SerializedClient(container.runs._db)
    container.definitions._db = SerializedClient(container.definitions._db)
    _, run = one_run(container, clock)
    workers = [make_worker(container, registry, name=f"w{i}") for i in range(4)]
    results = []
    threads = [threading.Thread(target=lambda w=w: results.append(w.process(delivery(run)))) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.outcome.value for r in results).count("succeeded") == 1
    assert ledger.effects[run.run_key] == 1


def test_crash_after_the_completion_write_acts_once_and_redelivery_finds_the_run_done(
    container, clock, worker, ledger, monkeypatch
):
    _, run = one_run(container, clock)
    real_commit = container.runs.commit

    def crash_after_success(read, change, **kw):
        written = real_commit(read, change, **kw)
        if written.state is RunState.SUCCEEDED:
            raise ConnectionError("worker died after the completion, before its follow-ups and the ack")
        return written

    monkeypatch.setattr(container.runs, "commit", crash_after_success)
    with pytest.raises(ConnectionError):
        worker.process(delivery(run))
    monkeypatch.setattr(container.runs, "commit", real_commit)
    assert stored(container, run).state is RunState.SUCCEEDED
    clock.advance(61)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DUPLICATE
    assert ledger.effects[run.run_key] == 1


def test_a_crash_before_the_completion_repeats_the_effect_only_after_the_invocations_deadline(
    container, clock, worker, ledger, monkeypatch
):
    """The completion is the first write after the effect (Powertools' save was too): dying
    before it leaves the attempt's in-progress record, so no attempt acts again while the dead
    invocation could still be running; after its deadline (and the clock-skew grace) the run
    is delivered at least once."""
    _, run = one_run(container, clock)
    real_commit = container.runs.commit

    def crash_on_success(read, change, **kw):
        if change(read).state is RunState.SUCCEEDED:
            raise ConnectionError("worker died after the effect")
        return real_commit(read, change, **kw)

    monkeypatch.setattr(container.runs, "commit", crash_on_success)
    with pytest.raises(ConnectionError):
        worker.process(delivery(run))
    monkeypatch.setattr(container.runs, "commit", real_commit)
    assert ledger.effects[run.run_key] == 1
    assert stored(container, run).state is RunState.LEASED

    # SQS redelivers while the lease is live: nothing happens (a delivery without a receipt
    # handle cannot keep its message for after the lease).
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DUPLICATE
    # After the lease, before the invocation's deadline (900 s without a Lambda context).
    clock.advance(61)
    waited = worker.process(delivery(run))
    assert waited.outcome is AttemptOutcome.RETRY_SCHEDULED and waited.error_class == "InProgress"
    assert waited.run.due_at == T0 + timedelta(seconds=900) + RECORD_GRACE and waited.run.attempt == 1
    assert ledger.effects[run.run_key] == 1
    clock.set(waited.run.due_at - timedelta(seconds=3))
    early = worker.process(delivery(run))
    assert early.outcome is AttemptOutcome.DEFERRED and ledger.effects[run.run_key] == 1
    clock.set(waited.run.due_at)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    assert ledger.effects[run.run_key] == 2


def test_a_successful_effect_is_followed_by_one_write_to_its_run(
    container, clock, worker, ledger, monkeypatch
):
    """The completion records the effect's result: no separate save before it."""
    _, run = one_run(container, clock)
    real_commit = container.runs.commit
    writes = []

    def counted(read, change, **kw):
        written = real_commit(read, change, **kw)
        writes.append((written.state, ledger.effects[run.run_key]))
        return written

    monkeypatch.setattr(container.runs, "commit", counted)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    assert [state for state, effects in writes if effects == 1] == [RunState.SUCCEEDED]
    assert stored(container, run).result == {"done": run.run_key, "attempt": 1}


def test_crash_before_the_effect_runs_it_once_later(container, clock, worker, ledger, monkeypatch):
    _, run = one_run(container, clock)
    monkeypatch.setattr(container.definitions, "get", lambda job_id: (_ for _ in ()).throw(ConnectionError()))
    with pytest.raises(ConnectionError):
        worker.process(delivery(run))
    monkeypatch.undo()
    assert ledger.effects[run.run_key] == 0
    # The failed attempt gave its in-progress record back: the next claim, once the lease has
    # expired, runs the effect.
    clock.advance(61)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    assert ledger.effects[run.run_key] == 1


class _Killed(BaseException):
    """The invocation is killed (timeout, out of memory): no handler code runs after this."""


def test_an_invocation_killed_before_the_effect_leaves_no_record_to_wait_for(
    container, clock, worker, ledger, monkeypatch
):
    _, run = one_run(container, clock)

    def killed(job_id):
        raise _Killed()

    monkeypatch.setattr(container.definitions, "get", killed)
    with pytest.raises(_Killed):
        worker.process(delivery(run))
    monkeypatch.undo()
    # The in-progress record is written just before the effect, not by the claim: an attempt
    # killed before it leaves none, so the next one, once the lease has expired, acts at once.
    assert stored(container, run).effect_fence is None
    clock.advance(61)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    assert ledger.effects[run.run_key] == 1


def test_old_worker_finishing_after_its_lease_was_taken_is_rejected(container, clock, registry, ledger):
    _, run = one_run(container, clock)
    old = make_worker(container, registry, name="old")
    new = make_worker(container, registry, name="new")
    inner = {}

    @registry.register("takeover")
    def takeover(payload, invocation):
        # While the old worker is inside the effect its lease expires and another worker claims.
        clock.advance(61)
        inner["result"] = new.process(delivery(run))
        ledger.effect(invocation.run_key)
        return "old-worker-result"

    _, run = one_run(container, clock, job_type="takeover", name="t")
    outcome = old.process(delivery(run))
    assert outcome.outcome is AttemptOutcome.STALE
    # The new worker found the effect in progress under the old lease and scheduled a retry.
    assert inner["result"].outcome is AttemptOutcome.RETRY_SCHEDULED
    current = stored(container, run)
    assert current.state is RunState.RETRY_WAIT and current.fence == 2
    assert current.result is None  # the stale completion was never applied
    # The retry completes from the saved effect: still one effect.
    clock.set(current.due_at)
    assert new.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    assert ledger.effects[run.run_key] == 1
    assert stored(container, run).result == "old-worker-result"


def test_downstream_outage_backs_off_and_dead_letters_after_max_attempts(container, clock, worker, ledger):
    _, run = one_run(
        container, clock, job_type="down", maxAttempts=4, retry={"baseSeconds": 2, "capSeconds": 10}
    )
    delays = []
    for attempt in range(1, 5):
        result = worker.process(delivery(run))
        current = stored(container, run)
        assert current.attempt == attempt
        if attempt < 4:
            assert result.outcome is AttemptOutcome.RETRY_SCHEDULED
            delay = (current.due_at - clock.now()).total_seconds()
            assert 1 <= delay <= min(10, 2 * 2 ** (attempt - 1)) + 1
            delays.append(delay)
            if delay > 2:  # delivered early (beyond clock skew): deferred, not executed
                assert worker.process(delivery(run)).outcome is AttemptOutcome.DEFERRED
            clock.set(current.due_at)
        else:
            assert result.outcome is AttemptOutcome.DEAD
    assert ledger.calls[run.run_key] == 4  # attempts never exceed the policy
    dead = stored(container, run)
    assert dead.state is RunState.DEAD and dead.last_error_class == "HTTP503"
    assert queue_messages(container, "default", dlq=True) == 1
    body = json.loads(
        boto3.client("sqs").receive_message(QueueUrl=container.queues.dlq_urls["default"])["Messages"][0][
            "Body"
        ]
    )
    assert body["runKey"] == run.run_key and "HTTP503" in body["reason"]


def test_max_age_stops_retries(container, clock, worker, ledger):
    _, run = one_run(
        container,
        clock,
        job_type="down",
        maxAttempts=50,
        retry={"baseSeconds": 60, "capSeconds": 60, "maxAgeSeconds": 100},
    )
    outcomes = []
    for _ in range(10):
        outcomes.append(worker.process(delivery(run)).outcome)
        if outcomes[-1] is AttemptOutcome.DEAD:
            break
        clock.set(stored(container, run).due_at)
    assert outcomes[-1] is AttemptOutcome.DEAD and len(outcomes) < 10


def test_permanent_error_is_not_retried(container, clock, worker, ledger):
    _, run = one_run(container, clock, job_type="bad", maxAttempts=5)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DEAD
    assert ledger.calls[run.run_key] == 1
    assert stored(container, run).last_error_class == "HTTP400"


def test_missing_handler_is_permanent(container, clock, worker):
    _, run = one_run(container, clock, job_type="nobody.handles.this")
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DEAD
    assert stored(container, run).last_error_class == "NoHandler"


def test_pause_acknowledged_while_queued_stops_the_effect(container, clock, worker, ledger):
    job, run = one_run(container, clock)
    # The job completes (one-time) but a paused or cancelled job must stop its queued run.
    from jobsched.domain.models import JobState

    stored_job = container.definitions.get(job.job_id)
    container.definitions.save(stored_job.model_copy(update={"state": JobState.PAUSED}))
    result = worker.process(delivery(run))
    # Held for resume to decide (missedRuns), with the attempt it had begun given back.
    assert result.outcome is AttemptOutcome.HELD
    assert ledger.effects[run.run_key] == 0
    held = stored(container, run)
    assert (held.state, held.blocked_by, held.attempt, held.fence) == (RunState.PENDING, "job-paused", 0, 1)
    assert held.history[-1].reason == "job paused"
    # A held run is neither published nor claimable: a stray delivery does nothing.
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DUPLICATE


def test_pause_of_a_cancelled_job_cancels_its_queued_run(container, clock, worker, ledger):
    job, run = one_run(container, clock)
    from jobsched.domain.models import JobState

    stored_job = container.definitions.get(job.job_id)
    container.definitions.save(stored_job.model_copy(update={"state": JobState.CANCELLED}))
    assert worker.process(delivery(run)).outcome is AttemptOutcome.CANCELLED
    assert ledger.effects[run.run_key] == 0
    assert stored(container, run).reason == "job cancelled before the effect"


def test_pause_through_the_api_stops_queued_runs(container, clock, worker, ledger):
    from jobsched.api_models.requests import JobBody

    spec = JobBody.model_validate({"name": "n", "type": "ok", "every": 30}).to_spec()
    job = container.jobs.create("tenant-a", spec).job
    runs = container.runs.list_for_job(job.job_id, limit=10, cursor=None).items
    assert len(runs) == 5
    container.jobs.pause("tenant-a", job.job_id)
    for run in runs:
        clock.set(max(clock.now(), run.due_at))
        assert worker.process(delivery(run)).outcome is AttemptOutcome.HELD
    assert sum(ledger.effects.values()) == 0


def test_early_delivery_is_handed_back_to_the_outbox_not_resent(container, clock, worker, ledger):
    _, run = one_run(container, clock, runAt="2026-11-02T08:01:00Z")
    result = worker.process(delivery(run))
    assert result.outcome is AttemptOutcome.DEFERRED and result.error_class == "not_due"
    # The worker sends nothing (no worker -> SQS -> worker chain): the outbox publishes the
    # run again, delayed to its due instant.
    assert queue_messages(container, "default") == 0
    assert stored(container, run).deferred_until == T0 + timedelta(seconds=60)
    assert ledger.effects[run.run_key] == 0
    assert stored(container, run).state is RunState.PENDING


def test_overlap_skip_skips_while_the_previous_run_is_open(container, clock, worker, ledger):
    from jobsched.api_models.requests import JobBody

    spec = JobBody.model_validate({"name": "n", "type": "ok", "every": 60, "overlap": "skip"}).to_spec()
    job = container.jobs.create("tenant-a", spec).job
    first, second, third = sorted(
        container.runs.list_for_job(job.job_id, limit=10, cursor=None).items, key=lambda r: r.scheduled_for
    )
    assert second.previous_run_key == first.run_key
    clock.set(second.due_at)
    assert worker.process(delivery(second)).outcome is AttemptOutcome.SKIPPED  # first never ran: still open
    assert worker.process(delivery(first)).outcome is AttemptOutcome.SUCCEEDED
    clock.set(third.due_at)
    assert worker.process(delivery(third)).outcome is AttemptOutcome.SUCCEEDED  # its previous is terminal
    assert container.definitions.counters(job.job_id)[0]["overlap_skipped"] == 1


def test_overlap_buffer_one_waits_behind_a_running_run_and_drops_the_rest(container, clock, worker, ledger):
    from jobsched.api_models.requests import JobBody

    spec = JobBody.model_validate({"name": "n", "type": "ok", "every": 60, "overlap": "buffer-one"}).to_spec()
    job = container.jobs.create("tenant-a", spec).job
    first, second, third = sorted(
        container.runs.list_for_job(job.job_id, limit=10, cursor=None).items, key=lambda r: r.scheduled_for
    )
    running = claimed(first, at=clock.now(), lease_for=600, owner="x")
    container.runs.commit(first, lambda _: running)
    clock.set(third.due_at)
    # second is buffered behind the running first; third finds second still waiting: dropped.
    buffered = worker.process(delivery(second))
    assert buffered.outcome is AttemptOutcome.DEFERRED and buffered.error_class == "buffered"
    assert worker.process(delivery(third)).outcome is AttemptOutcome.SKIPPED
    assert stored(container, second).state is RunState.PENDING


def test_a_worker_refuses_tenant_slots_its_completer_would_not_release(container, registry):
    """A claim takes its slot from the slots its ending releases: a completer without them
    (or with others) would leave every ended claim's slot held until it is taken over."""
    from jobsched.services.completion import Completer
    from jobsched.store.tenant_slots import TenantSlots

    slots = TenantSlots(container.runs, 1)
    unreleasing = Completer(container.definitions, container.runs, container.queues, container.clock)
    with pytest.raises(ValueError, match="completer"):
        make_worker(container, registry, completer=unreleasing, tenant_slots=slots)
    releasing = Completer(
        container.definitions, container.runs, container.queues, container.clock, slots=slots
    )
    assert (
        make_worker(container, registry, completer=releasing, tenant_slots=slots).attempts.completer.slots
        is slots
    )


def test_tenant_over_its_concurrency_limit_is_delayed_not_dropped(container, clock, registry, ledger):
    limited = make_worker(container, registry, tenant_concurrency=1)
    _, busy = one_run(container, clock, name="a")
    _, waiting = one_run(container, clock, name="b")
    hold_a_slot(container, clock, busy, limit=1, lease_for=60)
    result = limited.process(delivery(waiting))
    assert result.outcome is AttemptOutcome.DEFERRED and result.error_class == "tenant_limit"
    # Handed back to the outbox to be published after the wait; the worker sent nothing.
    assert stored(container, waiting).deferred_until == clock.now() + timedelta(seconds=1)
    assert queue_messages(container, "default") == 0
    clock.advance(67)  # the held lease expired (and the takeover margin passed): room again
    assert limited.process(delivery(waiting)).outcome is AttemptOutcome.SUCCEEDED


# --- a run waiting for its tenant's slots looks at them before it reads the run ---


def waiting_delivery(container, run, *, receive_count=2, message=None):
    """`run`'s message really sent and received (a real receipt handle), as the handler turns
    it into a delivery: with the tenant and due instant the message names, received for the
    `receive_count`-th time (by default, back from a first wait)."""
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from jobsched.handlers.worker import delivery_of
    from jobsched.store.queues import RunMessage

    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    sqs.send_message(QueueUrl=url, MessageBody=(message or RunMessage.of(run)).to_json())
    (received,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
    record = sqs_record(run, received["MessageId"])
    record["receiptHandle"] = received["ReceiptHandle"]
    record["body"] = received["Body"]
    record["attributes"]["ApproximateReceiveCount"] = str(receive_count)
    return delivery_of(SQSRecord(record), "default")


class Counting:
    """Counts the calls of one method of an object, passing them on."""

    def __init__(self, monkeypatch, target, name):
        self.calls = 0
        real = getattr(target, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(target, name, counted)


def test_a_run_of_a_full_tenant_waits_in_place_without_its_run_being_read(
    container, clock, registry, monkeypatch
):
    from jobsched.services.worker import tenant_wait

    limited = make_worker(container, registry, tenant_concurrency=1)
    _, busy = one_run(container, clock, name="a")
    _, waiting = one_run(container, clock, name="b")
    hold_a_slot(container, clock, busy, limit=1, lease_for=60)
    clock.advance(5)
    d = waiting_delivery(container, waiting)
    assert d.tenant == "tenant-a" and d.due_at == waiting.due_at
    reads = Counting(monkeypatch, container.runs, "get_by_key")
    result = limited.process(d)
    assert result.outcome is AttemptOutcome.DEFERRED and result.error_class == "tenant_limit"
    assert result.redeliver and reads.calls == 0
    # The wait a refused claim would have drawn, from the time since the run was due.
    assert result.wait_seconds == tenant_wait(5.0, waiting.run_key, 2)
    time.sleep(1.2)  # past the 1 s visibility it was received with: the wait holds it longer
    url = container.queues.urls["default"]
    assert boto3.client("sqs").receive_message(QueueUrl=url).get("Messages", []) == []
    assert stored(container, waiting) == waiting  # nothing written


def test_a_look_that_finds_a_free_slot_is_the_claims_only_read_of_the_slots(
    container, clock, registry, ledger, monkeypatch
):
    from jobsched.store.tenant_slots import TenantSlots

    limited = make_worker(container, registry, tenant_concurrency=2)
    _, busy = one_run(container, clock, name="a")
    _, waiting = one_run(container, clock, name="b")
    hold_a_slot(container, clock, busy, limit=2)
    looks = Counting(monkeypatch, TenantSlots, "holders")
    assert limited.process(waiting_delivery(container, waiting)).outcome is AttemptOutcome.SUCCEEDED
    assert looks.calls == 1 and ledger.effects[waiting.run_key] == 1


def test_a_run_whose_own_earlier_claim_holds_the_only_slot_waits_for_it_to_lapse(
    container, clock, registry, ledger
):
    """Its own earlier claim's slot counts like any other until that lease has been over
    for `steal_after` (its holder, if its clock lags, may renew it until then): the look
    defers the run until then, and the claim after it takes the slot over."""
    from jobsched.store.tenant_slots import STEAL_AFTER

    limited = make_worker(container, registry, tenant_concurrency=1)
    _, run = one_run(container, clock)
    hold_a_slot(container, clock, run, limit=1, lease_for=60)  # its own claim, whose worker died
    clock.advance(61)
    waited = limited.process(waiting_delivery(container, run))
    assert waited.outcome is AttemptOutcome.DEFERRED and waited.error_class == "tenant_limit"
    clock.advance(STEAL_AFTER.total_seconds())
    assert limited.process(waiting_delivery(container, run)).outcome is AttemptOutcome.SUCCEEDED
    assert ledger.effects[run.run_key] == 1


@pytest.mark.parametrize(
    "why",
    ["first receive", "not due yet", "no due instant", "bad due instant", "receives spent", "wait not set"],
)
def test_a_delivery_that_may_not_look_first_reads_its_run_as_before(
    container, clock, registry, monkeypatch, why
):
    from dataclasses import replace

    from jobsched.store.queues import RunMessage

    limited = make_worker(container, registry, tenant_concurrency=1)
    _, busy = one_run(container, clock, name="a")
    _, waiting = one_run(container, clock, name="b")
    hold_a_slot(container, clock, busy, limit=1, lease_for=60)
    due = {"no due instant": None, "bad due instant": "tomorrow", "not due yet": "2026-11-02T08:10:00Z"}
    message = replace(RunMessage.of(waiting), due_at=due[why]) if why in due else None
    receives = {"first receive": 1, "receives spent": 6}.get(why, 2)
    d = waiting_delivery(container, waiting, message=message, receive_count=receives)
    if why == "wait not set":
        monkeypatch.setattr(container.queues, "change_visibility", throttled_after_retries)
    reads = Counting(monkeypatch, container.runs, "get_by_key")
    result = limited.process(d)
    # The run as stored decides (its due instant is the stored one, whatever the message says).
    assert result.outcome is AttemptOutcome.DEFERRED and result.error_class == "tenant_limit"
    assert reads.calls >= 1
    if why in ("receives spent", "wait not set"):
        # The look could not keep the message: the run waits in the outbox instead.
        assert not result.redeliver
        assert stored(container, waiting).deferred_until == clock.now() + timedelta(seconds=1)


class _Invocation:
    """A Lambda context: one invocation, one batch."""

    aws_request_id = "batch-1"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def hold_a_slot(container, clock, run, *, limit, lease_for=3600):
    """A live lease of `run`'s tenant held elsewhere, through the tenant's slots."""
    from jobsched.store.tenant_slots import TenantSlots

    TenantSlots(container.runs, limit).claim(
        run, lambda r: claimed(r, at=clock.now(), lease_for=lease_for, owner="x"), now=clock.now()
    )


def test_a_batch_shares_its_tenants_free_slots_exactly(container, clock, registry, ledger, monkeypatch):
    """Limit 2, one lease held elsewhere, three of the tenant's runs in one batch at once: one
    claims, two wait (each claim takes a tenant slot in the same write as the run). The effect
    that runs is held until the other two have been answered, so its slot stays taken."""
    deferred = threading.Semaphore(0)

    @registry.register("held")
    def held(payload, invocation_):
        for _ in range(2):
            deferred.acquire(timeout=30)
        ledger.effect(invocation_.run_key)
        return "ok"

    batch = make_worker(container, registry, tenant_concurrency=2).for_invocation(_Invocation())
    _, busy = one_run(container, clock, name="busy")
    hold_a_slot(container, clock, busy, limit=2)
    runs = [one_run(container, clock, job_type="held", name=f"r{i}")[1] for i in range(3)]
    start = threading.Barrier(3)
    results = []

    def record(run):
        start.wait()
        result = batch.process(delivery(run))
        results.append(result)
        if result.outcome is AttemptOutcome.DEFERRED:
            deferred.release()

    threads = [threading.Thread(target=record, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.outcome.value for r in results) == ["deferred", "deferred", "succeeded"]
    assert sum(ledger.effects.values()) == 1


def test_a_slot_taken_for_a_claim_that_did_not_happen_is_given_back(container, clock, registry, ledger):
    batch = make_worker(container, registry, tenant_concurrency=1).for_invocation(_Invocation())
    _, first = one_run(container, clock, name="first")
    _, second = one_run(container, clock, name="second")
    real_claim = batch.attempts.claim_or_current
    lost: list[str] = []

    def lose_the_first_race(run, now, **kw):
        if not lost:
            lost.append(run.run_key)
            return None, None  # another worker claimed it between the read and the claim
        return real_claim(run, now, **kw)

    batch.attempts.claim_or_current = lose_the_first_race
    assert batch.process(delivery(first)).outcome is AttemptOutcome.DUPLICATE
    assert batch.process(delivery(second)).outcome is AttemptOutcome.SUCCEEDED


def test_at_most_once_never_repeats_an_effect_that_may_have_started(
    container, clock, worker, ledger, monkeypatch
):
    _, run = one_run(container, clock, delivery="at-most-once")
    real_commit = container.runs.commit

    def crash_on_success(read, change, **kw):
        if change(read).state is RunState.SUCCEEDED:
            raise ConnectionError("died after the effect")
        return real_commit(read, change, **kw)

    monkeypatch.setattr(container.runs, "commit", crash_on_success)
    with pytest.raises(ConnectionError):
        worker.process(delivery(run))
    monkeypatch.setattr(container.runs, "commit", real_commit)
    assert stored(container, run).effect_started_at is not None
    clock.advance(61)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DEAD
    assert stored(container, run).last_error_class == "AtMostOnce"
    assert ledger.effects[run.run_key] == 1


def test_pause_on_failure_pauses_the_job(container, clock, worker):
    job, run = one_run(container, clock, job_type="bad", every=60, runAt=None, pauseOnFailure=True)
    # Resumed a moment ago: the pause closes that resume's missed window, as the API's does.
    resumed = container.definitions.get(job.job_id)
    container.definitions.save(resumed.model_copy(update={"missed_until": clock.now()}))
    worker.process(delivery(run))
    paused = container.definitions.get(job.job_id)
    assert (paused.state.value, paused.paused_at, paused.missed_until) == ("PAUSED", clock.now(), None)
    assert paused.version == job.version + 1


def test_execution_timeout_is_enforced_and_retried(container, clock, worker, ledger):
    _, run = one_run(container, clock, job_type="slow", timeoutSeconds=1)
    result = worker.process(delivery(run))
    assert result.outcome is AttemptOutcome.RETRY_SCHEDULED and result.error_class == "Timeout"


def test_an_effect_that_finishes_after_the_worker_stopped_waiting_is_saved_and_replayed(
    container, clock, worker, ledger
):
    """The worker gave up at the timeout, so no completion records the result: the effect's
    thread saves it on the run, and the retry replays it instead of acting again."""
    _, run = one_run(container, clock, job_type="slow", timeoutSeconds=1)
    timed_out = worker.process(delivery(run))
    assert timed_out.outcome is AttemptOutcome.RETRY_SCHEDULED and timed_out.error_class == "Timeout"
    deadline = time.monotonic() + 10
    while stored(container, run).saved_result is None and time.monotonic() < deadline:
        time.sleep(0.05)
    waiting = stored(container, run)
    assert waiting.state is RunState.RETRY_WAIT and waiting.saved_result == "late"
    clock.set(max(waiting.due_at, waiting.effect_until or waiting.due_at))
    done = worker.process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.result == "late"
    assert ledger.effects[run.run_key] == 1


def test_heartbeat_extends_the_lease_and_stops_when_the_fence_moves(container, clock, worker):
    from jobsched.services.attempt import _Lease

    _, run = one_run(container, clock)
    leased = claimed_by(worker, container.runs.get_by_key(run.run_key), clock.now())
    lease = _Lease(leased)
    clock.advance(30)
    assert worker.heartbeat(lease)
    assert stored(container, run).lease_expires_at == clock.now() + timedelta(seconds=60)
    # Someone else claims after expiry: the heartbeat notices it lost the lease.
    clock.advance(61)
    other = claimed_by(worker, stored(container, run), clock.now())
    assert other.fence == 2
    assert not worker.heartbeat(lease)


def claimed_by(worker, run, now):
    return worker.attempts.claim(run, now, owner=worker.worker_id, actor=worker.actor, lease_seconds=60)


def sqs_record(run, message_id, queue="default"):
    """The SQS record Lambda hands the worker for `run`'s message."""
    from jobsched.store.queues import RunMessage

    return {
        "messageId": message_id,
        "receiptHandle": "rh",
        "body": RunMessage.of(run).to_json(),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(int(T0.timestamp() * 1000))},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:jobsched-{queue}",
        "awsRegion": "us-east-1",
    }


def test_handler_reports_only_unexpected_failures(container, clock, registry, monkeypatch):
    from jobsched.handlers import worker as worker_handler
    from jobsched_local.lambda_context import InvocationContext

    container.__dict__["worker"] = make_worker(container, registry)
    _, good = one_run(container, clock, name="good")
    _, broken = one_run(container, clock, name="broken")
    real_get = container.runs.get

    def flaky_get(job_id, scheduled_for):
        if job_id == broken.job_id:
            raise ConnectionError("store unreachable")
        return real_get(job_id, scheduled_for)

    monkeypatch.setattr(container.runs, "get", flaky_get)

    event = {"Records": [sqs_record(good, "m-good"), sqs_record(broken, "m-broken")]}
    response = worker_handler.handler(event, InvocationContext(function_name="jobsched-worker"))
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-broken"}]}
    assert stored(container, good).state is RunState.SUCCEEDED


def test_the_completion_does_not_wait_for_a_lease_renewal_in_flight(
    container, clock, registry, ledger, monkeypatch
):
    """The first write after the effect is what keeps it once per run: it is written at once,
    not after the heartbeat's renewal (a write and a visibility change) returns."""
    renewing, released, renewed = threading.Event(), threading.Event(), threading.Event()
    written_while_renewing = []

    @registry.register("outlasts-a-renewal")
    def outlasts(payload, invocation_):
        assert renewing.wait(10)  # a renewal has started and is held
        ledger.effect(invocation_.run_key)
        return "ok"

    worker = make_worker(container, registry, lease_seconds=3)
    real_extend, real_commit = container.runs.extend_lease, container.runs.commit

    def held_renewal(run, until, **kw):
        renewing.set()
        released.wait(3)  # a slow renewal, shorter than the heartbeat's join
        try:
            return real_extend(run, until, **kw)
        finally:
            renewed.set()

    def completion(read, change, **kw):
        written = real_commit(read, change, **kw)
        if written.state is RunState.SUCCEEDED:
            written_while_renewing.append(not renewed.is_set())
            released.set()
        return written

    monkeypatch.setattr(container.runs, "extend_lease", held_renewal)
    monkeypatch.setattr(container.runs, "commit", completion)
    try:
        _, run = one_run(container, clock, job_type="outlasts-a-renewal")
        assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    finally:
        released.set()  # a failed assertion must not leave the renewal held
    assert written_while_renewing == [True]


def test_heartbeat_keeps_the_message_invisible(container, clock, worker):
    from jobsched.services.attempt import _Lease

    _, run = one_run(container, clock)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    container.queues.publish("default", [(run, 0)])
    (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
    leased = claimed_by(worker, container.runs.get_by_key(run.run_key), clock.now())
    d = Received(
        run.run_key,
        run.job_id,
        delivery(run).scheduled_for,
        "default",
        receipt_handle=message["ReceiptHandle"],
    )
    assert worker.heartbeat(_Lease(leased), d)
    time.sleep(1.2)  # past the 1 s visibility it was received with
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []


def test_a_delivery_a_moment_early_waits_for_the_due_instant_and_then_runs(container, clock, worker, ledger):
    # SQS delays are whole seconds, so a message may be visible a fraction early; a clock
    # a little behind does the same. The worker waits (on the injected clock) rather than
    # starting before the run is due, or paying for a deferral.
    _, run = one_run(container, clock, runAt="2026-11-02T08:00:02Z")
    assert (run.due_at - clock.now()).total_seconds() == 2
    result = worker.process(delivery(run))
    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert clock.now() >= run.due_at
    leased = next(h for h in stored(container, run).history if h.target is RunState.LEASED)
    assert leased.at == run.due_at  # started at its due instant, not before
    assert result.start_lag == 0.0
    assert ledger.effects[run.run_key] == 1


def received_records(container, runs) -> list[dict]:
    """The runs' messages as Lambda hands them over: sent, really received (their receipt
    handles are real, so the handler's hold of the batch succeeds)."""
    import boto3
    from jobsched.store.queues import RunMessage

    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    for run in runs:
        sqs.send_message(QueueUrl=url, MessageBody=RunMessage.of(run).to_json())
    wanted = {run.run_key: run for run in runs}
    records: dict[str, dict] = {}
    while len(records) < len(runs):
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        assert messages, "the runs' messages were not all received"
        for message in messages:
            key = json.loads(message["Body"])["runKey"]
            if key in wanted:
                record = sqs_record(wanted[key], message["MessageId"])
                record["receiptHandle"] = message["ReceiptHandle"]
                records[key] = record
    return [records[run.run_key] for run in runs]


def test_handler_logs_one_line_and_one_metrics_document_per_batch(
    container, clock, registry, monkeypatch, capfd
):
    """Successful runs are in their history; the batch gets one INFO line and one EMF
    document per priority with every run's timings, and only failures get lines of their own."""
    from jobsched.handlers import worker as worker_handler
    from jobsched.observability import logger, powertools_metrics
    from jobsched_local.lambda_context import InvocationContext

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    container.metrics = powertools_metrics  # as deployed: EMF on stdout
    std = logging.getLogger(logger.name)
    previous = std.level
    logger.setLevel("INFO")
    log_lines = io.StringIO()
    streams = [(h, h.setStream(log_lines)) for h in std.handlers if isinstance(h, logging.StreamHandler)]
    container.__dict__["worker"] = make_worker(container, registry)
    runs = [one_run(container, clock, name=f"ok{i}")[1] for i in range(3)]
    _, failing = one_run(container, clock, job_type="down", name="down", maxAttempts=3)
    capfd.readouterr()
    try:
        event = {"Records": received_records(container, [*runs, failing])}
        response = worker_handler.handler(event, InvocationContext(function_name="jobsched-worker"))
    finally:
        logger.setLevel(previous)
        for handler, stream in streams:
            handler.setStream(stream)
    assert response == {"batchItemFailures": []}

    output = log_lines.getvalue() + capfd.readouterr().out
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    logged = [line for line in lines if "message" in line]
    assert [(line["message"], line.get("outcome")) for line in logged] == [
        ("run processed", "retry_scheduled"),
        ("batch processed", None),
    ]
    batch = logged[-1]
    assert batch["outcomes"] == {"succeeded": 3, "retry_scheduled": 1} and batch["records"] == 4
    assert "run_key" not in batch  # not the last record's keys
    documents = [line for line in lines if "_aws" in line and line.get("priority") == "default"]
    assert len(documents) == 1
    assert len(documents[0]["StartLag"]) == len(documents[0]["QueueDwell"]) == 4
    (directive,) = documents[0]["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "jobsched" and directive["Dimensions"] == [["service", "priority"]]


def test_a_dead_workers_message_comes_back_just_after_its_lease(container, clock, worker):
    """The heartbeat keeps the message invisible only just past the lease it renews: when the
    worker dies, the run is delivered again moments after its lease expired, with no repair."""
    from jobsched.services.attempt import _Lease

    from chaos.faults import sqs_on_clock

    _, run = one_run(container, clock)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    with sqs_on_clock(clock):
        container.queues.publish("default", [(run, 0)])
        (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=300)["Messages"]
        leased = claimed_by(worker, container.runs.get_by_key(run.run_key), clock.now())
        d = Received(
            run.run_key,
            run.job_id,
            delivery(run).scheduled_for,
            "default",
            receipt_handle=message["ReceiptHandle"],
        )
        assert worker.heartbeat(_Lease(leased), d)  # its last renewal: then it dies
        clock.advance(worker.lease_seconds + 4)
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
        clock.advance(2)
        assert len(sqs.receive_message(QueueUrl=url).get("Messages", [])) == 1


def test_a_record_that_fails_after_its_claim_keeps_its_message_for_after_the_lease(
    container, clock, registry, ledger, monkeypatch
):
    """A record whose attempt fails after its claim comes back within seconds (the failure's
    backoff) while its own lease is still live. That delivery keeps the message, invisible
    until just past the lease, rather than acknowledging it: the run starts again then, not
    after the reconciler's repair."""
    from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
    from jobsched.handlers import worker as worker_handler
    from jobsched.store.queues import RunMessage
    from jobsched_local.lambda_context import InvocationContext

    from chaos.faults import sqs_on_clock

    container.__dict__["worker"] = make_worker(container, registry)
    _, run = one_run(container, clock)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]

    def receive() -> list[dict]:
        messages = sqs.receive_message(QueueUrl=url, AttributeNames=["All"]).get("Messages", [])
        records = []
        for message in messages:
            record = sqs_record(run, message["MessageId"])
            record["receiptHandle"] = message["ReceiptHandle"]
            record["attributes"]["ApproximateReceiveCount"] = message["Attributes"]["ApproximateReceiveCount"]
            records.append(record)
        return records

    def invoke(records: list[dict]) -> str:
        """The batch's answer: "acknowledged", or "kept" when its one record was reported failed (the
        processor raises then, as Lambda sees a function error: nothing is deleted)."""
        try:
            response = worker_handler.handler(
                {"Records": records}, InvocationContext(function_name="jobsched-worker")
            )
        except BatchProcessingError:
            return "kept"
        return "kept" if response["batchItemFailures"] else "acknowledged"

    with sqs_on_clock(clock):
        sqs.send_message(QueueUrl=url, MessageBody=RunMessage.of(run).to_json())
        first = receive()
        real_get = container.definitions.get
        monkeypatch.setattr(
            container.definitions, "get", lambda job_id: (_ for _ in ()).throw(ConnectionError())
        )
        assert invoke(first) == "kept"  # failed after its claim: backed off
        monkeypatch.setattr(container.definitions, "get", real_get)
        leased = stored(container, run)
        assert leased.state is RunState.LEASED and leased.fence == 1
        clock.advance(11)  # past the first failure's backoff (5-10 s), inside the lease
        again = receive()
        assert len(again) == 1
        assert invoke(again) == "kept"  # not acknowledged
        assert stored(container, run).rev == leased.rev  # the holder's run is not written
        assert ledger.effects[run.run_key] == 0
        until_lease = (leased.lease_expires_at - clock.now()).total_seconds()
        clock.advance(until_lease)
        assert receive() == []  # not before the lease has expired
        clock.advance(worker_module.MESSAGE_AFTER_LEASE + 1)
        last = receive()
        assert len(last) == 1
        assert invoke(last) == "acknowledged"
    done = stored(container, run)
    assert done.state is RunState.SUCCEEDED and done.fence == 2
    assert ledger.effects[run.run_key] == 1


@pytest.mark.parametrize(
    ("case", "receive_count", "lease_seconds", "renewed", "kept"),
    [
        ("never renewed: kept for after the lease", 2, 60, False, True),
        ("renewed by a live holder: acknowledged", 2, 60, True, False),
        ("no receive to spare: acknowledged", 6, 60, False, False),
        ("longer than the spare receives can wait: acknowledged", 2, 300, False, False),
        ("as long as the spare receives can wait: kept", 2, 230, False, True),
    ],
)
def test_a_delivery_keeps_a_leased_runs_message_only_when_it_can_outlast_a_dead_lease(
    container, clock, registry, case, receive_count, lease_seconds, renewed, kept
):
    from jobsched.services.attempt import _Lease

    worker = make_worker(container, registry)
    worker.lease_seconds = lease_seconds
    _, run = one_run(container, clock)
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    container.queues.publish("default", [(run, 0)])
    (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=300)["Messages"]
    leased = worker.attempts.claim(
        container.runs.get_by_key(run.run_key),
        clock.now(),
        owner="holder",
        actor="worker:holder",
        lease_seconds=lease_seconds,
    )
    assert leased is not None
    if renewed:
        clock.advance(lease_seconds // 3)
        assert worker.heartbeat(_Lease(leased))
    received = Received(
        run.run_key,
        run.job_id,
        delivery(run).scheduled_for,
        "default",
        receive_count=receive_count,
        receipt_handle=message["ReceiptHandle"],
    )
    result = worker.process(received)
    assert (result.outcome is AttemptOutcome.DEFERRED) is kept, case
    assert (result.outcome is AttemptOutcome.DUPLICATE) is not kept, case
    assert result.redeliver is kept
    assert stored(container, run).fence == 1  # the holder's lease is left alone either way


# --- what follows a landed completion is best effort, each part on its own ---


def throttled_after_retries(*args, **kwargs):
    """A store call refused after the SDK's own retries."""
    from jobsched.domain.errors import StorageUnavailable

    raise StorageUnavailable("throttled after retries")


def test_a_counter_that_cannot_be_written_after_the_completion_leaves_the_outcome_as_written(
    container, clock, worker, ledger, monkeypatch
):
    _, run = one_run(container, clock)

    monkeypatch.setattr(container.definitions, "add_stats", throttled_after_retries)
    result = worker.process(delivery(run))

    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert stored(container, run).state is RunState.SUCCEEDED
    assert ledger.effects[run.run_key] == 1
    assert container.metrics.total("AfterTransitionFailed") == 1  # for its alarm
    clock.advance(61)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DUPLICATE
    assert ledger.effects[run.run_key] == 1


def test_a_dead_run_whose_counter_cannot_be_written_still_pauses_its_job_and_reaches_the_dlq(
    container, clock, worker, monkeypatch
):
    job, run = one_run(container, clock, job_type="bad", every=60, runAt=None, pauseOnFailure=True)

    monkeypatch.setattr(container.definitions, "add_stats", throttled_after_retries)
    result = worker.process(delivery(run))

    assert result.outcome is AttemptOutcome.DEAD
    assert stored(container, run).state is RunState.DEAD
    assert container.definitions.get(job.job_id).state.value == "PAUSED"
    assert queue_messages(container, run.priority.value, dlq=True) == 1
    assert container.metrics.total("AfterTransitionFailed") == 1  # the counter alone


def test_a_job_that_cannot_be_paused_after_a_failure_is_counted_for_its_alarm(
    container, clock, worker, monkeypatch
):
    job, run = one_run(container, clock, job_type="bad", every=60, runAt=None, pauseOnFailure=True)

    monkeypatch.setattr(container.definitions, "save", throttled_after_retries)
    result = worker.process(delivery(run))

    assert result.outcome is AttemptOutcome.DEAD
    assert container.definitions.get(job.job_id).state.value == "ACTIVE"  # not paused: said so
    assert container.metrics.total("AfterTransitionFailed") == 1
    assert queue_messages(container, run.priority.value, dlq=True) == 1  # the rest still done
