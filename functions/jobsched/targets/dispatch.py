"""Runs one invocation against its target and reports failures only as ExecutionError.

Before an AWS target's call the runner checks, with the grants as they are now, that the
run's tenant may make it (jobsched.targets.authority): a job written before its grant was
revoked fails permanently (`TargetNotGranted`) with no call made. A target with a `roleArn`
is called with that role's credentials, assumed for the tenant (jobsched.targets.roles)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..domain.errors import ExecutionError, PermanentError, RetryableError
from ..domain.grants import Grants
from ..domain.models import (
    EventBridgeTarget,
    HttpTarget,
    LambdaTarget,
    SqsTarget,
    StepFunctionsTarget,
    Target,
)
from .authority import TargetAuthority
from .aws_targets import invoke_lambda, put_event, send_sqs, start_execution
from .http import HttpTargetClient
from .invocation import Invocation
from .registry import HandlerRegistry
from .registry import registry as default_registry
from .roles import AssumedRoles, Credentials

ClientFactory = Callable[[str], Any]  # service name -> boto3 client
# (service name, seconds the call may take) -> boto3 client whose read timeout covers them
EffectClientFactory = Callable[[str, float], Any]
# The same, calling with a tenant's assumed-role credentials.
RoleClientFactory = Callable[[str, float, Credentials], Any]


class TargetRunner:
    """`clients` is the process's client factory. With the default (jobsched.aws.client) the
    target calls go through jobsched.aws.effect_client instead: read timeout from the run's
    budget, no SDK retry of anything that may have run. Any other factory (tests, the chaos
    harness) is used as it is, unless `effect_clients` is given.

    `authority` decides which AWS targets the run's tenant may reach without a role of its
    own; by default nothing is granted. `roles` assumes a target's `roleArn` (by default with
    `clients("sts")`); `role_clients` makes a client with those credentials."""

    def __init__(
        self,
        clients: ClientFactory | None = None,
        registry: HandlerRegistry | None = None,
        http: HttpTargetClient | None = None,
        *,
        effect_clients: EffectClientFactory | None = None,
        authority: TargetAuthority | None = None,
        roles: AssumedRoles | None = None,
        role_clients: RoleClientFactory | None = None,
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
        if role_clients is None:
            role_clients = aws.role_effect_client if clients is aws.client else _plain_role_client
        self._clients: ClientFactory = clients
        self._effect_clients: EffectClientFactory = effect_clients
        self._role_clients: RoleClientFactory = role_clients
        self._registry = registry if registry is not None else default_registry
        self._http = http if http is not None else HttpTargetClient()
        nothing = Grants()
        self._authority = authority if authority is not None else TargetAuthority(lambda: nothing)
        own = clients
        self._roles = roles if roles is not None else AssumedRoles(lambda: own("sts"))

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
        if isinstance(target, LambdaTarget):
            return invoke_lambda(self._client("lambda", target, invocation), target, invocation)
        if isinstance(target, SqsTarget):
            return send_sqs(self._client("sqs", target, invocation), target, invocation)
        if isinstance(target, EventBridgeTarget):
            return put_event(self._client("events", target, invocation), target, invocation)
        if isinstance(target, StepFunctionsTarget):
            return start_execution(self._client("stepfunctions", target, invocation), target, invocation)
        raise PermanentError(f"unsupported target {type(target).__name__}", error_class="UnsupportedTarget")

    def _client(self, service: str, target: Target, invocation: Invocation) -> Any:
        return self.client_for(service, target, invocation.tenant, invocation.timeout_seconds)

    def client_for(self, service: str, target: Any, tenant: str, timeout: float) -> Any:
        """The client for an AWS target's call (a run's, or a notification's), once `tenant` is
        known to be allowed to make it: the scheduler's own (a granted target) or one with the
        tenant's assumed role. Raises PermanentError (`TargetNotGranted`) when it is not."""
        refused = self._authority.refusal(tenant, target)
        if refused is not None:
            raise refused.to_failure()
        role_arn = getattr(target, "role_arn", None)
        if role_arn is None:
            return self._effect_clients(service, timeout)
        credentials = self._roles.credentials(role_arn, tenant)
        return self._role_clients(service, timeout, credentials)


def _plain_role_client(service: str, _timeout: float, credentials: Credentials) -> Any:
    """A default-config client with `credentials` (tests and harnesses with their own factory)."""
    import boto3

    return boto3.client(  # type: ignore[call-overload]
        service,
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key,
        aws_session_token=credentials.session_token,
    )
