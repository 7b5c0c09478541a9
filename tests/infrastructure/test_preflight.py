"""The deploy preflight (`jobsched doctor`, infra.doctor): the session's synthesized template
read into a Plan, the account read from moto with one problem injected at a time, and each
problem reported BLOCKED with its fix.

moto 5.2.5 answers apigateway get-account, SSM, DynamoDB DescribeLimits and CloudFormation,
but not lambda GetAccountSettings (a 404 "Not yet implemented"): the account's concurrency is
answered at botocore's `before-call` hook, in the shape AWS returns it, or left to moto's 404
to show an unreadable quota."""

from __future__ import annotations

import json
import subprocess
import types
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from jobsched.cdk.names import table_logical_id

from infra import ROOT
from infra.doctor import load_prices, main
from infra.preflight import (
    AccountFacts,
    Plan,
    Status,
    check_alarm_subscriber,
    check_api_gateway_role,
    check_lambda_concurrency,
    cost_at_rest,
    exit_code,
    plan_from_template,
    render,
    required_bootstrap_version,
    run_checks,
)
from infra.preflight_reads import read_facts
from tests.infrastructure.deployed import REGION, moto_account

pytestmark = pytest.mark.integration

ROLE = "arn:aws:iam::123456789012:role/APIGatewayCloudWatchLogs"
# What CloudFormation answers at once: DescribeStackResources the first this many resources of a
# stack and no more, ListStackResources a page of this many (moto answers every one at once).
AWS_PAGE = 100


def account_settings(quota: int, unreserved: int) -> dict[str, Any]:
    return {"AccountLimit": {"ConcurrentExecutions": quota, "UnreservedConcurrentExecutions": unreserved}}


def answer_as_aws(cloudformation: Any) -> None:
    """Make a moto CloudFormation client answer a stack of more than AWS_PAGE resources as AWS
    does: DescribeStackResources truncated, ListStackResources in pages with a NextToken."""

    def page_from(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["page_from"] = int(params.get("NextToken") or 0)

    def first_only(parsed: dict[str, Any], **_: Any) -> None:
        del parsed.get("StackResources", [])[AWS_PAGE:]  # an error answers none

    def one_page(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if "StackResourceSummaries" not in parsed:
            return
        start, every = context.get("page_from", 0), parsed["StackResourceSummaries"]
        parsed["StackResourceSummaries"] = every[start : start + AWS_PAGE]
        if start + AWS_PAGE < len(every):
            parsed["NextToken"] = str(start + AWS_PAGE)

    events = cloudformation.meta.events
    events.register("before-parameter-build.cloudformation.ListStackResources", page_from)
    events.register("after-call.cloudformation.DescribeStackResources", first_only)
    events.register("after-call.cloudformation.ListStackResources", one_page)


class Account:
    """A moto account and region, healthy until a test breaks one thing."""

    def __init__(self) -> None:
        self.settings: dict[str, Any] | None = account_settings(1000, 1000)

    def client(self, service: str) -> Any:
        made = boto3.client(service, region_name=REGION)  # type: ignore[call-overload]
        if service == "lambda" and self.settings is not None:
            answer = self.settings

            def answered(**_: Any) -> tuple[Any, dict[str, Any]]:
                return types.SimpleNamespace(status_code=200, headers={}), answer

            made.meta.events.register("before-call.lambda.GetAccountSettings", answered)
        if service == "cloudformation":
            answer_as_aws(made)
        return made

    def bootstrap(self, version: int) -> None:
        self.client("ssm").put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Value=str(version), Type="String", Overwrite=True
        )

    def api_gateway_role(self) -> None:
        self.client("apigateway").update_account(
            patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": ROLE}]
        )

    def deployed_with_shards(
        self, stack_name: str, highest: int, before: int = 0, role: str | None = None
    ) -> dict[str, str]:
        """A stack of that name whose definitions table records `highest` shards in use,
        after `before` other resources (SSM parameters) and the logical id `role` (an IAM
        role) when given. Returns the physical ids by logical id."""
        from jobsched.store.schema import DEFINITIONS

        logical_id = table_logical_id(DEFINITIONS)
        others: dict[str, Any] = {
            f"Other{i:03}": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Name": f"/{stack_name}/other-{i}", "Type": "String", "Value": "x"},
            }
            for i in range(before)
        }
        if role:
            trust = {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "apigateway.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
            others[role] = {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": trust}}
        template = {
            "Resources": {
                **others,
                logical_id: {
                    "Type": "AWS::DynamoDB::Table",
                    "Properties": {
                        "AttributeDefinitions": [{"AttributeName": "job_id", "AttributeType": "S"}],
                        "KeySchema": [{"AttributeName": "job_id", "KeyType": "HASH"}],
                        "BillingMode": "PAY_PER_REQUEST",
                    },
                },
            }
        }
        cloudformation = self.client("cloudformation")
        cloudformation.create_stack(StackName=stack_name, TemplateBody=json.dumps(template))
        pages = cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name)
        physical = {
            r["LogicalResourceId"]: r["PhysicalResourceId"]
            for page in pages
            for r in page["StackResourceSummaries"]
        }
        self.client("dynamodb").put_item(
            TableName=physical[logical_id],
            Item={"job_id": {"S": "meta#shards"}, "highest_shard_count": {"N": str(highest)}},
        )
        return physical


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[Account]:
    with moto_account(monkeypatch):
        healthy = Account()
        healthy.bootstrap(30)
        healthy.api_gateway_role()
        yield healthy


@pytest.fixture(scope="module")
def plan(synth: Any) -> Plan:
    return plan_from_template(synth.template, synth.stack.config, synth.stack.stack_name)


@pytest.fixture(scope="module")
def reserving(plan: Plan) -> Plan:
    """The plan of a stack told the account's quota: the ticks reserve what they need."""
    reserved = {"SweeperFunction": 40, "ReconcilerFunction": 80}
    return plan.model_copy(update={"account_concurrency": 1000, "reserved": reserved})


def checked(plan: Plan, account: Account) -> dict[str, Any]:
    checks = run_checks(plan, read_facts(account.client, plan), load_prices())
    return {"by_name": {c.name: c for c in checks}, "exit": exit_code(checks), "text": render(checks)}


def test_the_plan_is_what_the_template_asks_for(plan, synth, variant):
    for built in (synth, variant):
        reserved = {
            k: f["Properties"]["ReservedConcurrentExecutions"]
            for k, f in built.of_type("AWS::Lambda::Function").items()
            if "ReservedConcurrentExecutions" in f["Properties"]
        }
        read = plan_from_template(built.template, built.stack.config, built.stack.stack_name)
        assert read.reserved == reserved
    assert plan.reserved == {}  # the defaults reserve nothing
    assert plan.tick_reservations == {"sweeper": 40, "reconciler": 80}  # with the quota given
    assert plan.bootstrap_required == 6 and plan.bootstrap_qualifier == "hnb659fds"
    assert plan.stage_logging and plan.creates_account_role
    assert plan.account_role and synth.resources[plan.account_role]["Type"] == "AWS::IAM::Role"
    assert plan.alarms == len(synth.of_type("AWS::CloudWatch::Alarm")) > 0
    assert plan.tables == 2 and plan.pitr_tables == 2


def test_a_healthy_account_passes_with_one_line_per_check(plan, account):
    result = checked(plan, account)
    assert result["exit"] == 0, result["text"]
    statuses = {name: c.status for name, c in result["by_name"].items()}
    assert statuses["lambda concurrency"] is Status.INFO  # what the quota would unlock
    assert statuses["api gateway logging role"] is Status.WARN  # the stack replaces the account's
    assert statuses["cdk bootstrap"] is Status.OK
    assert statuses["shard count"] is Status.OK
    assert "first deploy" in result["by_name"]["shard count"].detail
    assert result["text"].endswith("preflight: nothing blocks the deploy")


def test_a_low_concurrency_quota_blocks_and_names_the_quota(reserving, account):
    account.settings = account_settings(quota=50, unreserved=50)
    result = checked(reserving, account)
    check = result["by_name"]["lambda concurrency"]
    assert check.status is Status.BLOCKED and result["exit"] == 1
    assert "quota 50" in check.detail
    assert "--quota-code L-B99A9384" in (check.fix or "") and "accountConcurrency=0" in (check.fix or "")


def test_a_quota_below_the_assumed_account_concurrency_blocks(reserving, account):
    """Reservations fit today's unreserved concurrency, but the stack was sized for 1,000."""
    account.settings = account_settings(quota=400, unreserved=400)
    check = checked(reserving, account)["by_name"]["lambda concurrency"]
    assert check.status is Status.BLOCKED
    assert "-c accountConcurrency=400" in (check.fix or "")


def test_an_unreadable_concurrency_quota_blocks(plan, account):
    account.settings = None  # moto's own answer: 404 Not yet implemented
    check = checked(plan, account)["by_name"]["lambda concurrency"]
    assert check.status is Status.BLOCKED and "GetAccountSettings" in check.detail


def test_no_api_gateway_role_blocks_a_stack_told_to_keep_the_accounts(plan, account):
    account.client("apigateway").update_account(
        patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": ""}]
    )
    keeping = plan.model_copy(update={"creates_account_role": False, "account_role": None})
    result = checked(keeping, account)
    check = result["by_name"]["api gateway logging role"]
    assert check.status is Status.BLOCKED and result["exit"] == 1
    assert "aws apigateway update-account" in (check.fix or "")
    assert "apiGatewayAccountRole=true" in (check.fix or "")


def test_a_stack_that_sets_the_role_itself_needs_none(plan, account):
    account.client("apigateway").update_account(
        patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": ""}]
    )
    check = checked(plan, account)["by_name"]["api gateway logging role"]
    assert check.status is Status.OK and "has none yet" in check.detail


def test_replacing_the_accounts_own_logging_role_is_a_warning_naming_how_to_keep_it(plan):
    """The account-wide setting changes for every API of the region: deployable (the same
    AWS-managed policy), but said, with the setting that keeps the account's role; the stack's
    own role, on a redeploy, is no replacement."""
    others = AccountFacts(api_gateway_role_arn=ROLE)
    check = check_api_gateway_role(plan, others)
    assert check.status is Status.WARN and ROLE in check.detail
    assert "-c apiGatewayAccountRole=false" in (check.fix or "")
    own = AccountFacts(
        api_gateway_role_arn="arn:aws:iam::123456789012:role/Jobsched-ApiRestApiCloudWatchRole-AbC",
        own_account_role="Jobsched-ApiRestApiCloudWatchRole-AbC",
    )
    assert check_api_gateway_role(plan, own).status is Status.OK


def test_an_alarm_that_reaches_no_one_is_a_warning_not_a_block(plan):
    silent = plan.model_copy(update={"alarm_email": None, "missing_subscriber": "alarmEmail is empty"})
    check = check_alarm_subscriber(silent)
    assert check.status is Status.WARN and check.fix == "alarmEmail is empty"
    assert exit_code([check]) == 0
    subscribed = plan.model_copy(update={"alarm_email": "ops@example.com", "missing_subscriber": None})
    assert "ops@example.com" in check_alarm_subscriber(subscribed).detail


def test_no_bootstrap_blocks(plan, account):
    account.client("ssm").delete_parameter(Name="/cdk-bootstrap/hnb659fds/version")
    check = checked(plan, account)["by_name"]["cdk bootstrap"]
    assert check.status is Status.BLOCKED and "not bootstrapped" in check.detail
    assert (check.fix or "").startswith("npx cdk bootstrap aws://123456789012/us-east-1")


def test_an_old_bootstrap_blocks(plan, account):
    account.bootstrap(5)
    check = checked(plan, account)["by_name"]["cdk bootstrap"]
    assert check.status is Status.BLOCKED and "version 5, the template requires 6" in check.detail


def test_a_shard_count_below_the_one_in_use_blocks(plan, account):
    account.deployed_with_shards(plan.stack_name, highest=plan.shard_count * 2)
    result = checked(plan, account)
    check = result["by_name"]["shard count"]
    assert check.status is Status.BLOCKED and result["exit"] == 1
    assert f"-c shardCount={plan.shard_count * 2}" in (check.fix or "")
    assert "Resharding" in (check.fix or "")


def test_the_shard_count_in_use_at_or_below_the_config_passes(plan, account):
    account.deployed_with_shards(plan.stack_name, highest=plan.shard_count)
    check = checked(plan, account)["by_name"]["shard count"]
    assert check.status is Status.OK and f"highest in use {plan.shard_count}" in check.detail


def test_a_stack_past_one_page_of_resources_is_read_to_its_last(plan, account):
    """AWS's DescribeStackResources stops at 100 resources and the stack has about 230: the
    table, the logging role and the functions past the first 100 are read all the same."""
    from jobsched.store.schema import DEFINITIONS

    assert plan.account_role
    physical = account.deployed_with_shards(
        plan.stack_name, highest=plan.shard_count * 2, before=AWS_PAGE + 20, role=plan.account_role
    )
    cloudformation = account.client("cloudformation")
    first = cloudformation.describe_stack_resources(StackName=plan.stack_name)["StackResources"]
    assert len(first) == AWS_PAGE  # as AWS answers: neither the role nor the table in it
    assert {plan.account_role, table_logical_id(DEFINITIONS)}.isdisjoint(
        r["LogicalResourceId"] for r in first
    )
    facts = read_facts(account.client, plan)
    assert facts.recorded_shard_count == plan.shard_count * 2
    assert facts.own_account_role == physical[plan.account_role]
    assert checked(plan, account)["by_name"]["shard count"].status is Status.BLOCKED


def test_quotas_moto_cannot_answer_are_stated_as_assumed_with_how_to_check(plan, account):
    result = checked(plan, account)
    tables = result["by_name"]["dynamodb tables"]
    assert tables.status is Status.OK and "assumed default" in tables.detail
    assert "get-service-quota --service-code dynamodb" in tables.detail
    assert "DescribeLimits" in result["by_name"]["dynamodb throughput"].detail


def test_eventbridge_rules_are_counted_against_the_bus_quota(plan, account):
    assert plan.rules > 0
    events = account.client("events")
    assert checked(plan, account)["by_name"]["eventbridge rules"].status is Status.OK
    for i in range(301 - plan.rules):
        events.put_rule(Name=f"other-{i}", ScheduleExpression="rate(1 hour)")
    check = checked(plan, account)["by_name"]["eventbridge rules"]
    assert check.status is Status.WARN and "shardsPerSweep" in (check.fix or "")


def test_provisioned_capacity_beyond_the_table_limit_blocks(plan, account):
    # moto's DescribeLimits: 10,000 units a table.
    greedy = plan.model_copy(
        update={"billing_mode": "provisioned", "provisioned_max": {"read": 5, "write": 12_000}}
    )
    assert checked(greedy, account)["by_name"]["dynamodb throughput"].status is Status.BLOCKED


def test_a_redeploy_gives_back_what_the_stack_reserves_today():
    plan = Plan(stack_name="s", shard_count=32, account_concurrency=1000, reserved={"a": 40, "b": 40})
    fresh = AccountFacts(lambda_quota=1000, lambda_unreserved=160)
    assert check_lambda_concurrency(plan, fresh).status is Status.BLOCKED  # 160 - 80 < 100
    redeploy = fresh.model_copy(update={"reserved_by_stack_now": 80})
    assert check_lambda_concurrency(plan, redeploy).status is Status.OK


def test_an_account_with_a_tiny_quota_can_deploy_a_stack_that_reserves_nothing():
    reserving_nothing = Plan(stack_name="s", shard_count=4, account_concurrency=0, worker_ceilings=20)
    tiny = AccountFacts(lambda_quota=10, lambda_unreserved=10)
    check = check_lambda_concurrency(reserving_nothing, tiny)
    assert check.status is Status.WARN and "throttled" in check.detail  # deployable, but slow


def test_what_a_bigger_quota_unlocks_is_shown_as_the_setting_that_unlocks_it(plan):
    """The defaults reserve nothing; the preflight says what accountConcurrency would reserve,
    and whether this account's quota holds it (the setting) or which quota would."""
    big = AccountFacts(lambda_quota=1000, lambda_unreserved=1000)
    check = check_lambda_concurrency(plan, big)
    assert check.status is Status.INFO
    assert "40 for the sweeper and 80 for the reconciler" in check.detail
    assert check.fix == "deploy with -c accountConcurrency=1000"
    new = AccountFacts(lambda_quota=10, lambda_unreserved=10)
    check = check_lambda_concurrency(plan, new)
    assert check.status is Status.WARN  # deployable: nothing reserved, the workers throttled
    assert "needs a quota of 395" in check.detail  # 40 + 80 + 175 worker ceilings + 100


def test_cost_at_rest_counts_what_is_billed_without_traffic(plan):
    check = cost_at_rest(plan, load_prices())
    assert check.status is Status.INFO
    assert f"alarms ${plan.alarms * 0.10:.2f}" in check.detail
    assert "kms keys $1.00" in check.detail and "waf $6.00" in check.detail
    assert "PITR on 2 tables" in check.detail and "Assumed:" in check.detail
    # The reconciler's second ticks: 3 SQS requests a shard a minute, and its queue polled.
    per_month = plan.second_ticks_per_minute * 3 * 60 * 730 * load_prices()["sqs_standard_request"]
    assert plan.second_ticks_per_minute == 32 and f"second ticks (sqs) ${per_month:.2f}" in check.detail
    from jobsched.cdk.names import QUEUE_KEYS

    assert plan.polled_queues == len(QUEUE_KEYS) + 2  # the priority queues, notifications, second ticks
    more = cost_at_rest(plan.model_copy(update={"alarms": plan.alarms + 10}), load_prices())
    assert float(more.detail.split("$")[1].split("/")[0]) > float(check.detail.split("$")[1].split("/")[0])


def test_the_required_bootstrap_version_comes_from_the_template_rule():
    rule = {
        "Assertions": [
            {"Assert": {"Fn::Not": [{"Fn::Contains": [["1", "2", "3"], {"Ref": "BootstrapVersion"}]}]}}
        ]
    }
    assert required_bootstrap_version({"Rules": {"CheckBootstrapVersion": rule}}) == 4
    assert required_bootstrap_version({}) is None


def test_doctor_synthesizes_the_config_and_exits_non_zero_when_blocked(account, capsys):
    """The entry point end to end: a -c override reaches the synthesized plan, and a blocking
    problem (no bootstrap) makes the exit code 1; a config synth refuses exits 2."""
    account.client("ssm").delete_parameter(Name="/cdk-bootstrap/hnb659fds/version")
    subscribed = ["-c", "alarmEmail=ops@example.com"]
    assert main([*subscribed, "-c", "shardCount=8"], client=account.client) == 1
    printed = capsys.readouterr().out
    assert "BLOCKED cdk bootstrap" in printed and "shardCount 8" in printed
    concurrency = ["-c", "accountConcurrency=100", "-c", "shardCount=256"]
    assert main([*subscribed, *concurrency], client=account.client) == 2
    assert "L-B99A9384" in capsys.readouterr().out
    # cdk.json subscribes no one: the preflight warns, as synth does, and lets it deploy.
    account.bootstrap(30)
    assert main([], client=account.client) == 0
    printed = capsys.readouterr().out
    assert "WARN    alarm subscriber" in printed and "alarmsWithoutSubscriber" in printed


def test_make_deploy_runs_the_preflight_first_with_the_same_context():
    """A blocking check (exit 1) or a refused config (exit 2) stops make before `cdk deploy`."""
    context = "-c alarmEmail=ops@example.com -c shardCount=64"
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "deploy", f"DEPLOY_CONTEXT={context}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    doctor = next(i for i, line in enumerate(printed) if f"-m infra.doctor {context}" in line)
    deploy = next(i for i, line in enumerate(printed) if f"cdk deploy {context}" in line)
    assert doctor < deploy


def test_a_deploy_the_deployed_tables_cannot_take_blocks_with_its_steps(plan, account, synth):
    """What is deployed, not the snapshot: a stack whose runs stream has another view type."""
    from infra.migrations import STREAM_STEPS
    from tests.infrastructure.deployed import deploy

    assert checked(plan, account)["by_name"]["migrations"].status is Status.OK  # nothing deployed yet
    template = json.loads(json.dumps(synth.template))
    template["Resources"]["RunsTable"]["Properties"]["StreamSpecification"] = {"StreamViewType": "KEYS_ONLY"}
    deploy(account.client, template, plan.stack_name)
    result = checked(plan, account)
    migrations = result["by_name"]["migrations"]
    assert migrations.status is Status.BLOCKED and result["exit"] == 1
    assert "RunsTable: the stream view type changes from KEYS_ONLY to NEW_AND_OLD_IMAGES" in migrations.detail
    assert STREAM_STEPS in migrations.detail
