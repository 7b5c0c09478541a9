"""What a run's status says: why an open run is not running (`waitingFor`), and which error is
the run's own (a succeeded run has none)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobsched.domain import lifecycle
from jobsched.domain.lifecycle import advance
from jobsched.domain.models import JobState
from jobsched.domain.run_status import Surroundings, current_error, waiting_for
from jobsched.domain.runs import PAUSED_HOLD, Run, RunState, created

from tests.helpers import claimed

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def run_at(due: datetime = T0, state: RunState = RunState.PENDING, **fields: object) -> Run:
    return created(
        Run(
            run_key=f"j_w@{due.strftime('%Y-%m-%dT%H:%M:%SZ')}",
            job_id="j_w",
            tenant="t",
            job_type="report.build",
            scheduled_for=due,
            due_at=due,
            state=state,
            definition_version=1,
            created_at=T0 - timedelta(minutes=1),
            updated_at=T0 - timedelta(minutes=1),
            **fields,
        ),
        actor="sweeper",
    )


def queued(run: Run) -> Run:
    return advance(run, RunState.QUEUED, now=T0, actor="outbox")


def test_a_queued_run_no_handler_runs_waits_for_an_external_worker():
    said = waiting_for(queued(run_at()), T0, Surroundings(external=True))
    assert said == "waiting for an external worker (no handler for type report.build, no target)"


def test_a_queued_run_of_a_tenant_at_its_limit_says_so():
    around = Surroundings(tenant_leases=2, tenant_limit=2)
    assert waiting_for(queued(run_at()), T0, around) == "tenant at its concurrency limit (2 of 2 leased)"
    below = Surroundings(tenant_leases=1, tenant_limit=2)
    assert waiting_for(queued(run_at()), T0, below) == "waiting for a worker"


def test_a_run_deferred_through_the_outbox_for_the_tenant_limit_says_so():
    until = T0 + timedelta(seconds=30)
    deferred = lifecycle.defer(queued(run_at()), now=T0, actor="worker:w", until=until, reason="tenant_limit")
    assert waiting_for(deferred, T0, Surroundings()) == (
        "tenant at its concurrency limit (looks again at 2026-11-29T12:00:30Z)"
    )
    # Published again with its delay (QUEUED), it still says why.
    assert "concurrency limit" in str(waiting_for(queued(deferred), T0 + timedelta(seconds=1)))


def test_a_chained_or_buffered_run_names_the_run_it_waits_for():
    chained = run_at(blocked_by="j_w@2026-11-29T11:00:00Z")
    assert waiting_for(chained, T0) == "buffered behind j_w@2026-11-29T11:00:00Z"
    around = Surroundings(buffered_behind="j_w@2026-11-29T11:59:00Z")
    assert waiting_for(queued(run_at()), T0, around) == "buffered behind j_w@2026-11-29T11:59:00Z"


def test_a_held_run_and_a_run_of_a_paused_job_say_job_paused():
    assert waiting_for(run_at(blocked_by=PAUSED_HOLD), T0) == "job paused (held until it is resumed)"
    assert waiting_for(queued(run_at()), T0, Surroundings(job_state=JobState.PAUSED)) == "job paused"


def test_a_run_waiting_for_its_retry_names_the_instant():
    retry_at = T0 + timedelta(seconds=8)
    waiting = run_at(state=RunState.RETRY_WAIT).model_copy(update={"due_at": retry_at})
    assert waiting_for(waiting, T0) == "waiting for its retry at 2026-11-29T12:00:08Z"


def test_a_run_not_due_yet_says_when_it_is():
    later = queued(run_at(T0 + timedelta(hours=1)))
    assert waiting_for(later, T0) == "not due yet (due at 2026-11-29T13:00:00Z)"


def test_a_running_or_finished_run_waits_for_nothing():
    leased = claimed(queued(run_at()), at=T0, lease_for=60)
    assert waiting_for(leased, T0 + timedelta(seconds=10)) is None
    assert "lease expired" in str(waiting_for(leased, T0 + timedelta(seconds=61)))
    done = advance(leased, RunState.SUCCEEDED, now=T0, actor="worker:w")
    assert waiting_for(done, T0, Surroundings(external=True)) is None


def test_a_succeeded_run_shows_no_error_and_keeps_its_failures_in_history():
    leased = claimed(queued(run_at()), at=T0, lease_for=60)
    failed = advance(
        leased, RunState.DEAD, now=T0, actor="worker:w", error_class="HTTP503", error_message="busy"
    )
    assert current_error(failed) == ("HTTP503", "busy")
    redriven = lifecycle.redrive(failed, now=T0, actor="api:t", reason=None)
    again = claimed(queued(redriven), at=T0, lease_for=60)
    succeeded = advance(again, RunState.SUCCEEDED, now=T0, actor="worker:w")
    assert current_error(succeeded) == (None, None)
    assert any(t.error_class == "HTTP503" for t in succeeded.history)
