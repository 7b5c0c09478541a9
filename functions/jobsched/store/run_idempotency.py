"""Powertools idempotency records kept on the run item itself, for one attempt of one run.

The run is the record (domain.effects says how its fields read). Each method of the
persistence layer does what its name says, on the run, as the attempt's lease holder:
- `_put_record` (in progress) writes the attempt's fence and invocation deadline onto the
  run, refused when the run holds a saved result or another attempt's live record;
- `_get_record` reads the record the run holds for this attempt: completed (a saved result)
  or in progress (another attempt's);
- `_update_record` (completed) writes the completion: the run SUCCEEDED with the effect's
  result. When the lease was lost meanwhile, the result is saved on the run as stored while
  the in-progress record there is still this attempt's, for the attempt that holds it (or a
  redrive) to replay; throttled writes are retried in both cases;
- `_delete_record` (the effect raised) writes the attempt's failure, which clears its
  in-progress record (lifecycle.fail).
What was written is left in `written` for the pipeline, which reads it after the effect's
thread has finished (the future's result orders the two).

The effect's answer travels inside an envelope (`{"result": …}`): Powertools replays a
falsy record (0, false, "", {}, []) as None, an envelope never."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord

from ..domain import lifecycle
from ..domain.effects import EffectDecision, effect_verdict
from ..domain.errors import ExecutionError, RetryableError, StorageUnavailable
from ..domain.instants import Clock
from ..domain.runs import Run
from ..observability import logger
from .runs import RunChanged, RunStore

INPROGRESS = STATUS_CONSTANTS["INPROGRESS"]
COMPLETED = STATUS_CONSTANTS["COMPLETED"]
ENVELOPE = "result"
# A throttled write that records an effect's result is tried again after these delays
# (seconds), then every SAVE_BACKOFF_CAP, while the invocation has time left.
SAVE_RETRY_DELAYS = (0.2, 0.5, 1.0)
SAVE_BACKOFF_CAP = 2.0
# Writes by others a save on a run we no longer hold is re-read and retried over.
SAVE_CONFLICT_RETRIES = 5


class HeldRun(Protocol):
    """The attempt's view of the run it claimed (shared with its heartbeat)."""

    @property
    def run(self) -> Run: ...

    def update(self, run: Run) -> None: ...


class Completions(Protocol):
    """The writes that end an attempt (services.completion.Completer)."""

    def succeed(self, run: Run, output: Any, *, actor: str, throttle_delays: Iterable[float] = ()) -> Any: ...

    def fail(self, run: Run, error: ExecutionError, *, actor: str, effect_running: bool = False) -> Any: ...

    def effect_ended(self, run: Run, fence: int) -> None:
        """The effect of the claim with `fence` ended after its attempt's failure was written."""
        ...


@dataclass
class Written:
    """What the record's last write did: the completion's or failure's Ending, and whether the
    result was saved on the run instead (the lease was lost while the effect ran)."""

    ending: Any
    saved: bool = False


def envelope(result: Any) -> dict[str, Any]:
    return {ENVELOPE: result}


def record_of(key: str, run: Run, *, fence: int, now: datetime) -> DataRecord | None:
    """The record `run` holds for the attempt with `fence`: completed (a saved result), in
    progress (another attempt's live record), or None (nothing excludes this attempt)."""
    verdict = effect_verdict(run, fence, now)
    if verdict.decision is EffectDecision.REPLAY:
        return DataRecord(key, COMPLETED, response_data=json.dumps(envelope(verdict.result), sort_keys=True))
    if verdict.decision is EffectDecision.WAIT:
        # No in_progress_expiry_timestamp: Powertools would compare it with the wall clock;
        # the verdict judges expiry with the injected one.
        return DataRecord(key, INPROGRESS)
    return None


class _Excluded(Exception):
    def __init__(self, record: DataRecord) -> None:
        super().__init__(record.status)
        self.record = record


class RunIdempotency(BasePersistenceLayer):
    """The persistence layer of one attempt: `held` is the lease it claimed, `deadline` its
    invocation's end (the in-progress record's expiry), `time_left` the seconds the
    invocation still has for retrying a write. One instance per attempt."""

    def __init__(
        self,
        runs: RunStore,
        completions: Completions,
        held: HeldRun,
        clock: Clock,
        *,
        actor: str,
        deadline: datetime,
        time_left: Callable[[], float],
    ) -> None:
        super().__init__()
        self._runs = runs
        self._completions = completions
        self._held = held
        self._clock = clock
        self._actor = actor
        self._deadline = deadline
        self._time_left = time_left
        self._fence = held.run.fence
        self._error: ExecutionError | None = None
        self.written: Written | None = None

    # --- the four records ---

    def _get_record(self, idempotency_key: str) -> DataRecord:
        record = record_of(idempotency_key, self._held.run, fence=self._fence, now=self._clock.now())
        if record is None:
            raise IdempotencyItemNotFoundError
        return record

    def _put_record(self, data_record: DataRecord) -> None:
        """Write this attempt's in-progress record. Raises IdempotencyItemAlreadyExistsError
        (with the record found) when the run, as stored, holds a saved result or another
        attempt's live record; RunChanged when the lease is no longer ours, or has run out by
        this worker's clock, before the write or once it has landed (a worker stalled between
        its claim and its effect, or a write retried past the lease: its tenant slot may have
        been taken over since, and no effect may start without one)."""
        key = data_record.idempotency_key
        now = self._clock.now()

        def put(run: Run) -> Run:
            if run.fence == self._fence and not run.lease_live(now):
                raise RunChanged(f"run {run.run_key}: the lease ran out before the effect", run)
            found = record_of(key, run, fence=self._fence, now=now)
            if found is not None:
                raise _Excluded(found)
            return lifecycle.record_in_progress(run, now=now, until=self._deadline)

        try:
            self._held.update(self._runs.commit(self._held.run, put))
        except _Excluded as excluded:
            raise IdempotencyItemAlreadyExistsError(old_data_record=excluded.record) from None
        if not self._held.run.lease_live(self._clock.now()):
            # The write landed late (retried, throttled, a stall): the lease ran out on the way,
            # so its tenant slot may have been taken over before the record was seen. The
            # effect must not start; the attempt's give-back clears the record.
            raise RunChanged(f"run {key}: the lease ran out while its record was written", self._held.run)

    def _update_record(self, data_record: DataRecord) -> None:
        """Write the completed record: the run's completion with the effect's result, or, when
        the lease was lost, the result saved on the run as stored."""
        result = json.loads(data_record.response_data or "{}").get(ENVELOPE)
        ending = self._completions.succeed(
            self._held.run, result, actor=self._actor, throttle_delays=self._retry_delays()
        )
        saved = False
        if ending.state is None:
            saved = self.save(ending.current, result)
        self.written = Written(ending, saved)

    def delete_record(self, data: dict[str, Any], exception: Exception) -> None:
        """The effect raised `exception`: keep it for `_delete_record`, which writes it."""
        self._error = (
            exception
            if isinstance(exception, ExecutionError)
            else RetryableError(
                str(exception) or type(exception).__name__, error_class=type(exception).__name__
            )
        )
        super().delete_record(data, exception)

    def _delete_record(self, data_record: DataRecord) -> None:
        """Clear this attempt's in-progress record by writing its failure (retry or dead)."""
        error = self._error or RetryableError("the effect failed", error_class="EffectFailed")
        self.written = Written(self._completions.fail(self._held.run, error, actor=self._actor))

    # --- the result saved when the completion cannot record it ---

    def save(self, current: Run | None, result: Any) -> bool:
        """Save `result` on the run when its completion could not record it: on the run as
        stored (`current`, as the refused completion returned it) while its in-progress record
        is still this attempt's, open or DEAD (a redrive replays it). Throttled writes are
        retried while the invocation has time; writes by others landing meanwhile (a repair,
        a later claim) are written over, re-read each time. False when the record is no longer
        this attempt's (the run moved on: the result can no longer be kept)."""
        now = self._clock.now()

        def save(run: Run) -> Run:
            return lifecycle.save_result(run, now=now, result=result)

        delays = self._retry_delays()
        conflicts = 0
        while current is not None and conflicts < SAVE_CONFLICT_RETRIES:
            if not lifecycle.can_save_result(current) or current.effect_fence != self._fence:
                break
            try:
                saved = self._runs.commit(current, save)
            except RunChanged as exc:
                current = exc.current
                conflicts += 1
            except lifecycle.TransitionRefused:
                break
            except StorageUnavailable:
                delay = next(delays, None)
                if delay is None:
                    raise
                logger.warning("effect result not saved yet: the store is throttling")
                self._clock.sleep(delay)
            else:
                self._completions.effect_ended(saved, self._fence)  # its tenant slot is free now
                return True
        logger.warning("effect result not saved: the run moved on", extra={"run_key": self._held.run.run_key})
        return False

    def _retry_delays(self) -> Iterator[float]:
        """Backoff delays for a write that records an effect's result, for as long as this
        invocation has time for one more try."""
        for delay in itertools.chain(SAVE_RETRY_DELAYS, itertools.repeat(SAVE_BACKOFF_CAP)):
            if self._time_left() <= delay:
                return
            yield delay
