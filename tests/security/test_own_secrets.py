"""No grant, however broad, lets a tenant read the scheduler's own parameters and secrets, or
reach its own functions, queues, topics and event bus.

The stack keeps its grants in `/<stack>/target-grants`, and the worker may read that
parameter. A tenant granted every parameter (`arn:aws:ssm:*:*:parameter/*`) would otherwise
name it as a header secret and have the whole grants document (every tenant's ids and ARNs)
sent to a URL of its own; `/aws/reference/secretsmanager/<name>` would read any Secrets
Manager secret through SSM, past the secret grants (another tenant's included). A tenant
granted every bus (`event-bus/*`) would otherwise put `jobsched.run.dead` events on the
stack's own bus, where subscribers' rules take them for the scheduler's. Through the API as
the stack wires it (the grants in an SSM parameter on moto) and the worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from jobsched.domain.grants import GrantsDocument, Home
from jobsched.domain.models import JobSpec
from jobsched.services.attempt import AttemptOutcome
from jobsched.store.schema import QUEUES

from tests.helpers import HOME, ApiClient
from tests.integration.test_webhook_security import deliver, first_run_key, http_target, job_body

pytestmark = pytest.mark.integration

STACK = "jobsched-test"
GRANTS_PARAMETER = f"/{STACK}/target-grants"
PARAMETER = "arn:aws:ssm:us-east-1:123456789012:parameter"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret"
# The operator was generous with tenant-a: every parameter and every secret of its own.
GRANTS = {
    "tenant-a": ("arn:aws:ssm:*:*:parameter/*", f"{SECRET}:tenant-a/*", f"{SECRET}:{STACK}*"),
    "tenant-b": (f"{SECRET}:tenant-b/*",),
}


@pytest.fixture
def stack(stores, now) -> Iterator[Any]:
    """The functions as the stack wires them: grants read from `/<stack>/target-grants`."""
    from jobsched import wiring
    from jobsched.domain.instants import ManualClock
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched.settings import Settings

    queues, _ = stores
    ssm = boto3.client("ssm")
    document = GrantsDocument.from_maps(GRANTS, home=HOME)
    ssm.put_parameter(Name=GRANTS_PARAMETER, Value=document.model_dump_json(by_alias=True), Type="String")
    ssm.put_parameter(Name=f"/{STACK}/internal", Value="internal-value-0042", Type="SecureString")
    boto3.client("secretsmanager").create_secret(Name=f"{STACK}/internal", SecretString="internal-secret-7")
    settings = Settings(
        shard_count=4,
        sweep_ahead_seconds=120,
        queue_urls=queues["urls"],
        dlq_urls=queues["dlq_urls"],
        http_allow_destinations=("127.0.0.1/32",),
        target_grants_parameter=GRANTS_PARAMETER,
    )
    built = wiring.Container(settings, ManualClock(now), RecordedMetrics())
    wiring.override(built)
    yield built
    wiring.override(None)


OWN = [
    pytest.param(f"{PARAMETER}{GRANTS_PARAMETER}", id="the grants parameter"),
    pytest.param(f"{PARAMETER}/{STACK}/internal", id="another parameter of the stack"),
    pytest.param(f"{PARAMETER}//{STACK}/target-grants", id="doubled slash"),
    pytest.param(f"{PARAMETER}/tenant-a/../{STACK}/target-grants", id="dot-dot segment"),
    pytest.param(
        f"{PARAMETER}/aws/reference/secretsmanager/tenant-b/hook-token", id="SSM's view of a secret"
    ),
    pytest.param(f"{SECRET}:{STACK}/internal", id="a secret of the stack"),
]


def leak_headers(arn: str) -> dict[str, Any]:
    return {"X-Leak": {"valueFrom": arn}}


@pytest.mark.parametrize("arn", OWN)
def test_the_stacks_own_names_are_refused_at_create_and_patch(stack, receiver, now, arn):
    api = ApiClient("tenant-a")
    refused = api.post(
        "/v1/jobs", job_body(now, http_target(receiver.url("/hook"), headers=leak_headers(arn)))
    )
    assert refused.status == 403, refused
    assert refused.body["code"] == "target_not_granted"
    [error] = refused.body["errors"]
    assert error["field"] == "target.http.headers.X-Leak.valueFrom", error

    created = api.post("/v1/jobs", job_body(now, http_target(receiver.url("/hook"))))
    assert created.status == 201, created
    patched = api.patch(
        f"/v1/jobs/{created.body['jobId']}",
        {"target": {"headers": leak_headers(arn)}},
        headers={"if-match": '"1"'},
    )
    assert patched.status == 403 and patched.body["code"] == "target_not_granted", patched
    assert patched.body["errors"][0]["field"] == "target.http.headers.X-Leak.valueFrom"


@pytest.mark.parametrize("arn", OWN)
def test_a_stored_job_naming_them_sends_nothing(stack, receiver, now, arn):
    """A job written before the rule (straight into the store) is refused again by the worker,
    before any read: dead, TargetNotGranted, no request made."""
    spec = JobSpec.model_validate(
        {
            "name": "legacy",
            "type": "webhook.test",
            "target": {"kind": "http", "url": receiver.url("/hook"), "headers": leak_headers(arn)},
            "schedule": {"kind": "rate", "every_seconds": 3600},
        }
    )
    stack.jobs._authorize_target = None  # written before the rule
    job = stack.jobs.create("tenant-a", spec).job
    key = first_run_key(ApiClient("tenant-a"), job.job_id)
    assert deliver(stack, key).outcome is AttemptOutcome.DEAD
    assert receiver.requests == []
    run = ApiClient("tenant-a").get(f"/v1/runs/{quote(key, safe='')}").body
    assert run["lastErrorClass"] == "TargetNotGranted", run
    assert "internal-" not in json.dumps(run), run
    # The run shows the target its tenant wrote (the reference), and nothing else names it.
    assert run["target"]["headers"]["X-Leak"]["valueFrom"] == arn, run["target"]
    assert "tenant-b" not in json.dumps({k: v for k, v in run.items() if k != "target"}), run


def test_the_tenants_own_parameters_still_work_under_the_broad_grant(stack, receiver, now):
    boto3.client("ssm").put_parameter(Name="/tenant-a/key", Value="own-value-1", Type="SecureString")
    api = ApiClient("tenant-a")
    headers = leak_headers(f"{PARAMETER}/tenant-a/key")
    created = api.post("/v1/jobs", job_body(now, http_target(receiver.url("/hook"), headers=headers)))
    assert created.status == 201, created
    assert deliver(stack, first_run_key(api, created.body["jobId"])).outcome is AttemptOutcome.SUCCEEDED
    assert receiver.requests[-1].headers["X-Leak"] == "own-value-1"


@pytest.mark.parametrize(
    "value", ["tok\r\nX-Injected: 1", "tok\nX-Injected: 1", "tok\x00", "tok\x0b1", "tok\u0100"]
)
def test_a_secret_value_that_would_inject_a_header_is_never_sent(stack, receiver, now, value):
    """The value is the secret owner's to set, after the job was written: judged at every read."""
    arn = boto3.client("secretsmanager").create_secret(Name="tenant-a/evil", SecretString=value)["ARN"]
    api = ApiClient("tenant-a")
    created = api.post(
        "/v1/jobs", job_body(now, http_target(receiver.url("/hook"), headers=leak_headers(arn)))
    )
    assert created.status == 201, created
    key = first_run_key(api, created.body["jobId"])
    assert deliver(stack, key).outcome is AttemptOutcome.DEAD
    assert receiver.requests == []
    run = api.get(f"/v1/runs/{quote(key, safe='')}").body
    assert run["lastErrorClass"] == "BadSecret" and "X-Injected" not in json.dumps(run), run


# --- the stack's own functions and queues, as AWS targets ---

# CloudFormation names what the stack makes without a name `<stack>-<logical id>-<suffix>`.
OWN_TARGETS = [
    pytest.param(
        {
            "kind": "lambda",
            "functionArn": f"arn:aws:lambda:us-east-1:123456789012:function:{STACK}-Api-AbC12",
        },
        "target.functionArn",
        id="the api function",
    ),
    pytest.param(
        {"kind": "lambda", "functionArn": f"{STACK}-Worker-AbC12:live"},
        "target.functionArn",
        id="the worker, by bare name and alias",
    ),
    pytest.param(
        {"kind": "sqs", "queueUrl": f"https://sqs.us-east-1.amazonaws.com/123456789012/{STACK}-High-AbC12"},
        "target.queueUrl",
        id="a run queue",
    ),
]
BROAD = ("arn:aws:lambda:*:*:function:*", "arn:aws:sqs:*:*:*")


@pytest.fixture
def broad(stack) -> Any:
    """tenant-a may call every function and queue (the operator's grant, in the parameter)."""
    document = GrantsDocument.from_maps({"tenant-a": (*GRANTS["tenant-a"], *BROAD)}, home=HOME)
    boto3.client("ssm").put_parameter(
        Name=GRANTS_PARAMETER, Value=document.model_dump_json(by_alias=True), Type="String", Overwrite=True
    )
    stack.__dict__.pop("grants", None)
    for built in ("target_authority", "jobs", "worker"):
        stack.__dict__.pop(built, None)
    return stack


@pytest.mark.parametrize(("target", "field"), OWN_TARGETS)
def test_the_stacks_own_functions_and_queues_are_no_tenants_target(broad, target, field):
    api = ApiClient("tenant-a")
    refused = api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "target": target})
    assert refused.status == 403, refused
    assert refused.body["code"] == "target_not_granted" and refused.body["errors"][0]["field"] == field
    own = (
        {**target, "functionArn": "a-report"}
        if target["kind"] == "lambda"
        else {
            **target,
            "queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/a-inbox",
        }
    )
    assert api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "target": own}).status == 201
    # The same name in another account is not the stack's.
    elsewhere = (
        {**target, "functionArn": f"arn:aws:lambda:us-east-1:111111111111:function:{STACK}-Api-AbC12"}
        if target["kind"] == "lambda"
        else {**target, "queueUrl": f"https://sqs.us-east-1.amazonaws.com/111111111111/{STACK}-High-AbC12"}
    )
    assert (
        api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "target": elsewhere}).status == 201
    )


@pytest.mark.parametrize(("target", "field"), OWN_TARGETS)
def test_a_stored_job_aimed_at_them_makes_no_call(broad, target, field):
    from jobsched.domain.models import JobSpec as Spec

    spec = Spec.model_validate(
        {"name": "legacy", "type": "t", "target": target, "schedule": {"kind": "rate", "every_seconds": 3600}}
    )
    broad.jobs._authorize_target = None  # written before the rule
    job = broad.jobs.create("tenant-a", spec).job
    key = first_run_key(ApiClient("tenant-a"), job.job_id)
    assert deliver(broad, key).outcome is AttemptOutcome.DEAD
    run = broad.runs.get_by_key(key)
    assert run.last_error_class == "TargetNotGranted" and field in (run.last_error_message or "")


def test_the_stacks_own_topics_are_no_tenants_notification_target(stack):
    """The alarms topic (CloudFormation names it `<stack>-<id>-<suffix>`) stays out of reach
    even under a grant of every topic; a topic of the tenant's own is notified."""
    document = GrantsDocument.from_maps({"tenant-a": (*GRANTS["tenant-a"], "arn:aws:sns:*:*:*")}, home=HOME)
    boto3.client("ssm").put_parameter(
        Name=GRANTS_PARAMETER, Value=document.model_dump_json(by_alias=True), Type="String", Overwrite=True
    )
    stack.__dict__.pop("grants", None)
    for built in ("target_authority", "jobs", "worker"):
        stack.__dict__.pop(built, None)
    api = ApiClient("tenant-a")

    def job_notifying(topic: str) -> Any:
        notify = [{"on": ["dead"], "target": {"kind": "sns", "topicArn": topic}}]
        return api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "notify": notify})

    refused = job_notifying(f"arn:aws:sns:us-east-1:123456789012:{STACK}-AlarmsTopic-AbC12")
    assert refused.status == 403, refused
    assert refused.body["code"] == "target_not_granted"
    assert refused.body["errors"][0]["field"] == "notify.0.target.topicArn"
    assert job_notifying("arn:aws:sns:us-east-1:123456789012:a-alerts").status == 201


# --- the stack's own event bus, and its own events' source ---

BUS = "jobsched-events"  # the bus the stack's functions publish to (Settings.event_bus_name)
BUS_ARN = f"arn:aws:events:us-east-1:123456789012:event-bus/{BUS}"
EVERY_BUS = "arn:aws:events:*:*:event-bus/*"


@pytest.fixture
def every_bus(stack) -> str:
    """tenant-a may put events on every bus, with any source (the operator's grants), and the
    stack's own bus has the rule docs/concepts/events.md suggests: tenant-a's dead runs, by
    detail-type and `detail.tenant`, to a queue of tenant-a's alerts. Returns that queue's URL."""
    document = GrantsDocument.from_maps(
        {"tenant-a": (*GRANTS["tenant-a"], EVERY_BUS)}, {"tenant-a": ("*",)}, home=HOME
    )
    boto3.client("ssm").put_parameter(
        Name=GRANTS_PARAMETER, Value=document.model_dump_json(by_alias=True), Type="String", Overwrite=True
    )
    for built in ("grants", "target_authority", "jobs", "worker", "target_runner"):
        stack.__dict__.pop(built, None)
    events, sqs = boto3.client("events"), boto3.client("sqs")
    events.create_event_bus(Name=BUS)
    events.create_event_bus(Name="tenant-a-bus")
    alerts = sqs.create_queue(QueueName="tenant-a-alerts")["QueueUrl"]
    alerts_arn = sqs.get_queue_attributes(QueueUrl=alerts, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    pattern = {"detail-type": ["jobsched.run.dead"], "detail": {"tenant": ["tenant-a"]}}
    events.put_rule(Name="tenant-a-failures", EventBusName=BUS, EventPattern=json.dumps(pattern))
    events.put_targets(
        Rule="tenant-a-failures", EventBusName=BUS, Targets=[{"Id": "alerts", "Arn": alerts_arn}]
    )
    return alerts


def forged(bus: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "eventbridge", "eventBusName": bus, "detailType": "jobsched.run.dead", **fields}


OWN_BUS = [pytest.param(BUS, id="by name"), pytest.param(BUS_ARN, id="by ARN")]


@pytest.mark.parametrize("bus", OWN_BUS)
def test_the_stacks_own_bus_is_no_tenants_target_at_create_and_patch(every_bus, bus):
    api = ApiClient("tenant-a")
    refused = api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "target": forged(bus)})
    assert refused.status == 403, refused
    assert refused.body["code"] == "target_not_granted"
    [error] = refused.body["errors"]
    assert error["field"] == "target.eventBusName" and "scheduler's own event bus" in error["rule"], error

    mine = api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "target": forged("tenant-a-bus")})
    assert mine.status == 201, mine  # the grant still reaches the tenant's own bus
    patched = api.patch(
        f"/v1/jobs/{mine.body['jobId']}", {"target": {"eventBusName": bus}}, headers={"if-match": '"1"'}
    )
    assert patched.status == 403 and patched.body["errors"][0]["field"] == "target.eventBusName", patched
    # A bus of the same name in another account is not the stack's.
    elsewhere = forged(f"arn:aws:events:us-east-1:111111111111:event-bus/{BUS}")
    assert (
        api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "target": elsewhere}).status == 201
    )


@pytest.mark.parametrize("bus", OWN_BUS)
def test_a_stored_job_aimed_at_the_stacks_bus_forges_no_event(stack, every_bus, bus):
    """Written before the rule (straight into the store): the worker refuses it before the
    call, so the subscriber's rule receives nothing."""
    spec = JobSpec.model_validate(
        {
            "name": "legacy",
            "type": "t",
            "target": forged(bus),
            "schedule": {"kind": "rate", "every_seconds": 3600},
        }
    )
    stack.jobs._authorize_target = None  # written before the rule
    job = stack.jobs.create("tenant-a", spec).job
    key = first_run_key(ApiClient("tenant-a"), job.job_id)
    assert deliver(stack, key).outcome is AttemptOutcome.DEAD
    run = stack.runs.get_by_key(key)
    assert run.last_error_class == "TargetNotGranted", run.last_error_message
    assert "target.eventBusName" in (run.last_error_message or "")
    received = boto3.client("sqs").receive_message(QueueUrl=every_bus, WaitTimeSeconds=0)
    assert received.get("Messages", []) == []


def test_no_grant_lets_a_tenant_use_the_schedulers_own_source(every_bus):
    """`jobsched/<stack>/<tenant>` is the source of the scheduler's own events, which rules
    select by: refused on any bus, even to a tenant granted every source (`*`)."""
    api = ApiClient("tenant-a")

    def event_job(source: str) -> Any:
        target = forged("tenant-a-bus", source=source)
        return api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", "target": target})

    refused = event_job("jobsched/jobsched/tenant-b")
    assert refused.status == 403 and refused.body["code"] == "target_not_granted", refused
    [error] = refused.body["errors"]
    assert error["field"] == "target.source" and "scheduler's own events" in error["rule"], error
    assert event_job("com.acme.orders").status == 201  # what `*` grants otherwise


# --- the failure and dead-letter queues, whatever they are called ---

# A scheduler inside another stack (cdk.scheduler.Naming) is named `<stack>-<path>`, but
# CloudFormation names its queues `<stack>-<its logical id>-<suffix>`, so none of them is
# `<name>-…`: only its settings tell its queues apart. These are the queues no function sends
# to or takes from (cdk.queues.Queues.failure_queues), which the settings name in
# `own_queue_urls` alone.
EMBEDDED = "Platform-TeamJobs5E2A4F1C"
EMBEDDED_QUEUE = f"https://sqs.us-east-1.amazonaws.com/123456789012/{EMBEDDED}"
FAILURE_QUEUES = {
    "notifications-dlq": f"{EMBEDDED_QUEUE}NotificationsDeadLetterQueue-AbC12",
    "outbox-failures": f"{EMBEDDED_QUEUE}OutboxFailureQueue-AbC12",
    "events-failures": f"{EMBEDDED_QUEUE}EventsFailureQueue-AbC12",
    "tick-failures": f"{EMBEDDED_QUEUE}TickFailures-AbC12",
}


def refused_sqs_targets(api: ApiClient, url: str) -> list[str]:
    """The fields a job refuses 403 `target_not_granted` for when its target, or its
    notification's, is the queue at `url`; a field not refused is left out."""
    fields = []
    bodies = (
        ("target.queueUrl", {"target": {"kind": "sqs", "queueUrl": url}}),
        (
            "notify.0.target.queueUrl",
            {"notify": [{"on": ["dead"], "target": {"kind": "sqs", "queueUrl": url}}]},
        ),
    )
    for field, body in bodies:
        answer = api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", **body})
        if answer.status == 403 and answer.body["code"] == "target_not_granted":
            assert answer.body["errors"][0]["field"] == field, answer
            fields.append(field)
        else:
            assert answer.status == 201, answer
    return fields


def spellings(url: str) -> list[str]:
    """The queue at `url` as a target may name it: that URL, the legacy host's, and its name
    in another case."""
    account, name = url.rsplit("/", 2)[-2:]
    return [
        url,
        f"https://us-east-1.queue.amazonaws.com/{account}/{name}",
        f"https://sqs.us-east-1.amazonaws.com/{account}/{name.upper()}",
    ]


@pytest.fixture
def embedded(stores, now) -> Iterator[Any]:
    """A scheduler inside another stack, as its functions' settings name its queues; tenant-a
    is granted every queue."""
    from jobsched import wiring
    from jobsched.domain.instants import ManualClock
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched.settings import Settings

    queues, _ = stores
    parameter = f"/{EMBEDDED}/target-grants"
    document = GrantsDocument.from_maps({"tenant-a": ("arn:aws:sqs:*:*:*",)}, home=HOME)
    boto3.client("ssm").put_parameter(
        Name=parameter, Value=document.model_dump_json(by_alias=True), Type="String"
    )
    settings = Settings(
        shard_count=4,
        queue_urls=queues["urls"],
        dlq_urls=queues["dlq_urls"],
        target_grants_parameter=parameter,
        own_queue_urls=tuple(FAILURE_QUEUES.values()),
    )
    built = wiring.Container(settings, ManualClock(now), RecordedMetrics())
    wiring.override(built)
    yield built
    wiring.override(None)


@pytest.mark.parametrize("queue", sorted(FAILURE_QUEUES))
def test_a_schedulers_failure_queues_are_no_tenants_target_whatever_they_are_called(embedded, queue):
    api = ApiClient("tenant-a")
    url = FAILURE_QUEUES[queue]
    for spelled in spellings(url):
        assert refused_sqs_targets(api, spelled) == ["target.queueUrl", "notify.0.target.queueUrl"], spelled
    # By its ARN, as a grant or a header names a resource (no target takes a queue's ARN).
    name = url.rsplit("/", 1)[-1]
    own = embedded.settings.own_names()
    assert own.refusal(f"arn:aws:sqs:us-east-1:123456789012:{name}", Home(**HOME)) is not None
    # The same name in another account, and a queue of the tenant's own, are not the scheduler's.
    assert refused_sqs_targets(api, url.replace("/123456789012/", "/111111111111/")) == []
    assert refused_sqs_targets(api, "https://sqs.us-east-1.amazonaws.com/123456789012/tenant-a-inbox") == []


def test_local_modes_queues_are_no_tenants_target(now):
    """As local mode provisions and configures itself: the queues no function sends to (the
    notifications DLQ, the events tail) are refused like the others, under a grant of every
    queue."""
    from jobsched import aws as aws_clients
    from jobsched import wiring
    from jobsched.domain.instants import ManualClock
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched_local.config import LocalConfig
    from jobsched_local.moto_backend import EVENTS_TAIL_QUEUE, NOTIFICATIONS_DLQ, provision
    from jobsched_local.runtime import local_settings
    from moto import mock_aws

    config = LocalConfig(tenant_targets={"tenant-a": ["arn:aws:sqs:*:*:*"]})
    with mock_aws():
        aws_clients.client.cache_clear()
        resources = provision(None, "us-east-1")
        settings = local_settings(config, resources, None)
        wiring.override(wiring.Container(settings, ManualClock(now), RecordedMetrics()))
        try:
            api = ApiClient("tenant-a")
            sqs = boto3.client("sqs")
            for name in (NOTIFICATIONS_DLQ, EVENTS_TAIL_QUEUE, QUEUES[0].dlq_name, "jobsched-notifications"):
                url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
                for spelled in spellings(url):
                    refused = refused_sqs_targets(api, spelled)
                    assert refused == ["target.queueUrl", "notify.0.target.queueUrl"], (name, spelled)
                account = url.rsplit("/", 2)[-2]
                arn = f"arn:aws:sqs:us-east-1:{account}:{name}"
                assert settings.own_names().refusal(arn, Home(**HOME)) is not None, name
            mine = sqs.create_queue(QueueName="tenant-a-inbox")["QueueUrl"]
            assert refused_sqs_targets(api, mine) == []
        finally:
            wiring.override(None)
    aws_clients.client.cache_clear()
