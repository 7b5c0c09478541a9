"""Python handlers for jobs that have no external target, looked up by job type."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .invocation import Invocation

Handler = Callable[[Any, Invocation], Any]  # (payload, invocation) -> JSON-able result


class HandlerRegistry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()

    def register(self, job_type: str) -> Callable[[Handler], Handler]:
        """Decorator form of `add`; returns the handler unchanged."""

        def decorate(handler: Handler) -> Handler:
            self.add(job_type, handler)
            return handler

        return decorate

    def add(self, job_type: str, handler: Handler) -> None:
        with self._lock:
            # Two handlers for one type is a wiring mistake that would otherwise pick one silently.
            if job_type in self._handlers:
                raise ValueError(f"a handler for job type '{job_type}' is already registered")
            self._handlers[job_type] = handler

    def get(self, job_type: str) -> Handler | None:
        return self._handlers.get(job_type)

    def types(self) -> list[str]:
        return sorted(self._handlers)


registry = HandlerRegistry()  # the process-wide default
