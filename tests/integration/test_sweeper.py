"""The sweeper and its materialiser on moto: misfire, DST, limits, races, read amplification."""

from __future__ import annotations

import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from jobsched.domain.runs import RunState
from jobsched.store.definitions import DuePage

from tests.helpers import T0, SerializedClient


def new_job(container, **body):
    from jobsched.api_models.requests import JobBody

    base = {"name": "j", "type": "report"}
    spec = JobBody.model_validate({**base, **body}).to_spec()
    return container.jobs.create("tenant-a", spec).job


def all_runs(container, job_id):
    page = container.runs.list_for_job(job_id, limit=1000, cursor=None)
    return sorted(page.items, key=lambda r: r.scheduled_for)


def fmt(runs):
    return [(r.scheduled_for.strftime("%H:%M:%S"), r.state.value, r.reason) for r in runs]


def test_sweep_creates_each_occurrence_in_the_horizon_once(container, clock):
    job = new_job(container, cron="*/30 * * * * *", timeZone="UTC")  # every 30 s
    # Creation materialised up to now + 120 s: 08:00:00 .. 08:02:00.
    assert [r.scheduled_for.strftime("%M:%S") for r in all_runs(container, job.job_id)] == [
        "00:00",
        "00:30",
        "01:00",
        "01:30",
        "02:00",
    ]
    report = container.sweeper.sweep()
    assert report.runs_created == 0 and report.jobs_read == 0  # nothing newly due
    clock.advance(60)
    report = container.sweeper.sweep()
    assert report.runs_created == 2  # 02:30, 03:00
    assert report.jobs_read == 1
    runs = all_runs(container, job.job_id)
    assert len({r.run_key for r in runs}) == len(runs) == 7
    assert all(r.state is RunState.PENDING for r in runs)
    assert runs[-1].previous_run_key == runs[-2].run_key  # overlap chain
    stored = container.jobs.get("tenant-a", job.job_id)
    assert stored.next_run_at == T0 + timedelta(seconds=210)
    assert stored.runs_created == 7


def test_repeated_sweeps_at_the_same_instant_create_nothing_twice(container, clock):
    job = new_job(container, every=10)
    first = len(all_runs(container, job.job_id))
    for _ in range(3):
        container.sweeper.sweep()
    assert len(all_runs(container, job.job_id)) == first


def test_two_sweepers_at_once_create_each_run_once(container, clock):
    container.definitions._db = SerializedClient(container.definitions._db)
    container.runs._db = SerializedClient(container.runs._db)
    jobs = [new_job(container, every=7, startAt="2026-11-02T08:05:00Z") for _ in range(6)]
    clock.advance(300)  # all six now due, none materialised yet

    with ThreadPoolExecutor(max_workers=4) as pool:
        reports = list(pool.map(lambda _: container.sweeper.sweep(), range(4)))

    created = sum(r.runs_created for r in reports)
    total = sum(len(all_runs(container, j.job_id)) for j in jobs)
    assert created == total  # each run counted by exactly one sweeper
    for job in jobs:
        runs = all_runs(container, job.job_id)
        keys = [r.run_key for r in runs]
        assert len(keys) == len(set(keys))
        # 08:05:00 .. 08:07:00 every 7 s: 18 occurrences, no gap, no duplicate.
        assert [r.scheduled_for for r in runs] == [
            datetime(2026, 11, 2, 8, 5, tzinfo=UTC) + timedelta(seconds=7 * i) for i in range(18)
        ]


@pytest.mark.parametrize(
    ("policy", "window", "expected"),
    [
        # Hourly from 08:00; paused right after creation, resumed at 10:00:30. Everything that
        # fell while paused is missed, however late (10:00 is only 30 s late): `skip` runs none,
        # `run-once` only the latest inside the window, `catch-up` each inside the window.
        ("skip", 4000, [("09:00:00", "SKIPPED", "misfire")]),
        ("run-once", 4000, [("09:00:00", "SKIPPED", "misfire"), ("10:00:00", "PENDING", None)]),
        ("run-once", 1800, [("09:00:00", "SKIPPED", "expired"), ("10:00:00", "PENDING", None)]),
        ("catch-up", 1800, [("09:00:00", "SKIPPED", "expired"), ("10:00:00", "PENDING", None)]),
        ("catch-up", 7300, [("09:00:00", "PENDING", None), ("10:00:00", "PENDING", None)]),
    ],
)
def test_misfire_after_pause(container, clock, policy, window, expected):
    job = new_job(
        container,
        cron="0 * * * *",
        timeZone="UTC",
        startAt="2026-11-02T08:00:00Z",
        missedRuns=policy,
        catchUpWindow=window,
    )
    container.jobs.pause("tenant-a", job.job_id)
    clock.set(datetime(2026, 11, 2, 10, 0, 30, tzinfo=UTC))
    container.jobs.resume("tenant-a", job.job_id)  # the API materialises at once
    got = fmt(all_runs(container, job.job_id))
    # Made at creation, due the instant the job was paused: missed too. Under catch-up with a
    # window that still holds it, it runs; otherwise it is SKIPPED (`paused`).
    first = ("08:00:00", "PENDING", None) if window == 7300 else ("08:00:00", "SKIPPED", "paused")
    assert got[0] == first
    assert got[1:] == expected
    resumed = container.definitions.get(job.job_id)
    assert resumed.next_run_at == datetime(2026, 11, 2, 11, 0, tzinfo=UTC)  # never in the past
    missed = len([r for r in got if r[1] == "SKIPPED"])
    skipped_count = sum(
        r.skipped_count or 1 for r in all_runs(container, job.job_id) if r.state.value == "SKIPPED"
    )
    assert container.definitions.counters(job.job_id)[0]["missed"] == skipped_count >= missed


def test_catch_up_runs_every_missed_occurrence_inside_the_window(container, clock):
    job = new_job(
        container,
        cron="*/10 * * * *",
        timeZone="UTC",
        startAt="2026-11-02T09:00:00Z",
        missedRuns="catch-up",
        catchUpWindow=1800,
    )
    clock.set(datetime(2026, 11, 2, 10, 0, 0, tzinfo=UTC))  # the sweeper was down 09:00-10:00
    container.sweeper.sweep()
    got = fmt(all_runs(container, job.job_id))
    assert got[0] == ("09:00:00", "SKIPPED", "expired")
    skipped = all_runs(container, job.job_id)[0]
    assert skipped.skipped_through == datetime(2026, 11, 2, 9, 20, tzinfo=UTC) and skipped.skipped_count == 3
    assert got[1:] == [(f"{h}:00", "PENDING", None) for h in ("09:30", "09:40", "09:50", "10:00")]
    assert container.definitions.counters(job.job_id)[0]["missed"] == 3


def test_run_once_after_downtime_runs_only_the_latest(container, clock):
    job = new_job(
        container,
        cron="*/10 * * * *",
        timeZone="UTC",
        startAt="2026-11-02T09:00:00Z",
        missedRuns="run-once",
        catchUpWindow=3600 * 3,
    )
    clock.set(datetime(2026, 11, 2, 10, 5, 0, tzinfo=UTC))
    container.sweeper.sweep()
    got = fmt(all_runs(container, job.job_id))
    assert got == [("09:00:00", "SKIPPED", "misfire"), ("10:00:00", "PENDING", None)]
    assert all_runs(container, job.job_id)[0].skipped_count == 6


def test_skip_policy_records_missed_occurrences_as_one_skipped_range(container, clock):
    job = new_job(container, every=1, startAt="2026-11-02T09:00:00Z", missedRuns="skip")
    clock.set(datetime(2026, 11, 2, 11, 0, 0, tzinfo=UTC))  # two hours of 1-second occurrences missed
    container.sweeper.sweep()
    runs = all_runs(container, job.job_id)
    assert runs[0].state is RunState.SKIPPED and runs[0].reason == "misfire"
    assert runs[0].skipped_count == 7140 and runs[0].skipped_through == datetime(
        2026, 11, 2, 10, 58, 59, tzinfo=UTC
    )
    pending = [r for r in runs if r.state is RunState.PENDING]
    assert pending[0].scheduled_for == datetime(2026, 11, 2, 10, 59, tzinfo=UTC)  # within the 60 s grace
    assert len(runs) == 1 + 60 + 121


def new_job_whose_first_write_is_lost(container, monkeypatch):
    """An every-15-s `skip` job whose creation made its runs but whose advance of the job
    was lost (throttled): its cursor still names the first occurrence."""
    real_save = container.definitions.save

    def lost(job, **kwargs):
        if job.runs_created:
            raise RuntimeError("ProvisionedThroughputExceeded: the job's write did not land")
        return real_save(job, **kwargs)

    with monkeypatch.context() as throttled:
        throttled.setattr(container.definitions, "save", lost)
        return new_job(container, every=15, missedRuns="skip")


def _coverage(job, runs):
    """How many records hold each occurrence: a run its own, a SKIPPED range each of its."""
    from collections import Counter

    from jobsched.domain.schedule import fires_between

    held: Counter[datetime] = Counter()
    for run in runs:
        if run.skipped_through is None:
            held[run.scheduled_for] += 1
        else:
            span = fires_between(
                job.spec.schedule, run.scheduled_for - timedelta(seconds=1), run.skipped_through, 10_000
            )
            assert len(span) == run.skipped_count, (run.run_key, len(span), run.skipped_count)
            held.update(span)
    return held


def test_a_skipped_range_over_runs_of_a_lost_job_write_records_every_occurrence_once(
    container, clock, monkeypatch
):
    """The runs made at creation landed but the job's own write did not (throttled), so its
    cursor still names the first occurrence. Ten minutes later the sweep finds them all
    missed (`skip`): the range record at that key is refused (the run made then holds it),
    and the occurrences after the runs made then must still get their record, each once."""
    from jobsched.domain.schedule import fires_between

    job = new_job_whose_first_write_is_lost(container, monkeypatch)
    made = all_runs(container, job.job_id)
    stored = container.definitions.get(job.job_id)
    assert made and stored.runs_created == 0 and stored.next_run_at == made[0].scheduled_for
    clock.advance(600)
    report = container.sweeper.sweep()
    assert not report.failures
    runs = all_runs(container, job.job_id)
    held = _coverage(stored, runs)
    expected = fires_between(
        stored.spec.schedule, made[0].scheduled_for - timedelta(seconds=1), clock.now(), 1000
    )
    assert [t for t in expected if held[t] != 1] == []  # none left without a record, none with two
    assert any(r.skipped_through is not None and r.scheduled_for > made[-1].scheduled_for for r in runs)


def test_backfilled_occurrences_hold_their_keys_when_the_sweep_skips_the_missed_ones(api, container, clock):
    """Backfilled runs sit at the occurrences' own keys. A sweep ten minutes late (`skip`)
    meets one at its range's first key: the backfilled occurrences are held, the others get
    their SKIPPED record, each once, and the job moves on."""
    from jobsched.domain.schedule import fires_between

    job = new_job(container, every=15, missedRuns="skip")
    made = all_runs(container, job.job_id)
    clock.advance(600)
    start = made[-1].scheduled_for + timedelta(seconds=15)
    backfill = api.post(
        f"/v1/jobs/{job.job_id}/backfill",
        {
            "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end": (start + timedelta(seconds=75)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )
    assert backfill.status in (200, 201), backfill.body
    assert len(backfill.body["created"]) == 5
    for _ in range(2):
        assert not container.sweeper.sweep().failures
    stored = container.definitions.get(job.job_id)
    assert stored.next_run_at is not None and stored.next_run_at > clock.now() - timedelta(seconds=60)
    held = _coverage(stored, all_runs(container, job.job_id))
    expected = fires_between(
        stored.spec.schedule,
        made[0].scheduled_for - timedelta(seconds=1),
        clock.now() - timedelta(seconds=61),
        1000,
    )
    assert [t for t in expected if held[t] != 1] == []


def test_a_pass_that_meets_a_job_saved_meanwhile_writes_no_stretch(container, clock, monkeypatch):
    """Two passes from one version of the job: the other saved first (its runs may still be
    landing inside the stretches this one would fill), so this one records nothing more
    and leaves the job to its next pass."""
    from jobsched.services.materialize import MaterializeIncomplete

    job = new_job_whose_first_write_is_lost(container, monkeypatch)
    before = container.definitions.get(job.job_id)
    clock.advance(600)
    container.definitions.add_stats(job.job_id, missed=0)  # any write of the job: a new rev
    moved = container.definitions.get(job.job_id)
    if moved.rev == before.rev:
        moved = container.definitions.save(
            before.model_copy(update={"updated_at": clock.now()}), previous_state=before.state
        )
    count = len(all_runs(container, job.job_id))
    with pytest.raises(MaterializeIncomplete):
        container.sweeper._materializer._pass(before, clock.now(), "sweeper", timedelta(seconds=120))
    assert len(all_runs(container, job.job_id)) == count


def test_one_time_job_completes(container, clock):
    job = new_job(container, runAt="2026-11-02T08:01:00Z")
    stored = container.jobs.get("tenant-a", job.job_id)
    assert stored.state.value == "COMPLETED" and stored.next_run_at is None
    assert fmt(all_runs(container, job.job_id)) == [("08:01:00", "PENDING", None)]
    assert container.sweeper.sweep().jobs_read == 0  # out of the due index


def test_max_runs_completes_the_job(container, clock):
    job = new_job(container, every=20, maxRuns=3)
    assert len(all_runs(container, job.job_id)) == 3
    assert container.jobs.get("tenant-a", job.job_id).state.value == "COMPLETED"


def test_end_at_completes_the_job(container, clock):
    job = new_job(container, every=60, endAt="2026-11-02T08:03:00Z")
    clock.advance(120)
    container.sweeper.sweep()
    assert [r.scheduled_for.minute for r in all_runs(container, job.job_id)] == [0, 1, 2, 3]
    assert container.jobs.get("tenant-a", job.job_id).state.value == "COMPLETED"


def test_dst_fall_back_end_to_end(container, clock):
    # London falls back 2026-10-25 at 01:00Z (02:00 BST → 01:00 GMT): 01:30 local happens twice.
    clock.set(datetime(2026, 10, 24, 23, 59, 0, tzinfo=UTC))
    first = new_job(container, cron="30 1 * * *", timeZone="Europe/London", dst={"fold": "first"})
    last = new_job(container, cron="30 1 * * *", timeZone="Europe/London", dst={"fold": "last"})
    for minute in range(0, 200, 1):
        clock.set(datetime(2026, 10, 24, 23, 59, 0, tzinfo=UTC) + timedelta(minutes=minute))
        container.sweeper.sweep()
    assert [r.scheduled_for for r in all_runs(container, first.job_id)] == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    ]
    assert [r.scheduled_for for r in all_runs(container, last.job_id)] == [
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
    ]


def test_dst_fold_both_makes_two_runs_with_their_own_keys_and_none_makes_none(container, clock):
    # London's 01:30 happens twice on 2026-10-25: at 00:30Z (BST) and 01:30Z (GMT).
    clock.set(datetime(2026, 10, 24, 23, 59, 0, tzinfo=UTC))
    both = new_job(container, cron="30 1 * * *", timeZone="Europe/London", dst={"fold": "both"})
    none = new_job(container, cron="30 1 * * *", timeZone="Europe/London", dst={"fold": "none"})
    for minute in range(0, 200, 1):
        clock.set(datetime(2026, 10, 24, 23, 59, 0, tzinfo=UTC) + timedelta(minutes=minute))
        assert not container.sweeper.sweep().failures
    runs = all_runs(container, both.job_id)
    assert [r.scheduled_for for r in runs] == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    ]
    assert [r.run_key for r in runs] == [
        f"{both.job_id}@2026-10-25T00:30:00Z",
        f"{both.job_id}@2026-10-25T01:30:00Z",
    ]
    assert all_runs(container, none.job_id) == []
    assert container.definitions.get(none.job_id).next_run_at == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


def test_dst_spring_forward_gap_end_to_end(container, clock):
    # New York springs forward 2026-03-08 at 07:00Z: 02:30 local does not exist.
    clock.set(datetime(2026, 3, 8, 6, 0, 0, tzinfo=UTC))
    shift = new_job(container, cron="30 2 * * *", timeZone="America/New_York", dst={"gap": "shift"})
    skip = new_job(container, cron="30 2 * * *", timeZone="America/New_York", dst={"gap": "skip"})
    for minute in range(0, 120, 1):
        clock.set(datetime(2026, 3, 8, 6, 0, 0, tzinfo=UTC) + timedelta(minutes=minute))
        container.sweeper.sweep()
    assert [r.scheduled_for for r in all_runs(container, shift.job_id)] == [
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    ]
    assert all_runs(container, skip.job_id) == []
    assert container.jobs.get("tenant-a", skip.job_id).next_run_at == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)


def test_start_jitter_is_stable_and_bounded(container, clock):
    job = new_job(container, every=10, jitterSeconds=8)
    runs = all_runs(container, job.job_id)
    offsets = [(r.due_at - r.scheduled_for).total_seconds() for r in runs]
    assert all(0 <= o <= 8 for o in offsets) and len(set(offsets)) > 1
    from jobsched.domain.jitter import start_jitter_seconds

    assert offsets == [start_jitter_seconds(r.run_key, 8) for r in runs]


def test_paused_job_is_not_swept(container, clock):
    job = new_job(container, every=30, startAt="2026-11-02T08:10:00Z")
    container.jobs.pause("tenant-a", job.job_id)
    clock.advance(900)
    assert container.sweeper.sweep().jobs_read == 0
    assert all_runs(container, job.job_id) == []


def test_sweep_reads_only_due_jobs(container, clock):
    # 40 jobs far in the future, 3 due: the due index is read for the 3 alone.
    for _ in range(40):
        new_job(container, cron="0 0 1 1 *", timeZone="UTC")
    due = [new_job(container, every=3600, startAt="2026-11-02T08:30:00Z") for _ in range(3)]
    clock.advance(29 * 60)
    report = container.sweeper.sweep()
    assert report.jobs_read == 3
    assert report.runs_created == 3
    assert {r.job_id for j in due for r in all_runs(container, j.job_id)} == {j.job_id for j in due}


def test_a_failing_job_does_not_block_its_shard(container, clock, monkeypatch):
    good = new_job(container, every=3600, startAt="2026-11-02T08:30:00Z")
    bad = new_job(container, every=3600, startAt="2026-11-02T08:30:00Z")
    original = container.materializer.materialize

    def flaky(job, **kw):
        if job.job_id == bad.job_id:
            raise RuntimeError("boom")
        return original(job, **kw)

    monkeypatch.setattr(container.materializer, "materialize", flaky)
    clock.advance(29 * 60)
    report = container.sweeper.sweep()
    assert report.failures == [bad.job_id]
    assert len(all_runs(container, good.job_id)) == 1
    # The failed job is still due and is picked up by the next sweep.
    monkeypatch.setattr(container.materializer, "materialize", original)
    assert container.sweeper.sweep().runs_created == 1


def test_a_shard_whose_index_cannot_be_read_does_not_stop_the_others(container, clock, monkeypatch):
    jobs = [new_job(container, every=3600, startAt="2026-11-02T08:30:00Z") for _ in range(6)]
    shard_of = container.definitions.shard_of
    shards = {shard_of(job.job_id) for job in jobs}
    assert len(shards) > 1
    throttled = min(shards)
    original = container.definitions.due_jobs

    def due_jobs(shard, *args, **kw):
        if shard == throttled:
            raise RuntimeError("ProvisionedThroughputExceededException")
        return original(shard, *args, **kw)

    monkeypatch.setattr(container.definitions, "due_jobs", due_jobs)
    clock.advance(29 * 60)
    report = container.sweeper.sweep()
    assert report.failures == [f"shard:{throttled}"]
    assert report.runs_created == sum(1 for job in jobs if shard_of(job.job_id) != throttled)


def rewrite_job_item(container, job_id, **attributes):
    """Set attributes of a job's item as another release (or a hand edit) would write them."""
    import boto3

    boto3.client("dynamodb").update_item(
        TableName=container.settings.definitions_table,
        Key={"job_id": {"S": job_id}},
        UpdateExpression="SET " + ", ".join(f"#{name} = :{name}" for name in attributes),
        ExpressionAttributeNames={f"#{name}": name for name in attributes},
        ExpressionAttributeValues={f":{name}": {"S": value} for name, value in attributes.items()},
    )


def with_added_members(spec_json):
    """A stored spec as a newer release writes it: with members this release does not know."""
    spec = json.loads(spec_json)
    spec["added_later"] = {"any": "value"}
    spec["schedule"]["added_later"] = 1
    spec.setdefault("policies", {})["added_later"] = True
    return json.dumps(spec)


def test_one_unreadable_job_holds_back_none_of_its_shard_and_is_reported(container, clock, caplog):
    """A due job whose item this release cannot read (a state it does not have: a rollback
    past the release that added it, or a hand edit) is passed over: every other job of its
    shard still gets its runs, one a newer release wrote with members this release does not
    know among them; the unreadable one is reported by the handler, logged with its id and
    counted (UnreadableJobs) at every sweep while it stays so, and is no sweep failure."""
    from jobsched.handlers import sweeper as sweeper_handler
    from jobsched_local.lambda_context import InvocationContext

    jobs = [new_job(container, every=3600, startAt="2026-11-02T08:30:00Z", name=f"j{i}") for i in range(12)]
    by_shard: dict[int, list] = {}
    for job in jobs:
        by_shard.setdefault(container.definitions.shard_of(job.job_id), []).append(job)
    bad, newer, *_ = max(by_shard.values(), key=len)  # 12 jobs in 4 shards: 3 or more
    rewrite_job_item(container, bad.job_id, state="ARCHIVED")
    item = container.definitions._db.get_item(
        TableName=container.settings.definitions_table, Key={"job_id": {"S": newer.job_id}}
    )["Item"]
    rewrite_job_item(container, newer.job_id, spec=with_added_members(item["spec"]["S"]), added_later="x")
    clock.advance(29 * 60)
    container.metrics.clear()
    caplog.set_level("ERROR")

    report = sweeper_handler.handler(
        {}, InvocationContext(function_name="jobsched-sweeper", timeout_seconds=60)
    )

    assert report["unreadable"] == [bad.job_id] and report["failures"] == []
    assert all(len(all_runs(container, job.job_id)) == 1 for job in jobs if job is not bad)
    assert all_runs(container, bad.job_id) == []
    assert container.metrics.values("UnreadableJobs") == [1.0]
    logged = [r for r in caplog.records if r.getMessage() == "unreadable job item"]
    assert [r.__dict__["key"] for r in logged] == [bad.job_id]
    assert container.metrics.values("SweepFailures") == [0.0]
    # It stays due: the next sweep meets it, and says so, again.
    clock.advance(60)
    assert container.sweeper.sweep().unreadable == [bad.job_id]
    assert container.metrics.values("UnreadableJobs") == [1.0, 1.0]


def test_crash_between_run_writes_and_advance_is_harmless(container, clock, monkeypatch):
    job = new_job(container, every=30, startAt="2026-11-02T08:10:00Z")
    clock.advance(9 * 60)
    saved = container.definitions.save

    def crash(job, **kw):
        raise RuntimeError("crash after runs were written")

    monkeypatch.setattr(container.definitions, "save", crash)
    with pytest.raises(RuntimeError):
        container.materializer.materialize(container.jobs.get("tenant-a", job.job_id))
    written = all_runs(container, job.job_id)
    assert written
    monkeypatch.setattr(container.definitions, "save", saved)
    report = container.sweeper.sweep()
    assert report.conflicts == len(written) and report.runs_created == 0
    assert all_runs(container, job.job_id) == written
    assert container.jobs.get("tenant-a", job.job_id).runs_created == len(written)


def test_sweeping_ahead_advances_a_minutely_job_once_for_several_runs(aws, clock, monkeypatch):
    from jobsched import wiring
    from jobsched.settings import Settings

    settings = Settings(shard_count=4, queue_urls=aws["urls"], sweep_ahead_seconds=300)
    container = wiring.Container(settings, clock)
    wiring.override(container)
    try:
        job = new_job(container, cron="0 * * * * *", timeZone="UTC", startAt="2026-11-02T08:10:00Z")
        # The API makes runs only up to the horizon: none yet for a job starting in 10 minutes.
        assert all_runs(container, job.job_id) == []
        saves: list[datetime | None] = []
        save = container.definitions.save

        def recording_save(j, **kw):
            saves.append(j.next_run_at)
            return save(j, **kw)

        monkeypatch.setattr(container.definitions, "save", recording_save)

        made = []
        for minute in range(8, 20):  # one sweep a minute from 08:08 to 08:19
            clock.set(T0 + timedelta(minutes=minute))
            made.append(container.sweeper.sweep().runs_created)

        runs = all_runs(container, job.job_id)
        assert [r.scheduled_for for r in runs] == [
            datetime(2026, 11, 2, 8, m, tzinfo=UTC) for m in range(10, 22)
        ]  # every minute, each once, up to 300 s past the last sweep that picked the job up (08:16)
        # Picked up at 08:08, 08:12 and 08:16 (next run within the 120 s horizon): three
        # advances for twelve runs, where sweeping to the horizon only advances once per run.
        assert made == [4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0] and len(saves) == 3
        assert all(r.previous_run_key == p.run_key for p, r in itertools.pairwise(runs))
    finally:
        wiring.override(None)


def test_on_time_jobs_behind_a_long_backlog_are_still_read_and_memory_is_bounded(
    container, clock, monkeypatch
):
    """The due index lists a shard's backlog first (oldest next_run_at). However long it is,
    the sweep pages on to the on-time jobs behind it, and holds at most
    max_backlog_per_shard backlogged jobs; the rest are deferred, not read into memory."""
    late = [new_job(container, every=3600, startAt="2026-11-02T07:00:00Z") for _ in range(6)]
    on_time = [new_job(container, every=3600, startAt="2026-11-02T08:30:00Z") for _ in range(2)]
    clock.advance(29 * 60)
    sweeper = container.sweeper
    order = [container.definitions.get(j.job_id) for j in [*late, *on_time]]
    missed = clock.now() - timedelta(minutes=20)  # as if missed by more than the grace
    order = [j.model_copy(update={"next_run_at": missed}) for j in order[:6]] + order[6:]

    def due_jobs(shard, until, *, limit, start=None):  # every job in shard 0, backlog first
        listed = order if shard == 0 else []
        position = int(start["at"]) if start else 0
        more = {"at": str(position + limit)} if position + limit < len(listed) else None
        return DuePage(listed[position : position + limit], [], more)

    monkeypatch.setattr(container.definitions, "due_jobs", due_jobs)
    monkeypatch.setattr(container.materializer, "materialize", lambda job, **kw: _made(job))
    sweeper.page_size, sweeper.max_jobs_per_shard, sweeper.max_backlog_per_shard = 1, 2, 1
    _MADE.clear()
    report = sweeper.sweep()
    assert {j.job_id for j in on_time} <= set(_MADE)
    held = {j.job_id for j in late} & set(_MADE)
    assert len(held) == 1
    assert {j.job_id for j in late} - held <= set(report.deferred)


_MADE: list[str] = []


def _made(job):
    from jobsched.services.materialize import Materialized

    _MADE.append(job.job_id)
    return Materialized(job)


def containers_with_shards(aws, clock, *counts):
    from jobsched import wiring
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched.settings import Settings

    return [
        wiring.Container(
            Settings(shard_count=n, sweep_ahead_seconds=120, queue_urls=aws["urls"]), clock, RecordedMetrics()
        )
        for n in counts
    ]


def test_the_api_records_the_shard_count_before_its_first_job_and_never_lowers_it(aws, clock):
    wide, narrow = containers_with_shards(aws, clock, 8, 2)
    assert wide.definitions.recorded_shard_count() is None
    new_job(wide, every=60)
    assert wide.definitions.recorded_shard_count() == 8
    new_job(narrow, every=60)
    assert narrow.definitions.recorded_shard_count() == 8
    assert narrow.definitions.shard_count_in_use() == 8
    (wider,) = containers_with_shards(aws, clock, 16)
    assert wider.definitions.shard_count_in_use() == 16
    assert wide.definitions.recorded_shard_count() == 16
    # Never a job: the API's GET does not read the record as one.
    assert wide.definitions.get("meta#shards") is None


def test_a_lowered_shard_count_still_sweeps_the_jobs_above_it_and_alarms(aws, clock, caplog):
    """Jobs written at shardCount 8, swept by sweepers at shardCount 2 (one invocation per
    shard, as the rules invoke them): every job is still swept, each moves to its new shard as
    it advances, and each pass reports the gap (error log, ShardCountBelowInUse) for the alarm."""
    wide, narrow = containers_with_shards(aws, clock, 8, 2)
    jobs = [new_job(wide, every=60, name=f"j{i}") for i in range(24)]
    old_shards = {wide.definitions.shard_of(j.job_id) for j in jobs}
    assert max(old_shards) >= 2  # some jobs sit above the new count
    made = {j.job_id: len(all_runs(wide, j.job_id)) for j in jobs}
    clock.advance(60)
    caplog.set_level("ERROR")
    reports = [narrow.sweeper.sweep([shard]) for shard in (0, 1)]
    assert sorted(s for r in reports for s in r.shards) == list(range(8))
    for job in jobs:
        assert len(all_runs(wide, job.job_id)) > made[job.job_id], job.job_id
        stored = narrow.definitions.get(job.job_id)
        assert stored is not None and stored.next_run_at > clock.now()
    assert narrow.metrics.values("ShardCountBelowInUse") == [6, 6]
    assert "below the highest shard count in use" in caplog.text
    # Moved: at the new count, every job is now in shard 0 or 1 of the due index.
    import boto3

    ddb = boto3.client("dynamodb")
    table = narrow.settings.definitions_table
    for job in jobs:
        item = ddb.get_item(TableName=table, Key={"job_id": {"S": job.job_id}})["Item"]
        assert int(item["due_shard"]["N"]) == narrow.definitions.shard_of(job.job_id) < 2
    assert narrow.definitions.recorded_shard_count() == 8  # lowered only by an operator


def test_a_sweeper_at_the_recorded_count_reports_no_gap(aws, clock):
    (same,) = containers_with_shards(aws, clock, 4)
    same.sweeper.sweep()
    assert same.metrics.values("ShardCountBelowInUse") == [0]
    assert same.definitions.recorded_shard_count() == 4
