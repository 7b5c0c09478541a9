"""The preflight's reads: what infra.preflight checks, read from the account and region with
the caller's credentials. Every read is on its own: one that fails is recorded in
`AccountFacts.errors` (and reported by its check), never raised."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from jobsched.cdk.names import table_logical_id
from jobsched.store.definitions import SHARD_COUNT_ITEM
from jobsched.store.schema import DEFINITIONS

from .migrations import read_deployed, stack_resources
from .preflight import DYNAMODB_TABLES_QUOTA, AccountFacts, Plan, QuotaReading

# Clients by service name: boto3.Session.client, or a test's moto-backed one.
ClientFactory = Callable[[str], Any]
AWS_ERRORS = (ClientError, BotoCoreError)


def _error(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code')}: {error.get('Message')}"
    return str(exc)


def read_facts(client: ClientFactory, plan: Plan) -> AccountFacts:
    """Everything the checks need, read once. Takes a client factory (service name -> client)."""
    facts: dict[str, Any] = {"errors": {}, "quotas": {}}
    errors: dict[str, str] = facts["errors"]
    try:
        identity = client("sts").get_caller_identity()
        facts["account"] = identity.get("Account")
    except AWS_ERRORS as exc:
        errors["sts"] = _error(exc)
    lambda_client = client("lambda")
    facts["region"] = lambda_client.meta.region_name
    try:
        limit = lambda_client.get_account_settings()["AccountLimit"]
        facts["lambda_quota"] = int(limit["ConcurrentExecutions"])
        facts["lambda_unreserved"] = int(limit["UnreservedConcurrentExecutions"])
    except AWS_ERRORS as exc:
        errors["lambda"] = _error(exc)
    try:
        facts["api_gateway_role_arn"] = client("apigateway").get_account().get("cloudwatchRoleArn")
    except AWS_ERRORS as exc:
        errors["apigateway"] = _error(exc)
    try:
        parameter = f"/cdk-bootstrap/{plan.bootstrap_qualifier}/version"
        facts["bootstrap_version"] = int(client("ssm").get_parameter(Name=parameter)["Parameter"]["Value"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ParameterNotFound":
            errors["ssm"] = _error(exc)
    except BotoCoreError as exc:
        errors["ssm"] = _error(exc)
    dynamodb = client("dynamodb")
    try:
        limits = dynamodb.describe_limits()
        facts["dynamodb_limits"] = {k: int(v) for k, v in limits.items() if k != "ResponseMetadata"}
    except AWS_ERRORS as exc:
        errors["dynamodb"] = _error(exc)
    try:
        pages = client("events").get_paginator("list_rules").paginate(EventBusName="default")
        facts["rules_in_use"] = sum(len(page.get("Rules", [])) for page in pages)
    except AWS_ERRORS as exc:
        errors["events"] = _error(exc)
    quotas = client("service-quotas")
    try:
        quota = quotas.get_service_quota(ServiceCode="dynamodb", QuotaCode=DYNAMODB_TABLES_QUOTA)["Quota"]
        facts["quotas"][DYNAMODB_TABLES_QUOTA] = QuotaReading(value=float(quota["Value"]), read=True)
    except AWS_ERRORS as exc:
        errors["service-quotas"] = _error(exc)
    facts.update(_read_stack(client, plan, lambda_client, dynamodb, errors))
    try:
        facts["deployed"] = read_deployed(client, plan.stack_name)
    except AWS_ERRORS as exc:
        errors["deployed"] = _error(exc)
    return AccountFacts(**facts)


def _read_stack(
    client: ClientFactory, plan: Plan, lambda_client: Any, dynamodb: Any, errors: dict[str, str]
) -> dict[str, Any]:
    """A deployed stack's reservations today and the shard count recorded in its table. Reads
    every page of the stack's resources (ListStackResources): DescribeStackResources answers
    the first 100 only, and the stack has more."""
    try:
        resources = stack_resources(client("cloudformation"), plan.stack_name)
    except AWS_ERRORS as exc:
        errors["shards"] = _error(exc)
        return {}
    if resources is None:
        return {"stack_exists": False}
    physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId") for r in resources}
    found: dict[str, Any] = {"stack_exists": True}
    reserved = 0
    for logical_id in plan.reserved:
        name = physical.get(logical_id)
        if not name:
            continue
        try:
            current = lambda_client.get_function_concurrency(FunctionName=name)
            reserved += int(current.get("ReservedConcurrentExecutions") or 0)
        except AWS_ERRORS as exc:
            errors["lambda-reserved"] = _error(exc)
    found["reserved_by_stack_now"] = reserved
    if plan.account_role:
        found["own_account_role"] = physical.get(plan.account_role)
    table = physical.get(table_logical_id(DEFINITIONS))
    if table:
        try:
            item = dynamodb.get_item(
                TableName=table, Key={"job_id": {"S": SHARD_COUNT_ITEM}}, ConsistentRead=True
            ).get("Item")
            if item and "highest_shard_count" in item:
                found["recorded_shard_count"] = int(item["highest_shard_count"]["N"])
        except AWS_ERRORS as exc:
            errors["shards"] = _error(exc)
    return found
