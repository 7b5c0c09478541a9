"""Local mode's shutdown: every loop told to stop before any is waited for, moto stopped last,
and a step failing while stopping is no traceback."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from jobsched_local.glue import Loop
from jobsched_local.runtime import LocalRuntime

WAIT = 5.0  # a bound on waiting for threads, not a figure under test


class BlockingStep:
    """A step that blocks, once entered, until released (a poll still talking to moto)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.returned = threading.Event()

    def __call__(self) -> None:
        self.entered.set()
        self.released.wait(WAIT * 4)
        self.returned.set()


class FakeMoto:
    def __init__(self, steps: list[BlockingStep]) -> None:
        self.steps = steps
        self.steps_returned_at_stop: list[bool] | None = None

    def stop(self) -> None:
        self.steps_returned_at_stop = [step.returned.is_set() for step in self.steps]


def test_stop_tells_every_loop_before_waiting_for_any_and_stops_moto_after_them() -> None:
    steps = [BlockingStep() for _ in range(3)]
    loops = [Loop(f"loop-{n}", 0.01, step) for n, step in enumerate(steps)]
    runtime = LocalRuntime()
    runtime._loops = loops
    moto = FakeMoto(steps)
    runtime.moto = moto  # type: ignore[assignment]
    for loop in loops:
        loop.start()
    stopping = threading.Thread(target=runtime.stop, daemon=True)
    try:
        assert all(step.entered.wait(WAIT) for step in steps)
        stopping.start()
        deadline = time.monotonic() + WAIT
        while not all(loop.stop_requested for loop in loops) and time.monotonic() < deadline:
            time.sleep(0.01)
        # Every step is still running (none released): no join has completed, yet all are told.
        assert [loop.stop_requested for loop in loops] == [True, True, True]
        assert moto.steps_returned_at_stop is None
    finally:
        for step in steps:
            step.released.set()
    stopping.join(WAIT)
    assert not stopping.is_alive()
    assert moto.steps_returned_at_stop == [True, True, True]


def test_a_step_failing_after_stop_is_requested_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    entered, release = threading.Event(), threading.Event()

    def step() -> None:
        entered.set()
        release.wait(WAIT)
        raise ConnectionRefusedError("moto is gone")

    loop = Loop("outbox-stream", 0.01, step)
    caplog.set_level(logging.DEBUG, logger="jobsched_local")
    loop.start()
    assert entered.wait(WAIT)
    loop.request_stop()
    release.set()
    loop.join(WAIT)
    failures = [r for r in caplog.records if "outbox-stream" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in failures] == [
        (logging.DEBUG, "outbox-stream failed while stopping")
    ]


def test_an_invocation_failing_while_stopping_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    from jobsched_local.glue import Invoker

    def handler(event: object, context: object) -> None:
        raise ConnectionRefusedError("moto is gone")

    stopping = threading.Event()
    invoke = Invoker("outbox", handler, stopping=stopping)
    caplog.set_level(logging.DEBUG, logger="jobsched_local")
    with pytest.raises(ConnectionRefusedError):
        invoke({})
    stopping.set()
    with pytest.raises(ConnectionRefusedError):
        invoke({})
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "outbox invocation failed"),
        (logging.DEBUG, "outbox invocation failed while stopping"),
    ]
