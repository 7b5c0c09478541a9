"""jobsched: a durable, multi-tenant job scheduler for AWS.

For your own Python handlers: `handler` registers one (jobsched.targets.registry states the
contract), `RetryableError` and `PermanentError` say how a failure is retried."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .domain.errors import PermanentError, RetryableError

if TYPE_CHECKING:
    from .targets.invocation import Invocation

__version__ = "0.1.0"
__all__ = ["PermanentError", "RetryableError", "handler"]


def handler(job_type: str) -> Callable[[Callable[[Any, Invocation], Any]], Callable[[Any, Invocation], Any]]:
    """`@jobsched.handler("invoice.send")`: makes the function the handler of jobs of that type
    in this process (jobsched.targets.registry.handler; HandlerRegistry states what a handler
    receives, returns and raises). Imported on first use, so `import jobsched` stays light."""
    from .targets.registry import handler as register

    return register(job_type)
