"""Builds the services a handler needs from settings, once per process.

Tests and local mode replace the clock (or the whole container) through `override`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .aws import client
from .domain.instants import Clock, SystemClock
from .services.jobs import JobService
from .settings import Settings, settings
from .store.definitions import DefinitionStore


@dataclass
class Container:
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)

    def __post_init__(self) -> None:
        self.definitions = DefinitionStore(
            client("dynamodb"), self.settings.definitions_table, self.settings.shard_count
        )
        self.jobs = JobService(self.definitions, self.clock)


_container: Container | None = None


def container() -> Container:
    global _container
    if _container is None:
        _container = Container(settings())
    return _container


def override(new: Container | None) -> None:
    """Install a container (tests, local mode); None drops it so the next call rebuilds."""
    global _container
    _container = new
