"""Run and job events (domain.events) and their publishing (services.events): which changes
make which events, ids stable across redelivery, levels, and PutEvents' limits and failures."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobsched.domain import lifecycle
from jobsched.domain.budget import MAX_HISTORY
from jobsched.domain.events import (
    EVENT_MESSAGE_CHARS,
    CloudEvent,
    EventType,
    RunEventData,
    RunEventsLevel,
    event_source,
    job_events,
    last_sequence,
    run_events,
)
from jobsched.domain.models import Job, JobSpec, JobState
from jobsched.domain.runs import Run, RunState, created
from jobsched.services.events import (
    MAX_ENTRIES,
    MAX_REQUEST_BYTES,
    Entry,
    EventPublisher,
    batches,
    entry_of,
)

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STACK = "Jobsched"
ALL = RunEventsLevel.ALL
FAILURES = RunEventsLevel.FAILURES


def a_run(state: RunState = RunState.PENDING, **fields: Any) -> Run:
    return created(
        Run(
            run_key="j_ev1@2026-11-02T08:00:00Z",
            job_id="j_ev1",
            tenant="tenant-a",
            job_type="report.build",
            scheduled_for=T0,
            due_at=T0,
            state=state,
            definition_version=1,
            created_at=T0,
            updated_at=T0,
            **fields,
        ),
        actor="sweeper",
    )


def to_dead(run: Run) -> list[Run]:
    """The run's writes from creation to DEAD, one per transition."""
    queued = lifecycle.queued(run, now=T0, actor="outbox")
    leased = lifecycle.claim(queued, now=T0, owner="w1", actor="worker:w1", lease_seconds=60, token="t1")
    dead = lifecycle.dead(
        leased, now=T0 + timedelta(seconds=2), actor="worker:w1", error_class="HTTP400", message="no"
    )
    return [run, queued, leased, dead]


def a_job(**fields: Any) -> Job:
    spec = JobSpec.model_validate(
        {"name": "nightly", "type": "report.build", "schedule": {"kind": "rate", "every_seconds": 3600}}
    )
    values: dict[str, Any] = {
        "job_id": "j_ev1",
        "tenant": "tenant-a",
        "spec": spec,
        "created_at": T0,
        "updated_at": T0,
        **fields,
    }
    return Job(**values)


def run_data(event: CloudEvent) -> RunEventData:
    assert isinstance(event.data, RunEventData)
    return event.data


# --- run events ---


def test_each_write_publishes_only_the_transitions_it_added():
    writes = to_dead(a_run())
    seen = [
        run_events(STACK, before, after, ALL) for before, after in zip([None, *writes], writes, strict=False)
    ]
    types = [[e.type for e in events] for events in seen]
    assert types == [
        [EventType.RUN_CREATED],
        [EventType.RUN_QUEUED],
        [EventType.RUN_STARTED],
        [EventType.RUN_DEAD],
    ]
    ids = [e.id for events in seen for e in events]
    assert ids == [f"j_ev1@2026-11-02T08:00:00Z#{n}" for n in range(4)]
    dead = run_data(seen[-1][0])
    assert dead.error_class == "HTTP400" and dead.actor == "worker:w1"
    assert dead.from_state is RunState.LEASED and dead.fence == 1 and dead.attempt == 1


def test_a_redelivered_record_makes_the_same_events_and_a_no_op_write_none():
    writes = to_dead(a_run())
    first = run_events(STACK, writes[2], writes[3], ALL)
    again = run_events(STACK, writes[2], writes[3], ALL)
    assert first == again
    assert run_events(STACK, writes[3], writes[3], ALL) == []  # a rewrite with no new transition


def test_failures_level_keeps_dead_and_skipped_only():
    writes = to_dead(a_run())
    kept = [
        e.type
        for before, after in zip([None, *writes], writes, strict=False)
        for e in run_events(STACK, before, after, FAILURES)
    ]
    assert kept == [EventType.RUN_DEAD]
    skipped = a_run(state=RunState.SKIPPED)
    assert [e.type for e in run_events(STACK, None, skipped, FAILURES)] == [EventType.RUN_SKIPPED]
    assert run_events(STACK, None, a_run(), RunEventsLevel.NONE) == []


def test_a_redrive_is_its_own_event_type_and_names_its_reason():
    dead = to_dead(a_run())[-1]
    redriven = lifecycle.advance(
        dead, RunState.PENDING, now=T0, actor="api:tenant-a", reason="bulk req-7: fixed"
    )
    (event,) = run_events(STACK, dead, redriven, ALL)
    assert event.type is EventType.RUN_REDRIVEN and run_data(event).reason == "bulk req-7: fixed"


def test_sequences_survive_the_history_budget_dropping_old_entries():
    """The byte budget drops the oldest entries but the creation: the ordinals of the entries
    kept do not move, so ids stay unique and a write's new transitions are still found."""
    run = a_run()
    writes = [run]
    for n in range(MAX_HISTORY + 5):
        if run.state is RunState.PENDING:
            run = lifecycle.queued(run, now=T0, actor="outbox")
        else:
            run = lifecycle.defer(run, now=T0, actor="worker:w", until=T0, reason=f"wait {n}")
        writes.append(run)
    assert run.history_dropped > 0
    ids: list[str] = []
    for before, after in zip([None, *writes], writes, strict=False):
        events = run_events(STACK, before, after, ALL)
        assert len(events) == 1
        ids.extend(e.id for e in events)
    assert len(ids) == len(set(ids)) == len(writes)
    assert last_sequence(run) == len(writes) - 1


@given(st.text(min_size=1, max_size=3000))
def test_an_event_holds_any_error_message_within_its_limit(message: str):
    leased = to_dead(a_run())[2]
    dead = lifecycle.dead(leased, now=T0, actor="worker:w1", error_class="Boom", message=message)
    (event,) = run_events(STACK, leased, dead, ALL)
    message_kept = run_data(event).error_message
    assert message_kept is not None and len(message_kept) <= EVENT_MESSAGE_CHARS
    assert CloudEvent.model_validate(event.document()) == event  # the JSON form reads back


def test_the_source_names_stack_and_tenant_with_a_slash_in_the_tenant_encoded():
    assert event_source("Jobsched", "123456789012/role/ops") == "jobsched/Jobsched/123456789012%2Frole%2Fops"
    (event,) = run_events(STACK, None, a_run(), ALL)
    assert event.source == "jobsched/Jobsched/tenant-a" and event.tenant == "tenant-a"
    document = event.document()
    assert document["specversion"] == "1.0" and document["subject"] == run_data(event).run_key
    assert document["data"]["runKey"] == run_data(event).run_key and document["data"]["from"] is None


# --- job events ---


def test_job_changes_make_one_event_each_and_the_sweeper_advance_none():
    job = a_job()
    (created_event,) = job_events(STACK, None, job, FAILURES, T0)
    assert created_event.type is EventType.JOB_CREATED and created_event.data.actor == "api:tenant-a"
    advanced = job.model_copy(update={"next_run_at": T0 + timedelta(hours=1), "rev": 1})
    assert job_events(STACK, job, advanced, ALL, T0) == []
    paused = advanced.model_copy(update={"state": JobState.PAUSED, "version": 2})
    (pause,) = job_events(STACK, advanced, paused, FAILURES, T0)
    assert pause.type is EventType.JOB_PAUSED and pause.data.from_state is JobState.ACTIVE
    resumed = paused.model_copy(update={"state": JobState.ACTIVE, "version": 3})
    assert [e.type for e in job_events(STACK, paused, resumed, ALL, T0)] == [EventType.JOB_RESUMED]
    patched = resumed.model_copy(update={"version": 4})
    assert [e.type for e in job_events(STACK, resumed, patched, ALL, T0)] == [EventType.JOB_UPDATED]
    assert job_events(STACK, resumed, patched, RunEventsLevel.NONE, T0) == []


def test_completion_is_the_sweepers_at_the_records_time_and_its_id_differs_from_the_last_change():
    job = a_job(version=3)
    done = job.model_copy(update={"state": JobState.COMPLETED, "next_run_at": None})
    later = T0 + timedelta(days=2)
    (event,) = job_events(STACK, job, done, FAILURES, later)
    assert event.type is EventType.JOB_COMPLETED and event.data.actor == "sweeper" and event.time == later
    (last_change,) = job_events(STACK, None, job, ALL, T0)
    assert event.id != last_change.id


# --- publishing ---


def events(count: int) -> list[CloudEvent]:
    run = a_run()
    out = []
    for n in range(count):
        if run.state is RunState.PENDING:
            next_run = lifecycle.queued(run, now=T0, actor="outbox")
        else:
            next_run = lifecycle.defer(run, now=T0, actor="worker:w", until=T0, reason=f"wait {n}")
        out.extend(run_events(STACK, run, next_run, ALL))
        run = next_run
    return out


def test_requests_hold_at_most_ten_entries_and_256_kb():
    entries = [entry_of(str(n), e, "bus") for n, e in enumerate(events(25))]
    assert [len(b) for b in batches(entries)] == [10, 10, 5]
    big = Entry("big", {"Source": "s", "DetailType": "t", "Detail": "x" * (MAX_REQUEST_BYTES // 3)})
    assert [len(b) for b in batches([big, big, big, big])] == [2, 2]
    assert all(
        sum(e.size for e in b) <= MAX_REQUEST_BYTES and len(b) <= MAX_ENTRIES for b in batches(entries)
    )
    with pytest.raises(ValueError, match="over PutEvents' limit"):
        batches([Entry("huge", {"Source": "s", "DetailType": "t", "Detail": "x" * MAX_REQUEST_BYTES})])


class FlakyBus:
    """put_events that fails the entries the script names, call by call."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.calls: list[list[dict[str, Any]]] = []
        self.accepted: list[str] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(Entries)
        step = self.script.pop(0) if self.script else set()
        if isinstance(step, Exception):
            raise step
        results = []
        for index, entry in enumerate(Entries):
            if index in step:
                results.append({"ErrorCode": "ThrottlingException", "ErrorMessage": "slow down"})
            else:
                self.accepted.append(json.loads(entry["Detail"])["id"])
                results.append({"EventId": f"e{len(self.accepted)}"})
        return {"FailedEntryCount": len(step), "Entries": results}


def publisher(bus: FlakyBus, attempts: int = 3) -> EventPublisher:
    return EventPublisher(bus, "bus", attempts=attempts, sleep=lambda seconds: None)


def test_failed_entries_alone_are_sent_again_and_then_accepted():
    made = events(4)
    bus = FlakyBus([{1, 3}, {0}])
    report = publisher(bus).publish([(f"s{n}", [e]) for n, e in enumerate(made)])
    assert report.failed_records == [] and report.published == 4 and report.retries == 3
    assert [len(call) for call in bus.calls] == [4, 2, 1]
    assert sorted(bus.accepted) == sorted(e.id for e in made)


def test_an_entry_still_refused_fails_its_record_and_every_later_one_unsent():
    from botocore.exceptions import EndpointConnectionError

    made = events(25)
    records = [(f"s{n:02}", [e]) for n, e in enumerate(made)]
    # The second request (records 10-19): entry 2 (record s12) refused three times.
    bus = FlakyBus([set(), {2}, {0}, EndpointConnectionError(endpoint_url="x")])
    report = publisher(bus).publish(records)
    assert report.failed_records == [f"s{n:02}" for n in range(12, 25)]
    assert len(bus.calls) == 4  # nothing of the third request was sent
    assert f"{made[12].id}" not in bus.accepted


def test_a_whole_call_failing_counts_as_each_entry_failing():
    from botocore.exceptions import ClientError

    throttled = ClientError({"Error": {"Code": "ThrottlingException", "Message": "x"}}, "PutEvents")
    made = events(2)
    bus = FlakyBus([throttled])
    report = publisher(bus).publish([("a", made[:1]), ("b", made[1:])])
    assert report.failed_records == [] and report.published == 2 and len(bus.calls) == 2


def test_the_documented_example_event_is_valid_against_the_model():
    """docs/concepts/events.md shows a whole event: it must be one the model reads back (and
    a job with notifications: one the API's model reads)."""
    import re
    from pathlib import Path

    from jobsched.api_models.requests import JobBody

    page = (Path(__file__).resolve().parents[2] / "docs/concepts/events.md").read_text()
    blocks = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", page, re.S)]
    (example,) = [b for b in blocks if "specversion" in b]
    (job,) = [b for b in blocks if "notify" in b]
    assert len(JobBody.model_validate(job).to_spec().notify) == 2
    event = CloudEvent.model_validate(example)
    assert event.document() == example
    assert event.id == f"{run_data(event).run_key}#{run_data(event).sequence}"


def test_an_entry_refused_for_good_is_left_out_not_retried_and_not_a_failed_record():
    made = events(3)

    class Refusing(FlakyBus):
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            self.calls.append(Entries)
            answers = []
            for entry in Entries:
                if json.loads(entry["Detail"])["id"] == made[1].id:
                    answers.append({"ErrorCode": "InvalidArgument", "ErrorMessage": "no"})
                else:
                    self.accepted.append(json.loads(entry["Detail"])["id"])
                    answers.append({"EventId": "e"})
            return {"FailedEntryCount": 1, "Entries": answers}

    bus = Refusing([])
    report = publisher(bus).publish([(f"s{n}", [e]) for n, e in enumerate(made)])
    assert report.failed_records == [] and report.rejected == 1 and report.published == 2
    assert len(bus.calls) == 1  # never sent again


def test_an_event_too_large_for_any_request_is_left_out():
    (event,) = events(1)
    huge = event.model_copy(update={"subject": "x" * MAX_REQUEST_BYTES})
    bus = FlakyBus([])
    report = publisher(bus).publish([("s0", [huge]), ("s1", events(1))])
    assert report.rejected == 1 and report.published == 1 and report.failed_records == []


def test_a_tenant_too_long_for_eventbridges_source_is_named_by_its_digest():
    tenant = "123456789012/user/" + "p/" * 200 + "ops"
    source = event_source("S" * 128, tenant)
    assert len(source) <= 256 and source.startswith("jobsched/" + "S" * 128 + "/sha256:")
    assert event_source("S" * 128, tenant + "x") != source
    assert event_source("Jobsched", "tenant-a") == "jobsched/Jobsched/tenant-a"
    # A tenant named like a digest cannot pass for the long tenant: its `:` is encoded.
    forged = source.rsplit("/", 1)[1]
    assert event_source("S" * 128, forged) != source


# --- late runs and notifications (domain.events, domain.notifications) ---


def _notify(*kinds: str, late_seconds: int | None = None) -> list[Any]:
    from jobsched.domain.models import Notification

    target = {"kind": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/alerts"}
    return [Notification.model_validate({"on": list(kinds), "late_seconds": late_seconds, "target": target})]


def test_a_late_note_is_a_late_event_with_the_runs_one_late_id():
    run = a_run(RunState.QUEUED, late_at=T0 + timedelta(seconds=60))
    noted = lifecycle.touch(
        run, now=T0 + timedelta(seconds=61), actor="reconciler", reason="late", late_noticed_at=T0
    )
    (event,) = run_events(STACK, run, noted, FAILURES)
    assert event.type is EventType.RUN_LATE and event.id == f"{run.run_key}#late"
    assert run_events(STACK, None, noted, RunEventsLevel.NONE) == []


@pytest.mark.parametrize(
    ("claimed_after", "noticed", "late"),
    [(59, False, False), (60, False, False), (61, False, True), (61, True, False)],
)
def test_a_first_claim_past_the_late_instant_is_late_unless_already_noted(claimed_after, noticed, late):
    run = a_run(RunState.QUEUED, late_at=T0 + timedelta(seconds=60))
    if noticed:
        run = run.model_copy(update={"late_noticed_at": T0 + timedelta(seconds=60)})
    at = T0 + timedelta(seconds=claimed_after)
    claimed = lifecycle.advance(run, RunState.LEASED, now=at, actor="worker:w", fence=1, attempt=1)
    types = [e.type for e in run_events(STACK, run, claimed, ALL)]
    assert (EventType.RUN_LATE in types) is late
    # A later claim (fence 2) is never a late start: the first one decided.
    again = lifecycle.advance(claimed, RunState.LEASED, now=at, actor="worker:v", fence=2, attempt=2)
    assert EventType.RUN_LATE not in [e.type for e in run_events(STACK, claimed, again, ALL)]


def test_the_late_watch_ends_with_the_note_the_first_claim_or_the_run():
    run = a_run(RunState.QUEUED, late_at=T0 + timedelta(seconds=60))
    assert run.late_watch == T0 + timedelta(seconds=60)
    assert not run.late_unnoticed(T0 + timedelta(seconds=59))
    assert run.late_unnoticed(T0 + timedelta(seconds=60))
    assert run.model_copy(update={"late_noticed_at": T0}).late_watch is None
    assert run.model_copy(update={"fence": 1}).late_watch is None
    assert run.model_copy(update={"state": RunState.CANCELLED}).late_watch is None
    assert run.model_copy(update={"blocked_by": "job-paused"}).late_watch is None


def test_each_notification_naming_an_events_kind_gets_one_message():
    from jobsched.domain.notifications import messages_for

    notify = _notify("dead") + _notify("skipped") + _notify("dead", "late", late_seconds=5)
    run = a_run(RunState.LEASED)
    dead = lifecycle.advance(run, RunState.DEAD, now=T0, actor="worker:w", error_class="Boom")
    events = run_events(STACK, run, dead, FAILURES)
    messages = messages_for(notify, events)
    assert [m.index for m in messages] == [0, 2]
    assert [m.id for m in messages] == [f"{events[0].id}#n0", f"{events[0].id}#n2"]
    assert messages_for(notify, run_events(STACK, None, run, ALL)) == []  # created: not told


def test_a_notification_names_its_rules():
    from jobsched.domain.models import Notification
    from pydantic import ValidationError

    target = {"kind": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/alerts"}
    for bad in (
        {"on": ["late"], "target": target},
        {"on": ["dead"], "late_seconds": 5, "target": target},
        {"on": ["dead", "dead"], "target": target},
        {"on": ["late"], "late_seconds": 0, "target": target},
        {"on": ["late"], "late_seconds": 7 * 86400 + 1, "target": target},
    ):
        with pytest.raises(ValidationError):
            Notification.model_validate(bad)


def test_each_event_carries_its_transitions_trace_id():
    run, queued, *_ = to_dead(a_run())
    traced = [e.model_copy(update={"trace_id": f"1-00000001-{n:024x}"}) for n, e in enumerate(queued.history)]
    queued = queued.model_copy(update={"history": [traced[0], queued.history[1]]})
    (event,) = run_events(STACK, run, queued, ALL)
    assert event.document()["data"]["traceId"] is None  # written outside a traced invocation
    queued = queued.model_copy(update={"history": traced})
    (event,) = run_events(STACK, run, queued, ALL)
    assert run_data(event).trace_id == traced[1].trace_id
    assert event.document()["data"]["traceId"] == "1-00000001-000000000000000000000001"


def test_a_job_event_carries_the_trace_of_the_write_that_made_it():
    job = a_job()
    (created_event,) = job_events(
        STACK, None, job.model_copy(update={"trace_id": "1-00000001-" + "a" * 24}), ALL, T0
    )
    assert created_event.document()["data"]["traceId"] == "1-00000001-" + "a" * 24
    (untraced,) = job_events(STACK, None, job, ALL, T0)
    assert untraced.document()["data"]["traceId"] is None
