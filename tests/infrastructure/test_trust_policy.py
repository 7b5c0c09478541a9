"""The trust policy the docs (Design, Security) tell a tenant to put on its role is the one
jobsched.cdk.grants writes, names the stack's worker and notifier roles (outputs), and admits
exactly the AssumeRole either makes for that tenant: not another tenant's, not one without a
source identity."""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Any

import pytest
from jobsched.cdk.grants import trust_policy
from jobsched.cdk.names import OUTPUT_NOTIFIER_FUNCTION_ROLE, OUTPUT_WORKER_FUNCTION_ROLE
from jobsched.domain.instants import ManualClock
from jobsched.targets import AssumedRoles, external_id

from infra import ROOT
from tests.helpers import T0

ROLE = "arn:aws:iam::210987654321:role/jobsched-target-reports"
WORKER = "arn:aws:iam::123456789012:role/Jobsched-FunctionsWorkerFunctionRole-ABC"
NOTIFIER = "arn:aws:iam::123456789012:role/Jobsched-FunctionsNotifierFunctionRole-DEF"


def documented_policy() -> dict[str, Any]:
    text = (ROOT / "docs" / "design" / "security.md").read_text()
    heading = r"^## AWS targets act with the tenant's authority\n"
    section = re.search(heading + r"(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "docs/design/security.md: no '## AWS targets act with the tenant's authority'"
    (block,) = re.findall(r"```json\n(.*?)```", section.group(1), re.S)
    return dict(json.loads(block))


def admits(policy: dict[str, Any], principal: str, request: dict[str, Any]) -> bool:
    """IAM's evaluation of this one-statement trust policy, for the keys it uses."""
    (statement,) = policy["Statement"]
    if statement["Effect"] != "Allow" or principal not in statement["Principal"]["AWS"]:
        return False
    if not {"sts:AssumeRole", "sts:SetSourceIdentity"} <= set(statement["Action"]):
        return False
    equals = statement["Condition"]["StringEquals"]
    like = statement["Condition"]["StringLike"]
    return request.get("ExternalId") == equals["sts:ExternalId"] and fnmatch.fnmatchcase(
        request.get("SourceIdentity") or "", like["sts:SourceIdentity"]
    )


def test_the_documented_policy_is_the_one_the_code_writes():
    placeholder = trust_policy("<WorkerFunctionRoleArn>", "<NotifierFunctionRoleArn>", "<your external id>")
    assert documented_policy() == placeholder


def test_the_principal_to_trust_is_a_stack_output(synth):
    for output, function in (
        (OUTPUT_WORKER_FUNCTION_ROLE, "worker"),
        (OUTPUT_NOTIFIER_FUNCTION_ROLE, "notifier"),
    ):
        role = synth.logical_id(synth.stack.functions.roles[function])
        assert synth.template["Outputs"][output]["Value"] == {"Fn::GetAtt": [role, "Arn"]}


class Sts:
    def __init__(self, policy: dict[str, Any], caller: str = WORKER) -> None:
        self.policy = policy
        self.caller = caller
        self.admitted: list[bool] = []

    def assume_role(self, **request: Any) -> dict[str, Any]:
        self.admitted.append(admits(self.policy, self.caller, request))
        return {
            "Credentials": {
                "AccessKeyId": "A",
                "SecretAccessKey": "s",
                "SessionToken": "t",
                "Expiration": T0.replace(year=T0.year + 1),
            }
        }


@pytest.mark.parametrize("tenant", ["123456789012/role/reports", "acme corp", "é" * 256, "sha256:x"])
@pytest.mark.parametrize("caller", [WORKER, NOTIFIER], ids=["worker", "notifier"])
def test_the_policy_admits_its_tenants_assume_and_no_other(tenant, caller):
    sts = Sts(trust_policy(WORKER, NOTIFIER, external_id(tenant)), caller)
    roles = AssumedRoles(lambda: sts, ManualClock(T0))
    roles.credentials(ROLE, tenant)
    roles.credentials(ROLE, tenant + "x")  # another tenant naming the same role
    assert sts.admitted == [True, False]
    assert not admits(sts.policy, caller, {"ExternalId": external_id(tenant)})  # no source identity
    assert not admits(sts.policy, "arn:aws:iam::123456789012:role/other", {"ExternalId": external_id(tenant)})
