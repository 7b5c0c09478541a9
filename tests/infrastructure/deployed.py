"""A deployed stack of the template's stateful resources, in moto's CloudFormation: what the
migration gate, the preflight and the table adoption read as "what is deployed"."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

REGION = "us-east-1"
STACK = "Jobsched"
Client = Callable[[str], Any]


@contextlib.contextmanager
def moto_account(monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """A fresh moto account and region; yields a client factory (service name -> client)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        yield lambda service: boto3.client(service, region_name=REGION)  # type: ignore[call-overload]


def deployable(template: dict[str, Any], parameters: bool = True) -> dict[str, Any]:
    """The template's tables and (with `parameters`) grants parameter, as a stack moto's
    CloudFormation creates (the parameter's value, made of the deploy's own names, as a plain
    string)."""
    resources = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::DynamoDB::Table":
            resources[logical_id] = copy.deepcopy(resource)
        elif resource["Type"] == "AWS::SSM::Parameter" and parameters:
            resources[logical_id] = copy.deepcopy(resource)
            resources[logical_id]["Properties"]["Value"] = "{}"
    return {"Resources": resources}


def deploy(
    client: Client, template: dict[str, Any], stack_name: str = STACK, parameters: bool = True
) -> dict[str, str]:
    """A stack of the template's tables and (with `parameters`) grants parameter, TTL as the
    template sets it (moto's CloudFormation leaves TTL out); their physical names by logical id."""
    cloudformation = client("cloudformation")
    body = json.dumps(deployable(template, parameters))
    cloudformation.create_stack(StackName=stack_name, TemplateBody=body)
    resources = cloudformation.describe_stack_resources(StackName=stack_name)["StackResources"]
    names = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources}
    for logical_id, resource in template["Resources"].items():
        ttl = resource.get("Properties", {}).get("TimeToLiveSpecification")
        if resource["Type"] == "AWS::DynamoDB::Table" and ttl:
            client("dynamodb").update_time_to_live(TableName=names[logical_id], TimeToLiveSpecification=ttl)
    return names
