"""The synthesized template deployed into moto's CloudFormation: what moto creates keeps the
template's properties, and what moto skips or drops is written down here, so the gap between
this proof and a real deploy stays visible (`make e2e-aws` is the proof on AWS).

Both lists are checked: a resource type moto starts creating, a property it starts keeping
(or stops keeping) fails the test until the list says so."""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.infrastructure.synth import render

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's
ASSETS_BUCKET = f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"
BOOTSTRAP_VERSION = "/cdk-bootstrap/hnb659fds/version"
# moto warns once per resource it skips; SKIPPED_TYPES below is where that is checked.
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")

# Resource types moto's CloudFormation does not create (it logs "No Moto CloudFormation
# support" and goes on): none of these is proven here.
SKIPPED_TYPES = {
    "AWS::ApiGateway::Account",
    "AWS::ApiGateway::GatewayResponse",
    "AWS::ApiGateway::Model",
    "AWS::ApiGateway::RequestValidator",
    "AWS::ApiGateway::Stage",
    "AWS::CloudWatch::Alarm",
    "AWS::Lambda::EventInvokeConfig",
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::WAFv2::WebACL",
    "AWS::WAFv2::WebACLAssociation",
}
# Properties moto creates the resource without (what it reports instead is its default).
DROPPED_PROPERTIES = {
    ("AWS::Lambda::Function", "Architectures"),  # x86_64
    ("AWS::Lambda::Function", "Layers"),  # none
    ("AWS::Lambda::Function", "TracingConfig"),  # PassThrough
    ("AWS::DynamoDB::Table", "TimeToLiveSpecification"),  # DISABLED
    ("AWS::DynamoDB::Table", "PointInTimeRecoverySpecification"),  # DISABLED
}


def for_moto(template: dict[str, Any]) -> dict[str, Any]:
    """The template as moto's CloudFormation reads it, where moto parses what CloudFormation
    accepts differently: an archive's EventPattern as a JSON string (moto json-parses it;
    CloudFormation takes the object or the string), and a `Ref` of an event bus as the bus's
    name (what CloudFormation resolves it to; moto resolves it to its own model object)."""
    buses = {
        logical_id: resource["Properties"]["Name"]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Events::EventBus"
    }

    def resolved(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"Ref"} and value["Ref"] in buses:
                return buses[value["Ref"]]
            return {k: resolved(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolved(v) for v in value]
        return value

    copied = resolved(json.loads(json.dumps(template)))
    for resource in copied["Resources"].values():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Events::Archive" and isinstance(props.get("EventPattern"), dict):
            props["EventPattern"] = json.dumps(props["EventPattern"])
    return copied


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("placeholder.py", "")
    return buffer.getvalue()


def _asset_keys(template: dict[str, Any]) -> set[str]:
    keys = set()
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        for code in (props.get("Code"), props.get("Content")):
            if isinstance(code, dict) and isinstance(code.get("S3Key"), str):
                keys.add(code["S3Key"])
    return keys


@pytest.fixture(scope="module")
def deployed(synth) -> Any:
    """The session template, created in moto as `cdk deploy` would (assets in the bootstrap
    bucket, the bootstrap version in SSM); yields (clients, created resources by logical id)."""
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=ASSETS_BUCKET)
        for key in _asset_keys(synth.template):
            s3.put_object(Bucket=ASSETS_BUCKET, Key=key, Body=_zip())
        ssm = boto3.client("ssm", region_name=REGION)
        ssm.put_parameter(Name=BOOTSTRAP_VERSION, Value="30", Type="String")
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        cloudformation.create_stack(
            StackName="Jobsched",
            TemplateBody=json.dumps(for_moto(synth.template)),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
        )
        (stack,) = cloudformation.describe_stacks(StackName="Jobsched")["Stacks"]
        created = {}
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName="Jobsched"):
            created.update({r["LogicalResourceId"]: r for r in page["StackResourceSummaries"]})
        # moto lists one empty summary besides the resources (no logical id, type or physical id).
        assert set(created) - set(synth.resources) <= {""}
        created.pop("", None)
        yield {
            "stack": stack,
            "created": created,
            "client": lambda name: boto3.client(name, region_name=REGION),
        }


def test_moto_creates_the_stack_and_skips_exactly_the_listed_types(synth, deployed):
    assert deployed["stack"]["StackStatus"] == "CREATE_COMPLETE"
    created = deployed["created"]
    assert {r["ResourceStatus"] for r in created.values()} == {"CREATE_COMPLETE"}
    resources = synth.resources
    skipped = Counter(r["Type"] for logical_id, r in resources.items() if logical_id not in created)
    assert set(skipped) == SKIPPED_TYPES, dict(skipped)
    # A skipped type is skipped whole: none of its resources was created.
    assert not [k for k in created if resources[k]["Type"] in SKIPPED_TYPES]
    assert len(created) + sum(skipped.values()) == len(resources)


def physical(synth, deployed, kind: str) -> dict[str, str]:
    """Logical id -> the physical id moto gave each created resource of `kind`."""
    return {
        logical_id: deployed["created"][logical_id]["PhysicalResourceId"]
        for logical_id in synth.of_type(kind)
        if logical_id in deployed["created"]
    }


def observe(synth, deployed) -> dict[tuple[str, str], bool]:
    """(type, property) -> whether moto kept it on every created resource of that type."""
    kept: dict[tuple[str, str], bool] = {}

    def record(kind: str, prop: str, ok: bool) -> None:
        kept[(kind, prop)] = kept.get((kind, prop), True) and ok

    lambda_ = deployed["client"]("lambda")
    kind = "AWS::Lambda::Function"
    functions = physical(synth, deployed, kind)
    assert len(functions) == len(synth.of_type(kind))
    for logical_id, name in functions.items():
        want = synth.props(logical_id)
        got = lambda_.get_function(FunctionName=name)["Configuration"]
        for prop in ("Runtime", "Handler", "MemorySize", "Timeout"):
            record(kind, prop, got.get(prop) == want[prop])
        record(kind, "Architectures", got.get("Architectures") == want["Architectures"])
        record(kind, "Layers", len(got.get("Layers", [])) == len(want["Layers"]))
        record(
            kind, "TracingConfig", got.get("TracingConfig", {}).get("Mode") == want["TracingConfig"]["Mode"]
        )
        plain = {k: v for k, v in want["Environment"]["Variables"].items() if isinstance(v, str)}
        variables = got.get("Environment", {}).get("Variables", {})
        record(kind, "Environment", all(variables.get(k) == v for k, v in plain.items()))

    dynamodb = deployed["client"]("dynamodb")
    kind = "AWS::DynamoDB::Table"
    tables = physical(synth, deployed, kind)
    assert len(tables) == len(synth.of_type(kind))
    for logical_id, name in tables.items():
        want = synth.props(logical_id)
        got = dynamodb.describe_table(TableName=name)["Table"]
        record(kind, "KeySchema", got["KeySchema"] == want["KeySchema"])
        indexes = {
            i["IndexName"]: (i["KeySchema"], i["Projection"]) for i in got.get("GlobalSecondaryIndexes", [])
        }
        wanted = {i["IndexName"]: (i["KeySchema"], i["Projection"]) for i in want["GlobalSecondaryIndexes"]}
        record(kind, "GlobalSecondaryIndexes", indexes == wanted)
        stream = got.get("StreamSpecification", {}).get("StreamViewType")
        record(
            kind, "StreamSpecification", stream == want.get("StreamSpecification", {}).get("StreamViewType")
        )
        record(kind, "DeletionProtectionEnabled", got.get("DeletionProtectionEnabled") is True)
        ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        record(
            kind,
            "TimeToLiveSpecification",
            ttl.get("TimeToLiveStatus") == "ENABLED"
            and ttl.get("AttributeName") == want["TimeToLiveSpecification"]["AttributeName"],
        )
        backups = dynamodb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
        pitr = backups.get("PointInTimeRecoveryDescription", {}).get("PointInTimeRecoveryStatus")
        record(kind, "PointInTimeRecoverySpecification", pitr == "ENABLED")

    sqs = deployed["client"]("sqs")
    kind = "AWS::SQS::Queue"
    queues = physical(synth, deployed, kind)
    assert len(queues) == len(synth.of_type(kind))
    for logical_id, url in queues.items():
        want = synth.props(logical_id)
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        record(
            kind,
            "MessageRetentionPeriod",
            got["MessageRetentionPeriod"] == str(want["MessageRetentionPeriod"]),
        )
        record(kind, "VisibilityTimeout", got["VisibilityTimeout"] == str(want.get("VisibilityTimeout", 30)))
        redrive = json.loads(got.get("RedrivePolicy", "null"))
        wanted_redrive = want.get("RedrivePolicy")
        record(
            kind,
            "RedrivePolicy",
            (redrive or {}).get("maxReceiveCount") == (wanted_redrive or {}).get("maxReceiveCount"),
        )

    events = deployed["client"]("events")
    kind = "AWS::Events::Rule"
    rules = physical(synth, deployed, kind)
    assert len(rules) == len(synth.of_type(kind))
    for logical_id, name in rules.items():
        want = synth.props(logical_id)
        rule_name = name.rsplit("/", 1)[-1]
        got = events.describe_rule(Name=rule_name)
        record(kind, "ScheduleExpression", got.get("ScheduleExpression") == want["ScheduleExpression"])
        targets = events.list_targets_by_rule(Rule=rule_name)["Targets"]
        record(kind, "Targets", len(targets) == len(want["Targets"]))
        record(
            kind,
            "Targets.DeadLetterConfig",
            all("DeadLetterConfig" in t for t in targets) and len(targets) == len(want["Targets"]),
        )
        record(
            kind,
            "Targets.RetryPolicy",
            all(
                t.get("RetryPolicy") == w["RetryPolicy"]
                for t, w in zip(targets, want["Targets"], strict=False)
            ),
        )
    return kept


def test_what_moto_creates_keeps_the_templates_properties_but_the_listed_ones(synth, deployed):
    kept = observe(synth, deployed)
    dropped = {prop for prop, ok in kept.items() if not ok}
    assert dropped == DROPPED_PROPERTIES, {
        "dropped now": dropped - DROPPED_PROPERTIES,
        "kept now": DROPPED_PROPERTIES - dropped,
    }
    # Every property listed is one the test reads, so the list cannot go stale unseen.
    assert set(kept) >= DROPPED_PROPERTIES
    assert len(kept) > 20


def test_the_deployed_functions_point_at_the_deployed_tables_and_queues(synth, deployed):
    """What the template wires by reference resolves to what moto made."""
    lambda_ = deployed["client"]("lambda")
    tables = set(physical(synth, deployed, "AWS::DynamoDB::Table").values())
    for name in physical(synth, deployed, "AWS::Lambda::Function").values():
        variables = lambda_.get_function(FunctionName=name)["Configuration"]["Environment"]["Variables"]
        assert {variables["DEFINITIONS_TABLE"], variables["RUNS_TABLE"]} == tables, render(name)
