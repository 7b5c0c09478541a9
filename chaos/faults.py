"""Fault primitives: skewed clocks, throttling clients, and stores that crash or freeze a
worker at a chosen point. Each is armed by the harness for one record of an invocation."""

from __future__ import annotations

import contextlib
import json
import random
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from botocore.exceptions import ClientError, ReadTimeoutError
from jobsched.domain.instants import ManualClock
from jobsched.domain.models import Job
from jobsched.domain.runs import Run, RunState
from jobsched.store.definitions import DefinitionStore
from jobsched.store.runs import RunStore
from jobsched.store.schema import CLAIM_INDEX, DEFINITIONS, DUE_INDEX, OPEN_INDEX, RUNS

REGION = "us-east-1"
# How often a wait on simulated time looks at the clock (real seconds): well under the real
# time a simulated second takes, and few wakeups for the threads that wait at once.
WAIT_POLL_SECONDS = 0.01

# Writes a lease holder makes to end its attempt: the point "after the effect".
FINISHING = frozenset({RunState.SUCCEEDED, RunState.RETRY_WAIT, RunState.DEAD})


class SimulatedCrash(Exception):
    """The process died here: nothing after this point ran, the SQS message was not deleted."""


class UnrecordedEffectCrash(SimulatedCrash):
    """The process died after a successful effect and before the completion that records it:
    the one window no design closes (Powertools' own save has it). The effect may be repeated,
    but not before `effect_until`, the dead invocation's deadline its claim recorded."""

    def __init__(self, run_key: str, effect_until: datetime | None) -> None:
        super().__init__(f"worker died after the effect of {run_key}, before its completion")
        self.run_key = run_key
        self.effect_until = effect_until


class SkewedClock:
    """A component's clock: the simulation's true time plus a fixed offset."""

    def __init__(self, base: ManualClock, offset_seconds: int) -> None:
        self._base = base
        self.offset = timedelta(seconds=offset_seconds)

    def now(self) -> datetime:
        return self._base.now() + self.offset

    def precise(self) -> datetime:
        return self.now()

    def sleep(self, seconds: float) -> None:
        """Waits are not simulated: one component must not move everyone's time."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Until `event` is set or `seconds` of simulated time have passed, as the harness
        moves it (an invocation running on the harness's own thread sees no time pass: its
        waits end only by their events)."""
        until = self._base.now() + timedelta(seconds=max(0.0, seconds))
        while not event.wait(WAIT_POLL_SECONDS):
            if self._base.now() >= until:
                return event.is_set()
        return True


@contextlib.contextmanager
def sqs_on_clock(clock: ManualClock) -> Iterator[None]:
    """moto's SQS reads wall-clock time for DelaySeconds, visibility and retention; point it
    at the simulated clock so the queue behaves as it would over the simulated minutes."""
    import moto.sqs.models as sqs_models

    def seconds() -> float:
        return clock.now().timestamp()

    def millis() -> float:
        return clock.now().timestamp() * 1000

    with (
        mock.patch.object(sqs_models, "unix_time", seconds),
        mock.patch.object(sqs_models, "unix_time_millis", millis),
    ):
        yield


class SimulatedLambdaContext:
    """A Lambda context whose remaining time runs on the simulated clock: the invocation
    ends at `deadline` (true time), whatever the worker's own clock says."""

    def __init__(self, clock: ManualClock, deadline: datetime, request_id: str) -> None:
        self._clock = clock
        self.deadline = deadline
        self.aws_request_id = request_id
        self.function_name = "jobsched-worker"
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:jobsched-worker"
        self.memory_limit_in_mb = 1024
        self.log_group_name = "/aws/lambda/jobsched-worker"
        self.log_stream_name = request_id

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - self._clock.now()).total_seconds() * 1000))


class Throttle:
    """Decides, per call, whether a client raises a throttling error instead of answering."""

    def __init__(self, rng: random.Random, rate: float, per_operation: dict[str, float] | None = None):
        self.rng = rng
        self.rate = rate
        self.per_operation = dict(per_operation or {})
        self.enabled = True
        self.injected: Counter[str] = Counter()

    def hit(self, operation: str) -> bool:
        if not self.enabled:
            return False
        rate = self.per_operation.get(operation, self.rate)
        if rate > 0 and self.rng.random() < rate:
            self.injected[operation] += 1
            return True
        return False


class GuardedClient:
    """Wraps a boto3 client: each call of a method (paginators and `meta` pass through) runs
    `_guard(name)` first, which may raise instead of reaching the client."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _guard(self, name: str) -> None:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith(("get_paginator", "can_paginate", "meta")):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._guard(name)
            return attr(*args, **kwargs)

        return call


class FlakyClient(GuardedClient):
    """Wraps a boto3 client; a throttled call raises the ClientError AWS would return once the
    SDK's own retries are used up, without reaching moto."""

    def __init__(self, inner: Any, throttle: Throttle, code: str) -> None:
        super().__init__(inner)
        self._throttle = throttle
        self._code = code

    def _guard(self, name: str) -> None:
        if self._throttle.hit(name):
            operation = "".join(part.title() for part in name.split("_"))
            raise ClientError(
                {"Error": {"Code": self._code, "Message": "Rate exceeded (injected)"}}, operation
            )


class InvocationDied(BaseException):
    """A Lambda invocation ended here (a crash, an out-of-memory kill, its timeout): none of
    its code after this point ran, and Lambda retries its event. A BaseException, so that no
    `except Exception` of the code under test can go on after it."""


class DiesBeforeSend:
    """The outbox's SQS client: armed, its next SendMessageBatch kills the invocation
    instead of sending (after the outbox has marked its runs QUEUED)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send_message_batch(self, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            raise InvocationDied("the outbox died between its marks and its sends")
        return self._inner.send_message_batch(**kwargs)


class InvocationEnded(SimulatedCrash):
    """A call made by an invocation after Lambda ended it at its deadline: it never happens."""


class EndsWithInvocation(GuardedClient):
    """Wraps one invocation's boto3 client: once `ended` is set (Lambda ended the
    invocation at its deadline), every call raises InvocationEnded and reaches nothing."""

    def __init__(self, inner: Any, ended: threading.Event) -> None:
        super().__init__(inner)
        self._ended = ended

    def _guard(self, name: str) -> None:
        if self._ended.is_set():
            raise InvocationEnded(f"{name} after the invocation was ended at its deadline")


class Freeze:
    """A worker frozen inside a write (GC pause, lost CPU): it blocks until thawed."""

    def __init__(self, run_key: str, *, at_claim: bool = False) -> None:
        self.run_key = run_key
        # Frozen writing its claim (after its tenant slot's put) rather than its ending.
        self.at_claim = at_claim
        self.reached = threading.Event()
        self.thaw = threading.Event()
        self.fence: int | None = None
        self.state: RunState | None = None  # the ending it was frozen writing


class CrashPoints:
    """Where a worker is armed to die: a thread-safe set of keys (run keys, or job ids). A
    batch's records run at once, each on its own thread, so each record's point is armed by
    its own key and taken by the first record of that key to reach it."""

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._lock = threading.Lock()

    def arm(self, key: str) -> None:
        with self._lock:
            self._keys.add(key)

    def take(self, key: str) -> bool:
        """True (once) when `key` was armed: the caller dies here."""
        with self._lock:
            if key in self._keys:
                self._keys.discard(key)
                return True
            return False

    def disarm(self, key: str) -> None:
        with self._lock:
            self._keys.discard(key)


class ChaosRunStore(RunStore):
    """A worker's view of the Runs table that can crash or freeze it when it ends an attempt,
    or freeze it writing its claim (its tenant slot already taken)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Run keys: die after the effect, once what it did is recorded. An effect that raised
        # has nothing to record, so the attempt dies before its ending is written; a
        # successful one is recorded by its completion (the first write after the effect,
        # as Powertools' own save is), so the attempt dies after that write, before what
        # follows it (the job's counter, a chained run's release, the message's deletion).
        self.crash_finishing = CrashPoints()
        self.crash_unrecorded = CrashPoints()  # run keys: die before a success is written
        self.freeze: Freeze | None = None  # a frozen worker's one record (its own invocation)
        self._frozen: Freeze | None = None  # reached: every write of this worker waits for the thaw

    def _put(self, new: Run, read: Run, *, holder: bool) -> Run:
        self._wait_for_thaw()
        finishing = holder and new.state in FINISHING
        if finishing and new.state is RunState.SUCCEEDED and self.crash_unrecorded.take(new.run_key):
            raise UnrecordedEffectCrash(new.run_key, read.effect_until)
        if finishing and self.crash_finishing.take(new.run_key):
            if new.state is RunState.SUCCEEDED:
                super()._put(new, read, holder=holder)
            raise SimulatedCrash(f"worker died after the effect of {new.run_key}")
        freeze = self.freeze
        claiming = not holder and new.state is RunState.LEASED and new.fence > read.fence
        if (
            freeze is not None
            and freeze.run_key == new.run_key
            and (claiming if freeze.at_claim else finishing)
        ):
            self.freeze = None
            self._frozen = freeze
            freeze.fence = read.fence
            freeze.state = new.state
            freeze.reached.set()
            freeze.thaw.wait()
        return super()._put(new, read, holder=holder)

    def extend_lease(self, run: Run, until: datetime, *, live_at: datetime | None = None) -> Run:
        self._wait_for_thaw()  # the heartbeat is frozen with the rest of the process
        return super().extend_lease(run, until, live_at=live_at)

    def _wait_for_thaw(self) -> None:
        frozen = self._frozen
        if frozen is not None:
            frozen.thaw.wait()


class ChaosDefinitionStore(DefinitionStore):
    """A worker's view of the Definitions table that can crash it at the pre-effect job check."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crash_reading = CrashPoints()  # job ids: die when the worker reads the job
        self.before_save: Callable[[Job], None] | None = None

    def get(self, job_id: str) -> Job | None:
        if self.crash_reading.take(job_id):
            raise SimulatedCrash(f"worker died before the effect (job {job_id})")
        return super().get(job_id)

    def save(self, job: Job, **options: Any) -> Job:
        hook = self.before_save
        if hook is not None:
            hook(job)
        return super().save(job, **options)


# --- DynamoDB as AWS runs it: what moto never shows ---

ITEM_LIMIT_BYTES = 400 * 1024  # DynamoDB's item size limit, names and values included
WRITES = frozenset({"put_item", "update_item", "delete_item", "transact_write_items"})
# Index queries answered, now and then, from a lagging copy (GSIs are eventually consistent).
STALE_INDEXES = {
    DUE_INDEX: "stale_due_reads",
    OPEN_INDEX: "stale_open_reads",
    CLAIM_INDEX: "stale_claimable_reads",
}
LONG_LAG = 15.0  # seconds: the longest an index lags its table here
_TABLES = {spec.default_name: spec for spec in (DEFINITIONS, RUNS)}
_CONDITION = re.compile(r"^\s*(\w+)\s*(=|<=|<|>=|>)\s*(:\w+)\s*$")


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it: attribute names plus values (UTF-8)."""
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


def _value_bytes(value: dict[str, Any]) -> int:
    (kind, inner), *_ = value.items()
    if kind in ("S", "B"):
        return len(inner.encode() if isinstance(inner, str) else inner)
    if kind == "N":
        return len(str(inner).lstrip("-").replace(".", "")) // 2 + 2
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + item_bytes(inner)
    if kind == "L":
        return 3 + sum(1 + _value_bytes(v) for v in inner)
    return sum(len(str(v)) for v in inner)  # SS, NS, BS


def _strings(value: Any, out: set[str]) -> set[str]:
    """Every string value in a request (keys, items, expression values)."""
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key in ("S", "N") and isinstance(inner, str):
                out.add(inner)
            elif key not in ("TableName", "ConditionExpression", "UpdateExpression", "IndexName"):
                _strings(inner, out)
    elif isinstance(value, list):
        for inner in value:
            _strings(inner, out)
    return out


def _compare(left: dict[str, Any], op: str, right: dict[str, Any]) -> bool:
    a: Any = left.get("S", left.get("N"))
    b: Any = right.get("S", right.get("N"))
    if "N" in left and "N" in right:
        a, b = float(a), float(b)
    return bool(
        {"=": a == b, "<=": a <= b, "<": a < b, ">=": a >= b, ">": a > b}[op] if a is not None else False
    )


@dataclass
class HotKey:
    """A partition key (a job or a tenant) whose calls are throttled until `until`."""

    value: str
    until: datetime


class DynamoFaults:
    """The DynamoDB behaviour every deployment meets and moto never shows, injected into the
    calls of every component (one shared state, one client wrapper per component):

    - stale GSI reads: a query on the due/open/claimable/tenant index is answered now and then
      as of a moment ago (writes of the last few seconds not yet, or previous versions still,
      in the index), from a short history of each item's versions;
    - read timeouts after the server applied a conditional write: either a ReadTimeoutError
      reaches the caller, or the SDK's retry is replayed and sees its own condition fail;
    - throttling bursts on one hot partition key (a job, or a tenant's index partitions);
    - the 400 KB item limit (a larger write fails with ValidationException), with the largest
      item written kept as a figure."""

    def __init__(self, raw: Any, clock: Any, rng: random.Random, rates: Any) -> None:
        self.raw = raw
        self.clock = clock
        self.rng = rng
        self.rates = rates
        self.enabled = True
        self.counts: Counter[str] = Counter()
        self.oversize: list[str] = []  # items refused at the size limit
        self.max_item_bytes = 0
        self.hot: HotKey | None = None
        self.lagging_share = 0.6  # of the recent writes, how many a stale read misses
        self._lock = threading.RLock()
        self._versions: dict[tuple[str, str], list[tuple[datetime, dict[str, Any] | None]]] = {}
        self._recent: dict[str, dict[str, datetime]] = {name: {} for name in _TABLES}

    def client(self, throttle: Throttle, code: str) -> ChaosDynamo:
        return ChaosDynamo(self, throttle, code)

    # --- hot keys ---

    def tick(self, candidates: list[str]) -> None:
        """Once a simulated second: maybe start a throttling burst on one key."""
        now = self.clock.now()
        if self.hot is not None and now >= self.hot.until:
            self.hot = None
        if self.enabled and self.hot is None and candidates and self.rng.random() < self.rates.hot_key_burst:
            self.hot = HotKey(self.rng.choice(candidates), now + timedelta(seconds=self.rng.randint(5, 20)))
            self.counts["hot_key_bursts"] += 1

    def touches_hot_key(self, kwargs: dict[str, Any]) -> bool:
        hot = self.hot
        if hot is None or not self.enabled or self.clock.now() >= hot.until:
            return False
        key = hot.value
        return any(
            s == key or s.startswith(key + "#") or s.endswith("#" + key) for s in _strings(kwargs, set())
        )

    # --- item versions ---

    def _key_of(self, table: str, item: dict[str, Any]) -> str:
        spec = _TABLES[table]
        names = [spec.partition.name] + ([spec.sort.name] if spec.sort else [])
        return json.dumps({n: item[n] for n in names}, sort_keys=True)

    def _fetch(self, table: str, key_id: str) -> dict[str, Any] | None:
        item = self.raw.get_item(TableName=table, Key=json.loads(key_id), ConsistentRead=True).get("Item")
        return dict(item) if item else None

    def _remember_before(self, table: str, key_id: str) -> None:
        if (table, key_id) not in self._versions:
            self._versions[(table, key_id)] = [(datetime.min.replace(tzinfo=UTC), self._fetch(table, key_id))]

    def _remember_after(self, table: str, key_id: str, written: Any = None) -> dict[str, Any] | None:
        """Record the item as it is now: `written` when the write gave it whole (a put), else read."""
        now = self.clock.now()
        item = self._fetch(table, key_id) if written is _READ else written
        versions = self._versions.setdefault((table, key_id), [])
        versions.append((now, item))
        horizon = now - timedelta(seconds=LONG_LAG + 5)
        while len(versions) > 2 and versions[1][0] < horizon:
            versions.pop(0)
        self._recent[table][key_id] = now
        if item is not None:
            self.max_item_bytes = max(self.max_item_bytes, item_bytes(item))
        return item

    def _as_of(self, table: str, key_id: str, instant: datetime) -> dict[str, Any] | None:
        item: dict[str, Any] | None = None
        for at, version in self._versions.get((table, key_id), []):
            if at > instant:
                break
            item = version
        return item

    # --- writes ---

    def write(self, inner: Any, name: str, kwargs: dict[str, Any]) -> Any:
        targets = self._targets(name, kwargs)
        with self._lock:
            for table, key_id, item in targets:
                self._remember_before(table, key_id)
                if item is not None and item_bytes(item) > ITEM_LIMIT_BYTES:
                    self._refuse(table, key_id, item_bytes(item))
            try:
                response = inner(**kwargs)
            except ClientError as exc:
                message = str(exc.response.get("Error", {}).get("Message", ""))
                if "size" in message.lower() and targets:  # moto checks some updates itself
                    self.oversize.append(f"{targets[0][0]} {targets[0][1]}: {message}")
                raise
            for table, key_id, item in targets:
                stored = self._remember_after(table, key_id, _after(name, item))
                if stored is not None and item_bytes(stored) > ITEM_LIMIT_BYTES:
                    # An update grew the item past the limit: AWS refuses it; undo it here.
                    previous = self._versions[(table, key_id)][-2][1]
                    if previous is None:
                        self.raw.delete_item(TableName=table, Key=json.loads(key_id))
                    else:
                        self.raw.put_item(TableName=table, Item=previous)
                    self._versions[(table, key_id)].pop()
                    self._refuse(table, key_id, item_bytes(stored))
        if not self.enabled or not self._conditional(name, kwargs):
            return response
        if self.rng.random() >= self.rates.write_timeout:
            return response
        if self.rng.random() < 0.5:
            self.counts["write_timeouts_raised"] += 1
            raise ReadTimeoutError(endpoint_url=f"https://dynamodb.{REGION}.amazonaws.com/")
        # The SDK resends the same request: the table has it already and answers for that state.
        self.counts["write_timeouts_replayed"] += 1
        with self._lock:
            try:
                return inner(**kwargs)
            finally:
                for table, key_id, item in targets:
                    self._remember_after(table, key_id, _after(name, item))

    def _refuse(self, table: str, key_id: str, size: int) -> None:
        self.oversize.append(f"{table} {key_id}: {size} bytes")
        raise ClientError(
            {
                "Error": {
                    "Code": "ValidationException",
                    "Message": "Item size has exceeded the maximum allowed size",
                }
            },
            "PutItem",
        )

    @staticmethod
    def _conditional(name: str, kwargs: dict[str, Any]) -> bool:
        if name == "transact_write_items":
            return any(
                "ConditionExpression" in body
                for entry in kwargs.get("TransactItems", [])
                for body in entry.values()
            )
        return "ConditionExpression" in kwargs

    def _targets(self, name: str, kwargs: dict[str, Any]) -> list[tuple[str, str, dict[str, Any] | None]]:
        """(table, key, item written whole or None) of each tracked item a write touches."""
        bodies = (
            [body for entry in kwargs.get("TransactItems", []) for body in entry.values()]
            if name == "transact_write_items"
            else [kwargs]
        )
        targets: list[tuple[str, str, dict[str, Any] | None]] = []
        for body in bodies:
            table = body.get("TableName")
            if table not in _TABLES:
                continue
            item = body.get("Item")
            targets.append((table, self._key_of(table, item or body["Key"]), item))
        return targets

    # --- index reads ---

    def query(self, inner: Any, kwargs: dict[str, Any]) -> Any:
        index = kwargs.get("IndexName")
        table = kwargs.get("TableName")
        figure = STALE_INDEXES.get(index or "")
        if figure is None or table not in _TABLES or not self.enabled:
            return inner(**kwargs)
        if self.rng.random() >= self.rates.stale_index_read:
            return inner(**kwargs)
        spec = _TABLES[table]
        index_spec = next(i for i in spec.indexes if i.name == index)
        conditions = self._conditions(kwargs)
        if conditions is None:
            return inner(**kwargs)
        # Usually under a second or two; under GSI back-pressure, several seconds.
        lag = self.rng.uniform(0.5, 3.0) if self.rng.random() < 0.8 else self.rng.uniform(3.0, LONG_LAG)
        as_of = self.clock.now() - timedelta(seconds=lag)
        with self._lock:
            recent = sorted(k for k, at in self._recent[table].items() if at > as_of)
            lagging = {k for k in recent if self.rng.random() < self.lagging_share}
            if not lagging:
                return inner(**kwargs)
            counting = kwargs.get("Select") == "COUNT"
            request = {k: v for k, v in kwargs.items() if k != "Select"}
            response = inner(**request)
            fresh = list(response.get("Items", []))
            items = [item for item in fresh if self._key_of(table, item) not in lagging]
            for key_id in sorted(lagging):
                old = self._as_of(table, key_id, as_of)
                if old is not None and all(_matches(old, c) for c in conditions):
                    items.append(self._project(old, spec, index_spec))
        sort = index_spec.sort.name if index_spec.sort else None
        if sort:
            items.sort(
                key=lambda i: i.get(sort, {}).get("S", ""), reverse=kwargs.get("ScanIndexForward") is False
            )
        if "Limit" in kwargs:
            items = items[: kwargs["Limit"]]
        if _canonical(items) != _canonical(fresh):
            self.counts[figure] += 1
        if counting:
            return {"Count": len(items), "ScannedCount": len(items)}
        return {**response, "Items": items, "Count": len(items)}

    @staticmethod
    def _conditions(kwargs: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]] | None:
        values = kwargs.get("ExpressionAttributeValues", {})
        parsed: list[tuple[str, str, dict[str, Any]]] = []
        for part in str(kwargs.get("KeyConditionExpression", "")).split(" AND "):
            match = _CONDITION.match(part)
            if match is None or match.group(3) not in values:
                return None  # a form this model does not evaluate: answer consistently
            parsed.append((match.group(1), match.group(2), values[match.group(3)]))
        return parsed

    @staticmethod
    def _project(item: dict[str, Any], spec: Any, index: Any) -> dict[str, Any]:
        if index.projection == "ALL":
            return dict(item)
        names = {spec.partition.name, index.partition.name, *index.include}
        names |= {k.name for k in (spec.sort, index.sort) if k is not None}
        return {k: v for k, v in item.items() if k in names}


_READ = object()  # the written item must be read back (an update)


def _after(name: str, item: dict[str, Any] | None) -> Any:
    if item is not None:
        return dict(item)
    return None if name == "delete_item" else _READ


def _matches(item: dict[str, Any], condition: tuple[str, str, dict[str, Any]]) -> bool:
    name, op, value = condition
    return name in item and _compare(item[name], op, value)


def _canonical(items: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


class ChaosDynamo:
    """One component's DynamoDB client under DynamoFaults and a random-throttle policy."""

    def __init__(self, faults: DynamoFaults, throttle: Throttle, code: str) -> None:
        self._faults = faults
        self._inner = faults.raw
        self._throttle = throttle
        self._code = code

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith(("get_paginator", "can_paginate", "meta")):
            return attr
        faults, throttle, code = self._faults, self._throttle, self._code

        def call(**kwargs: Any) -> Any:
            operation = "".join(part.title() for part in name.split("_"))
            if throttle.hit(name):
                raise ClientError({"Error": {"Code": code, "Message": "Rate exceeded (injected)"}}, operation)
            if faults.touches_hot_key(kwargs):
                faults.counts["hot_key_throttles"] += 1
                raise ClientError(
                    {
                        "Error": {
                            "Code": code,
                            "Message": "Partition throughput exceeded (injected)",
                        }
                    },
                    operation,
                )
            if name in WRITES:
                return faults.write(attr, name, kwargs)
            if name == "query":
                return faults.query(attr, kwargs)
            return attr(**kwargs)

        return call


# --- Lambda's recursive-loop cut-off ---


class LoopCutoff:
    """Lambda counts SQS→Lambda→SQS hops on the trace header and stops the chain after about
    16: a message sent from an invocation whose own message was hop `n` is hop `n + 1`, and
    past the limit it is dropped (counted) instead of delivered."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self.enabled = True
        self.hops: dict[str, int] = {}  # SQS message id -> hop
        self.dropped: list[str] = []  # message bodies dropped
        self._current = threading.local()

    @contextlib.contextmanager
    def invocation(self, message_id: str) -> Iterator[None]:
        self._current.hop = self.hops.get(message_id, 0)
        try:
            yield
        finally:
            self._current.hop = None

    def next_hop(self) -> int | None:
        hop = getattr(self._current, "hop", None)
        return None if hop is None else hop + 1


class LoopingQueueClient:
    """The worker's SQS client: sends from inside an invocation carry the hop count on."""

    def __init__(self, inner: Any, cutoff: LoopCutoff) -> None:
        self._inner = inner
        self._cutoff = cutoff

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send_message_batch(self, **kwargs: Any) -> Any:
        cutoff = self._cutoff
        hop = cutoff.next_hop()
        if hop is None:
            return self._inner.send_message_batch(**kwargs)
        if hop > cutoff.limit and cutoff.enabled:
            cutoff.dropped += [entry["MessageBody"] for entry in kwargs["Entries"]]
            return {
                "Successful": [
                    {"Id": entry["Id"], "MessageId": f"dropped-{len(cutoff.dropped)}-{entry['Id']}"}
                    for entry in kwargs["Entries"]
                ],
                "Failed": [],
            }
        response = self._inner.send_message_batch(**kwargs)
        for entry in response.get("Successful", []):
            cutoff.hops[entry["MessageId"]] = hop
        return response


class MessageTrail:
    """What SQS really did with each run's messages (sends with their delay, receives,
    deletes, visibility changes), for failure reports: wraps the SQS client beneath every
    fault wrapper, so a call a fault refused never shows. Threads call it at once."""

    def __init__(self, client: Any, now: Callable[[], datetime]) -> None:
        self._client = client
        self._now = now
        self._lock = threading.Lock()
        self.lines: dict[str, list[str]] = defaultdict(list)
        self._handles: dict[str, str] = {}  # receipt handle -> run key

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _note(self, run_key: str, what: str, url: str) -> None:
        with self._lock:
            self.lines[run_key].append(f"{self._now():%H:%M:%S} sqs {what} ({url.rsplit('/', 1)[-1]})")

    @staticmethod
    def _key(body: str) -> str:
        try:
            return str(json.loads(body).get("runKey", "?"))
        except (ValueError, AttributeError):
            return "?"

    def send_message(self, **kw: Any) -> Any:
        answer = self._client.send_message(**kw)
        self._note(self._key(kw["MessageBody"]), f"sent, delay {kw.get('DelaySeconds', 0)}s", kw["QueueUrl"])
        return answer

    def send_message_batch(self, **kw: Any) -> Any:
        answer = self._client.send_message_batch(**kw)
        sent = {s["Id"] for s in answer.get("Successful", [])}
        for entry in kw["Entries"]:
            outcome = "sent" if entry["Id"] in sent else "send refused"
            self._note(
                self._key(entry["MessageBody"]),
                f"{outcome}, delay {entry.get('DelaySeconds', 0)}s",
                kw["QueueUrl"],
            )
        return answer

    def receive_message(self, **kw: Any) -> Any:
        answer = self._client.receive_message(**kw)
        for message in answer.get("Messages", []):
            key = self._key(message.get("Body", ""))
            with self._lock:
                self._handles[message["ReceiptHandle"]] = key
            count = message.get("Attributes", {}).get("ApproximateReceiveCount", "?")
            self._note(key, f"received (receive {count})", kw["QueueUrl"])
        return answer

    def _handled(self, handle: str, what: str, url: str) -> None:
        with self._lock:
            key = self._handles.get(handle, "?")
        self._note(key, what, url)

    def delete_message(self, **kw: Any) -> Any:
        answer = self._client.delete_message(**kw)
        self._handled(kw["ReceiptHandle"], "deleted", kw["QueueUrl"])
        return answer

    def delete_message_batch(self, **kw: Any) -> Any:
        answer = self._client.delete_message_batch(**kw)
        for entry in kw["Entries"]:
            self._handled(entry["ReceiptHandle"], "deleted", kw["QueueUrl"])
        return answer

    def change_message_visibility(self, **kw: Any) -> Any:
        answer = self._client.change_message_visibility(**kw)
        self._handled(kw["ReceiptHandle"], f"visibility {kw['VisibilityTimeout']}s", kw["QueueUrl"])
        return answer

    def change_message_visibility_batch(self, **kw: Any) -> Any:
        answer = self._client.change_message_visibility_batch(**kw)
        for entry in kw["Entries"]:
            self._handled(entry["ReceiptHandle"], f"visibility {entry['VisibilityTimeout']}s", kw["QueueUrl"])
        return answer
