"""Executes one delivered run: claim the lease, check the job, run the effect once, complete
under the fence, or schedule the retry / dead-letter it.

Invariants this file carries: a completion never lands with a stale fence (every write after
the claim is conditioned on it); one effect per run for idempotent targets (the effect runs
under Powertools idempotency keyed by the run key, its records kept on the run itself
(store.run_idempotency): the completion is the completed record, a result the completion
cannot record is saved on the run and replayed instead of acting twice, and no attempt starts
the effect while an earlier one may still be executing it, until that one's invocation
deadline); no effect after an acknowledged pause
(the job is read, strongly consistent, after the claim and before the effect)."""

from __future__ import annotations

import contextlib
import copy
import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
)

from ..domain import lifecycle
from ..domain.errors import AmbiguousError, ExecutionError, RetryableError
from ..domain.instants import Clock, from_epoch
from ..domain.metrics import NO_METRICS, Metrics
from ..domain.models import Delivery as DeliveryMode
from ..domain.models import Overlap
from ..domain.runs import CLAIMABLE_STATES, TERMINAL_STATES, Run, RunState
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.queues import RunQueues
from ..store.run_idempotency import SAVE_RETRY_DELAYS, RunIdempotency
from ..store.runs import RunChanged, RunStore
from ..store.schema import QUEUES
from ..targets import Invocation, TargetRunner
from .completion import Completer, Ending

# The worker's own time around a run's effect: claim and reads before it (an early message
# waits up to CLOCK_SKEW), the completion after it (retried while the store throttles, within
# this reserve: see COMPLETION_RESERVE). The worker's
# function timeout is at least the longest effect a job may ask for plus this, and a batch's
# records run at once, so every record starts its effect with its full timeoutSeconds.
WORKER_OVERHEAD_SECONDS = 60
CLOCK_SKEW = timedelta(seconds=2)  # a message this early is waited out; earlier, it is deferred
DEFER_TOUCH = timedelta(minutes=5)
# Deferrals up to this long leave their message in the queue (the tenant-limit and buffer-one
# waits of 5 s, that repeat); a longer wait (a run not due for minutes) sends a fresh message,
# so the queue's oldest-message age keeps meaning a message nobody has dealt with.
DEFER_IN_PLACE = 60
# A completion after a successful effect is retried, backing off to this (seconds), until this
# much of the invocation is left: the result it records is worth the worker's reserved time.
COMPLETION_BACKOFF_CAP = 2.0
COMPLETION_RESERVE = 3.0


# How long a run whose tenant is at its limit waits before it looks again, by how long it has
# waited since it was due: a slot held by a short run frees within a second, so the first looks
# come soon; a run held longer (a tenant kept at its limit by long runs) looks every 5 s. Read
# from the due instant, not the receive count, which a fresh deferral message starts again.
TENANT_WAITS = ((1.0, 1), (3.0, 2), (7.0, 4))  # (waited less than, wait) in seconds
TENANT_WAIT_LONGEST = 5


def tenant_wait(waited_seconds: float) -> int:
    return next((wait for below, wait in TENANT_WAITS if waited_seconds < below), TENANT_WAIT_LONGEST)


class EffectStillRunning(AmbiguousError):
    """The worker stopped waiting for the effect, which may still be executing in its thread
    (until the invocation ends): unlike a target's own timeout, its in-progress record stays."""

    error_class = "Timeout"


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # overlap policy
    DEFERRED = "deferred"  # not due yet, buffered behind a running run, or tenant at its limit
    DUPLICATE = "duplicate"  # finished or leased by a live worker: nothing to do
    STALE = "stale"  # our fence was superseded before we could complete
    HELD = "held"  # its job was paused: held for resume to decide (missedRuns)


@dataclass(frozen=True)
class Delivery:
    """One received message: a pointer to a run, and where it came from."""

    run_key: str
    job_id: str
    scheduled_for: str
    queue: str
    receive_count: int = 1
    sent_at: datetime | None = None
    receipt_handle: str | None = None  # lets the heartbeat keep the message invisible


@dataclass
class Result:
    outcome: Outcome
    run: Run | None = None
    error_class: str | None = None
    start_lag: float | None = None  # seconds from due to claim
    duration: float | None = None  # seconds the effect took
    # The message was left in its queue to come back after a deferral: it must not be
    # acknowledged (the handler reports it as a batch item failure).
    redeliver: bool = False


class _Lease:
    """The worker's view of its lease, shared with the heartbeat thread."""

    def __init__(self, run: Run) -> None:
        self._lock = threading.Lock()
        self._run = run
        self.lost = False

    @property
    def run(self) -> Run:
        with self._lock:
            return self._run

    def update(self, run: Run) -> None:
        with self._lock:
            self._run = run


class TenantSlots:
    """A tenant's free lease slots (its concurrency limit less its live leases), counted once
    for a batch and then handed out to the batch's records: one count per tenant a batch,
    not one per record, and the records of a batch, which run at once, no longer all read
    the same count and all claim. The count is as good as the index it reads: leases claimed
    elsewhere meanwhile are not seen, as they were not by a count per record; leases ended
    meanwhile free their slots for the next batch."""

    def __init__(self, runs: RunStore, limit: int) -> None:
        self._runs = runs
        self._limit = limit
        self._lock = threading.Lock()
        self._counting: dict[str, threading.Lock] = {}
        self._free: dict[str, int] = {}

    def take(self, tenant: str, now: datetime) -> bool:
        """A slot for one claim of `tenant`'s, if it has one free."""
        with self._lock:
            counting = self._counting.setdefault(tenant, threading.Lock())
        with counting:  # one count per tenant; other tenants' records go on meanwhile
            if tenant not in self._free:
                live = self._runs.live_leases(tenant, now, up_to=self._limit)
                with self._lock:
                    self._free[tenant] = self._limit - live
        with self._lock:
            if self._free[tenant] <= 0:
                return False
            self._free[tenant] -= 1
            return True

    def give_back(self, tenant: str) -> None:
        """The slot was not used: the claim it was taken for did not happen."""
        with self._lock:
            self._free[tenant] += 1


class Worker:
    def __init__(
        self,
        definitions: DefinitionStore,
        runs: RunStore,
        queues: RunQueues,
        runner: TargetRunner,
        clock: Clock,
        *,
        worker_id: str,
        lease_seconds: int = 60,
        tenant_concurrency: int = 0,
        idempotency_ttl: timedelta = timedelta(days=1),
        metrics: Metrics = NO_METRICS,
        completer: Completer | None = None,
    ) -> None:
        self._definitions = definitions
        self._runs = runs
        self._queues = queues
        self._runner = runner
        self._clock = clock
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.tenant_concurrency = tenant_concurrency
        self._idempotency = IdempotencyConfig(
            event_key_jmespath="runKey", expires_after_seconds=int(idempotency_ttl.total_seconds())
        )
        self._metrics = metrics
        self._completer = completer or Completer(definitions, runs, queues, clock, metrics)
        # Without a Lambda context: the longest a Lambda invocation may last.
        self.remaining_seconds: Callable[[], float] = lambda: 900.0
        # Receives a message may spend on deferrals before a deferral sends a fresh one.
        self.deferral_receives = {q.key: q.deferral_receives for q in QUEUES}
        # One invocation's tenant slots (see bind); unbound, every delivery counts afresh.
        self._tenant_slots: TenantSlots | None = None

    def bind(self, context: Any) -> None:
        """Per invocation: who we are, how long we have (also the expiry of the in-progress
        idempotency record a claim writes)."""
        self.worker_id = context.aws_request_id
        self.remaining_seconds = lambda: context.get_remaining_time_in_millis() / 1000
        self._idempotency = copy.copy(self._idempotency)
        self._idempotency.register_lambda_context(context)
        self._tenant_slots = TenantSlots(self._runs, self.tenant_concurrency)

    def for_invocation(self, context: Any) -> Worker:
        """This worker bound to one invocation, leaving this one as it was: invocations that
        share a process (local mode) keep their own identity and deadline. Stores and queues
        are shared."""
        bound = copy.copy(self)
        bound.bind(context)
        return bound

    @property
    def actor(self) -> str:
        return f"worker:{self.worker_id}"

    # --- the pipeline for one delivery ---

    def process(self, delivery: Delivery) -> Result:
        run = self._runs.get_by_key(delivery.run_key)
        now = self._clock.now()
        if run is None or not lifecycle.claimable(run, now):
            # Finished, leased by a live worker, held or chained: nothing for this message to do.
            self._metrics.add("DuplicatesSuppressed")
            return Result(Outcome.DUPLICATE, run)
        if run.state in CLAIMABLE_STATES and run.due_at > now + CLOCK_SKEW:
            return self._defer(run, delivery, (run.due_at - now).total_seconds(), "not_due")

        blocked = self._overlap(run, now, delivery)
        if blocked is not None:
            return blocked

        refusal = lifecycle.attempt_refusal(run, now)
        if refusal is not None:
            # No further attempt may start (its worker died holding the last one, it is too old,
            # or at-most-once and an earlier attempt may have acted): dead, not claimed.
            if run.state is RunState.LEASED:
                self._metrics.add("LeasesExpired")
                return self._ended(
                    self._completer.write(
                        run, lambda r: lifecycle.lease_expired(r, now=now, actor=self.actor), self.actor
                    )
                )
            return self._ended(self._completer.dead(run, refusal, actor=self.actor))

        slots = None
        if self.tenant_concurrency > 0:
            slots = self._tenant_slots or TenantSlots(self._runs, self.tenant_concurrency)
            if not slots.take(run.tenant, now):
                self._metrics.add("TenantThrottled")
                waited = (now - run.due_at).total_seconds()
                return self._defer(run, delivery, tenant_wait(waited), "tenant_limit")
        if run.state in CLAIMABLE_STATES:
            # A message may be visible a fraction of a second early (SQS delays are whole
            # seconds; see outbox.sqs_delay) or early by the sender's clock: wait it out, so a
            # run never starts before its due instant.
            early = (run.due_at - self._clock.precise()).total_seconds()
            if early > 0:
                self._clock.sleep(early)
                now = self._clock.now()
        start_lag = max(0.0, (self._clock.precise() - run.due_at).total_seconds())
        leased = self._claim(run, now)
        if leased is None:
            if slots is not None:
                slots.give_back(run.tenant)
            self._metrics.add("DuplicatesSuppressed")
            return Result(Outcome.DUPLICATE, run)
        logger.thread_safe_append_keys(tenant=leased.tenant, fence=leased.fence, attempt=leased.attempt)

        lease = _Lease(leased)
        try:
            # Read after the claim: a pause or cancel acknowledged before this read stops the run.
            job = self._definitions.get(run.job_id)
            stopped = self._completer.before_effect(leased, job, actor=self.actor)
            if stopped is not None:
                return self._ended(stopped)
            if leased.policies.delivery is DeliveryMode.AT_MOST_ONCE:
                try:
                    lease.update(
                        self._runs.commit(leased, lambda r: lifecycle.effect_started(r, now=now), holder=True)
                    )
                except RunChanged:
                    self._metrics.add("StaleFencesRejected")
                    return Result(Outcome.STALE, leased)
        except Exception:
            # The claim is the in-progress record: give it back, or the next attempt would
            # wait for this invocation's deadline for an effect that never started.
            self._release_effect(lease.run)
            raise

        result = self._execute(lease, delivery)
        result.start_lag = start_lag
        return result

    # --- steps ---

    def _claim(self, run: Run, now: datetime) -> Run | None:
        if run.state is RunState.LEASED:
            self._metrics.add("LeasesExpired")
        # The claim is the in-progress idempotency record too: it lasts to this invocation's
        # deadline (bounded by the records' lifetime, as Powertools bounds its own), counted
        # from the clock as the remaining time is read, not from the start of the delivery.
        remaining = min(self.remaining_seconds(), self._idempotency.expires_after_seconds)
        effect_until = self._clock.now() + timedelta(seconds=max(0.0, remaining))
        try:
            return self._runs.commit(
                run,
                lambda r: lifecycle.claim(
                    r,
                    now=now,
                    owner=self.worker_id,
                    actor=self.actor,
                    lease_seconds=self.lease_seconds,
                    effect_until=effect_until,
                ),
            )
        except (RunChanged, lifecycle.TransitionRefused):
            return None

    def _overlap(self, run: Run, now: datetime, delivery: Delivery) -> Result | None:
        policy = run.policies.overlap
        if policy is Overlap.ALLOW or not run.previous_run_key:
            return None
        previous = self._runs.get_by_key(run.previous_run_key)
        if previous is None or previous.state in TERMINAL_STATES:
            return None
        running = previous.state in (RunState.LEASED, RunState.RETRY_WAIT)
        if policy is Overlap.BUFFER_ONE and running:
            # This run is the one buffered: look again shortly.
            return self._defer(run, delivery, 5, "buffered")
        ending = self._completer.skip(run, "overlap", actor=self.actor)
        if ending.run is None:
            return Result(Outcome.DUPLICATE, run)
        return Result(Outcome.SKIPPED, ending.run)

    def _defer(self, run: Run, delivery: Delivery, seconds: float, why: str) -> Result:
        """Come back later. A short wait leaves the message in its queue, invisible for the
        delay, while it has receives to spare (QueueSpec.deferral_receives): nothing is sent,
        so no worker -> SQS -> worker chain grows. Otherwise a fresh message is sent (receive
        count 1) and this one is acknowledged."""
        delay = int(max(1, min(900, seconds)))
        redeliver = False
        spare = self.deferral_receives.get(delivery.queue, 0)
        if delivery.receipt_handle and delivery.receive_count <= spare and delay <= DEFER_IN_PLACE:
            try:
                self._queues.release(self._queues.url(delivery.queue), delivery.receipt_handle, delay)
                redeliver = True
            except Exception:
                logger.warning("could not defer by visibility; sending a new message", extra={"why": why})
        if not redeliver and self._queues.publish(delivery.queue, [(run, delay)]):
            raise RetryableError(f"could not defer {run.run_key}")
        now = self._clock.now()
        if run.state is RunState.QUEUED and now - run.updated_at > DEFER_TOUCH:
            # Long waits (buffered, tenant limit) would otherwise look like a lost message to
            # the reconciler; touching the run moves its repair deadline on.
            with contextlib.suppress(RunChanged, lifecycle.TransitionRefused):
                self._runs.replace(lifecycle.release(run, now=now, actor=self.actor, reason=why))
        logger.debug("deferred", extra={"run_key": run.run_key, "why": why, "resent": not redeliver})
        return Result(Outcome.DEFERRED, run, error_class=why, redeliver=redeliver)

    def _execute(self, lease: _Lease, delivery: Delivery) -> Result:
        run = lease.run
        budget = max(1.0, min(float(run.policies.timeout_seconds), self.remaining_seconds() - 5))
        invocation = Invocation(
            run_key=run.run_key,
            job_id=run.job_id,
            tenant=run.tenant,
            job_type=run.job_type,
            scheduled_for=run.scheduled_for,
            attempt=run.attempt,
            payload=run.payload,
            timeout_seconds=budget,
        )
        heartbeat = _Heartbeat(self, lease, delivery)
        records = RunIdempotency(self._runs, lease, self._clock)
        started = self._clock.now()
        heartbeat.start()
        try:
            output = self._effect(lease, invocation, budget, records)
        except IdempotencyAlreadyInProgressError:
            # An earlier attempt may still be executing the effect: come back at its deadline.
            heartbeat.stop()
            now = self._clock.now()
            actor = self.actor
            return self._ended(
                self._completer.write(
                    lease.run,
                    lambda r: lifecycle.in_progress_elsewhere(r, now=now, actor=actor),
                    actor,
                    "InProgress",
                )
            )
        except ExecutionError as exc:
            heartbeat.stop()
            # Only an effect this worker stopped waiting for may still be executing: its
            # in-progress record stays. A target's own timeout has returned.
            running = isinstance(exc, EffectStillRunning)
            return self._ended(self._completer.fail(lease.run, exc, actor=self.actor, effect_running=running))
        finally:
            # Told to stop, not waited for: the completion is written at once (a renewal in
            # flight meanwhile only moves the rev, which the holder's write re-applies over).
            heartbeat.halt()
        duration = (self._clock.now() - started).total_seconds()
        # The completion is the effect's completed record: one that cannot be written yet is
        # tried again while this invocation has time (a result not recorded is acted on again
        # after its deadline); a refused one (the lease was lost while the effect ran) leaves
        # the result saved on the run for the attempt that holds it to replay.
        try:
            ending = self._completer.succeed(
                lease.run, output, actor=self.actor, throttle_delays=self._completion_retries()
            )
        finally:
            heartbeat.stop()
        if ending.state is None:
            records.save(ending.current, output)
        result = self._ended(ending)
        result.duration = duration
        return result

    def _completion_retries(self) -> Iterator[float]:
        """Backoff delays for a completion the store cannot take yet, for as long as this
        invocation has time left (less COMPLETION_RESERVE) to try once more."""
        until = self._clock.now() + timedelta(seconds=self.remaining_seconds() - COMPLETION_RESERVE)
        for delay in itertools.chain(SAVE_RETRY_DELAYS, itertools.repeat(COMPLETION_BACKOFF_CAP)):
            if self._clock.now() + timedelta(seconds=delay) >= until:
                return
            yield delay

    def _ended(self, ending: Ending) -> Result:
        outcomes = {
            RunState.SUCCEEDED: Outcome.SUCCEEDED,
            RunState.RETRY_WAIT: Outcome.RETRY_SCHEDULED,
            RunState.DEAD: Outcome.DEAD,
            RunState.CANCELLED: Outcome.CANCELLED,
            RunState.PENDING: Outcome.HELD,
            RunState.SKIPPED: Outcome.SKIPPED,
        }
        outcome = outcomes[ending.state] if ending.state is not None else Outcome.STALE
        return Result(outcome, ending.run, error_class=ending.error_class)

    def _effect(self, lease: _Lease, invocation: Invocation, budget: float, records: RunIdempotency) -> Any:
        """The target call, under idempotency keyed by the run key, bounded by the timeout.

        Its records are the run's own (store.run_idempotency): the claim is the in-progress
        record, the completion the completed one."""
        run = lease.run

        outputs: list[Any] = []

        def once(request: dict[str, Any]) -> Any:
            # Saved on the run: JSON, and bounded.
            output = lifecycle.bounded_result(self._runner.run(run.target, invocation))
            outputs.append(output)
            return output

        guarded = idempotent_function(
            data_keyword_argument="request",
            config=self._idempotency,
            persistence_store=records,
        )(once)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="effect")
        future = pool.submit(guarded, request={"runKey": run.run_key})
        try:
            return future.result(timeout=budget)
        except FutureTimeout:
            handed = records.stop_waiting()
            if handed:
                return handed[0]  # it finished as the wait ran out
            # From here a result the effect returns is saved on the run, for a later attempt.
            raise EffectStillRunning(f"the effect did not finish within {budget:.0f} s") from None
        except IdempotencyPersistenceLayerError as exc:
            if outputs:
                # The effect ran but Powertools could not record it: the completion records
                # the result itself.
                logger.warning(
                    "effect result not recorded", extra={"run_key": run.run_key, "error": str(exc)}
                )
                return outputs[0]
            # The store failed before the effect: surface its own error, as a completion that
            # fails does, so the record is retried.
            cause = exc.__cause__
            raise (cause if isinstance(cause, Exception) else exc) from None
        finally:
            pool.shutdown(wait=False)

    def _release_effect(self, run: Run) -> None:
        """Best effort: a failure leaves the record to expire at this invocation's deadline."""
        try:
            self._runs.commit(
                run, lambda r: lifecycle.effect_not_started(r, now=self._clock.now()), holder=True
            )
        except Exception as exc:
            logger.warning(
                "in-progress record not released", extra={"run_key": run.run_key, "error": str(exc)}
            )

    def heartbeat(self, lease: _Lease, delivery: Delivery | None = None) -> bool:
        """Extend the lease, and the message's visibility, while the effect runs. False once
        the fence is no longer ours."""
        run = lease.run
        until = self._clock.now() + timedelta(seconds=self.lease_seconds)
        try:
            lease.update(self._runs.extend_lease(run, until))
        except RunChanged:
            lease.lost = True
            return False
        if delivery is not None and delivery.receipt_handle:
            try:
                # Twice the lease: SQS must not redeliver while the lease is being renewed.
                url = self._queues.url(delivery.queue)
                self._queues.release(url, delivery.receipt_handle, 2 * self.lease_seconds)
            except Exception:
                logger.warning("could not extend message visibility", extra={"run_key": run.run_key})
        return True


class _Heartbeat:
    """Renews the lease every third of its length until stopped."""

    def __init__(self, worker: Worker, lease: _Lease, delivery: Delivery | None = None) -> None:
        self._delivery = delivery
        self._worker = worker
        self._lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def halt(self) -> None:
        """No renewal starts after this; one in flight may still land."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        interval = max(1.0, self._worker.lease_seconds / 3)
        while not self._stop.wait(interval):
            try:
                if not self._worker.heartbeat(self._lease, self._delivery):
                    return
            except Exception:
                logger.exception("heartbeat failed", extra={"run_key": self._lease.run.run_key})


def parse_sent_at(epoch_ms: str | None) -> datetime | None:
    if not epoch_ms:
        return None
    return from_epoch(int(epoch_ms) / 1000)
