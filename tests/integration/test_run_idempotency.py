"""The worker's Powertools idempotency records, kept on the run item (store.run_idempotency):
each test tries to break one promise the separate idempotency table used to keep."""

from __future__ import annotations

from datetime import timedelta

import pytest
from jobsched.domain.effects import RECORD_GRACE, EffectDecision, effect_verdict
from jobsched.domain.errors import AmbiguousError, RetryableError, StorageUnavailable
from jobsched.domain.runs import Run, RunState
from jobsched.services.attempt import AttemptOutcome, AttemptResult
from jobsched.store.schema import ALL_TABLES

from tests.helpers import T0, make_worker
from tests.integration.test_worker import Ledger, delivery, one_run, stored

pytestmark = pytest.mark.integration


class Died(BaseException):
    """The invocation died inside the effect: no handler code after this point ran."""


class Context:
    """A Lambda context with a fixed time left: the worker's invocation deadline."""

    def __init__(self, name: str, remaining_seconds: int) -> None:
        self.aws_request_id = name
        self.remaining = remaining_seconds

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining * 1000


@pytest.fixture
def ledger():
    return Ledger()


@pytest.fixture
def registry(ledger):
    from jobsched.targets import HandlerRegistry

    reg = HandlerRegistry()

    @reg.register("ok")
    def ok(payload, invocation):
        ledger.effect(invocation.run_key)
        return {"done": invocation.run_key, "attempt": invocation.attempt}

    return reg


def invocation(container, registry, name, remaining_seconds):
    worker = make_worker(container, registry, name=name)
    return worker.for_invocation(Context(name, remaining_seconds))


def test_an_effect_that_outlives_its_lease_excludes_every_later_claim_until_its_deadline(
    container, clock, registry, ledger
):
    seen: dict[str, AttemptResult] = {}

    @registry.register("long")
    def long(payload, invocation_):
        # Inside the effect the lease runs out; two later claims come before the deadline.
        clock.advance(61)
        seen["second"] = invocation(container, registry, "second", 900).process(delivery(run))
        clock.set(T0 + timedelta(seconds=250))
        seen["third"] = invocation(container, registry, "third", 900).process(delivery(run))
        ledger.effect(invocation_.run_key)
        return "first-result"

    _, run = one_run(container, clock, job_type="long")
    first = invocation(container, registry, "first", 300)
    assert first.process(delivery(run)).outcome is AttemptOutcome.STALE
    second = seen["second"]
    assert second.outcome is AttemptOutcome.RETRY_SCHEDULED and second.error_class == "InProgress"
    assert second.run is not None
    # The record stays the first attempt's, and no attempt was used up waiting for it.
    assert second.run.effect_fence == 1 and second.run.effect_until == T0 + timedelta(seconds=300)
    assert second.run.attempt == 1 and second.run.due_at == T0 + timedelta(seconds=300) + RECORD_GRACE
    # Not due before the deadline: deferred (handed back to the outbox, due as it was).
    assert seen["third"].outcome is AttemptOutcome.DEFERRED
    assert ledger.effects[run.run_key] == 1
    # The first attempt's result was saved on the open run: the next attempt replays it.
    waiting = stored(container, run)
    assert waiting.is_open and waiting.result is None
    assert waiting.due_at == T0 + timedelta(seconds=300) + RECORD_GRACE
    assert waiting.saved_result == "first-result"
    clock.set(waiting.due_at)
    done = invocation(container, registry, "fourth", 900).process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.result == "first-result"
    assert ledger.effects[run.run_key] == 1
    assert done.run.effect_fence is None and done.run.saved_result is None


def test_an_invocation_that_died_in_the_effect_is_not_repeated_before_its_deadline(
    container, clock, registry, ledger
):
    calls = []

    @registry.register("dies-once")
    def dies_once(payload, invocation_):
        ledger.effect(invocation_.run_key)
        calls.append(invocation_.attempt)
        if len(calls) == 1:
            raise Died
        return "second-result"

    _, run = one_run(container, clock, job_type="dies-once")
    with pytest.raises(Died):
        invocation(container, registry, "first", 120).process(delivery(run))
    clock.advance(61)  # the lease is gone, the dead invocation's deadline is not
    waited = invocation(container, registry, "second", 900).process(delivery(run))
    assert waited.outcome is AttemptOutcome.RETRY_SCHEDULED and waited.error_class == "InProgress"
    assert ledger.effects[run.run_key] == 1
    # Past the deadline the invocation cannot be running: Powertools' in-progress expiry.
    clock.set(waited.run.due_at)
    assert waited.run.due_at == T0 + timedelta(seconds=120) + RECORD_GRACE
    done = invocation(container, registry, "third", 900).process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.result == "second-result"
    assert ledger.effects[run.run_key] == 2


def test_an_attempt_whose_earlier_record_expires_before_its_effect_writes_its_own(
    container, clock, registry, ledger, monkeypatch
):
    """Claimed while an earlier attempt's record was live, the attempt reaches its effect
    after that record expired: it writes its own record before acting, so a later claim
    waits for it instead of acting beside it."""
    from jobsched.domain import lifecycle

    _, run = one_run(container, clock)
    # An earlier attempt (fence 1) died in its effect; its record promises T0 + 100 s.
    first = container.runs.commit(
        run, lambda r: lifecycle.claim(r, now=T0, owner="a", actor="worker:a", lease_seconds=60)
    )
    container.runs.commit(
        first,
        lambda r: lifecycle.record_in_progress(r, now=T0, until=T0 + timedelta(seconds=100)),
        holder=True,
    )
    clock.set(T0 + timedelta(seconds=61))
    real_get = container.definitions.get
    seen: dict[str, AttemptResult] = {}

    def slow_job_read(job_id):
        # The job read after the claim takes the earlier record past its deadline.
        clock.set(T0 + timedelta(seconds=110))  # past the record (T0 + 106 s), within the lease
        return real_get(job_id)

    @registry.register("ok-slow")
    def slow(payload, invocation_):
        ledger.effect(invocation_.run_key)
        # Inside the effect the lease runs out and a third attempt is claimed.
        clock.advance(61)
        monkeypatch.setattr(container.definitions, "get", real_get)
        seen["third"] = invocation(container, registry, "third", 900).process(delivery(run))
        return "second-result"

    monkeypatch.setattr(container.definitions, "get", slow_job_read)
    container.runs.commit(
        stored(container, run), lambda r: r.model_copy(update={"job_type": "ok-slow"}), holder=True
    )
    second = invocation(container, registry, "second", 300).process(delivery(run))
    assert ledger.effects[run.run_key] == 1
    assert (
        seen["third"].outcome is AttemptOutcome.RETRY_SCHEDULED and seen["third"].error_class == "InProgress"
    )
    assert second.outcome is AttemptOutcome.STALE
    assert stored(container, run).saved_result == "second-result"


@pytest.mark.parametrize(
    "error",
    [
        RetryableError("downstream 503", error_class="HTTP503"),
        # An HTTP target that gave up waiting has returned: unlike the worker's own timeout,
        # its effect is not still executing.
        AmbiguousError("no response in time", error_class="Timeout"),
    ],
    ids=["failed", "target-timeout"],
)
def test_a_failed_effect_releases_its_record_and_the_retry_runs_at_its_backoff(
    container, clock, registry, error
):
    calls = []

    @registry.register("flaky")
    def flaky(payload, invocation_):
        calls.append(invocation_.attempt)
        if len(calls) == 1:
            raise error
        return "ok"

    _, run = one_run(container, clock, job_type="flaky")
    worker = invocation(container, registry, "w", 900)
    failed = worker.process(delivery(run))
    assert failed.outcome is AttemptOutcome.RETRY_SCHEDULED and failed.error_class == error.error_class
    assert failed.run.effect_fence is None
    clock.set(failed.run.due_at)  # the backoff, not the invocation's deadline
    assert failed.run.due_at < T0 + timedelta(seconds=900)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    assert calls == [1, 2]


def test_a_redriven_run_replays_an_effect_that_completed_instead_of_acting_again(
    container, clock, registry, ledger
):
    @registry.register("outlives")
    def outlives(payload, invocation_):
        # The lease runs out inside the effect; a later claim waits for this invocation.
        clock.advance(61)
        waited = invocation(container, registry, "second", 900).process(delivery(run))
        assert waited.error_class == "InProgress"
        ledger.effect(invocation_.run_key)
        return "first-result"

    _, run = one_run(container, clock, job_type="outlives", retry={"maxAgeSeconds": 200})
    assert (
        invocation(container, registry, "first", 300).process(delivery(run)).outcome is AttemptOutcome.STALE
    )
    assert stored(container, run).saved_result == "first-result"
    # Past the deadline the run is too old for another attempt: dead, its saved result kept.
    clock.set(T0 + timedelta(seconds=300) + RECORD_GRACE)
    worker = invocation(container, registry, "third", 900)
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DEAD
    assert ledger.effects[run.run_key] == 1

    redriven = container.run_service.redrive("tenant-a", run.run_key, "api:tenant-a", "try again")
    assert redriven.saved_result == "first-result"
    done = worker.process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.redrives == 1
    assert done.run.result == "first-result"
    assert ledger.effects[run.run_key] == 1  # one effect per run, across redrives
    # A late copy of the message changes nothing.
    assert worker.process(delivery(run)).outcome is AttemptOutcome.DUPLICATE
    assert ledger.effects[run.run_key] == 1


def test_when_the_completion_cannot_be_written_the_effect_stays_in_progress(
    container, clock, registry, ledger, monkeypatch
):
    from jobsched.domain import lifecycle

    _, run = one_run(container, clock)
    real_commit = container.runs.commit

    def store_down(read, change, **kw):
        if read.state is RunState.LEASED and change(read).state is RunState.SUCCEEDED:
            raise StorageUnavailable("the store is throttling; retry with backoff")
        return real_commit(read, change, **kw)

    monkeypatch.setattr(container.runs, "commit", store_down)
    # Not a Powertools wrapper: the handler and the chaos harness retry a store error.
    with pytest.raises(StorageUnavailable):
        invocation(container, registry, "w", 300).process(delivery(run))
    # It kept trying while the invocation had time, and gave up before its deadline.
    assert T0 + timedelta(seconds=290) <= clock.now() < T0 + timedelta(seconds=300)
    held = stored(container, run)
    assert held.state is RunState.LEASED and held.result_saved_at is None
    # The effect is still in progress to the deadline: a claim after the lease waits for it.
    assert effect_verdict(held, held.fence + 1, T0 + timedelta(seconds=299)).decision is EffectDecision.WAIT
    assert lifecycle.claimable(held, T0 + timedelta(seconds=61))
    assert ledger.effects[run.run_key] == 1


def test_an_attempt_that_stops_before_the_effect_gives_its_record_back(
    container, clock, registry, ledger, monkeypatch
):
    """The job read after the claim fails: the effect never started, so the attempt is given
    back (no record, not counted) and the next claim, 5 s later, runs it instead of waiting for
    the lease, let alone the first invocation's deadline."""
    _, run = one_run(container, clock)
    real_get = container.definitions.get
    failures: list[str] = []

    def throttled_get(job_id):
        if not failures:
            failures.append(job_id)
            raise StorageUnavailable("the store is throttling; retry with backoff")
        return real_get(job_id)

    monkeypatch.setattr(container.definitions, "get", throttled_get)
    assert (
        invocation(container, registry, "w1", 900).process(delivery(run)).outcome is AttemptOutcome.DEFERRED
    )
    given_back = stored(container, run)
    assert given_back.state is RunState.PENDING and given_back.effect_fence is None
    assert given_back.attempt == 0
    clock.advance(5)  # the give-back's wait, not the lease nor the 900 s invocation
    assert (
        invocation(container, registry, "w2", 900).process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    )
    assert ledger.effects[run.run_key] == 1


def test_a_completion_throttled_a_few_times_is_retried_and_records_the_effect(
    container, clock, registry, ledger, monkeypatch
):
    _, run = one_run(container, clock)
    real_commit = container.runs.commit
    throttles: list[int] = []

    def throttled_completion(read, change, **kw):
        if change(read).state is RunState.SUCCEEDED and len(throttles) < 3:
            throttles.append(read.fence)
            raise StorageUnavailable("the store is throttling; retry with backoff")
        return real_commit(read, change, **kw)

    monkeypatch.setattr(container.runs, "commit", throttled_completion)
    done = invocation(container, registry, "w", 300).process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and throttles == [1, 1, 1]
    assert stored(container, run).result == {"done": run.run_key, "attempt": 1}
    assert ledger.effects[run.run_key] == 1


def test_a_completion_that_landed_but_answered_with_a_transport_error_is_ours_not_a_conflict(
    container, clock, registry, ledger, monkeypatch
):
    """The first try was written and its answer lost: the retry finds its own item (the store
    knows a lease holder's write by its fence and owner), and the run is counted once."""
    job, run = one_run(container, clock)
    real_commit = container.runs.commit
    lost: list[int] = []

    def answer_lost(read, change, **kw):
        written = real_commit(read, change, **kw)
        if written.state is RunState.SUCCEEDED and not lost:
            lost.append(written.rev)
            raise StorageUnavailable("the store could not be reached: read timeout")
        return written

    monkeypatch.setattr(container.runs, "commit", answer_lost)
    done = invocation(container, registry, "w", 300).process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and lost
    assert container.definitions.counters(job.job_id)[0].get("succeeded") == 1
    assert ledger.effects[run.run_key] == 1


def test_a_result_saved_after_a_lost_lease_is_written_over_a_write_that_landed_meanwhile(
    container, clock, registry, ledger, monkeypatch
):
    from jobsched.domain import lifecycle

    real_commit = container.runs.commit
    touched: list[Run] = []

    def touch_first(read, change, **kw):
        # A repair touches the run between the refused completion and the save.
        if not kw.get("holder") and change(read).result_saved_at is not None and not touched:
            touched.append(
                real_commit(
                    read, lambda r: lifecycle.touch(r, now=clock.now(), actor="reconciler", reason="repair")
                )
            )
        return real_commit(read, change, **kw)

    @registry.register("outlives")
    def outlives(payload, invocation_):
        clock.advance(61)
        waited = invocation(container, registry, "second", 900).process(delivery(run))
        assert waited.error_class == "InProgress"
        ledger.effect(invocation_.run_key)
        monkeypatch.setattr(container.runs, "commit", touch_first)
        return "first-result"

    _, run = one_run(container, clock, job_type="outlives")
    assert (
        invocation(container, registry, "first", 300).process(delivery(run)).outcome is AttemptOutcome.STALE
    )
    assert touched and stored(container, run).saved_result == "first-result"
    clock.set(T0 + timedelta(seconds=300) + RECORD_GRACE)
    done = invocation(container, registry, "third", 900).process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.result == "first-result"
    assert ledger.effects[run.run_key] == 1


def test_an_effect_that_outlives_its_last_lease_is_saved_on_the_dead_run_for_a_redrive(
    container, clock, registry, ledger
):
    @registry.register("outlives")
    def outlives(payload, invocation_):
        # The lease runs out inside the last attempt: the next delivery ends the run DEAD.
        clock.advance(61)
        assert (
            invocation(container, registry, "second", 900).process(delivery(run)).outcome
            is AttemptOutcome.DEAD
        )
        ledger.effect(invocation_.run_key)
        return "first-result"

    _, run = one_run(container, clock, job_type="outlives", maxAttempts=1)
    assert (
        invocation(container, registry, "first", 300).process(delivery(run)).outcome is AttemptOutcome.STALE
    )
    dead = stored(container, run)
    assert dead.state is RunState.DEAD and dead.saved_result == "first-result"
    container.run_service.redrive("tenant-a", run.run_key, "api:tenant-a", "try again")
    done = invocation(container, registry, "third", 900).process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.result == "first-result"
    assert ledger.effects[run.run_key] == 1


def test_a_completion_the_store_cannot_take_is_tried_until_the_invocation_runs_out(
    container, clock, registry, ledger, monkeypatch
):
    _, run = one_run(container, clock)
    real_commit = container.runs.commit
    tries = []

    def down_for_a_minute(read, change, **kw):
        if change(read).state is RunState.SUCCEEDED and clock.now() < T0 + timedelta(seconds=60):
            tries.append(clock.now())
            raise StorageUnavailable("the store is throttling; retry with backoff")
        return real_commit(read, change, **kw)

    monkeypatch.setattr(container.runs, "commit", down_for_a_minute)
    done = invocation(container, registry, "w", 300).process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and len(tries) > 20
    assert ledger.effects[run.run_key] == 1


def test_the_stack_has_no_idempotency_table():
    assert {spec.logical_id for spec in ALL_TABLES} == {"Definitions", "Runs"}
