"""The effect ledger: every handler call and every effect, in the order they happened.

The Python job handlers registered here are the system under test's "targets": they act
only through the ledger, so "one effect per run" and "no effect after a pause" are
counted rather than assumed."""

from __future__ import annotations

import itertools
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobsched.domain.errors import PermanentError, RetryableError
from jobsched.targets import HandlerRegistry, Invocation

# Job types and what their handler does.
OK = "chaos.ok"  # always acts
FLAKY = "chaos.flaky"  # fails transiently now and then, else acts
DOWN = "chaos.down"  # always fails transiently: retried until dead
BAD = "chaos.bad"  # fails permanently: dead at once, never retried
JOB_TYPES = (OK, FLAKY, DOWN, BAD)
PERMANENT = "HTTP400"  # the error class of BAD's failures


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
    run_key: str
    job_type: str
    attempt: int
    seq: int
    at: datetime  # true simulated time
    acted: bool  # False when the handler failed before acting


@dataclass
class Ledger:
    sequencer: Sequencer
    now: Callable[[], datetime]
    calls: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, invocation: Invocation, acted: bool) -> None:
        with self.lock:
            self.calls[invocation.run_key].append(
                Call(
                    invocation.run_key,
                    invocation.job_type,
                    invocation.attempt,
                    self.sequencer.next(),
                    self.now(),
                    acted,
                )
            )

    def effects(self, run_key: str) -> int:
        return sum(1 for call in self.calls.get(run_key, []) if call.acted)

    def all_calls(self) -> list[Call]:
        return [call for calls in self.calls.values() for call in calls]


def chaos_registry(ledger: Ledger, rng: random.Random, flaky_rate: float = 0.35) -> HandlerRegistry:
    registry = HandlerRegistry()

    @registry.register(OK)
    def ok(payload: Any, invocation: Invocation) -> Any:
        ledger.record(invocation, acted=True)
        return {"acted": invocation.run_key}

    @registry.register(FLAKY)
    def flaky(payload: Any, invocation: Invocation) -> Any:
        if rng.random() < flaky_rate:
            ledger.record(invocation, acted=False)
            raise RetryableError("downstream 503 (injected)", error_class="HTTP503")
        ledger.record(invocation, acted=True)
        return {"acted": invocation.run_key}

    @registry.register(DOWN)
    def down(payload: Any, invocation: Invocation) -> Any:
        ledger.record(invocation, acted=False)
        raise RetryableError("downstream unavailable (injected)", error_class="HTTP503")

    @registry.register(BAD)
    def bad(payload: Any, invocation: Invocation) -> Any:
        ledger.record(invocation, acted=False)
        raise PermanentError("payload rejected (injected)", error_class=PERMANENT)

    return registry
