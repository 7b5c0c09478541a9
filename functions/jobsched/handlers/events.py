"""`events` Lambda: the Runs and Definitions streams → run and job events on the bus, and
the deliveries a run's notifications ask for on the notifications queue.

A second consumer of the Runs stream beside the outbox, and the one consumer of the
Definitions stream: never on the request or worker path. Each record's events (domain.events)
are published, and the deliveries they ask for queued, in stream order
(services.record_delivery); the batch processor reports the first record that could not
deliver them and every record after it, so the stream retries from there and one run's
events keep their order. A record still refused a few minutes after it was written is set
aside (kept on the events failures queue, counted, alarmed), so it holds the records behind
it, other tenants' notifications among them, no longer. A record whose image does not parse
is logged and counted (`EventRecordsUnreadable`), never retried: it would hold back its shard.

Notifications (domain.notifications) are read from the same changes whatever `runEvents` is
(at `none` the Runs stream's filter passes only runs whose job asked for them): a record
whose deliveries were not all queued fails like one whose events were not all published."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from ..domain.events import CloudEvent, RunEventsLevel, job_events, published, run_events
from ..domain.metrics import Unit
from ..domain.notifications import NotificationMessage, messages_for
from ..domain.runs import RunState
from ..observability import log_metrics, logger, tracer
from ..services.record_delivery import RecordChanges
from ..store.definitions import DefinitionStore
from ..store.runs import RUN_PREFIX, RunStore
from ..store.schema import DEFINITIONS, RUNS, TableSpec
from ..wiring import container
from .stream_filter import matches_pattern

JOB_PREFIX = "j_"  # job ids (domain.models.JOB_ID_PATTERN); other Definitions items are not jobs
# A pattern no stream record matches (a DynamoDB stream record's eventName is INSERT, MODIFY or
# REMOVE): the Definitions mapping's filter at `none`. The mapping stays and drops every
# record, so a later level changes only its filter, in place, and it goes on from where it
# is; a mapping made anew would start at the stream's trim horizon and publish up to 24 hours
# of old job changes.
NO_RECORD: dict[str, Any] = {"eventName": ["NONE"]}


def filter_patterns(level: RunEventsLevel, table: TableSpec) -> list[dict[str, Any]]:
    """The event source filter (EventBridge syntax) of one table's stream at `level`: on the
    Runs stream run items (below `all`, only writes that leave a run DEAD or SKIPPED, or that
    may make it late: it carries `late_at`, store.runs), on the Definitions stream job items.
    Each table's mapping gets its own: a run item's key is a job id too. At `none` only runs
    whose job asked for notifications (`notify_on`), and on the Definitions stream no record
    at all (NO_RECORD). Never empty: every level keeps both mappings."""
    if table.logical_id == RUNS.logical_id:
        keys = {"sk": {"S": [{"prefix": RUN_PREFIX}]}}
        if level is RunEventsLevel.ALL:
            return [{"eventName": ["INSERT", "MODIFY"], "dynamodb": {"Keys": keys}}]
        images: list[dict[str, Any]] = [
            {"state": {"S": [RunState.DEAD.value, RunState.SKIPPED.value]}},
            {"late_at": {"S": [{"exists": True}]}},
        ]
        if level is RunEventsLevel.NONE:
            images = [{**image, "notify_on": {"S": [{"exists": True}]}} for image in images]
        return [
            {"eventName": ["INSERT", "MODIFY"], "dynamodb": {"Keys": keys, "NewImage": image}}
            for image in images
        ]
    if table.logical_id == DEFINITIONS.logical_id and level is RunEventsLevel.NONE:
        return [NO_RECORD]
    if table.logical_id == DEFINITIONS.logical_id:
        jobs = {"Keys": {"job_id": {"S": [{"prefix": JOB_PREFIX}]}}}
        return [{"eventName": ["INSERT", "MODIFY"], "dynamodb": jobs}]
    raise ValueError(f"no events come from {table.logical_id}")


def matches_filter(record: dict[str, Any], level: RunEventsLevel, table: TableSpec) -> bool:
    """The table's filter at `level` against one of its stream records, as Lambda's event
    filtering would."""
    return any(matches_pattern(pattern, record) for pattern in filter_patterns(level, table))


def events_of(record: dict[str, Any], stack: str, level: RunEventsLevel) -> list[CloudEvent]:
    """The events of one stream record (a run's or a job's change) that `level` publishes;
    [] for any other item. Raises KeyError or ValueError for an image that does not parse."""
    return changes_of(record, stack, level)[0]


def changes_of(
    record: dict[str, Any], stack: str, level: RunEventsLevel
) -> tuple[list[CloudEvent], list[NotificationMessage]]:
    """The events of one stream record that `level` publishes, and the notification
    deliveries its run's `notify` asks for (at any level). Raises KeyError or ValueError for
    an image that does not parse."""
    change = record.get("dynamodb") or {}
    keys = change.get("Keys") or {}
    old, new = change.get("OldImage"), change.get("NewImage")
    if new is None:
        return [], []  # a REMOVE (TTL): no change of state to tell
    if "sk" in keys:
        if not str(keys["sk"].get("S", "")).startswith(RUN_PREFIX):
            return [], []
        before = RunStore.from_item(old) if old else None
        after = RunStore.from_item(new)
        # The failures are read at every level: they are what notifications are sent for.
        wider = RunEventsLevel.ALL if level is RunEventsLevel.ALL else RunEventsLevel.FAILURES
        events = run_events(stack, before, after, wider)
        messages = messages_for(after.notify, events) if after.notify else []
        return [e for e in events if published(level, e.type)], messages
    if str(keys.get("job_id", {}).get("S", "")).startswith(JOB_PREFIX):
        before_job = DefinitionStore.job_from_item(old) if old else None
        job = DefinitionStore.job_from_item(new)
        return job_events(stack, before_job, job, level, _written_at(change)), []
    return [], []


def _written_at(change: dict[str, Any]) -> datetime:
    """The record's ApproximateCreationDateTime (epoch seconds from Lambda); now without one."""
    value = change.get("ApproximateCreationDateTime")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.now(UTC)


def gather_changes(
    records: Sequence[dict[str, Any]], stack: str, level: RunEventsLevel
) -> list[RecordChanges]:
    """The changes (events, deliveries) of each record with either, in order; unreadable
    ones logged, counted and left out."""
    gathered = []
    for record in records:
        change = record.get("dynamodb") or {}
        sequence = str(change.get("SequenceNumber"))
        try:
            events, messages = changes_of(record, stack, level)
        except Exception:  # any image it cannot read: retrying would hold its shard back
            logger.exception(
                "unreadable image: no events for this record", extra={"sequence_number": sequence}
            )
            container().metrics.add("EventRecordsUnreadable", 1, Unit.COUNT)
            continue
        if events or messages:
            gathered.append(
                RecordChanges(
                    sequence,
                    _written_at(change),
                    events,
                    messages,
                    stream=str(record.get("eventSourceARN") or ""),
                    keys=change.get("Keys") or {},
                )
            )
    return gathered


class EventsNotPublished(Exception):
    """Fails a stream record so Lambda retries it (and every record after it)."""


processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = container().settings
    gathered = gather_changes(event.get("Records") or [], settings.event_source_name, settings.run_events)
    failed = container().record_delivery.deliver(
        gathered, time_left=lambda: context.get_remaining_time_in_millis() / 1000
    )
    first_failed = failed[0] if failed else None
    reached = False

    def record_handler(record: DynamoDBRecord) -> None:
        nonlocal reached
        sequence = record.dynamodb.sequence_number if record.dynamodb else None
        reached = reached or sequence == first_failed
        if reached:
            raise EventsNotPublished(f"record {sequence}: its events or deliveries did not all go")

    return dict(process_partial_response(event, record_handler, processor, context))
