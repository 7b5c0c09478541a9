"""The preflight's checks (`jobsched doctor`, `make preflight`): pure functions of what the
synthesized template and the config ask for (`Plan`) and what was read from the account
(`AccountFacts`, read by infra.preflight_reads). Nothing here calls AWS.

Each check returns one `Check`: OK, INFO (nothing to do, something to know), WARN (the deploy
goes through, but look) or BLOCKED (the deploy would fail or lose data), with the command or
console step that fixes it. The exit code is non-zero when any check is BLOCKED."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from jobsched.cdk.names import FUNCTIONS_BY_NAME
from pydantic import BaseModel, ConfigDict, Field

from .migrations import Deployed, deployed_problems, parameter_tiers, table_shapes

# Lambda keeps this much of the account's concurrency unreserved (PutFunctionConcurrency fails
# past it).
UNRESERVED_MINIMUM = 100
LAMBDA_CONCURRENCY_QUOTA = "L-B99A9384"  # Lambda "Concurrent executions"
DYNAMODB_TABLES_QUOTA = "L-F98FE922"  # DynamoDB "Maximum number of tables"
DEFAULT_QUALIFIER = "hnb659fds"
# Documented defaults for what Service Quotas may not answer (it answers the codes above in
# AWS; other tools, moto among them, may not).
ASSUMED_DEFAULTS = {
    DYNAMODB_TABLES_QUOTA: 2500,
}
GSIS_PER_TABLE = 20  # DynamoDB's default global secondary indexes per table
SQS_IN_FLIGHT_PER_QUEUE = 120_000  # standard queue, fixed
RULES_PER_EVENT_BUS = 300  # EventBridge's default rules per event bus (adjustable)
MINUTES_PER_MONTH = 730 * 60

# Monthly list prices (us-east-1) of what is billed with no traffic, beyond bench/prices.json.
# As known in 2025, unconfirmed: check https://aws.amazon.com/pricing before quoting them.
AT_REST_PRICES = {
    "alarm_month": 0.10,  # a standard-resolution metric alarm
    "kms_key_month": 1.00,  # a customer managed key (rotation adds $1 per rotated version, ignored)
    "web_acl_month": 5.00,
    "web_acl_rule_month": 1.00,
    "dashboard_month": 3.00,  # beyond the 3 free dashboards
}
# What an idle tick costs (assumed): one sweeper invocation reads the shard count in use (a
# consistent read, 1 unit) and queries the `due` index of its shard (0.5 units, one page,
# nothing due); a reconciler pass queries its shard's open runs (0.5 units): 1 unit a tick on
# average. Each runs about 100 ms and writes ~1 KB of log.
IDLE_TICK_SECONDS = 0.1
IDLE_TICK_READ_UNITS = 1.0
IDLE_TICK_LOG_BYTES = 1_000
# Lambda's SQS pollers long-poll an empty queue: about 45 receives a minute per queue mapping
# (the priority queues, notifications, the reconciler's second ticks)
# (bench/report.md's assumption), each one SQS request.
IDLE_RECEIVES_PER_MINUTE = 45


class Status(StrEnum):
    OK = "OK"
    INFO = "INFO"
    WARN = "WARN"
    BLOCKED = "BLOCKED"


class Check(BaseModel):
    """One line of the preflight: what was checked, its status, what was found, the fix."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: Status
    detail: str
    fix: str | None = None


class Plan(BaseModel):
    """What the deploy asks for, read from the synthesized template and the config."""

    model_config = ConfigDict(frozen=True)

    stack_name: str
    shard_count: int = Field(ge=1)
    account_concurrency: int = Field(ge=0)  # the config's assumed quota (0: reserve nothing)
    reserved: dict[str, int] = {}  # function logical id -> ReservedConcurrentExecutions
    # Scheduled function -> what it reserves once accountConcurrency is given (what a quota
    # that holds it unlocks).
    tick_reservations: dict[str, int] = {}
    worker_ceilings: int = 0  # sum of the worker mappings' ceilings
    worker_batch: int = 10  # the largest batch size of a worker mapping
    bootstrap_qualifier: str = DEFAULT_QUALIFIER
    bootstrap_required: int | None = None  # None: the template does not check
    stage_logging: bool = False  # a stage with access or execution logs
    creates_account_role: bool = False  # the template sets AWS::ApiGateway::Account itself
    account_role: str | None = None  # the logical id of the role it sets
    alarm_email: str | None = None
    missing_subscriber: str | None = None  # why no alarm reaches anyone, if none does
    tables: int = 0
    gsis_per_table: dict[str, int] = {}
    billing_mode: str = "on-demand"
    provisioned_max: dict[str, int] = {}  # maxRead / maxWrite per table and per index
    polled_queues: int = 0  # SQS queues a Lambda event source mapping polls
    second_ticks_per_minute: int = 0  # messages through the reconciler's second-tick queue
    rules: int = 0  # EventBridge rules on the default bus (the every-minute ticks)
    alarms: int = 0
    kms_keys: int = 0
    web_acls: int = 0
    web_acl_rules: int = 0
    dashboards: int = 0
    log_groups: dict[str, int | None] = {}  # logical id -> RetentionInDays (None: never expires)
    pitr_tables: int = 0
    ticks_per_minute: dict[str, int] = {}  # scheduled function -> invocations a minute
    memory_mb: dict[str, int] = {}  # scheduled function -> memory
    table_shapes: dict[str, Any] = {}  # logical id -> infra.migrations.table_shape
    parameter_tiers: dict[str, str] = {}  # logical id -> SSM tier


class QuotaReading(BaseModel):
    """A Service Quotas value, or the documented default when it could not be read."""

    model_config = ConfigDict(frozen=True)

    value: float
    read: bool  # False: ASSUMED_DEFAULTS, Service Quotas did not answer
    note: str = ""


class AccountFacts(BaseModel):
    """What was read from the account and region (None: not read; `errors` says why)."""

    model_config = ConfigDict(frozen=True)

    account: str | None = None
    region: str | None = None
    lambda_quota: int | None = None  # GetAccountSettings AccountLimit.ConcurrentExecutions
    lambda_unreserved: int | None = None  # AccountLimit.UnreservedConcurrentExecutions
    reserved_by_stack_now: int = 0  # what this stack's functions reserve today (a redeploy)
    stack_exists: bool = False
    api_gateway_role_arn: str | None = None
    own_account_role: str | None = None  # the name of the stack's deployed account role
    bootstrap_version: int | None = None
    recorded_shard_count: int | None = None
    dynamodb_limits: dict[str, int] = {}  # DescribeLimits
    rules_in_use: int | None = None  # EventBridge rules on the default bus today (ListRules)
    quotas: dict[str, QuotaReading] = {}
    deployed: Deployed | None = None  # the stack's tables and parameters (infra.migrations)
    errors: dict[str, str] = {}  # read -> the error it met


# --- the plan, from the template ---


def plan_from_template(template: dict[str, Any], config: Any, stack_name: str) -> Plan:
    """The Plan of a synthesized template and its jobsched.cdk.config.Config."""
    resources: dict[str, dict[str, Any]] = template.get("Resources", {})

    def of_type(kind: str) -> dict[str, dict[str, Any]]:
        return {k: r.get("Properties", {}) for k, r in resources.items() if r.get("Type") == kind}

    reserved = {
        k: int(p["ReservedConcurrentExecutions"])
        for k, p in of_type("AWS::Lambda::Function").items()
        if p.get("ReservedConcurrentExecutions") is not None
    }
    stages = of_type("AWS::ApiGateway::Stage").values()
    logging = any(
        s.get("AccessLogSetting")
        or any(m.get("LoggingLevel", "OFF") != "OFF" for m in s.get("MethodSettings", []))
        for s in stages
    )
    tables = of_type("AWS::DynamoDB::Table")
    account_roles = [p["CloudWatchRoleArn"] for p in of_type("AWS::ApiGateway::Account").values()]
    account_role = next(
        (r["Fn::GetAtt"][0] for r in account_roles if isinstance(r, dict) and "Fn::GetAtt" in r), None
    )
    default = str(template.get("Parameters", {}).get("BootstrapVersion", {}).get("Default", ""))
    qualifier = default.split("/")[2] if default.startswith("/cdk-bootstrap/") else DEFAULT_QUALIFIER
    capacity = config.provisioned_capacity
    return Plan(
        stack_name=stack_name,
        shard_count=config.shard_count,
        account_concurrency=config.account_concurrency,
        reserved=reserved,
        tick_reservations=config.tick_reservations(),
        worker_ceilings=sum(config.worker_ceilings().values()),
        worker_batch=max(config.worker_batch_size.values()),
        bootstrap_qualifier=qualifier,
        bootstrap_required=required_bootstrap_version(template),
        stage_logging=logging,
        creates_account_role=bool(account_roles),
        account_role=account_role,
        alarm_email=config.alarm_email,
        missing_subscriber=config.missing_subscriber(),
        tables=len(tables),
        gsis_per_table={k: len(p.get("GlobalSecondaryIndexes", [])) for k, p in tables.items()},
        billing_mode=config.billing_mode,
        provisioned_max={"read": capacity["maxRead"], "write": capacity["maxWrite"]},
        polled_queues=sum(
            1 for p in of_type("AWS::Lambda::EventSourceMapping").values() if "StartingPosition" not in p
        ),
        rules=len(of_type("AWS::Events::Rule")),
        alarms=len(of_type("AWS::CloudWatch::Alarm")),
        kms_keys=len(of_type("AWS::KMS::Key")),
        web_acls=len(of_type("AWS::WAFv2::WebACL")),
        web_acl_rules=sum(len(p.get("Rules", [])) for p in of_type("AWS::WAFv2::WebACL").values()),
        dashboards=len(of_type("AWS::CloudWatch::Dashboard")),
        log_groups={k: p.get("RetentionInDays") for k, p in of_type("AWS::Logs::LogGroup").items()},
        pitr_tables=sum(
            1
            for p in tables.values()
            if (p.get("PointInTimeRecoverySpecification") or {}).get("PointInTimeRecoveryEnabled")
        ),
        ticks_per_minute=config.ticks_per_minute(),
        second_ticks_per_minute=config.shard_count,
        memory_mb={name: FUNCTIONS_BY_NAME[name].memory_mb for name in config.ticks_per_minute()},
        table_shapes=table_shapes(template),
        parameter_tiers=parameter_tiers(template),
    )


def required_bootstrap_version(template: dict[str, Any]) -> int | None:
    """The bootstrap version the template's CheckBootstrapVersion rule asks for: one above the
    highest version it refuses. None when the template has no such rule."""
    rule = template.get("Rules", {}).get("CheckBootstrapVersion")
    if not rule:
        return None
    refused: list[int] = []
    for assertion in rule.get("Assertions", []):
        condition = assertion.get("Assert", {}).get("Fn::Not", [{}])[0].get("Fn::Contains", [[]])
        refused += [int(v) for v in condition[0] if str(v).isdigit()]
    return max(refused) + 1 if refused else None


# --- the checks ---


def quota_increase(value: int) -> str:
    return (
        "aws service-quotas request-service-quota-increase --service-code lambda "
        f"--quota-code {LAMBDA_CONCURRENCY_QUOTA} --desired-value {value}  (console: Service Quotas > "
        "AWS Lambda > Concurrent executions > Request increase)"
    )


def check_lambda_concurrency(plan: Plan, facts: AccountFacts) -> Check:
    """The account's Lambda concurrency against what the stack reserves and assumes."""
    name = "lambda concurrency"
    if facts.lambda_quota is None or facts.lambda_unreserved is None:
        return Check(
            name=name,
            status=Status.BLOCKED,
            detail=f"could not read GetAccountSettings: {facts.errors.get('lambda', 'no answer')}",
            fix="allow lambda:GetAccountSettings for these credentials, then run the preflight again",
        )
    reserving = sum(plan.reserved.values())
    # A redeploy gives back what the stack's functions reserve today before reserving again.
    left = facts.lambda_unreserved + facts.reserved_by_stack_now - reserving
    needed = reserving + plan.worker_ceilings + UNRESERVED_MINIMUM
    found = (
        f"quota {facts.lambda_quota}, unreserved {facts.lambda_unreserved}; the stack reserves "
        f"{reserving}, worker ceilings {plan.worker_ceilings}"
    )
    if reserving and left < UNRESERVED_MINIMUM:  # nothing reserved: nothing for Lambda to refuse
        return Check(
            name=name,
            status=Status.BLOCKED,
            detail=f"{found}: only {left} would stay unreserved, Lambda keeps {UNRESERVED_MINIMUM}",
            fix=f"{quota_increase(max(needed, facts.lambda_quota + UNRESERVED_MINIMUM - left))}; or deploy "
            "with -c accountConcurrency=0 -c workerReservedConcurrency=0 -c apiReservedConcurrency=0 "
            "(reserves nothing)",
        )
    if plan.account_concurrency > facts.lambda_quota:
        return Check(
            name=name,
            status=Status.BLOCKED,
            detail=f"{found}: the stack is sized for accountConcurrency {plan.account_concurrency}, "
            f"above the account's {facts.lambda_quota}",
            fix=f"deploy with -c accountConcurrency={facts.lambda_quota} (synth then says whether the "
            f"reservations fit), or raise the quota: {quota_increase(plan.account_concurrency)}",
        )
    unlock = "" if plan.account_concurrency else _tick_reservations_unlocked(plan, facts, needed, left)
    if needed > facts.lambda_quota:
        return Check(
            name=name,
            status=Status.WARN,
            detail=f"{found}: at full load the workers would be throttled before their ceilings{unlock}",
            fix=quota_increase(needed),
        )
    if unlock:
        return Check(
            name=name,
            status=Status.INFO,
            detail=f"{found}{unlock}",
            fix=f"deploy with -c accountConcurrency={facts.lambda_quota}"
            if _ticks_fit(plan, facts, needed, left)
            else quota_increase(needed + sum(plan.tick_reservations.values())),
        )
    return Check(name=name, status=Status.OK, detail=found)


def _ticks_fit(plan: Plan, facts: AccountFacts, needed: int, left: int) -> bool:
    """Whether the account could hold the scheduled functions' reservations too."""
    ticks = sum(plan.tick_reservations.values())
    quota = facts.lambda_quota or 0
    return needed + ticks <= quota and left - ticks >= UNRESERVED_MINIMUM


def _tick_reservations_unlocked(plan: Plan, facts: AccountFacts, needed: int, left: int) -> str:
    """What accountConcurrency would reserve, said of a stack deployed without it: a setting
    this account's quota allows, or the quota that would allow it."""
    if not plan.tick_reservations:
        return ""
    ticks = sum(plan.tick_reservations.values())
    each = " and ".join(f"{n} for the {name}" for name, n in plan.tick_reservations.items())
    if _ticks_fit(plan, facts, needed, left):
        return (
            f"; accountConcurrency is 0, so the ticks reserve nothing: -c accountConcurrency="
            f"{facts.lambda_quota} would reserve {each}, so a burst of workers or API calls "
            "cannot throttle a tick (this quota holds it)"
        )
    return (
        f"; accountConcurrency is 0, so the ticks reserve nothing: reserving {each} "
        f"(-c accountConcurrency=<quota>) needs a quota of {needed + ticks}"
    )


def check_api_gateway_role(plan: Plan, facts: AccountFacts) -> Check:
    """A stage that logs needs the account's API Gateway CloudWatch role."""
    name = "api gateway logging role"
    if not plan.stage_logging:
        return Check(name=name, status=Status.OK, detail="the stage writes no logs: not needed")
    if plan.creates_account_role:
        current = facts.api_gateway_role_arn
        own = facts.own_account_role
        if current and not (own and current.endswith(f":role/{own}")):
            return Check(
                name=name,
                status=Status.WARN,
                detail=f"the stack sets the account's role to its own (apiGatewayAccountRole), "
                f"replacing {current} for every API of this account and region (the same "
                "AWS-managed policy; the stack's role is kept on destroy)",
                fix=f"to keep {current}, deploy with -c apiGatewayAccountRole=false",
            )
        return Check(
            name=name,
            status=Status.OK,
            detail="the stack sets the account's role itself (apiGatewayAccountRole)"
            + ("" if current else ": this region has none yet"),
        )
    if facts.api_gateway_role_arn:
        return Check(name=name, status=Status.OK, detail=f"cloudwatchRoleArn {facts.api_gateway_role_arn}")
    read_error = facts.errors.get("apigateway")
    return Check(
        name=name,
        status=Status.BLOCKED,
        detail=(
            f"could not read apigateway get-account: {read_error}"
            if read_error
            else "no CloudWatch role in this account and region: the stage's logging fails the deploy"
        ),
        fix=(
            "aws iam create-role --role-name APIGatewayCloudWatchLogs --assume-role-policy-document "
            '\'{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":'
            '{"Service":"apigateway.amazonaws.com"},"Action":"sts:AssumeRole"}]}\' && '
            "aws iam attach-role-policy --role-name APIGatewayCloudWatchLogs --policy-arn "
            "arn:aws:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs && "
            "aws apigateway update-account --patch-operations "
            f"op=replace,path=/cloudwatchRoleArn,value=arn:aws:iam::{facts.account or '<account>'}:role/"
            "APIGatewayCloudWatchLogs ; or deploy with -c apiGatewayAccountRole=true (the stack then owns "
            "the account-wide role)"
        ),
    )


def check_alarm_subscriber(plan: Plan) -> Check:
    """Someone gets the alarms: alarmEmail, or alarmsWithoutSubscriber said outright."""
    name = "alarm subscriber"
    if plan.missing_subscriber:
        return Check(
            name=name,
            status=Status.WARN,
            detail="no alarm reaches anyone: the stack deploys, but its alarms notify a topic nobody reads",
            fix=plan.missing_subscriber,
        )
    if plan.alarm_email:
        return Check(name=name, status=Status.OK, detail=f"the alarms notify {plan.alarm_email}")
    return Check(
        name=name,
        status=Status.OK,
        detail="alarmsWithoutSubscriber: you subscribe to the AlarmTopicArn output yourself",
    )


def check_bootstrap(plan: Plan, facts: AccountFacts) -> Check:
    """The CDK bootstrap stack's version against what the template requires."""
    name = "cdk bootstrap"
    target = f"aws://{facts.account or '<account>'}/{facts.region or '<region>'}"
    qualifier = (
        "" if plan.bootstrap_qualifier == DEFAULT_QUALIFIER else f" --qualifier {plan.bootstrap_qualifier}"
    )
    fix = f"npx cdk bootstrap {target}{qualifier}"
    parameter = f"/cdk-bootstrap/{plan.bootstrap_qualifier}/version"
    required = plan.bootstrap_required or 0
    if facts.bootstrap_version is None:
        error = facts.errors.get("ssm")
        return Check(
            name=name,
            status=Status.BLOCKED,
            detail=f"could not read {parameter}: {error}"
            if error
            else f"not bootstrapped ({parameter} missing)",
            fix=fix,
        )
    if facts.bootstrap_version < required:
        return Check(
            name=name,
            status=Status.BLOCKED,
            detail=f"version {facts.bootstrap_version}, the template requires {required}",
            fix=f"{fix}  (upgrades the bootstrap stack in place)",
        )
    return Check(
        name=name, status=Status.OK, detail=f"version {facts.bootstrap_version} (requires {required})"
    )


def check_quotas(plan: Plan, facts: AccountFacts) -> list[Check]:
    """DynamoDB (tables, indexes, throughput) and SQS (in-flight messages) against what the
    config needs; Lambda's concurrency is check_lambda_concurrency."""
    checks: list[Check] = []
    tables = facts.quotas.get(DYNAMODB_TABLES_QUOTA) or QuotaReading(
        value=ASSUMED_DEFAULTS[DYNAMODB_TABLES_QUOTA], read=False
    )
    how = (
        "read from Service Quotas"
        if tables.read
        else "assumed default, Service Quotas did not answer; check with aws service-quotas "
        f"get-service-quota --service-code dynamodb --quota-code {DYNAMODB_TABLES_QUOTA}"
    )
    checks.append(
        Check(
            name="dynamodb tables",
            status=Status.OK if plan.tables <= tables.value else Status.BLOCKED,
            detail=f"the stack creates {plan.tables} of at most {int(tables.value)} per region ({how})",
            fix=None
            if plan.tables <= tables.value
            else "Service Quotas > Amazon DynamoDB > Maximum number of tables",
        )
    )
    most = max(plan.gsis_per_table.values(), default=0)
    checks.append(
        Check(
            name="dynamodb indexes",
            status=Status.OK if most <= GSIS_PER_TABLE else Status.BLOCKED,
            detail=f"at most {most} global secondary indexes a table, of {GSIS_PER_TABLE} (assumed default)",
        )
    )
    limits = facts.dynamodb_limits
    if not limits:
        checks.append(
            Check(
                name="dynamodb throughput",
                status=Status.WARN,
                detail=f"could not read DescribeLimits: {facts.errors.get('dynamodb', 'no answer')}",
                fix="aws dynamodb describe-limits",
            )
        )
    elif plan.billing_mode == "provisioned":
        per_table, per_account = limits["TableMaxWriteCapacityUnits"], limits["AccountMaxWriteCapacityUnits"]
        tables_and_indexes = plan.tables + sum(plan.gsis_per_table.values())
        peak = max(plan.provisioned_max.values())
        total = peak * tables_and_indexes
        fits = peak <= per_table and total <= per_account
        checks.append(
            Check(
                name="dynamodb throughput",
                status=Status.OK if fits else Status.BLOCKED,
                detail=f"provisioned: up to {peak} units on each of {tables_and_indexes} tables and indexes "
                f"({total} in all); the account allows {per_table} a table, {per_account} in all",
                fix=None
                if fits
                else "lower provisionedCapacity maxRead/maxWrite, or Service Quotas > Amazon "
                "DynamoDB > table-level and account-level throughput",
            )
        )
    else:
        checks.append(
            Check(
                name="dynamodb throughput",
                status=Status.INFO,
                detail=f"on-demand: each table may take up to {limits['TableMaxReadCapacityUnits']} read and "
                f"{limits['TableMaxWriteCapacityUnits']} write units a second (DescribeLimits); a new table "
                "starts warm at 4,000 writes a second (the 1M-burst preset needs more: "
                "docs/design/performance.md)",
            )
        )
    if facts.rules_in_use is not None:
        total = facts.rules_in_use + plan.rules
        checks.append(
            Check(
                name="eventbridge rules",
                status=Status.OK if total <= RULES_PER_EVENT_BUS else Status.WARN,
                detail=f"the stack adds {plan.rules} rules to the {facts.rules_in_use} on the default bus "
                f"(a redeploy counts its own twice), of {RULES_PER_EVENT_BUS} (assumed default; aws "
                "service-quotas list-service-quotas --service-code events shows yours)",
                fix=None
                if total <= RULES_PER_EVENT_BUS
                else "raise shardsPerSweep (fewer sweeper targets), or Service Quotas > Amazon EventBridge > "
                "Maximum number of rules",
            )
        )
    in_flight = plan.worker_ceilings * plan.worker_batch
    checks.append(
        Check(
            name="sqs in flight",
            status=Status.OK if in_flight < SQS_IN_FLIGHT_PER_QUEUE else Status.WARN,
            detail=f"workers hold at most {in_flight} messages at once (ceilings x batch), plus every run "
            f"deferred in place; a standard queue holds {SQS_IN_FLIGHT_PER_QUEUE} in flight (fixed; "
            "ApproximateNumberOfMessagesNotVisible shows it)",
        )
    )
    return checks


def check_shard_count(plan: Plan, facts: AccountFacts) -> Check:
    """The config's shardCount against the highest shard count in use in the deployed table."""
    name = "shard count"
    if facts.recorded_shard_count is None:
        detail = (
            f"shardCount {plan.shard_count}; none recorded yet"
            if facts.stack_exists
            else f"shardCount {plan.shard_count}; no stack {plan.stack_name} yet (first deploy)"
        )
        error = facts.errors.get("shards")
        if error:
            return Check(
                name=name,
                status=Status.WARN,
                detail=f"could not read the shard count in use: {error}",
                fix="allow dynamodb:GetItem on the definitions table and cloudformation:ListStackResources",
            )
        return Check(name=name, status=Status.OK, detail=detail)
    if plan.shard_count < facts.recorded_shard_count:
        return Check(
            name=name,
            status=Status.BLOCKED,
            detail=f"shardCount {plan.shard_count} is below {facts.recorded_shard_count}, the highest "
            "in use: jobs stored in the shards above would be swept only by the sweeper's fallback, "
            "with an alarm",
            fix=f"deploy with -c shardCount={facts.recorded_shard_count} (or higher); to lower it, "
            "follow docs/operate/deploy.md: Resharding",
        )
    return Check(
        name=name,
        status=Status.OK,
        detail=f"shardCount {plan.shard_count}, highest in use {facts.recorded_shard_count}",
    )


def check_migrations(plan: Plan, facts: AccountFacts) -> Check:
    """What the deploy would do to the deployed tables and grants parameter that CloudFormation
    cannot do in one update (infra.migrations): replace a table, two index changes at once
    (a skipped release), a stream view type or TTL attribute changed, warm throughput lowered,
    an advanced parameter made standard."""
    name = "migrations"
    if facts.deployed is None:
        error = facts.errors.get("deployed")
        if error:
            return Check(
                name=name,
                status=Status.WARN,
                detail=f"could not read what is deployed ({error}): only the released snapshot "
                "was compared (make test), which a stack that skipped a release is not",
                fix="allow cloudformation:ListStackResources and GetTemplate, dynamodb:DescribeTable "
                "and DescribeTimeToLive, ssm:DescribeParameters, then run the preflight again",
            )
        return Check(
            name=name, status=Status.OK, detail=f"no stack {plan.stack_name} yet: nothing to migrate"
        )
    problems = deployed_problems(facts.deployed, plan.table_shapes, plan.parameter_tiers)
    if problems:
        return Check(
            name=name,
            status=Status.BLOCKED,
            detail=" ".join(problems),
            fix="the steps above (docs/operate/upgrade.md)",
        )
    return Check(
        name=name,
        status=Status.OK,
        detail=f"against the deployed {plan.stack_name}: no table replaced, at most one index change "
        "a table, nothing DynamoDB or SSM would refuse halfway",
    )


def cost_at_rest(plan: Plan, prices: dict[str, float]) -> Check:
    """What the stack bills a month with no traffic at all, and the assumptions behind it."""
    fixed = {
        "alarms": plan.alarms * AT_REST_PRICES["alarm_month"],
        "kms keys": plan.kms_keys * AT_REST_PRICES["kms_key_month"],
        "waf": plan.web_acls * AT_REST_PRICES["web_acl_month"]
        + plan.web_acl_rules * AT_REST_PRICES["web_acl_rule_month"],
        "dashboard": plan.dashboards * AT_REST_PRICES["dashboard_month"],
    }
    minutes = MINUTES_PER_MONTH
    invocations = sum(plan.ticks_per_minute.values()) * minutes
    gb_seconds = sum(
        n * minutes * IDLE_TICK_SECONDS * plan.memory_mb.get(name, 1024) / 1024
        for name, n in plan.ticks_per_minute.items()
    )
    ticks = {
        "ticks (lambda)": invocations * prices["lambda_request"]
        + gb_seconds * prices["lambda_gb_second_arm64"],
        "ticks (dynamodb reads)": invocations * IDLE_TICK_READ_UNITS * prices["dynamodb_read_request_unit"],
        "ticks (logs)": invocations * IDLE_TICK_LOG_BYTES / 1e9 * prices["cloudwatch_logs_ingest_gb"],
        # Each sent, received and deleted: three requests.
        "second ticks (sqs)": plan.second_ticks_per_minute * 3 * minutes * prices["sqs_standard_request"],
        "idle sqs polling": plan.polled_queues
        * IDLE_RECEIVES_PER_MINUTE
        * minutes
        * prices["sqs_standard_request"],
    }
    total = sum(fixed.values()) + sum(ticks.values())
    parts = ", ".join(f"{k} ${v:.2f}" for k, v in {**fixed, **ticks}.items() if v)
    retention = sorted({r for r in plan.log_groups.values() if r is not None})
    never = sum(1 for r in plan.log_groups.values() if r is None)
    detail = (
        f"about ${total:.2f}/month with no traffic: {parts}. Assumed: us-east-1 list prices "
        f"(bench/prices.json, infra/preflight.AT_REST_PRICES, unconfirmed ones included), 730 h, "
        f"{sum(plan.ticks_per_minute.values())} scheduled invocations a minute of "
        f"{IDLE_TICK_SECONDS * 1000:.0f} ms and {IDLE_TICK_READ_UNITS} read units each, "
        f"{IDLE_RECEIVES_PER_MINUTE} empty receives a minute per queue, free tiers ignored. "
        f"Storage grows with data: PITR on {plan.pitr_tables} tables ($0.20/GB-month on top of "
        f"$0.25/GB-month stored), {len(plan.log_groups)} log groups kept "
        f"{'/'.join(str(r) for r in retention) or '-'} days"
        + (f" ({never} never expire)" if never else "")
        + " at $0.03/GB-month"
    )
    return Check(name="cost at rest", status=Status.INFO, detail=detail)


def run_checks(plan: Plan, facts: AccountFacts, prices: dict[str, float]) -> list[Check]:
    """Every check, in the order they are printed."""
    return [
        check_lambda_concurrency(plan, facts),
        check_api_gateway_role(plan, facts),
        check_alarm_subscriber(plan),
        check_bootstrap(plan, facts),
        *check_quotas(plan, facts),
        check_shard_count(plan, facts),
        check_migrations(plan, facts),
        cost_at_rest(plan, prices),
    ]


def render(checks: list[Check]) -> str:
    """One line a check (`STATUS name: detail`), and its fix indented below it."""
    lines = []
    for check in checks:
        lines.append(f"{check.status.value:<7} {check.name}: {check.detail}")
        if check.fix and check.status is not Status.OK:
            lines.append(f"        fix: {check.fix}")
    blocked = sum(1 for c in checks if c.status is Status.BLOCKED)
    lines.append(
        f"preflight: {blocked} check(s) block the deploy"
        if blocked
        else "preflight: nothing blocks the deploy"
    )
    return "\n".join(lines)


def exit_code(checks: list[Check]) -> int:
    """1 when any check is BLOCKED, else 0."""
    return 1 if any(c.status is Status.BLOCKED for c in checks) else 0
