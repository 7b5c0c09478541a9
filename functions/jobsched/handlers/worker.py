"""`worker` Lambda: SQS (high/default/low) → claim, execute, complete. A batch's records run
at once, each on its own thread with the whole invocation's time as its budget. Partial batch
failures are reported so only the records that hit an unexpected error, and the ones deferred
by leaving their message in the queue, are redelivered; a failed record's message is first
made visible again after a short jittered backoff, so a record that keeps failing reaches the
DLQ within minutes.

Shared across a batch's threads: boto3 clients (thread-safe; built under a lock in
jobsched.aws), the container's services (built by `bind` before the records start), the
metrics port (jobsched.observability.PowertoolsMetrics: behind its lock, flushed once by
`log_metrics`) and the Logger, whose per-record keys are thread-local."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from ..domain.metrics import Unit
from ..observability import log_metrics, logger, tracer
from ..services.attempt import AttemptOutcome
from ..services.worker import Received, Worker, failure_backoff_seconds, parse_due_at, parse_sent_at
from ..store.queues import RunMessage
from ..threads import map_on_daemons
from ..wiring import container


class Redeliver(Exception):
    """The record's message was left in its queue on purpose (a deferral): reported as a batch
    item failure so Lambda does not delete it. Not an error."""


class ConcurrentBatchProcessor(BatchProcessor):
    """Powertools' SQS batch processor with every record of a batch running at once, one daemon
    thread each (jobsched.threads): one slow run no longer eats the time of the records after
    it. Powertools' AsyncBatchProcessor would need every call made async, or threads from asyncio's default
    executor (a few per vCPU, fewer than a batch)."""

    def process(self) -> list[tuple]:
        if not self.records:
            return []
        # _process_record catches what the handler raises; the success and failure lists it
        # appends to are only appended to. Daemon threads, every one waited for here: a
        # process told to stop is not held by a record whose effect still runs.
        return map_on_daemons(self._process_record, self.records, "record")

    def _entire_batch_failed(self) -> bool:
        # A batch of deferrals is not a failed invocation (that would count as a function error).
        return super()._entire_batch_failed() and not any(
            isinstance(exc, Redeliver) for _, exc, _ in self.exceptions
        )


# Outcomes worth a log line of their own; the rest are counted in the batch's line (each
# run's history already records who did what, when, under which fence).
LOGGED_OUTCOMES = frozenset(
    {AttemptOutcome.RETRY_SCHEDULED, AttemptOutcome.DEAD, AttemptOutcome.CANCELLED, AttemptOutcome.SKIPPED}
)


class BatchOutcomes:
    """How the batch's runs ended, for its one log line."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()  # a batch's records report from their own threads

    def count(self, outcome: str) -> None:
        with self._lock:
            self.outcomes[outcome] += 1


def delivery_of(record: SQSRecord, queue: str, message: RunMessage | None = None) -> Received:
    message = message or RunMessage.from_json(record.body)
    attributes = record.raw_event.get("attributes") or {}
    return Received(
        run_key=message.run_key,
        job_id=message.job_id,
        scheduled_for=message.scheduled_for,
        queue=queue,
        receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
        sent_at=parse_sent_at(attributes.get("SentTimestamp")),
        receipt_handle=record.receipt_handle,
        tenant=message.tenant,
        due_at=parse_due_at(message.due_at),
    )


def record_handler(record: SQSRecord, *, worker: Worker, batch: BatchOutcomes) -> dict[str, Any]:
    """One record: its run processed (see `process_record`). A deliberate deferral (Redeliver)
    is passed on as it is. Any other exception is a failure: the message is first made visible
    again after a jittered backoff (`back_off`), `RecordFailed` is counted, and the exception is
    passed on, so the record is reported as a batch item failure and comes back in seconds to
    a minute, not after the queue's 5,400 s visibility timeout."""
    try:
        return process_record(record, worker=worker, batch=batch)
    except Redeliver:
        raise
    except Exception:
        back_off(record)
        raise


def back_off(record: SQSRecord) -> None:
    """Count the failed record (`RecordFailed`, service-wide) and set its message's visibility to
    services.worker.failure_backoff_seconds for its receive count. A visibility change that
    fails is logged: the message then waits out the queue's visibility timeout."""
    services = container()
    services.metrics.add("RecordFailed")
    attributes = record.raw_event.get("attributes") or {}
    receive_count = max(1, int(attributes.get("ApproximateReceiveCount", 1)))
    seconds = failure_backoff_seconds(record.message_id, receive_count)
    queue = services.queues.queue_of_url(record.event_source_arn or "")
    logger.exception(
        "record failed",
        extra={"message_id": record.message_id, "receive_count": receive_count, "back_off_seconds": seconds},
    )
    try:
        if queue is None:
            raise LookupError(f"no queue for event source {record.event_source_arn!r}")
        services.queues.change_visibility(services.queues.url(queue), record.receipt_handle, seconds)
    except Exception:
        logger.exception("could not back off the failed record", extra={"message_id": record.message_id})


def process_record(record: SQSRecord, *, worker: Worker, batch: BatchOutcomes) -> dict[str, Any]:
    services = container()
    queue = services.queues.queue_of_url(record.event_source_arn or "") or "default"
    message = RunMessage.from_json(record.body)
    delivery = delivery_of(record, queue, message)
    # Thread-local keys: the batch's other records log from their own threads at the same time.
    logger.thread_safe_clear_keys()
    logger.thread_safe_append_keys(
        run_key=delivery.run_key,
        job_id=delivery.job_id,
        tenant=message.tenant,
        queue=queue,
        fence=None,
        attempt=None,
    )
    result = worker.process(delivery)
    seconds = {"StartLag": result.start_lag, "RunDuration": result.duration}
    if result.start_lag is not None and delivery.sent_at is not None:
        seconds["QueueDwell"] = max(0.0, (services.clock.now() - delivery.sent_at).total_seconds())
    for name, value in seconds.items():
        if value is not None:
            # Per priority (and only per priority), so a starved low queue shows up on its own.
            services.metrics.add(name, value, Unit.SECONDS, {"priority": message.priority})
    batch.count(result.outcome.value)
    run = result.run
    log = logger.info if result.outcome in LOGGED_OUTCOMES else logger.debug
    log(
        "run processed",
        extra={
            "outcome": result.outcome.value,
            "tenant": run.tenant if run else None,
            "fence": run.fence if run else None,
            "attempt": run.attempt if run else None,
            "error_class": result.error_class,
        },
    )
    if result.redeliver:
        raise Redeliver(f"{delivery.run_key} deferred ({result.error_class})")
    return {"runKey": delivery.run_key, "outcome": result.outcome.value}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> Any:
    # Per invocation: the processor's record lists, the outcomes and the worker's identity and
    # deadline (local mode runs invocations of this function side by side in one process).
    # Building the worker also builds every service the records' threads share.
    worker = container().worker.for_invocation(context)
    queues = container().queues
    worker.hold(
        [
            (
                queues.queue_of_url(record.get("eventSourceARN") or "") or "default",
                record.get("receiptHandle") or "",
            )
            for record in event.get("Records", [])
        ]
    )
    batch = BatchOutcomes()
    response = process_partial_response(
        event=event,
        record_handler=functools.partial(record_handler, worker=worker, batch=batch),
        processor=ConcurrentBatchProcessor(event_type=EventType.SQS),
        context=context,
    )
    logger.info(
        "batch processed",
        extra={
            "records": len(event.get("Records", [])),
            "outcomes": dict(batch.outcomes),
            "failed": len(response.get("batchItemFailures", [])),
        },
    )
    return response
