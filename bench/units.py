"""Billed units from request and item sizes, following the published DynamoDB and SQS rules.

moto answers ReturnConsumedCapacity with fixed numbers (1.0 or 0.5 per call, whatever the
item size), so units are computed here from the items themselves:

- item size: sum of attribute name + value sizes (strings and binary by bytes, numbers
  ~1 byte per 2 significant digits + 1, booleans and nulls 1 byte, lists and maps 3 bytes
  plus 1 byte per element, sets the sum of their elements);
- writes: ceil(max(size before, size after) / 1 KB) per item, doubled inside a transaction;
- GSI writes: per index, 0, 1 (entered, left, or projected attributes changed) or 2 (index
  key changed), each ceil(projected size / 1 KB);
- reads: ceil(size / 4 KB) strongly consistent, half that eventually consistent; a query
  pays for the sum of the item sizes it reads, rounded up once;
- SQS: one request per call, per 64 KB chunk of payload."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from jobsched.store.schema import ALL_TABLES, TableSpec

KB = 1024
SQS_CHUNK = 64 * KB


def number_size(text: str) -> int:
    digits = text.lstrip("-").replace(".", "")
    if "e" in digits.lower():  # exponent form: normalise through Decimal
        digits = format(Decimal(text).normalize(), "f").lstrip("-").replace(".", "")
    significant = digits.strip("0") or "0"
    return (len(significant) + 1) // 2 + 1


def value_size(value: dict[str, Any]) -> int:
    """Size of one attribute value in DynamoDB JSON ({"S": ...}, {"N": ...}, ...)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "N":
        return number_size(raw)
    if kind == "B":
        return len(raw) if isinstance(raw, bytes) else len(base64.b64decode(raw))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in raw)
    if kind == "NS":
        return sum(number_size(n) for n in raw)
    if kind == "BS":
        return sum(len(b) if isinstance(b, bytes) else len(base64.b64decode(b)) for b in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB type {kind}")


def item_size(item: dict[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / KB))


def read_units(size: int, *, consistent: bool) -> float:
    units = max(1, math.ceil(size / (4 * KB)))
    return float(units) if consistent else units / 2


def sqs_requests(payload_bytes: int) -> int:
    return max(1, math.ceil(payload_bytes / SQS_CHUNK))


# --- indexes ---


@dataclass(frozen=True)
class IndexShape:
    name: str
    keys: tuple[str, ...]  # the index's own key attributes
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    include: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableShape:
    name: str
    keys: tuple[str, ...]
    indexes: tuple[IndexShape, ...]

    @classmethod
    def of(
        cls, spec: TableSpec, projections: dict[str, tuple[str, tuple[str, ...]]] | None = None
    ) -> TableShape:
        """The shape of a schema table; `projections` overrides an index's projection (what-ifs)."""
        projections = projections or {}
        indexes = []
        for index in spec.indexes:
            keys = tuple(k.name for k in (index.partition, index.sort) if k)
            projection, include = projections.get(index.name, (index.projection, index.include))
            indexes.append(IndexShape(index.name, keys, projection, include))
        keys = tuple(k.name for k in (spec.partition, spec.sort) if k)
        return cls(spec.default_name, keys, tuple(indexes))

    def key_of(self, item: dict[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in self.keys}


SHAPES = {spec.default_name: TableShape.of(spec) for spec in ALL_TABLES}


def _projected(item: dict[str, Any], table: TableShape, index: IndexShape) -> dict[str, Any]:
    if index.projection == "ALL":
        return item
    names = set(table.keys) | set(index.keys) | set(index.include)
    return {k: v for k, v in item.items() if k in names}


@dataclass(frozen=True)
class GsiWrite:
    index: str
    kind: str  # insert | remove | update | rekey
    units: int


def gsi_writes(table: TableShape, old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[GsiWrite]:
    writes: list[GsiWrite] = []
    for index in table.indexes:
        was = bool(old) and all(k in old for k in index.keys)  # type: ignore[operator]
        now = bool(new) and all(k in new for k in index.keys)  # type: ignore[operator]
        if not was and not now:
            continue
        if not was:
            assert new is not None
            writes.append(
                GsiWrite(index.name, "insert", write_units(item_size(_projected(new, table, index))))
            )
            continue
        assert old is not None
        before = _projected(old, table, index)
        if not now:
            writes.append(GsiWrite(index.name, "remove", write_units(item_size(before))))
            continue
        assert new is not None
        after = _projected(new, table, index)
        if any(old[k] != new[k] for k in index.keys):
            writes.append(
                GsiWrite(index.name, "rekey", write_units(item_size(before)) + write_units(item_size(after)))
            )
        elif before != after:
            writes.append(
                GsiWrite(index.name, "update", write_units(max(item_size(before), item_size(after))))
            )
    return writes


@dataclass(frozen=True)
class WriteCost:
    table_units: float
    gsi: tuple[GsiWrite, ...]

    @property
    def gsi_units(self) -> int:
        return sum(w.units for w in self.gsi)

    @property
    def total(self) -> float:
        return self.table_units + self.gsi_units


def write_cost(
    table: TableShape,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    *,
    transactional: bool = False,
    applied: bool = True,
) -> WriteCost:
    """Units of one item write. A write whose condition failed still pays for the item, but
    changes no index."""
    units = write_units(max(item_size(old), item_size(new)))
    if transactional:
        units *= 2
    if not applied:
        return WriteCost(units, ())
    return WriteCost(units, tuple(gsi_writes(table, old, new)))


def query_read_units(items: Iterable[dict[str, Any]], *, consistent: bool) -> float:
    return read_units(sum(item_size(i) for i in items), consistent=consistent)
