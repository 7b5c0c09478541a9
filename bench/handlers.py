"""The benchmark's job type: records when its handler starts, keyed by run key.

Registered on import like any handler module (LocalConfig.handler_modules or
Settings.handler_modules name "bench.handlers")."""

from __future__ import annotations

import threading
import time
from typing import Any

from jobsched.targets import Invocation, registry

JOB_TYPE = "bench.mark"

_lock = threading.Lock()
# run key -> (handler start, epoch seconds; due instant, epoch seconds)
starts: dict[str, tuple[float, float]] = {}


@registry.register(JOB_TYPE)
def mark(payload: Any, invocation: Invocation) -> dict[str, Any]:
    now = time.time()
    with _lock:
        starts.setdefault(invocation.run_key, (now, invocation.scheduled_for.timestamp()))
    return {"ok": True}


def take() -> dict[str, tuple[float, float]]:
    """Everything recorded so far, and forget it."""
    with _lock:
        out = dict(starts)
        starts.clear()
    return out
