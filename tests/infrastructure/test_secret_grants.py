"""The worker reads only the secrets the operator granted to some tenant (context
tenantTargets): GetSecretValue and GetParameter on exactly those ARN patterns, kms:Decrypt only
through those services for those secrets, and nothing at all when nothing is granted. The
grants reach the functions in the grants parameter (jobsched.cdk.grants), the same document that
grants AWS targets, which the API and the worker check per tenant."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infrastructure.synth import Synth, function_environment, render, synthesize

SECRET_A = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tenant-a/*"
PARAMETER_B = "arn:aws:ssm:eu-west-1:123456789012:parameter/tenant-b/*"
GRANTS = {
    "tenant-a": [SECRET_A, "arn:aws:lambda:eu-west-1:123456789012:function:tenant-a-*"],
    "tenant-b": [PARAMETER_B, SECRET_A],  # one pattern granted twice is one resource
}
SECRET_ACTIONS = {"secretsmanager:GetSecretValue", "ssm:GetParameter", "kms:Decrypt"}


@pytest.fixture(scope="module")
def granted(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    # cdk-nag on: every wildcard these grants add has its written reason.
    return synthesize(tmp_path_factory.mktemp("grants"), {"tenantTargets": json.dumps(GRANTS)})


def statements(synth: Synth, function: str) -> list[dict[str, Any]]:
    role = synth.logical_id(synth.stack.functions.roles[function])
    found = []
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def actions_of(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return set(action if isinstance(action, list) else [action])


def resources_of(statement: dict[str, Any]) -> list[str]:
    resource = statement["Resource"]
    return sorted(render(r) for r in (resource if isinstance(resource, list) else [resource]))


def secret_statements(synth: Synth, function: str) -> list[dict[str, Any]]:
    """The function's statements that read secrets, without its read of the grants parameter
    (ssm:GetParameter on /<stack>/target-grants, which holds no secret; the policy may merge it
    into the statement that reads granted parameters)."""
    own = f"<{synth.logical_id(synth.stack.grants.parameter)}>"
    own_path = ":parameter" + synth.stack.grants.name  # its ARN as the policies build it
    found = []
    for statement in statements(synth, function):
        if not actions_of(statement) & SECRET_ACTIONS:
            continue
        resource = statement["Resource"]
        kept = [
            r
            for r in (resource if isinstance(resource, list) else [resource])
            if own not in render(r) and not render(r).endswith(own_path)
        ]
        if kept:
            found.append({**statement, "Resource": kept})
    return found


def test_the_worker_reads_exactly_the_granted_secrets(granted):
    assert granted.error is None, granted.error
    by_action: dict[str, list[dict[str, Any]]] = {}
    for statement in secret_statements(granted, "worker"):
        for action in actions_of(statement) & SECRET_ACTIONS:
            by_action.setdefault(action, []).append(statement)
    [read_secret] = by_action["secretsmanager:GetSecretValue"]
    assert actions_of(read_secret) == {"secretsmanager:GetSecretValue"}
    assert resources_of(read_secret) == [SECRET_A] and "Condition" not in read_secret
    [read_parameter] = by_action["ssm:GetParameter"]
    assert actions_of(read_parameter) == {"ssm:GetParameter"} and resources_of(read_parameter) == [
        PARAMETER_B
    ]

    decrypts = {json.dumps(s["Condition"]["StringLike"], sort_keys=True): s for s in by_action["kms:Decrypt"]}
    assert set(decrypts) == {
        json.dumps({"kms:EncryptionContext:SecretARN": [SECRET_A]}),
        json.dumps({"kms:EncryptionContext:PARAMETER_ARN": [PARAMETER_B]}),
    }
    for statement in decrypts.values():
        assert actions_of(statement) == {"kms:Decrypt"}
        assert resources_of(statement) == ["arn:<AWS::Partition>:kms:*:*:key/*"]
        via = render(statement["Condition"]["StringEquals"]["kms:ViaService"])
        service = "secretsmanager" if "SecretARN" in json.dumps(statement["Condition"]) else "ssm"
        assert via == f"{service}.<AWS::Region>.amazonaws.com"


def test_no_other_function_reads_secrets(granted):
    for function in ("api", "sweeper", "outbox", "reconciler"):
        assert secret_statements(granted, function) == [], function


def test_nothing_is_readable_when_nothing_is_granted(synth):
    assert secret_statements(synth, "worker") == []


def test_the_functions_check_the_same_grants_per_tenant(granted):
    """The grants reach the functions only through the grants parameter, not the environment
    (Lambda's 4 KB): the secrets and the AWS targets of each tenant in one document."""
    from jobsched.domain.grants import Grants, GrantsDocument
    from jobsched.settings import Settings

    environment = function_environment(granted)
    assert "TENANT_TARGETS" not in environment and "TARGET_GRANTS" not in environment
    assert Settings.from_env(environment).target_grants_parameter == granted.stack.grants.name
    (parameter,) = granted.of_type("AWS::SSM::Parameter").values()
    document = json.loads(render(parameter["Properties"]["Value"]))
    shipped = {t["tenant"]: t["targets"] for t in document["tenants"] if t["tenant"] in GRANTS}
    assert shipped == {tenant: list(dict.fromkeys(patterns)) for tenant, patterns in GRANTS.items()}
    # The functions read it as one document: the secrets and the targets of a tenant together.
    (tenant_a,) = [t for t in document["tenants"] if t["tenant"] == "tenant-a"]
    read = Grants(GrantsDocument.model_validate({"tenants": [tenant_a]}))
    assert read.allows("tenant-a", SECRET_A.replace("*", "hook-AbCdEf"))
    assert read.allows("tenant-a", "arn:aws:lambda:eu-west-1:123456789012:function:tenant-a-report")
