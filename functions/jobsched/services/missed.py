"""Runs missed while a job was paused: decided on resume under `missedRuns`.

An occurrence whose instant falls while its job is paused is missed, however late it is.
Some of them already have runs (made ahead by the API horizon or `sweepAheadSeconds`): a
worker that meets one while the job is paused holds it (PENDING, not published, not
claimable). On resume this module decides every held or still-waiting run of the pause:
`skip` runs none, `run-once` runs only the latest occurrence inside `catchUpWindow` (which
may be one the sweeper has yet to make), `catch-up` runs each one inside the window; every
other one becomes SKIPPED (reason `paused`) and counts in the job's `missed` counter. The
occurrences that have no run yet are left to the sweeper, which treats everything before
`missed_until` (the resume instant) as missed under the same policy."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..domain import lifecycle
from ..domain.instants import Clock
from ..domain.models import Job, JobState, Misfire
from ..domain.runs import PAUSED_HOLD, Run, RunState, Trigger
from ..domain.schedule import latest_fire_before
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.runs import RunChanged, RunStore
from .completion import Completer

ACTOR = "resume"
MAX_RUNS_DECIDED = 2000  # runs made ahead are bounded by sweepAheadSeconds; this bounds a read


def chosen(policy: Misfire, missed: list[datetime], window_edge: datetime) -> set[datetime]:
    """Which of the missed occurrences run: none (`skip`), the latest inside the window
    (`run-once`), or each one inside it (`catch-up`)."""
    inside = [t for t in missed if t >= window_edge]
    if policy is Misfire.SKIP or not inside:
        return set()
    if policy is Misfire.RUN_ONCE:
        return {max(inside)}
    return set(inside)


class MissedRuns:
    def __init__(
        self, definitions: DefinitionStore, runs: RunStore, completer: Completer, clock: Clock
    ) -> None:
        self._definitions = definitions
        self._runs = runs
        self._completer = completer
        self._clock = clock

    def on_resume(self, paused: Job, resumed: Job) -> None:
        """Decide the runs of occurrences in [paused_at, resumed_at) that have not started."""
        resumed_at = resumed.missed_until
        if paused.paused_at is None or resumed_at is None:
            return
        runs = [
            r
            for r in self._runs.scheduled_between(
                paused.job_id, paused.paused_at, resumed_at, limit=MAX_RUNS_DECIDED
            )
            if r.trigger is Trigger.SCHEDULE and r.is_open and r.state is not RunState.LEASED
        ]
        if not runs:
            return
        policies = resumed.spec.policies
        window_edge = resumed_at - timedelta(seconds=policies.catch_up_window_seconds)
        missed = [r.scheduled_for for r in runs]
        # Occurrences the sweeper has not made yet are all later than those made ahead.
        if paused.next_run_at is not None and paused.next_run_at < resumed_at:
            latest_unmade = latest_fire_before(
                resumed.spec.schedule, resumed_at, not_before=paused.next_run_at
            )
            if latest_unmade is not None:
                missed.append(latest_unmade)
        run_these = chosen(policies.misfire, missed, window_edge)
        for run in runs:
            self._decide(run, run.scheduled_for in run_these)

    def settle_held(self, run: Run) -> Run | None:
        """A held run the resume did not decide (it crashed, or the run was held just after):
        None while the job is still paused; cancelled with its job; otherwise decided alone."""
        job = self._definitions.get(run.job_id)
        if job is not None and job.state is JobState.PAUSED:
            return None
        if job is None or job.state in (JobState.CANCELLED, JobState.COMPLETED):
            return self._completer.cancel(run, "job ended while paused", actor=ACTOR).run
        policies = job.spec.policies
        edge = (job.missed_until or self._clock.now()) - timedelta(seconds=policies.catch_up_window_seconds)
        # Alone, only catch-up can say yes: run-once's one run was chosen when the job resumed.
        run_it = policies.misfire is Misfire.CATCH_UP and run.scheduled_for >= edge
        return self._decide(run, run_it)

    def _decide(self, run: Run, run_it: bool) -> Run | None:
        now = self._clock.now()
        try:
            if not run_it:
                return self._completer.skip(run, "paused", actor=ACTOR).run
            if run.blocked_by == PAUSED_HOLD:
                return self._runs.commit(
                    run,
                    lambda r: lifecycle.touch(r, now=now, actor=ACTOR, reason="resumed", blocked_by=None),
                )
            return run  # still waiting for its worker: it runs now that the job is active
        except (RunChanged, lifecycle.TransitionRefused):
            logger.info("missed run moved on while deciding it", extra={"run_key": run.run_key})
            return None
