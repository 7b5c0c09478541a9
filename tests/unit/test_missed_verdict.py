"""What a job's pauses say of an occurrence (`Job.missed_verdict`), at the edges of a pause:
the one rule the resume, the worker's check and the reconciler's settlement of a held run
all apply. Instants are whole seconds: an occurrence in the resume's own second is no missed
one, wherever in that second the resume landed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from jobsched.domain.instants import ManualClock
from jobsched.domain.models import (
    MAX_MISSED_WINDOWS,
    Job,
    JobSpec,
    JobState,
    Misfire,
    MissedWindow,
    Policies,
    Schedule,
    ScheduleKind,
)
from jobsched.services.missed import MissedRuns

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PAUSED = T0 + timedelta(seconds=10)
RESUMED = T0 + timedelta(seconds=40)
SECOND = timedelta(seconds=1)


class NoRunsMadeAhead:
    """The runs store as the resume reads it: no run made for the pause's occurrences."""

    def scheduled_between(self, job_id, start, end, *, limit):
        return []


def paused_job(policy: Misfire) -> Job:
    """Every second from T0, paused at T0+10 s with nothing made for the pause."""
    spec = JobSpec(
        name="n",
        type="tick",
        schedule=Schedule(kind=ScheduleKind.RATE, every_seconds=1, anchor=T0),
        policies=Policies(misfire=policy, catch_up_window_seconds=3600),
    )
    return Job(
        job_id="j_p",
        tenant="acme",
        spec=spec,
        state=JobState.PAUSED,
        paused_at=PAUSED,
        next_run_at=PAUSED,
        created_at=T0,
        updated_at=PAUSED,
    )


def resumed(policy: Misfire, at: datetime) -> Job:
    """The job as its resume at `at` (by a clock moved to it) writes it: `missed_until` and
    the window that resume decides, both of the clock's `now`."""
    paused = paused_job(policy)
    clock = ManualClock(T0)
    clock.advance((at - T0).total_seconds())
    now = clock.now()
    decide = MissedRuns(None, NoRunsMadeAhead(), None, clock).window  # type: ignore[arg-type]
    window = decide(paused, now)
    assert window is not None and decide(paused, at) == window  # the fraction changes nothing
    return paused.model_copy(
        update={"state": JobState.ACTIVE, "paused_at": None, "missed_until": now, "missed_windows": [window]}
    )


# (occurrence, skip, run-once, catch-up): the pause is [T0+10 s, T0+40 s).
EDGES = [
    pytest.param(PAUSED - SECOND, True, True, True, id="a second before the pause: active"),
    pytest.param(PAUSED, False, False, True, id="the pause's instant: missed"),
    pytest.param(RESUMED - SECOND, False, True, True, id="the last second of the pause: run-once's pick"),
    pytest.param(RESUMED, True, True, True, id="the resume's second: active"),
    pytest.param(RESUMED + SECOND, True, True, True, id="after the resume: active"),
]


@pytest.mark.parametrize("fraction", [0, 0.4, 0.999999], ids=["on-the-second", "0.4s-in", "end-of-second"])
@pytest.mark.parametrize(("occurrence", "skip", "run_once", "catch_up"), EDGES)
def test_an_occurrence_is_decided_by_the_whole_second_of_the_resume(
    fraction, occurrence, skip, run_once, catch_up
):
    at = RESUMED + timedelta(seconds=fraction)
    for policy, runs in ((Misfire.SKIP, skip), (Misfire.RUN_ONCE, run_once), (Misfire.CATCH_UP, catch_up)):
        job = resumed(policy, at)
        # The pause ends where the sweeper's missed occurrences end (`missed_until`).
        assert job.missed_windows[0].resumed_at == job.missed_until == RESUMED
        assert job.missed_verdict(occurrence) is runs, policy


def test_an_occurrence_of_the_pause_that_still_stands_is_undecided():
    job = resumed(Misfire.RUN_ONCE, RESUMED).model_copy(
        update={"state": JobState.PAUSED, "paused_at": RESUMED + 10 * SECOND}
    )
    assert job.missed_verdict(RESUMED + 10 * SECOND) is None
    assert job.missed_verdict(RESUMED + 20 * SECOND) is None
    assert job.missed_verdict(RESUMED + 9 * SECOND) is True  # active between the two pauses
    assert job.missed_verdict(PAUSED) is False  # the first pause's decision stands


def test_only_an_occurrence_before_every_kept_pause_of_a_full_list_is_undecided():
    """MAX_MISSED_WINDOWS pauses of 10 s each, 10 s apart: between and after them the job was
    active; before the earliest kept one, a dropped pause may have held the occurrence."""
    windows = [
        MissedWindow(
            paused_at=T0 + timedelta(seconds=100 + 20 * i),
            resumed_at=T0 + timedelta(seconds=110 + 20 * i),
            policy=Misfire.SKIP,
            run_from=T0,
        )
        for i in range(MAX_MISSED_WINDOWS)
    ]
    job = paused_job(Misfire.SKIP).model_copy(
        update={"state": JobState.ACTIVE, "paused_at": None, "missed_windows": windows}
    )
    earliest = windows[0].paused_at
    assert job.missed_verdict(earliest) is False
    assert job.missed_verdict(windows[0].resumed_at) is True
    assert job.missed_verdict(windows[-1].resumed_at) is True
    assert job.missed_verdict(earliest - SECOND) is None
    fewer = job.model_copy(update={"missed_windows": windows[1:]})
    assert fewer.missed_verdict(earliest - SECOND) is True  # no pause was dropped: active
    never = job.model_copy(update={"missed_windows": []})
    assert never.missed_verdict(earliest) is None


def test_a_manual_clock_moved_by_a_fraction_answers_whole_seconds():
    """As SystemClock does: a resume 0.4 s into a second records that second."""
    clock = ManualClock(T0)
    clock.advance(0.4)
    assert clock.now() == T0 and clock.precise() == T0 + timedelta(seconds=0.4)
    clock.advance(0.6)
    assert clock.now() == T0 + SECOND
