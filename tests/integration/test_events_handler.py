"""The events consumer end to end on moto: changes made through the public API reach the bus
as CloudEvents, once per transition and with the same ids when a record comes again; a
record the bus refuses fails with every later one; an unreadable image is skipped."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import boto3
import pytest
from jobsched.domain.events import RunEventsLevel
from jobsched.handlers import events as events_handler
from jobsched.store.schema import DEFINITIONS, RUNS
from jobsched_local.glue import lambda_stream_record, read_stream
from jobsched_local.lambda_context import InvocationContext
from jobsched_local.moto_backend import create_event_bus

pytestmark = pytest.mark.integration


def events_context() -> InvocationContext:
    """A fresh invocation of the events function: its 60 s start now, not at import."""
    return InvocationContext(function_name="jobsched-events", timeout_seconds=60)


@pytest.fixture
def bus(container) -> str:
    """The stack's bus with a rule sending every jobsched event to a queue; its URL."""
    return create_event_bus(boto3.client("events"), boto3.client("sqs"))


def stream_records(level: RunEventsLevel) -> list[dict[str, Any]]:
    """Both tables' new stream records that the events mapping's filter lets through."""
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    records = []
    for spec in (RUNS, DEFINITIONS):
        arn = ddb.describe_table(TableName=spec.default_name)["Table"]["LatestStreamArn"]
        shaped = [lambda_stream_record(r, arn, "us-east-1") for r in read_stream(streams, arn, {})]
        records += [r for r in shaped if events_handler.matches_filter(r, level, spec)]
    return records


def job_records(level: RunEventsLevel) -> list[dict[str, Any]]:
    """The Definitions stream's records of the filter (a job's runs made with it left out)."""
    return [r for r in stream_records(level) if "sk" not in r["dynamodb"]["Keys"]]


def received(queue_url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs")
    found: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages") or []
        if not messages:
            return found
        found += [json.loads(m["Body"])["detail"] for m in messages]
        for m in messages:
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])


def at_level(container, level: RunEventsLevel) -> None:
    container.settings = container.settings.model_copy(update={"run_events": level})


def test_api_changes_reach_the_bus_once_each_and_again_with_the_same_ids(container, api, bus):
    at_level(container, RunEventsLevel.ALL)
    job = api.post("/v1/jobs", {"name": "nightly", "type": "report.build", "every": 3600}).body
    job_id = job["jobId"]
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    run = api.post(f"/v1/jobs/{job_id}/trigger").body
    assert api.post(f"/v1/runs/{run['runKey']}/cancel").status == 200
    records = stream_records(RunEventsLevel.ALL)
    assert events_handler.handler({"Records": records}, events_context()) == {"batchItemFailures": []}
    first = received(bus)
    types = [e["type"] for e in first]
    for expected in ("job.created", "job.paused", "job.resumed", "run.created", "run.cancelled"):
        assert f"jobsched.{expected}" in types, expected
    manual = [e for e in first if e["subject"] == run["runKey"]]
    assert [e["type"] for e in manual] == ["jobsched.run.created", "jobsched.run.cancelled"]
    assert manual[1]["data"]["actor"] == "api:tenant-a" and manual[1]["data"]["from"] == "PENDING"
    assert len({e["id"] for e in first}) == len(first)
    # The stream delivers the same records again (a retried batch): the same events, same ids.
    events_handler.handler({"Records": records}, events_context())
    assert sorted(e["id"] for e in received(bus)) == sorted(e["id"] for e in first)


def test_a_job_written_with_its_first_run_tells_its_creation_and_its_completion(container, api, bus):
    """A one-time job due inside the horizon is written done, its run made, in one write: its
    events are those of a creation followed by the first pass of the materialiser."""
    at_level(container, RunEventsLevel.ALL)
    soon = "2026-11-02T08:00:30Z"
    job_id = api.post("/v1/jobs", {"name": "once", "type": "ext", "runAt": soon}).body["jobId"]
    rate = api.post("/v1/jobs", {"name": "often", "type": "ext", "every": 30}).body
    rate_id = rate["jobId"]
    events_handler.handler({"Records": job_records(RunEventsLevel.ALL)}, events_context())
    told = [(e["subject"], e["type"], e["data"]["state"], e["data"]["nextRunAt"]) for e in received(bus)]
    assert sorted(told) == sorted(
        [
            (job_id, "jobsched.job.created", "ACTIVE", soon),
            (job_id, "jobsched.job.completed", "COMPLETED", None),
            # Still ACTIVE after its first runs: created, as its creation answered, and nothing else.
            (rate_id, "jobsched.job.created", "ACTIVE", rate["nextRunAt"]),
        ]
    ), told


def test_the_failures_level_publishes_job_changes_and_no_healthy_run_transition(container, api, bus):
    job = api.post("/v1/jobs", {"name": "nightly", "type": "report.build", "every": 3600}).body
    run = api.post(f"/v1/jobs/{job['jobId']}/trigger").body
    api.post(f"/v1/runs/{run['runKey']}/cancel")
    assert container.settings.run_events is RunEventsLevel.FAILURES  # the default
    events_handler.handler({"Records": stream_records(RunEventsLevel.FAILURES)}, events_context())
    assert [e["type"] for e in received(bus)] == ["jobsched.job.created"]


def test_a_record_the_bus_keeps_refusing_fails_with_every_later_one(container, api, bus):
    at_level(container, RunEventsLevel.ALL)
    for name in ("a", "b", "c"):
        api.post("/v1/jobs", {"name": name, "type": "report.build", "every": 3600})
    records = job_records(RunEventsLevel.ALL)  # each create, and the first sweep's advance
    inserts = [n for n, r in enumerate(records) if r["eventName"] == "INSERT"]
    assert len(inserts) == 3
    at = inserts[1]
    refused = records[at]  # the second job's creation is refused, again and again
    client = container.event_publisher._client
    real = client.put_events

    def put_events(Entries: list[dict[str, Any]]) -> dict[str, Any]:
        answers = real(Entries=Entries)["Entries"]
        for index, entry in enumerate(Entries):
            if json.loads(entry["Detail"])["subject"] == refused["dynamodb"]["Keys"]["job_id"]["S"]:
                answers[index] = {"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}
        return {"FailedEntryCount": 1, "Entries": answers}

    container.event_publisher._sleep = lambda seconds: None
    with mock.patch.object(client, "put_events", put_events):
        result = events_handler.handler({"Records": records}, events_context())
    failed = [f["itemIdentifier"] for f in result["batchItemFailures"]]
    assert failed == [r["dynamodb"]["SequenceNumber"] for r in records[at:]]
    # Counted: the records whose events were not published (the refused one and the next job's).
    assert container.metrics.total("EventRecordsFailed") == 2


def test_an_unreadable_image_is_skipped_and_counted_not_retried(container, api, bus):
    at_level(container, RunEventsLevel.ALL)
    api.post("/v1/jobs", {"name": "ok", "type": "report.build", "every": 3600})
    (good,) = [r for r in job_records(RunEventsLevel.ALL) if r["eventName"] == "INSERT"]
    broken = json.loads(json.dumps(good))
    broken["dynamodb"]["SequenceNumber"] = "0"
    broken["dynamodb"]["NewImage"]["spec"] = {"S": "{not json"}
    result = events_handler.handler({"Records": [broken, good]}, events_context())
    assert result == {"batchItemFailures": []}
    assert [e["type"] for e in received(bus)] == ["jobsched.job.created"]
    assert container.metrics.total("EventRecordsUnreadable") == 1
