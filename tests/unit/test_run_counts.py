"""A job's succeeded count kept by folds of its runs (domain.run_counts): which runs a fold
owns, how far it moves its mark, and the property that every read answers the true count
whatever the interleaving of runs made, finished, redriven and folded."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.models import Job, JobSpec, JobState, run_key
from jobsched.domain.run_counts import (
    FOLD_EVERY,
    FOLD_EVERY_RUNS,
    FOLD_LAG,
    MAX_OPEN,
    MAX_WRITE_DELAY,
    FoldMark,
    fold,
    fold_due,
    fold_limit,
    made_counted_at_end,
)
from jobsched.domain.runs import Run, RunState, Trigger

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def a_job(kind: str = "rate", every: int = 60, **fields: Any) -> Job:
    schedule: dict[str, Any] = (
        {"kind": "rate", "every_seconds": every} if kind == "rate" else {"kind": "once", "at": T0.isoformat()}
    )
    schedule.update(fields.pop("schedule", {}))
    spec = JobSpec.model_validate({"name": "n", "type": "x", "schedule": schedule})
    values: dict[str, Any] = {
        "job_id": "j_c",
        "tenant": "t",
        "spec": spec,
        "created_at": T0,
        "updated_at": T0,
    }
    return Job(**{**values, **fields})


def a_run(
    at: datetime, state: RunState = RunState.SUCCEEDED, *, manual: str | None = None, **fields: Any
) -> Run:
    values: dict[str, Any] = {
        "run_key": run_key("j_c", at, manual),
        "job_id": "j_c",
        "tenant": "t",
        "job_type": "x",
        "scheduled_for": at,
        "due_at": at,
        "state": state,
        "definition_version": 1,
        "created_at": at - 60 * S,
        "updated_at": at,
    }
    return Run(**{**values, **fields})


# --- which runs a fold owns ---


def test_a_run_made_ahead_by_a_recurring_schedule_is_the_folds() -> None:
    job = a_job()
    assert not made_counted_at_end(job, T0 + S, T0, Trigger.SCHEDULE)
    assert made_counted_at_end(job, T0, T0, Trigger.SCHEDULE)  # made at its instant: late
    assert made_counted_at_end(job, T0 - S, T0, Trigger.SCHEDULE)
    assert made_counted_at_end(job, T0 + S, T0, Trigger.MANUAL)
    assert made_counted_at_end(job, T0 + S, T0, Trigger.BACKFILL)
    assert made_counted_at_end(a_job("once"), T0 + S, T0, Trigger.SCHEDULE)
    assert made_counted_at_end(a_job(schedule={"max_runs": 5}), T0 + S, T0, Trigger.SCHEDULE)


def test_a_run_no_sweep_is_sure_to_fold_in_time_is_counted_by_its_completion() -> None:
    hours = 3600
    assert not made_counted_at_end(a_job(every=hours), T0 + S, T0, Trigger.SCHEDULE)  # hourly
    assert not made_counted_at_end(a_job(every=6 * hours), T0 + S, T0, Trigger.SCHEDULE)
    assert made_counted_at_end(a_job(every=6 * hours + 1), T0 + S, T0, Trigger.SCHEDULE)
    assert made_counted_at_end(a_job(every=24 * hours), T0 + S, T0, Trigger.SCHEDULE)  # daily
    # The last run before the job's end: no later occurrence.
    ending = a_job(schedule={"end_at": (T0 + 90 * S).isoformat()})
    assert made_counted_at_end(ending, T0 + 60 * S, T0, Trigger.SCHEDULE)


def test_a_redriven_run_is_counted_by_its_completion() -> None:
    assert a_run(T0).counted_by_fold
    assert not a_run(T0, redrives=1).counted_by_fold
    assert not a_run(T0, counted_at_end=True).counted_by_fold


def test_the_lag_covers_the_longest_life_of_a_function_that_makes_runs() -> None:
    from jobsched.cdk.names import API, FUNCTIONS_BY_NAME, SWEEPER
    from jobsched.domain.effects import MAX_CLOCK_SKEW

    longest = max(FUNCTIONS_BY_NAME[name].timeout_seconds for name in (API, SWEEPER))
    assert timedelta(seconds=longest) <= MAX_WRITE_DELAY
    assert FOLD_LAG >= MAX_WRITE_DELAY + 2 * MAX_CLOCK_SKEW


# --- one fold ---


def test_a_fold_counts_the_successes_it_owns_up_to_its_limit_and_the_rest_beyond() -> None:
    runs = [
        a_run(T0),
        a_run(T0 + S, RunState.DEAD),
        a_run(T0 + 2 * S, counted_at_end=True),
        a_run(T0 + 3 * S, redrives=1),
        a_run(T0 + 4 * S),
        a_run(T0 + 10 * S),
    ]
    folded = fold(FoldMark(), runs, [], limit=T0 + 5 * S, read_all=True)
    assert (folded.added, folded.beyond) == (2, 1)
    assert folded.mark.to == T0 + 5 * S  # past the empty stretch up to the limit
    assert folded.moved and folded.mark.rev == 1


def test_open_runs_are_remembered_and_counted_when_read_again() -> None:
    leased = a_run(T0 + S, RunState.LEASED)
    folded = fold(FoldMark(), [a_run(T0), leased], [], limit=T0 + 2 * S, read_all=True)
    assert folded.added == 1 and folded.mark.open == (leased.run_key,)
    done = leased.model_copy(update={"state": RunState.SUCCEEDED})
    again = fold(folded.mark, [], [done], limit=T0 + 3 * S, read_all=True)
    assert again.added == 1 and again.mark.open == ()
    gone = fold(folded.mark, [], [], limit=T0 + 3 * S, read_all=True)  # TTL took it
    assert gone.added == 0 and gone.mark.open == ()


def test_an_open_run_the_fold_does_not_own_is_not_remembered() -> None:
    folded = fold(FoldMark(), [a_run(T0, RunState.LEASED, redrives=1)], [], limit=T0 + S, read_all=True)
    assert folded.mark.open == ()


def test_a_fold_never_splits_a_second_nor_folds_the_last_second_of_a_partial_read() -> None:
    runs = [a_run(T0), a_run(T0 + S), a_run(T0 + S, manual="mabcdefghjk")]
    partial = fold(FoldMark(), runs, [], limit=T0 + 10 * S, read_all=False)
    assert partial.mark.to == T0 and (partial.added, partial.beyond) == (1, 2)
    assert not partial.complete


def test_a_fold_stops_before_a_second_that_would_remember_too_many_open_runs() -> None:
    opens = [a_run(T0 + i * S, RunState.QUEUED) for i in range(MAX_OPEN)]
    runs = [*opens, a_run(T0 + MAX_OPEN * S, RunState.QUEUED), a_run(T0 + (MAX_OPEN + 1) * S)]
    folded = fold(FoldMark(), runs, [], limit=T0 + 100 * S, read_all=True)
    assert len(folded.mark.open) == MAX_OPEN
    assert folded.mark.to == T0 + (MAX_OPEN - 1) * S
    assert folded.beyond == 1  # counted in the answer, not stored


def test_a_fold_that_changes_nothing_writes_nothing() -> None:
    mark = FoldMark(to=T0, rev=3)
    folded = fold(mark, [], [], limit=T0, read_all=True)
    assert not folded.moved and folded.mark == mark


def test_the_limit_lags_a_job_that_may_still_make_runs() -> None:
    now = T0 + timedelta(days=1)
    assert fold_limit(a_job(), now) == now - FOLD_LAG
    paused = a_job(state=JobState.PAUSED, updated_at=now - FOLD_LAG - S)
    assert fold_limit(paused, now) is None
    just_paused = a_job(state=JobState.PAUSED, updated_at=now - S)
    assert fold_limit(just_paused, now) == now - FOLD_LAG


def test_the_sweeper_folds_a_job_never_folded_every_period_and_every_thousand_runs() -> None:
    job = a_job(counts_folded_at=T0, runs_created=10, next_run_at=T0 + 60 * S)
    assert not fold_due(job, job.model_copy(update={"runs_created": 15}), T0 + S)
    assert fold_due(job, job, T0 + FOLD_EVERY)
    assert fold_due(job, job.model_copy(update={"runs_created": FOLD_EVERY_RUNS}), T0 + S)
    assert fold_due(a_job(), a_job(), T0)  # a job from before folds
    asleep = job.model_copy(update={"next_run_at": T0 + FOLD_EVERY + S})
    assert fold_due(job, asleep, T0 + S)  # no sweep meets it for longer than FOLD_EVERY
    assert fold_due(job, job.model_copy(update={"next_run_at": None}), T0 + S)  # it ended


# --- the property: every read answers the true count ---


@dataclass
class World:
    """Runs as a store holds them, the stored counters and mark, and the completions' ADDs."""

    now: datetime = T0
    stored: dict[str, Run] = field(default_factory=dict)  # by run key
    in_flight: list[Run] = field(default_factory=list)  # made, not yet written
    mark: FoldMark = field(default_factory=FoldMark)
    succeeded: int = 0  # the stored counter: ADDs and folds

    def runs_after(self, after: datetime | None) -> list[Run]:
        runs = [r for r in self.stored.values() if after is None or r.scheduled_for > after]
        return sorted(runs, key=lambda r: (r.scheduled_for, r.run_key))

    def read(self, job: Job, page: int | None) -> tuple[int, bool]:
        """One fold, its answer and whether it read every run; `page`: read only that many
        runs (a partial read, whose answer is a floor)."""
        after = self.runs_after(self.mark.to)
        read_all = page is None or page >= len(after)
        if not read_all:
            after = after[:page]
        reread = [self.stored[k] for k in self.mark.open if k in self.stored]
        folded = fold(self.mark, after, reread, limit=fold_limit(job, self.now), read_all=read_all)
        answer = self.succeeded + folded.added + folded.beyond
        owned = sum(1 for r in self.stored.values() if r.state is RunState.SUCCEEDED and r.counted_by_fold)
        assert folded.counted == owned if read_all else folded.counted <= owned
        if folded.moved:
            self.mark = folded.mark
            self.succeeded += folded.added
        return answer, folded.complete

    def truth(self) -> int:
        return sum(1 for r in self.stored.values() if r.state is RunState.SUCCEEDED)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("make"), st.one_of(st.integers(1, 60), st.integers(-120, 600)), st.booleans()),
        st.tuples(st.just("land"), st.integers(0, 20), st.none()),
        st.tuples(
            st.just("finish"), st.integers(0, 50), st.sampled_from([RunState.SUCCEEDED, RunState.DEAD])
        ),
        st.tuples(st.just("redrive"), st.integers(0, 50), st.none()),
        st.tuples(st.just("fold"), st.one_of(st.none(), st.integers(1, 5)), st.none()),
        st.tuples(st.just("wait"), st.one_of(st.integers(1, 120), st.integers(1, 2400)), st.none()),
    ),
    min_size=20,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_every_read_answers_the_true_count(program: list[tuple[str, Any, Any]]) -> None:
    """Runs are made (ahead or late, written at once or up to MAX_WRITE_DELAY later), finish,
    die and are redriven, and folds read (whole or a page) in any order: each fold that read
    every run answers the number of succeeded runs the store holds at that instant (a partial
    read answers no more), the completions' ADDs counting exactly the runs the fold does not
    own."""
    job = a_job(counts_folded_at=T0)
    world = World()
    for op, a, b in program:
        if op == "make":
            at = (world.now + a * S).replace(microsecond=0)
            trigger = Trigger.SCHEDULE if b else Trigger.MANUAL
            key = run_key("j_c", at, "mabcdefghjk" if trigger is Trigger.MANUAL else None)
            if key in world.stored or any(r.run_key == key for r in world.in_flight):
                continue
            owned_by_completion = made_counted_at_end(job, at, world.now, trigger)
            run = a_run(at, RunState.PENDING, created_at=world.now, counted_at_end=owned_by_completion)
            run = run.model_copy(update={"run_key": key, "trigger": trigger})
            world.in_flight.append(run)
        elif op == "land" and world.in_flight:
            run = world.in_flight.pop(a % len(world.in_flight))
            if world.now - run.created_at <= MAX_WRITE_DELAY:  # a write lands within its invocation
                world.stored[run.run_key] = run
        elif op == "finish" and world.stored:
            run = sorted(world.stored.values(), key=lambda r: r.run_key)[a % len(world.stored)]
            if run.state in (RunState.PENDING, RunState.QUEUED) and run.scheduled_for <= world.now:
                world.stored[run.run_key] = run.model_copy(update={"state": b})
                if b is RunState.SUCCEEDED and not run.counted_by_fold:
                    world.succeeded += 1  # the completion's ADD
        elif op == "redrive" and world.stored:
            run = sorted(world.stored.values(), key=lambda r: r.run_key)[a % len(world.stored)]
            if run.state is RunState.DEAD:
                world.stored[run.run_key] = run.model_copy(
                    update={"state": RunState.PENDING, "redrives": run.redrives + 1}
                )
        elif op == "fold":
            answer, complete = world.read(job, a)
            assert answer == world.truth() if complete else answer <= world.truth()
        elif op == "wait":
            world.now += a * S
            world.in_flight = [r for r in world.in_flight if world.now - r.created_at <= MAX_WRITE_DELAY]
    world.in_flight.clear()
    assert world.read(job, None) == (world.truth(), True)


@pytest.mark.parametrize("planted", ["no-lag", "count-redriven"])
def test_the_property_fails_on_a_planted_bug(planted: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The property above catches a fold without its lag and a fold that counts a redriven run."""
    import jobsched.domain.run_counts as run_counts

    if planted == "no-lag":
        monkeypatch.setattr(run_counts, "FOLD_LAG", timedelta(0))
        program = [
            ("fold", None, None),
            ("make", 30, True),
            ("wait", 60, None),
            ("fold", None, None),  # moves the mark past the run not yet written
            ("land", 0, None),
            ("finish", 0, RunState.SUCCEEDED),
            ("fold", None, None),
        ]
    else:
        monkeypatch.setattr(Run, "counted_by_fold", property(lambda self: not self.counted_at_end))
        program = [
            ("make", 30, True),
            ("land", 0, None),
            ("wait", 60, None),
            ("finish", 0, RunState.DEAD),
            ("wait", 2400, None),
            ("fold", None, None),  # passes the DEAD run
            ("redrive", 0, None),
            ("finish", 0, RunState.SUCCEEDED),
            ("fold", None, None),
        ]
    with pytest.raises(AssertionError):
        test_every_read_answers_the_true_count.hypothesis.inner_test(program)  # type: ignore[attr-defined]
