"""`outbox` Lambda: the Runs table stream → SQS.

The whole batch is published in one call (so SendMessageBatch carries up to ten runs per
request); the batch processor then reports exactly the records whose run may stand QUEUED
without a message (`Outbox.publish_records`), and the stream retries from the first of them."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from ..domain.metrics import NO_METRICS, Metrics
from ..domain.runs import Run, RunState
from ..observability import log_metrics, logger, tracer
from ..store.runs import RUN_PREFIX, parse_runs
from ..wiring import container
from .stream_filter import matches_pattern

# Lambda event source filter patterns (EventBridge syntax). A record reaches the function
# when any pattern matches. `exists` works on leaf nodes only, hence `blocked_by.S`.
FILTER_PATTERNS: list[dict[str, Any]] = [
    {
        "eventName": ["INSERT", "MODIFY"],
        "dynamodb": {
            "NewImage": {
                "sk": {"S": [{"prefix": RUN_PREFIX}]},
                "state": {"S": [RunState.PENDING.value, RunState.RETRY_WAIT.value]},
                "blocked_by": {"S": [{"exists": False}]},
            }
        },
    }
]


def matches_filter(record: dict[str, Any]) -> bool:
    """Evaluate FILTER_PATTERNS against a stream record as Lambda's event filtering would."""
    return any(matches_pattern(pattern, record) for pattern in FILTER_PATTERNS)


class RunNotPublished(Exception):
    """Fails a stream record so Lambda retries it (the run itself stays PENDING/RETRY_WAIT)."""


def runs_of(records: list[dict[str, Any]], metrics: Metrics = NO_METRICS) -> tuple[dict[str, Run], set[str]]:
    """Runs by stream sequence number, and the sequence numbers of matching records whose
    image does not parse (each logged with its run key and counted: store.runs.parse_runs).

    Such a record is failed, not skipped (the handler): its run is PENDING or RETRY_WAIT, and
    nothing else would publish it, since the reconciler cannot read it either. Failed, it is
    retried (a roll forward deployed meanwhile reads it) and then named in the outbox failure
    queue, whose alarm and the `UnreadableRuns` alarm point at it, while the readable runs of
    its batch are published all the same. Members this release does not know make no image
    unreadable (store.runs.RunStore.from_item)."""
    runs: dict[str, Run] = {}
    unreadable: set[str] = set()
    for record in records:
        if not matches_filter(record):
            continue
        sequence = str(record["dynamodb"]["SequenceNumber"])
        read = parse_runs([record["dynamodb"]["NewImage"]], metrics)
        if read.items:
            runs[sequence] = read.items[0]
        else:
            extra = {"sequence_number": sequence, "run_key": read.unreadable[0]}
            logger.error("unreadable run image: its record is retried", extra=extra)
            unreadable.add(sequence)
    return runs, unreadable


processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    runs, unreadable = runs_of(event.get("Records") or [], container().metrics)
    failed = set(container().outbox.publish_records(list(runs.values()))) if runs else set()

    def record_handler(record: DynamoDBRecord) -> None:
        sequence = record.dynamodb.sequence_number if record.dynamodb else None
        if sequence in unreadable:
            raise RunNotPublished(f"record {sequence} does not hold a readable run")
        run = runs.get(sequence or "")
        if run is not None and run.run_key in failed:
            raise RunNotPublished(f"run {run.run_key} was not published")

    return dict(process_partial_response(event, record_handler, processor, context))
