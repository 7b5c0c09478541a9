"""Tenant ids at their limits through the whole pipeline on moto: the API (create, list with
a cursor, read), the sweeper, the runs table's stream into the outbox, the priority queue,
the worker (its Lambda handler fed by the queue as the event source mapping feeds it) and
the completion, read back through the API.

A tenant id may be 1-256 printable Unicode characters (an authorizer's `tenantId`) or an
IAM principal's `<account>/user/<path>/<name>` (up to 594 characters of `[\\w+=,.@/-]`).
moto accepts values real AWS refuses (a `MessageGroupId` of 200 characters, with spaces or
non-ASCII), so every SQS call the scheduler makes is checked here against AWS's own rules,
and every item left in the tables against DynamoDB's key-size limits."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from jobsched.domain.instants import format_instant
from jobsched.handlers import outbox as outbox_handler
from jobsched.handlers import worker as worker_handler
from jobsched.store.schema import ALL_TABLES, RUNS, TableSpec
from jobsched.targets import HandlerRegistry
from jobsched_local.glue import Invoker, QueueSource, StreamSource

from tests.helpers import ApiClient, ApiResponse, make_worker

pytestmark = pytest.mark.integration

# AWS SQS API reference (SendMessage, SendMessageBatchRequestEntry): MessageGroupId and
# MessageDeduplicationId are at most 128 characters of alphanumerics and the punctuation
# !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ (no space, nothing outside ASCII).
SQS_ID_RULE = re.compile(r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}")
SQS_ID_FIELDS = ("MessageGroupId", "MessageDeduplicationId")
# DynamoDB: a partition key value is at most 2048 bytes, a sort key value at most 1024
# (UTF-8 for strings), for a table's keys and for every index's keys alike.
PARTITION_KEY_BYTES = 2048
SORT_KEY_BYTES = 1024

PRINTABLE_ASCII = "".join(chr(c) for c in range(0x20, 0x7F))  # all 95, the space included
# Printable characters of every UTF-8 length (2, 3 and 4 bytes), and the separators the
# store's keys use (`#`) or a URL or a log line would trip on.
WIDE = "éßΩЖ中文かな한😀\U0001d538🌈"
AUTHORIZER_TENANTS = {
    "every printable ASCII character, 256 in all": (PRINTABLE_ASCII + WIDE + "#" * 256)[:256],
    "256 four-byte characters (1024 bytes)": "😀" * 256,
    "non-ASCII at both ends": ("😀" + PRINTABLE_ASCII * 3)[:255] + "\U0001d538",
}
# An IAM user with the longest path and name the principal pattern accepts, of every
# character IAM allows in them.
IAM_NAME_CHARS = "ABCxyz019_+=,.@-"
IAM_USER = "/".join([(IAM_NAME_CHARS * 40)[:100]] * 5) + "/" + (IAM_NAME_CHARS * 5)[:71]
IAM_ARN = f"arn:aws:iam::123456789012:user/{IAM_USER}"
IAM_TENANT = f"123456789012/user/{IAM_USER}"


class IamApiClient(ApiClient):
    """Calls the `api` handler as API Gateway does for an IAM-signed caller: no authorizer,
    the caller's ARN in the request context's identity."""

    def __init__(self, arn: str) -> None:
        super().__init__(None)
        self.arn = arn

    def request(self, method: str, path: str, json_body: Any = None, **kw: Any) -> ApiResponse:
        from jobsched.handlers import api
        from jobsched_local.apigw import rest_event
        from jobsched_local.lambda_context import InvocationContext

        body = json.dumps(json_body) if json_body is not None else None
        headers = {"content-type": "application/json", **kw.get("headers", {})}
        event = rest_event(method, path, body=body, headers=headers, query=kw.get("query", ""))
        event["requestContext"]["identity"]["userArn"] = self.arn
        result = api.handler(event, InvocationContext(function_name="jobsched-api"))
        return ApiResponse(
            result["statusCode"], dict(result.get("headers") or {}), json.loads(result["body"])
        )


CALLERS: dict[str, tuple[Callable[[], ApiClient], str]] = {
    **{name: (partial(ApiClient, tenant), tenant) for name, tenant in AUTHORIZER_TENANTS.items()},
    "IAM user with a 576-character path and name": (lambda: IamApiClient(IAM_ARN), IAM_TENANT),
}


def test_the_tenants_here_are_at_the_limits_the_api_accepts():
    from jobsched.handlers.api import authorizer_tenant, principal_tenant

    for tenant in AUTHORIZER_TENANTS.values():
        assert len(tenant) == 256 and authorizer_tenant(tenant) == tenant
    assert set(PRINTABLE_ASCII) <= set(AUTHORIZER_TENANTS["every printable ASCII character, 256 in all"])
    assert len("😀".encode()) * 256 == 1024  # the most bytes an authorizer's tenant id can take
    assert principal_tenant(IAM_ARN) == IAM_TENANT and len(IAM_TENANT) == 594
    with pytest.raises(Exception, match="tenantId"):
        authorizer_tenant(AUTHORIZER_TENANTS["256 four-byte characters (1024 bytes)"] + "x")


@pytest.fixture
def sqs_calls(container) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every SQS request the scheduler's client sends: (operation, parameters)."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        seen.append((model.name, params))

    client = container.queues._sqs
    client.meta.events.register("before-parameter-build.sqs.*", record)
    yield seen
    client.meta.events.unregister("before-parameter-build.sqs.*", record)


def sqs_id_violations(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    problems = []
    for operation, params in calls:
        for entry in [params, *params.get("Entries", [])]:
            for field in SQS_ID_FIELDS:
                value = entry.get(field)
                if value is not None and not SQS_ID_RULE.fullmatch(value):
                    problems.append(f"{operation} {field}={value[:40]!r}... ({len(value)} characters)")
    return problems


def key_roles(spec: TableSpec) -> dict[str, int]:
    """Each key attribute of the table and its indexes, with the bytes DynamoDB allows it."""
    limits = {spec.partition.name: PARTITION_KEY_BYTES}
    if spec.sort:
        limits[spec.sort.name] = SORT_KEY_BYTES
    for index in spec.indexes:
        limits[index.partition.name] = PARTITION_KEY_BYTES
        if index.sort:
            limits[index.sort.name] = min(limits.get(index.sort.name, SORT_KEY_BYTES), SORT_KEY_BYTES)
    return limits


def oversize_keys() -> list[str]:
    ddb = boto3.client("dynamodb")
    problems = []
    for spec in ALL_TABLES:
        limits = key_roles(spec)
        for page in ddb.get_paginator("scan").paginate(TableName=spec.default_name):
            for item in page["Items"]:
                for name, limit in limits.items():
                    value = item.get(name, {}).get("S")
                    if value is not None and len(value.encode("utf-8")) > limit:
                        problems.append(f"{spec.default_name}.{name}: {len(value.encode())} bytes > {limit}")
    return problems


def python_handler(container: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Job type `ok` as a Python handler the outbox routes to the queues and the worker runs;
    returns the (tenant, run key) of each effect."""
    registry_module = importlib.import_module("jobsched.targets.registry")
    effects: list[tuple[str, str]] = []
    registry = HandlerRegistry()
    registry.register("ok")(
        lambda payload, invocation: effects.append((invocation.tenant, invocation.run_key))
    )
    monkeypatch.setattr(registry_module, "registry", registry)
    container.__dict__["worker"] = make_worker(container, registry)
    return effects


def run_pipeline(container: Any, clock: Any) -> None:
    """The sweeper, then the stream into the outbox and the queue into the worker, until both
    are drained: what the event source mappings do in AWS."""
    sqs = boto3.client("sqs")
    url = container.queues.urls["default"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    stream_arn = boto3.client("dynamodb").describe_table(TableName=RUNS.default_name)["Table"][
        "LatestStreamArn"
    ]
    stream = StreamSource(
        boto3.client("dynamodbstreams"),
        stream_arn,
        Invoker("outbox", outbox_handler.handler),
        region="us-east-1",
        matches=lambda record: True,
    )
    queue = QueueSource(sqs, url, arn, Invoker("worker", worker_handler.handler), region="us-east-1")
    container.sweeper.sweep()
    for _ in range(20):
        moved = stream.poll() + queue.poll()
        if not moved:
            break


@pytest.mark.parametrize("caller", CALLERS, ids=list(CALLERS))
def test_a_tenant_at_the_limits_runs_through_the_whole_pipeline(
    container, clock, sqs_calls, monkeypatch, caller
):
    make_client, tenant = CALLERS[caller]
    client = make_client()
    effects = python_handler(container, monkeypatch)

    first = client.post("/v1/jobs", {"name": "first", "type": "ok", "every": 60})
    second = client.post("/v1/jobs", {"name": "second", "type": "ok", "runAt": "2026-11-02T08:00:00Z"})
    assert first.status == 201 and second.status == 201, (first, second)
    assert container.definitions.get(first.body["jobId"]).tenant == tenant
    page = client.get("/v1/jobs", query="limit=1")
    assert page.status == 200 and page.body["nextCursor"], page
    rest = client.get("/v1/jobs", query=f"limit=1&cursor={page.body['nextCursor']}")
    assert rest.status == 200, rest
    listed = {page.body["items"][0]["jobId"], rest.body["items"][0]["jobId"]}
    assert listed == {first.body["jobId"], second.body["jobId"]}

    clock.advance(60)
    run_pipeline(container, clock)

    assert sqs_id_violations(sqs_calls) == []
    published = [p for op, p in sqs_calls if op == "SendMessageBatch"]
    assert published, "nothing was published"
    assert oversize_keys() == []
    assert {t for t, _ in effects} == {tenant}
    now = format_instant(clock.now())
    for job in (first.body, second.body):
        runs = client.get(f"/v1/jobs/{job['jobId']}/runs").body["items"]
        due = [r for r in runs if r["scheduledFor"] <= now]
        assert due and {r["state"] for r in due} == {"SUCCEEDED"}, runs  # every run due, done
        run = client.get(f"/v1/runs/{quote(due[0]['runKey'], safe='')}")
        assert run.status == 200 and run.body["state"] == "SUCCEEDED", run
    assert sorted(key for _, key in effects) == sorted(
        r["runKey"]
        for job in (first.body, second.body)
        for r in client.get(f"/v1/jobs/{job['jobId']}/runs").body["items"]
        if r["scheduledFor"] <= now
    )  # one effect per due run, each for this tenant


@pytest.mark.parametrize("caller", CALLERS, ids=list(CALLERS))
def test_a_tenant_at_the_limits_leases_fails_and_lists_its_dead_letters(container, clock, sqs_calls, caller):
    """The external-worker path: the claim index (`<tenant>#<type>`), the live-lease index
    and the dead-letter index all hold the tenant in a key."""
    make_client, tenant = CALLERS[caller]
    client = make_client()
    for name in ("one", "two"):
        job = client.post("/v1/jobs", {"name": name, "type": "ext", "runAt": "2026-11-02T08:00:00Z"})
        assert job.status == 201, job
    run_pipeline(container, clock)  # target-less: claimable, no message
    assert oversize_keys() == []
    leases = client.post("/v1/leases", {"types": ["ext"], "workerId": "w1", "max": 2})
    assert leases.status == 200 and len(leases.body["leases"]) == 2, leases
    assert oversize_keys() == []
    failed = {"outcome": "failed", "error": {"class": "Bad", "message": "no", "retryable": False}}
    for lease in leases.body["leases"]:
        done = client.post(
            f"/v1/leases/{quote(lease['runKey'], safe='')}/complete", {"fence": lease["fence"], **failed}
        )
        assert done.status == 200 and done.body["state"] == "DEAD", done
        assert container.runs.get_by_key(lease["runKey"]).tenant == tenant
    assert oversize_keys() == []
    first = client.get("/v1/dead-letters", query="limit=1")
    assert first.status == 200 and first.body["nextCursor"], first
    second = client.get("/v1/dead-letters", query=f"limit=1&cursor={first.body['nextCursor']}")
    assert second.status == 200 and len(second.body["items"]) == 1, second
    assert {first.body["items"][0]["runKey"], second.body["items"][0]["runKey"]} == {
        lease["runKey"] for lease in leases.body["leases"]
    }
    assert sqs_id_violations(sqs_calls) == []


def test_every_tenants_runs_share_a_message_group_and_no_two_tenants_share_one(
    container, clock, sqs_calls, monkeypatch
):
    """The fair queues' group is the tenant: the same for each of its messages, another for
    every other tenant, whatever characters the ids hold."""
    python_handler(container, monkeypatch)
    tenants = [*AUTHORIZER_TENANTS.values(), "tenant-a", "TENANT-A"]
    for tenant in tenants:
        for name in ("one", "two"):
            response = ApiClient(tenant).post(
                "/v1/jobs", {"name": name, "type": "ok", "runAt": "2026-11-02T08:00:00Z"}
            )
            assert response.status == 201, response
    run_pipeline(container, clock)
    groups: dict[str, set[str]] = {}
    for operation, params in sqs_calls:
        for entry in params.get("Entries", []) if operation == "SendMessageBatch" else []:
            groups.setdefault(json.loads(entry["MessageBody"])["tenant"], set()).add(entry["MessageGroupId"])
    assert set(groups) == set(tenants)
    assert all(len(ids) == 1 for ids in groups.values()), groups
    assert len({next(iter(ids)) for ids in groups.values()}) == len(tenants)
    assert sqs_id_violations(sqs_calls) == []
