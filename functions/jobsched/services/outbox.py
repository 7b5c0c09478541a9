"""The outbox: marks runs that became PENDING or RETRY_WAIT as QUEUED, then publishes them to
their queue.

The mark comes first because it is the outbox's last write to the run: once a message is on
a queue a worker may read the run and claim it at the rev it read, and a write landing
between its read and its claim would fail the claim, which the worker takes for a run
someone else has and acknowledges the message: the run would wait QUEUED with no message
until the reconciler's 15 minutes. A run whose send fails is put back to PENDING (so QUEUED
always means "a message was sent") and that write's stream record publishes it again, a few
times in a row at most before it is left to the reconciler (its publish grace after it is
due, and the shard's next pass: within 30 s). Such a
run does not fail its stream record: the record's retry would add nothing, and a batch that
fails often is given up by Lambda sooner, with the runs it left marked and unsent.

The SQS delay is the timing wheel, so a run is published only once it is due within the
SQS delay limit; runs further out are left PENDING and re-touched by the reconciler at
`due_at - 900 s`. A run published twice is harmless (the worker's claim is conditional);
a run that fails to publish and cannot be put back is reported, so the stream batch retries
its record. An invocation that dies between its marks and its sends (a crash, its timeout) leaves runs
QUEUED without a message; Lambda retries its batch, and a retried record whose run is as
its image plus this outbox's one mark is sent again, so those runs do not wait for the
reconciler's 15 minutes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..domain.errors import JobschedError
from ..domain.instants import Clock
from ..domain.lifecycle import queued, requeue
from ..domain.metrics import NO_METRICS, Metrics, Unit
from ..domain.repair import SQS_MAX_DELAY
from ..domain.runs import Run, RunState
from ..observability import logger
from ..store.ports import RunStorePort
from ..store.queues import RunQueues
from ..store.runs import RunChanged

PUBLISHABLE = frozenset({RunState.PENDING, RunState.RETRY_WAIT})
EXTERNAL = "external"  # not a queue: leased through the API
ACTOR = "outbox"
PUBLISH_FAILED = "publish failed"  # the reason of the QUEUED -> PENDING put-back
# Failed sends in a row that the put-back's own stream record retries; after these the run
# is left PENDING for the reconciler, whose republish starts the count again.
QUICK_RETRIES = 3

Router = Callable[[Run], str]


def priority_router(has_handler: Callable[[str], bool]) -> Router:
    """Route by priority, except target-less runs nobody here can execute: those go to external workers."""

    def route(run: Run) -> str:
        if not run.has_target and not has_handler(run.job_type):
            return EXTERNAL
        return run.priority.value

    return route


@dataclass
class PublishOutcome:
    published: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped_far_future: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # not sent: the run had moved on before QUEUED
    # Of `failed`: put back to PENDING, so the put-back's own stream record, or the
    # reconciler's repair of a PENDING run, publishes it again; or found out of QUEUED by
    # another write since its mark (a worker's claim, a cancel), which nothing waits on.
    put_back: list[str] = field(default_factory=list)
    # Not sent: its last sends failed QUICK_RETRIES times in a row; the reconciler republishes it.
    left_for_repair: list[str] = field(default_factory=list)


class Outbox:
    """Marks and sends publishable runs. `actor` names who marks them QUEUED in their history
    (the outbox's stream path, or the reconciler sending what it repaired): two publishers
    that mark one run in the same second then tell their marks apart, so only the one whose
    mark landed sends it."""

    def __init__(
        self,
        runs: RunStorePort,
        queues: RunQueues,
        clock: Clock,
        route: Router,
        metrics: Metrics = NO_METRICS,
        *,
        actor: str = ACTOR,
    ) -> None:
        self._metrics = metrics
        self._runs = runs
        self._queues = queues
        self._clock = clock
        self._route = route
        self._actor = actor

    def publish(self, runs: list[Run]) -> list[str]:
        """Publish what is publishable; returns the run keys whose publish failed."""
        return self.publish_detailed(runs).failed

    def publish_records(self, runs: list[Run]) -> list[str]:
        """Publish the runs of a stream batch; returns the keys of the runs whose records the
        stream must retry: not sent, and not known to be put back to PENDING (its put-back, or
        the mark before it, failed), so the run may stand QUEUED without a message, which only
        a retried record publishes before the reconciler's 15-minute requeue. A run whose
        failed send was put back is not among them: its put-back's record publishes it again,
        and a retry would only spend the batch's retries, after which Lambda gives the batch
        up, with whatever an invocation that dies later leaves marked and unsent."""
        outcome = self.publish_detailed(runs)
        put_back = set(outcome.put_back)
        return [key for key in outcome.failed if key not in put_back]

    def publish_detailed(self, runs: list[Run]) -> PublishOutcome:
        """Mark each publishable run QUEUED, then send it (no write to a run after its send).

        Takes runs as the stream delivered them (any revs, duplicates). Returns what became of
        each: published, failed (not sent: put back to PENDING, or nothing was written, or
        maybe left QUEUED when its put-back could not be written), stale (moved on since the
        image: not sent), skipped far in the future, left for repair.
        Guarantees that a run this call leaves QUEUED was sent, or is in `failed` and not in
        `put_back` (its stream record's retry sends it: see `_marked_from`)."""
        now = self._clock.now()
        outcome = PublishOutcome()
        by_queue: dict[str, list[Run]] = {}
        for run in _latest_publishable(runs):
            route = self._route(run)
            if route == EXTERNAL:
                # External workers lease from the claimable index; QUEUED says "available".
                (outcome.published if self._mark_queued(run, now) else outcome.stale).append(run.run_key)
                continue
            if sqs_delay(visible_from(run), self._clock.precise()) > SQS_MAX_DELAY.total_seconds():
                outcome.skipped_far_future.append(run.run_key)
                continue
            if _failed_sends_in_a_row(run) >= QUICK_RETRIES:
                outcome.left_for_repair.append(run.run_key)
                continue
            try:
                self._queues.url(route)
            except JobschedError as exc:  # e.g. the queue is not configured: nothing is written
                logger.error("publish failed", extra={"queue": route, "error": str(exc)})
                outcome.failed.append(run.run_key)
                continue
            marked = self._mark_queued(run, now)
            if marked is None:
                outcome.stale.append(run.run_key)
                continue
            by_queue.setdefault(route, []).append(marked)

        for queue, marked_runs in by_queue.items():
            # The delay from the clock as the batch is sent, after the marks.
            entries = [(run, sqs_delay(visible_from(run), self._clock.precise())) for run in marked_runs]
            try:
                failed = set(self._queues.publish(queue, entries))
            except Exception as exc:  # marked but maybe not sent: put back like a failed send
                logger.error("publish failed", extra={"queue": queue, "error": str(exc)})
                failed = {run.run_key for run in marked_runs}
            for run in marked_runs:
                if run.run_key in failed:
                    outcome.failed.append(run.run_key)
                    if self._put_back(run, now):
                        outcome.put_back.append(run.run_key)
                    continue
                outcome.published.append(run.run_key)
                lag = (now - run.due_at).total_seconds()
                if lag > 0:
                    self._metrics.add("SchedulePublishLag", lag, Unit.SECONDS)

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
        if outcome.left_for_repair:
            logger.warning(
                "runs left for the reconciler after failed publishes",
                extra={"run_keys": outcome.left_for_repair},
            )
        return outcome

    def _mark_queued(self, run: Run, now: datetime) -> Run | None:
        """The run as it is to be sent: QUEUED as stored, or, if the mark failed with an error,
        as read (sent all the same: a worker may claim a PENDING run, and the reconciler
        re-touches it if it stays PENDING; whether the mark landed is then unknown, see
        `_put_back`). None when the run moved on meanwhile (a worker claimed it, it was
        cancelled, a retried stream record of one already queued).

        A refusal that finds the run exactly as this mark would have written it is this mark
        (the SDK re-sent a request the table had applied, and its condition then failed
        against it) or an identical twin's: the run is sent either way, since a QUEUED run
        left without a message waits for the reconciler's 15 minutes, and a second message
        is dropped by the worker's conditional claim. So is one that finds the run as this
        image plus one mark of this actor and nothing since (`_marked_from`): the same
        record's earlier processing marked it, in an invocation whose batch Lambda retries
        because it failed, maybe between its marks and its sends."""
        mark = queued(run, now=now, actor=self._actor)
        try:
            return self._runs.commit(run, lambda r: mark)
        except RunChanged as exc:
            written = mark.model_copy(update={"rev": run.rev + 1})
            if self._runs.written_as(exc.current, written) or _marked_from(run, exc.current, self._actor):
                return exc.current
            return None
        except Exception as exc:
            # Whatever the error, it is this run's alone: the rest of the batch goes on.
            logger.warning(
                "run not marked QUEUED; sending it as it is",
                extra={"run_key": run.run_key, "error": str(exc)},
            )
            return run

    def _put_back(self, run: Run, now: datetime) -> bool:
        """A marked run whose send failed: back to PENDING, so its stream record publishes it
        again and QUEUED never stands for a message that was not sent. True when the put-back
        landed, or another write has since taken the run out of QUEUED; False when the run may
        stand QUEUED without a message: a write or read failed, whether its mark landed is
        unknown, or a write since the mark kept it QUEUED (the reconciler's late note), so
        that the record's retry, finding the run as its image plus the mark, sends it."""
        if run.state is not RunState.QUEUED:
            # Its mark raised: it may have landed all the same (a timeout after the table
            # applied it). Read it: a QUEUED run is put back (at worst a second message).
            try:
                current = self._runs.get_by_key(run.run_key)
            except Exception as exc:
                logger.error(
                    "run maybe QUEUED without a message; the reconciler requeues it",
                    extra={"run_key": run.run_key, "error": str(exc)},
                )
                return False
            if current is None or current.state is not RunState.QUEUED:
                # Still as it was, as far as this read shows (a mark that timed out may yet
                # land): its own stream record's retry publishes it.
                return False
            run = current
        try:
            self._runs.commit(run, lambda r: requeue(r, now=now, actor=self._actor, reason=PUBLISH_FAILED))
        except RunChanged as exc:
            # Out of QUEUED (claimed, cancelled): nothing waits on this publish any more. Still
            # QUEUED (noted late since the mark, or marked again by another publisher, which
            # sent its own message): the record's retry sends it if the mark is still ours.
            return exc.current is None or exc.current.state is not RunState.QUEUED
        except Exception as exc:
            logger.error(
                "run QUEUED without a message; its record's retry or the reconciler publishes it",
                extra={"run_key": run.run_key, "error": str(exc)},
            )
            return False
        return True


def _marked_from(image: Run, current: Run | None, actor: str) -> bool:
    """Whether `current` is `image` with one QUEUED mark by `actor` written on top of it and
    nothing since but entries that keep it QUEUED (the reconciler's late note): whether that
    mark's message was sent is unknown to a retried record. Such a note sends nothing, so a
    run noted late between a mark and a send that never came would otherwise wait for the
    15-minute requeue."""
    if current is None or current.state is not RunState.QUEUED or current.rev <= image.rev:
        return False
    history = current.history
    at = len(history) - 1
    while at >= 0 and history[at].source is RunState.QUEUED and history[at].target is RunState.QUEUED:
        at -= 1  # kept QUEUED since the mark
    if at < 0 or history[at].actor != actor or history[at].target is not RunState.QUEUED:
        return False
    if at == len(history) - 1:
        return current.rev == image.rev + 1  # the mark is the last write
    # Notes since: the mark must stand right on the image (its entry before is the image's last).
    return at >= 1 and bool(image.history) and history[at - 1] == image.history[-1]


def _failed_sends_in_a_row(run: Run) -> int:
    """How many put-backs after failed sends end the run's history, with nothing but the
    outbox's own marks between them."""
    count = 0
    for entry in reversed(run.history):
        if entry.actor != ACTOR:
            break
        if entry.reason == PUBLISH_FAILED:
            count += 1
    return count


# SQS delays are whole seconds. Rounding up makes a message visible up to 1 s after its run
# is due; allowing it to be visible this much early instead (the worker waits that out, so
# nothing starts early) caps the lateness at 1 s minus this.
EARLY_VISIBILITY = 0.25


def visible_from(run: Run) -> datetime:
    """When the run's message should become visible: when it is due, or, for a run a worker
    deferred (tenant limit, buffered, not due), when that worker asked to look again."""
    return max(run.due_at, run.deferred_until or run.due_at)


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
