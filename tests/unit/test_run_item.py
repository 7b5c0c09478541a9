"""The run item's document: what `run_doc` leaves out, `_read_doc` restores exactly, for any
history (actors, fences, attempts and trace ids that repeat or change, entries compaction
dropped), any instants and any previous run key; and a run's usual life stays under the
1 KB write unit."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.models import HttpTarget, Job, JobSpec, Priority, Schedule, ScheduleKind, SecretRef
from jobsched.domain.runs import RunState, Transition, make_run
from jobsched.store.runs import RunStore

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STORE = RunStore(client=None, table_name="runs", shard_count=4, trace=lambda: None)
TARGET = HttpTarget(
    kind="http",
    url="https://hooks.example.com/jobsched/v1/tenants/tenant-a/deliveries",
    headers={
        "Authorization": SecretRef(
            value_from="arn:aws:secretsmanager:eu-west-1:123456789012:secret:tenant-a/hooks-AbCdEf",
            json_key="token",
            prefix="Bearer ",
        ),
        "X-Tenant": "tenant-a",
    },
)
# About 1 KB of JSON, as a job's payload.
PAYLOAD = {"rows": [{"id": f"row-{i:04d}", "value": "x" * 24} for i in range(22)]}


def a_run(
    job_id: str = "j_9k4s0bwhmv1hf39c",
    tenant: str = "tenant-a",
    *,
    since: int | None = None,
    target: HttpTarget | None = None,
    payload: object = None,
    later: int = 0,
):
    """A run made from version `since` + `later` of a job whose definition is of `since`."""
    spec = JobSpec(
        name="n",
        type="bench.mark",
        schedule=Schedule(kind=ScheduleKind.RATE, every_seconds=60),
        target=target,
        payload=payload,
    )
    job = Job(
        job_id=job_id,
        tenant=tenant,
        spec=spec,
        created_at=T0,
        updated_at=T0,
        version=(since or 1) + later,
        definition_since=since,
    )
    return make_run(job, T0, now=T0, actor="sweeper")


def item_bytes(item: dict) -> int:
    return sum(len(k.encode()) + len(str(next(iter(v.values()))).encode()) for k, v in item.items())


instants = st.integers(0, 10_000).map(lambda s: T0 + timedelta(seconds=s))
entries = st.builds(
    Transition,
    at=instants,
    actor=st.sampled_from(["sweeper", "outbox", "worker:a", "worker:b", "api:t", "reconciler"]),
    source=st.none() | st.sampled_from(list(RunState)),
    target=st.sampled_from(list(RunState)),
    fence=st.integers(0, 3),
    attempt=st.integers(0, 3),
    reason=st.none() | st.text(max_size=5),
    trace_id=st.none() | st.sampled_from(["1-a-1", "1-a-2"]),
)


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(entries, min_size=0, max_size=6),
    created=instants,
    updated=instants,
    # A previous run key is always a run key: `<job_id>@<instant>`, of this job or (by hand) another.
    previous=st.none() | st.sampled_from(["@2026-11-02T07:59:00Z", "j_other@2026-11-02T07:59:00Z"]),
    since=st.none() | st.integers(1, 40),
    target=st.none() | st.just(TARGET),
    payload=st.none() | st.just(PAYLOAD) | st.integers(),
    later=st.integers(0, 3),
    # The lease's and the in-progress record's fields, in any state: held as attributes or not.
    state=st.sampled_from(list(RunState)),
    lease=st.none() | instants,
    effect_fence=st.none() | st.integers(0, 3),
    effect_until=st.none() | instants,
    result_saved=st.none() | instants,
    priority=st.sampled_from(list(Priority)),
)
def test_an_item_reads_back_as_the_run_it_was_written_from(
    history,
    created,
    updated,
    previous,
    since,
    target,
    payload,
    later,
    state,
    lease,
    effect_fence,
    effect_until,
    result_saved,
    priority,
):
    base = a_run(since=since, target=target, payload=payload, later=later)
    # Only the creation has no source (compaction leaves the source of an entry after a gap).
    history = [
        e if i == 0 or e.source else e.model_copy(update={"source": e.target}) for i, e in enumerate(history)
    ]
    run = base.model_copy(
        update={
            "history": history,
            "created_at": created,
            "updated_at": updated,
            "state": state,
            "lease_expires_at": lease if lease or state is not RunState.LEASED else T0,  # LEASED has one
            "effect_fence": effect_fence,
            "effect_until": effect_until,
            "result_saved_at": result_saved,
            "priority": priority,
            "previous_run_key": None
            if previous is None
            else previous.replace("@", base.job_id + "@", 1)
            if previous.startswith("@")
            else previous,
        }
    )
    item = STORE.to_item(run)
    read = RunStore.from_item(item)
    if since is None:
        assert read == run  # its own definition, stored with it
    else:
        # It references its job's definition from `since`: read back unresolved.
        assert read == run.with_definition(None, None)
        assert (read.definition_since, read.target_kind) == (since, target.kind if target else None)
        assert read.has_target is (target is not None)
    # What the item holds as attributes, the document leaves out.
    doc = json.loads(item["doc"]["S"])
    assert not {"lease_expires_at", "effect_fence", "effect_until"} & set(doc) & set(item)


def test_what_a_reader_restores_is_left_out_of_the_document():
    run = a_run()
    claimed = [
        Transition(at=T0, actor="sweeper", target=RunState.PENDING, fence=0, attempt=0),
        Transition(at=T0, actor="outbox", target=RunState.QUEUED, fence=0, attempt=0),
        Transition(
            at=T0 + timedelta(seconds=5), actor="worker:w", target=RunState.LEASED, fence=1, attempt=1
        ),
        Transition(
            at=T0 + timedelta(seconds=6), actor="worker:w", target=RunState.SUCCEEDED, fence=1, attempt=1
        ),
    ]
    run = run.model_copy(
        update={
            "history": claimed,
            "updated_at": T0 + timedelta(seconds=6),
            "previous_run_key": f"{run.job_id}@2026-11-02T07:59:00Z",
        }
    )
    doc = json.loads(STORE.to_item(run)["doc"]["S"])
    assert "created_at" not in doc and "updated_at" not in doc
    assert doc["previous_run_key"] == "2026-11-02T07:59:00Z"
    last = doc["history"][-1]
    assert set(last) == {"at", "target"}  # actor, fence and attempt carried from the claim
    assert doc["history"][2]["actor"] == "worker:w" and doc["history"][2]["fence"] == 1


def usual_life(run):
    """`run` through a recurring run's usual life: queued, claimed, succeeded."""
    # A worker's actor is its invocation's request id; trace ids are X-Ray's 35 characters.
    run = run.model_copy(update={"previous_run_key": "j_9k4s0bwhmv1hf39c@2026-11-02T07:59:00Z"})
    worker = "worker:bb66b1e0-528d-4248-8d29-8dba79a3ebde"
    steps = [
        ("outbox", RunState.QUEUED, 0, 0, 0),
        (worker, RunState.LEASED, 1, 1, 10),
        (worker, RunState.SUCCEEDED, 1, 1, 11),
    ]
    history = [run.history[0].model_copy(update={"trace_id": "1-6ae8433c-000000000000000000000045"})]
    for n, (actor, state, fence, attempt, later) in enumerate(steps):
        at = T0 + timedelta(seconds=later)
        trace = None if state is RunState.SUCCEEDED else f"1-6ae8433c-00000000000000000000006{n}"
        history.append(
            Transition(at=at, actor=actor, target=state, fence=fence, attempt=attempt, trace_id=trace)
        )
    done = run.model_copy(
        update={
            "state": RunState.SUCCEEDED,
            "fence": 1,
            "attempt": 1,
            "claim_token": "dd86fca625c0d2eb",
            "tenant_slot": 47,
            "first_attempt_at": T0 + timedelta(seconds=10),
            "result": {"ok": True},
            "history": history,
            "updated_at": T0 + timedelta(seconds=11),
            "finished_at": T0 + timedelta(seconds=11),
        }
    )
    return done


def test_a_recurring_runs_usual_life_stays_under_one_write_unit():
    done = usual_life(a_run())
    assert item_bytes(STORE.to_item(done)) < 1024


def test_an_item_written_by_the_earlier_version_reads_as_it_did():
    # Then the priority was an attribute, left out of the document, and the lease's and the
    # record's fields were in the document as well as attributes.
    run = a_run().model_copy(
        update={"priority": Priority.HIGH, "state": RunState.LEASED, "lease_expires_at": T0, "fence": 1}
    )
    item = STORE.to_item(run)
    doc = json.loads(item["doc"]["S"])
    doc.pop("priority")
    doc["lease_expires_at"] = "2026-11-02T08:00:00Z"
    earlier = {**item, "priority": {"S": "high"}, "doc": {"S": json.dumps(doc)}}
    assert RunStore.from_item(earlier) == run


def test_a_run_referencing_its_jobs_http_target_and_1kb_payload_stays_under_one_write_unit():
    # The job's definition of version 3 has an HTTP target (a secret header) and ~1 KB payload.
    assert len(json.dumps(PAYLOAD, separators=(",", ":"))) >= 1000
    done = usual_life(a_run(since=3, target=TARGET, payload=PAYLOAD))
    item = STORE.to_item(done)
    assert item_bytes(item) < 1024
    doc = json.loads(item["doc"]["S"])
    assert "target" not in doc and "payload" not in doc
    assert doc["def"] == "http"  # the definition of version 3, the run's own version
    read = RunStore.from_item(item)
    assert (read.definition_since, read.target_kind, read.target, read.payload) == (3, "http", None, None)
    # The same run holding its own definition (made before jobs had one) does not fit.
    own = usual_life(a_run(target=TARGET, payload=PAYLOAD))
    assert item_bytes(STORE.to_item(own)) > 2048
