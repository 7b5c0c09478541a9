"""What the operator granted each tenant: the AWS resources it may reach without a role of its
own, the EventBridge sources it may use, and the roles the scheduler may assume for tenants.

Pure matching, no I/O. The operator writes `tenantTargets` (stack context) or `tenant_targets`
(local mode's JSON config): tenant id -> ARN patterns, where `*` stands for any run of
characters (`:` and `/` included, as in IAM) and `${AWS::Partition}`, `${AWS::Region}` and
`${AWS::AccountId}` stand for the deployment's own (`home`). Nothing is granted by default.

One grant covers both what a job may call and what it may read: AWS targets (lambda, sqs,
events, states) and the secrets its HTTP headers reference (secretsmanager, ssm).

Contract for callers (targets, secrets): `Grants.allows(tenant, arn)` is True only when one of
the patterns granted to exactly that tenant matches the whole ARN; a tenant absent from the
document is granted nothing; matching is case-sensitive, like ARNs."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from .errors import JobschedError
from .models import Model

# The services whose ARNs a grant may name: the AWS targets a job may call, and the secret
# stores its HTTP headers may reference. The stack derives the worker's IAM statements for
# each (infra.permissions); extend both together for another kind of granted resource.
TARGET_SERVICES = ("lambda", "sqs", "events", "states", "sns")
SECRET_SERVICES = ("secretsmanager", "ssm")
GRANTABLE_SERVICES = (*TARGET_SERVICES, *SECRET_SERVICES)
MAX_TENANT_CHARS = 256
MAX_PATTERN_CHARS = 2048
DIGEST_CHARS = 32  # 128 bits of SHA-256: no two tenants share one
OWN_SOURCE_PREFIX = "jobsched."

_PARTITION = r"(?:\$\{AWS::Partition\}|aws(?:-[a-z]+)*|\*)"
_REGION = r"(?:\$\{AWS::Region\}|[a-z0-9*-]*)"
_ACCOUNT = r"(?:\$\{AWS::AccountId\}|\d{12}|\*|)"
_RESOURCE = r"[\x21-\x7e]+"
TARGET_PATTERN = re.compile(
    rf"arn:{_PARTITION}:(?P<service>{'|'.join(GRANTABLE_SERVICES)}):{_REGION}:{_ACCOUNT}:{_RESOURCE}",
    re.ASCII,
)
ROLE_PATTERN = re.compile(
    rf"arn:{_PARTITION}:iam::(?:\$\{{AWS::AccountId\}}|\d{{12}}|\*):role/{_RESOURCE}", re.ASCII
)
SOURCE_PATTERN = re.compile(r"[\x21-\x7e]{1,256}", re.ASCII)
# One of the scheduler's own functions or topics, as the deploy writes it into the grants
# (`ownResources`): a resolved, unqualified ARN, no wildcard.
OWN_RESOURCE_PATTERN = re.compile(
    r"arn:aws(?:-[a-z]+)*:(?:lambda:[a-z0-9-]+:\d{12}:function:[A-Za-z0-9_-]{1,64}"
    r"|sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256})",
    re.ASCII,
)


def tenant_digest(tenant: str) -> str:
    """A stable, fixed-length name for a tenant where its id does not fit (an AWS field's
    length or character set): the first 32 hex digits of SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def own_event_source(tenant: str) -> str:
    """The EventBridge `Source` every tenant may use without a grant: `jobsched.<digest>`, or
    anything below it (`jobsched.<digest>.billing`). Fixed length, so no tenant's source is a
    prefix of another's."""
    return OWN_SOURCE_PREFIX + tenant_digest(tenant)


def service_of(pattern: str) -> str | None:
    """lambda | sqs | events | states | secretsmanager | ssm for a grantable ARN pattern, else None."""
    match = TARGET_PATTERN.fullmatch(pattern)
    return match.group("service") if match else None


def _check_tenant(tenant: str) -> str:
    if not 1 <= len(tenant) <= MAX_TENANT_CHARS or not tenant.isprintable():
        raise ValueError(f"tenant id {tenant[:64]!r} must be 1-{MAX_TENANT_CHARS} printable characters")
    return tenant


def _check_patterns(patterns: Iterable[str], shape: re.Pattern[str], what: str) -> tuple[str, ...]:
    checked = []
    for pattern in patterns:
        if len(pattern) > MAX_PATTERN_CHARS or not shape.fullmatch(pattern):
            raise ValueError(f"{pattern[:200]!r} is not {what}")
        checked.append(pattern)
    return tuple(dict.fromkeys(checked))


TARGET_RULE = (
    "a lambda, sqs, events, states, secretsmanager or ssm ARN pattern "
    "(arn:<partition>:<service>:<region>:<account>:"
    "<resource>, * as a wildcard, ${AWS::Partition}, ${AWS::Region}, ${AWS::AccountId} allowed)"
)
ROLE_RULE = "an IAM role ARN pattern (arn:<partition>:iam::<account>:role/<name>, * as a wildcard)"
SOURCE_RULE = "an EventBridge source pattern (1-256 printable ASCII characters, * as a wildcard)"
OWN_RESOURCE_RULE = (
    "a function's or topic's own ARN (arn:<partition>:lambda:<region>:<account>:function:<name> "
    "or arn:<partition>:sns:<region>:<account>:<name>, no wildcard)"
)


class Home(Model):
    """Where the deployment runs: what the placeholders mean and where bare names resolve."""

    partition: str = Field(pattern=r"^aws(?:-[a-z]+)*$")
    region: str = Field(pattern=r"^[a-z]{2}(?:-[a-z]+)+-\d{1,2}$")
    account: str = Field(pattern=r"^\d{12}$")


class TenantGrant(Model):
    tenant: str
    targets: tuple[str, ...] = ()
    event_sources: tuple[str, ...] = ()

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return _check_tenant(value)

    @field_validator("targets")
    @classmethod
    def _targets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_patterns(value, TARGET_PATTERN, TARGET_RULE)

    @field_validator("event_sources")
    @classmethod
    def _sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_patterns(value, SOURCE_PATTERN, SOURCE_RULE)


class GrantsDocument(Model):
    """The grants as the functions read them (an SSM parameter in the stack, the settings in
    local mode). A tenant listed twice gets the union of its entries. `own_resources`: the
    ARNs of the scheduler's own functions and topics, which the stack writes beside the
    grants (CloudFormation names them; no name of the scheduler's is sure to start theirs) and
    no grant reaches (OwnNames)."""

    home: Home | None = None
    tenants: tuple[TenantGrant, ...] = ()
    assumable_roles: tuple[str, ...] = ()
    own_resources: tuple[str, ...] = ()

    @field_validator("assumable_roles")
    @classmethod
    def _roles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_patterns(value, ROLE_PATTERN, ROLE_RULE)

    @field_validator("own_resources")
    @classmethod
    def _own(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_patterns(value, OWN_RESOURCE_PATTERN, OWN_RESOURCE_RULE)

    @model_validator(mode="after")
    def _placeholders_need_a_home(self) -> GrantsDocument:
        if self.home is None:
            for pattern in (*self.assumable_roles, *(p for t in self.tenants for p in t.targets)):
                if "${" in pattern:
                    raise ValueError(f"{pattern[:200]!r} uses a placeholder, but the grants name no home")
        return self

    @classmethod
    def from_maps(
        cls,
        tenant_targets: Mapping[str, Iterable[str]] | None = None,
        tenant_event_sources: Mapping[str, Iterable[str]] | None = None,
        assumable_roles: Iterable[str] = (),
        home: Home | Mapping[str, Any] | None = None,
    ) -> GrantsDocument:
        """From the operator's maps (tenant -> patterns). Raises pydantic's ValidationError
        (a ValueError) naming the pattern or tenant that breaks a rule."""
        targets = dict(tenant_targets or {})
        sources = dict(tenant_event_sources or {})
        tenants = [
            {"tenant": t, "targets": tuple(targets.get(t, ())), "event_sources": tuple(sources.get(t, ()))}
            for t in dict.fromkeys([*targets, *sources])
        ]
        return cls.model_validate(
            {"home": home, "tenants": tenants, "assumable_roles": tuple(assumable_roles)}
        )


def _matcher(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if part == "*" else re.escape(part) for part in re.split(r"(\*)", pattern)), re.DOTALL
    )


# SSM's own names (AWS lets no one create a parameter under these, in any case):
# `/aws/reference/secretsmanager/<name>` reads a Secrets Manager secret through SSM, with the
# reader's identity, past whatever grants that secret.
_AWS_PARAMETER = re.compile(r"(?:aws|ssm)", re.IGNORECASE)


# (account, case-folded name) of a resource of the scheduler's; account None: a bare name,
# in the deployment's own account.
_AccountName = tuple[str | None, str]


def _bus_account_name(bus: str) -> _AccountName:
    parts = bus.split(":", 5)
    if len(parts) == 6 and parts[0] == "arn" and parts[5].startswith("event-bus/"):
        return parts[4], parts[5].removeprefix("event-bus/").casefold()
    return None, bus.casefold()


def _queue_account_name(url: str) -> _AccountName:
    path = urlsplit(url).path.strip("/").split("/")  # /<account>/<name>
    return (path[0], path[1].casefold()) if len(path) == 2 else (None, path[-1].casefold())


def _function_or_topic(arn: str) -> tuple[str, str, str] | None:
    """(service, account, case-folded name) of a function's ARN (any qualifier dropped) or a
    topic's, else None."""
    parts = arn.split(":")
    if len(parts) >= 7 and parts[0] == "arn" and parts[2] == "lambda" and parts[5] == "function":
        return "lambda", parts[4], parts[6].casefold()
    if len(parts) == 6 and parts[0] == "arn" and parts[2] == "sns":
        return "sns", parts[4], parts[5].casefold()
    return None


@dataclass(frozen=True)
class OwnNames:
    """The scheduler's own parameters, secrets, functions, queues, topics and event buses,
    which no grant reaches: the stack keeps its grants in `/<stack>/target-grants` (which the
    worker may read), anything else of its own under `/<stack>/` (SSM) or `<stack>/` (Secrets
    Manager), and what CloudFormation names in the app's own stack is `<stack>-…`. `stack`
    None: no such names (local mode, tests). Also SSM's own `/aws/…` and `/ssm/…`, whatever
    `stack`.

    `resources`: the ARNs of its functions and topics (the grants document's
    `ownResources`, Grants adds them), whatever they are called: a scheduler inside another
    stack is named `<stack>-<id>`, but CloudFormation names its functions from their logical
    ids (`<stack>-<id>Functions…`), and truncates a long stack's name. A function is its own
    whatever the qualifier it is called with.

    `buses` (names, or ARNs) and `queues` (URLs): what the functions publish to and queue on,
    as their settings name them, whatever they are called: the run-events bus (CDK names it,
    not `<stack>-…`), the run queues and their DLQs, the notifications and second-tick
    queues, and the failure queues (Settings.own_queue_urls). A bare bus name is the one in
    the deployment's own account (`home`'s, when known); an ARN or URL names its account.
    Names are compared case-blind: no spelling of one reaches it."""

    stack: str | None = None
    buses: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()

    @classmethod
    def beside(
        cls, grants_parameter: str | None, *, buses: Iterable[str] = (), queues: Iterable[str] = ()
    ) -> OwnNames:
        """The names of the stack whose grants parameter is `grants_parameter` (`/<stack>/…`),
        and these buses and queues."""
        parts = [part for part in (grants_parameter or "").split("/") if part]
        return cls(parts[0] if parts else None, tuple(buses), tuple(queues))

    def including(self, resources: Iterable[str]) -> OwnNames:
        """These names, and the functions and topics whose ARNs are `resources` too."""
        more = tuple(resources)
        return replace(self, resources=(*self.resources, *more)) if more else self

    @cached_property
    def _resources(self) -> frozenset[tuple[str, str, str]]:
        return frozenset(found for arn in self.resources if (found := _function_or_topic(arn)))

    @cached_property
    def _buses(self) -> tuple[_AccountName, ...]:
        return tuple(_bus_account_name(bus) for bus in self.buses)

    @cached_property
    def _queues(self) -> tuple[_AccountName, ...]:
        return tuple(_queue_account_name(url) for url in self.queues)

    @staticmethod
    def _among(own: tuple[_AccountName, ...], account: str, name: str, home: Home | None) -> bool:
        here = home is None or account == home.account
        return any(
            name.casefold() == own_name and (account == own_account if own_account else here)
            for own_account, own_name in own
        )

    def refusal(self, arn: str, home: Home | None = None) -> str | None:
        """Why `arn` (a secret or parameter a header references, or a function, queue, topic
        or event bus a target calls) is the scheduler's own or AWS's, or None. A parameter
        path with an empty, `.` or `..` segment is refused too: however SSM reads it, no
        spelling of a name escapes this comparison or the grants'. Functions, queues, topics
        and buses are the stack's only in its own account (`home`'s, when known)."""
        parts = arn.split(":", 6)
        if len(parts) < 6:
            return None
        service, resource = parts[2], ":".join(parts[5:])
        if service == "ssm" and resource.startswith("parameter/"):
            segments = resource.removeprefix("parameter/").split("/")
            if any(segment in ("", ".", "..") for segment in segments):
                return "names a parameter path with an empty, '.' or '..' segment; give its plain name"
            if _AWS_PARAMETER.fullmatch(segments[0]):
                return (
                    "names one of SSM's own parameters (/aws/…, /ssm/…); reference a Secrets Manager "
                    "secret by its own ARN"
                )
            if self.stack is not None and segments[0] == self.stack:
                return f"names one of the scheduler's own parameters (/{self.stack}/…): no grant reaches them"
        secret = resource.removeprefix("secret:") if resource.startswith("secret:") else ""
        if service == "secretsmanager" and self.stack is not None and secret.startswith(self.stack + "/"):
            return f"names one of the scheduler's own secrets ({self.stack}/…): no grant reaches them"
        # CloudFormation names the functions, queues and topics (the alarms') the stack makes
        # `<stack>-<id>-<suffix>`.
        name = resource.removeprefix("function:") if service == "lambda" else resource
        ours = home is None or parts[4] == home.account
        if (
            service in ("lambda", "sqs", "sns")
            and self.stack is not None
            and ours
            and name.startswith(self.stack + "-")
        ):
            kind = {"lambda": "functions", "sqs": "queues", "sns": "topics"}[service]
            return f"names one of the scheduler's own {kind} ({self.stack}-…): no grant reaches them"
        account = parts[4]
        if _function_or_topic(arn) in self._resources:
            kind = {"lambda": "functions", "sns": "topics"}[service]
            return f"names one of the scheduler's own {kind}: no grant reaches them"
        if (
            service == "events"
            and resource.startswith("event-bus/")
            and self._among(self._buses, account, resource.removeprefix("event-bus/"), home)
        ):
            return (
                "names the scheduler's own event bus, where its run and job events are published: "
                "no grant reaches it"
            )
        if service == "sqs" and self._among(self._queues, account, resource, home):
            return "names one of the scheduler's own queues: no grant reaches them"
        return None


class Grants:
    """The operator's grants, compiled for matching. Immutable; safe to share between threads.
    `own`: the scheduler's own names, refused to every tenant whatever its grants say, with
    the document's `own_resources` added."""

    def __init__(self, document: GrantsDocument | None = None, own: OwnNames | None = None) -> None:
        self.document = document or GrantsDocument()
        self.own = (own or OwnNames()).including(self.document.own_resources)
        home = self.document.home
        self.home = home

        def expand(pattern: str) -> str:
            if home is not None:
                pattern = (
                    pattern.replace("${AWS::Partition}", home.partition)
                    .replace("${AWS::Region}", home.region)
                    .replace("${AWS::AccountId}", home.account)
                )
            return pattern

        targets: dict[str, list[re.Pattern[str]]] = {}
        sources: dict[str, list[re.Pattern[str]]] = {}
        for grant in self.document.tenants:
            targets.setdefault(grant.tenant, []).extend(_matcher(expand(p)) for p in grant.targets)
            sources.setdefault(grant.tenant, []).extend(_matcher(p) for p in grant.event_sources)
        self._targets = targets
        self._sources = sources
        self._roles = [_matcher(expand(p)) for p in self.document.assumable_roles]

    def allows(self, tenant: str, arn: str) -> bool:
        """True when a pattern granted to `tenant` matches all of `arn`."""
        return any(m.fullmatch(arn) for m in self._targets.get(tenant, ()))

    def allows_source(self, tenant: str, source: str) -> bool:
        """True for the tenant's own source (`own_event_source`) and anything below it, and for
        sources the operator granted to the tenant."""
        own = own_event_source(tenant)
        if source == own or source.startswith(own + "."):
            return True
        return any(m.fullmatch(source) for m in self._sources.get(tenant, ()))

    def may_assume(self, role_arn: str) -> bool:
        """True when the operator lets the scheduler assume `role_arn` (for any tenant: the
        role's trust policy, conditioned on the tenant's external id, decides whose)."""
        return any(m.fullmatch(role_arn) for m in self._roles)


class TargetNotGranted(JobschedError):
    """A job names something the operator did not grant its tenant: an AWS resource, source
    or role, or a secret its HTTP headers reference. Names the field; says nothing about
    whether the thing exists."""

    status = 403
    code = "target_not_granted"

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}", errors=[{"field": field, "rule": rule}])
