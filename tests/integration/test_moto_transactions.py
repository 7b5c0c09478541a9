"""Local mode's moto transactions: the same outcome as moto's own, a failed transaction leaves
every item and the stream exactly as they were, and no table is copied to get there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError
from jobsched_local.moto_transactions import install
from moto import mock_aws

if TYPE_CHECKING:  # the stubs are a dev dependency the 3.13 lane does not install
    from mypy_boto3_dynamodb.type_defs import StreamSpecificationTypeDef

pytestmark = pytest.mark.integration


@pytest.fixture
def ddb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    install()
    from moto.dynamodb.models.table import Table

    def refuse(self: Any, memo: Any) -> Any:
        raise AssertionError("a transaction copied a whole table")

    monkeypatch.setattr(Table, "__deepcopy__", refuse, raising=False)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        stream: StreamSpecificationTypeDef = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        client.create_table(
            TableName="ranged",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification=stream,
        )
        client.create_table(
            TableName="flat",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification=stream,
        )
        client.put_item(TableName="ranged", Item={"pk": {"S": "b"}, "sk": {"S": "1"}, "x": {"N": "1"}})
        client.put_item(TableName="flat", Item={"pk": {"S": "c"}, "x": {"N": "1"}})
        yield client


def everything(client: Any) -> tuple[list[Any], list[Any], int]:
    ranged = sorted(client.scan(TableName="ranged")["Items"], key=str)
    flat = sorted(client.scan(TableName="flat")["Items"], key=str)
    return ranged, flat, stream_length(client)


def stream_length(client: Any) -> int:
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    total = 0
    for name in ("ranged", "flat"):
        arn = client.describe_table(TableName=name)["Table"]["LatestStreamArn"]
        (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        total += len(streams.get_records(ShardIterator=iterator)["Records"])
    return total


def writes(fail: bool) -> list[dict[str, Any]]:
    return [
        {"Put": {"TableName": "ranged", "Item": {"pk": {"S": "a"}, "sk": {"S": "1"}}}},
        {
            "Update": {
                "TableName": "ranged",
                "Key": {"pk": {"S": "b"}, "sk": {"S": "1"}},
                "UpdateExpression": "SET x = :two",
                "ExpressionAttributeValues": {":two": {"N": "2"}},
            }
        },
        # An update of an item that does not exist yet creates it (two stream records).
        {
            "Update": {
                "TableName": "flat",
                "Key": {"pk": {"S": "new"}},
                "UpdateExpression": "SET x = :two",
                "ExpressionAttributeValues": {":two": {"N": "2"}},
            }
        },
        {
            "Update": {
                "TableName": "flat",
                "Key": {"pk": {"S": "c"}},
                "UpdateExpression": "SET x = :two",
                "ConditionExpression": "x = :expected",
                "ExpressionAttributeValues": {":two": {"N": "2"}, ":expected": {"N": "9" if fail else "1"}},
            }
        },
    ]


def test_a_failed_transaction_leaves_items_and_streams_as_they_were(ddb):
    before = everything(ddb)
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(TransactItems=writes(fail=True))
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [r["Code"] for r in caught.value.response["CancellationReasons"]]
    assert reasons == ["None", "None", "None", "ConditionalCheckFailed"]
    assert everything(ddb) == before
    # The stream carries on from where it was: the next write is its next record.
    ddb.put_item(TableName="flat", Item={"pk": {"S": "later"}})
    assert stream_length(ddb) == before[2] + 1


def test_a_transaction_that_succeeds_writes_every_item(ddb):
    before = everything(ddb)
    ddb.transact_write_items(TransactItems=writes(fail=False))
    ranged, flat, records = everything(ddb)
    assert {i["pk"]["S"] for i in ranged} == {"a", "b"}
    assert {(i["pk"]["S"], i["x"]["N"]) for i in flat} == {("c", "2"), ("new", "2")}
    assert records == before[2] + 5  # insert a, modify b, insert+modify new, modify c


def test_a_refused_transaction_changes_nothing(ddb):
    before = everything(ddb)
    twice = [*writes(fail=False)[:2], writes(fail=False)[1]]  # the same item twice: refused outright
    with pytest.raises(ClientError, match=r"ValidationException|multiple operations"):
        ddb.transact_write_items(TransactItems=twice)
    assert everything(ddb) == before


def test_a_write_made_while_a_failing_transaction_runs_is_not_undone(ddb: Any, monkeypatch: Any) -> None:
    """Another thread writes an item a transaction names while the transaction runs; the
    transaction then fails and puts back what it recorded. DynamoDB keeps the other write (it
    isolates both); so must moto here: the write waits for the transaction, then lands."""
    import threading

    from jobsched_local import moto_transactions

    landed = threading.Event()
    real_snapshot = moto_transactions._snapshot

    def write_meanwhile(backend: Any, transact_items: list[dict[str, Any]]) -> Any:
        snapshots = real_snapshot(backend, transact_items)

        def other_writer() -> None:
            boto3.client("dynamodb", region_name="us-east-1").put_item(
                TableName="flat", Item={"pk": {"S": "c"}, "x": {"N": "7"}}
            )
            landed.set()

        threading.Thread(target=other_writer, daemon=True).start()
        landed.wait(1.0)  # with the lock the write cannot land before the transaction ends
        return snapshots

    monkeypatch.setattr(moto_transactions, "_snapshot", write_meanwhile)
    with pytest.raises(ClientError):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "flat", "Item": {"pk": {"S": "c"}, "x": {"N": "2"}}}},
                {
                    "ConditionCheck": {
                        "TableName": "ranged",
                        "Key": {"pk": {"S": "b"}, "sk": {"S": "1"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    assert landed.wait(5.0)
    assert ddb.get_item(TableName="flat", Key={"pk": {"S": "c"}})["Item"]["x"] == {"N": "7"}


def test_a_stream_read_during_a_failing_transaction_sees_none_of_it_and_skips_nothing(
    ddb: Any, monkeypatch: Any
) -> None:
    """A reader on another thread reads the stream while a transaction that fails is between
    its writes and their rollback. DynamoDB never shows a write of a cancelled transaction;
    here the read waits for the rollback, so it sees none of it, and the next real write's
    record (which takes the sequence number a rolled-back record had) is read, not skipped."""
    import threading

    from jobsched_local import moto_transactions

    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    arn = ddb.describe_table(TableName="flat")["Table"]["LatestStreamArn"]
    (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    first = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )
    position = streams.get_records(ShardIterator=first["ShardIterator"])["NextShardIterator"]
    read: dict[str, Any] = {}

    def reader() -> None:
        read["response"] = boto3.client("dynamodbstreams", region_name="us-east-1").get_records(
            ShardIterator=position
        )

    real_restore = moto_transactions._TableSnapshot.restore

    def restore_after_a_read(self: Any) -> None:
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        thread.join(1.0)  # with the lock the read cannot happen before the rollback
        real_restore(self)

    monkeypatch.setattr(moto_transactions._TableSnapshot, "restore", restore_after_a_read)
    with pytest.raises(ClientError):
        ddb.transact_write_items(TransactItems=writes(fail=True))
    for _ in range(50):
        if "response" in read:
            break
        threading.Event().wait(0.1)
    seen = [r["dynamodb"]["Keys"]["pk"]["S"] for r in read["response"]["Records"]]
    assert seen == []  # nothing of the cancelled transaction
    ddb.put_item(TableName="flat", Item={"pk": {"S": "after"}})
    following = streams.get_records(ShardIterator=read["response"]["NextShardIterator"])["Records"]
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in following] == ["after"]
