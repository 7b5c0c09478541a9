"""Repair deadlines and the open index's check time: never later than the deadline, and
unchanged along a run's usual path so those writes leave the index alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from jobsched.domain.effects import excluded_until
from jobsched.domain.lifecycle import advance
from jobsched.domain.models import HttpTarget
from jobsched.domain.repair import RepairTimings, check_at, repair_deadline, stranded_since
from jobsched.domain.runs import OPEN_STATES, Run, RunState, created

from tests.helpers import claimed

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TIMINGS = RepairTimings()
TARGET = HttpTarget(kind="http", url="https://hooks.example.com/run")


def pending(*, due_in: float, made: datetime = T0) -> Run:
    due = made + timedelta(seconds=due_in)
    return created(
        Run(
            run_key=f"j_r@{due.isoformat()}",
            job_id="j_r",
            tenant="t",
            job_type="report.build",
            scheduled_for=due,
            due_at=due,
            state=RunState.PENDING,
            definition_version=1,
            target=TARGET,
            created_at=made,
            updated_at=made,
        ),
        actor="sweeper",
    )


def usual_path(run: Run, *, queued_after: float, leased_after: float, lease_seconds: int) -> list[Run]:
    queued = advance(
        run, RunState.QUEUED, now=run.created_at + timedelta(seconds=queued_after), actor="outbox"
    )
    claim = max(run.due_at, queued.updated_at) + timedelta(seconds=leased_after)
    return [run, queued, claimed(queued, at=claim, lease_for=lease_seconds)]


def test_a_run_made_ahead_keeps_one_check_time_from_insert_to_lease():
    run = pending(due_in=120)
    path = usual_path(run, queued_after=0.2, leased_after=0.3, lease_seconds=300)
    checks = {check_at(r, TIMINGS) for r in path}
    assert checks == {run.due_at + TIMINGS.publish_grace}


def test_a_run_due_now_keeps_one_check_time_too():
    run = pending(due_in=0)
    path = usual_path(run, queued_after=0.5, leased_after=0.1, lease_seconds=300)
    assert {check_at(r, TIMINGS) for r in path} == {T0 + TIMINGS.publish_grace}


def test_a_short_lease_brings_the_check_forward_to_its_deadline():
    # A publish grace longer than the lease and its grace together (the defaults are equal).
    timings = replace(TIMINGS, publish_grace=timedelta(seconds=30))
    run = pending(due_in=10)
    leased = usual_path(run, queued_after=0, leased_after=0, lease_seconds=5)[-1]
    assert leased.lease_expires_at is not None
    assert (
        check_at(leased, timings)
        == repair_deadline(leased, timings)
        == leased.lease_expires_at + timings.lease_grace
    )
    leased_check, pending_check = check_at(leased, timings), check_at(run, timings)
    assert leased_check is not None and pending_check is not None
    assert leased_check < pending_check


def test_an_unpublished_run_is_overdue_once_due_plus_the_grace():
    run = pending(due_in=120)
    assert repair_deadline(run, TIMINGS) == run.due_at + TIMINGS.publish_grace
    assert repair_deadline(pending(due_in=0), TIMINGS) == T0 + TIMINGS.publish_grace


def test_a_run_too_far_out_for_an_sqs_delay_is_checked_when_it_comes_within_reach():
    run = pending(due_in=7200)
    assert check_at(run, TIMINGS) == repair_deadline(run, TIMINGS) == run.due_at - timedelta(seconds=900)


def test_closed_runs_have_no_check_time():
    run = pending(due_in=0)
    done = advance(run, RunState.CANCELLED, now=T0, actor="api:t")
    assert check_at(done, TIMINGS) is None and repair_deadline(done, TIMINGS) is None


@given(
    due_in=st.floats(min_value=-3600, max_value=5000),
    queued_after=st.floats(min_value=0, max_value=400),
    leased_after=st.floats(min_value=0, max_value=2000),
    lease_seconds=st.integers(min_value=1, max_value=3600),
    touched_after=st.floats(min_value=0, max_value=4000),
)
def test_the_check_time_is_never_after_the_repair_deadline(
    due_in, queued_after, leased_after, lease_seconds, touched_after
):
    run = pending(due_in=due_in)
    path = usual_path(run, queued_after=queued_after, leased_after=leased_after, lease_seconds=lease_seconds)
    # ...and the same states written again later (a retouch, a deferral, a heartbeat's write).
    path += [
        r.model_copy(update={"updated_at": r.updated_at + timedelta(seconds=touched_after)}) for r in path
    ]
    for r in path:
        assert r.state in OPEN_STATES
        check, deadline = check_at(r, TIMINGS), repair_deadline(r, TIMINGS)
        assert check is not None and deadline is not None
        assert check <= deadline


# --- when a stranded run should have moved on (the repair's lag is measured from it) ---


def test_a_run_nobody_published_should_have_moved_when_it_became_due():
    run = pending(due_in=30)
    assert stranded_since(run) == run.due_at
    later = run.model_copy(update={"updated_at": run.due_at + timedelta(seconds=50)})
    assert stranded_since(later) == later.updated_at  # re-touched after it was due


def test_a_dead_workers_run_should_have_moved_when_its_lease_expired():
    leased = usual_path(pending(due_in=0), queued_after=1, leased_after=1, lease_seconds=60)[-1]
    assert stranded_since(leased) == leased.lease_expires_at


def test_an_effect_that_may_still_run_moves_the_instant_to_its_records_end():
    leased = usual_path(pending(due_in=0), queued_after=1, leased_after=1, lease_seconds=60)[-1]
    assert leased.lease_expires_at is not None
    until = leased.lease_expires_at + timedelta(seconds=600)
    started = leased.model_copy(update={"effect_fence": leased.fence, "effect_until": until})
    excluded = excluded_until(started)
    assert excluded is not None
    assert stranded_since(started) == excluded > leased.lease_expires_at


def test_runs_waiting_on_purpose_or_closed_were_never_stranded():
    run = pending(due_in=0)
    assert stranded_since(run.model_copy(update={"blocked_by": "j_r@2026-11-29T11:59:00Z"})) is None
    assert stranded_since(run.model_copy(update={"state": RunState.SUCCEEDED})) is None


@given(
    due_in=st.floats(min_value=-600, max_value=600),
    queued_after=st.floats(min_value=0, max_value=100),
    leased_after=st.floats(min_value=0, max_value=100),
    lease_seconds=st.integers(min_value=1, max_value=3600),
)
def test_the_stranded_instant_is_never_after_the_repair_deadline(
    due_in, queued_after, leased_after, lease_seconds
):
    path = usual_path(
        pending(due_in=due_in),
        queued_after=queued_after,
        leased_after=leased_after,
        lease_seconds=lease_seconds,
    )
    for r in path:
        since, deadline = stranded_since(r), repair_deadline(r, TIMINGS)
        assert since is not None and deadline is not None and since <= deadline
