"""Fault primitives: skewed clocks, throttling clients, and stores that crash or freeze a
worker at a chosen point. Each is armed by the harness for one delivery at a time."""

from __future__ import annotations

import contextlib
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

from botocore.exceptions import ClientError

from ..domain.instants import ManualClock
from ..domain.models import Job
from ..domain.runs import Run, RunState
from ..store.definitions import DefinitionStore
from ..store.runs import RunStore

# Writes a lease holder makes to end its attempt: the point "after the effect".
FINISHING = frozenset({RunState.SUCCEEDED, RunState.RETRY_WAIT, RunState.DEAD})


class SimulatedCrash(Exception):
    """The process died here: nothing after this point ran, the SQS message was not deleted."""


class SkewedClock:
    """A component's clock: the simulation's true time plus a fixed offset."""

    def __init__(self, base: ManualClock, offset_seconds: int) -> None:
        self._base = base
        self.offset = timedelta(seconds=offset_seconds)

    def now(self) -> datetime:
        return self._base.now() + self.offset

    def precise(self) -> datetime:
        return self.now()

    def sleep(self, seconds: float) -> None:
        """Waits are not simulated: one component must not move everyone's time."""


@contextlib.contextmanager
def sqs_on_clock(clock: ManualClock) -> Iterator[None]:
    """moto's SQS reads wall-clock time for DelaySeconds, visibility and retention; point it
    at the simulated clock so the queue behaves as it would over the simulated minutes."""
    import moto.sqs.models as sqs_models

    def seconds() -> float:
        return clock.now().timestamp()

    def millis() -> float:
        return clock.now().timestamp() * 1000

    with (
        mock.patch.object(sqs_models, "unix_time", seconds),
        mock.patch.object(sqs_models, "unix_time_millis", millis),
    ):
        yield


class Throttle:
    """Decides, per call, whether a client raises a throttling error instead of answering."""

    def __init__(self, rng: random.Random, rate: float, per_operation: dict[str, float] | None = None):
        self.rng = rng
        self.rate = rate
        self.per_operation = dict(per_operation or {})
        self.enabled = True
        self.injected: Counter[str] = Counter()

    def hit(self, operation: str) -> bool:
        if not self.enabled:
            return False
        rate = self.per_operation.get(operation, self.rate)
        if rate > 0 and self.rng.random() < rate:
            self.injected[operation] += 1
            return True
        return False


class FlakyClient:
    """Wraps a boto3 client; a throttled call raises the ClientError AWS would return once the
    SDK's own retries are used up, without reaching moto."""

    def __init__(self, inner: Any, throttle: Throttle, code: str) -> None:
        self._inner = inner
        self._throttle = throttle
        self._code = code

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith(("get_paginator", "can_paginate", "meta")):
            return attr
        throttle, code = self._throttle, self._code

        def call(*args: Any, **kwargs: Any) -> Any:
            if throttle.hit(name):
                operation = "".join(part.title() for part in name.split("_"))
                raise ClientError({"Error": {"Code": code, "Message": "Rate exceeded (injected)"}}, operation)
            return attr(*args, **kwargs)

        return call


class Freeze:
    """A worker frozen inside a write (GC pause, lost CPU): it blocks until thawed."""

    def __init__(self, run_key: str) -> None:
        self.run_key = run_key
        self.reached = threading.Event()
        self.thaw = threading.Event()
        self.fence: int | None = None


class ChaosRunStore(RunStore):
    """A worker's view of the Runs table that can crash or freeze it when it ends an attempt."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crash_finishing: str | None = None  # run key: die before ending the attempt
        self.freeze: Freeze | None = None

    def _put(self, new: Run, read: Run, *, holder: bool) -> Run:
        finishing = holder and new.state in FINISHING
        if finishing and self.crash_finishing == new.run_key:
            self.crash_finishing = None
            raise SimulatedCrash(f"worker died after the effect of {new.run_key}")
        freeze = self.freeze
        if finishing and freeze is not None and freeze.run_key == new.run_key:
            self.freeze = None
            freeze.fence = read.fence
            freeze.reached.set()
            freeze.thaw.wait()
        return super()._put(new, read, holder=holder)


class ChaosDefinitionStore(DefinitionStore):
    """A worker's view of the Definitions table that can crash it at the pre-effect job check."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crash_reading: str | None = None  # job id: die when the worker reads it
        self.before_save: Callable[[Job], None] | None = None

    def get(self, job_id: str) -> Job | None:
        if self.crash_reading == job_id:
            self.crash_reading = None
            raise SimulatedCrash(f"worker died before the effect (job {job_id})")
        return super().get(job_id)

    def save(self, job: Job, **options: Any) -> Job:
        hook = self.before_save
        if hook is not None:
            hook(job)
        return super().save(job, **options)
