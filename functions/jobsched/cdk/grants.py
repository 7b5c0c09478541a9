"""The operator's target grants, as one SSM parameter the api and worker functions read.

Not an environment variable: Lambda holds 4 KB of variables per function, all of them
together, and a grants map outgrows that with a few dozen tenants. Not a file in the code
asset: the deploy resolves the stack's partition, region and account into the parameter (the
home bare target names resolve in), and the example machine's grant names its caller's role,
both of which exist only as CloudFormation tokens at synth. The functions read it with
Powertools Parameters, cached for a minute (jobsched.targets.grant_source).

The document also lists the scheduler's own functions and topics by ARN (`ownResources`),
which no grant reaches: CloudFormation names them, and inside another stack no name of the
scheduler's starts theirs. No cycle: the parameter depends on them, and they name it only by
its literal path (their environment) and its ARN built from that path (their roles'
policies, `TargetGrants.arn`), never by a reference to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jsii
from aws_cdk import Aws, Fn, IStableStringProducer, Lazy, Stack
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from .config import CHECK_HOME, Config


def parameter_name(name: str) -> str:
    """`name`: the scheduler's (the stack's name for the app's own)."""
    return f"/{name}/target-grants"


def _resolved(pattern: str) -> str:
    """`${AWS::Region}` and the like resolved by the deploy (as in the worker's policy)."""
    return Fn.sub(pattern) if "${" in pattern else pattern


class TargetGrants(Construct):
    """`name`: the scheduler's (names.Naming), which the parameter's name is made of; `extra`:
    grants the construct itself adds (the example machine's caller, JobScheduler.grant_target's),
    tokens allowed. The document is written at synth, so `extra` may grow until then. `own`:
    the ARNs of the scheduler's own functions and topics (tokens), which no grant reaches.

    `arn`: the parameter's ARN made of its literal name, with no reference to the parameter,
    for the policies of the functions the parameter names (a reference would be a cycle)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        name: str,
        extra: Sequence[dict[str, Any]] = (),
        own: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.name = parameter_name(name)
        self.arn = stack.format_arn(service="ssm", resource="parameter", resource_name=self.name[1:])
        # The home is the deploy's own (set below); any home validates the patterns here.
        document = config.grants_document(CHECK_HOME).model_dump(
            mode="json", by_alias=True, exclude_defaults=True
        )
        tenants = [
            {**t, "targets": [_resolved(p) for p in t.get("targets", [])]}
            for t in document.get("tenants", [])
        ]
        self.extra: list[dict[str, Any]] = list(extra)
        home = {"partition": Aws.PARTITION, "region": Aws.REGION, "account": Aws.ACCOUNT_ID}
        roles = [_resolved(p) for p in document.get("assumableRoles", [])]

        own_resources = list(own)

        def value() -> dict[str, Any]:
            return {
                "home": home,
                "tenants": [*tenants, *self.extra],
                "assumableRoles": roles,
                "ownResources": own_resources,
            }

        tier = (
            ssm.ParameterTier.ADVANCED if config.grants_parameter_advanced() else ssm.ParameterTier.STANDARD
        )
        self.parameter = ssm.StringParameter(
            self,
            "Parameter",
            parameter_name=self.name,
            string_value=Lazy.string(_Produced(lambda: stack.to_json_string(value()))),
            tier=tier,
            description="jobsched: what each tenant may target (tenantTargets, assumableRoles, ...)",
        )


@jsii.implements(IStableStringProducer)
class _Produced:
    def __init__(self, produce: Callable[[], str]) -> None:
        self._produce = produce

    def produce(self) -> str:
        return self._produce()


def trust_policy(worker_role_arn: str, notifier_role_arn: str, external_id: str) -> dict[str, Any]:
    """The trust policy a tenant puts on its role (docs/design/security.md): the scheduler's worker
    role (run targets) and notifier role (notification targets) may assume it, set its source
    identity, and only with the tenant's ExternalId (jobsched.targets.roles.external_id)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": [worker_role_arn, notifier_role_arn]},
                "Action": ["sts:AssumeRole", "sts:SetSourceIdentity"],
                "Condition": {
                    "StringEquals": {"sts:ExternalId": external_id},
                    "StringLike": {"sts:SourceIdentity": "jobsched.*"},
                },
            }
        ],
    }
