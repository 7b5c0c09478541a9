"""Counts and times every AWS request the process makes, per stage.

One patch on botocore's BaseClient._make_api_call sees every client (the cached
`jobsched.aws.client` ones, the local glue's, Powertools' idempotency client) without
touching the code under test. The stage of a call is the innermost `stage(...)` active in
the calling thread, else what `thread_stage` makes of the thread's name (threads the code
under test starts itself: the effect pool, the heartbeat, local mode's loops)."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from . import units

_local = threading.local()
UNATTRIBUTED = "other"
WRITE_OPERATIONS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})


@contextmanager
def stage(name: str) -> Iterator[None]:
    stack = _stack()
    stack.append(name)
    try:
        yield
    finally:
        stack.pop()


def _stack() -> list[str]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def current_stage(thread_stage: Callable[[str], str | None] | None = None) -> str:
    stack = _stack()
    if stack:
        return stack[-1]
    if thread_stage is not None:
        named = thread_stage(threading.current_thread().name)
        if named:
            return named
    return UNATTRIBUTED


@dataclass
class Call:
    stage: str
    service: str
    operation: str
    started: float  # perf_counter
    wall: float  # seconds
    cpu: float  # calling thread's CPU seconds inside the call (moto in-process runs here too)
    error: str | None = None
    requests: int = 1  # billed requests (SQS: 64 KB chunks)
    messages: int = 0  # SQS messages sent or received
    wcu: float = 0.0  # DynamoDB table write units
    gsi_wcu: float = 0.0
    rcu: float = 0.0
    writes: list[dict[str, Any]] = field(default_factory=list)  # per item: table, label, units
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> float:
        return self.started + self.wall


ImageLookup = Callable[[str, dict[str, Any]], dict[str, Any] | None]


def moto_images(region: str = "us-east-1") -> ImageLookup:
    """Item images straight from in-process moto's backend: no request, nothing counted."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][region]

    def lookup(table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        item = backend.get_item(table, key)
        return item.to_json()["Attributes"] if item is not None else None

    return lookup


ParamsHook = Callable[[Call, dict[str, Any], dict[str, Any] | None], None]


class Recorder:
    """Install with `with Recorder() as rec:`; calls land in rec.calls."""

    def __init__(
        self,
        *,
        images: ImageLookup | None = None,
        thread_stage: Callable[[str], str | None] | None = None,
        on_call: ParamsHook | None = None,
        shapes: dict[str, units.TableShape] | None = None,
    ) -> None:
        self.calls: list[Call] = []
        self.ddb_writes = 0  # DynamoDB write requests so far (something new may be on the stream)
        self._images = images  # old/new item images for write units (in-process moto only)
        self._thread_stage = thread_stage
        self._on_call = on_call
        self._shapes = shapes or units.SHAPES
        self._lock = threading.Lock()
        self._original: Any = None

    # --- install ---

    def __enter__(self) -> Recorder:
        # botocore's private method, which the boto3 stubs leave out of BaseClient.
        self._original = BaseClient._make_api_call  # type: ignore[attr-defined]
        recorder = self
        original = self._original

        def _make_api_call(client: BaseClient, operation_name: str, api_params: dict[str, Any]) -> Any:
            return recorder._record(client, original, operation_name, api_params)

        BaseClient._make_api_call = _make_api_call  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        BaseClient._make_api_call = self._original  # type: ignore[attr-defined]

    def reset(self) -> None:
        with self._lock:
            self.calls = []

    # --- one call ---

    @contextmanager
    def request(self, service: str, operation: str) -> Iterator[None]:
        """A request made outside botocore (an HTTP target's delivery): timed and counted under
        the calling thread's stage like an AWS call, billed nothing."""
        name = current_stage(self._thread_stage)
        started, cpu0 = time.perf_counter(), time.thread_time()
        error: str | None = None
        try:
            yield
        except Exception as exc:
            error = type(exc).__name__
            raise
        finally:
            wall, cpu = time.perf_counter() - started, time.thread_time() - cpu0
            with self._lock:
                self.calls.append(Call(name, service, operation, started, wall, cpu, error))

    def _record(self, client: BaseClient, original: Any, operation: str, params: dict[str, Any]) -> Any:
        service = client.meta.service_model.service_name
        name = current_stage(self._thread_stage)
        before = self._before_images(service, operation, params)
        started, cpu0 = time.perf_counter(), time.thread_time()
        error: str | None = None
        response: dict[str, Any] | None = None
        try:
            response = original(client, operation, params)
            return response
        except ClientError as exc:
            error = str(exc.response.get("Error", {}).get("Code", "ClientError"))
            raise
        except Exception as exc:
            error = type(exc).__name__
            raise
        finally:
            wall, cpu = time.perf_counter() - started, time.thread_time() - cpu0
            call = Call(name, service, operation, started, wall, cpu, error)
            try:
                self._bill(call, params, response, before)
                if self._on_call is not None:
                    self._on_call(call, params, response)
            finally:
                with self._lock:
                    self.calls.append(call)
                    if service == "dynamodb" and operation in WRITE_OPERATIONS:
                        self.ddb_writes += 1

    # --- billing ---

    def _write_targets(
        self, operation: str, params: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], bool]]:
        """(table, key, transactional) for every item a DynamoDB write touches."""
        targets: list[tuple[str, dict[str, Any], bool]] = []
        if operation == "PutItem":
            table = params["TableName"]
            targets.append((table, self._shapes[table].key_of(params["Item"]), False))
        elif operation in ("UpdateItem", "DeleteItem"):
            targets.append((params["TableName"], params["Key"], False))
        elif operation == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((kind, body),) = entry.items()
                table = body["TableName"]
                key = self._shapes[table].key_of(body["Item"]) if kind == "Put" else body["Key"]
                targets.append((table, key, True))
        elif operation == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        targets.append(
                            (table, self._shapes[table].key_of(request["PutRequest"]["Item"]), False)
                        )
                    else:
                        targets.append((table, request["DeleteRequest"]["Key"], False))
        return targets

    def _before_images(self, service: str, operation: str, params: dict[str, Any]) -> list[Any] | None:
        if service != "dynamodb" or self._images is None:
            return None
        targets = self._write_targets(operation, params)
        if not targets:
            return None
        return [(table, key, tx, self._images(table, key)) for table, key, tx in targets]

    def _bill(
        self, call: Call, params: dict[str, Any], response: dict[str, Any] | None, before: list[Any] | None
    ) -> None:
        if call.service == "dynamodb":
            self._bill_dynamodb(call, params, response, before)
        elif call.service == "sqs":
            self._bill_sqs(call, params, response)

    def _bill_dynamodb(
        self, call: Call, params: dict[str, Any], response: dict[str, Any] | None, before: list[Any] | None
    ) -> None:
        op = call.operation
        if before is not None and self._images is not None:
            for table, key, tx, old in before:
                new = self._images(table, key)
                shape = self._shapes[table]
                cost = units.write_cost(shape, old, new, transactional=tx)
                call.wcu += cost.table_units
                call.gsi_wcu += cost.gsi_units
                call.writes.append(
                    {
                        "table": table,
                        "tx": tx,
                        "old": old,
                        "new": new,
                        "units": cost.table_units,
                        "gsi": {w.index: w.units for w in cost.gsi},
                    }
                )
            return
        if op == "GetItem":
            item = (response or {}).get("Item")
            call.rcu = units.read_units(units.item_size(item), consistent=bool(params.get("ConsistentRead")))
        elif op == "BatchGetItem":
            # Each item is rounded up to its own read unit.
            for table, found in ((response or {}).get("Responses") or {}).items():
                consistent = bool(params["RequestItems"][table].get("ConsistentRead"))
                call.rcu += sum(units.read_units(units.item_size(i), consistent=consistent) for i in found)
                call.extra["items"] = call.extra.get("items", 0) + len(found)
        elif op == "Query":
            body = response or {}
            consistent = bool(params.get("ConsistentRead")) and "IndexName" not in params
            items = body.get("Items")
            if items is None:  # Select=COUNT: key-sized index entries
                size = int(body.get("ScannedCount", body.get("Count", 0))) * 100
            else:
                size = sum(units.item_size(i) for i in items)
                scanned, count = int(body.get("ScannedCount", len(items))), max(1, len(items))
                if scanned > len(items):
                    size = size * scanned // count
            call.rcu = units.read_units(size, consistent=consistent)
            call.extra["items"] = int(body.get("ScannedCount", body.get("Count", 0)))

    @staticmethod
    def _bill_sqs(call: Call, params: dict[str, Any], response: dict[str, Any] | None) -> None:
        op = call.operation
        if op == "SendMessageBatch":
            entries = params.get("Entries", [])
            call.messages = len(entries)
            call.requests = units.sqs_requests(sum(len(e.get("MessageBody", "").encode()) for e in entries))
        elif op == "SendMessage":
            call.messages = 1
            call.requests = units.sqs_requests(len(params.get("MessageBody", "").encode()))
        elif op == "ReceiveMessage":
            messages = (response or {}).get("Messages", [])
            call.messages = len(messages)
            call.requests = units.sqs_requests(sum(len(m.get("Body", "").encode()) for m in messages))


# --- summaries ---


def by_stage(calls: list[Call]) -> dict[str, dict[str, Any]]:
    """Per stage: requests per service/operation, time in calls, and billed units."""
    out: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "calls": Counter(),
            "ddb_requests": 0,
            "sqs_requests": 0,
            "stream_requests": 0,
            "wcu": 0.0,
            "gsi_wcu": 0.0,
            "rcu": 0.0,
            "aws_seconds": 0.0,
        }
    )
    for call in calls:
        entry = out[call.stage]
        entry["calls"][f"{call.service}:{call.operation}"] += 1
        entry["aws_seconds"] += call.wall
        entry["wcu"] += call.wcu
        entry["gsi_wcu"] += call.gsi_wcu
        entry["rcu"] += call.rcu
        if call.service == "dynamodb":
            entry["ddb_requests"] += 1
        elif call.service == "sqs":
            entry["sqs_requests"] += call.requests
        elif call.service == "dynamodbstreams":
            entry["stream_requests"] += 1
    return {k: {**v, "calls": dict(v["calls"])} for k, v in out.items()}
