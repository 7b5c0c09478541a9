"""Writes a run's transitions and what follows them: the one place the Lambda worker, the
external-worker lease API and the reconciler end, cancel, skip or kill a run.

Each method takes the run as read, applies one pure transition from `domain.lifecycle`, and
commits it with the store's state (and, for a lease holder, fence) condition. What follows a
terminal state is done here once for every writer: the job's counters, a dead run's DLQ copy
and pause-on-failure, and unblocking the run chained behind the one that ended."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..domain import lifecycle
from ..domain.errors import ConcurrentUpdate, ExecutionError, StorageUnavailable
from ..domain.instants import Clock
from ..domain.metrics import NO_METRICS, Metrics
from ..domain.models import Job, JobState
from ..domain.runs import TERMINAL_STATES, Run, RunState
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.queues import RunQueues
from ..store.runs import RunChanged, RunStore
from ..store.tenant_slots import TenantSlots

# The job counter and the metric each terminal state adds to (SKIPPED: by its reason).
_COUNTERS = {
    RunState.SUCCEEDED: ("succeeded", "RunsSucceeded"),
    RunState.DEAD: ("dead", "RunsDeadLettered"),
    RunState.CANCELLED: ("cancelled", "RunsCancelled"),
}
_SKIP_COUNTERS = {
    "overlap": ("overlap_skipped", "RunsSkippedOverlap"),
    "paused": ("missed", "RunsSkippedPaused"),
}


@dataclass(frozen=True)
class Ending:
    """What became of the run: `state` None means our fence was stale and nothing was applied."""

    state: RunState | None
    run: Run | None
    error_class: str | None = None
    current: Run | None = None  # the run as stored, when the write was refused


class Completer:
    def __init__(
        self,
        definitions: DefinitionStore,
        runs: RunStore,
        queues: RunQueues,
        clock: Clock,
        metrics: Metrics = NO_METRICS,
        *,
        slots: TenantSlots | None = None,
    ) -> None:
        self._definitions = definitions
        self._runs = runs
        self._queues = queues
        self._clock = clock
        self._metrics = metrics
        self._slots = slots  # the tenant slot of a run leaving LEASED is released here

    @property
    def slots(self) -> TenantSlots | None:
        """The tenant slots this completer releases: a claimer must take its slots from these
        (`Attempts`, `RunService`, `Worker` do), or a completed claim keeps its slot until
        it is taken over."""
        return self._slots

    # --- the lease holder's endings (refused only for a stale fence or a moved state) ---

    def succeed(self, run: Run, output: Any, *, actor: str, throttle_delays: Iterable[float] = ()) -> Ending:
        """`throttle_delays`: the write is tried again after each (read lazily, as it is used)
        while the store cannot take it (an effect's result only this write records is worth
        the wait)."""
        now = self._clock.now()
        return self.write(
            run,
            lambda r: lifecycle.succeed(r, now=now, actor=actor, result=output),
            actor,
            throttle_delays=throttle_delays,
        )

    def fail(self, run: Run, error: ExecutionError, *, actor: str, effect_running: bool = False) -> Ending:
        """Retry under the policy (attempts, age, at-most-once), else dead-letter.
        `effect_running`: the effect may still be executing (it timed out), so the attempt's
        in-progress idempotency record stays."""
        now = self._clock.now()
        return self.write(
            run,
            lambda r: lifecycle.fail(
                r,
                now=now,
                actor=actor,
                error_class=error.error_class,
                message=error.message,
                retryable=error.retryable,
                effect_running=effect_running,
            ),
            actor,
            error.error_class,
        )

    def effect_ended(self, run: Run, fence: int) -> None:
        """The effect of the claim with `fence` ended after that attempt's failure was
        written (its result now saved on `run`): free the tenant slot the claim kept for it
        (store.tenant_slots: a running effect keeps its slot). Best effort."""
        if self._slots is not None:
            self._slots.release_effect(run, fence)

    def dead(self, run: Run, refusal: lifecycle.Refusal, *, actor: str) -> Ending:
        now = self._clock.now()
        return self.write(run, lambda r: lifecycle.refused(r, refusal, now=now, actor=actor), actor)

    def cancel(self, run: Run, reason: str, *, actor: str) -> Ending:
        now = self._clock.now()
        return self.write(run, lambda r: lifecycle.cancel(r, now=now, actor=actor, reason=reason), actor)

    def skip(self, run: Run, reason: str, *, actor: str, overlapped_by: str | None = None) -> Ending:
        now = self._clock.now()
        return self.write(
            run,
            lambda r: lifecycle.skip(r, now=now, actor=actor, reason=reason, overlapped_by=overlapped_by),
            actor,
        )

    def write(
        self,
        run: Run,
        change: Callable[[Run], Run],
        actor: str,
        error_class: str | None = None,
        *,
        throttle_delays: Iterable[float] = (),
    ) -> Ending:
        """Commit `change` under the conditions its transition's row names (a lease holder's:
        state and fence; anyone's: state and revision); then do what follows. A refused write
        is counted."""
        try:
            saved = self._commit(run, change, throttle_delays)
        except RunChanged as exc:
            current = exc.current
            logger.warning(
                "change rejected: the run moved on",
                extra={
                    "run_key": run.run_key,
                    "actor": actor,
                    "fence": run.fence,
                    "current_fence": current.fence if current else None,
                    "current_state": current.state.value if current else None,
                },
            )
            self._metrics.add("StaleFencesRejected")
            return Ending(None, None, error_class, current)
        if self._slots is not None and run.state is RunState.LEASED and saved.state is not RunState.LEASED:
            self._slots.release(saved)  # best effort: a lost release is taken over after the lease
        self.after(saved)
        return Ending(
            saved.state, saved, saved.last_error_class if saved.state is RunState.DEAD else error_class
        )

    def _commit(self, run: Run, change: Callable[[Run], Run], throttle_delays: Iterable[float]) -> Run:
        for delay in itertools.chain(throttle_delays, (None,)):
            try:
                return self._runs.commit(run, change)
            except StorageUnavailable:
                if delay is None:
                    raise
                logger.warning(
                    "change not written yet: the store is unavailable", extra={"run_key": run.run_key}
                )
                self._clock.sleep(delay)
        raise AssertionError("unreachable: the last try returns or raises")

    def before_effect(self, leased: Run, job: Job | None, *, actor: str) -> Ending | None:
        """The check between a claim and the effect, read after the claim: None to go on; a
        cancelled or missing job cancels the run; a paused job holds it for resume to decide;
        an occurrence the job's resume decided not to run (it fell in the pause, and
        `missedRuns` does not pick it) is SKIPPED as missed, however late its claim came and
        whatever the job became since (the resume decided first)."""
        now = self._clock.now()
        if job is None:
            return self.cancel(leased, "job missing before the effect", actor=actor)
        if lifecycle.pause_decides(leased) and job.missed_verdict(leased.scheduled_for) is False:
            return self.write(leased, lambda r: lifecycle.missed(r, now=now, actor=actor), actor)
        if job.state is JobState.CANCELLED:
            return self.cancel(leased, "job cancelled before the effect", actor=actor)
        if job.state is JobState.PAUSED:
            return self.write(leased, lambda r: lifecycle.hold(r, now=now, actor=actor), actor)
        return None

    # --- what follows a transition, whoever wrote it ---

    def after(self, run: Run) -> None:
        """What follows a landed transition to `run`'s state: the job's counter and metric,
        a dead run's DLQ copy and pause-on-failure, the chained run's release.

        Never raises: the transition has landed, so its outcome stands whatever follows.
        Each part is tried on its own, so one that fails (a throttled counter) does not stop
        the others; a failure is logged and counted (`AfterTransitionFailed`). A lost counter
        stays lost; a chained run not released is released by the reconciler."""
        if run.state not in TERMINAL_STATES:
            if run.state is RunState.RETRY_WAIT:
                self._metrics.add("RetriesScheduled")
            return
        counted = (
            _SKIP_COUNTERS.get(run.reason or "")
            if run.state is RunState.SKIPPED
            else _COUNTERS.get(run.state)
        )
        if counted is not None:
            counter, metric = counted
            self._metrics.add(metric)
            # A success a fold owns is counted by the fold (domain.run_counts), not here.
            if run.state is not RunState.SUCCEEDED or not run.counted_by_fold:
                self._best_effort(
                    "job counter not written", run, self._definitions.add_stats, run.job_id, **{counter: 1}
                )
        if run.state is RunState.DEAD:
            reason = f"{run.last_error_class}: {run.last_error_message}"
            # The copy makes the DLQ's depth alarm fire.
            self._best_effort(
                "dead run not copied to the DLQ",
                run,
                self._queues.dead_letter,
                run.priority.value,
                run,
                reason,
            )
            if run.policies.pause_on_failure:
                self._best_effort("job not paused on failure", run, self._pause_job, run)
        if run.blocks:
            self._best_effort("chained run not released", run, self.unblock_successor, run)

    def _best_effort(
        self, failed: str, run: Run, step: Callable[..., object], *args: object, **kwargs: object
    ) -> None:
        try:
            step(*args, **kwargs)
        except Exception:
            logger.exception(failed, extra={"run_key": run.run_key})
            self._metrics.add("AfterTransitionFailed")

    def unblock_successor(self, run: Run) -> None:
        """Let the run chained behind this one be published. Raises what the store raises
        (but RunChanged: the chained run moved meanwhile); `after` takes it as best effort,
        and the reconciler unblocks the run later."""
        assert run.blocks is not None
        successor = self._runs.get_by_key(run.blocks)
        if successor is None or successor.blocked_by != run.run_key or not successor.is_open:
            return
        now = self._clock.now()
        with contextlib.suppress(RunChanged):  # moved meanwhile (cancelled, or released by the reconciler)
            self._runs.commit(
                successor,
                lambda r: lifecycle.touch(r, now=now, actor="unblock", reason="unblocked", blocked_by=None),
            )

    def _pause_job(self, run: Run) -> None:
        job = self._definitions.get(run.job_id)
        if job is None or job.state is not JobState.ACTIVE:
            return
        try:
            self._definitions.save(job.paused(self._clock.now()), previous_state=job.state)
        except ConcurrentUpdate:
            # Changed meanwhile (paused, cancelled or edited): what it became stands.
            logger.warning(
                "job not paused after a failed run: it changed meanwhile", extra={"job_id": run.job_id}
            )
            return
        logger.info("job paused after a failed run", extra={"job_id": run.job_id, "run_key": run.run_key})
