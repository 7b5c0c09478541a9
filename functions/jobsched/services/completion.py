"""How a leased run ends: succeeded, retry wait, dead, or cancelled — always conditioned on
the holder's fence. Shared by the Lambda worker and the external-worker lease API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..domain.errors import ExecutionError
from ..domain.instants import Clock
from ..domain.jitter import retry_delay_seconds
from ..domain.models import JobState
from ..domain.runs import TERMINAL_STATES, Run, RunState, advance
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.queues import RunQueues
from ..store.runs import RunChanged, RunStore

Metric = Callable[[str, float, str], None]


@dataclass(frozen=True)
class Ending:
    """What became of the run: `state` None means our fence was stale and nothing was applied."""

    state: RunState | None
    run: Run | None
    error_class: str | None = None


class Completer:
    def __init__(
        self,
        definitions: DefinitionStore,
        runs: RunStore,
        queues: RunQueues,
        clock: Clock,
        metric: Metric | None = None,
    ) -> None:
        self._definitions = definitions
        self._runs = runs
        self._queues = queues
        self._clock = clock
        self._metric: Metric = metric or (lambda name, value, unit: None)

    def succeed(self, run: Run, output: Any, *, actor: str) -> Ending:
        done = advance(run, RunState.SUCCEEDED, now=self._clock.now(), actor=actor, result=output)
        saved = self._write(done, run, actor)
        if saved is None:
            return Ending(None, None)
        self._definitions.add_stats(run.job_id, succeeded=1)
        self._metric("RunsSucceeded", 1, "Count")
        return Ending(RunState.SUCCEEDED, saved)

    def fail(self, run: Run, error: ExecutionError, *, actor: str) -> Ending:
        """Retry under the policy (bounded by attempts and age), else dead-letter."""
        now = self._clock.now()
        retry = run.policies.retry
        if error.retryable and run.attempt < retry.max_attempts:
            delay = retry_delay_seconds(run.run_key, run.attempt - 1, retry.base_seconds, retry.cap_seconds)
            next_at = now + timedelta(seconds=max(1, round(delay)))
            started = run.first_attempt_at or now
            if retry.max_age_seconds is None or next_at - started <= timedelta(seconds=retry.max_age_seconds):
                waiting = advance(
                    run,
                    RunState.RETRY_WAIT,
                    now=now,
                    actor=actor,
                    error_class=error.error_class,
                    error_message=error.message,
                    due_at=next_at,
                    lease_owner=None,
                    lease_expires_at=None,
                )
                saved = self._write(waiting, run, actor)
                if saved is None:
                    return Ending(None, None, error.error_class)
                self._metric("RetriesScheduled", 1, "Count")
                return Ending(RunState.RETRY_WAIT, saved, error.error_class)
        message = f"retries exhausted: {error.message}" if error.retryable else error.message
        return self.dead(run, error.error_class, message, actor=actor)

    def dead(self, run: Run, error_class: str, message: str, *, actor: str) -> Ending:
        dead = advance(
            run,
            RunState.DEAD,
            now=self._clock.now(),
            actor=actor,
            error_class=error_class,
            error_message=message,
        )
        saved = self._write(dead, run, actor)
        if saved is None:
            return Ending(None, None, error_class)
        self.after_dead(saved)
        return Ending(RunState.DEAD, saved, error_class)

    def after_dead(self, run: Run) -> None:
        """What follows any run's death, whoever wrote it: a DLQ copy (so the depth alarm fires),
        the job's counter, and pause-on-failure."""
        reason = f"{run.last_error_class}: {run.last_error_message}"
        try:
            self._queues.dead_letter(run.priority.value, run, reason)
        except Exception:
            logger.exception("dead run not copied to the DLQ", extra={"run_key": run.run_key})
        self._definitions.add_stats(run.job_id, dead=1)
        self._metric("RunsDeadLettered", 1, "Count")
        if run.policies.pause_on_failure:
            self._pause_job(run)

    def cancel(self, run: Run, reason: str, *, actor: str) -> Ending:
        cancelled = advance(run, RunState.CANCELLED, now=self._clock.now(), actor=actor, reason=reason)
        saved = self._write(cancelled, run, actor)
        if saved is None:
            return Ending(None, None)
        self._definitions.add_stats(run.job_id, cancelled=1)
        self._metric("RunsCancelled", 1, "Count")
        return Ending(RunState.CANCELLED, saved)

    def _write(self, new: Run, held: Run, actor: str) -> Run | None:
        """Apply a change made by the lease holder; None (and a metric) when the fence is stale."""
        try:
            saved = self._runs.replace(new, expected_fence=held.fence)
            if saved.state in TERMINAL_STATES and saved.blocks:
                self.release_successor(saved)
            return saved
        except RunChanged as exc:
            current = exc.current
            logger.warning(
                "change rejected: fence superseded",
                extra={
                    "run_key": held.run_key,
                    "actor": actor,
                    "fence": held.fence,
                    "current_fence": current.fence if current else None,
                    "current_state": current.state.value if current else None,
                },
            )
            self._metric("StaleFencesRejected", 1, "Count")
            return None

    def release_successor(self, run: Run) -> None:
        """Let the run chained behind this one be published (best effort: the reconciler
        releases it later if this fails)."""
        assert run.blocks is not None
        for _ in range(3):
            successor = self._runs.get_by_key(run.blocks)
            if successor is None or successor.blocked_by != run.run_key:
                return
            released = successor.model_copy(update={"blocked_by": None, "updated_at": self._clock.now()})
            try:
                self._runs.replace(released)
                return
            except RunChanged:
                continue
            except Exception:
                logger.exception("could not release the chained run", extra={"run_key": run.blocks})
                return

    def _pause_job(self, run: Run) -> None:
        job = self._definitions.get(run.job_id)
        if job is None or job.state is not JobState.ACTIVE:
            return
        paused = job.model_copy(
            update={"state": JobState.PAUSED, "version": job.version + 1, "updated_at": self._clock.now()}
        )
        try:
            self._definitions.save(paused)
            logger.info("job paused after a failed run", extra={"job_id": run.job_id, "run_key": run.run_key})
        except Exception:
            logger.exception("could not pause the job after a failed run", extra={"job_id": run.job_id})
