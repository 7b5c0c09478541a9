"""Builds the services a handler needs from settings, once per process.

Tests and local mode replace the clock (or the whole container) through `override`.
Each service is a cached property so a handler builds only what it uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING

from .aws import client
from .domain.grants import Grants
from .domain.instants import Clock, SystemClock
from .domain.metrics import Metrics
from .domain.runs import Run
from .observability import powertools_metrics
from .services.calendars import CalendarService
from .services.completion import Completer
from .services.events import EventPublisher
from .services.jobs import JobService
from .services.materialize import Materializer
from .services.missed import MissedRuns
from .services.notifications import NotificationQueue, Notifier
from .services.outbox import EXTERNAL, Outbox, Router, priority_router
from .services.reconciler import ACTOR as RECONCILER_ACTOR
from .services.reconciler import Reconciler
from .services.record_delivery import RecordDelivery, SetAsideQueue
from .services.runs import RunService
from .services.sweeper import Sweeper
from .services.worker import Worker
from .settings import Settings, settings
from .store.calendars import CalendarStore
from .store.definitions import DefinitionStore
from .store.queues import RunQueues
from .store.runs import RunStore
from .store.second_ticks import SecondTicks
from .store.tenant_slots import TenantSlots

if TYPE_CHECKING:
    from .targets import HttpTargetClient, TargetAuthority, TargetRunner


@dataclass
class Container:
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    metrics: Metrics = powertools_metrics  # tests record them (domain.metrics.RecordedMetrics)

    def __post_init__(self) -> None:
        # Python job handlers register themselves on import; every function imports them so
        # the outbox routes exactly the types the worker can run. One that cannot be imported
        # fails the function's start with one error naming it (targets.HandlerModuleError).
        if self.settings.handler_modules:
            from .targets.registry import import_handler_modules

            import_handler_modules(self.settings.handler_modules)

    @cached_property
    def definitions(self) -> DefinitionStore:
        return DefinitionStore(
            client("dynamodb"),
            self.settings.definitions_table,
            self.settings.shard_count,
            metrics=self.metrics,
        )

    @cached_property
    def calendar_store(self) -> CalendarStore:
        return CalendarStore(client("dynamodb"), self.settings.definitions_table)

    @cached_property
    def calendars(self) -> CalendarService:
        return CalendarService(self.calendar_store, self.clock)

    @cached_property
    def runs(self) -> RunStore:
        return RunStore(
            client("dynamodb"),
            self.settings.runs_table,
            self.settings.shard_count,
            retention=timedelta(days=self.settings.retention_days),
            is_external=self.is_external,
            metrics=self.metrics,
        )

    @cached_property
    def router(self) -> Router:
        """Each run's queue: its priority's, or external workers' for a target-less run of a
        type no handler of the process-wide registry (targets.registry) runs."""
        from .targets.registry import registry

        return priority_router(lambda job_type: registry.get(job_type) is not None)

    @cached_property
    def is_external(self) -> Callable[[Run], bool]:
        """Target-less runs of a type no registered handler runs: external workers lease them."""
        route = self.router
        return lambda run: route(run) == EXTERNAL

    @cached_property
    def queues(self) -> RunQueues:
        return RunQueues(
            client("sqs"), self.settings.queue_urls, self.settings.dlq_urls, fair=self.settings.fair_queues
        )

    @cached_property
    def jobs(self) -> JobService:
        return JobService(
            self.definitions,
            self.clock,
            materialize=self.materializer.materialize,
            max_jobs_per_tenant=self.settings.max_jobs_per_tenant,
            requests_per_second=self.settings.tenant_requests_per_second,
            on_resume=self.missed_runs.on_resume,
            runs=self.runs,
            plan_missed=self.missed_runs.window,
            authorize_target=self.target_authority.check_write,
            first_pass=self.materializer.first_pass,
            run_request=self.runs.insert_request,
            run_retention=self.runs.retention,
            on_cancel=lambda job: self.run_service.cancel_unstarted(job, f"api:{job.tenant}"),
            calendars=self.calendars.cache,
        )

    @cached_property
    def grants(self) -> Callable[[], Grants]:
        """The operator's grants as they are now (jobsched.targets.grant_source): the AWS
        targets and the secret references each tenant may name, checked at write and again
        before each effect or secret read. The scheduler's own resources (Settings.own_names)
        are refused whatever they say."""
        from .targets.grant_source import ParameterGrants

        own = self.settings.own_names()
        if self.settings.target_grants_parameter:
            return ParameterGrants(self.settings.target_grants_parameter, client("ssm"), own=own)
        fixed = Grants(self.settings.target_grants, own)
        return lambda: fixed

    @cached_property
    def target_authority(self) -> TargetAuthority:
        from .targets import TargetAuthority

        return TargetAuthority(self.grants)

    @cached_property
    def missed_runs(self) -> MissedRuns:
        return MissedRuns(
            self.definitions, self.runs, self.completer, self.clock, calendars=self.calendars.cache
        )

    @cached_property
    def materializer(self) -> Materializer:
        return Materializer(
            self.definitions,
            self.runs,
            self.clock,
            horizon=timedelta(seconds=self.settings.horizon_seconds),
            ahead=timedelta(seconds=self.settings.sweep_ahead_seconds),
            run_retention=self.runs.retention,
            calendars=self.calendar_store,
        )

    @cached_property
    def sweeper(self) -> Sweeper:
        return Sweeper(self.definitions, self.materializer, self.clock, metrics=self.metrics)

    @cached_property
    def http_targets(self) -> HttpTargetClient:
        from .targets import DestinationPolicy, HttpTargetClient
        from .targets.secrets import SecretReader
        from .targets.signing import DeliverySigner

        return HttpTargetClient(
            DestinationPolicy(list(self.settings.http_allow_destinations)),
            signer=DeliverySigner(self.definitions.signing_secrets, self.clock),
            # Secret references are authorised with the same grants as AWS targets.
            secrets=SecretReader(client, self.grants, max_age=self.settings.secret_cache_seconds),
        )

    @cached_property
    def target_runner(self) -> TargetRunner:
        from .targets import AssumedRoles, TargetRunner

        # Assumed credentials expire by the wall clock, whatever clock the scheduler runs on.
        roles = AssumedRoles(lambda: client("sts"), SystemClock())
        return TargetRunner(client, http=self.http_targets, authority=self.target_authority, roles=roles)

    @cached_property
    def worker(self) -> Worker:
        return Worker(
            self.definitions,
            self.runs,
            self.queues,
            self.target_runner,
            self.clock,
            worker_id="local",
            lease_seconds=self.settings.lease_seconds,
            tenant_concurrency=self.settings.tenant_concurrency,
            idempotency_ttl=timedelta(days=1),
            metrics=self.metrics,
            completer=self.completer,
            tenant_slots=self.tenant_slots,
        )

    # --- services added by later capabilities go below, one cached property each ---

    @cached_property
    def outbox(self) -> Outbox:
        return Outbox(self.runs, self.queues, self.clock, self.router, self.metrics)

    @cached_property
    def event_publisher(self) -> EventPublisher:
        return EventPublisher(client("events"), self.settings.event_bus_name, self.metrics)

    @cached_property
    def notification_queue(self) -> NotificationQueue:
        return NotificationQueue(client("sqs"), self.settings.notifications_queue_url, self.metrics)

    @cached_property
    def record_delivery(self) -> RecordDelivery:
        """The events consumer's: each record's events and deliveries, a record that keeps
        failing set aside on the events failures queue. Its age is read on this host's clock
        (the stream stamps records with AWS's), not `clock`."""
        kept = SetAsideQueue(
            client("sqs"),
            self.settings.events_failures_queue_url,
            self.settings.event_bus_name,
            self.settings.notifications_queue_url,
            self.metrics,
        )
        return RecordDelivery(self.event_publisher, self.notification_queue, kept)

    @cached_property
    def second_ticks(self) -> SecondTicks:
        # Sent before the pass: a few seconds at most, whatever SQS does.
        return SecondTicks(client("sqs", quick=True), self.settings.second_tick_queue_url, self.metrics)

    @cached_property
    def notifier(self) -> Notifier:
        """Delivers notifications with the worker's means: the same grants, roles, SSRF policy,
        secret references and the job's signing secret."""
        return Notifier(self.target_runner.client_for, self.http_targets, self.metrics)

    @cached_property
    def completer(self) -> Completer:
        return Completer(
            self.definitions, self.runs, self.queues, self.clock, self.metrics, slots=self.tenant_slots
        )

    @cached_property
    def tenant_slots(self) -> TenantSlots | None:
        """TENANT_CONCURRENCY as slot items beside the runs (None: no limit)."""
        limit = self.settings.tenant_concurrency
        return TenantSlots(self.runs, limit) if limit > 0 else None

    @cached_property
    def reconciler(self) -> Reconciler:
        return Reconciler(
            self.runs,
            self.clock,
            shard_count=self.settings.shard_count,
            on_dead=self.completer.after,
            is_external=self.is_external,
            settle_held=self.missed_runs.settle_held,
            paused_claim=self.missed_runs.paused_claim,
            metrics=self.metrics,
            recorded_shard_count=self.definitions.recorded_shard_count,
            publish=Outbox(
                self.runs, self.queues, self.clock, self.router, self.metrics, actor=RECONCILER_ACTOR
            ).publish,
        )

    @cached_property
    def run_service(self) -> RunService:
        return RunService(
            self.definitions,
            self.runs,
            self.completer,
            self.clock,
            is_external=self.is_external,
            authorize_target=self.target_authority.check_write,
            calendars=self.calendars.cache,
        )


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
