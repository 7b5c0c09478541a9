"""An external worker: runs jobs of its types outside Lambda through the lease API.

    from jobsched.client import Client
    from jobsched.worker import LeaseWorker, Permanent

    worker = LeaseWorker(Client(url, api_key=key), "billing-1", concurrency=4)

    @worker.handler("invoice.send")
    def send(lease):
        lease.check()                      # raises LeaseLost once the lease is gone
        db.update(..., condition=f"fence < {lease.fence}")   # the user's own writes, fenced
        return {"sent": True}

    worker.run()                           # until SIGTERM/SIGINT (or worker.stop())

What the worker does, so a handler does not have to:
- leases up to `concurrency` runs of its handlers' types at a time (`POST /v1/leases`);
- heartbeats each lease on its own thread every third of the lease, and when a heartbeat is
  refused (the lease expired and another worker claimed the run, or the run was cancelled)
  marks the lease lost: `lease.lost` is set, `lease.check()` raises LeaseLost, and the
  handler's answer is never reported (its completion would be refused under a stale fence).
  A lease that ran out by this process's own clock (the API unreachable, or a renewal still
  unanswered) is lost too, so the handler stops before its next effect; but a handler that
  finishes is still reported, and the API's fence check decides: an answer it accepts
  records the effect, which would otherwise run again after the lease;
- completes under the claim's fence: the handler's return value is the result; `Permanent`
  fails the run for good; any other exception fails the attempt, retried by the job's policy;
- on SIGTERM/SIGINT (or `stop()`) leases nothing more, lets the handlers under way finish
  (heartbeating them) and returns. A run leased but not started is never held: the worker
  leases only what it can start at once.

The fence (`lease.fence`) grows with every claim of the run: a write of the user's own that
carries it and refuses a smaller one can never be made by an attempt that lost its lease to
a later one. Every call to the API goes through `client`: a `jobsched.client.Client` (or
anything with its `claim`, `heartbeat` and `complete`: `LeaseClient`)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .api_models.views import HeartbeatView, LeaseView, RunView

logger = logging.getLogger("jobsched.worker")

MAX_CLAIM = 10  # the lease API's `max`
MAX_TYPES = 10  # the lease API's `types`, at most
MAX_ERROR_MESSAGE = 4000  # the lease API's limit on a reported error's message
RENEWAL_POLL_SECONDS = 0.05  # how often a heartbeat waiting for its answer looks at its handler


class LeaseClient(Protocol):
    """The lease calls the worker makes: `jobsched.client.Client`'s.

    The worker sends its heartbeats and completions `idempotent=True`: the client then sends
    them again after no answer, 502, 503 or 504 (a 429 is sent again for every request), as
    it does a GET, although they are POSTs. Both are safe to repeat because both carry the
    claim's fence. A heartbeat repeated renews the same lease from now, or is refused (409
    `stale_fence`, 404) once the lease is gone, which is what the first one would have
    said. A completion that already landed is refused as `stale_fence` when repeated, never
    applied twice; and repeating one that did not land (a 503 before the store applied it)
    is what saves the attempt: without it the lease runs out, and the run is tried again
    (a repeated effect) or, for an `at-most-once` job, dies `AtMostOnce` although its
    handler succeeded. The retries' waits cannot outlast the lease unnoticed: the lease is
    lost by the worker's own clock however long a heartbeat takes (`LeaseWorker._heartbeat`)."""

    def claim(
        self, types: list[str], worker_id: str, *, max_runs: int = 1, lease_seconds: int = 60
    ) -> list[LeaseView]: ...

    def heartbeat(
        self, run_key: str, fence: int, *, lease_seconds: int = 60, idempotent: bool = False
    ) -> HeartbeatView: ...

    def complete(
        self,
        run_key: str,
        fence: int,
        outcome: Literal["succeeded", "failed"],
        *,
        result: Any = None,
        error: Any = None,
        idempotent: bool = False,
    ) -> RunView: ...


class LeaseLost(Exception):
    """The lease is gone (expired and claimed again, or the run cancelled): stop, and make no
    further effect for this attempt."""


class Permanent(Exception):
    """Raised by a handler: the run fails for good (no retry). `error_class` names why."""

    def __init__(self, message: str, *, error_class: str = "Permanent") -> None:
        super().__init__(message)
        self.error_class = error_class


@dataclass
class Lease:
    """One leased run, as the handler receives it."""

    run_key: str
    job_id: str
    type: str
    scheduled_for: str
    attempt: int
    fence: int
    payload: Any
    lost: threading.Event = field(default_factory=threading.Event)
    # Set when the API refused a renewal (404, 409): another claim holds the run, or it
    # ended. `lost` alone may be this process's own clock running out.
    refused: threading.Event = field(default_factory=threading.Event)
    claimed_at: float = 0.0  # time.monotonic() when the claim was sent: the lease runs from before it

    def check(self) -> None:
        """Raise LeaseLost if the lease is gone: call it before each effect."""
        if self.lost.is_set():
            raise LeaseLost(f"the lease of {self.run_key} (fence {self.fence}) is gone")

    @classmethod
    def of(cls, answer: LeaseView, claimed_at: float = 0.0) -> Lease:
        """The lease the API answered; `scheduled_for` as the API spells it (RFC 3339)."""
        return cls(
            run_key=answer.run_key,
            job_id=answer.job_id,
            type=answer.type,
            scheduled_for=answer.model_dump(mode="json", by_alias=True)["scheduledFor"],
            attempt=answer.attempt,
            fence=answer.fence,
            payload=answer.payload,
            claimed_at=claimed_at,
        )


Handler = Callable[[Lease], Any]


class LeaseWorker:
    """`client`: the API (a `jobsched.client.Client`). `worker_id`: this process's name in the runs' history.
    `concurrency`: runs under way at once. `lease_seconds`: each lease's length (10-900),
    renewed every third of it. `poll_seconds`: the wait after a claim that found nothing."""

    def __init__(
        self,
        client: LeaseClient,
        worker_id: str,
        *,
        concurrency: int = 4,
        lease_seconds: int = 60,
        poll_seconds: float = 1.0,
    ) -> None:
        if not 1 <= concurrency <= 1000:
            raise ValueError("concurrency is 1 to 1000")
        if not 10 <= lease_seconds <= 900:
            raise ValueError("lease_seconds is 10 to 900 (the lease API's bounds)")
        self.client = client
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self._handlers: dict[str, Handler] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._running = 0
        self.completed: list[tuple[str, int, str]] = []  # (run key, fence, outcome) reported

    def handler(self, job_type: str) -> Callable[[Handler], Handler]:
        """Register the decorated function for `job_type`."""

        def register(function: Handler) -> Handler:
            if job_type in self._handlers:
                raise ValueError(f"a handler for {job_type!r} is already registered")
            self._handlers[job_type] = function
            return function

        return register

    def stop(self) -> None:
        """Lease nothing more; `run` returns once the handlers under way have finished."""
        self._stopping.set()

    def run(self, *, install_signals: bool = True) -> None:
        """Lease and run until `stop()` (or SIGTERM/SIGINT, when `install_signals` and this
        is the main thread); returns after the handlers under way have finished."""
        if not self._handlers:
            raise ValueError("no handler registered")
        if install_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: self.stop())
        types = sorted(self._handlers)
        # The lease API takes at most MAX_TYPES types a call: more are asked for in turn.
        chunks = [types[i : i + MAX_TYPES] for i in range(0, len(types), MAX_TYPES)]
        turn = idle = 0
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="jobsched-worker") as pool:
            while not self._stopping.is_set():
                free = self.concurrency - self._running
                if free <= 0:
                    self._stopping.wait(0.05)
                    continue
                chunk = chunks[turn % len(chunks)]
                turn += 1
                sent = time.monotonic()
                try:
                    answers = self.client.claim(
                        chunk,
                        self.worker_id,
                        max_runs=min(free, MAX_CLAIM),
                        lease_seconds=self.lease_seconds,
                    )
                except Exception:
                    logger.exception("claiming leases failed; trying again")
                    self._stopping.wait(self.poll_seconds)
                    continue
                if not answers:
                    idle += 1
                    if idle >= len(chunks):  # a whole round of types found nothing
                        idle = 0
                        self._stopping.wait(self.poll_seconds)
                    continue
                idle = 0
                for answer in answers:
                    lease = Lease.of(answer, sent)
                    with self._lock:
                        self._running += 1
                    future: Future[None] = pool.submit(self._work, lease)
                    future.add_done_callback(lambda _: self._finished())

    def _finished(self) -> None:
        with self._lock:
            self._running -= 1

    def _work(self, lease: Lease) -> None:
        """Run the lease's handler beside its heartbeat, then report the outcome under its
        fence, unless the lease was lost meanwhile."""
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(lease, done), daemon=True)
        beat.start()
        outcome: Literal["succeeded", "failed", "lost"]
        result: Any = None
        error: dict[str, Any] | None = None
        try:
            result = self._handlers[lease.type](lease)
            outcome = "succeeded"
        except LeaseLost:
            lease.lost.set()
            outcome = "lost"
        except Permanent as exc:
            outcome = "failed"
            error = {
                "class": exc.error_class[:128],
                "message": str(exc)[:MAX_ERROR_MESSAGE],
                "retryable": False,
            }
        except Exception as exc:
            outcome = "failed"
            error = {
                "class": type(exc).__name__[:128],
                "message": str(exc)[:MAX_ERROR_MESSAGE],
                "retryable": True,
            }
        finally:
            done.set()
            beat.join()
        if outcome == "lost" or lease.refused.is_set():
            # The handler stopped (LeaseLost), or the API said another claim holds the run.
            # A handler that finished is otherwise reported, even past the lease by this
            # process's clock: the API's fence check decides, and a completion it accepts
            # records the effect, which would otherwise run again after the lease.
            logger.warning("lease lost: the outcome is not reported", extra={"run_key": lease.run_key})
            return
        try:
            # Sent again after a lost answer or a 5xx (see LeaseClient: the fence makes it safe).
            self.client.complete(
                lease.run_key, lease.fence, outcome, result=result, error=error, idempotent=True
            )
        except Exception:
            # Refused (a stale fence: the run moved on, or a repeat of a completion that
            # landed) or unreachable: the lease then expires and the run's retry policy
            # decides, as for a worker that died.
            logger.exception("completing the run failed", extra={"run_key": lease.run_key})
            return
        with self._lock:
            self.completed.append((lease.run_key, lease.fence, outcome))

    def _heartbeat(self, lease: Lease, done: threading.Event) -> None:
        """Renew the lease every third of its length until `done`. A refusal (404: the run is
        gone; 409: the fence is stale or the lease expired) marks it lost. A renewal that
        could not be sent (the client's own retries spent) is tried again at the next beat;
        once the lease has run out by this process's own clock (counted from before the last
        renewal was sent), it is lost too, even while a renewal is still under way: another
        worker may hold the run by then."""
        expires = lease.claimed_at + self.lease_seconds
        while not done.wait(self.lease_seconds / 3):
            sent = time.monotonic()
            renewal = _Renewal(self.client, lease, self.lease_seconds)
            # Wait for the answer, but never past the lease, nor once the handler has finished
            # (its completion goes out at once; the API's fence check decides it).
            while not renewal.finished.wait(min(RENEWAL_POLL_SECONDS, max(0.0, expires - time.monotonic()))):
                if done.is_set():
                    return
                if time.monotonic() >= expires:
                    lease.lost.set()  # still waiting for an answer when the lease ran out
                    logger.warning("lease lost: it ran out while renewing", extra={"run_key": lease.run_key})
                    return
            if renewal.error is None:
                expires = sent + self.lease_seconds
                continue
            status = getattr(renewal.error, "status", None)
            if status in (404, 409) or time.monotonic() >= expires:
                if status in (404, 409):
                    lease.refused.set()
                lease.lost.set()
                logger.warning("lease lost", extra={"run_key": lease.run_key, "status": status})
                return
            logger.warning("heartbeat not sent; trying again", extra={"run_key": lease.run_key})


class _Renewal:
    """One heartbeat, sent on a thread of its own so that the lease's clock keeps running
    while the client waits for an answer (or retries): `finished` is set once it has one,
    with `error` None for a renewal accepted, else what was raised."""

    def __init__(self, client: LeaseClient, lease: Lease, lease_seconds: int) -> None:
        self.finished = threading.Event()
        self.error: BaseException | None = None
        self._call = (client, lease.run_key, lease.fence, lease_seconds)
        threading.Thread(target=self._send, name="jobsched-heartbeat", daemon=True).start()

    def _send(self) -> None:
        client, run_key, fence, lease_seconds = self._call
        try:
            # Sent again after a lost answer or a 5xx (see LeaseClient: the fence makes it safe).
            client.heartbeat(run_key, fence, lease_seconds=lease_seconds, idempotent=True)
        except Exception as exc:
            self.error = exc
        finally:
            self.finished.set()
