"""`jobsched local`: the whole scheduler on one machine.

A moto server holds the tables, stream and queues; the glue delivers events to the same
handler functions Lambda runs. The handlers find their resources through the same
environment variables the stack sets."""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import boto3
from jobsched.domain.events import RunEventsLevel
from jobsched.settings import Settings
from jobsched.store.schema import ALL_TABLES, DEFINITIONS, QUEUES, RUNS

from .config import LocalConfig
from .events_tail import EventTail
from .glue import HttpFront, Invoker, Loop, QueueSource, StreamSource, TtlReaper
from .moto_backend import MotoProcess, MotoServer, provision

log = logging.getLogger("jobsched_local")

STOP_WAIT_SECONDS = 10.0  # how long stop() waits, in all, for the loops' running steps


@dataclass
class LocalRuntime:
    config: LocalConfig = field(default_factory=LocalConfig)

    def __post_init__(self) -> None:
        self._loops: list[Loop] = []
        self._stopping = threading.Event()  # set first by stop(): failures from then on are quiet
        self.moto: MotoServer | MotoProcess | None = None
        self.front: HttpFront | None = None
        self.events_tail: EventTail | None = None
        self.resources: dict[str, Any] = {}
        self.sources: dict[str, Any] = {}
        self.invokers: dict[str, Invoker] = {}
        self._saved_environment: dict[str, str] | None = None

    @property
    def api_url(self) -> str:
        assert self.front is not None
        return self.front.url

    @property
    def api_key(self) -> str:
        return self.config.first_key

    def start(self) -> LocalRuntime:
        """Starts everything. Raises HandlerModuleError (before anything is started) when one
        of the handler modules cannot be imported from `handlers_path` or the installed
        packages, and OSError when a port cannot be bound."""
        config = self.config
        from jobsched.targets.registry import import_handler_modules

        import_handler_modules(config.handler_modules, config.handlers_path)
        self._saved_environment = dict(os.environ)
        # moto accepts any credentials; never let a developer's real ones be picked up.
        os.environ.update(
            {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_SESSION_TOKEN": "local"}
        )
        self.moto = (MotoProcess if config.moto_process else MotoServer)(config.host, config.moto_port)
        self.moto.start()
        self.resources = provision(self.moto.url, config.region)
        self._configure_environment()

        from jobsched.handlers import api, events, notifier, outbox, reconciler, sweeper, worker

        invoker = functools.partial(Invoker, stopping=self._stopping)
        self.invokers = {
            "api": invoker("api", api.handler, timeout_seconds=29),
            "sweeper": invoker("sweeper", sweeper.handler, timeout_seconds=300),
            "reconciler": invoker("reconciler", reconciler.handler, timeout_seconds=300),
            "outbox": invoker("outbox", outbox.handler, timeout_seconds=60),
            "events": invoker("events", events.handler, timeout_seconds=60),
            "notifier": invoker("notifier", notifier.handler, timeout_seconds=60),
            # Invoked side by side by the three queue sources, each up to its mapping's ceiling.
            "worker": invoker("worker", worker.handler, timeout_seconds=900, concurrent=True),
        }
        endpoint: dict[str, Any] = {"endpoint_url": self.moto.url, "region_name": config.region}
        sqs = boto3.client("sqs", **endpoint)
        self.events_tail = EventTail(sqs, self.resources["events_tail_url"])
        try:
            self.front = HttpFront(
                config.host, config.port, self.invokers["api"], config.tenant_for, self.events_tail.answer
            )
        except OSError as exc:
            self.moto.stop()  # a moto process would outlive a runtime that never started
            if exc.errno == errno.EADDRINUSE:
                raise OSError(exc.errno, f"API port {config.port} is already in use") from None
            raise
        self.front.start()

        streams = StreamSource(
            boto3.client("dynamodbstreams", **endpoint),
            self.resources["streams"][RUNS.logical_id],
            self.invokers["outbox"],
            region=config.region,
            matches=outbox.matches_filter,
            batch_size=config.stream_batch_size,
        )
        self.sources["stream"] = streams
        self._every("outbox-stream", config.stream_poll_seconds, streams.poll)
        # The events consumer reads both tables' streams, as its two mappings do in the stack.
        level = RunEventsLevel(config.run_events)
        for spec in (RUNS, DEFINITIONS):
            changes = StreamSource(
                boto3.client("dynamodbstreams", **endpoint),
                self.resources["streams"][spec.logical_id],
                self.invokers["events"],
                region=config.region,
                matches=functools.partial(events.matches_filter, level=level, table=spec),
                batch_size=config.stream_batch_size,
            )
            self.sources[f"events:{spec.logical_id}"] = changes
            self._every(f"events-{spec.logical_id.lower()}", config.stream_poll_seconds, changes.poll)
        self._every("events-tail", 0.5, self.events_tail.drain)
        notifications = QueueSource(
            sqs,
            self.resources["notifications_url"],
            self.resources["notifications_arn"],
            self.invokers["notifier"],
            region=config.region,
            batch_size=5,
            idle_seconds=config.queue_idle_seconds,
        )
        self.sources["queue:notifications"] = notifications
        self._every("notifier", config.queue_poll_seconds, notifications.poll)
        for queue in QUEUES:
            source = QueueSource(
                sqs,
                self.resources["queue_urls"][queue.key],
                self.resources["queue_arns"][queue.key],
                self.invokers["worker"],
                region=config.region,
                batch_size=config.queue_batch_size,
                max_concurrency=queue.max_concurrency,
                idle_seconds=config.queue_idle_seconds,
            )
            self.sources[f"queue:{queue.key}"] = source
            self._every(f"worker-{queue.key}", config.queue_poll_seconds, source.poll)
        self._every(
            "sweeper-tick", config.sweep_seconds, lambda: self.invokers["sweeper"](_scheduled_event())
        )
        self._every(
            "reconciler-tick",
            config.reconcile_seconds,
            lambda: self.invokers["reconciler"](_scheduled_event()),
        )
        reaper = TtlReaper(
            boto3.client("dynamodb", **endpoint),
            [
                (spec.default_name, spec.ttl_attribute, [k.name for k in (spec.partition, spec.sort) if k])
                for spec in ALL_TABLES
                if spec.ttl_attribute
            ],
            time.time,
        )
        self.sources["ttl"] = reaper
        self._every("ttl-reaper", config.ttl_seconds, reaper.sweep)
        for loop in self._loops:
            loop.start()
        return self

    def stop(self) -> None:
        """Stops everything, in an order that leaves nothing calling what is gone: every loop
        told to stop at once (none waits for another's step to end), their running steps
        waited for (STOP_WAIT_SECONDS in all), then the HTTP front, then moto."""
        self._stopping.set()
        for loop in self._loops:
            loop.request_stop()
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        for loop in self._loops:
            loop.join(deadline - time.monotonic())
        if self.front:
            self.front.stop()
        if self.moto:
            self.moto.stop()
        if self._saved_environment is not None:
            # Later code in this process must not talk to a server that is gone.
            os.environ.clear()
            os.environ.update(self._saved_environment)
            from jobsched import aws, settings, wiring

            settings.settings.cache_clear()
            aws.client.cache_clear()
            wiring.override(None)

    def _every(self, name: str, seconds: float, step: Any) -> None:
        self._loops.append(Loop(name, seconds, step))

    def _configure_environment(self) -> None:
        """What the stack's function configuration provides, pointed at the moto server."""
        assert self.moto is not None
        config = self.config
        runtime = local_settings(config, self.resources, self.moto.url)
        env = {
            **runtime.lambda_environment(),  # as the stack generates it, table names local
            "AWS_DEFAULT_REGION": config.region,
            "AWS_REGION": config.region,
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
        }
        os.environ.update(env)
        # Anything built from an earlier environment is rebuilt on first use.
        from jobsched import aws, settings, wiring

        settings.settings.cache_clear()
        aws.client.cache_clear()
        wiring.override(None)


def local_settings(config: LocalConfig, resources: dict[str, Any], endpoint_url: str | None) -> Settings:
    """The settings local mode's functions run with: `config`'s, pointed at the queues
    `provision` made (`resources`) on the moto server at `endpoint_url`."""
    return config.runtime_settings(
        queue_urls=resources["queue_urls"],
        dlq_urls=resources["dlq_urls"],
        notifications_queue_url=resources["notifications_url"],
        own_queue_urls=resources["own_queue_urls"],
        endpoint_url=endpoint_url,
    )


def _scheduled_event() -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(time.time_ns()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "resources": [],
        "detail": {},
    }
