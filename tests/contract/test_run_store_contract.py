"""The run store's contract (store.ports), one suite for both adapters: RunStore on moto's
DynamoDB (`[dynamodb]`, marked integration) and InMemoryRunStore (`[memory]`). Each test
tries to break one promise of a port's docstring: a write from a stale read, under an old
fence or from a state the run has left; a refusal that must carry what is stored; a key
that is absent; a page order, a cursor walk, and which runs each sparse index holds after
each kind of write. The last tests hold the memory adapter to what DynamoDB does where moto
does less."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from jobsched.domain import lifecycle
from jobsched.domain.errors import ValidationFailed
from jobsched.domain.models import HttpTarget, Job, JobSpec, Schedule, ScheduleKind
from jobsched.domain.repair import RepairTimings
from jobsched.domain.run_listing import RunFilter, run_order
from jobsched.domain.runs import Run, RunState, Trigger, make_run
from jobsched.domain.tracing import TraceContext
from jobsched.domain.transitions import TransitionRefused
from jobsched.store.memory_runs import InMemoryRunStore
from jobsched.store.ports import RunStorePort
from jobsched.store.runs import PreparedPut, RunChanged, RunStore, key_sk

from tests.helpers import T0

SHARDS = 4
SHARD_OF = RunStore(None, "runs", SHARDS).open_shard_of
TARGET = HttpTarget(kind="http", url="https://hooks.example.com/jobsched")
TENANT = "tenant-a"
TYPE = "report.build"
FAR = T0 + timedelta(days=2)  # past every open run's check instant in these tests
MINUTE = timedelta(minutes=1)


@pytest.fixture(params=[pytest.param("dynamodb", marks=pytest.mark.integration), "memory"])
def make_store(request: pytest.FixtureRequest) -> Callable[..., RunStorePort]:
    """Stores of one adapter, built with RunStore's options; the DynamoDB ones share moto's
    Runs table."""
    if request.param == "memory":
        return lambda **options: InMemoryRunStore(SHARDS, **options)
    import boto3
    from jobsched.store.schema import RUNS

    request.getfixturevalue("aws")
    client = boto3.client("dynamodb")
    return lambda **options: RunStore(client, RUNS.default_name, SHARDS, **options)


@pytest.fixture
def store(make_store: Callable[..., RunStorePort]) -> RunStorePort:
    return make_store(trace=lambda: None)


def job(
    job_id: str = "j_contract", tenant: str = TENANT, *, target: bool = False, job_type: str = TYPE
) -> Job:
    """A job whose runs wait for external workers, or with `target`, call it."""
    spec = JobSpec(
        name="n",
        type=job_type,
        schedule=Schedule(kind=ScheduleKind.RATE, every_seconds=60),
        target=TARGET if target else None,
    )
    return Job(job_id=job_id, tenant=tenant, spec=spec, created_at=T0, updated_at=T0)


def a_run(at: datetime = T0, *, of: Job | None = None, **options: Any) -> Run:
    return make_run(of or job(), at, now=T0, actor="sweeper", **options)


def read(store: RunStorePort, run: Run) -> Run:
    stored = store.get_by_key(run.run_key)
    assert stored is not None
    return stored


def claim(at: datetime = T0, owner: str = "w1", lease_seconds: float = 60) -> Callable[[Run], Run]:
    return lambda run: lifecycle.claim(
        run, now=at, owner=owner, actor=f"worker:{owner}", lease_seconds=lease_seconds, token=owner
    )


def queued(at: datetime = T0) -> Callable[[Run], Run]:
    return lambda run: lifecycle.queued(run, now=at, actor="outbox")


def succeed(at: datetime = T0) -> Callable[[Run], Run]:
    return lambda run: lifecycle.succeed(run, now=at, actor="worker:w1", result={"ok": True})


def fail(at: datetime, *, retryable: bool) -> Callable[[Run], Run]:
    return lambda run: lifecycle.fail(
        run, now=at, actor="worker:w1", error_class="Boom", message="boom", retryable=retryable
    )


def key_of(run: Run) -> dict[str, Any]:
    return {"job_id": {"S": run.job_id}, "sk": {"S": key_sk(run.run_key)}}


def keys(runs: list[Run]) -> list[str]:
    return [run.run_key for run in runs]


def job_in_another_shard(than: str) -> Job:
    return next(job(f"j_shard{n}") for n in range(100) if SHARD_OF(f"j_shard{n}") != SHARD_OF(than))


# --- writes ---


def test_insert_creates_the_run_as_given(store):
    run = a_run()
    assert store.insert(run) is True
    assert store.get_by_key(run.run_key) == run


def test_insert_refuses_a_taken_key_and_leaves_the_stored_run(store):
    run = a_run()
    store.insert(run)
    twin = a_run(of=job(target=True))  # the same key, other content
    assert twin.run_key == run.run_key and twin != run
    assert store.insert(twin) is False
    assert store.insert(run) is False
    assert store.get_by_key(run.run_key) == run


def test_get_by_key_reads_any_spelling_and_none_when_absent_or_malformed(store):
    run = a_run()
    store.insert(run)
    assert store.get_by_key("j_contract@2026-11-02T09:00:00+01:00") == run  # T0 as another offset
    assert store.get_by_key("j_contract@2026-11-02T08:00:01Z") is None
    assert store.get_by_key("j_absent@2026-11-02T08:00:00Z") is None
    assert store.get_by_key("not a run key") is None


def test_commit_writes_the_change_at_the_next_rev(store):
    run = a_run()
    store.insert(run)
    written = store.commit(run, queued())
    assert (written.state, written.rev) == (RunState.QUEUED, 1)
    assert read(store, run) == written


def test_commit_from_a_stale_read_is_refused_with_the_stored_run(store):
    run = a_run()
    store.insert(run)
    first = store.commit(run, queued())
    with pytest.raises(RunChanged) as refused:
        store.commit(run, lambda r: lifecycle.cancel(r, now=T0, actor="api:tenant-a", reason="stop"))
    assert refused.value.current == first == read(store, run)


def test_commit_is_refused_when_the_stored_state_is_not_the_reads(store):
    run = a_run()
    store.insert(run)
    as_if_queued = run.model_copy(update={"state": RunState.QUEUED})  # at the stored rev
    with pytest.raises(RunChanged) as refused:
        store.commit(as_if_queued, claim())
    assert refused.value.current == run == read(store, run)


def test_commit_of_an_absent_run_is_refused_with_none(store):
    run = a_run()
    with pytest.raises(RunChanged) as refused:
        store.commit(run, queued())
    assert refused.value.current is None
    assert store.get_by_key(run.run_key) is None


def test_a_change_that_refuses_the_read_writes_nothing(store):
    run = a_run()
    store.insert(run)
    with pytest.raises(TransitionRefused):
        store.commit(run, succeed())  # a PENDING run cannot succeed
    assert read(store, run) == run


def test_a_holders_write_is_made_again_on_the_stored_run_when_only_the_rev_moved(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, claim())
    extended = store.extend_lease(leased, T0 + 5 * MINUTE)
    noted = store.commit(
        leased, lambda r: lifecycle.record_in_progress(r, now=T0, until=T0 + 10 * MINUTE)
    )  # the holder's bookkeeping, from the read before the heartbeat
    assert noted.rev == extended.rev + 1
    assert noted.lease_expires_at == T0 + 5 * MINUTE  # applied to the run as stored
    assert noted.effect_until == T0 + 10 * MINUTE
    assert read(store, run) == noted
    done = store.commit(leased, succeed(T0 + MINUTE))
    assert (done.state, done.rev) == (RunState.SUCCEEDED, noted.rev + 1)


def test_a_holders_write_under_an_old_fence_is_refused(store):
    run = a_run()
    store.insert(run)
    first = store.commit(run, claim(owner="w1", lease_seconds=60))
    second = store.commit(first, claim(at=T0 + 2 * MINUTE, owner="w2"))  # the lease had expired
    with pytest.raises(RunChanged) as refused:
        store.commit(first, succeed(T0 + 2 * MINUTE))
    assert refused.value.current == second == read(store, run)


def test_a_holders_write_is_refused_under_another_fence_even_at_the_stored_rev(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, claim())
    under_another_fence = leased.model_copy(update={"fence": leased.fence + 1})  # its rev and state
    with pytest.raises(RunChanged) as refused:
        store.commit(under_another_fence, succeed())
    assert refused.value.current == leased == read(store, run)


def test_a_write_of_anyone_else_is_never_made_again_on_a_run_written_since(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, claim(lease_seconds=60))
    extended = store.extend_lease(leased, T0 + 5 * MINUTE)
    with pytest.raises(RunChanged) as refused:
        # From the read before the heartbeat, the lease looks expired: it is not.
        store.commit(leased, lambda r: lifecycle.lease_expired(r, now=T0 + 2 * MINUTE, actor="reconciler"))
    assert refused.value.current == extended == read(store, run)


def test_a_claim_sent_again_after_it_landed_returns_the_claim(store):
    run = a_run()
    store.insert(run)
    claimed = claim()(run)  # made once: the same item both times
    first = store.commit(run, lambda r: claimed)
    assert store.commit(run, lambda r: claimed) == first == read(store, run)


def test_the_same_write_by_a_second_writer_not_holding_a_lease_is_refused(store):
    run = a_run()
    store.insert(run)
    mark = queued()(run)
    first = store.commit(run, lambda r: mark)
    with pytest.raises(RunChanged) as refused:
        store.commit(run, lambda r: mark)
    assert refused.value.current == first


def test_of_many_writers_from_one_read_exactly_one_wins(store, monkeypatch):
    admits = PreparedPut.admits

    def slowly(self: PreparedPut, stored: dict[str, Any] | None) -> bool:
        time.sleep(0.002)  # a store that checks a write's condition itself takes its time
        return admits(self, stored)

    monkeypatch.setattr(PreparedPut, "admits", slowly)
    runs = [a_run(T0 + n * MINUTE) for n in range(10)]
    writers = 4
    outcomes: list[Run | RunChanged] = []
    for run in runs:
        store.insert(run)
    start = threading.Barrier(writers)

    def write(owner: str) -> None:
        start.wait()
        for run in runs:
            try:
                outcomes.append(store.commit(run, claim(owner=owner)))
            except RunChanged as exc:
                outcomes.append(exc)

    threads = [threading.Thread(target=write, args=(f"w{n}",)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = {o.run_key: o for o in outcomes if isinstance(o, Run)}
    assert len([o for o in outcomes if isinstance(o, Run)]) == len(runs) == len(won)
    refusals = [o for o in outcomes if isinstance(o, RunChanged)]
    assert len(refusals) == len(runs) * (writers - 1)
    assert all(r.current is not None and r.current == won[r.current.run_key] for r in refusals)
    assert [read(store, run) for run in runs] == [won[run.run_key] for run in runs]


def test_replace_writes_bookkeeping_at_the_reads_rev_and_refuses_a_stale_one(store):
    run = a_run()
    store.insert(run)
    noted = store.replace(lifecycle.note(run, now=T0 + MINUTE, actor="reconciler", reason="waiting"))
    assert (noted.state, noted.rev, noted.updated_at) == (RunState.PENDING, 1, T0 + MINUTE)
    assert read(store, run) == noted
    with pytest.raises(RunChanged) as refused:
        store.replace(lifecycle.note(run, now=T0 + 2 * MINUTE, actor="reconciler", reason="again"))
    assert refused.value.current == noted


def test_the_entries_a_write_adds_carry_the_writers_trace(make_store):
    trace = TraceContext(root="1-674e6a07-8b1c2d3e4f5a6b7c8d9e0f1a")
    store = make_store(trace=lambda: trace)
    run = a_run()
    store.insert(run)
    inserted = read(store, run)
    assert [entry.trace_id for entry in inserted.history] == [trace.root]
    written = store.commit(inserted, queued())
    assert [entry.trace_id for entry in written.history] == [trace.root, trace.root]
    assert read(store, run) == written
    # What the caller wrote, unstamped, is what is stored, trace ids aside.
    assert store.written_as(written, queued()(inserted).model_copy(update={"rev": 1}))


def test_written_as_tells_a_stored_run_from_another_write(store):
    run = a_run()
    store.insert(run)
    mark = queued()(run)
    stored = store.commit(run, lambda r: mark)
    assert store.written_as(stored, mark.model_copy(update={"rev": 1}))
    assert not store.written_as(stored, mark)  # another rev
    assert not store.written_as(stored, queued(T0 + MINUTE)(run).model_copy(update={"rev": 1}))
    assert not store.written_as(None, mark)


# --- the heartbeat ---


def test_extend_lease_moves_the_lease_alone(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, claim())
    extended = store.extend_lease(leased, T0 + 5 * MINUTE, live_at=T0 + 30 * timedelta(seconds=1))
    assert extended == leased.model_copy(update={"lease_expires_at": T0 + 5 * MINUTE, "rev": leased.rev + 1})
    assert read(store, run) == extended


def test_extend_lease_extends_the_stored_run_when_only_the_rev_moved(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, claim())
    noted = store.commit(leased, lambda r: lifecycle.record_in_progress(r, now=T0, until=T0 + 9 * MINUTE))
    extended = store.extend_lease(leased, T0 + 5 * MINUTE)
    assert extended == noted.model_copy(update={"lease_expires_at": T0 + 5 * MINUTE, "rev": noted.rev + 1})
    assert read(store, run) == extended


def test_extend_lease_is_refused_once_the_fence_moved_on(store):
    run = a_run()
    store.insert(run)
    first = store.commit(run, claim(owner="w1"))
    second = store.commit(first, claim(at=T0 + 2 * MINUTE, owner="w2"))
    with pytest.raises(RunChanged, match="lease lost") as refused:
        store.extend_lease(first, T0 + 5 * MINUTE)
    assert refused.value.current == second == read(store, run)


def test_extend_lease_is_refused_for_a_run_no_longer_leased_or_absent(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, claim())
    done = store.commit(leased, succeed())
    with pytest.raises(RunChanged, match="lease lost") as refused:
        store.extend_lease(leased, T0 + 5 * MINUTE)
    assert refused.value.current == done
    absent = claim()(a_run(T0 + MINUTE))
    with pytest.raises(RunChanged, match="lease lost") as refused:
        store.extend_lease(absent, T0 + 5 * MINUTE)
    assert refused.value.current is None


def test_extend_lease_is_refused_for_a_lease_expired_at_live_at(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, claim(lease_seconds=60))
    with pytest.raises(RunChanged, match="lease expired") as refused:
        store.extend_lease(leased, T0 + 5 * MINUTE, live_at=T0 + MINUTE)  # it ended at T0 + 60 s
    assert refused.value.current == leased == read(store, run)
    assert store.extend_lease(leased, T0 + 5 * MINUTE).lease_expires_at == T0 + 5 * MINUTE  # no live_at


def test_extend_lease_of_a_run_holding_a_slot_needs_live_at(store):
    run = a_run()
    store.insert(run)
    leased = store.commit(run, lambda r: claim()(r).model_copy(update={"tenant_slot": 3}))
    with pytest.raises(ValueError, match="tenant slot"):
        store.extend_lease(leased, T0 + 5 * MINUTE)
    assert read(store, run) == leased


# --- reads ---


def test_read_keys_reads_the_runs_in_the_order_given_and_leaves_out_absent_ones(store):
    first, second = a_run(T0), a_run(T0 + MINUTE)
    store.insert(first)
    store.insert(second)
    absent = a_run(T0 + 2 * MINUTE)
    assert store.read_keys([key_of(second), key_of(absent), key_of(first), key_of(second)]).items == [
        second,
        first,
        second,
    ]
    assert store.read_keys([]).items == []


def test_scheduled_between_is_the_jobs_runs_from_start_to_before_end_oldest_first(store):
    mine = job()
    runs = [a_run(T0 + n * MINUTE, of=mine) for n in range(4)]
    manual = a_run(T0 + MINUTE, of=mine, trigger=Trigger.MANUAL)
    for run in [*runs, manual, a_run(T0 + MINUTE, of=job("j_other"))]:
        store.insert(run)
    found = store.scheduled_between(mine.job_id, T0 + MINUTE, T0 + 3 * MINUTE, limit=10)
    assert keys(found) == [runs[1].run_key, manual.run_key, runs[2].run_key]
    assert found[0] == runs[1]
    assert keys(store.scheduled_between(mine.job_id, T0, T0 + 3 * MINUTE, limit=2)) == keys(runs[:2])
    assert store.scheduled_between("j_absent", T0, FAR, limit=10) == []


def test_runs_after_are_the_jobs_runs_past_an_instant_in_key_order(store):
    mine = job()
    runs = [a_run(T0 + n * MINUTE, of=mine) for n in range(3)]
    manual = a_run(T0 + MINUTE, of=mine, trigger=Trigger.MANUAL)
    for run in [*runs, manual, a_run(T0 + 2 * MINUTE, of=job("j_other"))]:
        store.insert(run)
    assert store.runs_after(mine.job_id, None, FAR) == ([*runs[:2], manual, runs[2]], True)
    # Past an instant: none of its second, manual ones included; up to one: all of its second.
    assert store.runs_after(mine.job_id, T0 + MINUTE, FAR) == ([runs[2]], True)
    assert store.runs_after(mine.job_id, T0, T0 + MINUTE) == ([runs[1], manual], True)
    assert store.runs_after(mine.job_id, T0 + 2 * MINUTE, FAR) == ([], True)
    assert store.runs_after("j_absent", None, FAR) == ([], True)


def test_get_many_reads_the_runs_at_their_keys_leaving_out_absent_and_malformed(store):
    first, second = a_run(T0), a_run(T0 + MINUTE)
    store.insert(first)
    store.insert(second)
    absent = a_run(T0 + 2 * MINUTE)
    assert store.get_many([second.run_key, absent.run_key, "not a key", first.run_key]) == [second, first]
    assert store.get_many([]) == []


def test_occurrences_held_are_each_runs_instant_and_a_skipped_ranges_span(store):
    mine = job()
    ranged = a_run(
        T0 + MINUTE,
        of=mine,
        state=RunState.SKIPPED,
        skipped_through=T0 + 3 * MINUTE,
        skipped_count=3,
    )
    for run in (
        a_run(T0, of=mine),
        ranged,
        a_run(T0 + 5 * MINUTE, of=mine, trigger=Trigger.MANUAL),
        a_run(T0 + 6 * MINUTE, of=mine, trigger=Trigger.BACKFILL),
        a_run(T0 + 10 * MINUTE, of=mine),
        a_run(T0 + 6 * MINUTE, of=job("j_other")),
    ):
        store.insert(run)
    spans, complete = store.occurrences_held(mine.job_id, T0, T0 + 6 * MINUTE)
    assert complete
    assert spans == [(T0, T0), (T0 + MINUTE, T0 + 3 * MINUTE), (T0 + 6 * MINUTE, T0 + 6 * MINUTE)]
    assert store.occurrences_held("j_absent", T0, FAR) == ([], True)


def test_latest_ran_before_stops_where_the_overlap_walk_does(store):
    mine = job()
    ran = a_run(T0, of=mine)
    behind = lifecycle.skip(
        a_run(T0 + MINUTE, of=mine), now=T0, actor="sweeper", reason="overlap", overlapped_by=ran.run_key
    )
    missed = lifecycle.skip(a_run(T0 + 2 * MINUTE, of=mine), now=T0, actor="sweeper", reason="missed")
    current = a_run(T0 + 5 * MINUTE, of=mine)
    for run in (
        ran,
        behind,
        missed,
        a_run(T0 + 3 * MINUTE, of=mine, trigger=Trigger.MANUAL),
        a_run(T0 + 4 * MINUTE, of=mine, trigger=Trigger.BACKFILL),
        current,
        a_run(T0 + 4 * MINUTE, of=job("j_other")),
    ):
        store.insert(run)
    assert store.latest_ran_before(current) == (behind, True)  # past manual, backfill, a SKIPPED one
    assert store.latest_ran_before(behind) == (ran, True)
    assert store.latest_ran_before(ran) == (None, True)


# --- listings ---


def walk(page: Callable[[str | None], Any], limit: int) -> list[str]:
    """Every run key the listing's pages hold, following its cursors to the end."""
    found: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        answer = page(cursor)
        assert len(answer.items) <= limit
        found += [item.run_key for item in answer.items]
        cursor = answer.cursor
        if cursor is None:
            assert len(found) == len(set(found)), found
            return found
    raise AssertionError("the cursors never ended")


def test_list_for_job_pages_each_view_in_its_order(store):
    mine = job()
    runs = {n: a_run(T0 + n * MINUTE, of=mine) for n in range(-2, 3)}
    manual = a_run(T0, of=mine, trigger=Trigger.MANUAL)
    for run in [*runs.values(), manual, a_run(T0, of=job("j_other"))]:
        store.insert(run)

    def listed(view: Any, limit: int = 2, now: datetime | None = T0) -> list[str]:
        return walk(
            lambda cursor: store.list_for_job(mine.job_id, limit=limit, cursor=cursor, view=view, now=now),
            limit,
        )

    newest_first = [runs[2], runs[1], manual, runs[0], runs[-1], runs[-2]]
    assert listed("all", now=None) == keys(newest_first)
    assert listed("all", limit=6, now=None) == keys(newest_first)
    assert listed("history") == keys(newest_first[2:])
    assert listed("upcoming", limit=1) == keys([runs[1], runs[2]])
    assert store.list_for_job("j_absent", limit=5, cursor=None).items == []


def test_list_for_job_resumes_from_its_cursor_whatever_now_has_become(store):
    mine = job()
    runs = [a_run(T0 + n * MINUTE, of=mine) for n in (1, 2, 3)]
    for run in runs:
        store.insert(run)
    first = store.list_for_job(mine.job_id, limit=1, cursor=None, view="upcoming", now=T0)
    assert keys(first.items) == [runs[0].run_key] and first.cursor
    later = store.list_for_job(
        mine.job_id, limit=5, cursor=first.cursor, view="upcoming", now=T0 + 90 * timedelta(seconds=1)
    )
    assert keys(later.items) == keys(runs[1:])


def test_list_for_job_refuses_another_jobs_cursor_and_a_split_view_without_now(store):
    for n in range(3):
        store.insert(a_run(T0 + n * MINUTE))
        store.insert(a_run(T0 + n * MINUTE, of=job("j_other")))
    page = store.list_for_job("j_contract", limit=1, cursor=None)
    assert page.cursor is not None
    with pytest.raises(ValidationFailed):
        store.list_for_job("j_other", limit=1, cursor=page.cursor)
    with pytest.raises(ValidationFailed):
        store.list_for_job("j_contract", limit=1, cursor="not-a-cursor")
    with pytest.raises(ValueError, match="current instant"):
        store.list_for_job("j_contract", limit=1, cursor=None, view="history")


def tenant_runs(store: RunStorePort) -> list[Run]:
    """Eighteen runs of six jobs (in several lanes) at interleaved instants, two jobs' at one
    instant, one run made ahead, and another tenant's runs beside them."""
    jobs = [job(f"j_lane{n}") for n in range(6)]
    runs = [
        a_run(T0 + (n + 6 * k) * timedelta(seconds=1), of=j) for k in range(3) for n, j in enumerate(jobs)
    ]
    runs += [a_run(T0 + MINUTE, of=jobs[0]), a_run(T0 + MINUTE, of=jobs[3])]
    ahead = a_run(T0 + timedelta(hours=2), of=jobs[1])
    theirs = [
        a_run(T0 + n * timedelta(seconds=1), of=job(f"j_theirs{n}", tenant="tenant-b")) for n in range(3)
    ]
    for run in [*runs, ahead, *theirs]:
        store.insert(run)
    return runs


def newest_first(runs: list[Run]) -> list[str]:
    return [
        run.run_key for run in sorted(runs, key=lambda r: run_order(r.run_key, r.scheduled_for), reverse=True)
    ]


def test_list_for_tenant_pages_the_tenants_runs_newest_first_across_its_jobs(store):
    runs = tenant_runs(store)
    assert len({run.job_id for run in runs}) == 6

    def listed(run_filter: RunFilter, limit: int) -> list[str]:
        return walk(
            lambda cursor: store.list_for_tenant(
                TENANT, run_filter, limit=limit, cursor=cursor, due_by=T0 + MINUTE
            ),
            limit,
        )

    assert listed(RunFilter(), 4) == newest_first(runs)
    assert listed(RunFilter(), 100) == newest_first(runs)
    assert listed(RunFilter(job_id="j_lane3"), 2) == newest_first([r for r in runs if r.job_id == "j_lane3"])
    until = RunFilter(until=T0 + timedelta(hours=3))  # an explicit range lists what is made ahead
    assert len(listed(until, 5)) == len(runs) + 1
    assert listed(RunFilter(job_id="j_theirs0"), 5) == []  # another tenant's job


def test_list_for_tenant_keeps_what_the_filter_keeps_as_runs_change(store):
    runs = tenant_runs(store)
    store.commit(runs[4], queued())
    store.commit(runs[9], queued())
    only_queued = RunFilter(states=frozenset({RunState.QUEUED}))
    page = store.list_for_tenant(TENANT, only_queued, limit=10, cursor=None, due_by=FAR)
    assert [item.run_key for item in page.items] == newest_first([runs[4], runs[9]])
    assert {item.state for item in page.items} == {RunState.QUEUED}


def test_list_for_tenant_refuses_a_cursor_of_other_filters_or_another_tenant(store):
    tenant_runs(store)
    page = store.list_for_tenant(TENANT, RunFilter(), limit=2, cursor=None, due_by=FAR)
    assert page.cursor is not None
    with pytest.raises(ValidationFailed, match="other filters"):
        store.list_for_tenant(TENANT, RunFilter(job_type=TYPE), limit=2, cursor=page.cursor)
    with pytest.raises(ValidationFailed):
        store.list_for_tenant("tenant-b", RunFilter(), limit=2, cursor=page.cursor)


def kill(store: RunStorePort, run: Run, at: datetime) -> Run:
    leased = store.commit(run, claim(at))
    return store.commit(leased, fail(at, retryable=False))


def test_list_dead_pages_the_tenants_dead_runs_latest_first(store):
    mine = job()
    dead = []
    for n, died in enumerate([5, 1, 4, 2, 3]):
        run = a_run(T0 + n * MINUTE, of=mine)
        store.insert(run)
        dead.append(kill(store, run, T0 + died * MINUTE))
    theirs = a_run(of=job("j_theirs", tenant="tenant-b"))
    store.insert(theirs)
    kill(store, theirs, T0 + 9 * MINUTE)
    store.insert(a_run(T0 + 9 * MINUTE, of=mine))  # open: not dead
    latest_first = [run.run_key for run in sorted(dead, key=lambda r: r.finished_at or T0, reverse=True)]
    assert walk(lambda cursor: store.list_dead(TENANT, limit=2, cursor=cursor), 2) == latest_first
    page = store.list_dead(TENANT, limit=2, cursor=None)
    assert page.items == sorted(dead, key=lambda r: r.finished_at or T0, reverse=True)[:2]
    with pytest.raises(ValidationFailed):
        store.list_dead("tenant-b", limit=2, cursor=page.cursor)


# --- work lists ---


def test_overdue_keys_are_the_shards_runs_whose_check_has_come_earliest_first(store):
    mine = job("j_overdue", target=True)
    runs = [a_run(T0 + n * MINUTE, of=mine) for n in (2, 0, 3, 1)]
    for run in runs:
        store.insert(run)
    store.insert(a_run(T0, of=mine, trigger=Trigger.MANUAL, state=RunState.CANCELLED))  # finished
    store.insert(a_run(T0, of=job_in_another_shard(mine.job_id)))
    shard, grace = SHARD_OF(mine.job_id), store.timings.publish_grace
    by_check = sorted(runs, key=lambda r: r.due_at)
    page, _ = store.overdue_keys(shard, T0 + MINUTE + grace, limit=10)
    assert page == [key_of(run) for run in by_check[:2]]
    found: list[dict[str, Any]] = []
    cursor: dict[str, Any] | None = None
    for _ in range(10):
        page, cursor = store.overdue_keys(shard, FAR, limit=1, cursor=cursor)
        assert len(page) <= 1
        found += page
        if cursor is None:
            break
    assert found == [key_of(run) for run in by_check]
    assert store.read_keys(found).items == by_check


def test_move_check_moves_the_open_entry_and_leaves_the_rev(store):
    run = a_run(of=job(target=True))
    store.insert(run)
    shard, check = SHARD_OF(run.job_id), T0 + store.timings.publish_grace
    assert store.overdue_keys(shard, check, limit=10)[0] == [key_of(run)]
    assert store.move_check(run, T0 + 10 * MINUTE) is True
    assert store.overdue_keys(shard, T0 + 9 * MINUTE, limit=10)[0] == []
    assert store.overdue_keys(shard, T0 + 10 * MINUTE, limit=10)[0] == [key_of(run)]
    assert read(store, run) == run  # the rev too: a write from the same read still lands
    assert store.commit(run, queued()).rev == 1


def test_move_check_is_refused_for_a_changed_absent_or_unindexed_run(store):
    run = a_run(of=job(target=True))
    store.insert(run)
    store.commit(run, queued())
    assert store.move_check(run, T0 + 10 * MINUTE) is False  # changed since
    assert store.move_check(a_run(T0 + MINUTE), T0 + 10 * MINUTE) is False  # absent
    done = store.commit(store.commit(read(store, run), claim()), succeed())
    assert store.move_check(done, T0 + 10 * MINUTE) is False  # no entry
    assert store.overdue_keys(SHARD_OF(run.job_id), FAR, limit=10)[0] == []
    assert read(store, run) == done


def test_extend_lease_leaves_the_open_entry_where_it_was(store):
    run = a_run(of=job(target=True))
    store.insert(run)
    # Claimed past the usual path's settling time: the open entry is at the lease's deadline.
    at = T0 + store.timings.publish_grace
    leased = store.commit(run, claim(at, lease_seconds=60))
    shard, check = SHARD_OF(run.job_id), at + MINUTE + store.timings.lease_grace
    assert store.overdue_keys(shard, check - timedelta(seconds=1), limit=10)[0] == []
    extended = store.extend_lease(leased, T0 + 30 * MINUTE)
    assert store.overdue_keys(shard, check, limit=10)[0] == [key_of(run)]
    store.commit(extended, lambda r: lifecycle.record_in_progress(r, now=at, until=at))
    assert store.overdue_keys(shard, check, limit=10)[0] == []  # a whole write sets it anew


def test_claimable_pages_the_tenants_waiting_runs_of_a_type_due_by_now(store):
    mine = job("j_ext")
    runs = [a_run(T0 + n * MINUTE, of=mine) for n in (1, 3, 0, 2)]
    for run in runs:
        store.insert(run)
    for other in (
        a_run(T0, of=job("j_target", target=True)),
        a_run(T0, of=job("j_type", job_type="other.type")),
        a_run(T0, of=job("j_theirs", tenant="tenant-b")),
        a_run(T0 + 9 * MINUTE, of=mine).model_copy(update={"blocked_by": runs[0].run_key}),
    ):
        store.insert(other)
    by_due = sorted(runs, key=lambda r: r.due_at)
    page, _ = store.claimable(TENANT, TYPE, T0 + MINUTE, limit=10)
    assert page == by_due[:2]
    found: list[Run] = []
    cursor: dict[str, Any] | None = None
    for _ in range(10):
        page, cursor = store.claimable(TENANT, TYPE, FAR, limit=3, cursor=cursor)
        found += page
        if cursor is None:
            break
    assert found == by_due


def test_waits_for_lease_and_the_claimable_index_follow_is_external(make_store):
    store = make_store(is_external=lambda run: run.job_type == "ext.type", trace=lambda: None)
    external, handled = a_run(of=job("j_ext", job_type="ext.type")), a_run(of=job("j_handled"))
    assert store.waits_for_lease(external) and not store.waits_for_lease(handled)
    assert not store.waits_for_lease(a_run(of=job("j_target", target=True, job_type="ext.type")))
    store.insert(external)
    store.insert(handled)
    assert store.claimable(TENANT, "ext.type", FAR, limit=10)[0] == [external]
    assert store.claimable(TENANT, TYPE, FAR, limit=10)[0] == []


def test_timings_are_the_ones_given(make_store):
    timings = RepairTimings(publish_grace=timedelta(seconds=30))
    store = make_store(timings=timings, trace=lambda: None)
    assert store.timings == timings
    run = a_run(of=job(target=True))
    store.insert(run)
    shard = SHARD_OF(run.job_id)
    assert store.overdue_keys(shard, T0 + timedelta(seconds=29), limit=10)[0] == []
    assert store.overdue_keys(shard, T0 + timedelta(seconds=30), limit=10)[0] == [key_of(run)]


def test_each_kind_of_write_sets_the_runs_index_entries_from_the_run_as_written(store):
    run = a_run(of=job("j_life"))  # target-less: external workers lease it
    shard = SHARD_OF(run.job_id)
    t = [T0 + n * MINUTE for n in range(10)]
    steps: list[tuple[str, Callable[[Run], Run], tuple[bool, bool, bool]]] = [
        # what, the write, (open, claimable, dead)
        ("queued", lambda r: store.commit(r, queued(t[1])), (True, True, False)),
        ("claimed", lambda r: store.commit(r, claim(t[2])), (True, False, False)),
        ("heartbeat", lambda r: store.extend_lease(r, t[5]), (True, False, False)),
        ("failed, to retry", lambda r: store.commit(r, fail(t[3], retryable=True)), (True, True, False)),
        ("claimed again", lambda r: store.commit(r, claim(t[4], owner="w2")), (True, False, False)),
        ("failed for good", lambda r: store.commit(r, fail(t[5], retryable=False)), (False, False, True)),
        (
            "redriven",
            lambda r: store.commit(r, lambda d: lifecycle.redrive(d, now=t[6], actor="api:a", reason=None)),
            (True, True, False),
        ),
        (
            "blocked (bookkeeping)",
            lambda r: store.replace(
                lifecycle.note(r, now=t[7], actor="api:a", reason="b", blocked_by="j_x@z")
            ),
            (True, False, False),
        ),
        (
            "cancelled",
            lambda r: store.commit(r, lambda c: lifecycle.cancel(c, now=t[8], actor="api:a", reason="stop")),
            (False, False, False),
        ),
    ]

    def where(r: Run) -> tuple[bool, bool, bool]:
        return (
            key_of(r) in store.overdue_keys(shard, FAR, limit=100)[0],
            r.run_key in keys(store.claimable(TENANT, TYPE, FAR, limit=100)[0]),
            r.run_key in keys(store.list_dead(TENANT, limit=100, cursor=None).items),
        )

    def listed(r: Run) -> bool:
        page = store.list_for_tenant(TENANT, RunFilter(), limit=100, cursor=None, due_by=FAR)
        return [item.run_key for item in page.items] == [r.run_key]

    store.insert(run)
    assert (where(run), listed(run)) == ((True, True, False), True), "created"
    for what, write, expected in steps:
        run = write(run)
        assert read(store, run) == run, what
        assert (where(run), listed(run)) == (expected, True), what


# --- where moto does less than DynamoDB: the memory adapter does as DynamoDB does ---


def test_memory_names_a_cursor_for_every_full_page_as_dynamodb_does():
    store = InMemoryRunStore(SHARDS, trace=lambda: None)
    runs = [a_run(T0 + n * MINUTE) for n in range(2)]
    for run in runs:
        store.insert(run)
    full = store.list_for_job("j_contract", limit=2, cursor=None)
    assert len(full.items) == 2 and full.cursor is not None
    assert store.list_for_job("j_contract", limit=2, cursor=full.cursor) == type(full)([], None)


def test_memory_refuses_a_cursor_outside_the_views_range_as_dynamodb_does():
    from jobsched.store.dynamo import encode_cursor, to_item

    store = InMemoryRunStore(SHARDS, trace=lambda: None)
    store.insert(a_run())
    outside = encode_cursor(to_item({"job_id": "j_contract", "sk": "T#2026"}), "j_contract")
    with pytest.raises(ValidationFailed):
        store.list_for_job("j_contract", limit=2, cursor=outside)
