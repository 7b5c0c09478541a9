"""Local mode's moto speedups: queries, projections and receives answer exactly what DynamoDB
and SQS would (checked against the items themselves, not against moto), and the work that
grew with the table, the queue or moto's module list is gone."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from jobsched_local.moto_speedups import install
from moto import mock_aws

pytestmark = pytest.mark.integration

TABLE = "speedups"
OUTSIDERS = 300  # items in no index: a query must not have to look at them


@pytest.fixture
def ddb() -> Iterator[Any]:
    install()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": n, "AttributeType": t}
                for n, t in (("pk", "S"), ("sk", "S"), ("leased", "S"), ("until", "S"), ("shard", "N"))
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
    for message in queue._messages[:10]:
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
