"""A job's succeeded count on moto: the usual run's completion writes no counter, the job's
summary counts it all the same, folds store what they passed, the sweeper folds, and a job
written before folds starts its fold at the present without counting a run twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from jobsched.domain.run_counts import FOLD_EVERY, FOLD_LAG
from jobsched.domain.runs import RunState
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Received
from jobsched.store.definitions import STATS_PREFIX
from jobsched.store.dynamo import from_item, to_item
from jobsched.targets import HandlerRegistry

from tests.helpers import make_worker

TENANT = "tenant-a"


FIXED = {"bad": False}  # whether the "bad" handler has been fixed (a redrive's reason)


@pytest.fixture
def worker(container):
    FIXED["bad"] = False
    registry = HandlerRegistry()

    @registry.register("ok")
    def ok(payload, invocation):
        return "done"

    @registry.register("bad")
    def bad(payload, invocation):
        from jobsched.domain.errors import PermanentError

        if FIXED["bad"]:
            return "done"
        raise PermanentError("no", error_class="HTTP400")

    return make_worker(container, registry)


def every_minute(container, job_type="ok"):
    from jobsched.api_models.requests import JobBody

    spec = JobBody.model_validate({"name": "m", "type": job_type, "cron": "0 * * * * *", "timeZone": "UTC"})
    return container.jobs.create(TENANT, spec.to_spec()).job


def run_due(container, clock, worker, job_id):
    """Sweep, then run every run of the job due by now; returns how many succeeded."""
    container.sweeper.sweep()
    done = 0
    for run in container.runs.list_for_job(job_id, limit=100, cursor=None).items:
        if run.state is RunState.PENDING and run.due_at <= clock.now():
            received = Received(
                run.run_key, run.job_id, run.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ"), "default"
            )
            done += worker.process(received).outcome is AttemptOutcome.SUCCEEDED
    return done


def stats_item(container, job_id):
    import boto3

    item = boto3.client("dynamodb").get_item(
        TableName=container.definitions._table,
        Key=to_item({"job_id": STATS_PREFIX + job_id}),
        ConsistentRead=True,
    )
    return from_item(item.get("Item") or {})


def succeeded(container, job):
    return container.run_service.summary(TENANT, job.job_id).counters["succeeded"]


def run_minutes(container, clock, worker, job_id, minutes):
    total = 0
    for _ in range(minutes):
        clock.advance(60)
        total += run_due(container, clock, worker, job_id)
    return total


def test_a_usual_run_writes_no_counter_and_the_summary_counts_it(container, clock, worker):
    job = every_minute(container)
    ran = run_minutes(container, clock, worker, job.job_id, 5)
    runs = container.runs.list_for_job(job.job_id, limit=100, cursor=None).items
    folds = [r for r in runs if r.state is RunState.SUCCEEDED and r.counted_by_fold]
    assert len(folds) >= 3  # made ahead by the sweeper: the usual run
    # Only the runs the fold does not own (the first, made at its own instant) were counted.
    assert stats_item(container, job.job_id).get("succeeded", 0) == ran - len(folds)
    assert succeeded(container, job) == ran


def test_a_fold_stores_what_it_passed_and_the_count_holds_across_folds(container, clock, worker):
    job = every_minute(container)
    first = run_minutes(container, clock, worker, job.job_id, 3)
    clock.advance((FOLD_LAG + timedelta(minutes=1)).total_seconds())
    assert succeeded(container, job) == first
    stored = stats_item(container, job.job_id)
    assert stored["succeeded"] == first and stored["fold_rev"] == 1 and stored["fold_to"]
    more = run_minutes(container, clock, worker, job.job_id, 4)
    assert succeeded(container, job) == first + more
    assert succeeded(container, job) == first + more  # a second read counts nothing twice


def test_a_run_open_past_the_lag_is_remembered_and_counted_once_it_ends(container, clock, worker):
    job = every_minute(container)
    clock.advance(60)
    container.sweeper.sweep()
    (due, *_) = [
        r
        for r in container.runs.list_for_job(job.job_id, limit=100, cursor=None).items
        if r.due_at <= clock.now()
    ]
    clock.advance((FOLD_LAG + timedelta(minutes=1)).total_seconds())
    assert succeeded(container, job) == 0
    assert due.run_key in stats_item(container, job.job_id)["fold_open"]
    received = Received(due.run_key, due.job_id, due.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ"), "default")
    assert worker.process(received).outcome is AttemptOutcome.SUCCEEDED
    assert succeeded(container, job) == 1
    assert due.run_key not in stats_item(container, job.job_id)["fold_open"]


def test_the_sweeper_folds_a_job_every_period(container, clock, worker):
    job = every_minute(container)
    ran = run_minutes(container, clock, worker, job.job_id, 3)
    clock.advance(FOLD_EVERY.total_seconds())
    container.sweeper.sweep()
    stored = stats_item(container, job.job_id)
    assert stored["succeeded"] == ran and stored["fold_rev"] == 1
    assert container.definitions.get(job.job_id).counts_folded_at == clock.now()


def test_a_redriven_run_is_counted_by_its_completion_once(container, clock, worker):
    job = every_minute(container, job_type="bad")
    run_minutes(container, clock, worker, job.job_id, 2)
    (dead, *_) = [
        r
        for r in container.runs.list_for_job(job.job_id, limit=100, cursor=None).items
        if r.state is RunState.DEAD
    ]
    clock.advance((FOLD_LAG + timedelta(minutes=1)).total_seconds())
    assert container.run_service.summary(TENANT, job.job_id).counters["succeeded"] == 0  # the fold passes it
    container.run_service.redrive(TENANT, dead.run_key, "api:tenant-a", "fixed")
    FIXED["bad"] = True
    redriven = container.runs.get_by_key(dead.run_key)
    received = Received(
        dead.run_key, dead.job_id, dead.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ"), "default"
    )
    clock.set(max(clock.now(), redriven.due_at))
    assert worker.process(received).outcome is AttemptOutcome.SUCCEEDED
    assert stats_item(container, job.job_id)["succeeded"] == 1  # its completion's ADD
    assert container.run_service.summary(TENANT, job.job_id).counters["succeeded"] == 1


def test_a_job_written_before_folds_starts_its_fold_at_the_present(container, clock, worker):
    job = every_minute(container)
    ran = run_minutes(container, clock, worker, job.job_id, 3)
    old = container.definitions.get(job.job_id)
    container.definitions.save(old.model_copy(update={"counts_folded_at": None}))
    # What its completions added then: every success.
    counted = stats_item(container, job.job_id).get("succeeded", 0)
    container.definitions.add_stats(job.job_id, succeeded=ran - counted)
    old = container.definitions.get(job.job_id)
    assert container.run_service.summary(TENANT, job.job_id).counters["succeeded"] == ran  # not 2 x ran
    more = run_minutes(container, clock, worker, job.job_id, 3)
    assert container.run_service.summary(TENANT, old.job_id).counters["succeeded"] == ran + more


def test_a_job_firing_monthly_counts_its_runs_as_they_end(container, clock, worker):
    """No sweep of a monthly job is sure to come before its runs' retention ends: each run's
    completion counts it, so no success waits for a fold that TTL may outrun."""
    from jobsched.api_models.requests import JobBody

    spec = JobBody.model_validate({"name": "m", "type": "ok", "cron": "0 0 0 1 * *", "timeZone": "UTC"})
    job = container.jobs.create(TENANT, spec.to_spec()).job
    clock.set(clock.now().replace(day=30, hour=23, minute=58))
    container.sweeper.sweep()
    (run,) = [r for r in container.runs.list_for_job(job.job_id, limit=10, cursor=None).items if r.is_open]
    assert run.counted_at_end
    clock.set(run.due_at)
    received = Received(run.run_key, run.job_id, run.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ"), "default")
    assert worker.process(received).outcome is AttemptOutcome.SUCCEEDED
    assert stats_item(container, job.job_id)["succeeded"] == 1


def test_a_first_fold_not_stored_does_not_count_a_jobs_history_again(container, clock, worker, monkeypatch):
    job = every_minute(container)
    ran = run_minutes(container, clock, worker, job.job_id, 3)
    old = container.definitions.get(job.job_id)
    container.definitions.save(old.model_copy(update={"counts_folded_at": None}))
    counted = stats_item(container, job.job_id).get("succeeded", 0)
    container.definitions.add_stats(job.job_id, succeeded=ran - counted)  # its completions' ADDs
    from jobsched.domain.errors import StorageUnavailable

    def throttled(*args, **kwargs):
        raise StorageUnavailable("throttled")

    with monkeypatch.context() as patched:
        patched.setattr(type(container.definitions), "save_fold", throttled)
        clock.advance(60)
        container.sweeper.sweep()  # folds, cannot store its first mark, stamps the job
    assert container.definitions.get(job.job_id).counts_folded_at is not None
    assert "fold_rev" not in stats_item(container, job.job_id)
    assert container.run_service.summary(TENANT, job.job_id).counters["succeeded"] == ran
