"""Local mode end to end: its JSON config's `tenant_targets` grant each tenant its own queues
(tests/e2e/conftest.py), the API refuses another tenant's, and a run reaches its own, or a
queue in the tenant's own account through its role (moto's STS hands out that account's
credentials; it evaluates no trust policy, see docs/design/security.md)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import boto3
import pytest
from jobsched_cli.client import ApiClient, ApiError

from .helpers import instant, runs_in, unique
from .targets import Target

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]  # reaches into local mode's moto

TENANT_ROLE = "arn:aws:iam::222222222222:role/e2e-tenant-a"


def moto(target: Target, service: str, **credentials: str) -> Any:
    runtime = target.runtime
    return boto3.client(  # type: ignore[call-overload]
        service, endpoint_url=runtime.moto.url, region_name=runtime.config.region, **credentials
    )


def canonical(url: str) -> str:
    """moto's queue URL as the API takes it (moto finds a queue by account and name)."""
    account, name = url.rstrip("/").split("/")[-2:]
    return f"https://sqs.us-east-1.amazonaws.com/{account}/{name}"


def receive(sqs: Any, url: str, target: Target) -> list[dict[str, Any]]:
    return target.wait(
        lambda: sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []),
        what="the run's message in the queue",
    )


def one_run(client: ApiClient, target_spec: dict[str, Any]) -> dict[str, Any]:
    return client.create_job(
        {"name": unique("grants"), "type": "grants.e2e", "runAt": instant(), "target": target_spec}
    )


def test_a_tenant_reaches_its_granted_queue_and_not_another_tenants(
    target: Target, client_a: ApiClient, client_b: ApiClient
) -> None:
    sqs = moto(target, "sqs")
    url = sqs.create_queue(QueueName=unique("e2e-grants-a"))["QueueUrl"]
    spec = {"kind": "sqs", "queueUrl": canonical(url)}
    with pytest.raises(ApiError) as refused:
        one_run(client_b, spec)
    assert refused.value.status == 403 and refused.value.code == "target_not_granted"
    assert refused.value.errors[0].field == "target.queueUrl"

    job = one_run(client_a, spec)
    (message,) = receive(sqs, url, target)
    assert json.loads(message["Body"])["jobId"] == job["jobId"]
    target.wait(lambda: runs_in(client_a, job["jobId"], "SUCCEEDED"), what="the run to succeed")


def test_a_role_target_lands_in_the_tenants_own_account(target: Target, client_a: ApiClient) -> None:
    credentials = moto(target, "sts").assume_role(RoleArn=TENANT_ROLE, RoleSessionName="e2e")["Credentials"]
    own = moto(
        target,
        "sqs",
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )
    url = own.create_queue(QueueName=unique("own"))["QueueUrl"]
    assert "/222222222222/" in url
    job = one_run(
        client_a, {"kind": "sqs", "queueUrl": canonical(url), "roleArn": TENANT_ROLE}
    )  # no grant needed
    (message,) = receive(own, url, target)
    assert json.loads(message["Body"])["runKey"].startswith(job["jobId"] + "@")
    target.wait(lambda: runs_in(client_a, job["jobId"], "SUCCEEDED"), what="the run to succeed")


def foreign_targets(target: Target) -> dict[str, dict[str, Any]]:
    """Tenant B's resource of each kind (its queue, machine and bus exist in moto)."""
    sqs = moto(target, "sqs")
    queue = sqs.create_queue(QueueName=unique("e2e-grants-b"))["QueueUrl"]
    machine = moto(target, "stepfunctions").create_state_machine(
        name=unique("e2e-grants-b"),
        definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
        roleArn="arn:aws:iam::123456789012:role/flow",
    )["stateMachineArn"]
    bus = unique("e2e-grants-b")
    moto(target, "events").create_event_bus(Name=bus)
    return {
        "target.functionArn": {
            "kind": "lambda",
            "functionArn": f"arn:aws:lambda:us-east-1:123456789012:function:{unique('e2e-grants-b')}",
        },
        "target.queueUrl": {"kind": "sqs", "queueUrl": canonical(queue)},
        "target.stateMachineArn": {"kind": "stepfunctions", "stateMachineArn": machine},
        "target.eventBusName": {"kind": "eventbridge", "eventBusName": bus},
    }


def test_no_kind_of_another_tenants_target_is_accepted(target: Target, client_a: ApiClient) -> None:
    for field, spec in foreign_targets(target).items():
        with pytest.raises(ApiError) as refused:
            one_run(client_a, spec)
        assert refused.value.status == 403 and refused.value.errors[0].field == field, field


def test_a_granted_machine_and_bus_get_the_run(target: Target, client_a: ApiClient) -> None:
    states, events, sqs = moto(target, "stepfunctions"), moto(target, "events"), moto(target, "sqs")
    machine = states.create_state_machine(
        name=unique("e2e-grants-a"),
        definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
        roleArn="arn:aws:iam::123456789012:role/flow",
    )["stateMachineArn"]
    bus = unique("e2e-grants-a")
    events.create_event_bus(Name=bus)
    inbox = sqs.create_queue(QueueName=unique("events"))["QueueUrl"]
    inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(
        Name="all", EventBusName=bus, EventPattern=json.dumps({"source": [{"prefix": "jobsched."}]})
    )
    events.put_targets(Rule="all", EventBusName=bus, Targets=[{"Id": "q", "Arn": inbox_arn}])

    started = one_run(client_a, {"kind": "stepfunctions", "stateMachineArn": machine})
    sent = one_run(client_a, {"kind": "eventbridge", "eventBusName": bus})
    for job in (started, sent):
        target.wait(partial(runs_in, client_a, job["jobId"], "SUCCEEDED"), what="the run to succeed")
    (execution,) = states.list_executions(stateMachineArn=machine)["executions"]
    assert execution["name"].startswith(started["jobId"])
    (message,) = receive(sqs, inbox, target)
    event = json.loads(message["Body"])
    assert event["detail"]["jobId"] == sent["jobId"]
    assert event["source"].startswith("jobsched.") and len(event["source"]) == 41  # tenant-a's own
