"""Runs missed while a job was paused: decided on resume under `missedRuns`.

An occurrence whose instant falls while its job is paused is missed, however late it is.
Some of them already have runs (made ahead by the API horizon or `sweepAheadSeconds`): a
worker that meets one while the job is paused holds it (PENDING, not published, not
claimable). The resume decides, in the same write that makes the job active, which
occurrences of the pause run (`MissedWindow`, kept on the job): `skip` runs none, `run-once`
only the latest occurrence inside `catchUpWindow` (which may be one the sweeper has yet to
make), `catch-up` each one inside the window; every other one becomes SKIPPED (reason
`paused`) and counts in the job's `missed` counter. Whoever then meets a run of the pause —
the resume deciding the runs it read, the reconciler settling a hold that landed after —
applies that one decision, so the chosen occurrence runs exactly once in whatever order they
get to it. The occurrences that have no run yet are left to the sweeper, which treats
everything before `missed_until` (the resume instant) as missed under the same policy.

Every decider draws the pause's edges alike, in whole seconds: occurrences t with
paused_at <= t < resumed_at were missed (the window's runs and latest occurrence, the
sweeper's `missed_until`); one at or after the resume's second fell while the job was
active, and `Job.missed_verdict` lets it run, held or not, whatever the policy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from ..domain import lifecycle
from ..domain.instants import Clock
from ..domain.models import Job, JobState, Misfire, MissedWindow
from ..domain.runs import PAUSED_HOLD, Run, RunState, Trigger
from ..domain.schedule import latest_fire_before
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.ports import RunStorePort
from ..store.runs import RunChanged
from .calendars import CalendarCache
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


# A claim made this long after its job's pause was acknowledged (or before its resume) read
# the job paused at its check, whatever the two clocks' skew: it cannot have begun an effect.
PAUSE_CLAIM_MARGIN = timedelta(seconds=10)


def paused_claim(definitions: DefinitionStore, run: Run) -> lifecycle.PausedClaim:
    """What a pause says of a LEASED run whose lease ran out (`lifecycle.lease_expired`): SKIP
    when its job's resume decided this occurrence does not run; HOLD when its last claim was
    made inside the job's pause, which still stands; RELEASE when that claim was made inside a
    pause the job was resumed from since, whose decision lets it run; NONE otherwise. A claim
    made inside a pause (PAUSE_CLAIM_MARGIN from either end) read the job paused at its check
    (a consistent read after the claim), so its worker died before the hold it would have
    written: it began no effect, and its attempt is given back. Only for a run the pause
    decides (`lifecycle.pause_decides`); one consistent job read, made only for such a run;
    a job that cannot be read raises as the store raises."""
    none = lifecycle.PausedClaim.NONE
    if run.trigger is not Trigger.SCHEDULE or not lifecycle.pause_decides(run):
        return none
    job = definitions.get(run.job_id)
    if job is None:
        return none
    if job.missed_verdict(run.scheduled_for) is False:
        return lifecycle.PausedClaim.SKIP
    claimed = next((e.at for e in reversed(run.history) if e.target is RunState.LEASED), None)
    if claimed is None:
        return none
    if (
        job.state is JobState.PAUSED
        and job.paused_at is not None
        and claimed >= job.paused_at + PAUSE_CLAIM_MARGIN
    ):
        return lifecycle.PausedClaim.HOLD
    if any(
        w.paused_at + PAUSE_CLAIM_MARGIN <= claimed <= w.resumed_at - PAUSE_CLAIM_MARGIN
        for w in job.missed_windows
    ):
        return lifecycle.PausedClaim.RELEASE
    return none


class MissedRuns:
    def __init__(
        self,
        definitions: DefinitionStore,
        runs: RunStorePort,
        completer: Completer,
        clock: Clock,
        *,
        calendars: Callable[[], CalendarCache] = lambda: CalendarCache(None),
    ) -> None:
        self._calendars = calendars  # the job's calendars, resolved for the occurrences not made
        self._definitions = definitions
        self._runs = runs
        self._completer = completer
        self._clock = clock

    def window(self, paused: Job, resumed_at: datetime) -> MissedWindow | None:
        """What resuming `paused` at `resumed_at` decides, written with the resume itself:
        which occurrences of [paused_at, resumed_at) run. `run-once` chooses the latest inside
        `catchUpWindow` among the runs still open (a run leased at this moment included: its
        worker either runs it now or holds it, and the hold is then settled by this choice) and
        the latest occurrence not made yet."""
        if paused.paused_at is None:
            return None
        policies = paused.spec.policies
        run_from = resumed_at - timedelta(seconds=policies.catch_up_window_seconds)
        missed = [r.scheduled_for for r in self._open_runs(paused.job_id, paused.paused_at, resumed_at)]
        # Occurrences the sweeper has not made yet are all later than those made ahead.
        if paused.next_run_at is not None and paused.next_run_at < resumed_at:
            schedule = self._calendars().checked(paused.tenant, paused.spec.schedule)
            latest_unmade = latest_fire_before(
                schedule, resumed_at, not_before=max(paused.next_run_at, paused.paused_at)
            )
            if latest_unmade is not None:
                missed.append(latest_unmade)
        run_these = chosen(policies.misfire, missed, run_from)
        return MissedWindow(
            paused_at=paused.paused_at,
            resumed_at=resumed_at,
            policy=policies.misfire,
            run_from=run_from,
            chosen=max(run_these) if policies.misfire is Misfire.RUN_ONCE and run_these else None,
        )

    def on_resume(self, paused: Job, resumed: Job) -> None:
        """Decide, by the window the resume wrote, the runs of occurrences in [paused_at,
        resumed_at) that have not started. A LEASED run is its worker's: it runs it (the job
        is active again) or holds it, and `settle_held` decides the hold the same way."""
        if resumed.missed_until is None:
            return
        window = next(
            (w for w in reversed(resumed.missed_windows) if w.resumed_at == resumed.missed_until), None
        )
        if window is None:
            # Not decided with the resume (a JobService without `plan_missed`): decided now,
            # and a hold landing after this is settled alone (see settle_held).
            window = self.window(paused, resumed.missed_until)
            if window is None:
                return
        for run in self._open_runs(resumed.job_id, window.paused_at, window.resumed_at):
            # One whose effect may have begun (claimed as the pause landed) is its retry
            # policy's, not the pause's (lifecycle.pause_decides).
            if run.state is not RunState.LEASED and lifecycle.pause_decides(run):
                self._decide(run, window.runs(run.scheduled_for) is True)

    def paused_claim(self, run: Run) -> lifecycle.PausedClaim:
        """`paused_claim` with this service's job store."""
        return paused_claim(self._definitions, run)

    def settle_held(self, run: Run) -> Run | None:
        """A held run the resume did not decide (its hold landed after the resume read the
        runs, or the resume stopped part-way): None while the job is still paused; otherwise
        decided as its job's resume decided its occurrence (`missed_windows`), whatever the
        job became since (`Job.missed_verdict`): an occurrence that resume did not pick is
        SKIPPED as missed even if the job was cancelled after it (the resume decided first).
        One it picked, or that fell while the job was active (at or after the resume instant,
        however close: no missed occurrence), runs; it is cancelled with a cancelled or
        missing job, and a COMPLETED job's runs made ahead still run, as they do unheld. One
        no record can say of (before the earliest of a full list of pauses, or none recorded)
        is decided alone, where only catch-up can say yes."""
        job = self._definitions.get(run.job_id)
        if job is not None and job.state is JobState.PAUSED:
            return None
        if job is None:
            return self._completer.cancel(run, "job gone while paused", actor=ACTOR).run
        verdict = job.missed_verdict(run.scheduled_for) if lifecycle.pause_decides(run) else True
        if verdict is not False and job.state is JobState.CANCELLED:
            return self._completer.cancel(run, "job cancelled while paused", actor=ACTOR).run
        if verdict is None:
            policies = job.spec.policies
            edge = (job.missed_until or self._clock.now()) - timedelta(
                seconds=policies.catch_up_window_seconds
            )
            verdict = policies.misfire is Misfire.CATCH_UP and run.scheduled_for >= edge
        return self._decide(run, verdict)

    def _open_runs(self, job_id: str, start: datetime, end: datetime) -> list[Run]:
        return [
            r
            for r in self._runs.scheduled_between(job_id, start, end, limit=MAX_RUNS_DECIDED)
            if r.trigger is Trigger.SCHEDULE and r.is_open
        ]

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
