"""The one way services, stores and handlers emit metrics: a small port.

Powertools implements it in the Lambda functions (jobsched.observability.PowertoolsMetrics);
tests use `RecordedMetrics`. Metric names, units and dimensions are what the stack's alarms
and dashboard read (infra/monitoring.py), so a name here is part of the deployed contract."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class Unit(StrEnum):
    COUNT = "Count"
    SECONDS = "Seconds"


class Metrics(Protocol):
    def add(
        self,
        name: str,
        value: float = 1,
        unit: Unit = Unit.COUNT,
        dimensions: Mapping[str, str] | None = None,
    ) -> None:
        """One value of `name`. `dimensions` beyond the service's own make a metric of its own
        (e.g. per priority); None is the service-wide metric."""


class NoMetrics:
    """Emits nothing (a service built without a sink)."""

    def add(
        self,
        name: str,
        value: float = 1,
        unit: Unit = Unit.COUNT,
        dimensions: Mapping[str, str] | None = None,
    ) -> None:
        return None


NO_METRICS = NoMetrics()


@dataclass(frozen=True)
class Recorded:
    name: str
    value: float
    unit: Unit
    dimensions: tuple[tuple[str, str], ...] = ()


@dataclass
class RecordedMetrics:
    """Keeps every value in memory, in order (thread-safe: the worker's records run on threads)."""

    records: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(
        self,
        name: str,
        value: float = 1,
        unit: Unit = Unit.COUNT,
        dimensions: Mapping[str, str] | None = None,
    ) -> None:
        entry = Recorded(name, float(value), Unit(unit), tuple(sorted((dimensions or {}).items())))
        with self._lock:
            self.records.append(entry)

    def values(self, name: str, **dimensions: str) -> list[float]:
        wanted = tuple(sorted(dimensions.items()))
        return [r.value for r in self.records if r.name == name and r.dimensions == wanted]

    def total(self, name: str, **dimensions: str) -> float:
        return sum(self.values(name, **dimensions))

    def names(self) -> set[str]:
        return {r.name for r in self.records}

    def shapes(self) -> set[tuple[str, Unit, tuple[str, ...]]]:
        """(name, unit, dimension names) of everything recorded."""
        return {(r.name, r.unit, tuple(k for k, _ in r.dimensions)) for r in self.records}

    def clear(self) -> None:
        with self._lock:
            self.records.clear()
