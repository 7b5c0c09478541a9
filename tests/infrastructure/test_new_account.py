"""The first deploy, with the defaults, into a brand-new account: the stack exactly as `make
synth` builds it from a clean clone (cdk.json alone, no -c: no alarmEmail, no quota), checked
against what a new account and region allow.

A new account's Lambda concurrency quota is 10 and Lambda keeps 100 of it unreserved, so it
refuses any reserved concurrency; a new region has no API Gateway CloudWatch role, which a
stage that logs needs. Neither can be proven without an account: the template is held to
them here, and the preflight's checks are run on such an account's facts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jobsched.cdk.config import UNRESERVED_MINIMUM, Config
from jobsched.cdk.names import OUTPUT_ALARM_SUBSCRIBER
from jobsched.cdk.scheduler import NO_ALARM_SUBSCRIBER

from infra import ROOT
from infra.app import file_context
from infra.doctor import load_prices
from infra.preflight import AccountFacts, Status, plan_from_template, run_checks

NEW_ACCOUNT_QUOTA = 10  # Lambda "Concurrent executions" (L-B99A9384) in a new account
STACK = "Jobsched"


class Node:
    def __init__(self, context: dict[str, Any]) -> None:
        self.context = context

    def try_get_context(self, key: str) -> Any:
        return self.context.get(key)


@pytest.fixture(scope="module")
def clean_clone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`python -m infra.app` as cdk.json runs it (cdk-nag on), with no context but the layer
    bundling skipped: its exit, its output, the template and the assembly's manifest."""
    outdir = tmp_path_factory.mktemp("clean-clone")
    done = subprocess.run(
        [sys.executable, "-m", "infra.app", "--skip-bundling", "--outdir", str(outdir)],
        cwd=ROOT,
        env={**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"},
        capture_output=True,
        text=True,
        check=False,
    )

    def read(name: str) -> Any:
        path = Path(outdir) / name
        return json.loads(path.read_text()) if path.exists() else None

    # The stack's construct metadata (annotations among it): the file the manifest names.
    return {
        "done": done,
        "template": read(f"{STACK}.template.json"),
        "metadata": read(f"{STACK}.metadata.json"),
    }


@pytest.fixture(scope="module")
def template(clean_clone: dict[str, Any]) -> dict[str, Any]:
    done = clean_clone["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    return clean_clone["template"]


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def test_synth_from_a_clean_clone_warns_that_no_alarm_reaches_anyone_instead_of_failing(clean_clone):
    done = clean_clone["done"]
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "WARNING: alarmEmail is empty" in done.stderr
    # What the CDK CLI prints at synth and at every deploy: the construct's warning annotation.
    warnings = [
        str(entry["data"])
        for entries in clean_clone["metadata"].values()
        for entry in entries
        if entry["type"] == "aws:cdk:warning"
    ]
    assert any("alarmEmail is empty" in w and NO_ALARM_SUBSCRIBER in w for w in warnings), warnings
    # And the deploy's own outputs, after it ends.
    assert clean_clone["template"]["Outputs"][OUTPUT_ALARM_SUBSCRIBER]["Value"].startswith("NONE: ")


def test_the_defaults_reserve_no_concurrency_a_new_account_would_refuse(template):
    allowed = max(0, NEW_ACCOUNT_QUOTA - UNRESERVED_MINIMUM)
    functions = of_type(template, "AWS::Lambda::Function")
    reserved = {k: f["Properties"].get("ReservedConcurrentExecutions", 0) for k, f in functions.items()}
    assert sum(reserved.values()) <= allowed, {k: n for k, n in reserved.items() if n}
    assert not of_type(template, "AWS::Lambda::Version")  # nor provisioned concurrency
    assert not any(
        "ProvisionedConcurrencyConfig" in a["Properties"]
        for a in of_type(template, "AWS::Lambda::Alias").values()
    )


def test_the_stage_that_logs_gets_the_role_a_new_region_lacks(template):
    (stage_id, stage), *_ = of_type(template, "AWS::ApiGateway::Stage").items()
    logs = stage["Properties"].get("AccessLogSetting") or any(
        m.get("LoggingLevel", "OFF") != "OFF" for m in stage["Properties"].get("MethodSettings", [])
    )
    assert logs, f"{stage_id} writes no logs: then it needs no role"
    (account_id,) = of_type(template, "AWS::ApiGateway::Account")
    assert account_id in stage.get("DependsOn", [])  # the role is set before the stage logs


def test_the_preflight_finds_nothing_that_blocks_it_in_a_new_account(template):
    """The checks on a new account's facts: a quota of 10, all of it unreserved, no API Gateway
    CloudWatch role, bootstrapped. Warnings (the workers' ceilings above the quota, no alarm
    subscriber) let it deploy."""
    config = Config.from_context(Node(file_context()))  # type: ignore[arg-type]
    plan = plan_from_template(template, config, STACK)
    new_account = AccountFacts(
        account="123456789012",
        region="eu-west-1",
        lambda_quota=NEW_ACCOUNT_QUOTA,
        lambda_unreserved=NEW_ACCOUNT_QUOTA,
        api_gateway_role_arn=None,
        bootstrap_version=30,
        dynamodb_limits={
            "AccountMaxReadCapacityUnits": 80000,
            "AccountMaxWriteCapacityUnits": 80000,
            "TableMaxReadCapacityUnits": 40000,
            "TableMaxWriteCapacityUnits": 40000,
        },
        rules_in_use=0,
    )
    checks = {c.name: c for c in run_checks(plan, new_account, load_prices())}
    assert not [c for c in checks.values() if c.status is Status.BLOCKED], [
        c for c in checks.values() if c.status is Status.BLOCKED
    ]
    assert checks["lambda concurrency"].status is Status.WARN  # the workers would be throttled
    assert checks["api gateway logging role"].status is Status.OK
    assert checks["alarm subscriber"].status is Status.WARN
