"""Python job handlers for local mode's demo (registered on import, like any handler module)."""

from __future__ import annotations

import threading
from typing import Any

from ..domain.errors import RetryableError
from ..targets import Invocation, registry

_lock = threading.Lock()
_calls: dict[str, int] = {}


@registry.register("demo.hello")
def hello(payload: Any, invocation: Invocation) -> dict[str, Any]:
    return {"greeting": f"hello from {invocation.run_key}", "payload": payload}


@registry.register("demo.flaky")
def flaky(payload: Any, invocation: Invocation) -> dict[str, Any]:
    """Fails its first `failures` calls per run (default: always in the first series), then works."""
    failures = int((payload or {}).get("failures", 3))
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
