"""The glue hands the handlers what Lambda would: the DynamoDB stream record shape, and the
SQS event source's partial batch failures and visibility timeout, against the runtime's
own moto server. Local mode only: there is no glue (and no moto) in a deployed stack."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamModel, SqsModel
from jobsched.store.schema import RUNS
from jobsched_cli.client import ApiClient
from jobsched_local.glue import QueueSource, lambda_stream_record

from .helpers import finish, instant, unique, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

ATTRIBUTE_TYPES = {"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"}


def aws_client(runtime: Any, service: str) -> Any:
    assert runtime.moto is not None
    return boto3.client(service, endpoint_url=runtime.moto.url, region_name=runtime.config.region)  # type: ignore[call-overload]


def stream_records(runtime: Any, arn: str) -> list[dict[str, Any]]:
    streams = aws_client(runtime, "dynamodbstreams")
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records += streams.get_records(ShardIterator=iterator, Limit=1000)["Records"]
    return records


def is_typed(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ATTRIBUTE_TYPES


def test_stream_record_has_the_lambda_event_shape(runtime: Any, client_a: ApiClient) -> None:
    job = client_a.create_job({"name": unique("stream"), "type": "demo.hello", "runAt": instant(5)})
    arn = runtime.resources["streams"][RUNS.logical_id]
    region = runtime.config.region

    def of_job() -> list[dict[str, Any]]:
        return [
            r
            for r in stream_records(runtime, arn)
            if r["dynamodb"].get("Keys", {}).get("job_id", {}).get("S") == job["jobId"]
        ]

    mine = wait_for(
        lambda: (lambda rs: rs if {r["eventName"] for r in rs} >= {"INSERT", "MODIFY"} else [])(of_job()),
        what="the run's INSERT and MODIFY stream records",
    )
    before = int(time.time()) - 120
    for raw in mine:
        event = lambda_stream_record(raw, arn, region)
        assert event["eventSourceARN"] == arn
        assert event["eventVersion"] == "1.1"
        assert event["eventSource"] == "aws:dynamodb"
        assert event["awsRegion"] == region
        assert event["eventName"] in ("INSERT", "MODIFY", "REMOVE")
        assert isinstance(event["eventID"], str) and event["eventID"]
        change = event["dynamodb"]
        created = change["ApproximateCreationDateTime"]
        assert type(created) is int and before <= created <= int(time.time()) + 5
        assert change["StreamViewType"] == "NEW_AND_OLD_IMAGES"
        assert isinstance(change["SequenceNumber"], str) and isinstance(change["SizeBytes"], int)
        assert change["Keys"] and all(is_typed(v) for v in change["Keys"].values())
        assert change["NewImage"] and all(is_typed(v) for v in change["NewImage"].values())
        if event["eventName"] == "MODIFY":
            assert change["OldImage"] and all(is_typed(v) for v in change["OldImage"].values())
        # Powertools' own model of the Lambda event accepts it.
        parsed = DynamoDBStreamModel.model_validate({"Records": [event]})
        image = parsed.Records[0].dynamodb.NewImage
        assert isinstance(image, dict) and image["job_id"] == job["jobId"]
    finish(client_a, job["jobId"])


class StubInvoker:
    """Stands in for the worker: records each event, fails the messages it is told to."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.fail_bodies: set[str] = set()
        self.raise_error = False

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        if self.raise_error:
            raise RuntimeError("the function failed")
        failed = [r["messageId"] for r in event["Records"] if r["body"] in self.fail_bodies]
        return {"batchItemFailures": [{"itemIdentifier": m} for m in failed]}

    def bodies(self, index: int = -1) -> list[str]:
        return sorted(r["body"] for r in self.events[index]["Records"])


def queue_counts(sqs: Any, url: str) -> tuple[int, int]:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def test_queue_source_honours_partial_batch_failures_and_visibility(runtime: Any) -> None:
    sqs = aws_client(runtime, "sqs")
    url = sqs.create_queue(QueueName=unique("scratch"), Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    try:
        for body in ("works", "fails"):
            sqs.send_message(QueueUrl=url, MessageBody=body)
        invoker = StubInvoker()
        invoker.fail_bodies = {"fails"}
        source = QueueSource(sqs, url, arn, invoker, region=runtime.config.region)  # type: ignore[arg-type]

        assert source.poll() == 2
        assert invoker.bodies() == ["fails", "works"]
        parsed = SqsModel.model_validate(invoker.events[0])  # the Lambda SQS event shape
        assert {r.eventSourceARN for r in parsed.Records} == {arn}
        assert {r.attributes.ApproximateReceiveCount for r in parsed.Records} == {"1"}
        # The failed message is in flight (invisible), the succeeded one is gone.
        assert queue_counts(sqs, url) == (0, 1)
        assert source.poll() == 0

        time.sleep(1.2)  # the queue's visibility timeout
        redelivered = wait_for(lambda: source.poll(), what="the failed message to come back", timeout=5)
        assert redelivered == 1
        assert invoker.bodies() == ["fails"]
        assert invoker.events[-1]["Records"][0]["attributes"]["ApproximateReceiveCount"] == "2"

        # A function error (not a partial failure) leaves the whole batch for the next try.
        invoker.raise_error = True
        time.sleep(1.2)
        assert wait_for(
            lambda: source.poll() == 0 and len(invoker.events) == 3, what="a failed invoke", timeout=5
        )
        assert queue_counts(sqs, url) == (0, 1)

        invoker.raise_error = False
        invoker.fail_bodies = set()
        time.sleep(1.2)
        wait_for(lambda: source.poll(), what="the last delivery", timeout=5)
        assert invoker.bodies() == ["fails"]
        assert queue_counts(sqs, url) == (0, 0)
    finally:
        sqs.delete_queue(QueueUrl=url)
