"""The Lambda worker's side of an attempt: one SQS message in, one attempt of its run
(services.attempt) out, executed here while a heartbeat renews the lease and the message's
visibility.

What is the worker's own: the message. A run that may not start yet (not due, buffered
behind a running run, its tenant at its limit) is deferred: its message stays in its queue,
invisible for the wait, while it has receives to spare; past that the run is handed back to
the outbox (lifecycle.defer) and the message acknowledged. A message whose run is leased
under a lease never renewed since its claim is kept for just after that lease (its holder
most likely failed after the claim), so the run starts again without waiting for a repair.
The worker never sends a message itself, so no worker -> SQS -> worker chain grows and
Lambda's recursive-loop guard never drops a waiting run. Waits back off with how long the
run has waited since it was due."""

from __future__ import annotations

import contextlib
import copy
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..domain import lifecycle
from ..domain.errors import RetryableError, TenantAtLimit
from ..domain.instants import Clock, from_epoch, parse_instant
from ..domain.jitter import retry_delay_seconds, start_jitter_seconds
from ..domain.metrics import NO_METRICS, Metrics
from ..domain.runs import CLAIMABLE_STATES, Run, RunState
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.queues import RunQueues
from ..store.runs import RunChanged, RunStore
from ..store.schema import QUEUES
from ..store.tenant_slots import SlotHolder, TenantSlots
from ..targets import TargetRunner
from .attempt import (
    CLOCK_SKEW,
    Admission,
    AttemptOutcome,
    AttemptResult,
    Attempts,
    _Lease,
    ended,
)
from .completion import Completer

# The worker's own time around a run's effect: claim and reads before it (an early message
# waits up to CLOCK_SKEW), the completion after it. The worker's function timeout is at
# least the longest effect a job may ask for plus this, and a batch's records run at once,
# so every record starts its effect with its full timeoutSeconds.
WORKER_OVERHEAD_SECONDS = 60
# Deferrals up to this long leave their message in the queue; a longer one hands the run
# back to the outbox, which publishes it with the delay.
DEFER_IN_PLACE = 60

# How long a run whose tenant is at its limit waits before it looks again, by how long it
# has waited since it was due: a slot held by a short run frees within a second, so the first
# looks come soon; then the waits double, up to TENANT_WAIT_LONGEST. Each wait is drawn in
# its upper half per run and receive (tenant_wait), so the runs of a burst deferred together
# do not all look again in the same second: a herd that finds every slot still held leaves
# the slots freed in between idle until the next herd (1,000 runs due at once with a limit of
# 50: one herd every 30 s, about 50 runs started per herd).
TENANT_WAITS = ((1.0, 1), (3.0, 2), (7.0, 4), (15.0, 8), (31.0, 16))  # (waited less than, wait) s
TENANT_WAIT_LONGEST = 30

# Seconds a heartbeat keeps the message invisible beyond the lease it renews.
MESSAGE_AFTER_LEASE = 5
# Claims a delivery tries when each loses to a write that left the run claimable.
CLAIM_TRIES = 3


# A record that fails on an unexpected error (a store throttled before the claim, a crash in
# the worker) comes back after a jittered backoff instead of the queue's visibility timeout
# (5,400 s): 10 s x 2^(receive count - 1), capped at 60 s, each wait drawn in its upper half.
# With the queue's maxReceiveCount (10) and deferrals of at most DEFER_IN_PLACE (60 s), no
# receive keeps a message away for more than 60 s: a record that keeps failing reaches the
# DLQ in at most 10 x 60 s = 10 minutes of waits (the arithmetic is checked in infra/queues.py).
FAILURE_BACKOFF_BASE_SECONDS = 10
FAILURE_BACKOFF_CAP_SECONDS = 60


def failure_backoff_seconds(message_id: str, receive_count: int) -> int:
    """Seconds a message whose record failed on its `receive_count`-th receive stays invisible:
    in [bound / 2, bound], bound = min(60, 10 x 2^(receive_count - 1)), the draw picked by
    sha256(message_id#receive), so the messages of a batch that failed together spread out.
    Never above FAILURE_BACKOFF_CAP_SECONDS; at least 5 s. Raises ValueError for a receive count
    below 1."""
    if receive_count < 1:
        raise ValueError("receive_count must be at least 1")
    half_base = FAILURE_BACKOFF_BASE_SECONDS / 2
    half_cap = FAILURE_BACKOFF_CAP_SECONDS / 2
    half_bound = min(half_cap, half_base * 2 ** min(receive_count - 1, 32))
    drawn = retry_delay_seconds(message_id, receive_count - 1, half_base, half_cap)
    return int(min(FAILURE_BACKOFF_CAP_SECONDS, round(half_bound + drawn)))


def tenant_wait(waited_seconds: float, run_key: str, receive_count: int) -> int:
    """Seconds a run whose tenant is at its limit, having waited `waited_seconds` since it was
    due, stays invisible before it looks again: in [ceil(bound / 2), bound], bound by
    TENANT_WAITS (TENANT_WAIT_LONGEST past them), the draw picked by
    sha256(run_key#receive_count), so the same inputs always give the same wait and runs
    deferred together spread out (from their second look: the first bound is 1 s). At least
    1; never above TENANT_WAIT_LONGEST."""
    bound = next((wait for below, wait in TENANT_WAITS if waited_seconds < below), TENANT_WAIT_LONGEST)
    shortest = math.ceil(bound / 2)
    return shortest + start_jitter_seconds(f"tenant-wait#{run_key}#{receive_count}", bound - shortest)


@dataclass(frozen=True)
class Received:
    """One received message: a pointer to a run, and where it came from."""

    run_key: str
    job_id: str
    scheduled_for: str
    queue: str
    receive_count: int = 1
    sent_at: datetime | None = None
    receipt_handle: str | None = None  # lets the heartbeat keep the message invisible
    # What the message says of the run (None when it does not): its tenant, and its due
    # instant when published. Used only by a look at the tenant's slots before the run is
    # read (whether to look, and how long a run found waiting waits); the run as stored
    # decides everything else.
    tenant: str | None = None
    due_at: datetime | None = None


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
        tenant_slots: TenantSlots | None = None,
    ) -> None:
        self._definitions = definitions
        self._runs = runs
        self._queues = queues
        self._runner = runner
        self._clock = clock
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.tenant_concurrency = tenant_concurrency
        self._metrics = metrics
        # The tenant limit, exact: a claim takes one of its tenant's slots first (store.tenant_slots),
        # and the completer that ends the claim releases it: both use the same slots.
        if completer is not None and tenant_slots is not None and completer.slots is not tenant_slots:
            raise ValueError("tenant_slots must be the completer's own: its endings release them")
        if completer is None:
            if tenant_slots is None and tenant_concurrency > 0:
                tenant_slots = TenantSlots(runs, tenant_concurrency)
            completer = Completer(definitions, runs, queues, clock, metrics, slots=tenant_slots)
        slots = completer.slots
        self._slots = slots if slots is not None and slots.limit > 0 else None
        self._completer = completer
        self.attempts = Attempts(
            definitions,
            runs,
            self._completer,
            clock,
            metrics=metrics,
            records_lifetime=idempotency_ttl,
        )
        # Without a Lambda context: the longest a Lambda invocation may last.
        self.remaining_seconds: Callable[[], float] = lambda: 900.0
        # Receives a message may spend on deferrals before the run is handed to the outbox.
        self.deferral_receives = {q.key: q.deferral_receives for q in QUEUES}

    def bind(self, context: Any) -> None:
        """Per invocation: who we are and how long we have (the deadline an attempt's
        in-progress record promises)."""
        self.worker_id = context.aws_request_id
        self.remaining_seconds = lambda: context.get_remaining_time_in_millis() / 1000

    def for_invocation(self, context: Any) -> Worker:
        """This worker bound to one invocation, leaving this one as it was: invocations that
        share a process (local mode) keep their own identity and deadline. Stores and queues
        are shared."""
        bound = copy.copy(self)
        bound.bind(context)
        return bound

    def hold(self, messages: list[tuple[str, str]]) -> None:
        """Before a batch's records start: each message ((queue key, receipt handle)) is made to
        come back `lease_seconds + MESSAGE_AFTER_LEASE` from now rather than after the queue's
        visibility timeout (5,400 s: AWS's rule for a Lambda event source), so a run whose
        invocation dies before its claim or first heartbeat starts again within about a
        minute instead of waiting for the reconciler's 15-minute dwell. The heartbeat and
        deferrals then set each message's visibility as before. One call per queue and ten
        messages; a failure is logged and changes nothing else."""
        by_queue: dict[str, list[str]] = {}
        for queue, handle in messages:
            if handle:
                by_queue.setdefault(queue, []).append(handle)
        for queue, handles in by_queue.items():
            try:
                failed = self._queues.change_visibility_batch(
                    self._queues.url(queue), handles, self.lease_seconds + MESSAGE_AFTER_LEASE
                )
            except Exception as exc:
                failed, error = handles, str(exc)
            else:
                error = "refused by SQS"
            if failed:
                # Each still comes back when the entry's hold ends (handlers.worker_entry:
                # START_HOLD_SECONDS, 30 s, from receipt), not after the queue's timeout.
                logger.warning(
                    "messages not held for the lease",
                    extra={"queue": queue, "count": len(failed), "error": error},
                )

    @property
    def clock(self) -> Clock:
        """The worker's injected clock (its heartbeat's waits follow it)."""
        return self._clock

    @property
    def actor(self) -> str:
        return f"worker:{self.worker_id}"

    # --- one message ---

    def process(self, delivery: Received) -> AttemptResult:
        """The attempt `delivery` points at: admitted, claimed, checked, executed, completed
        (services.attempt), or deferred. A claim lost to a write that left the run claimable
        (the outbox's mark, a repair's touch) is tried again on the run as stored, so such a
        write never costs the run its message. Raises what the store raises before the
        effect (the message is then redelivered).

        With a tenant limit, a due run's message received again (a run back from a wait)
        looks at the tenant's slots first (`_look`): every slot held defers it without
        reading the run; otherwise the slots read serve the first claim."""
        looked = self._look(delivery)
        if isinstance(looked, AttemptResult):
            return looked
        holders = looked
        run = self._runs.get_by_key(delivery.run_key)
        for _ in range(CLAIM_TRIES):
            now = self._clock.now()
            admitted = self.attempts.admit(run, now, actor=self.actor)
            if admitted.admission is Admission.NOTHING:
                return self._nothing_to_do(admitted.run, delivery)
            assert run is not None
            if admitted.admission is Admission.NOT_DUE:
                return self._defer(run, delivery, admitted.wait_seconds, "not_due")
            if admitted.admission is Admission.BUFFERED:
                return self._defer(run, delivery, admitted.wait_seconds, "buffered")
            if admitted.admission is Admission.ENDED:
                assert admitted.ending is not None
                return ended(admitted.ending)
            claimed = self._claim(run, now, delivery, holders)
            holders = None  # read once: a second claim reads them again
            if isinstance(claimed, AttemptResult):
                return claimed
            leased, current, start_lag = claimed
            if leased is not None:
                return self._run(leased, delivery, start_lag=start_lag)
            if current is None or not lifecycle.claimable(current, self._clock.now()):
                return self._nothing_to_do(current or run, delivery)
            run = current  # lost to a write that left it claimable: admit and claim it again
        raise RetryableError(f"run {delivery.run_key} keeps changing; its message comes back")

    def _look(self, delivery: Received) -> AttemptResult | list[SlotHolder] | None:
        """Before the run is read, for a delivery that came back from a wait: with a tenant
        limit, and a message that names the run's tenant and due instant, received again
        (its first receive reads and admits the run: an overlap skip, a death or a duplicate
        is decided there) while it may still be deferred in place (a receipt handle,
        receives to spare), for a run already due, the tenant's slots. When every one is
        held by another run's live claim (TenantSlots.at_limit), the run waits as a refused
        claim would (`tenant_wait` of the time since its due instant), its message left
        invisible for it: that deferral, without the run read. Otherwise the slots as read
        (for the first claim), or None when no look was made (the run is then read and
        claimed as always). A wait that cannot be set on the message goes on to read the
        run. Raises what the store raises."""
        slots = self._slots
        spare = self.deferral_receives.get(delivery.queue, 0)
        now = self._clock.now()
        if (
            slots is None
            or delivery.tenant is None
            or delivery.due_at is None
            or delivery.due_at > now + CLOCK_SKEW  # not due yet: the run decides how long to wait
            or not delivery.receipt_handle
            or not 1 < delivery.receive_count <= spare
        ):
            return None
        holders = slots.holders(delivery.tenant)
        if not slots.at_limit(holders, now=now):
            return holders
        waited = (now - delivery.due_at).total_seconds()
        delay = tenant_wait(waited, delivery.run_key, delivery.receive_count)
        deferred = self._wait_in_place(delivery, None, delay, "tenant_limit")
        if deferred is None:
            return holders  # the run is read and claimed, or deferred, as always
        self._metrics.add("TenantThrottled")
        return deferred

    def _claim(
        self, run: Run, now: datetime, delivery: Received, holders: list[SlotHolder] | None = None
    ) -> AttemptResult | tuple[Run | None, Run | None, float]:
        """After waiting out an early message: the claim's outcome (leased, or the run as
        stored) with the start lag (seconds from due to the claim), or the deferral when the
        tenant is at its limit (the claim took none of its slots). `holders`: the tenant's
        slots as `_look` read them, for the claim's first try."""
        if run.state in CLAIMABLE_STATES:
            # A message may be visible a fraction of a second early (SQS delays are whole
            # seconds; see outbox.sqs_delay) or early by the sender's clock: wait it out, so a
            # run never starts before its due instant.
            early = (run.due_at - self._clock.precise()).total_seconds()
            if early > 0:
                self._clock.sleep(min(early, CLOCK_SKEW.total_seconds()))
                now = self._clock.now()
        start_lag = max(0.0, (self._clock.precise() - run.due_at).total_seconds())
        try:
            leased, current = self.attempts.claim_or_current(
                run,
                now,
                owner=self.worker_id,
                actor=self.actor,
                lease_seconds=self.lease_seconds,
                holders=holders,
            )
        except TenantAtLimit:
            self._metrics.add("TenantThrottled")
            waited = (now - run.due_at).total_seconds()
            return self._defer(
                run, delivery, tenant_wait(waited, run.run_key, delivery.receive_count), "tenant_limit"
            )
        return leased, current, start_lag

    def _run(self, leased: Run, delivery: Received, *, start_lag: float) -> AttemptResult:
        logger.thread_safe_append_keys(tenant=leased.tenant, fence=leased.fence, attempt=leased.attempt)
        # Read after the claim: a pause or cancel acknowledged before this read stops the run.
        checked = self.attempts.check_job(leased, actor=self.actor)
        if not isinstance(checked, Run):
            return ended(checked)
        result = self.attempts.execute_here(
            checked,
            self._runner,
            actor=self.actor,
            time_left=self.remaining_seconds,
            heartbeat=lambda lease: _Heartbeat(self, lease, delivery).start(),
        )
        result.start_lag = start_lag
        return result

    def _nothing_to_do(self, run: Run | None, delivery: Received) -> AttemptResult:
        """A delivery whose run needs nothing of it now: DUPLICATE (the message is
        acknowledged), unless the run is LEASED under a lease never renewed since its claim:
        its holder most likely failed after the claim (the failed record's message is back
        within seconds, long before the lease ends). The message is then kept (`_await_lease`)
        so the run starts again from it just after the lease, instead of waiting for the
        reconciler's repair. A renewed lease has a live holder, whose heartbeat keeps its own
        delivery of the message: this one is acknowledged, as before."""
        if run is not None and run.state is RunState.LEASED and not self._renewed(run):
            kept = self._await_lease(run, delivery)
            if kept is not None:
                return kept
        self._metrics.add("DuplicatesSuppressed")
        return AttemptResult(AttemptOutcome.DUPLICATE, run)

    def _renewed(self, run: Run) -> bool:
        """Whether the run's lease was extended after its claim (a heartbeat ran)."""
        claimed = next((e.at for e in reversed(run.history) if e.target is RunState.LEASED), None)
        if claimed is None or run.lease_expires_at is None:
            return False
        return run.lease_expires_at > claimed + timedelta(seconds=self.lease_seconds + 1)

    def _await_lease(self, run: Run, delivery: Received) -> AttemptResult | None:
        """Keep the message of a leased run: invisible for the lease's remaining time plus
        MESSAGE_AFTER_LEASE (at most DEFER_IN_PLACE a receive; a lease that just expired
        gets MESSAGE_AFTER_LEASE), when the receives the message has to spare on deferrals
        can outlast the lease. None when it cannot be kept (no receipt handle, the lease
        longer than those receives can wait, the visibility change failed): the message is
        then acknowledged as before, and the reconciler repairs the run if its holder is
        dead. Never writes the run: the lease is its holder's."""
        assert run.lease_expires_at is not None
        left = max(0.0, (run.lease_expires_at - self._clock.precise()).total_seconds())
        wait = math.ceil(left) + MESSAGE_AFTER_LEASE
        spare = self.deferral_receives.get(delivery.queue, 0) - delivery.receive_count + 1
        if not delivery.receipt_handle or spare < 1 or wait > DEFER_IN_PLACE * spare:
            return None
        delay = int(min(DEFER_IN_PLACE, wait))
        try:
            self._queues.change_visibility(self._queues.url(delivery.queue), delivery.receipt_handle, delay)
        except Exception:
            logger.warning("could not keep the message of a leased run", extra={"run_key": run.run_key})
            return None
        self._metrics.add("LeasedRunMessagesKept")
        logger.debug("kept for after the lease", extra={"run_key": run.run_key, "seconds": delay})
        return AttemptResult(
            AttemptOutcome.DEFERRED, run, error_class="leased", wait_seconds=delay, redeliver=True
        )

    # --- deferral ---

    def _wait_in_place(
        self, delivery: Received, run: Run | None, delay: int, why: str
    ) -> AttemptResult | None:
        """Leave `delivery`'s message in its queue, invisible for `delay` s: the DEFERRED result
        (`run` as read, None when it was not read), or None when SQS refused (logged; the
        caller then goes on without the wait)."""
        assert delivery.receipt_handle is not None
        try:
            self._queues.change_visibility(self._queues.url(delivery.queue), delivery.receipt_handle, delay)
        except Exception:
            logger.warning("could not defer by visibility", extra={"run_key": delivery.run_key, "why": why})
            return None
        logger.debug("deferred in place", extra={"run_key": delivery.run_key, "why": why})
        return AttemptResult(
            AttemptOutcome.DEFERRED, run, error_class=why, wait_seconds=delay, redeliver=True
        )

    def _defer(self, run: Run, delivery: Received, seconds: float, why: str) -> AttemptResult:
        """Come back in `seconds`. A short wait leaves the message in its queue, invisible for
        the delay, while it has receives to spare (QueueSpec.deferral_receives); otherwise the
        run is handed back to the outbox to be published again then, and the message is
        acknowledged. Raises RetryableError when neither could be done (the message is then
        redelivered, so the run is not lost)."""
        delay = int(max(1, min(900, seconds)))
        spare = self.deferral_receives.get(delivery.queue, 0)
        if delivery.receipt_handle and delivery.receive_count <= spare and delay <= DEFER_IN_PLACE:
            in_place = self._wait_in_place(delivery, run, delay, why)
            if in_place is not None:
                return in_place
        now = self._clock.now()
        until = now + timedelta(seconds=delay)
        try:
            deferred = self._runs.commit(
                run, lambda r: lifecycle.defer(r, now=now, actor=self.actor, until=until, reason=why)
            )
        except (RunChanged, lifecycle.TransitionRefused):
            # Moved on meanwhile (claimed, cancelled): whoever moved it owns it now.
            return AttemptResult(AttemptOutcome.DUPLICATE, run)
        except Exception as exc:
            raise RetryableError(f"could not defer {run.run_key}: {exc}") from exc
        logger.debug("deferred through the outbox", extra={"run_key": run.run_key, "why": why})
        return AttemptResult(AttemptOutcome.DEFERRED, deferred, error_class=why, wait_seconds=delay)

    # --- the heartbeat ---

    def heartbeat(self, lease: _Lease, delivery: Received | None = None) -> bool:
        """Extend the lease, and the message's visibility, while the effect runs. False once
        the fence is no longer ours."""
        run = lease.run
        now = self._clock.now()
        until = now + timedelta(seconds=self.lease_seconds)
        try:
            # Never revives an expired lease: its tenant slot may have been taken over.
            lease.update(self._runs.extend_lease(run, until, live_at=now))
        except RunChanged:
            return False
        if delivery is not None and delivery.receipt_handle:
            with contextlib.suppress(Exception):
                # Just past the lease: renewed every third of it, this delivery of the message
                # never comes back while this worker lives; if it dies, the message comes back
                # moments after its lease has expired and the run starts again without waiting
                # for a repair. (A second delivery of it meanwhile finds the lease renewed and
                # is acknowledged: see `_nothing_to_do`.)
                url = self._queues.url(delivery.queue)
                self._queues.change_visibility(
                    url, delivery.receipt_handle, self.lease_seconds + MESSAGE_AFTER_LEASE
                )
        return True


class _Heartbeat:
    """Renews the lease every third of its length until stopped."""

    def __init__(self, worker: Worker, lease: _Lease, delivery: Received | None = None) -> None:
        self._delivery = delivery
        self._worker = worker
        self._lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> _Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No renewal starts after this; one in flight is waited for (up to 5 s)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        interval = max(1.0, self._worker.lease_seconds / 3)
        while not self._worker.clock.wait(self._stop, interval):
            try:
                if not self._worker.heartbeat(self._lease, self._delivery):
                    return
            except Exception:
                logger.exception("heartbeat failed", extra={"run_key": self._lease.run.run_key})


def parse_sent_at(epoch_ms: str | None) -> datetime | None:
    if not epoch_ms:
        return None
    return from_epoch(int(epoch_ms) / 1000)


def parse_due_at(instant: str | None) -> datetime | None:
    """A message's `dueAt`, or None when it has none or it does not parse (the run is then
    read before anything is decided, as for a message without it)."""
    if not instant:
        return None
    try:
        return parse_instant(instant)
    except ValueError:
        return None
