"""Local mode's moto speedups: queries, projections and receives answer exactly what DynamoDB
and SQS would (checked against the items themselves, not against moto), and the work that
grew with the table, the queue or moto's module list is gone."""

from __future__ import annotations

import base64
import contextlib
import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from jobsched_local.moto_speedups import install
from moto import mock_aws

if TYPE_CHECKING:  # the stubs are a dev dependency the 3.13 lane does not install
    from mypy_boto3_dynamodb.type_defs import KeySchemaElementTypeDef

pytestmark = pytest.mark.integration

TABLE = "speedups"
OUTSIDERS = 300  # items in no index: a query must not have to look at them
KEY_SCHEMA: list[KeySchemaElementTypeDef] = [
    {"AttributeName": "pk", "KeyType": "HASH"},
    {"AttributeName": "sk", "KeyType": "RANGE"},
]


@pytest.fixture
def ddb() -> Iterator[Any]:
    install()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=KEY_SCHEMA,
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
                {"AttributeName": "leased", "AttributeType": "S"},
                {"AttributeName": "until", "AttributeType": "S"},
                {"AttributeName": "shard", "AttributeType": "N"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "keys",
                    "KeySchema": [
                        {"AttributeName": "leased", "KeyType": "HASH"},
                        {"AttributeName": "until", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                },
                {
                    "IndexName": "include",
                    "KeySchema": [{"AttributeName": "shard", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["state"]},
                },
            ],
        )
        yield client


def fill(client: Any, seed: int = 7) -> list[dict[str, Any]]:
    """Items in and out of the indexes, under few partitions, with equal index sort keys."""
    rng = random.Random(seed)
    items = []
    for i in range(60):
        item = {
            "pk": {"S": f"job-{rng.randrange(6)}"},
            "sk": {"S": f"R#{i:03}"},
            "state": {"S": rng.choice(["QUEUED", "LEASED"])},
            "payload": {"M": {"n": {"N": str(i)}, "tags": {"SS": ["a", "b"]}}},
        }
        if rng.random() < 0.6:
            item["leased"] = {"S": rng.choice(["t1", "t2"])}
            item["until"] = {"S": f"2026-01-01T00:00:{rng.randrange(5):02}Z"}
        if rng.random() < 0.5:
            item["shard"] = {"N": rng.choice(["1", "2", "0010"])}
        items.append(item)
        client.put_item(TableName=TABLE, Item=item)
    for i in range(OUTSIDERS):
        client.put_item(TableName=TABLE, Item={"pk": {"S": f"other-{i}"}, "sk": {"S": "R#"}, "x": {"N": "1"}})
    return items


def query_all(client: Any, **request: Any) -> list[dict[str, Any]]:
    pages, start = [], None
    while True:
        page = client.query(TableName=TABLE, **request, **({"ExclusiveStartKey": start} if start else {}))
        pages += page["Items"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return pages


def keys_of(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["pk"]["S"], i["sk"]["S"]) for i in items]


@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("limit", [1, 3, 50])
def test_an_index_query_finds_exactly_the_indexed_items_in_index_order(ddb, forward, limit):
    items = fill(ddb)
    for tenant in ("t1", "t2"):
        expected = sorted(
            (
                i
                for i in items
                if i.get("leased", {}).get("S") == tenant and i["until"]["S"] > "2026-01-01T00:00:01Z"
            ),
            key=lambda i: (i["until"]["S"], i["pk"]["S"], i["sk"]["S"]),
            reverse=not forward,
        )
        found = query_all(
            ddb,
            IndexName="keys",
            KeyConditionExpression="leased = :t AND #u > :at",
            ExpressionAttributeNames={"#u": "until"},
            ExpressionAttributeValues={":t": {"S": tenant}, ":at": {"S": "2026-01-01T00:00:01Z"}},
            ScanIndexForward=forward,
            Limit=limit,
        )
        # Equal index sort keys: DynamoDB leaves their order open; the set and sort order must hold.
        assert sorted(keys_of(found)) == sorted(keys_of(expected))
        assert [i["until"]["S"] for i in found] == [i["until"]["S"] for i in expected]
        # KEYS_ONLY: the table's keys and the index's, nothing else.
        assert all(set(i) == {"pk", "sk", "leased", "until"} for i in found)
        count = ddb.query(
            TableName=TABLE,
            IndexName="keys",
            KeyConditionExpression="leased = :t AND #u > :at",
            ExpressionAttributeNames={"#u": "until"},
            ExpressionAttributeValues={":t": {"S": tenant}, ":at": {"S": "2026-01-01T00:00:01Z"}},
            Select="COUNT",
        )["Count"]
        assert count == len(expected)


def test_an_include_index_keeps_its_keys_and_included_attributes_only(ddb):
    items = fill(ddb)
    found = query_all(
        ddb,
        IndexName="include",
        KeyConditionExpression="shard = :s",
        ExpressionAttributeValues={":s": {"N": "10"}},
    )
    expected = [i for i in items if i.get("shard", {}).get("N") in ("10", "0010")]
    assert sorted(keys_of(found)) == sorted(keys_of(expected))
    assert all(set(i) == {"pk", "sk", "shard", "state"} for i in found)


def test_a_table_query_reads_one_partition_in_sort_order(ddb):
    items = fill(ddb)
    for job in ("job-0", "job-3"):
        found = query_all(
            ddb, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": job}}, Limit=2
        )
        assert found == sorted((i for i in items if i["pk"]["S"] == job), key=lambda i: i["sk"]["S"])


def counting_equality(monkeypatch: Any) -> list[int]:
    """How many times moto compares two attribute values for equality from now on."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    compared = [0]
    equal, unequal = DynamoType.__eq__, DynamoType.__ne__

    def counting_eq(self: Any, other: Any) -> bool:
        compared[0] += 1
        return equal(self, other)

    def counting_ne(self: Any, other: Any) -> bool:
        compared[0] += 1
        return unequal(self, other)

    monkeypatch.setattr(DynamoType, "__eq__", counting_eq)
    monkeypatch.setattr(DynamoType, "__ne__", counting_ne)
    return compared


def test_a_table_query_looks_its_partition_up_instead_of_comparing_every_item(ddb, monkeypatch):
    items = fill(ddb)
    compared = counting_equality(monkeypatch)
    found = query_all(ddb, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "job-2"}})
    assert found == sorted((i for i in items if i["pk"]["S"] == "job-2"), key=lambda i: i["sk"]["S"])
    # Comparing the key with each of the 360 items' costs 360 comparisons or more; the
    # partition's own (about 10 items) are compared by moto once each.
    assert compared[0] < 60


def moto_table(name: str) -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(name)


def test_a_table_query_of_a_missing_partition_finds_nothing_and_adds_nothing(ddb):
    fill(ddb)
    nobody: dict[str, Any] = {
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "nobody"}},
    }
    partitions = len(moto_table(TABLE).items)
    assert query_all(ddb, **nobody) == []
    assert len(moto_table(TABLE).items) == partitions  # moto's defaultdict gained no empty one
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "nobody"}, "sk": {"S": "R#1"}})
    assert keys_of(query_all(ddb, **nobody)) == [("nobody", "R#1")]


@contextlib.contextmanager
def keyed_table(name: str, *keys: tuple[str, str, str]) -> Iterator[Any]:
    """A DynamoDB client on moto, speedups installed, with table `name` keyed by `keys`:
    (attribute, HASH or RANGE, its type)."""
    install()
    with mock_aws():
        client: Any = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=name,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": a, "KeyType": k} for a, k, _ in keys],
            AttributeDefinitions=[{"AttributeName": a, "AttributeType": t} for a, _, t in keys],
        )
        yield client


def test_a_query_of_a_table_without_a_sort_key_finds_its_one_item():
    with keyed_table("plain", ("k", "HASH", "B")) as client:
        for key in (b"a", b"b", b"\x00"):
            client.put_item(TableName="plain", Item={"k": {"B": key}, "v": {"S": key.hex()}})
        for key in (b"a", b"\x00", b"zz"):
            values: dict[str, Any] = {":k": {"B": key}}
            condition = "k = :k"
            found = client.query(
                TableName="plain", KeyConditionExpression=condition, ExpressionAttributeValues=values
            )["Items"]
            assert [i["v"]["S"] for i in found] == ([key.hex()] if key != b"zz" else [])


def test_a_number_keyed_partition_is_found_under_any_spelling_of_its_number():
    with keyed_table("numbered", ("n", "HASH", "N"), ("s", "RANGE", "S")) as client:
        for n, s in (("10", "a"), ("10.0", "b"), ("1", "c"), ("100", "d")):
            client.put_item(TableName="numbered", Item={"n": {"N": n}, "s": {"S": s}})
        for asked in ("10", "0010", "1E1"):
            found = client.query(
                TableName="numbered",
                KeyConditionExpression="n = :n",
                ExpressionAttributeValues={":n": {"N": asked}},
            )["Items"]
            # DynamoDB stores a number, not its spelling: "10" and "10.0" are one partition.
            assert [i["s"]["S"] for i in found] == ["a", "b"], asked


def test_an_index_query_does_not_sort_or_convert_what_is_not_in_its_index(ddb, monkeypatch):
    fill(ddb)
    from moto.dynamodb.models.dynamo_type import DynamoType

    compared, converted = [0], [0]
    less_than, to_json = DynamoType.__lt__, DynamoType.to_regular_json

    def counting_lt(self: Any, other: Any) -> bool:
        compared[0] += 1
        return less_than(self, other)

    def counting_to_json(self: Any) -> Any:
        converted[0] += 1
        return to_json(self)

    monkeypatch.setattr(DynamoType, "__lt__", counting_lt)
    monkeypatch.setattr(DynamoType, "to_regular_json", counting_to_json)
    found = ddb.query(
        TableName=TABLE,
        IndexName="keys",
        KeyConditionExpression="leased = :t",
        ExpressionAttributeValues={":t": {"S": "t1"}},
    )["Items"]
    assert found
    # Sorting the 60 candidates costs a few hundred comparisons; sorting all 360 items thousands.
    assert compared[0] < 1000
    # moto's projection converts the item once per kept attribute (4): the 4 kept attributes
    # each time, not the payload and state besides.
    assert converted[0] <= 4 * 4 * len(found)


@pytest.fixture
def sqs() -> Iterator[Any]:
    install()
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def test_a_receive_honours_the_retention_period_without_counting_the_queue(sqs, monkeypatch):
    url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    for i in range(30):
        sqs.send_message(QueueUrl=url, MessageBody=str(i))
    from moto.sqs.models import Queue, sqs_backends

    queue = sqs_backends["123456789012"]["us-east-1"].get_queue("q")
    oldest: list[Any] = queue._messages[:10]  # moto types sent_timestamp as None; a sent one's is an int
    for message in oldest:
        message.sent_timestamp -= 61_000  # sent 61 s ago: past the 60 s retention period
    counted = [0]
    attributes = Queue.attributes

    def counting(self: Any) -> Any:
        counted[0] += 1
        return attributes.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(Queue, "attributes", property(counting))
    bodies = []
    for _ in range(15):  # moto ends a receive at an expired message (and hides it): 10 come back empty
        bodies += [
            m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        ]
    assert counted[0] == 0
    assert sorted(bodies, key=int) == [str(i) for i in range(10, 30)]


def counting_clock_reads(monkeypatch: Any) -> list[int]:
    """How often a message's visibility or delay is looked at: each count of the queue does it
    for every message."""
    from moto.sqs.models import Message

    looked = [0]
    for name in ("visible", "delayed"):
        original = getattr(Message, name)

        def counting(self: Any, original: Any = original) -> Any:
            looked[0] += 1
            return original.fget(self)

        monkeypatch.setattr(Message, name, property(counting))
    return looked


def test_a_send_does_not_count_the_queue_and_the_counts_stay_right(sqs, monkeypatch):
    url = sqs.create_queue(QueueName="busy")["QueueUrl"]
    for start in range(0, 1000, 10):  # a burst queued ahead: delayed messages
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "MessageBody": f"later {i}", "DelaySeconds": 900}
                for i in range(start, start + 10)
            ],
        )
    for i in range(20):
        sqs.send_message(QueueUrl=url, MessageBody=f"now {i}")
    in_flight = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=5, VisibilityTimeout=600)["Messages"]
    looked = counting_clock_reads(monkeypatch)
    for i in range(30):
        sqs.send_message(QueueUrl=url, MessageBody=f"sent {i}", DelaySeconds=300 if i % 3 == 0 else 0)
    sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": f"batch {i}", "DelaySeconds": 60} for i in range(10)],
    )
    assert looked[0] == 0  # moto's own send counted the queue 3 times a message: 1,000s of looks
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert len(in_flight) == 5
    assert attributes["ApproximateNumberOfMessages"] == str(20 - 5 + 20)
    assert attributes["ApproximateNumberOfMessagesDelayed"] == str(1000 + 10 + 10)
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == str(5)
    assert looked[0] > 0  # asked for, they are counted


def test_a_fifo_send_still_deduplicates_and_checks_without_counting(sqs, monkeypatch):
    url = sqs.create_queue(
        QueueName="q.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    strict = sqs.create_queue(QueueName="strict.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    looked = counting_clock_reads(monkeypatch)
    for body in ("a", "b", "a"):  # the second "a" is a duplicate by content
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
    sqs.send_message(QueueUrl=url, MessageBody="c", MessageGroupId="g", MessageDeduplicationId="d1")
    sqs.send_message(QueueUrl=url, MessageBody="c again", MessageGroupId="g", MessageDeduplicationId="d1")
    with pytest.raises(sqs.exceptions.ClientError, match="MessageDeduplicationId"):
        sqs.send_message(QueueUrl=strict, MessageBody="x", MessageGroupId="g")
    with pytest.raises(sqs.exceptions.ClientError, match="MessageGroupId"):
        sqs.send_message(QueueUrl=url, MessageBody="x")
    with pytest.raises(sqs.exceptions.ClientError, match="DelaySeconds"):
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", DelaySeconds=5)
    assert looked[0] == 0
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "3"
    assert attributes["ContentBasedDeduplication"] == "true"
    bodies = [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]
    assert bodies == ["a", "b", "c"]


def test_a_message_redriven_to_its_dead_letter_queue_is_counted_there(sqs):
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": 1}}'
    url = sqs.create_queue(QueueName="main", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    (first,) = sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # moved on this receive
    counts = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    assert sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=counts)["Attributes"] == {
        "ApproximateNumberOfMessages": "1",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=dlq)["Messages"]] == ["poison"]


def test_a_queue_with_an_event_source_mapping_is_sent_to_as_moto_does(sqs, monkeypatch):
    from moto.sqs.models import sqs_backends

    url = sqs.create_queue(QueueName="mapped")["QueueUrl"]
    queue = sqs_backends["123456789012"]["us-east-1"].get_queue("mapped")
    sqs.send_message(QueueUrl=url, MessageBody="first")

    class Disabled:  # moto's own poller runs inside add_message; a disabled mapping is passed over
        enabled = False

    mappings: dict[str, Any] = queue.lambda_event_source_mappings
    mappings["arn:mapping"] = Disabled()
    looked = counting_clock_reads(monkeypatch)
    sqs.send_message(QueueUrl=url, MessageBody="second")
    assert looked[0] > 0  # everything inside is moto's own, counts included
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "2"


def test_a_receive_finds_the_visible_undelayed_messages_without_asking_each_one(sqs, monkeypatch):
    from moto.sqs.models import sqs_backends

    url = sqs.create_queue(QueueName="waiting")["QueueUrl"]
    for start in range(0, 500, 10):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "MessageBody": f"later {i}", "DelaySeconds": 900}
                for i in range(start, start + 10)
            ],
        )
    for i in range(4):
        sqs.send_message(QueueUrl=url, MessageBody=f"now {i}")
    taken = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=600)["Messages"]
    queue = sqs_backends["123456789012"]["us-east-1"].get_queue("waiting")
    due, back = queue._messages[0], next(m for m in queue._messages if m.body == taken[0]["Body"])
    due.delayed_until -= 901_000  # its delay ended
    back.visible_at -= 601_000  # its visibility timeout passed: receivable again
    looked = counting_clock_reads(monkeypatch)
    empty_before = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in empty_before) == sorted(["later 0", taken[0]["Body"], "now 2", "now 3"])
    assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []) == []
    # moto asks each message it is about to return (4 here), not the 500 it passes over.
    assert looked[0] <= 2 * 4
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesDelayed"]) == (
        "0",
        "499",
    )
    assert counts["ApproximateNumberOfMessagesNotVisible"] == "5"


def test_a_delete_finds_its_message_without_asking_every_message(sqs, monkeypatch):
    from moto.sqs.models import Message

    url = sqs.create_queue(QueueName="deleting")["QueueUrl"]
    other = sqs.create_queue(QueueName="other")["QueueUrl"]
    for start in range(0, 500, 10):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "MessageBody": "later", "DelaySeconds": 900} for i in range(start, start + 10)
            ],
        )
    for i in range(6):
        sqs.send_message(QueueUrl=url, MessageBody=f"now {i}")
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600)["Messages"]
    assert len(first) == len(again) == 6
    asked = [0]
    had = Message.had_receipt_handle

    def counting(self: Any, receipt_handle: str) -> bool:
        asked[0] += 1
        return had(self, receipt_handle)

    monkeypatch.setattr(Message, "had_receipt_handle", counting)
    by_body = {m["Body"]: m["ReceiptHandle"] for m in again}
    stale = {m["Body"]: m["ReceiptHandle"] for m in first}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=by_body["now 0"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=stale["now 1"])  # an earlier receive's handle
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "a", "ReceiptHandle": by_body["now 2"]}, {"Id": "b", "ReceiptHandle": "bogus"}],
    )
    assert [e["Id"] for e in deleted["Successful"]] == ["a"]
    assert [(e["Id"], e["Code"]) for e in deleted["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=by_body["now 0"])  # twice: moto lets it be
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=other, ReceiptHandle=by_body["now 3"])  # not that queue's
    assert asked[0] <= 600  # the unknown handle asks every message (about 500), once: moto's own way
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (
        counts["ApproximateNumberOfMessagesNotVisible"],
        counts["ApproximateNumberOfMessagesDelayed"],
    ) == (
        "3",
        "500",
    )
    sqs.purge_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=by_body["now 4"])


def test_a_message_moved_to_its_dead_letter_queue_is_deleted_there_by_its_handle(sqs):
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": 1}}'
    url = sqs.create_queue(QueueName="main", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    (first,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # moved to the dead-letter queue
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=first["ReceiptHandle"])  # as moto's own allows
    assert sqs.receive_message(QueueUrl=dlq).get("Messages", []) == []


def test_a_request_does_not_list_motos_package_directory(monkeypatch):
    import os

    from jobsched_local.moto_backend import MotoServer

    server = MotoServer("127.0.0.1", 0)
    server.start()
    try:
        client = boto3.client(
            "sqs",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        client.list_queues()
        listed = [0]
        listdir = os.listdir

        def counting(path: Any = ".") -> Any:
            listed[0] += 1
            return listdir(path)

        monkeypatch.setattr(os, "listdir", counting)
        client.list_queues()
        assert listed[0] == 0
    finally:
        server.stop()


# --- Serializing attribute values: the same bytes as moto's generic serializer ----------------

NUMBERS = [
    "0",
    "0010",
    "-0",
    "1E+3",
    "1e-130",
    "-12.50",
    "123456789012345678901234567890123456789",
    "3.14159",
]
STRINGS = [
    "",
    "plain",
    'quote " and \\ back',
    "line\nbreak\ttab",
    "\u2028\u2029",
    "é ü ß 漢字",
    "😀",
    "\x00\x1f",
    "{S}",
]


def random_value(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kinds = ["S", "N", "B", "SS", "NS", "BS", "NULL", "BOOL"] + (["M", "L"] * 2 if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "S":
        return {"S": rng.choice(STRINGS) + rng.choice(STRINGS)}
    if kind == "N":
        return {"N": rng.choice(NUMBERS)}
    if kind == "B":
        return {"B": rng.randbytes(rng.randrange(0, 12))}
    if kind == "SS":
        return {"SS": list({rng.choice(STRINGS) or "x" for _ in range(rng.randrange(1, 4))})}
    if kind == "NS":
        return {
            "NS": list(
                dict.fromkeys(str(rng.randrange(-(10**30), 10**30)) for _ in range(rng.randrange(1, 4)))
            )
        }
    if kind == "BS":
        return {"BS": list({rng.randbytes(rng.randrange(1, 6)) for _ in range(rng.randrange(1, 4))})}
    if kind == "NULL":
        return {"NULL": True}
    if kind == "BOOL":
        return {"BOOL": rng.random() < 0.5}
    if kind == "M":
        return {
            "M": {
                rng.choice(STRINGS) or "k": random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))
            }
        }
    return {"L": [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]}


def random_item(rng: random.Random, pk: str, sk: str) -> dict[str, Any]:
    item = {"pk": {"S": pk}, "sk": {"S": sk}}
    for i in range(rng.randrange(1, 12)):
        item[f"a{i}{rng.choice(STRINGS)}"] = random_value(rng)
    return item


NEXT_ITERATOR = re.compile(rb'"NextShardIterator": "[^"]*"')


@pytest.fixture
def both_ways(monkeypatch) -> Iterator[Any]:
    """Calls a client twice, with the patched and with moto's own serializer, and checks that the
    HTTP bodies are the same bytes. Yields the patched call's parsed answer."""
    install()
    from moto.core.serialize import BaseJSONSerializer

    patched = BaseJSONSerializer.__dict__["_serialize_type_structure"]
    original = patched.__wrapped__
    bodies: list[bytes] = []

    def keep_body(response_dict: dict[str, Any], **_: Any) -> None:
        bodies.append(response_dict["body"])

    def call(client: Any, operation: str, before: Any = None, **request: Any) -> Any:
        client.meta.events.register("before-parse", keep_body)
        try:
            del bodies[:]
            answers: list[Any] = []
            for method in (patched, original):
                monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure", method)
                if before:
                    before()  # puts back what the call changes
                    del bodies[len(answers) :]
                try:
                    answers.append(getattr(client, operation)(**request))
                except client.exceptions.ClientError as error:
                    answers.append(error.response)
            monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure", patched)
        finally:
            client.meta.events.unregister("before-parse", keep_body)
        assert len(bodies) == 2
        # Each GetRecords hands out a new iterator (random): all else must be the same bytes.
        patched_body, original_body = (NEXT_ITERATOR.sub(b'"NextShardIterator": ""', b) for b in bodies)
        assert patched_body == original_body, operation
        return answers[0]

    yield call


@pytest.fixture
def streamed() -> Iterator[Any]:
    install()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=KEY_SCHEMA,
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        yield client, boto3.client("dynamodbstreams", region_name="us-east-1")


@pytest.mark.parametrize("seed", range(4))
def test_dynamodb_answers_are_the_same_bytes_as_motos_own_serializer(streamed, both_ways, seed):
    client, streams = streamed
    rng = random.Random(seed)
    items = [random_item(rng, f"p{rng.randrange(3)}", f"s{i:03}") for i in range(25)]
    for item in items:
        client.put_item(TableName=TABLE, Item=item)
    item = items[0]
    key = {"pk": item["pk"], "sk": item["sk"]}
    got = both_ways(client, "get_item", TableName=TABLE, Key=key)
    assert got["Item"] == item
    for pk in ("p0", "p1", "p2"):
        both_ways(
            client,
            "query",
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": pk}},
            Limit=7,
        )
    both_ways(client, "scan", TableName=TABLE)
    both_ways(
        client,
        "batch_get_item",
        RequestItems={TABLE: {"Keys": [key, {"pk": items[1]["pk"], "sk": items[1]["sk"]}]}},
    )
    both_ways(client, "transact_get_items", TransactItems=[{"Get": {"TableName": TABLE, "Key": key}}])
    both_ways(client, "put_item", TableName=TABLE, Item=items[2], ReturnValues="ALL_OLD")
    both_ways(
        client,
        "update_item",
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET #n = :v",
        ExpressionAttributeNames={"#n": "new"},
        ExpressionAttributeValues={":v": random_value(rng)},
        ReturnValues="ALL_NEW",
    )
    both_ways(
        client,
        "put_item",
        TableName=TABLE,
        Item=item,
        ConditionExpression="attribute_not_exists(pk)",
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    both_ways(
        client,
        "transact_write_items",
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": items[3]}},
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": key,
                    "UpdateExpression": "SET #n = :v",
                    "ConditionExpression": "attribute_not_exists(pk)",
                    "ExpressionAttributeNames": {"#n": "new"},
                    "ExpressionAttributeValues": {":v": random_value(rng)},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ],
    )
    arn = client.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    records = both_ways(streams, "get_records", ShardIterator=iterator["ShardIterator"], Limit=100)["Records"]
    assert len(records) >= len(items)
    both_ways(
        client,
        "delete_item",
        before=lambda: client.put_item(TableName=TABLE, Item=item),
        TableName=TABLE,
        Key=key,
        ReturnValues="ALL_OLD",
    )


def serialize_directly(service: str, operation: str, result: Any, patched: bool, monkeypatch: Any) -> str:
    from moto.core.serialize import BaseJSONSerializer, XFormedAttributePicker, get_serializer_class
    from moto.core.utils import get_service_model

    method = BaseJSONSerializer.__dict__["_serialize_type_structure"]
    if not patched:
        monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure", method.__wrapped__)
    try:
        model = get_service_model(service)
        serializer = get_serializer_class(service, model.protocol)(
            operation_model=model.operation_model(operation),
            value_picker=XFormedAttributePicker(response_transformers=None),
        )
        return str(serializer.serialize(result)["body"])
    finally:
        monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure", method)


# Values moto never produces, which must still be written as moto's own code writes them.
ODD_VALUES: list[Any] = [
    {"s": "lower-case type"},
    {"S": "two", "N": "1"},
    {},
    {"NULL": None},
    {"BOOL": None},
    {"ListAttributeValue": [{"S": "x"}]},
    {"string_set_attribute_value": ["a"]},
    {"L": [{"S": "x"}, None, {"N": "1"}]},
    {"M": {"": {"S": "empty name"}, "n": None}},
    {"N": 10},
    {"B": "already text"},
    {"SS": ("a", "b")},
    None,
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
@pytest.mark.parametrize(("service", "operation"), [("dynamodb", "GetItem"), ("dynamodb", "Query")])
def test_odd_attribute_values_are_written_as_moto_writes_them(monkeypatch, service, operation, value):
    install()
    item = {"pk": {"S": "p"}, "odd": value, "": {"S": "empty name"}}
    result = {"Item": item} if operation == "GetItem" else {"Items": [item, {"again": value}], "Count": 2}
    assert serialize_directly(service, operation, result, True, monkeypatch) == serialize_directly(
        service, operation, result, False, monkeypatch
    )


@pytest.mark.parametrize("seed", range(20))
def test_random_stream_records_are_written_as_moto_writes_them(monkeypatch, seed):
    install()
    rng = random.Random(seed)

    def as_text(value: dict[str, Any]) -> Any:  # moto holds a stream image's binary as base64 text
        kind, inner = next(iter(value.items()))
        if kind == "B":
            return {"B": base64.b64encode(inner).decode()}
        if kind == "BS":
            return {"BS": [base64.b64encode(b).decode() for b in inner]}
        if kind == "M":
            return {"M": {k: as_text(v) for k, v in inner.items()}}
        if kind == "L":
            return {"L": [as_text(v) for v in inner]}
        return value

    records = [
        {
            "eventID": f"e{i}",
            "eventName": "MODIFY",
            "eventSource": "aws:dynamodb",
            "eventVersion": "1.0",
            "awsRegion": "us-east-1",
            "dynamodb": {
                "StreamViewType": "NEW_AND_OLD_IMAGES",
                "ApproximateCreationDateTime": datetime(2026, 1, 1, tzinfo=UTC),
                "SequenceNumber": str(i),
                "SizeBytes": 1,
                "Keys": {"pk": {"S": "p"}},
                "NewImage": {k: as_text(v) for k, v in random_item(rng, "p", str(i)).items()},
                "OldImage": {k: as_text(v) for k, v in random_item(rng, "p", str(i)).items()},
            },
        }
        for i in range(5)
    ]
    result = {"Records": records, "NextShardIterator": "it"}
    assert serialize_directly(
        "dynamodbstreams", "GetRecords", result, True, monkeypatch
    ) == serialize_directly("dynamodbstreams", "GetRecords", result, False, monkeypatch)


def test_an_attribute_value_is_not_looked_up_member_by_member(ddb, monkeypatch):
    from moto.core.serialize import XFormedAttributePicker

    item = {"pk": {"S": "p"}, "sk": {"S": "s"}} | {f"a{i}": {"N": str(i)} for i in range(20)}
    ddb.put_item(TableName=TABLE, Item=item)
    picked = [0]
    pick = XFormedAttributePicker.__call__

    def counting(self: Any, context: Any) -> Any:
        picked[0] += 1
        return pick(self, context)

    monkeypatch.setattr(XFormedAttributePicker, "__call__", counting)
    assert ddb.get_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]})["Item"] == item
    # moto's own serializer looks up the 10 members of each of the 22 values: over 220 look-ups.
    # Written from their one key, only GetItem's own members are looked up (Item, ConsumedCapacity).
    assert picked[0] < 10


# --- Finding the action's method: the one name, not every member ------------------------------


def _handler_classes() -> list[type]:
    from moto.core.responses import BaseResponse
    from moto.dynamodb.responses import DynamoHandler
    from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
    from moto.sqs.responses import SQSResponse

    return [BaseResponse, DynamoHandler, DynamoDBStreamsHandler, SQSResponse]


@pytest.mark.parametrize("clazz", _handler_classes(), ids=lambda c: c.__name__)
def test_an_action_is_found_exactly_when_moto_would_list_it(clazz):
    import inspect

    import moto.core.responses as responses
    from moto.core.utils import method_names_from_class

    install()
    listed = set(method_names_from_class(clazz))
    assert listed  # moto's own listing, untouched by install()
    kept = responses.method_names_from_class(clazz)
    for name in [*dir(clazz), "dynamic", "no_such_action", "", "get_item", "receive_message"]:
        assert (name in kept) == (name in listed), name
    assert listed == {name for name, _ in inspect.getmembers(clazz, inspect.isfunction)}


def test_a_request_does_not_list_its_handlers_members(ddb, monkeypatch):
    import inspect

    listed = [0]
    getmembers = inspect.getmembers

    def counting(*args: Any, **kwargs: Any) -> Any:
        listed[0] += 1
        return getmembers(*args, **kwargs)

    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "p"}, "sk": {"S": "s"}})  # lists it once
    monkeypatch.setattr(inspect, "getmembers", counting)
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "p"}, "sk": {"S": "s"}})
    assert ddb.get_item(TableName=TABLE, Key={"pk": {"S": "p"}, "sk": {"S": "s"}})["Item"]
    assert listed[0] == 0


# --- EventBridge input paths: parsed once, delivered as before -------------------------------


def test_an_events_target_gets_the_same_input_and_each_path_is_parsed_once(monkeypatch):
    import json

    from jsonpath_ng.ext.parser import ExtendedJsonPathParser

    install()
    built = [0]
    init = ExtendedJsonPathParser.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(ExtendedJsonPathParser, "__init__", counting)
    with mock_aws():
        events = boto3.client("events", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="targets")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="all", EventPattern=json.dumps({"source": ["jobsched"]}))
        events.put_targets(
            Rule="all",
            Targets=[
                {"Id": "whole", "Arn": arn},
                {
                    "Id": "shaped",
                    "Arn": arn,
                    "InputTransformer": {
                        "InputPathsMap": {"run": "$.detail.runKey", "kind": "$.detail-type"},
                        "InputTemplate": '{"run": "<run>", "kind": "<kind>"}',
                    },
                },
            ],
        )

        def send(run_key: str) -> list[Any]:
            detail = json.dumps({"runKey": run_key})
            events.put_events(Entries=[{"Source": "jobsched", "DetailType": "run.done", "Detail": detail}])
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
            for message in got:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return sorted((json.loads(m["Body"]) for m in got), key=lambda b: "run" in b)

        first = send("job-1#a")
        after_first = built[0]
        second = send("job-1#b")
        assert first[0]["detail"] == {"runKey": "job-1#a"} and first[0]["detail-type"] == "run.done"
        assert first[1] == {"run": "job-1#a", "kind": "run.done"}
        assert second[0]["detail"] == {"runKey": "job-1#b"}
        assert second[1] == {"run": "job-1#b", "kind": "run.done"}
        # Every path was parsed for the first event (moto builds a parser per parse); the
        # second event's paths are the same ones: no parser is built for them.
        assert after_first > 0
        assert built[0] == after_first
