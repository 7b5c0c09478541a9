"""Runs one invocation against its target and reports failures only as ExecutionError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..domain.errors import ExecutionError, PermanentError, RetryableError
from ..domain.models import (
    EventBridgeTarget,
    HttpTarget,
    LambdaTarget,
    SqsTarget,
    StepFunctionsTarget,
    Target,
)
from .aws_targets import invoke_lambda, put_event, send_sqs, start_execution
from .http import HttpTargetClient
from .invocation import Invocation
from .registry import HandlerRegistry
from .registry import registry as default_registry

ClientFactory = Callable[[str], Any]  # service name -> boto3 client
# (service name, seconds the call may take) -> boto3 client whose read timeout covers them
EffectClientFactory = Callable[[str, float], Any]


class TargetRunner:
    """`clients` is the process's client factory. With the default (jobsched.aws.client) the
    target calls go through jobsched.aws.effect_client instead: read timeout from the run's
    budget, no SDK retry of anything that may have run. Any other factory (tests, the chaos
    harness) is used as it is, unless `effect_clients` is given."""

    def __init__(
        self,
        clients: ClientFactory | None = None,
        registry: HandlerRegistry | None = None,
        http: HttpTargetClient | None = None,
        *,
        effect_clients: EffectClientFactory | None = None,
    ) -> None:
        from .. import aws

        if clients is None:
            clients = aws.client
        if effect_clients is None:
            if clients is aws.client:
                effect_clients = aws.effect_client
            else:
                factory = clients
                effect_clients = lambda service, _timeout: factory(service)  # noqa: E731
        self._clients: ClientFactory = clients
        self._effect_clients: EffectClientFactory = effect_clients
        self._registry = registry if registry is not None else default_registry
        self._http = http if http is not None else HttpTargetClient()

    def run(self, target: Target | None, invocation: Invocation) -> Any:
        """The target's JSON-able result. Every failure surfaces as an ExecutionError subclass,
        so the caller's retry policy never has to interpret a foreign exception."""
        try:
            return self._dispatch(target, invocation)
        except ExecutionError:
            raise
        except Exception as exc:
            raise RetryableError(str(exc) or type(exc).__name__, error_class=type(exc).__name__) from exc

    def _dispatch(self, target: Target | None, invocation: Invocation) -> Any:
        if target is None:
            handler = self._registry.get(invocation.job_type)
            if handler is None:
                raise PermanentError(
                    f"no handler registered for job type '{invocation.job_type}'", error_class="NoHandler"
                )
            return handler(invocation.payload, invocation)
        if isinstance(target, HttpTarget):
            return self._http.send(target, invocation)
        timeout = invocation.timeout_seconds
        if isinstance(target, LambdaTarget):
            return invoke_lambda(self._effect_clients("lambda", timeout), target, invocation)
        if isinstance(target, SqsTarget):
            return send_sqs(self._effect_clients("sqs", timeout), target, invocation)
        if isinstance(target, EventBridgeTarget):
            return put_event(self._effect_clients("events", timeout), target, invocation)
        if isinstance(target, StepFunctionsTarget):
            return start_execution(self._effect_clients("stepfunctions", timeout), target, invocation)
        raise PermanentError(f"unsupported target {type(target).__name__}", error_class="UnsupportedTarget")
