"""No tenant reaches an AWS target it was not granted, through the real API and worker on moto.

Tenant A and tenant B each own a function, a queue, a state machine and an event bus, granted
to each by the operator. A cannot schedule B's (403 `target_not_granted` naming the field, at
create and at PATCH), and a job written while a grant held fails permanently, with no call
made, once the grant is revoked. A target with a `roleArn` is called with that role's
credentials, assumed with the tenant's ExternalId: moto's STS checks no trust policy, so a
stand-in for one (a role that trusts one ExternalId) is installed on the worker's STS client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from botocore.exceptions import ClientError
from jobsched import aws as aws_clients
from jobsched.domain.grants import own_event_source
from jobsched.domain.runs import RunState
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Received

from tests.helpers import ApiClient, grant

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
REGION = "us-east-1"
AT = "2026-11-02T08:00:00Z"
OTHER_ACCOUNT = "111111111111"  # tenant A's own account, where its role lives
ROLE_A = f"arn:aws:iam::{OTHER_ACCOUNT}:role/tenant-a-scheduler"


def resources(tenant: str) -> dict[str, dict[str, Any]]:
    """The target of each kind a tenant owns, and the ARN the operator grants for it."""
    short = tenant[-1]
    return {
        "lambda": {
            "target": {
                "kind": "lambda",
                "functionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{short}-report",
            },
            "field": "target.functionArn",
        },
        "sqs": {
            "target": {
                "kind": "sqs",
                "queueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{short}-inbox",
            },
            "field": "target.queueUrl",
        },
        "stepfunctions": {
            "target": {
                "kind": "stepfunctions",
                "stateMachineArn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{short}-flow",
            },
            "field": "target.stateMachineArn",
        },
        "eventbridge": {
            "target": {"kind": "eventbridge", "eventBusName": f"{short}-bus"},
            "field": "target.eventBusName",
        },
    }


GRANTED = {
    "tenant-a": [
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:a-*",
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:a-inbox",
        f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:a-flow",
        f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/a-bus",
    ],
    "tenant-b": [
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:b-*",
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:b-inbox",
        f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:b-flow",
        f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/b-bus",
    ],
}
KINDS = ("lambda", "sqs", "stepfunctions", "eventbridge")


class EffectLog:
    """Every call the worker's target clients make (moto runs no Lambda: Invoke is answered
    as a function would), with the access key it was signed with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any], str]] = []

    def watch(self, client: Any) -> Any:
        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            key = client._request_signer._credentials.access_key
            self.calls.append((model.service_model.service_name, model.name, dict(params), key))

        client.meta.events.register("before-parameter-build", record, unique_id="effect-log")
        client.meta.events.register("before-call.lambda.Invoke", _invoked, unique_id="effect-log-invoke")
        return client

    def operations(self) -> list[str]:
        return [operation for _, operation, _, _ in self.calls]


def _invoked(**_: Any) -> tuple[Any, dict[str, Any]]:
    import io

    from botocore.awsrequest import AWSResponse
    from botocore.response import StreamingBody

    body = b'{"ok": true}'
    parsed = {"StatusCode": 200, "Payload": StreamingBody(io.BytesIO(body), len(body))}
    return AWSResponse("https://lambda.invalid", 200, {}, None), parsed  # type: ignore[arg-type]


@pytest.fixture
def world(container, monkeypatch) -> Iterator[EffectLog]:
    """Both tenants' resources on moto, granted to each; the worker's effect calls logged."""
    sqs, states, events = boto3.client("sqs"), boto3.client("stepfunctions"), boto3.client("events")
    for short in ("a", "b"):
        sqs.create_queue(QueueName=f"{short}-inbox")
        states.create_state_machine(
            name=f"{short}-flow",
            definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/flow",
        )
        events.create_event_bus(Name=f"{short}-bus")
    log = EffectLog()
    effect, role_effect = aws_clients.effect_client, aws_clients.role_effect_client
    aws_clients._effect_client.cache_clear()
    monkeypatch.setattr(aws_clients, "effect_client", lambda s, t: log.watch(effect(s, t)))
    monkeypatch.setattr(aws_clients, "role_effect_client", lambda s, t, c: log.watch(role_effect(s, t, c)))
    grant(container, GRANTED, assumable_roles=("arn:aws:iam::*:role/tenant-*",))
    yield log
    aws_clients._effect_client.cache_clear()


def job(api: ApiClient, target: dict[str, Any], name: str = "j", **schedule: Any) -> Any:
    when = schedule or {"runAt": AT}
    return api.post("/v1/jobs", {"name": name, "type": "grants.test", **when, "target": target})


def run_once(container: Any, job_id: str) -> Any:
    key = f"{job_id}@{AT}"
    return key, container.worker.process(Received(key, job_id, AT, "default"))


# --- at write ---


@pytest.mark.parametrize("kind", KINDS)
def test_a_tenant_cannot_schedule_another_tenants_target(world, api, kind):
    theirs = resources("tenant-b")[kind]
    response = job(api, theirs["target"])
    assert response.status == 403, response
    assert response.body["code"] == "target_not_granted"
    assert response.body["errors"][0]["field"] == theirs["field"]
    assert "not granted to this tenant" in response.body["errors"][0]["rule"]
    assert api.get("/v1/jobs").body["items"] == []  # nothing was written
    assert job(api, resources("tenant-a")[kind]["target"]).status == 201  # its own is fine


@pytest.mark.parametrize("kind", KINDS)
def test_a_patch_cannot_aim_a_job_at_another_tenants_target(world, api, kind):
    created = job(api, resources("tenant-a")[kind]["target"], cron="0 9 * * *", timeZone="UTC").body
    theirs = resources("tenant-b")[kind]
    response = api.patch(
        f"/v1/jobs/{created['jobId']}", {"target": theirs["target"]}, headers={"If-Match": "1"}
    )
    assert response.status == 403, response
    assert response.body["errors"][0]["field"] == theirs["field"]
    assert api.get(f"/v1/jobs/{created['jobId']}").body["version"] == 1  # unchanged


def test_a_tenant_nobody_granted_anything_reaches_nothing(world, container):
    stranger = ApiClient("tenant-c")
    for kind in KINDS:
        assert job(stranger, resources("tenant-a")[kind]["target"]).status == 403
        assert job(stranger, resources("tenant-c")[kind]["target"]).status == 403


def test_the_openapi_document_lists_the_403(world, api):
    paths = api.get("/openapi.json").body["paths"]
    assert "403" in paths["/v1/jobs"]["post"]["responses"]
    assert "403" in paths["/v1/jobs/{job_id}"]["patch"]["responses"]


# --- before the effect ---


@pytest.mark.parametrize("kind", KINDS)
def test_a_granted_target_is_called_with_the_schedulers_own_role(world, api, container, kind):
    created = job(api, resources("tenant-a")[kind]["target"]).body
    key, result = run_once(container, created["jobId"])
    assert result.outcome is AttemptOutcome.SUCCEEDED, container.runs.get_by_key(key).last_error_message
    assert len(world.calls) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_revoked_grant_fails_the_run_permanently_with_no_call(world, api, container, kind):
    created = job(api, resources("tenant-a")[kind]["target"]).body
    grant(container, {**GRANTED, "tenant-a": []})  # the operator revokes A's grants
    key, result = run_once(container, created["jobId"])
    assert result.outcome is AttemptOutcome.DEAD
    run = container.runs.get_by_key(key)
    assert run.state is RunState.DEAD and run.attempt == 1  # permanent: never retried
    assert run.last_error_class == "TargetNotGranted"
    assert resources("tenant-a")[kind]["field"] in (run.last_error_message or "")
    assert world.calls == []
    detail = api.get(f"/v1/runs/{quote(key, safe='')}").body
    assert detail["lastErrorClass"] == "TargetNotGranted"


# --- EventBridge sources ---


def test_events_carry_the_tenants_own_source_by_default(world, api, container):
    created = job(api, resources("tenant-a")["eventbridge"]["target"]).body
    run_once(container, created["jobId"])
    ((_, _, params, _),) = world.calls
    assert params["Entries"][0]["Source"] == own_event_source("tenant-a")


@pytest.mark.parametrize(
    ("source", "status"),
    [
        (own_event_source("tenant-a"), 201),
        (own_event_source("tenant-a") + ".billing", 201),
        (own_event_source("tenant-b"), 403),  # another tenant's
        (own_event_source("tenant-b") + ".billing", 403),
        (own_event_source("tenant-a") + "0", 403),  # not below it: a longer name
        ("jobsched", 403),  # the old shared default
        ("aws.ec2", 403),
        ("com.acme.orders", 403),
    ],
)
def test_a_source_must_be_the_tenants_own(world, api, source, status):
    target = {**resources("tenant-a")["eventbridge"]["target"], "source": source}
    response = job(api, target)
    assert response.status == status, response
    if status == 403:
        assert response.body["errors"][0]["field"] == "target.source"


def test_the_operator_may_grant_a_source_and_revoke_it(world, api, container):
    grant(container, GRANTED, {"tenant-a": ["com.acme.*"]})
    target = {**resources("tenant-a")["eventbridge"]["target"], "source": "com.acme.orders"}
    created = job(api, target)
    assert created.status == 201, created
    assert (
        job(
            ApiClient("tenant-b"),
            {**resources("tenant-b")["eventbridge"]["target"], "source": "com.acme.orders"},
        ).status
        == 403
    )
    grant(container, GRANTED)  # revoked
    key, result = run_once(container, created.body["jobId"])
    assert result.outcome is AttemptOutcome.DEAD
    assert container.runs.get_by_key(key).last_error_class == "TargetNotGranted"
    assert world.calls == []


# --- a tenant's own role ---


class TrustPolicies:
    """Stands in for the trust policies moto does not evaluate: each role trusts one ExternalId,
    and refuses an AssumeRole without a SourceIdentity (sts:SetSourceIdentity)."""

    def __init__(self, trusts: dict[str, str]) -> None:
        self.trusts = trusts
        self.calls: list[dict[str, Any]] = []

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        self.calls.append(dict(params))
        if self.trusts.get(params["RoleArn"]) != params.get("ExternalId") or not params.get("SourceIdentity"):
            raise ClientError(
                {
                    "Error": {"Code": "AccessDenied", "Message": "not authorized to perform sts:AssumeRole"},
                    "ResponseMetadata": {
                        "HTTPStatusCode": 403,
                        "RequestId": "r",
                        "HostId": "h",
                        "HTTPHeaders": {},
                        "RetryAttempts": 0,
                    },
                },
                "AssumeRole",
            )


@pytest.fixture
def trust(world) -> Iterator[TrustPolicies]:
    policies = TrustPolicies({ROLE_A: "tenant-a"})
    sts = aws_clients.client("sts")
    sts.meta.events.register("before-parameter-build.sts.AssumeRole", policies, unique_id="trust")
    # The tenant's queue, in its own account (moto keeps accounts apart by access key).
    creds = boto3.client("sts").assume_role(RoleArn=ROLE_A, RoleSessionName="setup")["Credentials"]
    own = boto3.client(
        "sqs",
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )
    policies.queue_url = own.create_queue(QueueName="tenant-a-own")["QueueUrl"]  # type: ignore[attr-defined]
    policies.own_sqs = own  # type: ignore[attr-defined]
    yield policies
    sts.meta.events.unregister("before-parameter-build.sts.AssumeRole", unique_id="trust")


def test_a_role_target_is_called_with_the_role_assumed_for_the_tenant(trust, api, container, world):
    target = {"kind": "sqs", "queueUrl": trust.queue_url, "roleArn": ROLE_A}
    created = job(api, target)
    assert created.status == 201, created  # no grant needed: the role's trust decides
    key, result = run_once(container, created.body["jobId"])
    assert result.outcome is AttemptOutcome.SUCCEEDED, container.runs.get_by_key(key).last_error_message
    (assume,) = trust.calls
    assert assume["RoleArn"] == ROLE_A and assume["ExternalId"] == "tenant-a"
    assert assume["SourceIdentity"] == assume["RoleSessionName"] == own_event_source("tenant-a")
    ((service, operation, _, access_key),) = world.calls
    assert (service, operation) == ("sqs", "SendMessage")
    assert access_key != "testing"  # signed with the assumed role's key, not the worker's
    messages = trust.own_sqs.receive_message(QueueUrl=trust.queue_url)["Messages"]
    assert json.loads(messages[0]["Body"])["runKey"] == key  # it landed in the tenant's account


def test_the_assumed_credentials_are_reused_for_the_next_run(trust, api, container, world):
    target = {"kind": "sqs", "queueUrl": trust.queue_url, "roleArn": ROLE_A}
    first = job(api, target, "first").body["jobId"]
    second = job(api, target, "second").body["jobId"]
    assert run_once(container, first)[1].outcome is AttemptOutcome.SUCCEEDED
    assert run_once(container, second)[1].outcome is AttemptOutcome.SUCCEEDED
    assert len(trust.calls) == 1  # one AssumeRole for both runs
    assert len({key for *_, key in world.calls}) == 1


def test_another_tenant_naming_a_role_gets_it_assumed_with_its_own_external_id(
    trust, other_api, container, world
):
    """Tenant B names A's role: the worker asks with ExternalId tenant-b, which A's trust
    policy refuses: B's run dies AssumeRoleDenied and nothing is sent."""
    target = {"kind": "sqs", "queueUrl": trust.queue_url, "roleArn": ROLE_A}
    created = job(other_api, target)
    assert created.status == 201  # naming a role is allowed; using it is the role's decision
    key, result = run_once(container, created.body["jobId"])
    assert result.outcome is AttemptOutcome.DEAD
    run = container.runs.get_by_key(key)
    assert run.last_error_class == "AssumeRoleDenied" and run.attempt == 1
    assert "'tenant-b'" in (run.last_error_message or "")  # names the ExternalId the role must trust
    assert [c["ExternalId"] for c in trust.calls] == ["tenant-b"]
    assert world.calls == []


def test_a_role_the_operator_does_not_allow_is_refused_at_write(trust, api):
    target = {
        "kind": "sqs",
        "queueUrl": trust.queue_url,
        "roleArn": f"arn:aws:iam::{OTHER_ACCOUNT}:role/admin",
    }
    response = job(api, target)
    assert response.status == 403
    assert response.body["errors"][0]["field"] == "target.roleArn"


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_may_name_a_role(trust, api, container, world, kind):
    """With a role, another account's resource is no grant's business (the role's policy is)."""
    target = {**resources("tenant-b")[kind]["target"], "roleArn": ROLE_A}
    if kind == "eventbridge":
        target["source"] = "com.tenant-a.anything"  # the tenant's own bus, the tenant's own names
    created = job(api, target)
    assert created.status == 201, created
    run_once(container, created.body["jobId"])
    assert [c["ExternalId"] for c in trust.calls] == ["tenant-a"]
    assert world.calls and all(key != "testing" for *_, key in world.calls)


def test_a_malformed_role_arn_is_a_400(world, api):
    response = job(api, {**resources("tenant-a")["sqs"]["target"], "roleArn": "arn:aws:iam::1:role/x"})
    assert response.status == 400
    assert response.body["errors"][0]["field"].endswith("roleArn")


# --- upgrading: jobs written before grants (docs/design/security.md, Upgrading) ---


def test_a_job_from_before_grants_dies_at_its_run_until_it_is_granted_or_changed(world, api, container):
    """Before this release every AWS target was reachable and an event's `source` defaulted
    to `jobsched`, stored on the job. After the upgrade such a job's run is DEAD with no call
    (TargetNotGranted, naming the field), and every change of it is a 403 until its target is
    one the tenant may use; dropping the stored source gives it the tenant's own."""
    bus = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/a-bus"
    grant(container, GRANTED, {"tenant-a": ["jobsched"]})  # the job as the old release wrote it
    created = job(api, {"kind": "eventbridge", "eventBusName": bus, "source": "jobsched"}, every="PT1H")
    assert created.status == 201, created
    job_id = created.body["jobId"]
    grant(container, GRANTED)  # the upgrade: nothing beyond the tenant's own source
    key, result = run_once(container, job_id)  # a rate's first occurrence is its creation
    assert result.outcome is AttemptOutcome.DEAD
    run = container.runs.get_by_key(key)
    assert run.last_error_class == "TargetNotGranted" and "target.source" in (run.last_error_message or "")
    assert world.calls == []
    renamed = api.patch(f"/v1/jobs/{job_id}", {"name": "renamed"}, headers={"If-Match": "1"})
    assert renamed.status == 403 and renamed.body["errors"][0]["field"] == "target.source", renamed
    fixed = api.patch(f"/v1/jobs/{job_id}", {"target": {"source": None}}, headers={"If-Match": "1"})
    assert fixed.status == 200, fixed
    manual = api.post(f"/v1/jobs/{job_id}/trigger").body["runKey"]
    instant = manual.split("@", 1)[1]
    assert container.worker.process(Received(manual, job_id, instant, "default")).outcome is (
        AttemptOutcome.SUCCEEDED
    )
    ((_, _, params, _),) = world.calls
    assert params["Entries"][0]["Source"] == own_event_source("tenant-a")
    # The dead run keeps the target it was made with: its redrive dies again, until granted.
    redriven = api.post(f"/v1/runs/{quote(key, safe='')}/redrive", {})
    assert redriven.status == 200, redriven
    assert run_once(container, job_id)[1].outcome is AttemptOutcome.DEAD
    grant(container, GRANTED, {"tenant-a": ["jobsched"]})
    assert api.post(f"/v1/runs/{quote(key, safe='')}/redrive", {}).status == 200
    assert run_once(container, job_id)[1].outcome is AttemptOutcome.SUCCEEDED
    assert world.calls[-1][2]["Entries"][0]["Source"] == "jobsched"


# --- a redrive with a fix: the run's own target, checked as a job's is ---


def test_a_dead_one_time_run_gets_a_granted_target_only_by_its_redrive(world, api, container):
    """A one-time job is COMPLETED once its run is DEAD, so its target cannot be PATCHed: the
    redrive carries the corrected target, which passes the grants a job write passes."""
    created = job(api, resources("tenant-a")["sqs"]["target"]).body
    grant(container, {**GRANTED, "tenant-a": []})
    key, result = run_once(container, created["jobId"])
    assert result.outcome is AttemptOutcome.DEAD
    grant(container, GRANTED)
    job_url = f"/v1/jobs/{created['jobId']}"
    assert api.get(job_url).body["state"] == "COMPLETED"
    lambda_target = {"target": resources("tenant-a")["lambda"]["target"]}
    patched = api.patch(job_url, lambda_target, headers={"If-Match": "1"})
    assert patched.status == 409 and "redrive" in patched.body["message"], patched
    run_url = f"/v1/runs/{quote(key, safe='')}"
    before = api.get(run_url).body

    theirs = resources("tenant-b")["lambda"]
    refused = api.post(f"{run_url}/redrive", {"reason": "moved", "target": theirs["target"]})
    assert refused.status == 403 and refused.body["code"] == "target_not_granted", refused
    assert refused.body["errors"][0]["field"] == theirs["field"]
    assert api.get(run_url).body == before  # nothing written

    mine = resources("tenant-a")["lambda"]["target"]
    redriven = api.post(f"{run_url}/redrive", {"reason": "moved", "target": mine})
    assert redriven.status == 200, redriven
    assert run_once(container, created["jobId"])[1].outcome is AttemptOutcome.SUCCEEDED
    ((service, operation, params, _),) = world.calls
    assert (service, operation, params["FunctionName"]) == ("lambda", "Invoke", mine["functionArn"])
    detail = api.get(run_url).body
    assert detail["target"]["functionArn"] == mine["functionArn"]
    redrive = next(t for t in detail["transitions"] if t["to"] == "PENDING" and t["from"] == "DEAD")
    assert f"target replaced: lambda {mine['functionArn']}; moved" in redrive["reason"], redrive
    assert api.get(job_url).body["target"]["queueUrl"] == resources("tenant-a")["sqs"]["target"]["queueUrl"]


def test_a_bulk_redrive_with_a_target_not_granted_changes_none(world, api, container):
    created = job(api, resources("tenant-a")["sqs"]["target"]).body
    grant(container, {**GRANTED, "tenant-a": []})
    key, _ = run_once(container, created["jobId"])
    grant(container, GRANTED)
    theirs = resources("tenant-b")["sqs"]
    body = {"reason": "moved", "jobId": created["jobId"], "target": theirs["target"]}
    for dry_run in (True, False):
        refused = api.post("/v1/dead-letters/redrive", {**body, "dryRun": dry_run})
        assert refused.status == 403 and refused.body["errors"][0]["field"] == theirs["field"], refused
    assert container.runs.get_by_key(key).state is RunState.DEAD
    mine = resources("tenant-a")["eventbridge"]["target"]
    done = api.post("/v1/dead-letters/redrive", {**body, "target": mine})
    assert done.status == 200 and done.body["runKeys"] == [key], done
    assert run_once(container, created["jobId"])[1].outcome is AttemptOutcome.SUCCEEDED
    assert world.operations() == ["PutEvents"]
