"""`worker` Lambda: SQS (high/default/low) → claim, execute, complete. Partial batch failures
are reported so only the records that hit an unexpected error are redelivered."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from ..observability import NAMESPACE, logger, metrics, tracer
from ..services.worker import Delivery, Outcome, parse_sent_at
from ..store.queues import RunMessage
from ..wiring import container

processor = BatchProcessor(event_type=EventType.SQS)

# Outcomes worth a log line of their own; the rest are counted in the batch's line (each
# run's history already records who did what, when, under which fence).
LOGGED_OUTCOMES = frozenset({Outcome.RETRY_SCHEDULED, Outcome.DEAD, Outcome.CANCELLED, Outcome.SKIPPED})


class BatchTimings:
    """The worker's timings per priority, one EMF document per priority per invocation
    (a document per run and metric cost ~600 log bytes a run)."""

    def __init__(self) -> None:
        self._by_priority: dict[str, EphemeralMetrics] = {}
        self.outcomes: Counter[str] = Counter()

    def add(self, priority: str, name: str, seconds: float) -> None:
        if metrics_disabled():
            return
        metric = self._by_priority.get(priority)
        if metric is None:
            # Per priority (and only per priority), so a starved low queue shows up on its own.
            metric = self._by_priority[priority] = EphemeralMetrics(namespace=NAMESPACE)
            metric.add_dimension(name="priority", value=priority)
        metric.add_metric(name=name, unit=MetricUnit.Seconds, value=seconds)

    def flush(self) -> None:
        for metric in self._by_priority.values():
            metric.flush_metrics()
        self._by_priority.clear()
        self.outcomes.clear()


timings = BatchTimings()


def metrics_disabled() -> bool:
    # EphemeralMetrics does not honour this switch the way the shared Metrics object does.
    return os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() in ("1", "true")


def delivery_of(record: SQSRecord, queue: str, message: RunMessage | None = None) -> Delivery:
    message = message or RunMessage.from_json(record.body)
    attributes = record.raw_event.get("attributes") or {}
    return Delivery(
        run_key=message.run_key,
        job_id=message.job_id,
        scheduled_for=message.scheduled_for,
        queue=queue,
        receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
        sent_at=parse_sent_at(attributes.get("SentTimestamp")),
        receipt_handle=record.receipt_handle,
    )


def record_handler(record: SQSRecord) -> dict[str, Any]:
    services = container()
    queue = services.queues.queue_of_url(record.event_source_arn or "") or "default"
    message = RunMessage.from_json(record.body)
    delivery = delivery_of(record, queue, message)
    logger.append_keys(
        run_key=delivery.run_key,
        job_id=delivery.job_id,
        tenant=message.tenant,
        queue=queue,
        fence=None,
        attempt=None,
    )
    result = services.worker.process(delivery)
    seconds = {"StartLag": result.start_lag, "RunDuration": result.duration}
    if result.start_lag is not None and delivery.sent_at is not None:
        seconds["QueueDwell"] = max(0.0, (services.clock.now() - delivery.sent_at).total_seconds())
    for name, value in seconds.items():
        if value is not None:
            timings.add(message.priority, name, value)
    timings.outcomes[result.outcome.value] += 1
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
    return {"runKey": delivery.run_key, "outcome": result.outcome.value}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> Any:
    container().worker.bind(context)
    try:
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
        logger.remove_keys(["run_key", "job_id", "tenant", "queue", "fence", "attempt"])
        logger.info(
            "batch processed",
            extra={
                "records": len(event.get("Records", [])),
                "outcomes": dict(timings.outcomes),
                "failed": len(response.get("batchItemFailures", [])),
            },
        )
        return response
    finally:
        timings.flush()
