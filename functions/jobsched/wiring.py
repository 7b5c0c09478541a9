"""Builds the services a handler needs from settings, once per process.

Tests and local mode replace the clock (or the whole container) through `override`.
Each service is a cached property so a handler builds only what it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property

from .aws import client
from .domain.instants import Clock, SystemClock
from .services.jobs import JobService
from .services.materialize import Materializer
from .services.sweeper import Sweeper
from .settings import Settings, settings
from .store.definitions import DefinitionStore
from .store.queues import RunQueues
from .store.runs import RunStore


@dataclass
class Container:
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)

    @cached_property
    def definitions(self) -> DefinitionStore:
        return DefinitionStore(client("dynamodb"), self.settings.definitions_table, self.settings.shard_count)

    @cached_property
    def runs(self) -> RunStore:
        return RunStore(
            client("dynamodb"),
            self.settings.runs_table,
            self.settings.shard_count,
            retention=timedelta(days=self.settings.retention_days),
        )

    @cached_property
    def queues(self) -> RunQueues:
        return RunQueues(
            client("sqs"), self.settings.queue_urls, self.settings.dlq_urls, fair=self.settings.fair_queues
        )

    @cached_property
    def jobs(self) -> JobService:
        return JobService(self.definitions, self.clock, materialize=self.materializer.materialize)

    @cached_property
    def materializer(self) -> Materializer:
        return Materializer(
            self.definitions, self.runs, self.clock, horizon=timedelta(seconds=self.settings.horizon_seconds)
        )

    @cached_property
    def sweeper(self) -> Sweeper:
        return Sweeper(self.definitions, self.materializer, self.clock)

    # --- services added by later capabilities go below, one cached property each ---

    @cached_property
    def outbox(self) -> Outbox:  # type: ignore[name-defined]  # noqa: F821 (import belongs at the top)
        from .services.outbox import Outbox, default_router

        return Outbox(self.runs, self.queues, self.clock, default_router())

    @cached_property
    def reconciler(self) -> Reconciler:  # type: ignore[name-defined]  # noqa: F821 (import belongs at the top)
        from .services.reconciler import Reconciler

        return Reconciler(self.runs, self.clock, shard_count=self.settings.shard_count)


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
