"""Python handlers for jobs that have no external target, looked up by job type, and the
import of the modules that register them (`import_handler_modules`)."""

from __future__ import annotations

import importlib
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .invocation import Invocation

Handler = Callable[[Any, Invocation], Any]  # (payload, invocation) -> JSON-able result


class HandlerRegistry:
    """Job type -> the Python function that runs that type's runs.

    The contract of a handler, `handler(payload, invocation)`:

    - **Receives** the job's `payload` (the JSON value it was created with: dict, list, str,
      number, bool or None) and an `Invocation`: `run_key` (`"<jobId>@<scheduledFor>"`, the
      same for every attempt of one run), `job_id`, `tenant`, `job_type`, `scheduled_for`
      (the run's instant, aware UTC), `attempt` (1-based), `fence` (the worker's claim; the
      worker, not the handler, presents it with the outcome), `timeout_seconds` (the budget
      for this call: the job's `timeoutSeconds` or less) and `deadline` (when that budget
      ends, aware UTC).
    - **Returns** a JSON-able value, stored as the run's `result` (succeeded). A result over
      4,096 bytes of JSON is stored as `{"truncated": true, "preview": ...}`, and a value JSON
      cannot hold is converted with `dropped` naming what changed; the run still succeeds.
    - **Raises** `RetryableError` (jobsched.domain.errors) for a transient failure: the run is
      retried under its policy (`maxAttempts`, backoff), then dead-letters. `PermanentError`:
      retrying cannot help; the run dead-letters at once. Any other exception counts as
      retryable, recorded with its class name as `errorClass`. Both take `error_class=` to
      name the failure on the run's transition and in metrics.
    - **Time**: a call still running at `deadline` is recorded as failed (retryable) while it
      goes on; a result it returns later is kept for the next attempt.
    - **Idempotency**: a run may be attempted more than once (a retry, a redrive, a worker
      lost mid-call). Use `invocation.run_key` as the idempotency key of every side effect
      (the downstream API's `Idempotency-Key`, a conditional write keyed by it) so a repeat
      does no harm.

    Handlers run on worker threads, several at once: keep shared state behind a lock."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()

    def register(self, job_type: str) -> Callable[[Handler], Handler]:
        """Decorator form of `add`: `@registry.register("invoice.send")` makes the function the
        handler of jobs of that type; returns the function unchanged."""

        def decorate(handler: Handler) -> Handler:
            self.add(job_type, handler)
            return handler

        return decorate

    def add(self, job_type: str, handler: Handler) -> None:
        """Makes `handler` run the jobs of `job_type`. Raises ValueError when the type already
        has a handler or `handler` is not callable."""
        if not callable(handler):
            raise ValueError(f"the handler for job type '{job_type}' is not callable: {handler!r}")
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


def handler(job_type: str) -> Callable[[Handler], Handler]:
    """`@handler("invoice.send")`: registers the function with the process-wide registry
    (HandlerRegistry states the contract). The module is loaded by naming it in
    `handler_modules` (local mode) or `handlerModules` (the stack)."""
    return registry.register(job_type)


class HandlerModuleError(Exception):
    """A handler module could not be imported; the message names it and the reason.
    `missing`: the module itself was not found (rather than its import failing)."""

    def __init__(self, module: str, reason: str, *, missing: bool = False) -> None:
        super().__init__(f"handler module '{module}' could not be imported: {reason}")
        self.module = module
        self.reason = reason
        self.missing = missing


def import_handler_modules(modules: Iterable[str], search_path: Sequence[str | Path] = ()) -> None:
    """Imports each of `modules` (which register their handlers on import), after putting the
    directories of `search_path` first on sys.path (once each). A module already imported is
    not imported again.

    Raises HandlerModuleError for the first module that cannot be imported: one that is not
    found (saying where it was looked for) or one whose import raised (the exception, and the
    file and line it came from)."""
    directories = [str(Path(d).resolve()) for d in search_path]
    for directory in reversed(directories):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
                where = ", ".join([*directories, "the installed packages"])
                raise HandlerModuleError(
                    module, f"no module named '{exc.name}' in {where}", missing=True
                ) from None
            raise HandlerModuleError(module, _raised(exc)) from None
        except Exception as exc:
            raise HandlerModuleError(module, _raised(exc)) from None


def _raised(exc: BaseException) -> str:
    """`exc` in one line, with the file and line of the innermost frame it came from."""
    frames = traceback.extract_tb(exc.__traceback__)
    origin = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    if isinstance(exc, SyntaxError) and exc.filename:
        origin = f" ({exc.filename}, line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}{origin}"
