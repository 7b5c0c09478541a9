"""The faults moto never shows, one by one: each fires, is counted, and does what AWS does.
Then one small run with every one of them at a high rate: each figure is nonzero and every
must-be-0 figure stays 0."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from jobsched.domain.instants import ManualClock
from jobsched.store.schema import CLAIM_INDEX, RUNS

from chaos import MUST_BE_ZERO, ChaosConfig, FaultRates, run_chaos
from chaos.faults import (
    ITEM_LIMIT_BYTES,
    DynamoFaults,
    LoopCutoff,
    LoopingQueueClient,
    Throttle,
)
from chaos.harness import simulated_aws

from .known_defects import PIPELINE_DEFECTS

if TYPE_CHECKING:  # the stubs are a dev dependency the 3.13 lane does not install
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

pytestmark = pytest.mark.integration

T0 = datetime(2026, 10, 25, 0, 50, tzinfo=UTC)
QUIET = FaultRates.none()


@pytest.fixture
def world():
    clock = ManualClock(T0)
    with simulated_aws(clock):
        raw = boto3.client("dynamodb", region_name="us-east-1")
        raw.create_table(**RUNS.create_table_request())
        yield clock, raw


def faults_for(world, **rates):
    clock, raw = world
    return DynamoFaults(raw, clock, random.Random(1), replace(QUIET, **rates))


def run_item(sk, **extra):
    item = {"job_id": {"S": "j_a"}, "sk": {"S": sk}, "rev": {"N": "1"}}
    return {**item, **{k: {"S": v} for k, v in extra.items()}}


def claimable(client, clock):
    return client.query(
        TableName=RUNS.default_name,
        IndexName=CLAIM_INDEX,
        KeyConditionExpression="claim_key = :k AND due_at > :since",
        ExpressionAttributeValues={":k": {"S": "acme#report"}, ":since": {"S": "2000-01-01T00:00:00Z"}},
        Select="COUNT",
    )["Count"]


def test_a_stale_index_read_shows_what_the_item_has_left_and_misses_what_is_new(world):
    clock, _ = world
    faults = faults_for(world, stale_index_read=1.0)
    faults.lagging_share = 1.0
    client = faults.client(Throttle(random.Random(0), 0), "Throttled")
    waiting = run_item("R#1", claim_key="acme#report", due_at="2026-10-25T01:00:00Z")
    client.put_item(TableName=RUNS.default_name, Item=waiting)
    clock.advance(60)
    # The run is claimed: the index entry goes; a stale read still counts it.
    client.put_item(TableName=RUNS.default_name, Item=run_item("R#1"))
    # A run waiting from just now: a stale read does not count it yet.
    client.put_item(TableName=RUNS.default_name, Item={**waiting, "sk": {"S": "R#2"}})
    faults.rates = replace(QUIET, stale_index_read=1.0)
    assert claimable(client, clock) == 1  # R#1 (gone) counted, R#2 (new) not
    assert faults.counts["stale_claimable_reads"] == 1
    faults.enabled = False
    assert claimable(client, clock) == 1  # R#2 only, as the table says
    clock.advance(60)
    faults.enabled = True
    assert claimable(client, clock) == 1  # nothing recent: the index has caught up
    assert faults.counts["stale_claimable_reads"] == 1


def test_a_write_the_table_applied_still_fails_to_its_caller(world):
    _, raw = world
    faults = faults_for(world, write_timeout=1.0)
    client = faults.client(Throttle(random.Random(0), 0), "Throttled")
    outcomes = set()
    for n in range(12):
        item = run_item(f"R#{n}")
        try:
            client.put_item(
                TableName=RUNS.default_name, Item=item, ConditionExpression="attribute_not_exists(sk)"
            )
            outcomes.add("answered")
        except ReadTimeoutError:
            outcomes.add("timeout")
        except ClientError as exc:
            # The SDK's retry of the applied write meets its own condition.
            assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
            outcomes.add("replayed")
        stored = raw.get_item(TableName=RUNS.default_name, Key={"job_id": item["job_id"], "sk": item["sk"]})
        assert stored["Item"] == item  # applied every time
    assert outcomes == {"timeout", "replayed"}
    assert faults.counts["write_timeouts_raised"] + faults.counts["write_timeouts_replayed"] == 12
    # An unconditional write is never replayed (it could apply twice).
    client.put_item(TableName=RUNS.default_name, Item=run_item("R#x"))


def test_a_hot_key_is_throttled_for_its_window_and_only_it(world):
    clock, _ = world
    faults = faults_for(world, hot_key_burst=1.0)
    client = faults.client(Throttle(random.Random(0), 0), "ProvisionedThroughputExceededException")
    faults.tick(["j_a"])
    assert faults.counts["hot_key_bursts"] == 1
    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        client.put_item(TableName=RUNS.default_name, Item=run_item("R#1"))
    client.put_item(TableName=RUNS.default_name, Item={**run_item("R#1"), "job_id": {"S": "j_b"}})
    assert faults.counts["hot_key_throttles"] == 1
    clock.advance(21)
    faults.rates = QUIET
    faults.tick(["j_a"])
    client.put_item(TableName=RUNS.default_name, Item=run_item("R#1"))


def test_an_item_over_400_kb_is_refused_as_aws_refuses_it(world):
    _, raw = world
    faults = faults_for(world)
    client = faults.client(Throttle(random.Random(0), 0), "Throttled")
    client.put_item(TableName=RUNS.default_name, Item=run_item("R#1", doc="x" * 1000))
    with pytest.raises(ClientError, match="ValidationException"):
        client.put_item(TableName=RUNS.default_name, Item=run_item("R#2", doc="x" * ITEM_LIMIT_BYTES))
    # An update that grows the item past the limit is refused too, and leaves it as it was.
    with pytest.raises(ClientError, match="ValidationException"):
        client.update_item(
            TableName=RUNS.default_name,
            Key={"job_id": {"S": "j_a"}, "sk": {"S": "R#1"}},
            UpdateExpression="SET doc = :d",
            ExpressionAttributeValues={":d": {"S": "y" * ITEM_LIMIT_BYTES}},
        )
    stored = raw.get_item(TableName=RUNS.default_name, Key={"job_id": {"S": "j_a"}, "sk": {"S": "R#1"}})
    assert stored["Item"]["doc"]["S"] == "x" * 1000
    assert len(faults.oversize) == 2
    assert 1000 < faults.max_item_bytes < ITEM_LIMIT_BYTES


def test_the_recursive_loop_cut_off_drops_the_send_past_the_limit():
    clock = ManualClock(T0)
    with simulated_aws(clock):
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        cutoff = LoopCutoff(limit=2)
        client = LoopingQueueClient(sqs, cutoff)
        entries: list[SendMessageBatchRequestEntryTypeDef] = [{"Id": "0", "MessageBody": "run"}]
        message_id = sqs.send_message_batch(QueueUrl=url, Entries=entries)["Successful"][0]["MessageId"]
        for hop in (1, 2):  # each invocation re-sends to its own queue
            with cutoff.invocation(message_id):
                message_id = client.send_message_batch(QueueUrl=url, Entries=entries)["Successful"][0][
                    "MessageId"
                ]
            assert cutoff.hops[message_id] == hop
        with cutoff.invocation(message_id):
            response = client.send_message_batch(QueueUrl=url, Entries=entries)
        assert response["Failed"] == [] and cutoff.dropped == ["run"]  # the sender cannot tell
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "3"


def test_every_fault_moto_never_shows_fires_and_the_invariants_hold():
    faults = replace(
        FaultRates(),
        stale_index_read=0.9,  # the due index sees few recent writes: most of its reads must lag
        write_timeout=0.05,
        hot_key_burst=0.05,
        killed_invocation=0.15,
        throttled_invocation=0.1,
        stream_redelivery=0.2,
        stream_lane_lag=0.3,
        # The harness's own faults (tests/chaos/test_chaos.py), off: this world's faults fire
        # from its seed's draws, which they would shift.
        slow_effect=0,
        outbox_died=0,
    )
    report = run_chaos(
        ChaosConfig(seed=12, runs=80, window_seconds=300, faults=faults, loop_limit=1, tenant_concurrency=1),
        out=lambda line: None,
    )
    figures = report.figures
    detail = "\n".join([figures.line(), *map(str, figures.violations[:20]), *report.unexpected])
    assert report.settled, detail
    assert not report.unexpected, detail
    for name in MUST_BE_ZERO:
        if name not in PIPELINE_DEFECTS:
            assert getattr(figures, name) == 0, f"{name}\n{detail}"
    for name in (
        "stale_due_reads",
        "stale_claimable_reads",
        "write_timeouts_raised",
        "write_timeouts_replayed",
        "killed_invocations",
        "throttled_invocations",
        "stream_batches_redelivered",
        "stream_lane_lagged",
        "hot_key_throttles",
        "hog_attempts",
    ):
        assert figures.faults[name] > 0, f"{name}\n{detail}"
    # The recursive-loop cut-off at its strictest (one hop) drops nothing: no worker sends a
    # message (a deferral waits in its queue, then goes back through the outbox).
    assert figures.faults["loop_drops"] == 0, detail
    # The hog's runs grew, but no item came near the limit, and the others' runs all ended.
    assert 60_000 < figures.max_item_bytes < ITEM_LIMIT_BYTES
