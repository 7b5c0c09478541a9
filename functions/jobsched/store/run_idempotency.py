"""Powertools idempotency records kept on the run item itself, for one attempt of one run.

Powertools' DynamoDB layer wrote two items a run to a table of its own. The run says both:
- in progress: the claim. It records the claimer's fence and invocation deadline
  (`effect_fence`, `effect_until`: the expiry Powertools gives its in-progress record), so
  the record outlives the lease: an attempt whose lease expired while it executes still
  holds it, and a later claim keeps it instead of writing its own. Putting the record costs
  no request: the claim already wrote it, or kept an earlier attempt's, which this layer
  reports as the conflict Powertools turns into IdempotencyAlreadyInProgressError;
- completed: the completion itself (SUCCEEDED, with the result), the first write after the
  effect, as Powertools' own save was. While the worker waits for the effect, this layer
  hands the result to it and writes nothing, so a run costs one write where a save before
  the completion cost two; a crash before that write repeats the effect after the
  invocation's deadline, exactly as a crash before Powertools' save does. The result is
  saved on the run, not completed, only when the completion cannot record it: the worker
  stopped waiting (its own timeout) and the effect finished after, or the lease was lost
  while the effect ran. It is then saved on the run as stored, open or DEAD, as long as
  the in-progress record there is still this attempt's (same series, same fence): a later
  attempt, or a redrive, replays it instead of acting again;
- deleted (the effect raised): nothing to write here; the failure the worker writes next
  releases the in-progress record (lifecycle.fail).

A saved result is replayed for as long as the run is open, across redrives (one effect per
run); a finished run answers duplicates itself. A run whose effect raised has none, so its
redrive runs the effect again."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord

from ..domain import lifecycle
from ..domain.errors import StorageUnavailable
from ..domain.instants import Clock
from ..domain.runs import Run
from ..observability import logger
from .runs import RunChanged, RunStore

INPROGRESS = STATUS_CONSTANTS["INPROGRESS"]
COMPLETED = STATUS_CONSTANTS["COMPLETED"]
# A throttled save, or the completion that records an effect's result, is tried again this
# many times, this far apart (seconds): a result not recorded costs a second effect once the
# invocation's deadline has passed.
SAVE_RETRY_DELAYS = (0.2, 0.5, 1.0)
# Writes by others a save on a run we no longer hold is re-read and retried over.
SAVE_CONFLICT_RETRIES = 5


class HeldRun(Protocol):
    """The attempt's view of the run it claimed (shared with its heartbeat)."""

    @property
    def run(self) -> Run: ...

    def update(self, run: Run) -> None: ...


def record_of(key: str, run: Run, *, fence: int, now: datetime) -> DataRecord | None:
    """The idempotency record `run` holds for the attempt with `fence`: completed (a saved
    result), in progress (another attempt's live in-progress record), or none (ours)."""
    if run.result_saved_at is not None:
        return DataRecord(key, COMPLETED, response_data=json.dumps(run.saved_result, sort_keys=True))
    if run.effect_fence != fence and run.effect_in_progress(now):
        # No in_progress_expiry_timestamp: Powertools would compare it with the wall clock;
        # this layer judges expiry with the injected one.
        return DataRecord(key, INPROGRESS)
    return None


class RunIdempotency(BasePersistenceLayer):
    """The persistence layer of one attempt: `held` is the lease it claimed. One instance per
    attempt (Powertools configures a layer once, and the attempt is this instance's)."""

    def __init__(self, runs: RunStore, held: HeldRun, clock: Clock) -> None:
        super().__init__()
        self._runs = runs
        self._held = held
        self._clock = clock
        self._fence = held.run.fence
        self._lock = threading.Lock()  # the effect's thread hands over; the worker's stops waiting
        self._waiting = True
        self._handed: list[Any] = []

    def _get_record(self, idempotency_key: str) -> DataRecord:
        record = record_of(idempotency_key, self._held.run, fence=self._fence, now=self._clock.now())
        if record is None:
            raise IdempotencyItemNotFoundError
        return record

    def _put_record(self, data_record: DataRecord) -> None:
        """In progress: written by the claim. A saved result or another attempt's live record
        found on the run as claimed is the conflict (no request: the claim read it)."""
        found = record_of(
            data_record.idempotency_key, self._held.run, fence=self._fence, now=self._clock.now()
        )
        if found is not None:
            raise IdempotencyItemAlreadyExistsError(old_data_record=found)

    def _update_record(self, data_record: DataRecord) -> None:
        """Completed: handed to the worker, whose completion records it; saved on the run if
        the worker has stopped waiting for it."""
        result = json.loads(data_record.response_data) if data_record.response_data else None
        with self._lock:
            if self._waiting:
                self._handed.append(result)
                return
        self.save(None, result)

    def stop_waiting(self) -> list[Any]:
        """The worker gives up on the effect (its own timeout): a result the effect hands over
        from now on is saved on the run. Returns the result if it was handed over already."""
        with self._lock:
            self._waiting = False
            return list(self._handed)

    def save(self, current: Run | None, result: Any) -> bool:
        """Save `result` on the run when the completion cannot record it: under our fence, or,
        if the lease was lost meanwhile, on the run as stored (`current`, when the refused
        completion returned it) while its in-progress record is still ours: open, or DEAD
        (a redrive then replays it). Other writes landing meanwhile (a repair, the claim
        that found our record) are written over, re-read each time. False if the run moved
        on: the record is no longer ours (the result is not needed, or can no longer be kept)."""
        now = self._clock.now()
        held = self._held

        def save(run: Run) -> Run:
            return lifecycle.save_result(run, now=now, result=result)

        if current is None:
            try:
                held.update(self._save_as_holder(save))
                return True
            except RunChanged as exc:
                current = exc.current
        for _ in range(SAVE_CONFLICT_RETRIES):
            if (
                current is None
                or not lifecycle.can_save_result(current)
                or current.effect_fence != self._fence
            ):
                break
            try:
                self._runs.commit(current, save)
                return True
            except RunChanged as exc:
                current = exc.current
            except lifecycle.TransitionRefused:
                break
        logger.warning("effect result not saved: the run moved on", extra={"run_key": held.run.run_key})
        return False

    def _save_as_holder(self, save: Callable[[Run], Run]) -> Run:
        for delay in SAVE_RETRY_DELAYS:
            try:
                return self._runs.commit(self._held.run, save, holder=True)
            except StorageUnavailable:
                logger.warning("effect result not saved yet: the store is throttling")
                self._clock.sleep(delay)
        return self._runs.commit(self._held.run, save, holder=True)

    def _delete_record(self, data_record: DataRecord) -> None:
        """The effect raised: the failure the worker writes next releases the record."""
