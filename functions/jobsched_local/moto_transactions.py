"""moto's TransactWriteItems, with a rollback snapshot of the items the transaction names
instead of a deep copy of every table it touches, and moto's item operations one at a time.

moto backs a transaction up by deep-copying each table it names, stream records included: a
Runs table that has seen a few thousand writes costs tens of milliseconds per transaction,
growing with every write, and local mode's moto server serves one call at a time. The
transaction itself is moto's own code, unchanged; only its backup is replaced. Before it runs,
each named item (deep-copied, or its absence) and each table's stream length are recorded;
if it fails in any way, exactly those are put back, which is the state the table copy would
have restored: a transaction writes only the items it names, and only appends to the stream.

moto's DynamoDB backend is not safe for threads calling it at once (the worker's records run
on threads of their own, and chaos runs invocations side by side): a transaction that fails
puts back what it recorded before it ran, so a write another thread made to one of those
items in between was undone (with moto's own table copy, every write to the table in
between: a claim that had succeeded vanished). DynamoDB isolates each item operation and
serialises transactions; here each item operation and each transaction, rollback included,
holds one lock of the process (`SERIAL`), and so does each read of a table's stream.
"""

from __future__ import annotations

import copy
import functools
import threading
from dataclasses import dataclass, field
from typing import Any

_state = threading.local()
_installed = False
_lock = threading.Lock()
SERIAL = threading.RLock()  # held by each of moto's item operations and transactions
# The DynamoDBBackend methods the item, batch and transaction calls reach (moto's batch and
# TransactGetItems calls are made of these).
_SERIALISED = ("get_item", "put_item", "update_item", "delete_item", "query", "scan")


@dataclass
class _TableSnapshot:
    table: Any
    stream_length: int | None
    # (hash, range) -> (whether the hash key held anything, the item before or None)
    items: dict[tuple[Any, Any], tuple[bool, Any]] = field(default_factory=dict)

    def record(self, key: dict[str, Any]) -> None:
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = self.table
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        if (hash_value, range_value) in self.items:
            return
        present = hash_value in table.items
        if range_value is None:
            before = table.items.get(hash_value)
        else:
            before = table.items[hash_value].get(range_value) if present else None
        self.items[(hash_value, range_value)] = (present, copy.deepcopy(before))

    def restore(self) -> None:
        table = self.table
        for (hash_value, range_value), (present, before) in self.items.items():
            if range_value is None:
                if before is None:
                    table.items.pop(hash_value, None)
                else:
                    table.items[hash_value] = before
            elif not present:
                table.items.pop(hash_value, None)
            elif before is None:
                table.items[hash_value].pop(range_value, None)
            else:
                table.items[hash_value][range_value] = before
        if self.stream_length is not None and table.stream_shard is not None:
            del table.stream_shard.items[self.stream_length :]


def _snapshot(backend: Any, transact_items: list[dict[str, Any]]) -> list[_TableSnapshot]:
    tables: dict[str, _TableSnapshot] = {}
    for entry in transact_items:
        for op in entry.values():
            name = op.get("TableName") if isinstance(op, dict) else None
            table = backend.tables.get(name) if isinstance(name, str) else None
            if table is None or not isinstance(name, str):
                continue  # moto refuses the transaction before it writes anything of it
            snapshot = tables.get(name)
            if snapshot is None:
                stream = table.stream_shard
                snapshot = tables[name] = _TableSnapshot(table, len(stream.items) if stream else None)
            key = op.get("Key")
            if key is None and isinstance(op.get("Item"), dict):
                item = op["Item"]
                key = {a: item[a] for a in (table.hash_key_attr, table.range_key_attr) if a and a in item}
            try:
                snapshot.record(key or {})
            except (KeyError, TypeError, ValueError):
                continue  # an incomplete key: moto fails on it before writing it
    return list(tables.values())


class _NoTableCopies:
    """Stands in for `copy` in moto's DynamoDB backend module: inside a transaction, the
    table "copy" is the table itself (so moto's own rollback is a no-op); anything else is
    copied as before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        from moto.dynamodb.models.table import Table

        if getattr(_state, "active", False) and isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)


def install() -> None:
    """Replace moto's transaction backup in this process (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        import moto.dynamodb.models as models

        original = models.DynamoDBBackend.transact_write_items

        def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
            with SERIAL:
                snapshots = _snapshot(self, transact_items)
                _state.active = True
                try:
                    original(self, transact_items)
                except BaseException:
                    for snapshot in snapshots:
                        snapshot.restore()
                    raise
                finally:
                    _state.active = False

        models.copy = _NoTableCopies()  # type: ignore[assignment]
        models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
        for name in _SERIALISED:
            setattr(models.DynamoDBBackend, name, _serialised(getattr(models.DynamoDBBackend, name)))
        # A stream read between a failing transaction's writes and their rollback would hand
        # out records the rollback then removes, and its iterator would skip the real records
        # that take their sequence numbers next: reads of the stream wait for the lock too.
        import moto.dynamodbstreams.models as streams

        streams.DynamoDBStreamsBackend.get_records = _serialised(  # type: ignore[method-assign]
            streams.DynamoDBStreamsBackend.get_records
        )
        _installed = True


def _serialised(method: Any) -> Any:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with SERIAL:
            return method(self, *args, **kwargs)

    return call
