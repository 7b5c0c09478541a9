"""`notifier` Lambda: the notifications queue → each tenant's notification targets.

One record is one delivery (services.notifications.Notifier.deliver). A delivery that may
succeed later is reported as a batch item failure, so the queue gives its message back after
its visibility timeout, until its receive count sends it to the notifications DLQ (alarmed).
A delivery refused for good (not granted, a target that can never take it) and a message that
does not parse are logged and counted, and their message deleted: retrying cannot help."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from ..domain.metrics import Unit
from ..domain.notifications import NotificationMessage
from ..observability import log_metrics, logger, tracer
from ..wiring import container

# A batch whose every delivery failed is reported like any other (each record a batch item
# failure), not raised: the queue retries them either way, and a raise would count as the
# function failing.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def record_handler(record: SQSRecord) -> None:
    """Deliver one record's notification; raises NotificationFailed to have it retried."""
    try:
        message = NotificationMessage.model_validate_json(record.body)
    except ValidationError as exc:
        logger.error(
            "unreadable notification: dropped",
            extra={"message_id": record.message_id, "error": str(exc)[:500]},
        )
        container().metrics.add("NotificationsUnreadable", 1, Unit.COUNT)
        return
    attempt = int(record.attributes.approximate_receive_count or 1)
    container().notifier.deliver(message, attempt=attempt)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return dict(process_partial_response(event, record_handler, processor, context))
