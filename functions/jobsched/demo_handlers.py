"""Python job handlers for the demo and the end-to-end suite (registered on import, like any
handler module). Local mode loads them by default; a deployed stack registers them only when
named in `handlerModules` (`-c handlerModules=jobsched.demo_handlers`), as `make e2e-aws` needs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from .domain.errors import RetryableError
from .domain.instants import format_instant
from .targets import Invocation, registry

_lock = threading.Lock()
_calls: dict[str, int] = {}


@registry.register("demo.hello")
def hello(payload: Any, invocation: Invocation) -> dict[str, Any]:
    return {"greeting": f"hello from {invocation.run_key}", "payload": payload}


@registry.register("demo.flaky")
def flaky(payload: Any, invocation: Invocation) -> dict[str, Any]:
    """With `failForSeconds`, fails every call until that long after the run's scheduled time,
    then works: the same answer in every execution environment (Lambda runs a retry wherever
    it likes). Otherwise fails its first `failures` calls per run in this process (default:
    always in the first series), then works."""
    options = payload if isinstance(payload, dict) else {}
    if "failForSeconds" in options:
        until = invocation.scheduled_for + timedelta(seconds=float(options["failForSeconds"]))
        if datetime.now(UTC) < until:
            raise RetryableError(
                f"flaky dependency unavailable until {format_instant(until)}", error_class="DemoFlaky"
            )
        return {"failedUntil": format_instant(until)}
    failures = int(options.get("failures", 3))
    with _lock:
        count = _calls.get(invocation.run_key, 0) + 1
        _calls[invocation.run_key] = count
    if count <= failures:
        raise RetryableError(f"flaky dependency unavailable (call {count})", error_class="DemoFlaky")
    return {"recovered_after": count - 1}


@registry.register("demo.webhook")
def webhook_marker(payload: Any, invocation: Invocation) -> None:
    """Never called: jobs of this type carry an HTTP target. Registered so the type routes to
    the queue workers rather than to external workers."""
