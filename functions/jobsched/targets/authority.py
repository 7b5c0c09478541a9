"""May this tenant make this target's call, and read the secrets its headers reference? The
one check the API makes wherever a target is written (a job's own, each of its notifications',
a redrive's fix) and the worker makes again before the effect or the secret's read (a grant
revoked since the write).

- An HTTP target's header that references a secret (`valueFrom`) reads it with the
  scheduler's own role, so the secret's ARN must be granted to the tenant (`tenantTargets`,
  the same grants as AWS targets), and is never one of the scheduler's own (`grants.own`).
- A target with `roleArn` acts with that role's credentials: the role's trust policy decides
  which tenant may use it (ExternalId), the role's own policy what it may reach. The operator
  decides only which roles the scheduler may assume at all (`assumableRoles`).
- A target without one acts with the scheduler's own role, so each resource it names must be
  granted to the tenant (`tenantTargets`), and an EventBridge event must carry a `Source` the
  tenant may use (its own `jobsched.<digest>` or an operator-granted one). Whatever the grants
  say, no such target names the scheduler's own resources (domain.grants.OwnNames: its bus,
  queues, functions, topics) or carries its own events' `Source` (`jobsched/…`).

Bare names (a function name, an event bus name) resolve in the deployment's own partition,
region and account (the grants' `home`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..domain.errors import PermanentError
from ..domain.events import SOURCE_PREFIX
from ..domain.grants import Grants, Home, TargetNotGranted, own_event_source
from ..domain.models import (
    EventBridgeTarget,
    HttpTarget,
    LambdaTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
)

AwsTarget = LambdaTarget | SqsTarget | EventBridgeTarget | StepFunctionsTarget | SnsTarget
AWS_TARGETS = (LambdaTarget, SqsTarget, EventBridgeTarget, StepFunctionsTarget, SnsTarget)

_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}", re.ASCII)


@dataclass(frozen=True)
class Refusal:
    field: str  # as the API spells it: target.functionArn
    rule: str

    def to_error(self) -> TargetNotGranted:
        return TargetNotGranted(self.field, self.rule)

    def to_failure(self) -> PermanentError:
        return PermanentError(f"{self.field}: {self.rule}", error_class="TargetNotGranted")


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def _needs_home(field: str, home: Home | None, what: str) -> Home | Refusal:
    if home is None:
        return Refusal(field, f"names {what} without its account; give the full ARN")
    return home


def lambda_arns(target: LambdaTarget, home: Home | None) -> list[str] | Refusal:
    """The function ARN(s) Invoke acts on, each with the qualifier it is called with."""
    name = target.function_arn
    if name.startswith("arn:"):
        parts = name.split(":")
        base, qualifier = ":".join(parts[:7]), parts[7] if len(parts) > 7 else None
    else:
        parts = name.split(":")
        found = _needs_home("target.functionArn", home, "a function")
        if isinstance(found, Refusal):
            return found
        if len(parts) >= 3 and parts[1] == "function":  # 123456789012:function:name[:qualifier]
            account, fn, qualifier = parts[0], parts[2], parts[3] if len(parts) > 3 else None
        else:
            account, fn, qualifier = found.account, parts[0], parts[1] if len(parts) > 1 else None
        base = f"arn:{found.partition}:lambda:{found.region}:{account}:function:{fn}"
    qualifiers = {q for q in (qualifier, target.qualifier) if q}
    return [f"{base}:{q}" for q in sorted(qualifiers)] or [base]


def queue_arn(url: str) -> str | Refusal:
    """https://sqs.<region>.amazonaws.com/<account>/<name> (and the legacy
    <region>.queue.amazonaws.com and queue.amazonaws.com hosts) -> the queue's ARN."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    path = parts.path.strip("/").split("/")
    labels = host.split(".")
    region = next((label for label in labels if _REGION.fullmatch(label)), None)
    if region is None and host == "queue.amazonaws.com":
        region = "us-east-1"
    if region is None or len(path) != 2:
        return Refusal(
            "target.queueUrl",
            "names no region and account: https://sqs.<region>.amazonaws.com/<account>/<name>",
        )
    account, name = path
    return f"arn:{partition_of(region)}:sqs:{region}:{account}:{name}"


def bus_arn(name: str, home: Home | None) -> str | Refusal:
    if name.startswith("arn:"):
        return name
    found = _needs_home("target.eventBusName", home, "an event bus")
    if isinstance(found, Refusal):
        return found
    return f"arn:{found.partition}:events:{found.region}:{found.account}:event-bus/{name}"


def event_source(target: EventBridgeTarget, tenant: str) -> str:
    """The `Source` the event carries: the target's, or the tenant's own."""
    return target.source if target.source is not None else own_event_source(tenant)


def refusal(grants: Grants, tenant: str, target: AwsTarget) -> Refusal | None:
    """Why `tenant` may not make `target`'s call, or None when it may."""
    if target.role_arn is not None:
        if not grants.may_assume(target.role_arn):
            return Refusal(
                "target.roleArn",
                "is not a role this deployment may assume (the operator's assumableRoles)",
            )
        return None
    resources: list[tuple[str, str]] = []
    if isinstance(target, LambdaTarget):
        arns = lambda_arns(target, grants.home)
        if isinstance(arns, Refusal):
            return arns
        resources = [("target.functionArn", arn) for arn in arns]
    elif isinstance(target, SqsTarget):
        arn = queue_arn(target.queue_url)
        if isinstance(arn, Refusal):
            return arn
        resources = [("target.queueUrl", arn)]
    elif isinstance(target, EventBridgeTarget):
        arn = bus_arn(target.event_bus_name, grants.home)
        if isinstance(arn, Refusal):
            return arn
        resources = [("target.eventBusName", arn)]
    elif isinstance(target, SnsTarget):
        resources = [("target.topicArn", target.topic_arn)]
    else:
        resources = [("target.stateMachineArn", target.state_machine_arn)]
    for field, arn in resources:
        own = grants.own.refusal(arn, grants.home)  # whatever the grants say
        if own is not None:
            return Refusal(field, own)
        if not grants.allows(tenant, arn):
            return Refusal(
                field,
                f"{arn} is not granted to this tenant: name a roleArn of your own, or ask the "
                "operator to grant it (tenantTargets)",
            )
    if isinstance(target, EventBridgeTarget):
        source = event_source(target, tenant)
        if source.startswith(SOURCE_PREFIX):  # whatever the grants say
            return Refusal(
                "target.source",
                f"{source[:256]!r} starts with {SOURCE_PREFIX!r}, the source of the scheduler's own "
                f"events, which no grant reaches: use {own_event_source(tenant)!r} (or a name below "
                f"it, {own_event_source(tenant)}.<name>)",
            )
        if not grants.allows_source(tenant, source):
            return Refusal(
                "target.source",
                f"{source[:256]!r} is not a source this tenant may use: use "
                f"{own_event_source(tenant)!r} (or a name below it, {own_event_source(tenant)}.<name>), "
                "or ask the operator to grant it (tenantEventSources)",
            )
    return None


def header_field(name: str) -> str:
    """How the API names a header's reference in errors, as it names the header's other rules."""
    return f"target.http.headers.{name}.valueFrom"


def secret_refusal(grants: Grants, tenant: str, arn: str, field: str) -> Refusal | None:
    """Why `tenant` may not read the secret or parameter `arn` (which `field` names), or None
    when it may: `grants.allows(tenant, arn)`, nothing granted by default. The scheduler's own
    parameters and secrets (`grants.own`: the grants parameter beside them) and SSM's own are
    refused whatever the grants say, so a broad grant (`parameter/*`) never reaches them."""
    own = grants.own.refusal(arn)
    if own is not None:
        return Refusal(field, own)
    if not grants.allows(tenant, arn):
        return Refusal(field, "this secret is not granted to the tenant (tenantTargets)")
    return None


def references_refusal(grants: Grants, tenant: str, target: HttpTarget) -> Refusal | None:
    """The first of the secrets `target`'s headers reference that `tenant` may not read."""
    for name, ref in target.secret_headers.items():
        found = secret_refusal(grants, tenant, ref.value_from, header_field(name))
        if found is not None:
            return found
    return None


class TargetAuthority:
    """The check, with the grants as they are now (`grants` is called on every check, so a
    source that refreshes, such as the SSM parameter, takes effect without a restart)."""

    def __init__(self, grants: Callable[[], Grants]) -> None:
        self._grants = grants

    def refusal(self, tenant: str, target: object) -> Refusal | None:
        """Why `tenant` may not use `target`: an AWS target's call, or a secret an HTTP
        target's headers reference. None when it may (a handler's job: nothing to check)."""
        if isinstance(target, HttpTarget):
            return references_refusal(self._grants(), tenant, target)
        if not isinstance(target, AWS_TARGETS):
            return None
        return refusal(self._grants(), tenant, target)

    def check_write(self, tenant: str, target: object) -> None:
        """The check of every write of a target by a tenant: a job's (create, batch, PATCH),
        each of its notifications', a redrive's fix (single and bulk). Raises
        TargetNotGranted (403) naming the field as the target's own (`target.…`)."""
        found = self.refusal(tenant, target)
        if found is not None:
            raise found.to_error()
