"""One effect per run, through the worker and the API: each test is a way a target could see
one run twice (or an effect could outlive the promise of its record), tried on purpose."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import timedelta

import pytest
from jobsched.domain.errors import StorageUnavailable
from jobsched.domain.runs import Run, RunState
from jobsched.services.attempt import AttemptOutcome, AttemptResult
from jobsched.services.worker import Received

from tests.helpers import T0, boto3_client, make_worker
from tests.integration.test_worker import Ledger, delivery, one_run, stored

pytestmark = pytest.mark.integration

GRACE = timedelta(seconds=6)  # the record's clock-skew grace after its deadline (domain.effects)


class Died(BaseException):
    """The invocation died inside the effect: no handler code after this point ran."""


class Context:
    """A Lambda context with a fixed time left (milliseconds)."""

    def __init__(self, name: str, remaining_ms: int) -> None:
        self.aws_request_id = name
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


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
        return {"done": invocation.run_key}

    return reg


def attempt(container, registry, name, remaining_seconds=900.0):
    worker = make_worker(container, registry, name=name)
    return worker.for_invocation(Context(name, int(remaining_seconds * 1000)))


def test_a_lost_lease_saves_its_result_through_a_throttled_write(
    container, clock, registry, ledger, monkeypatch
):
    """The attempt that lost its lease while executing saves the effect's result on the run;
    one throttle on that save must not drop it (the effect would run again after the deadline)."""
    real_commit = container.runs.commit
    throttled: list[str] = []

    def throttle_the_save_once(read, change, **kw):
        if not kw.get("holder") and not throttled and change(read).result_saved_at is not None:
            throttled.append(read.run_key)
            raise StorageUnavailable("the store is throttling; retry with backoff")
        return real_commit(read, change, **kw)

    @registry.register("outlives")
    def outlives(payload, invocation_):
        clock.advance(61)  # the lease runs out inside the effect; a later claim waits for it
        attempt(container, registry, "second").process(delivery(run))
        ledger.effect(invocation_.run_key)
        monkeypatch.setattr(container.runs, "commit", throttle_the_save_once)
        return {"charged": 1}

    _, run = one_run(container, clock, job_type="outlives")
    with contextlib.suppress(StorageUnavailable):
        attempt(container, registry, "first", 300).process(delivery(run))
    monkeypatch.setattr(container.runs, "commit", real_commit)
    assert throttled
    clock.set(T0 + timedelta(seconds=300) + GRACE)
    done = attempt(container, registry, "third").process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.result == {"charged": 1}
    assert ledger.effects[run.run_key] == 1


def test_an_attempt_reaching_its_effect_after_an_earlier_record_expired_protects_its_own(
    container, clock, registry, ledger, monkeypatch
):
    """Claimed while an earlier attempt's record was live, the attempt starts its effect only
    after that record expired: a later claim must still find a live record, its own."""
    calls = []

    @registry.register("slow")
    def slow(payload, invocation_):
        calls.append(invocation_.attempt)
        ledger.effect(invocation_.run_key)
        if len(calls) == 1:
            raise Died  # the first invocation dies in its effect (its record promises T0 + 100 s)
        clock.advance(61)  # the second attempt's lease runs out inside its effect
        monkeypatch.setattr(container.definitions, "get", real_get)
        seen["third"] = attempt(container, registry, "third").process(delivery(run))
        return "second-result"

    _, run = one_run(container, clock, job_type="slow")
    with pytest.raises(Died):
        attempt(container, registry, "first", 100).process(delivery(run))
    clock.set(T0 + timedelta(seconds=61))  # the lease expired; the record has not
    real_get = container.definitions.get
    seen: dict[str, AttemptResult] = {}

    def slow_job_read(job_id):
        # The read after the claim outlasts the record (T0 + 100 s, and its 6 s grace), within
        # this attempt's own lease (until T0 + 121 s).
        clock.set(T0 + timedelta(seconds=110))
        return real_get(job_id)

    monkeypatch.setattr(container.definitions, "get", slow_job_read)
    attempt(container, registry, "second", 300).process(delivery(run))
    assert (
        seen["third"].outcome is AttemptOutcome.RETRY_SCHEDULED and seen["third"].error_class == "InProgress"
    )
    assert ledger.effects[run.run_key] == 2  # the dead first one, and the second: never a third


def test_the_recorded_deadline_is_never_before_the_invocations_real_end(container, clock, registry):
    @registry.register("dies")
    def dies(payload, invocation_):
        raise Died

    _, run = one_run(container, clock, job_type="dies")
    clock.advance(0.6)  # between seconds, with 100.7 s left: the invocation ends at T0 + 101.3 s
    with pytest.raises(Died):
        attempt(container, registry, "first", 100.7).process(delivery(run))
    held = stored(container, run)
    assert held.effect_until >= T0 + timedelta(seconds=101.3)
    clock.set(T0 + timedelta(seconds=61))
    waited = attempt(container, registry, "second").process(delivery(run))
    # The next attempt waits past the real end, and past the clock-skew grace after it.
    assert waited.run.due_at >= T0 + timedelta(seconds=101.3) + GRACE


@pytest.mark.parametrize(
    "answer",
    [{(1, 2): "tuple key"}, 10**5000, {"text": "\ud800"}, {"nan": float("nan")}, {1, 2}],
    ids=["tuple-key", "5000-digit-int", "lone-surrogate", "nan", "set"],
)
def test_a_handler_answer_json_cannot_hold_is_still_one_success(container, clock, registry, ledger, answer):
    @registry.register("odd")
    def odd(payload, invocation_):
        ledger.effect(invocation_.run_key)
        return answer

    _, run = one_run(container, clock, job_type="odd", maxAttempts=3)
    result = attempt(container, registry, "w").process(delivery(run))
    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert ledger.effects[run.run_key] == 1
    kept = stored(container, run).result
    assert kept is not None and ("dropped" in kept or "truncated" in kept)


@pytest.mark.parametrize(
    "answer", [0, {}, [], "", False], ids=["zero", "empty-object", "empty-list", "empty", "false"]
)
def test_a_saved_falsy_result_replays_as_itself(container, clock, registry, ledger, answer):
    @registry.register("outlives")
    def outlives(payload, invocation_):
        clock.advance(61)
        attempt(container, registry, "second").process(delivery(run))
        ledger.effect(invocation_.run_key)
        return answer

    _, run = one_run(container, clock, job_type="outlives")
    attempt(container, registry, "first", 300).process(delivery(run))
    clock.set(T0 + timedelta(seconds=300) + GRACE)
    done = attempt(container, registry, "third").process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and ledger.effects[run.run_key] == 1
    assert done.run.result == answer and type(done.run.result) is type(answer)


def test_the_worker_does_not_return_while_an_effect_it_stopped_waiting_for_still_runs(
    container, clock, registry, ledger
):
    """Past its timeout the attempt stops waiting and records the failure; the invocation
    must still not end while the effect runs (Lambda would freeze it with the environment
    and resume it later, past the deadline its record promises)."""
    release = threading.Event()
    finished = threading.Event()

    @registry.register("overruns")
    def overruns(payload, invocation_):
        release.wait(10)
        ledger.effect(invocation_.run_key)
        finished.set()
        return "late"

    _, run = one_run(container, clock, job_type="overruns", timeoutSeconds=1)
    threading.Timer(2.5, release.set).start()
    started = time.monotonic()
    result = attempt(container, registry, "w", 30).process(delivery(run))
    assert finished.is_set(), "process returned while the effect was still running"
    assert time.monotonic() - started >= 2.0
    assert result.outcome is AttemptOutcome.RETRY_SCHEDULED and result.error_class == "Timeout"
    # The late result was saved on the run: the retry replays it instead of acting again.
    assert stored(container, run).saved_result == "late"
    clock.set(stored(container, run).due_at)
    done = attempt(container, registry, "w2").process(delivery(run))
    assert done.outcome is AttemptOutcome.SUCCEEDED and done.run.result == "late"
    assert ledger.effects[run.run_key] == 1


def test_an_effect_the_attempt_stopped_waiting_for_holds_its_tenant_slot_until_it_ends(
    container, clock, registry, ledger
):
    """TENANT_CONCURRENCY 1: while the timed-out effect still runs, another run of the tenant
    is held back (the effect still counts against the limit); once it ends with its result
    saved, its slot is free at once, not only at its record's deadline."""
    release = threading.Event()
    during: list[AttemptResult] = []

    def limited(name):
        worker = make_worker(container, registry, name=name, tenant_concurrency=1)
        return worker.for_invocation(Context(name, 30_000))

    @registry.register("overruns")
    def overruns(payload, invocation_):
        release.wait(10)  # the attempt gave up after 1 s and wrote its failure
        during.append(limited("w2").process(delivery(other)))
        ledger.effect(invocation_.run_key)
        return "late"

    _, run = one_run(container, clock, name="slow", job_type="overruns", timeoutSeconds=1)
    _, other = one_run(container, clock, name="other")
    threading.Timer(2.0, release.set).start()
    result = limited("w1").process(delivery(run))
    assert result.outcome is AttemptOutcome.RETRY_SCHEDULED and result.error_class == "Timeout"
    assert during[0].outcome is AttemptOutcome.DEFERRED and during[0].error_class == "tenant_limit"
    assert stored(container, run).saved_result == "late"
    after = limited("w3").process(delivery(other))
    assert after.outcome is AttemptOutcome.SUCCEEDED


def test_an_attempt_whose_lease_ran_out_before_its_effect_starts_no_effect(
    container, clock, registry, ledger, monkeypatch
):
    """The worker stalls between its claim and its effect past its lease: by then its tenant
    slot may belong to another run, so the effect must not start; the attempt is given back,
    uncounted, and the next one acts once, as attempt 1."""
    _, run = one_run(container, clock)
    real_get = container.definitions.get

    def stalls_after_the_claim(job_id):
        if stored(container, run).state is RunState.LEASED:
            clock.advance(61)  # a 60 s lease
        return real_get(job_id)

    monkeypatch.setattr(container.definitions, "get", stalls_after_the_claim)
    result = attempt(container, registry, "w").process(delivery(run))
    assert result.outcome is AttemptOutcome.DEFERRED and ledger.effects[run.run_key] == 0
    assert stored(container, run).state is not RunState.LEASED  # not left to its expiry
    monkeypatch.setattr(container.definitions, "get", real_get)
    clock.advance(20)
    again = attempt(container, registry, "w2").process(delivery(run))
    assert again.outcome is AttemptOutcome.SUCCEEDED and ledger.effects[run.run_key] == 1
    assert stored(container, run).attempt == 1


def test_an_in_progress_record_landing_after_the_lease_ran_out_starts_no_effect(
    container, clock, registry, ledger, monkeypatch
):
    """The record's write is retried past the lease (the lease was live when it was sent):
    by the time it lands the tenant slot may have been taken over, so the effect must not
    start; the attempt is given back, its record cleared, and the next one acts once."""
    _, run = one_run(container, clock)
    real_commit = type(container.runs).commit

    def lands_late(self, read, change, **kwargs):
        written = real_commit(self, read, change, **kwargs)
        if written.effect_fence is not None and read.effect_fence is None:
            clock.advance(61)  # a 60 s lease, run out while the write was on its way
        return written

    monkeypatch.setattr(type(container.runs), "commit", lands_late)
    result = attempt(container, registry, "w").process(delivery(run))
    assert result.outcome is AttemptOutcome.DEFERRED and ledger.effects[run.run_key] == 0
    given_back = stored(container, run)
    assert given_back.state is not RunState.LEASED and given_back.effect_fence is None
    monkeypatch.setattr(type(container.runs), "commit", real_commit)
    clock.advance(20)
    again = attempt(container, registry, "w2").process(delivery(run))
    assert again.outcome is AttemptOutcome.SUCCEEDED and ledger.effects[run.run_key] == 1


def _dead_at_most_once(container, clock, registry):
    @registry.register("amo")
    def amo(payload, invocation_):
        raise Died

    _, run = one_run(container, clock, job_type="amo", delivery="at-most-once")
    with pytest.raises(Died):
        attempt(container, registry, "first", 100).process(delivery(run))
    clock.set(T0 + timedelta(seconds=200))
    assert attempt(container, registry, "second").process(delivery(run)).outcome is AttemptOutcome.DEAD
    assert stored(container, run).last_error_class == "AtMostOnce"
    return run


def test_redriving_an_at_most_once_run_that_may_have_acted_needs_an_explicit_yes(
    api, container, clock, registry
):
    run = _dead_at_most_once(container, clock, registry)
    refused = api.post(f"/v1/runs/{run.run_key}/redrive", {"reason": "retry"})
    assert refused.status == 409 and refused.body["code"] == "effect_may_repeat"
    assert refused.body["field"] == "acceptRepeatedEffect"
    assert stored(container, run).state is RunState.DEAD
    accepted = api.post(f"/v1/runs/{run.run_key}/redrive", {"reason": "retry", "acceptRepeatedEffect": True})
    assert accepted.status == 200, accepted.body
    reopened = stored(container, run)
    assert reopened.state is RunState.PENDING
    assert "accepted by the caller" in (reopened.history[-1].reason or "")


def test_overlap_skip_holds_behind_a_running_run_however_many_were_skipped(
    container, clock, registry, ledger
):
    """Once the previous occurrence is SKIPPED, the next one must still see the older run that
    is executing."""
    from jobsched.api_models.requests import JobBody

    spec = JobBody.model_validate({"name": "n", "type": "ok", "every": 10, "overlap": "skip"}).to_spec()
    job = container.jobs.create("tenant-a", spec).job
    runs = sorted(
        container.runs.list_for_job(job.job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for
    )
    first, second, third, fourth = runs[:4]
    worker = attempt(container, registry, "w")
    from tests.helpers import claimed

    container.runs.commit(first, lambda _: claimed(first, at=clock.now(), lease_for=3600, owner="x"))
    for later in (second, third, fourth):
        clock.set(later.due_at)
        assert worker.process(delivery(later)).outcome is AttemptOutcome.SKIPPED
    assert stored(container, fourth).overlapped_by == first.run_key
    assert ledger.effects == {}


@pytest.mark.parametrize(("policy", "outcome"), [("skip", "SKIPPED"), ("buffer-one", "DEFERRED")])
def test_an_earlier_run_that_timed_out_holds_the_next_while_its_effect_may_run(
    container, clock, registry, ledger, policy, outcome
):
    """A run that ended on a timeout (its effect may still be executing until its record's
    deadline) is not finished for the overlap policy: the next occurrence is skipped, or
    buffered, until that deadline has passed."""
    from jobsched.api_models.requests import JobBody
    from jobsched.domain import lifecycle
    from jobsched.domain.effects import RECORD_GRACE

    from tests.helpers import claimed

    spec = JobBody.model_validate({"name": "n", "type": "ok", "every": 10, "overlap": policy}).to_spec()
    job = container.jobs.create("tenant-a", spec).job
    first, second, *_ = sorted(
        container.runs.list_for_job(job.job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for
    )
    held = container.runs.commit(first, lambda _: claimed(first, at=clock.now(), lease_for=60, owner="x"))
    deadline = clock.now() + timedelta(seconds=300)
    started = container.runs.replace(
        held.model_copy(update={"effect_fence": held.fence, "effect_until": deadline})
    )
    timed_out = container.runs.commit(
        started,
        lambda r: lifecycle.fail(
            r,
            now=clock.now(),
            actor="worker:x",
            error_class="Timeout",
            message="still running",
            retryable=False,
            effect_running=True,
        ),
    )
    assert timed_out.state is RunState.DEAD and timed_out.effect_until == deadline
    worker = attempt(container, registry, "w")
    clock.set(second.due_at)
    assert worker.process(delivery(second)).outcome.name == outcome
    assert ledger.effects == {}
    # Once the record's deadline (and its grace) has passed, the effect cannot be running.
    clock.set(deadline + RECORD_GRACE + timedelta(seconds=1))
    third = container.runs.get_by_key(second.run_key)
    assert third is not None
    if outcome == "DEFERRED":
        assert worker.process(delivery(third)).outcome is AttemptOutcome.SUCCEEDED


@pytest.mark.parametrize("through", ["worker", "lease"])
def test_an_occurrence_of_a_paused_job_is_held_not_skipped_by_overlap(
    api, container, clock, registry, ledger, through
):
    """While its job is paused an occurrence is the pause's to decide (resume's `missedRuns`):
    an earlier run still executing must not get it SKIPPED as an overlap meanwhile, by the
    Lambda worker or the lease API."""
    from tests.helpers import claimed

    job_type = "ok" if through == "worker" else "report.build"
    created = api.post(
        "/v1/jobs", {"name": "n", "type": job_type, "every": 10, "overlap": "skip", "missedRuns": "catch-up"}
    )
    assert created.status == 201, created.body
    job_id = created.body["jobId"]
    first, second, *_ = sorted(
        container.runs.list_for_job(job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for
    )
    container.runs.commit(first, lambda _: claimed(first, at=clock.now(), lease_for=3600, owner="x"))
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(second.due_at)
    if through == "worker":
        outcome = attempt(container, registry, "w").process(delivery(second)).outcome
        assert outcome is AttemptOutcome.HELD
    else:
        leased = api.post("/v1/leases", {"types": ["report.build"], "max": 5, "workerId": "w1"})
        assert leased.status == 200, leased.body
        assert leased.body["leases"] == []
    after = stored(container, second)
    assert after.state is not RunState.SKIPPED, after.history[-1]
    assert ledger.effects == {}


@pytest.mark.parametrize("through", ["worker", "lease"])
def test_a_held_occurrence_released_by_the_resume_still_obeys_overlap(
    api, container, clock, registry, ledger, through
):
    """Held by the pause (its claim bumped the fence, the attempt was given back), the
    occurrence is released by the resume (`catch-up` picks it) while the earlier run still
    executes: it has not started, so `skip` skips it rather than run it beside that run."""
    from tests.helpers import claimed

    job_type = "ok" if through == "worker" else "report.build"
    created = api.post(
        "/v1/jobs", {"name": "n", "type": job_type, "every": 10, "overlap": "skip", "missedRuns": "catch-up"}
    )
    assert created.status == 201, created.body
    job_id = created.body["jobId"]
    first, second, *_ = sorted(
        container.runs.list_for_job(job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for
    )
    container.runs.commit(first, lambda _: claimed(first, at=clock.now(), lease_for=3600, owner="x"))
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(second.due_at)
    worker = attempt(container, registry, "w")

    def try_second() -> list:
        if through == "worker":
            worker.process(delivery(stored(container, second)))
            return []
        leased = api.post("/v1/leases", {"types": ["report.build"], "max": 5, "workerId": "w1"})
        assert leased.status == 200, leased.body
        return [lease for lease in leased.body["leases"] if lease["runKey"] == second.run_key]

    assert try_second() == []
    held = stored(container, second)
    assert held.state is RunState.PENDING and held.fence >= 1 and held.attempt == 0
    clock.advance(2)
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    container.reconciler.reconcile_all()
    released = stored(container, second)
    assert released.state in (RunState.PENDING, RunState.QUEUED), released.history[-1]
    assert try_second() == []
    after = stored(container, second)
    assert after.state is RunState.SKIPPED and after.reason == "overlap", after.history[-1]
    assert ledger.effects == {}


@pytest.mark.parametrize("policy", ["skip", "buffer-one"])
@pytest.mark.parametrize("through", ["worker", "lease"])
def test_a_resume_between_the_admit_and_the_job_check_starts_no_second_run_beside_the_first(
    api, container, clock, registry, ledger, monkeypatch, through, policy
):
    """The occurrence is admitted while its job is paused (the overlap verdict is left to the
    pause: its claim's job check would hold it), and the resume lands between that admit and
    the job check, which then reads the job active. The earlier run is still executing: the
    policy judged again under the claim skips the occurrence instead of starting it beside
    that run. Under `buffer-one` the earlier run was still waiting at the admit (so the
    occurrence was to be skipped, left to the pause) and started meanwhile: the attempt is
    given back to wait behind it. (Chaos seed 13 found two runs of a `skip` job running side
    by side after a resume.)"""
    from tests.helpers import claimed

    job_type = "ok" if through == "worker" else "report.build"
    created = api.post(
        "/v1/jobs", {"name": "n", "type": job_type, "every": 10, "overlap": policy, "missedRuns": "catch-up"}
    )
    assert created.status == 201, created.body
    job_id = created.body["jobId"]
    first, second, *_ = sorted(
        container.runs.list_for_job(job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for
    )

    def first_starts() -> None:
        current = stored(container, first)
        container.runs.commit(current, lambda _: claimed(current, at=clock.now(), lease_for=3600, owner="x"))

    if policy == "skip":
        first_starts()
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(second.due_at)
    real_get = container.definitions.get
    reads: list[str] = []

    def resumed_before_the_job_check(wanted: str):
        # The job read that follows the occurrence's claim: the resume lands just before it.
        if wanted == job_id and stored(container, second).state is RunState.LEASED:
            reads.append(wanted)
            monkeypatch.setattr(container.definitions, "get", real_get)
            if policy == "buffer-one":
                first_starts()
            assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
        return real_get(wanted)

    monkeypatch.setattr(container.definitions, "get", resumed_before_the_job_check)
    if through == "worker":
        attempt(container, registry, "w").process(delivery(second))
    else:
        leased = api.post("/v1/leases", {"types": ["report.build"], "max": 5, "workerId": "w1"})
        assert leased.status == 200, leased.body
        assert [lease["runKey"] for lease in leased.body["leases"]] == []
    assert reads, "claimed while paused, and the resume landed before the job check"
    after = stored(container, second)
    if policy == "skip":
        assert after.state is RunState.SKIPPED and after.reason == "overlap", after.history[-1]
        assert after.overlapped_by == first.run_key
    else:
        assert after.state is RunState.PENDING and after.history[-1].reason == "deferred: buffered"
        assert after.deferred_until == clock.now() + timedelta(seconds=5)
    assert after.attempt == 0 and after.lease_owner is None
    assert ledger.effects == {}
    assert stored(container, first).state is RunState.LEASED  # the earlier run goes on


def test_an_overlap_judgement_under_the_claim_that_cannot_read_gives_the_attempt_back(
    api, container, clock, registry, ledger, monkeypatch
):
    """The store fails the reads of the judgement under the claim: the attempt is given back
    (PENDING, published again in 5 s, its attempt uncounted), never left LEASED, whose expiry
    would bring the run back as a second attempt, past where the policy judges it."""
    from jobsched.domain.errors import StorageUnavailable
    from jobsched.services.attempt import Attempts

    created = api.post("/v1/jobs", {"name": "n", "type": "ok", "every": 10, "overlap": "skip"})
    assert created.status == 201, created.body
    first, second, *_ = sorted(
        container.runs.list_for_job(created.body["jobId"], limit=20, cursor=None).items,
        key=lambda r: r.scheduled_for,
    )
    clock.set(first.due_at)
    attempt(container, registry, "w0").process(delivery(first))  # done: nothing holds the second back
    assert stored(container, first).state is RunState.SUCCEEDED
    real = Attempts._earlier_open

    def unreadable_under_the_claim(self, run, now):
        if run.state is RunState.LEASED:
            raise StorageUnavailable("throttled (injected)")
        return real(self, run, now)

    monkeypatch.setattr(Attempts, "_earlier_open", unreadable_under_the_claim)
    clock.set(second.due_at)
    attempt(container, registry, "w").process(delivery(second))
    after = stored(container, second)
    assert after.state is RunState.PENDING and after.history[-1].reason == "deferred: store unavailable"
    assert after.attempt == 0 and after.lease_owner is None
    assert list(ledger.effects) == [first.run_key]


@pytest.mark.parametrize("refused", ["job read", "hold write"])
@pytest.mark.parametrize("through", ["worker", "lease"])
def test_a_claim_whose_job_check_the_store_refuses_gives_the_attempt_back(
    api, container, clock, registry, ledger, monkeypatch, through, refused
):
    """The check after the claim cannot be made: the job read, or the hold of a paused job's
    occurrence, is refused by the store. The attempt is given back (PENDING, published again
    in 5 s, not counted), never left LEASED, whose expiry would count an attempt that never
    ran and end a one-attempt run DEAD `LeaseExpired` with nothing tried. The run then runs
    once, as its job and `missedRuns: catch-up` say. (Chaos seed 4 found such a run.)"""
    from jobsched.domain import lifecycle

    job_type = "ok" if through == "worker" else "report.build"
    created = api.post(
        "/v1/jobs",
        {"name": "n", "type": job_type, "every": 10, "missedRuns": "catch-up", "maxAttempts": 1},
    )
    assert created.status == 201, created.body
    job_id = created.body["jobId"]
    first = min(
        container.runs.list_for_job(job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for
    )
    if refused == "hold write":
        assert api.post(f"/v1/jobs/{job_id}/pause").status == 200

        def hold_refused(*args, **kwargs):
            raise StorageUnavailable("throttled (injected)")

        monkeypatch.setattr(lifecycle, "hold", hold_refused)
    else:
        real_get = container.definitions.get

        def job_read_refused(wanted: str):
            if wanted == job_id and stored(container, first).state is RunState.LEASED:
                raise StorageUnavailable("throttled (injected)")
            return real_get(wanted)

        monkeypatch.setattr(container.definitions, "get", job_read_refused)
    clock.set(first.due_at)

    def try_it() -> list[str]:
        if through == "worker":
            attempt(container, registry, "w").process(delivery(stored(container, first)))
            return []
        leased = api.post("/v1/leases", {"types": ["report.build"], "max": 5, "workerId": "w1"})
        assert leased.status == 200, leased.body
        return [lease["runKey"] for lease in leased.body["leases"] if lease["runKey"] == first.run_key]

    assert try_it() == []
    given_back = stored(container, first)
    assert given_back.state is RunState.PENDING, given_back.history[-1]
    assert given_back.history[-1].reason == "deferred: store unavailable"
    assert given_back.attempt == 0 and given_back.lease_owner is None and given_back.fence >= 1
    assert given_back.deferred_until == clock.now() + timedelta(seconds=5)
    monkeypatch.undo()
    if refused == "hold write":
        clock.advance(2)
        assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    clock.advance(6)
    handed = try_it()
    after = stored(container, first)
    if through == "worker":
        assert after.state is RunState.SUCCEEDED, after.history[-1]
        assert ledger.effects == {first.run_key: 1}
    else:
        assert handed == [first.run_key] and after.state is RunState.LEASED
    assert after.attempt == 1


def test_an_at_most_once_lease_whose_start_mark_is_refused_is_given_back_not_stranded(
    api, container, clock, monkeypatch
):
    """The lease API marks an at-most-once run started before handing it out; when the store
    refuses that mark, nothing is handed out and the attempt is given back, so the run is
    leased again in 5 s instead of dying `AtMostOnce` at its lease's expiry untried."""
    from jobsched.domain import lifecycle

    created = api.post(
        "/v1/jobs", {"name": "n", "type": "report.build", "every": 10, "delivery": "at-most-once"}
    )
    assert created.status == 201, created.body
    job_id = created.body["jobId"]
    first = min(
        container.runs.list_for_job(job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for
    )

    def mark_refused(*args, **kwargs):
        raise StorageUnavailable("throttled (injected)")

    monkeypatch.setattr(lifecycle, "effect_started", mark_refused)
    clock.set(first.due_at)
    body = {"types": ["report.build"], "max": 1, "workerId": "w1"}
    leased = api.post("/v1/leases", body)
    assert leased.status == 200 and leased.body["leases"] == [], leased.body
    given_back = stored(container, first)
    assert given_back.state is RunState.PENDING and given_back.effect_started_at is None
    assert given_back.attempt == 0 and given_back.history[-1].reason == "deferred: store unavailable"
    monkeypatch.undo()
    clock.advance(6)
    leased = api.post("/v1/leases", body)
    assert [lease["runKey"] for lease in leased.body["leases"]] == [first.run_key], leased.body
    assert stored(container, first).effect_started_at is not None


def test_an_in_progress_record_the_store_refuses_gives_the_attempt_back(
    container, clock, registry, ledger, monkeypatch
):
    """The worker's in-progress record, written just before the effect, is refused: the
    effect never started, so the attempt is given back uncounted instead of left LEASED, whose
    expiry would end a one-attempt run DEAD `LeaseExpired` with nothing tried."""
    from jobsched.domain import lifecycle

    _, run = one_run(container, clock, job_type="ok", maxAttempts=1)

    def record_refused(*args, **kwargs):
        raise StorageUnavailable("throttled (injected)")

    monkeypatch.setattr(lifecycle, "record_in_progress", record_refused)
    clock.set(run.due_at)
    result = attempt(container, registry, "w").process(delivery(run))
    assert result.outcome is AttemptOutcome.DEFERRED
    given_back = stored(container, run)
    assert given_back.state is RunState.PENDING and given_back.attempt == 0
    assert given_back.effect_fence is None and given_back.history[-1].reason == "deferred: store unavailable"
    monkeypatch.undo()
    clock.advance(6)
    assert attempt(container, registry, "w").process(delivery(stored(container, run))).outcome is (
        AttemptOutcome.SUCCEEDED
    )
    assert ledger.effects == {run.run_key: 1}


def test_an_at_most_once_start_mark_that_landed_although_refused_is_cleared_with_the_give_back(
    api, container, clock, monkeypatch
):
    """The start mark's write lands but its answer is lost (a timeout after DynamoDB applied
    it): nothing was handed out, so the give-back clears the mark, and the run is leased again
    rather than dying `AtMostOnce` for an effect that never began."""
    created = api.post(
        "/v1/jobs", {"name": "n", "type": "report.build", "every": 10, "delivery": "at-most-once"}
    )
    assert created.status == 201, created.body
    first = min(
        container.runs.list_for_job(created.body["jobId"], limit=20, cursor=None).items,
        key=lambda r: r.scheduled_for,
    )
    real_commit = type(container.runs).commit

    def lands_then_times_out(self, run, change, **kwargs):
        saved = real_commit(self, run, change, **kwargs)
        if saved.effect_started_at is not None and run.effect_started_at is None:
            monkeypatch.setattr(type(container.runs), "commit", real_commit)
            raise StorageUnavailable("read timed out (injected, after the write landed)")
        return saved

    monkeypatch.setattr(type(container.runs), "commit", lands_then_times_out)
    clock.set(first.due_at)
    body = {"types": ["report.build"], "max": 1, "workerId": "w1"}
    leased = api.post("/v1/leases", body)
    assert leased.status == 200 and leased.body["leases"] == [], leased.body
    given_back = stored(container, first)
    assert given_back.state is RunState.PENDING and given_back.effect_started_at is None
    assert given_back.attempt == 0
    monkeypatch.undo()
    clock.advance(6)
    leased = api.post("/v1/leases", body)
    assert [lease["runKey"] for lease in leased.body["leases"]] == [first.run_key], leased.body


def test_an_attempt_given_back_again_and_again_backs_off(
    api, container, clock, registry, ledger, monkeypatch
):
    """A store that keeps refusing the check after the claim is not met by a claim every
    5 s: each give-back of the run doubles the wait (5, 10, 20 s ...), and no attempt is
    counted."""
    created = api.post("/v1/jobs", {"name": "n", "type": "ok", "every": 3600, "maxAttempts": 1})
    assert created.status == 201, created.body
    job_id = created.body["jobId"]
    run = min(container.runs.list_for_job(job_id, limit=20, cursor=None).items, key=lambda r: r.scheduled_for)
    real_get = container.definitions.get

    def job_read_refused(wanted: str):
        if wanted == job_id and stored(container, run).state is RunState.LEASED:
            raise StorageUnavailable("throttled (injected)")
        return real_get(wanted)

    monkeypatch.setattr(container.definitions, "get", job_read_refused)
    clock.set(run.due_at)
    waits = []
    for _ in range(4):
        attempt(container, registry, "w").process(delivery(stored(container, run)))
        given_back = stored(container, run)
        assert given_back.state is RunState.PENDING and given_back.attempt == 0
        waits.append((given_back.deferred_until - clock.now()).total_seconds())
        clock.set(given_back.deferred_until)
    assert waits == [5, 10, 20, 40]
    assert ledger.effects == {}


def test_the_lease_api_applies_the_overlap_policy(api, container, clock):
    created = api.post("/v1/jobs", {"name": "ext", "type": "report.build", "every": 10, "overlap": "skip"})
    assert created.status == 201, created.body
    clock.advance(25)
    leased = api.post("/v1/leases", {"types": ["report.build"], "max": 5, "workerId": "w1"})
    assert leased.status == 200, leased.body
    assert len(leased.body["leases"]) == 1  # the next occurrences are skipped behind it


def test_a_deferral_never_sends_a_message_itself(container, clock, registry, monkeypatch):
    """A run its tenant's limit holds back is handed to the outbox, never re-sent by the
    worker: a worker -> SQS -> worker chain is what Lambda's recursive-loop guard cuts."""
    sent: list[tuple[Run, int]] = []

    def recording_publish(queue, items):
        sent.extend(items)
        return []

    monkeypatch.setattr(container.queues, "publish", recording_publish)
    limited = make_worker(container, registry, tenant_concurrency=1)
    _, busy = one_run(container, clock, name="a")
    _, waiting = one_run(container, clock, name="b")
    from tests.integration.test_worker import hold_a_slot

    hold_a_slot(container, clock, busy, limit=1)
    for receives in (1, 2, 3, 4, 5, 6, 7, 50):
        d = Received(
            waiting.run_key, waiting.job_id, delivery(waiting).scheduled_for, "default", receives, None, "rh"
        )
        limited.process(d)
        clock.advance(30)
    assert sent == []
    assert stored(container, waiting).state is RunState.PENDING


@pytest.mark.parametrize("path", ["/deep", "/surrogate"])
def test_a_2xx_answer_that_cannot_be_stored_as_it_is_is_still_one_success(container, clock, ledger, path):
    """An HTTP target acted and answered 2xx with a body we cannot keep as it is: the run
    succeeds once with what can be kept, and the target is never called again."""
    from jobsched.services.worker import Worker
    from jobsched.targets import HandlerRegistry, TargetRunner

    from tests.unit.test_targets_http import Receiver
    from tests.unit.test_targets_http import client as http_client

    receiver = Receiver()
    try:
        worker = Worker(
            container.definitions,
            container.runs,
            container.queues,
            TargetRunner(boto3_client, registry=HandlerRegistry(), http=http_client()),
            clock,
            worker_id="w",
            metrics=container.metrics,
        ).for_invocation(Context("w", 900_000))
        target = {"kind": "http", "url": receiver.url(path), "method": "POST"}
        _, run = one_run(container, clock, job_type="hook", target=target, maxAttempts=3)
        result = worker.process(delivery(run))
        assert result.outcome is AttemptOutcome.SUCCEEDED, result
        assert len(receiver.requests) == 1
        assert stored(container, run).result is not None
    finally:
        receiver.close()


def test_a_claim_lost_to_a_write_that_left_the_run_claimable_claims_it_anyway(
    container, clock, registry, ledger, monkeypatch
):
    """The worker read the run PENDING; the outbox's QUEUED mark (or a repair's touch) landed
    before its claim. The message must not be acknowledged as a duplicate: the run would sit
    QUEUED with no message until the reconciler."""
    from jobsched.domain import lifecycle

    _, run = one_run(container, clock)
    read = stored(container, run)
    container.runs.commit(read, lambda r: lifecycle.queued(r, now=clock.now(), actor="outbox"))
    real_get = container.runs.get_by_key
    stale = [read]
    monkeypatch.setattr(container.runs, "get_by_key", lambda key: stale.pop() if stale else real_get(key))
    result = attempt(container, registry, "w").process(delivery(run))
    assert result.outcome is AttemptOutcome.SUCCEEDED
    assert ledger.effects[run.run_key] == 1


def test_overlap_skip_sees_a_running_run_behind_every_occurrence_a_pause_skipped(
    api, container, clock, registry, ledger
):
    """A pause whose runs were made ahead leaves one SKIPPED (missed) record per occurrence,
    each naming only its previous: the first occurrence after the resume must still find the
    run that has executed since before the pause, however many of them lie between."""
    from tests.helpers import claimed

    created = api.post(
        "/v1/jobs", {"name": "n", "type": "ok", "every": 1, "overlap": "skip", "missedRuns": "skip"}
    )
    assert created.status == 201, created.body
    job_id = created.body["jobId"]
    first = min(
        container.runs.list_for_job(job_id, limit=5, cursor=None, view="upcoming", now=clock.now()).items,
        key=lambda r: r.scheduled_for,
    )
    container.runs.commit(first, lambda _: claimed(first, at=clock.now(), lease_for=3600, owner="x"))
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.advance(60)
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    container.reconciler.reconcile_all()
    clock.advance(2)
    runs = container.runs.scheduled_between(
        job_id, first.scheduled_for, clock.now() + timedelta(seconds=5), limit=500
    )
    missed = [r for r in runs if r.state is RunState.SKIPPED and r.reason == "paused"]
    assert len(missed) > 40, [(r.scheduled_for, r.state, r.reason) for r in runs[:5]]
    after = next(
        r for r in runs if r.scheduled_for > missed[-1].scheduled_for and r.state is not RunState.SKIPPED
    )
    clock.set(max(clock.now(), after.due_at))
    outcome = attempt(container, registry, "w").process(delivery(stored(container, after))).outcome
    assert outcome is AttemptOutcome.SKIPPED
    assert stored(container, after).overlapped_by == first.run_key
    assert ledger.effects == {}
