"""The outbox: publishes runs that became PENDING or RETRY_WAIT to their queue, then marks them QUEUED.

The SQS delay is the timing wheel, so a run is published only once it is due within the
SQS delay limit; runs further out are left PENDING and re-touched by the reconciler at
`due_at - 900 s`. A run published twice is harmless (the worker's claim is conditional);
a run that fails to publish is reported so the stream batch retries it, and beyond that
the reconciler repairs it."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..domain.errors import JobschedError
from ..domain.instants import Clock
from ..domain.lifecycle import queued
from ..domain.metrics import NO_METRICS, Metrics, Unit
from ..domain.repair import SQS_MAX_DELAY
from ..domain.runs import Run, RunState
from ..observability import logger
from ..store.queues import RunQueues
from ..store.runs import RunChanged, RunStore

PUBLISHABLE = frozenset({RunState.PENDING, RunState.RETRY_WAIT})
EXTERNAL = "external"  # not a queue: leased through the API

Router = Callable[[Run], str]


def priority_router(has_handler: Callable[[str], bool]) -> Router:
    """Route by priority, except target-less runs nobody here can execute: those go to external workers."""

    def route(run: Run) -> str:
        if run.target is None and not has_handler(run.job_type):
            return EXTERNAL
        return run.priority.value

    return route


def registered_handler(job_type: str) -> bool:
    """Whether the process-wide handler registry knows the job type (every type, if it is absent)."""
    try:
        module = importlib.import_module("jobsched.targets.registry")
    except ImportError:
        return True
    registry = getattr(module, "registry", None)
    return registry is None or registry.get(job_type) is not None


def default_router() -> Router:
    return priority_router(registered_handler)


@dataclass
class PublishOutcome:
    published: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped_far_future: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # sent, but the run had moved on before QUEUED


class Outbox:
    def __init__(
        self, runs: RunStore, queues: RunQueues, clock: Clock, route: Router, metrics: Metrics = NO_METRICS
    ) -> None:
        self._metrics = metrics
        self._runs = runs
        self._queues = queues
        self._clock = clock
        self._route = route

    def publish(self, runs: list[Run]) -> list[str]:
        """Publish what is publishable; returns the run keys whose publish failed."""
        return self.publish_detailed(runs).failed

    def publish_detailed(self, runs: list[Run]) -> PublishOutcome:
        now = self._clock.now()
        outcome = PublishOutcome()
        by_queue: dict[str, list[tuple[Run, int]]] = {}
        for run in _latest_publishable(runs):
            if self._route(run) == EXTERNAL:
                # External workers lease from the claimable index; QUEUED says "available".
                (outcome.published if self._mark_queued(run, now) else outcome.stale).append(run.run_key)
                continue
            # A deferred run is published again when its worker asked (tenant limit, buffered).
            visible_at = max(run.due_at, run.deferred_until or run.due_at)
            delay = sqs_delay(visible_at, self._clock.precise())
            if delay > SQS_MAX_DELAY.total_seconds():
                outcome.skipped_far_future.append(run.run_key)
                continue
            by_queue.setdefault(self._route(run), []).append((run, delay))

        for queue, entries in by_queue.items():
            try:
                failed = set(self._queues.publish(queue, entries))
            except JobschedError as exc:  # e.g. the queue is not configured: nothing was sent
                logger.error("publish failed", extra={"queue": queue, "error": str(exc)})
                failed = {run.run_key for run, _ in entries}
            for run, _ in entries:
                if run.run_key in failed:
                    outcome.failed.append(run.run_key)
                    continue
                outcome.published.append(run.run_key)
                lag = (now - run.due_at).total_seconds()
                if lag > 0:
                    self._metrics.add("SchedulePublishLag", lag, Unit.SECONDS)
                if not self._mark_queued(run, now):
                    outcome.stale.append(run.run_key)

        for name, keys in (
            ("RunsPublished", outcome.published),
            ("PublishFailed", outcome.failed),
            ("PublishSkippedFarFuture", outcome.skipped_far_future),
            ("OutboxStaleTransition", outcome.stale),
        ):
            if keys:
                self._metrics.add(name, len(keys))
        if outcome.failed:
            logger.warning("runs not published", extra={"run_keys": outcome.failed})
        return outcome

    def _mark_queued(self, run: Run, now: datetime) -> bool:
        """False when the run moved on meanwhile (e.g. a worker claimed it first): nothing to do."""
        try:
            self._runs.commit(run, lambda r: queued(r, now=now, actor="outbox"))
        except RunChanged:
            return False
        except Exception as exc:
            # The message is on the queue and a worker may claim a PENDING run, so this is not a
            # lost publish; the reconciler re-touches the run if it stays PENDING. Whatever the
            # error, it is this run's alone: the rest of the batch is marked as usual.
            logger.warning(
                "run sent but not marked QUEUED", extra={"run_key": run.run_key, "error": str(exc)}
            )
        return True


# SQS delays are whole seconds. Rounding up makes a message visible up to 1 s after its run
# is due; allowing it to be visible this much early instead (the worker waits that out, so
# nothing starts early) caps the lateness at 1 s minus this.
EARLY_VISIBILITY = 0.25


def sqs_delay(due: datetime, now: datetime) -> int:
    """Whole seconds for SQS to hold a run's message sent at `now` (sub-second) for `due`."""
    return max(0, math.ceil((due - now).total_seconds() - EARLY_VISIBILITY))


def _latest_publishable(runs: list[Run]) -> list[Run]:
    """One entry per run key (the newest rev seen), only PENDING/RETRY_WAIT runs not waiting on another."""
    latest: dict[str, Run] = {}
    for run in runs:
        if run.state not in PUBLISHABLE or run.blocked_by:
            continue
        seen = latest.get(run.run_key)
        if seen is None or run.rev > seen.rev:
            latest[run.run_key] = run
    return list(latest.values())
