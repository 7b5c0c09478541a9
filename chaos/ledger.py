"""The effect ledger: every handler call and every effect, with when it started and ended.

The targets in chaos are the harness's own: the Python job handlers registered here, the
HTTP receiver (chaos.receiver) that the `chaos.http` jobs' webhooks reach, and the external
worker that leases runs through the API. Each records what it did in the ledger as
it does it, beside the code under test and never through it, so "one effect per run", "no
effect after a pause", "no two runs of a `skip` job at once" and "no more effects of a
tenant at once than its limit" are counted from what the targets saw, not from what the
pipeline wrote down about itself.

Each record carries two positions: simulated true time (`at`, `end_at`: the ManualClock,
what the due-instant and deadline rules are judged on) and the sequencer's global order
(`seq`, `end_seq`: one counter shared with the harness's acknowledgements). Time advances a
whole simulated second between loop steps, so many effects share an instant; two effects
were under way at once exactly when their [seq, end_seq] intervals intersect."""

from __future__ import annotations

import itertools
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from jobsched.domain.errors import PermanentError, RetryableError
from jobsched.targets import HandlerRegistry, Invocation

from .faults import SkewedClock

# Job types and what their handler does.
OK = "chaos.ok"  # always acts
FLAKY = "chaos.flaky"  # fails transiently now and then, else acts
DOWN = "chaos.down"  # always fails transiently: retried until dead
BAD = "chaos.bad"  # fails permanently: dead at once, never retried, unless its payload is FIXED
EXTERNAL = "chaos.external"  # no handler: the harness's external fleet leases it through the API
HTTP = "chaos.http"  # an `http` target: the worker's webhook to the harness's receiver
JOB_TYPES = (OK, FLAKY, DOWN, BAD)
PERMANENT = "HTTP400"  # the error class of BAD's failures, and of the receiver's 400s
FIXED = "fix"  # a payload key: a redrive with a fixed payload (harness) carries it, and BAD acts

# Where an effect was seen.
HANDLER = "handler"  # a Python handler run by the Lambda worker
LEASE = "lease"  # the harness's external worker, through the lease API
WEBHOOK = "http"  # the harness's HTTP receiver, reached by the worker's HttpTargetClient


class Sequencer:
    """One global order for everything the harness observes (calls, effects, acknowledgements)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return next(self._counter)


@dataclass(frozen=True)
class Call:
    """One call of a target for one attempt of one run: from `seq`/`at` to `end_seq`/`end_at`.
    `acted` is False when the target failed before acting (no effect)."""

    run_key: str
    job_type: str
    attempt: int
    seq: int
    at: datetime  # true simulated time the call started
    acted: bool
    end_seq: int = 0  # 0 while the call is under way
    end_at: datetime | None = None
    tenant: str = ""
    source: str = HANDLER
    # The deadline (true time) of the invocation making the call, for a call that takes
    # simulated time (SlowEffect); None for a call that starts and ends at one instant.
    deadline: datetime | None = None
    payload: Any = None  # the run's payload as the target received it

    @property
    def job_id(self) -> str:
        return self.run_key.partition("@")[0]

    @property
    def finished(self) -> bool:
        return self.end_seq > 0


@dataclass
class Ledger:
    sequencer: Sequencer
    now: Callable[[], datetime]
    calls: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(
        self,
        run_key: str,
        job_type: str,
        attempt: int,
        tenant: str,
        source: str = HANDLER,
        *,
        deadline: datetime | None = None,
        payload: Any = None,
    ) -> Call:
        """A target call starts: recorded at once, so a call that never ends still shows.
        `payload`: what the target received as the run's payload."""
        with self.lock:
            seq = self.sequencer.next()
            call = Call(
                run_key,
                job_type,
                attempt,
                seq,
                self.now(),
                False,
                tenant=tenant,
                source=source,
                deadline=deadline,
                payload=payload,
            )
            self.calls[run_key].append(call)
            return call

    def end(self, call: Call, *, acted: bool, at: datetime | None = None) -> Call:
        """The call ends (now, or at `at`: where Lambda ended it); `acted`: whether it had its effect."""
        with self.lock:
            done = replace(call, acted=acted, end_seq=self.sequencer.next(), end_at=at or self.now())
            calls = self.calls[call.run_key]
            calls[calls.index(call)] = done
            return done

    def record(self, invocation: Invocation, acted: bool) -> None:
        """A handler call that starts and ends at once."""
        self.end(
            self.begin(
                invocation.run_key,
                invocation.job_type,
                invocation.attempt,
                invocation.tenant,
                payload=invocation.payload,
            ),
            acted=acted,
        )

    def effects(self, run_key: str) -> int:
        return sum(1 for call in self.calls.get(run_key, []) if call.acted)

    def all_calls(self) -> list[Call]:
        with self.lock:
            return [call for calls in self.calls.values() for call in calls]


class EndedAtDeadline(Exception):
    """Lambda ended the invocation at its deadline: its environment, and the call with it."""


class SlowEffect:
    """One invocation's target call that takes `seconds` of simulated time (a slow
    downstream), unless the harness ends the invocation at its deadline first (`ended`, set
    as Lambda ends an invocation that is still running then: every thread of it stops).

    The call is in the ledger with that deadline, so the checker sees a call that ran past
    it: an invocation that returned while its effect still ran (Lambda would freeze the
    thread and resume it in a later invocation) lets the effect end after the deadline its
    in-progress record promised."""

    def __init__(self, clock: SkewedClock, seconds: float, deadline: datetime, ended: threading.Event):
        self._clock = clock  # true time (no skew): the ledger's
        self.seconds = seconds
        self.deadline = deadline
        self.ended = ended
        self.call: Call | None = None
        self.started = threading.Event()  # the call has begun

    def act(self, ledger: Ledger, invocation: Invocation) -> None:
        """The call: acts at once, ends after `seconds` or where the invocation was ended
        (then raises EndedAtDeadline: nothing of the invocation goes on)."""
        call = ledger.begin(
            invocation.run_key,
            invocation.job_type,
            invocation.attempt,
            invocation.tenant,
            deadline=self.deadline,
            payload=invocation.payload,
        )
        self.call = call
        self.started.set()
        if not self._clock.wait(self.ended, self.seconds):
            ledger.end(call, acted=True)
            return
        ledger.end(call, acted=True, at=min(self._clock.now(), self.deadline))
        raise EndedAtDeadline(f"invocation ended at {self.deadline:%H:%M:%S} during the effect")


def chaos_registry(
    ledger: Ledger, rng: random.Random, flaky_rate: float = 0.35, *, slow: SlowEffect | None = None
) -> HandlerRegistry:
    """The chaos job types' handlers; with `slow`, an acting call takes its time (one
    invocation's registry)."""
    registry = HandlerRegistry()
    lock = threading.Lock()  # the handlers' draws, in one order whatever thread calls

    def draw() -> float:
        with lock:
            return rng.random()

    def act(invocation: Invocation) -> None:
        if slow is None:
            ledger.record(invocation, acted=True)
        else:
            slow.act(ledger, invocation)

    @registry.register(OK)
    def ok(payload: Any, invocation: Invocation) -> Any:
        act(invocation)
        return {"acted": invocation.run_key}

    @registry.register(FLAKY)
    def flaky(payload: Any, invocation: Invocation) -> Any:
        if draw() < flaky_rate:
            ledger.record(invocation, acted=False)
            raise RetryableError("downstream 503 (injected)", error_class="HTTP503")
        act(invocation)
        return {"acted": invocation.run_key}

    @registry.register(DOWN)
    def down(payload: Any, invocation: Invocation) -> Any:
        ledger.record(invocation, acted=False)
        raise RetryableError("downstream unavailable (injected)", error_class="HTTP503")

    @registry.register(BAD)
    def bad(payload: Any, invocation: Invocation) -> Any:
        if isinstance(payload, dict) and FIXED in payload:
            act(invocation)  # the cause was fixed: it acts
            return {"acted": invocation.run_key}
        ledger.record(invocation, acted=False)
        raise PermanentError("payload rejected (injected)", error_class=PERMANENT)

    return registry
