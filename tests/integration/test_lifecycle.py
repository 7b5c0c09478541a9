"""The run lifecycle as users and hostile tenants drive it, through the public API on moto:
each test here failed before the lifecycle moved into the domain (see docs/concepts/runs.md,
*Policies* and *External workers* sections for what they promise)."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import quote

import boto3
import pytest
from jobsched.domain.budget import MAX_HISTORY
from jobsched.domain.runs import RunState
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.sweeper import round_robin
from jobsched.services.worker import Received
from jobsched.store.runs import key_sk

from tests.helpers import T0, make_worker

pytestmark = pytest.mark.integration

NOW = "2026-11-02T08:00:00Z"


def create(api, **fields):
    body = {"name": "n", "type": "ext", "runAt": NOW, **fields}
    response = api.post("/v1/jobs", {k: v for k, v in body.items() if v is not None})
    assert response.status == 201, response
    return response.body


def claim(api, types=("ext",), **fields):
    response = api.post("/v1/leases", {"types": list(types), "workerId": "ext-1", **fields})
    assert response.status == 200, response
    return response.body["leases"]


def run_of(api, key):
    response = api.get(f"/v1/runs/{quote(key, safe='')}")
    assert response.status == 200, response
    return response.body


def runs_of(container, job_id):
    runs, cursor = [], None
    while True:
        page = container.runs.list_for_job(job_id, limit=100, cursor=cursor)
        runs += page.items
        if not (cursor := page.cursor):
            return sorted(runs, key=lambda r: r.scheduled_for)


# --- PATCH replaces payload whole ---


def test_patch_replaces_the_payload_whole(api):
    job = create(api, runAt="2026-11-02T09:00:00Z", payload={"keep": {"nested": 1}, "drop": 2})
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"payload": {"keep": {}}}, headers={"If-Match": "1"})
    assert response.status == 200, response
    assert response.body["payload"] == {"keep": {}}  # no key of the old payload survives
    cleared = api.patch(f"/v1/jobs/{job['jobId']}", {"payload": None}, headers={"If-Match": "2"})
    assert cleared.status == 200 and cleared.body["payload"] is None


# --- a completion is not lost to its own heartbeat ---


def test_completion_racing_a_heartbeat_of_the_same_lease_succeeds(api, container, monkeypatch):
    key = f"{create(api)['jobId']}@{NOW}"
    (lease,) = claim(api, leaseSeconds=60)
    runs = container.runs
    real_put = runs._put
    raced: list[bool] = []

    def heartbeat_lands_first(new, read, *, holder):
        if not raced and new.state is RunState.SUCCEEDED:
            raced.append(True)
            runs.extend_lease(
                read, read.lease_expires_at + timedelta(seconds=60), live_at=read.updated_at
            )  # rev moves
        return real_put(new, read, holder=holder)

    monkeypatch.setattr(runs, "_put", heartbeat_lands_first)
    done = api.post(f"/v1/leases/{key}/complete", {"fence": lease["fence"], "outcome": "succeeded"})
    assert raced and done.status == 200, done
    assert done.body["state"] == "SUCCEEDED"


def test_completion_with_a_superseded_fence_is_still_refused(api, container, clock):
    key = f"{create(api)['jobId']}@{NOW}"
    claim(api, leaseSeconds=30)
    clock.advance(61)
    container.reconciler.reconcile_all()  # the lease expired: back to RETRY_WAIT
    (second,) = claim(api, leaseSeconds=30)
    assert second["fence"] == 2
    stale = api.post(f"/v1/leases/{key}/complete", {"fence": 1, "outcome": "succeeded"})
    assert stale.status == 409 and stale.body["code"] == "stale_fence"


# --- a redrive starts a new age ---


def test_redriven_external_run_is_not_killed_for_its_old_age(api, container, clock):
    job = create(api, retry={"maxAgeSeconds": 3600})
    key = f"{job['jobId']}@{NOW}"
    claim(api)
    failed = {"fence": 1, "outcome": "failed", "error": {"class": "Bad", "message": "no", "retryable": False}}
    assert api.post(f"/v1/leases/{key}/complete", failed).body["state"] == "DEAD"
    clock.advance(2 * 3600)  # older than maxAgeSeconds when it is redriven
    assert api.post(f"/v1/runs/{quote(key, safe='')}/redrive", {"reason": "fixed"}).status == 200
    container.outbox.publish([container.runs.get_by_key(key)])  # external: QUEUED, waiting
    clock.advance(20 * 60)  # past the queue dwell: the reconciler looks at it
    container.reconciler.reconcile_all()
    assert run_of(api, key)["state"] == "QUEUED"
    assert [lease["runKey"] for lease in claim(api)] == [key]


# --- the lease API counts the tenant's live leases ---


def test_lease_api_hands_out_no_more_than_the_tenant_concurrency(api, container):
    container.tenant_slots.limit = 5
    for i in range(12):
        create(api, name=f"n{i}", runAt=f"2026-11-02T07:59:{i:02d}Z")
    assert len(claim(api, max=10)) == 5
    assert claim(api, max=10) == []
    # The Lambda worker's limit and this one hold the same slots.
    assert len(container.tenant_slots.holders("tenant-a")) == 5


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_lease_ended_through_the_api_frees_its_tenant_slot_at_once(api, container, outcome):
    """Under a limit of 1, the next run is handed out as soon as the first lease is completed
    or failed, not once that lease's end has passed: the completer that ends a claim releases
    the slot its claim took (the same slots, `Completer.slots`)."""
    container.tenant_slots.limit = 1
    for i in range(2):
        create(api, name=f"n{i}", runAt=f"2026-11-02T07:59:{i:02d}Z")
    (first,) = claim(api, max=10)
    assert claim(api, max=10) == []
    ended = {"fence": first["fence"], "outcome": outcome}
    if outcome == "failed":
        ended["error"] = {"class": "Boom", "message": "no", "retryable": False}
    key = quote(first["runKey"], safe="")
    assert api.post(f"/v1/leases/{key}/complete", ended).status == 200
    assert container.tenant_slots.holders("tenant-a") == []
    (second,) = claim(api, max=10)
    assert second["runKey"] != first["runKey"]


def test_runs_that_cannot_be_handed_out_at_the_head_of_the_claim_index_are_passed_over(api, container):
    """25 unreadable runs are due before the one good run of the type: a lease call asking for
    one reads past them (page by page) and hands out the good run, instead of returning []."""
    for i in range(25):
        create(api, name=f"bad{i}", runAt=f"2026-11-02T07:58:{i:02d}Z")
    good = create(api, name="good", runAt="2026-11-02T07:59:30Z")
    bad_runs = [r for r in container.runs.claimable("tenant-a", "ext", container.clock.now(), limit=100)[0]]
    assert len(bad_runs) == 26
    for run in bad_runs:
        if run.job_id != good["jobId"]:
            boto3.client("dynamodb").update_item(
                TableName=container.settings.runs_table,
                Key={"job_id": {"S": run.job_id}, "sk": {"S": key_sk(run.run_key)}},
                UpdateExpression="SET doc = :d",
                ExpressionAttributeValues={":d": {"S": "{not json"}},
            )
    (lease,) = claim(api, max=1)
    assert lease["runKey"] == f"{good['jobId']}@2026-11-02T07:59:30Z"


# --- a run never outgrows its byte budget ---


def _raw_size(container, job_id, key):
    item = boto3.client("dynamodb").get_item(
        TableName=container.settings.runs_table,
        Key={"job_id": {"S": job_id}, "sk": {"S": "R#" + key.split("@", 1)[1]}},
    )["Item"]
    return len(json.dumps(item).encode())


def test_a_tenant_growing_one_run_with_long_errors_stays_under_the_item_limit(api, container, clock):
    job = create(api, maxAttempts=100, retry={"baseSeconds": 1, "capSeconds": 1, "maxAgeSeconds": 86400})
    key = f"{job['jobId']}@{NOW}"
    huge = "\U0001f600" * 4000  # the longest message the API takes: 16 KB of UTF-8
    for attempt in range(1, 61):
        (lease,) = claim(api)
        response = api.post(
            f"/v1/leases/{key}/complete",
            {"fence": lease["fence"], "outcome": "failed", "error": {"class": "E" * 128, "message": huge}},
        )
        assert response.status == 200, (attempt, response)
        clock.advance(2)
    run = container.runs.get_by_key(key)
    assert run.state is RunState.RETRY_WAIT and run.attempt == 60
    assert len(run.history) <= MAX_HISTORY and run.history_dropped > 0
    assert run_of(api, key)["historyDropped"] == run.history_dropped
    assert len(run.last_error_message.encode()) <= 1024
    assert _raw_size(container, job["jobId"], key) < 100_000
    # Its own cancel still works, and so do the reconciler's reads of its shard.
    assert api.post(f"/v1/runs/{quote(key, safe='')}/cancel").status == 200
    assert run_of(api, key)["state"] == "CANCELLED"


def test_one_failing_repair_does_not_stop_another_tenants_in_the_same_shard(container, clock, monkeypatch):
    from jobsched.api_models.requests import JobBody

    def job(tenant):
        spec = JobBody.model_validate({"name": "n", "type": "ext", "runAt": NOW}).to_spec()
        return container.jobs.create(tenant, spec).job

    keys = {}
    shard_of = container.runs.open_shard_of
    a = job("tenant-a")
    (leased,) = container.run_service.claim("tenant-a", ["ext"], 1, 30, "w")
    keys["tenant-a"] = leased.run_key
    b = job("tenant-b")
    while shard_of(b.job_id) != shard_of(a.job_id):  # the same shard: the same repair list
        b = job("tenant-b")
    # tenant-b's other jobs (made while looking for the shard) are leased too, ten a claim,
    # however many the search made, until b's run is among them.
    while "tenant-b" not in keys:
        leases = container.run_service.claim("tenant-b", ["ext"], 10, 30, "w")
        assert leases, "b's run is leased"
        for leased in leases:
            if leased.job_id == b.job_id:
                keys["tenant-b"] = leased.run_key
    clock.advance(120)  # both leases long expired
    real_commit = container.runs.commit

    def poisoned(read, change, **kw):
        if read.run_key == keys["tenant-a"]:
            raise RuntimeError("ValidationException: Item size has exceeded the maximum allowed size")
        return real_commit(read, change, **kw)

    monkeypatch.setattr(container.runs, "commit", poisoned)
    report = container.reconciler.reconcile_all()
    assert report.failed == 1 and report.failed_keys == [keys["tenant-a"]]
    repaired = container.runs.get_by_key(keys["tenant-b"])
    # Given its retry, and sent by the repair at once.
    assert repaired.state is RunState.QUEUED and repaired.last_error_class == "LeaseExpired", repaired.state
    assert container.runs.get_by_key(keys["tenant-a"]).state is RunState.LEASED


# --- pause, resume and missedRuns ---


def _deliver(worker, run):
    return worker.process(Received(run.run_key, run.job_id, "", "default"))


def test_resumed_two_second_job_runs_only_the_latest_missed_occurrence(api, container, clock):
    """Paused longer than the horizon: every run made ahead and every occurrence since is
    missed; `run-once` runs exactly the latest one and the next ones start on time."""
    from jobsched.targets import HandlerRegistry

    registry = HandlerRegistry()
    registry.register("tick")(lambda payload, invocation: {"ok": True})
    worker = make_worker(container, registry)
    job = create(api, type="tick", runAt=None, every=2)
    job_id = job["jobId"]
    made_ahead = runs_of(container, job_id)
    assert len(made_ahead) > 50  # the API made the horizon's runs at creation

    clock.advance(10)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    # Runs that reach a worker while paused are held, not run and not cancelled.
    for run in made_ahead[5:10]:
        clock.set(max(clock.now(), run.due_at))
        assert _deliver(worker, run).outcome is AttemptOutcome.HELD

    clock.set(T0 + timedelta(seconds=301))
    resumed = api.post(f"/v1/jobs/{job_id}/resume")
    assert resumed.status == 200
    runs = runs_of(container, job_id)
    paused_from, resumed_at = T0 + timedelta(seconds=10), T0 + timedelta(seconds=301)
    missed = [r for r in runs if paused_from <= r.scheduled_for < resumed_at]
    to_run = [r for r in missed if r.state is not RunState.SKIPPED]
    assert [r.scheduled_for for r in to_run] == [T0 + timedelta(seconds=300)]  # the latest one
    assert all(r.reason in ("paused", "misfire") for r in missed if r.state is RunState.SKIPPED)
    assert not [r for r in runs if r.blocked_by == "job-paused"]
    skipped = sum(r.skipped_count or 1 for r in missed if r.state is RunState.SKIPPED)
    assert skipped == len(range(10, 301, 2)) - 1  # every occurrence not run is accounted for
    assert container.definitions.counters(job_id)[0]["missed"] == skipped

    stored_job = container.definitions.get(job_id)
    assert stored_job.next_run_at >= clock.now()
    upcoming = [r for r in runs if r.scheduled_for >= resumed_at]
    assert upcoming and upcoming[0].scheduled_for == T0 + timedelta(seconds=302)  # on time


@pytest.mark.parametrize(("policy", "expected_runs"), [("skip", 0), ("catch-up", 5)])
def test_short_pause_decides_runs_made_ahead_under_the_policy(api, container, clock, policy, expected_runs):
    job = create(api, type="tick", runAt=None, every=2, missedRuns=policy)
    job_id = job["jobId"]
    clock.advance(10)
    api.post(f"/v1/jobs/{job_id}/pause")
    clock.advance(10)  # 10 s paused: all its occurrences were made ahead by the API
    api.post(f"/v1/jobs/{job_id}/resume")
    missed = [
        r
        for r in runs_of(container, job_id)
        if T0 + timedelta(seconds=10) <= r.scheduled_for < T0 + timedelta(seconds=20)
    ]
    assert len(missed) == 5
    assert len([r for r in missed if r.state is not RunState.SKIPPED]) == expected_runs
    assert container.definitions.counters(job_id)[0]["missed"] == 5 - expected_runs


def test_an_unreadable_run_item_is_left_out_of_listings_and_counted(api, container, clock):
    """A run item that no longer parses breaks neither its job's run list, nor the dead-letter
    list, nor the reconciler's shard: it is logged, counted and left out."""
    job = create(api, type="tick", runAt=None, every=60)
    clock.advance(300)
    container.sweeper.sweep()
    runs = runs_of(container, job["jobId"])
    assert len(runs) >= 3
    damaged = runs[1]
    boto3.client("dynamodb").update_item(
        TableName=container.settings.runs_table,
        Key={"job_id": {"S": damaged.job_id}, "sk": {"S": key_sk(damaged.run_key)}},
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": "{not json"}},
    )
    container.metrics.clear()
    listed = api.get(f"/v1/jobs/{job['jobId']}/runs", query="view=all")
    assert listed.status == 200, listed
    keys = {r["runKey"] for r in listed.body["items"]}
    assert damaged.run_key not in keys and len(keys) == len(runs) - 1
    assert api.get("/v1/dead-letters").status == 200
    clock.advance(3600)
    container.reconciler.reconcile_all()  # the other overdue runs of the shard are still repaired
    unreadable = container.metrics.values("UnreadableRuns")
    assert unreadable and set(unreadable) == {1.0}  # counted each time it was read past


# --- sweeps: O(runs written), on-time work before backlogs ---


def test_catch_up_backlog_costs_what_a_pass_writes_and_waits_behind_on_time_jobs(api, container, clock):
    """A per-second catch-up job paused for two days: a pass writes at most its budget and
    walks no further; past the time budget the backlog waits and on-time jobs still run."""
    backlog = create(api, type="tick", runAt=None, every=1, missedRuns="catch-up", catchUpWindow=31 * 86400)
    api.post(f"/v1/jobs/{backlog['jobId']}/pause")
    clock.advance(2 * 86400)
    api.post(f"/v1/jobs/{backlog['jobId']}/resume")
    on_time = create(api, name="on time", type="tick", runAt=None, every=60)
    clock.advance(150)  # the on-time job's next run is inside the horizon now
    sweeper = container.sweeper
    sweeper.time_budget_seconds = 0  # spent at once: only on-time work is done this tick
    report = sweeper.sweep()
    assert backlog["jobId"] in report.deferred and report.runs_created >= 1
    assert on_time["jobId"] not in report.deferred
    sweeper.time_budget_seconds = 30
    before = len(runs_of(container, backlog["jobId"]))
    sweeper.sweep()
    written = len(runs_of(container, backlog["jobId"])) - before
    assert 0 < written <= container.materializer.max_runs_per_pass


def test_backlogs_take_turns_by_tenant_and_never_delay_on_time_jobs(api, other_api, container, clock):
    """Tenant A has four per-second catch-up backlogs, tenant B one, and B also an on-time job
    that the due index lists last. With time for two backlog jobs, B's backlog is one of
    them (oldest-first would spend it all on A) and B's on-time job is made regardless."""
    backlogs_a = [
        create(
            api, name=f"a{i}", type="tick", runAt=None, every=1, missedRuns="catch-up", catchUpWindow=86400
        )
        for i in range(4)
    ]
    clock.advance(1)
    backlog_b = create(
        other_api, type="tick", runAt=None, every=1, missedRuns="catch-up", catchUpWindow=86400
    )
    for job in [*backlogs_a, backlog_b]:
        api_of = other_api if job is backlog_b else api
        assert api_of.post(f"/v1/jobs/{job['jobId']}/pause").status == 200
    clock.advance(3600)
    for job in [*backlogs_a, backlog_b]:
        api_of = other_api if job is backlog_b else api
        assert api_of.post(f"/v1/jobs/{job['jobId']}/resume").status == 200
    on_time_b = create(other_api, name="on time", type="tick", runAt=None, every=60)
    clock.advance(150)
    ticks = iter(range(1_000_000))
    sweeper = container.sweeper
    sweeper._timer = lambda: next(ticks)  # each look at the clock costs one second
    sweeper.time_budget_seconds = 2.5  # time for two backlog jobs
    sweeper.page_size = 2  # the on-time job is on the last page
    report = sweeper.sweep()
    swept = {job["jobId"] for job in [*backlogs_a, backlog_b]} - set(report.deferred)
    assert backlog_b["jobId"] in swept and len(swept) == 2
    assert on_time_b["jobId"] not in report.deferred
    assert runs_of(container, on_time_b["jobId"])  # made in this tick, not after the backlogs


def test_round_robin_takes_one_item_per_key_in_turn():
    items = ["a1", "a2", "a3", "b1", "c1", "c2"]
    assert list(round_robin(items, key=lambda s: s[0])) == ["a1", "b1", "c1", "a2", "c2", "a3"]
    assert list(round_robin([], key=str)) == []


# --- real DynamoDB: the SDK retries a write the table already applied ---


class RetriedAfterApplied:
    """A DynamoDB client whose armed put_item is sent twice, as botocore does after a read
    timeout on a write the table had applied: the caller sees the second answer."""

    def __init__(self, inner):
        self._inner = inner
        self.armed = False

    def put_item(self, **request):
        if self.armed:
            self.armed = False
            self._inner.put_item(**request)
        return self._inner.put_item(**request)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_a_write_retried_after_it_was_applied_is_ours_not_a_lost_race(api, container):
    key = f"{create(api)['jobId']}@{NOW}"
    client = RetriedAfterApplied(container.runs._db)
    container.runs._db = client
    client.armed = True
    (lease,) = claim(api)  # the claim's conditional put is applied, then sent again and refused
    assert (lease["runKey"], lease["fence"]) == (key, 1)
    client.armed = True
    done = api.post(f"/v1/leases/{key}/complete", {"fence": 1, "outcome": "succeeded"})
    assert done.status == 200 and done.body["state"] == "SUCCEEDED"
    assert [t["to"] for t in run_of(api, key)["transitions"]] == ["PENDING", "LEASED", "SUCCEEDED"]


def test_a_compacted_history_keeps_where_each_kept_entry_started(api, container, clock):
    # The stored history leaves out each entry's source (the previous entry's target); where
    # compaction dropped entries, the first kept one must not read back as starting from the
    # creation's PENDING (it started from RETRY_WAIT or QUEUED).
    job = create(api, maxAttempts=100, retry={"baseSeconds": 1, "capSeconds": 1, "maxAgeSeconds": 86400})
    key = f"{job['jobId']}@{NOW}"
    for _ in range(30):
        (lease,) = claim(api)
        response = api.post(
            f"/v1/leases/{key}/complete",
            {"fence": lease["fence"], "outcome": "failed", "error": {"class": "E", "message": "m"}},
        )
        assert response.status == 200, response
        clock.advance(2)
    run = container.runs.get_by_key(key)
    assert run.history_dropped > 0
    for before, entry in zip(run.history[1:], run.history[2:], strict=False):
        assert entry.source is before.target
    assert run.history[1].source is not RunState.PENDING, run.history[1]


# --- nextRunAt and nextFireTimes: the instants the job will fire at ---


def _at(seconds):
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("policy", ["run-once", "skip"])
def test_resume_after_a_long_pause_answers_the_next_instant_that_will_fire(api, container, clock, policy):
    """Paused 161 s, longer than the runs made ahead: the resume's nextRunAt is the next
    occurrence to come, never the cursor the pause left behind (44 s in the past)."""
    job_id = create(api, type="tick", runAt=None, every=2, missedRuns=policy)["jobId"]
    clock.advance(10)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.advance(161)  # now T0+171
    resumed = api.post(f"/v1/jobs/{job_id}/resume").body
    expected = [_at(s) for s in range(172, 182, 2)]
    assert resumed["nextRunAt"] == expected[0]
    assert resumed["nextFireTimes"] == expected
    assert api.get(f"/v1/jobs/{job_id}").body["nextFireTimes"] == expected
    (listed,) = [j for j in api.get("/v1/jobs").body["items"] if j["jobId"] == job_id]
    assert listed["nextRunAt"] == expected[0]
    # Each of them fires: its run is made and waiting, none of them skipped.
    runs = {format_run(r.scheduled_for): r for r in runs_of(container, job_id)}
    assert all(runs[t].state is RunState.PENDING for t in expected)


def format_run(instant):
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_next_fire_times_leave_out_a_run_made_ahead_that_will_not_fire(api):
    job_id = create(api, type="tick", runAt=None, every=60)["jobId"]
    # The API made the horizon's runs at creation: T0, T0+60 s, T0+120 s.
    cancelled = api.post(f"/v1/runs/{quote(f'{job_id}@{_at(60)}', safe='')}/cancel")
    assert cancelled.status == 200, cancelled
    body = api.get(f"/v1/jobs/{job_id}").body
    assert body["nextFireTimes"] == [_at(s) for s in (0, 120, 180, 240, 300)]


def test_a_paused_job_names_no_instant_it_will_fire_at(api):
    job_id = create(api, type="tick", runAt=None, every=60)["jobId"]
    paused = api.post(f"/v1/jobs/{job_id}/pause").body
    assert paused["nextRunAt"] is None
    body = api.get(f"/v1/jobs/{job_id}").body
    assert body["nextRunAt"] is None and body["nextFireTimes"] == []
    assert api.get(f"/v1/jobs/{job_id}/summary").body["nextFireTimes"] == []


def test_a_one_time_job_made_ahead_names_its_run_until_it_fires(api, clock):
    job = create(api, type="tick", runAt=_at(60))
    body = api.get(f"/v1/jobs/{job['jobId']}").body
    assert body["state"] == "COMPLETED"  # its one run is made: nothing left to schedule
    assert body["nextRunAt"] == _at(60) and body["nextFireTimes"] == [_at(60)]
    clock.advance(61)
    assert api.get(f"/v1/jobs/{job['jobId']}").body["nextFireTimes"] == []


# --- run-once after a pause: the chosen occurrence runs exactly once, whatever the order ---


def _hourly_from_ten_seconds(api, container, **policies):
    """A job whose only occurrence in the pause below is T0+10 s (the next is an hour later),
    and a worker that records every effect."""
    from jobsched.targets import HandlerRegistry

    effects: list[str] = []
    registry = HandlerRegistry()

    @registry.register("tick")
    def tick(payload, invocation):
        effects.append(invocation.run_key)
        return {"ok": True}

    job_id = create(api, type="tick", runAt=None, every=3600, startAt=_at(10), **policies)["jobId"]
    return job_id, f"{job_id}@{_at(10)}", make_worker(container, registry), effects


def _run(container, key):
    return container.runs.get_by_key(key)


@pytest.mark.parametrize("resume_lands", ["between the read and the hold", "before the read"])
def test_a_run_leased_when_the_job_resumes_still_runs_once(api, container, clock, monkeypatch, resume_lands):
    """The missed occurrence is LEASED at the resume: its worker read the job while it was
    still paused and holds it after the resume (settled by the reconciler), or read it
    resumed and runs it. Either way it runs, once."""
    job_id, key, worker, effects = _hourly_from_ten_seconds(api, container)
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=12))
    real_get = container.definitions.get

    def the_resume_comes_at_the_workers_job_read(wanted):
        monkeypatch.setattr(container.definitions, "get", real_get)  # once
        before = real_get(wanted)
        assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
        return before if resume_lands == "between the read and the hold" else real_get(wanted)

    monkeypatch.setattr(container.definitions, "get", the_resume_comes_at_the_workers_job_read)
    first = _deliver(worker, _run(container, key))
    if resume_lands == "between the read and the hold":
        assert first.outcome is AttemptOutcome.HELD and _run(container, key).blocked_by == "job-paused"
        clock.advance(21)  # a fresh hold is settled at the next tick, not five minutes later
        container.reconciler.reconcile_all()
        settled = _run(container, key)
        assert settled.state in (RunState.PENDING, RunState.QUEUED) and settled.blocked_by is None
        assert _deliver(worker, _run(container, key)).outcome is AttemptOutcome.SUCCEEDED
    else:
        assert first.outcome is AttemptOutcome.SUCCEEDED
    assert effects == [key]
    assert _run(container, key).state is RunState.SUCCEEDED
    clock.advance(600)
    container.reconciler.reconcile_all()
    assert effects == [key] and container.definitions.counters(job_id)[0].get("missed", 0) == 0


@pytest.mark.parametrize("first", ["reconciler", "resume"])
def test_a_held_run_settled_while_the_job_resumes_runs_once(api, container, clock, monkeypatch, first):
    """Held while paused, the missed occurrence is settled by the reconciler at the very
    moment the resume decides it (after the resume's write, before or after its decisions):
    both decide it the same way, and it runs once."""
    job_id, key, worker, effects = _hourly_from_ten_seconds(api, container)
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=12))
    assert _deliver(worker, _run(container, key)).outcome is AttemptOutcome.HELD
    clock.set(T0 + timedelta(seconds=400))  # the hold is overdue for the reconciler
    real_on_resume = container.jobs._on_resume

    def settled_alongside(paused, resumed):
        if first == "reconciler":
            container.reconciler.reconcile_all()
        real_on_resume(paused, resumed)
        if first == "resume":
            container.reconciler.reconcile_all()

    monkeypatch.setattr(container.jobs, "_on_resume", settled_alongside)
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    run = _run(container, key)
    assert run.state in (RunState.PENDING, RunState.QUEUED) and run.blocked_by is None
    assert _deliver(worker, run).outcome is AttemptOutcome.SUCCEEDED
    assert effects == [key]


@pytest.mark.parametrize("hold_lands", ["after the resume", "before the resume"])
@pytest.mark.parametrize("resumed_after", [0.4, 1.0], ids=["same-second", "next-second"])
@pytest.mark.parametrize("policy", ["run-once", "skip", "catch-up"])
def test_an_occurrence_held_as_its_job_resumes_is_decided_by_the_second_the_resume_lands_in(
    api, container, clock, monkeypatch, policy, resumed_after, hold_lands
):
    """Paused at 5 s, the 10 s occurrence (made ahead) is claimed at 10 s: its worker reads
    the job paused, and the resume comes 0.4 s or 1 s after the occurrence, before or after
    the worker's hold lands. Resumed in the occurrence's own second, the resume's instant
    is that second (instants are whole seconds): the occurrence did not fall in the pause,
    it is no missed one, and its hold is released whatever `missedRuns` says. Resumed a
    second later it fell in the pause, and it is the one `run-once` and `catch-up` pick
    (`skip` runs none). Either way it runs exactly once or is SKIPPED as the resume
    decided, never lost by the side of a second the resume landed on."""
    job_id, key, worker, effects = _hourly_from_ten_seconds(api, container, missedRuns=policy)
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=10))
    real_get = container.definitions.get

    def resume() -> None:
        clock.advance(resumed_after)
        assert api.post(f"/v1/jobs/{job_id}/resume").status == 200

    def the_resume_comes_after_the_workers_job_read(wanted):
        monkeypatch.setattr(container.definitions, "get", real_get)  # once
        paused = real_get(wanted)
        resume()
        return paused

    if hold_lands == "after the resume":
        monkeypatch.setattr(container.definitions, "get", the_resume_comes_after_the_workers_job_read)
    assert _deliver(worker, _run(container, key)).outcome is AttemptOutcome.HELD
    if hold_lands == "before the resume":
        resume()
    missed = policy == "skip" and resumed_after >= 1
    clock.advance(21)  # a fresh hold is settled at the next tick
    container.reconciler.reconcile_all()
    settled = _run(container, key)
    if missed:
        assert settled.state is RunState.SKIPPED and settled.reason == "paused", settled.history[-1]
    else:
        assert settled.state in (RunState.PENDING, RunState.QUEUED), settled.history[-1]
        assert settled.blocked_by is None
        assert _deliver(worker, settled).outcome is AttemptOutcome.SUCCEEDED
    clock.advance(600)
    container.reconciler.reconcile_all()
    container.sweeper.sweep()
    assert effects == ([] if missed else [key])
    assert _run(container, key).state is (RunState.SKIPPED if missed else RunState.SUCCEEDED)
    assert container.definitions.counters(job_id)[0].get("missed", 0) == (1 if missed else 0)


@pytest.mark.parametrize("policy", ["run-once", "skip"])
def test_an_occurrence_the_resume_does_not_pick_is_skipped_even_if_leased_at_the_resume(
    api, container, clock, monkeypatch, policy
):
    """Every 10 s, paused over three occurrences: a worker claims the first of them just
    before the resume and reads the job just after it. The resume's decision (`run-once`:
    only the latest runs; `skip`: none) holds for that run too: it is SKIPPED as missed, no
    effect."""
    from jobsched.targets import HandlerRegistry

    effects: list[str] = []
    registry = HandlerRegistry()

    @registry.register("tick")
    def tick(payload, invocation):
        effects.append(invocation.run_key)
        return {"ok": True}

    worker = make_worker(container, registry)
    job_id = create(api, type="tick", runAt=None, every=10, startAt=_at(10), missedRuns=policy)["jobId"]
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=35))  # 10, 20 and 30 s fell in the pause
    first = f"{job_id}@{_at(10)}"
    real_get = container.definitions.get

    def resumed_at_the_workers_job_read(wanted):
        monkeypatch.setattr(container.definitions, "get", real_get)  # once
        assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
        return real_get(wanted)

    monkeypatch.setattr(container.definitions, "get", resumed_at_the_workers_job_read)
    result = _deliver(worker, _run(container, first))
    assert result.outcome is AttemptOutcome.SKIPPED
    assert _run(container, first).state is RunState.SKIPPED and _run(container, first).reason == "paused"
    assert first not in effects


@pytest.mark.parametrize("then", ["cancelled", "completed", "active"])
def test_runs_held_after_a_resume_are_decided_by_it_whatever_the_job_became(
    api, container, clock, monkeypatch, then
):
    """Every 10 s under `run-once`, paused over 10, 20 and 30 s. Two workers claimed the 10 s
    and 30 s occurrences in the pause; both read the job paused, and their holds land after
    the resume, which decided that only 30 s runs. The job is then cancelled, completed, or
    left active, and the reconciler settles the holds: the 10 s occurrence is SKIPPED as
    missed in every case (the resume decided first); the 30 s one is cancelled with a
    cancelled job and runs otherwise — a completed job's runs made ahead run, held or not.
    (Chaos seed 3 found held runs of a resumed job cancelled as "job ended while paused".)"""
    from jobsched.domain import lifecycle
    from jobsched.domain.models import JobState
    from jobsched.targets import HandlerRegistry

    from tests.helpers import claimed

    effects: list[str] = []
    registry = HandlerRegistry()

    @registry.register("tick")
    def tick(payload, invocation):
        effects.append(invocation.run_key)
        return {"ok": True}

    worker = make_worker(container, registry)
    job_id = create(api, type="tick", runAt=None, every=10, startAt=_at(10), missedRuns="run-once")["jobId"]
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=34))
    keys = {at: f"{job_id}@{_at(at)}" for at in (10, 20, 30)}
    for at in (10, 30):
        run = _run(container, keys[at])
        lease = claimed(run, at=clock.now(), lease_for=60, owner=f"w{at}")
        container.runs.commit(run, lambda r, lease=lease: lease)
    clock.set(T0 + timedelta(seconds=35))
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    assert _run(container, keys[20]).state is RunState.SKIPPED  # decided by the resume itself
    for at in (10, 30):  # each worker read the job paused: its hold lands now
        leased = _run(container, keys[at])
        container.runs.commit(leased, lambda r: lifecycle.hold(r, now=clock.now(), actor="worker:w"))
    if then == "cancelled":
        assert api.delete(f"/v1/jobs/{job_id}").status == 200
    elif then == "completed":
        job = container.definitions.get(job_id)
        container.definitions.save(
            job.model_copy(
                update={"state": JobState.COMPLETED, "version": job.version + 1, "next_run_at": None}
            )
        )
    clock.advance(30)
    container.reconciler.reconcile_all()
    missed = _run(container, keys[10])
    assert missed.state is RunState.SKIPPED and missed.reason == "paused", missed.history[-1]
    chosen = _run(container, keys[30])
    if then == "cancelled":
        assert chosen.state is RunState.CANCELLED, chosen.history[-1]
    else:
        assert chosen.state in (RunState.PENDING, RunState.QUEUED) and chosen.blocked_by is None
        assert _deliver(worker, chosen).outcome is AttemptOutcome.SUCCEEDED
        assert effects == [keys[30]]


def _claim_dies_in_the_pause(api, container, clock, monkeypatch, worker, **policies) -> str:
    """An every-10-s "tick" job paused over 10, 20 and 30 s: a worker claims the 10 s
    occurrence in the pause and dies at its job read (the run stays LEASED); the job is
    resumed at 35 s. Returns that occurrence's run key."""
    job_id = create(api, type="tick", runAt=None, every=10, startAt=_at(10), **policies)["jobId"]
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=12))
    first = f"{job_id}@{_at(10)}"

    def dies(wanted):
        raise RuntimeError("the worker's process died at the job read")

    with monkeypatch.context() as dying:
        dying.setattr(container.definitions, "get", dies)
        with pytest.raises(RuntimeError):
            _deliver(worker, _run(container, first))
    assert _run(container, first).state is RunState.LEASED
    clock.set(T0 + timedelta(seconds=35))
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    return first


def test_a_missed_occurrence_whose_claim_died_in_the_pause_is_skipped_on_its_retry(
    api, container, clock, monkeypatch
):
    """Every 10 s with `run-once`, paused over 10, 20 and 30 s: a worker claims the 10 s
    occurrence in the pause and dies before its job read, so the lease runs out and the run
    waits for a retry. The retry comes after the resume: the resume's decision still stands
    (that claim started no effect), so the run is SKIPPED as missed, not run."""
    from jobsched.targets import HandlerRegistry

    effects: list[str] = []
    registry = HandlerRegistry()

    @registry.register("tick")
    def tick(payload, invocation):
        effects.append(invocation.run_key)
        return {"ok": True}

    worker = make_worker(container, registry)
    first = _claim_dies_in_the_pause(
        api, container, clock, monkeypatch, worker, missedRuns="run-once", maxAttempts=3
    )
    assert _run(container, first).attempt == 1
    clock.advance(600)  # past the lease: the reconciler gives the run its retry
    container.reconciler.reconcile_all()
    retry = _run(container, first)
    assert retry.state in (RunState.RETRY_WAIT, RunState.PENDING, RunState.QUEUED), retry.state
    clock.set(max(clock.now(), retry.due_at) + timedelta(seconds=1))
    result = _deliver(worker, _run(container, first))
    assert result.outcome is AttemptOutcome.SKIPPED, result
    assert _run(container, first).state is RunState.SKIPPED and _run(container, first).reason == "paused"
    assert first not in effects


@pytest.mark.parametrize("expiry_seen_by", ["worker", "reconciler"])
@pytest.mark.parametrize("expires", ["in the pause", "after the resume"])
def test_a_one_attempt_run_claimed_deep_in_a_pause_whose_worker_died_runs_once_after_it(
    api, container, clock, monkeypatch, expires, expiry_seen_by
):
    """Every 10 s with `catch-up` and `maxAttempts: 1`, paused at 5 s: a worker claims the
    30 s occurrence at 32 s and dies before its job read. That claim read nothing yet, but
    its check would have read the job paused and held the run: it began no effect. So its
    lease's expiry does not spend the run's only attempt: found in the pause, the run is
    held for the resume; found after the resume (which picked it), it waits again, due now.
    Either way it then runs, once, instead of dying `LeaseExpired` untried. (Chaos seed 2
    found a run-once occurrence claimed in its pause that died so before the resume, where
    the resume could no longer skip it.)"""
    from jobsched.targets import HandlerRegistry

    effects: list[str] = []
    registry = HandlerRegistry()

    @registry.register("tick")
    def tick(payload, invocation):
        effects.append(invocation.run_key)
        return {"ok": True}

    worker = make_worker(container, registry)
    job_id = create(
        api, type="tick", runAt=None, every=10, startAt=_at(10), missedRuns="catch-up", maxAttempts=1
    )["jobId"]
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=32))
    key = f"{job_id}@{_at(30)}"

    def dies(wanted):
        raise RuntimeError("the worker's process died at the job read")

    with monkeypatch.context() as dying:
        dying.setattr(container.definitions, "get", dies)
        with pytest.raises(RuntimeError):
            _deliver(worker, _run(container, key))
    assert _run(container, key).state is RunState.LEASED and _run(container, key).attempt == 1

    def expiry_found() -> None:
        if expiry_seen_by == "worker":
            _deliver(worker, _run(container, key))
        else:
            container.reconciler.reconcile_all()

    if expires == "in the pause":
        clock.set(T0 + timedelta(seconds=200))  # long past the lease; the job still paused
        expiry_found()
        held = _run(container, key)
        assert held.state is RunState.PENDING and held.blocked_by == "job-paused", held.history[-1]
        assert held.attempt == 0
        assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    else:
        clock.set(T0 + timedelta(seconds=50))  # the claim is well inside the pause
        assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
        clock.set(T0 + timedelta(seconds=200))  # long past the lease
        expiry_found()
        waiting = _run(container, key)
        assert waiting.state in (RunState.RETRY_WAIT, RunState.QUEUED), waiting.history[-1]
        assert waiting.attempt == 0
    clock.advance(1)
    result = _deliver(worker, _run(container, key))
    assert result.outcome is AttemptOutcome.SUCCEEDED, (result, _run(container, key).history[-1])
    assert effects == [key]


def test_a_run_claimed_as_its_job_was_paused_still_counts_its_attempt(api, container, clock, monkeypatch):
    """A claim within the clocks' margin of the pause may have read the job active and begun
    its effect: its lease's expiry counts the attempt, as before (here: DEAD at its only one)."""
    registry_worker = make_worker(
        container, __import__("jobsched.targets", fromlist=["HandlerRegistry"]).HandlerRegistry()
    )
    job_id = create(
        api, type="tick", runAt=None, every=10, startAt=_at(10), missedRuns="catch-up", maxAttempts=1
    )["jobId"]
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=12))  # 7 s after the pause: within the margin
    key = f"{job_id}@{_at(10)}"

    def dies(wanted):
        raise RuntimeError("the worker's process died at the job read")

    with monkeypatch.context() as dying:
        dying.setattr(container.definitions, "get", dies)
        with pytest.raises(RuntimeError):
            _deliver(registry_worker, _run(container, key))
    clock.set(T0 + timedelta(seconds=200))
    container.reconciler.reconcile_all()
    assert _run(container, key).state is RunState.DEAD


@pytest.mark.parametrize("expiry_seen_by", ["worker", "reconciler"])
def test_a_missed_occurrence_whose_last_attempt_died_in_the_pause_is_skipped_not_dead(
    api, container, clock, monkeypatch, expiry_seen_by
):
    """As above with `maxAttempts: 1` and `skip`: the claim in the pause was the run's only
    attempt, so when its lease runs out no retry may start. The resume decided that the
    occurrence does not run and the claim started nothing: the run is SKIPPED as missed,
    whoever finds the lease expired (a worker's redelivery or the reconciler), not DEAD."""
    from jobsched.targets import HandlerRegistry

    registry = HandlerRegistry()
    registry.register("tick")(lambda payload, invocation: {"ok": True})
    worker = make_worker(container, registry)
    first = _claim_dies_in_the_pause(
        api, container, clock, monkeypatch, worker, missedRuns="skip", maxAttempts=1
    )
    clock.advance(600)  # long past the lease
    if expiry_seen_by == "worker":
        assert _deliver(worker, _run(container, first)).outcome is AttemptOutcome.SKIPPED
    else:
        container.reconciler.reconcile_all()
    ended = _run(container, first)
    assert ended.state is RunState.SKIPPED and ended.reason == "paused", (ended.state, ended.last_error_class)


def test_a_retry_of_an_occurrence_whose_effect_began_before_the_pause_landed_still_runs(
    api, container, clock, monkeypatch
):
    """The 10 s occurrence is claimed, its job read (still active) and its effect fails, all in
    the second the pause lands in: `paused_at` is that second, so the occurrence falls in the
    pause. Its effect began, so its retry after the resume (`skip`) is the retry policy's:
    it runs, and is not SKIPPED as missed."""
    from jobsched.domain.errors import RetryableError
    from jobsched.targets import HandlerRegistry

    calls: list[str] = []
    registry = HandlerRegistry()

    @registry.register("tick")
    def tick(payload, invocation):
        calls.append(invocation.run_key)
        if len(calls) == 1:
            raise RetryableError("the target answered 503")
        return {"ok": True}

    worker = make_worker(container, registry)
    job_id = create(
        api, type="tick", runAt=None, every=3600, startAt=_at(10), missedRuns="skip", maxAttempts=3
    )["jobId"]
    key = f"{job_id}@{_at(10)}"
    clock.set(T0 + timedelta(seconds=10))
    assert _deliver(worker, _run(container, key)).outcome is AttemptOutcome.RETRY_SCHEDULED
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200  # paused_at: the same second
    clock.set(T0 + timedelta(seconds=30))
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    retry = _run(container, key)
    assert retry.state in (RunState.RETRY_WAIT, RunState.PENDING, RunState.QUEUED), retry.state
    clock.set(max(clock.now(), retry.due_at) + timedelta(seconds=1))
    assert _deliver(worker, _run(container, key)).outcome is AttemptOutcome.SUCCEEDED
    assert calls == [key, key]


def test_a_late_sweep_runs_exactly_what_the_resume_decided(api, container, clock, monkeypatch):
    """Catch-up within 30 s, paused past every run made ahead, and the resume's own
    materialisation lost (throttled): the occurrences with no run yet are the sweeper's.
    Sweeping 30 s after the resume, it must run the ones inside the resume's window
    (270-290 s), not only those inside a window counted from its own sweep."""
    job_id = create(
        api, type="tick", runAt=None, every=10, startAt=_at(10), missedRuns="catch-up", catchUpWindow=30
    )["jobId"]
    clock.advance(5)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.set(T0 + timedelta(seconds=300))
    with monkeypatch.context() as lost:
        lost.setattr(container.jobs, "_materialize", lambda job: None)
        assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    clock.set(T0 + timedelta(seconds=330))
    container.sweeper.sweep()
    runs = {r.scheduled_for: r for r in container.runs.list_for_job(job_id, limit=200, cursor=None).items}
    for second in (270, 280, 290):
        run = runs.get(T0 + timedelta(seconds=second))
        assert run is not None and run.state is not RunState.SKIPPED, (second, run and run.state)
    assert not any(
        r.state is not RunState.SKIPPED and r.skipped_through is None
        for at, r in runs.items()
        if T0 + timedelta(seconds=130) <= at < T0 + timedelta(seconds=270)
    )


def test_the_latest_run_before_an_occurrence_passes_skipped_manual_and_backfill_runs(api, container, clock):
    """`latest_ran_before` answers what walking every SKIPPED record back would: the job's
    latest earlier scheduled run that was not skipped, never a manual run or a backfill of an
    instant in between, and says when its page budget ran out before an answer."""
    from jobsched.domain.runs import Trigger, make_run

    body = create(api, type="ok", runAt=None, every=60)
    job = container.definitions.get(body["jobId"])
    at = lambda minutes: clock.now() + timedelta(days=1, minutes=minutes)  # noqa: E731
    ran = make_run(job, at(0), now=clock.now(), actor="t")
    container.runs.insert(ran)
    container.runs.insert(make_run(job, at(1), now=clock.now(), actor="t", trigger=Trigger.MANUAL))
    container.runs.insert(make_run(job, at(2), now=clock.now(), actor="t", trigger=Trigger.BACKFILL))
    skipped = [
        make_run(job, at(m), now=clock.now(), actor="t", state=RunState.SKIPPED, reason="paused")
        for m in range(3, 40)
    ]
    for run in skipped:
        container.runs.insert(run)
    found, answered = container.runs.latest_ran_before(skipped[-1])
    assert answered and found is not None and found.run_key == ran.run_key
    # One skipped behind a live run names it: the answer, for the walk to follow in one read.
    behind = make_run(job, at(40), now=clock.now(), actor="t", state=RunState.SKIPPED, reason="overlap")
    container.runs.insert(behind.model_copy(update={"overlapped_by": ran.run_key}))
    later = make_run(job, at(41), now=clock.now(), actor="t", state=RunState.SKIPPED, reason="paused")
    container.runs.insert(later)
    found, answered = container.runs.latest_ran_before(later)
    assert answered and found is not None and found.run_key == behind.run_key
    # One item per page: the budget runs out among the skipped records before the answer.
    real_query = container.runs.client.query
    container.runs.client.query = lambda **request: real_query(**{**request, "Limit": 1})
    try:
        assert container.runs.latest_ran_before(skipped[-1], max_pages=5) == (None, False)
    finally:
        container.runs.client.query = real_query
