"""Shared DynamoDB helpers: (de)serialisation, error translation, opaque cursors."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from ..domain.errors import StorageUnavailable, ValidationFailed
from ..domain.metrics import Metrics
from ..observability import logger

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()

THROTTLING_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    # A single-item write that met an ongoing transaction on its item, still refused after
    # `retry_conflicts`: nothing was written, so the caller may send it again.
    "TransactionConflictException",
}

T = TypeVar("T")
CONFLICT_ATTEMPTS = 5
CONFLICT_PAUSE = 0.02  # seconds; the first pause's ceiling, doubling per attempt (full jitter)


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(v) for k, v in values.items() if v is not None}


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(_deserializer.deserialize(v)) for k, v in item.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """What a read of many items parsed, in order, and the keys of the items it left out."""

    items: list[T]
    unreadable: list[str] = field(default_factory=list)


MAX_LOGGED_PROBLEMS = 10


def parse_items(
    items: Iterable[dict[str, Any]],
    parse: Callable[[dict[str, Any]], T],
    *,
    kind: str,
    key: Callable[[dict[str, Any]], str],
    metric: str,
    metrics: Metrics,
) -> Parsed[T]:
    """Each item as `parse` reads it. One it cannot read (a value a newer release wrote that
    this one cannot take, left behind by a rollback; a hand edit) is left out: logged as
    `unreadable <kind> item` with its key (`key(item)`) and what was refused (each field's
    path and rule, never its value), counted (`metric`, 1 an item) and named in `unreadable`,
    so that it fails no read of the items beside it. Whether leaving it out loses work is the
    caller's to decide, and its docstring's to say."""
    parsed: list[T] = []
    unreadable: list[str] = []
    for item in items:
        try:
            parsed.append(parse(item))
        except Exception as exc:
            name = _item_key(item, key)
            logger.error(
                f"unreadable {kind} item",
                extra={"key": name, "error": type(exc).__name__, "problems": _problems(exc)},
            )
            metrics.add(metric)
            unreadable.append(name)
    return Parsed(parsed, unreadable)


def _item_key(item: dict[str, Any], key: Callable[[dict[str, Any]], str]) -> str:
    try:
        return key(item)
    except Exception:  # an item without its key attributes: say what it holds instead
        return "?" + ",".join(sorted(item))


def _problems(exc: Exception) -> list[str]:
    """Where a validation failed and on which rule (`<path>: <rule type>`); the values are
    left out: they may be a tenant's payload or a header."""
    if not isinstance(exc, ValidationError):
        return []
    found = exc.errors(include_url=False, include_input=False, include_context=False)
    return [f"{'.'.join(str(p) for p in e['loc'])}: {e['type']}" for e in found[:MAX_LOGGED_PROBLEMS]]


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def retry_conflicts(write: Callable[[], T], *, attempts: int = CONFLICT_ATTEMPTS) -> T:
    """`write()` (one PutItem, UpdateItem or DeleteItem), sent again while DynamoDB refuses it
    with TransactionConflictException: a transaction (a tenant-slot claim) holds the item for
    the few milliseconds it takes. botocore does not retry that code, and the write was not
    applied, so sending it again is safe. After `attempts` the error surfaces (a 503 through
    `translated_errors`); every other outcome is returned or raised at once."""
    for attempt in range(attempts):
        try:
            return write()
        except ClientError as exc:
            if error_code(exc) != "TransactionConflictException" or attempt == attempts - 1:
                raise
            time.sleep(random.uniform(0, CONFLICT_PAUSE * 2**attempt))
    raise AssertionError("unreachable")


@contextmanager
def translated_errors() -> Iterator[None]:
    """Turn throttling and transport failures (after botocore's retries) into a 503 the caller may retry."""
    try:
        yield
    except ClientError as exc:
        if error_code(exc) in THROTTLING_CODES:
            raise StorageUnavailable("the store is throttling; retry with backoff") from exc
        if error_code(exc) == "ValidationException" and _backfilling_index(exc):
            # An index an upgrade added is readable once DynamoDB has filled it from the
            # table (minutes to hours): until then a listing it serves is a 503 to retry.
            raise StorageUnavailable(
                "this listing's index is still being built after an upgrade; retry in a few minutes",
                retry_after=BACKFILL_RETRY_SECONDS,
            ) from exc
        if error_code(exc) == "ValidationException" and _names_start_key(exc):
            # A well-formed cursor whose key lies outside the listing (its bounds or schema).
            raise ValidationFailed("cursor", "is not a cursor returned by this listing") from None
        raise
    except BotoCoreError as exc:
        raise StorageUnavailable(f"the store could not be reached: {exc}") from exc


BACKFILL_RETRY_SECONDS = 60


def _backfilling_index(exc: ClientError) -> bool:
    """DynamoDB's answer to a query of an index still being filled after it was added."""
    message = str(exc.response.get("Error", {}).get("Message", "")).lower()
    return "backfilling global secondary index" in message


def _names_start_key(exc: ClientError) -> bool:
    message = str(exc.response.get("Error", {}).get("Message", "")).lower()
    return "starting key" in message or "exclusive start key" in message or "exclusivestartkey" in message


BATCH_GET_LIMIT = 100  # keys per BatchGetItem request


def batch_get(
    client: Any, table: str, keys: list[dict[str, Any]], *, consistent: bool = True, attempts: int = 5
) -> list[dict[str, Any]]:
    """The items at `keys`, in the order given; keys with no item are left out.

    Readers of keys-only indexes fetch what they found here. Unprocessed keys (throttling)
    are retried with backoff; what is still unprocessed after that is a 503 to the caller."""
    unique = list({_key_id(k): k for k in keys}.values())  # BatchGetItem rejects repeated keys
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(unique), BATCH_GET_LIMIT):
        pending: list[dict[str, Any]] = unique[start : start + BATCH_GET_LIMIT]
        for attempt in range(attempts):
            with translated_errors():
                response = client.batch_get_item(
                    RequestItems={table: {"Keys": pending, "ConsistentRead": consistent}}
                )
            names = list(pending[0])
            for item in response.get("Responses", {}).get(table, []):
                found[_key_id({n: item[n] for n in names})] = item
            pending = response.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
            if not pending:
                break
            time.sleep(min(1.0, 0.05 * 2**attempt))
        else:
            raise StorageUnavailable("the store is throttling reads; retry with backoff")
    return [found[kid] for kid in (_key_id(k) for k in keys) if kid in found]


def _key_id(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True)


def _scope_digest(scope: str) -> str:
    return hashlib.sha256(scope.encode("utf-8")).hexdigest()[:32]


def encode_cursor(last_key: dict[str, Any], scope: str) -> str:
    """The next page's start, base64url of compact UTF-8 JSON with the scope as a digest: the
    key holds the tenant once already, and a 256-character tenant id of 4-byte characters,
    written twice as `\\u` escapes, made a cursor past the 4096 characters the API takes."""
    data = {"s": _scope_digest(scope), "k": from_item(last_key)}
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode().rstrip("=")


# The key attribute that holds a listing's scope: its partition key (the tenant of the tenant
# and dead-letter indexes, the job of a job's runs). A cursor must name the same partition.
_SCOPE_ATTRIBUTES = ("tenant", "dead_tenant", "job_id")


def decode_cursor(cursor: str, scope: str, key_names: set[str]) -> dict[str, Any]:
    """Decode a cursor minted by encode_cursor for the same scope (tenant, job...), or 400."""
    scope_attribute = next(a for a in _SCOPE_ATTRIBUTES if a in key_names)
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        key = data["k"]
        valid = (
            data.get("s") in (_scope_digest(scope), scope)  # the raw scope: cursors minted before
            and isinstance(key, dict)
            and set(key) == key_names
            and key[scope_attribute] == scope
            # Every key attribute a listing pages on is a string (S): a forged number or
            # object would reach DynamoDB as a key of the wrong type.
            and all(isinstance(v, str) and 0 < len(v) <= 1024 for v in key.values())
        )
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        valid = False
    if not valid:
        raise ValidationFailed("cursor", "is not a cursor returned by this listing")
    return to_item(key)
