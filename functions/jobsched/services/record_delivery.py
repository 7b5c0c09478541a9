"""A stream batch's records delivered in stream order: each record's events to the bus
(services.events) and the notification deliveries they ask for to the notifications queue
(services.notifications). A record that keeps failing is set aside after a few minutes, so it
never holds the records behind it (other tenants' notifications among them) for longer.

Each sink sends in order and stops at the first record it could not take after its own
retries. That record is failed with every record after it (the stream mapping retries from
it) while it is younger than SET_ASIDE_AFTER_SECONDS. Older, what it could not deliver (its
events, or its deliveries) is set aside instead: kept on the events failures queue as the
requests that send it again (`SetAsideQueue`), counted (`EventRecordsSetAside`) and logged,
and the records after it go on. The queue's depth is alarmed (`events-failures-depth`). A
record set aside for its events still queues its deliveries: they do not need the bus.

An event or a delivery sent again (a retried batch, a later pass of this one, a replay of a
set-aside record) carries the same id: receivers dedupe on it. A record's age is its
`ApproximateCreationDateTime`, DynamoDB's clock, read against this host's clock (`now`), not
the scheduler's injected one."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.events import CloudEvent
from ..domain.instants import format_instant
from ..domain.metrics import NO_METRICS, Metrics, Unit
from ..domain.models import MAX_DELIVERY_BYTES
from ..domain.notifications import NotificationMessage
from ..observability import logger
from .batching import batches
from .events import MAX_ENTRIES, EventPublisher, entry_of
from .notifications import (
    MAX_BATCH,
    SENDER_FAULT_CODES,
    Delivery,
    NotificationQueue,
    error_code,
    message_body,
)

# How long one record may hold the records behind it in its lane: the mapping's retries (and
# each invocation's own) absorb a throttle or a brief outage of the bus or the queue; what is
# still refused after this long is the record's own trouble, or an outage long enough that
# keeping the records beats holding them (replayed once it is over).
SET_ASIDE_AFTER_SECONDS = 300
# Time an invocation keeps for one more pass over the rest of its batch after a set-aside:
# with less left, the rest is failed and retried by the mapping rather than cut off by the
# function's timeout.
PASS_RESERVE_SECONDS = 15
# The events failures queue's largest message (SQS's MaximumMessageSize, which the stack
# leaves at AWS's default): a record's requests larger than this are kept as a pointer.
MAX_SET_ASIDE_BYTES = 256 * 1024


@dataclass(frozen=True)
class RecordChanges:
    """What one stream record asks for: its events for the bus and its notification
    deliveries, with where it came from (for a record set aside)."""

    sequence: str  # the record's SequenceNumber: its id in the batch
    written_at: datetime  # its ApproximateCreationDateTime
    events: Sequence[CloudEvent] = ()
    messages: Sequence[NotificationMessage] = ()
    stream: str = ""  # its eventSourceARN
    keys: Mapping[str, Any] = field(default_factory=dict)  # its item's key, as the stream carries it


class SetAsideQueue:
    """Keeps what a record could not deliver on the events failures queue (`queue_url`; None:
    nothing can be kept, and such a record is never set aside). `client` is an SQS client.

    One message per record, whose body is JSON:
    `setAside` (`stream`, `sequenceNumber`, `keys`, `writtenAt`, `reason`) names the record;
    `putEvents`, a list of PutEvents requests (at most 10 entries each) of its events on
    `bus_name`; `sendMessageBatch`, a list of SendMessageBatch requests of its deliveries to
    `notifications_url`, cut as `NotificationQueue.send` cuts them. Each request is sent again
    as it is to replay it. A message that would be larger than the queue takes
    (MAX_SET_ASIDE_BYTES, or a refusal for size) is kept as a pointer instead (`pointer`), so a
    record the queue is there for is always set aside."""

    def __init__(
        self,
        client: Any,
        queue_url: str | None,
        bus_name: str,
        notifications_url: str | None,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self._client = client
        self._url = queue_url
        self._bus = bus_name
        self._notifications_url = notifications_url
        self._metrics = metrics

    def keep(
        self,
        change: RecordChanges,
        *,
        events: Sequence[CloudEvent] = (),
        messages: Sequence[NotificationMessage] = (),
    ) -> bool:
        """Keep `events` and `messages` of `change`'s record. True once the queue took them
        (counted and logged); False when there is no queue or it refused (logged): the record
        must then be retried instead."""
        if self._url is None:
            return False
        reason = "events not accepted by the bus" if events else "deliveries not queued"
        body: dict[str, Any] = {
            "setAside": {
                "stream": change.stream,
                "sequenceNumber": change.sequence,
                "keys": dict(change.keys),
                "writtenAt": format_instant(change.written_at),
                "reason": reason,
            }
        }
        if events:
            entries = [self._entry(change.sequence, event) for event in events]
            body["putEvents"] = [
                {"Entries": entries[i : i + MAX_ENTRIES]} for i in range(0, len(entries), MAX_ENTRIES)
            ]
        if messages:
            deliveries = [Delivery(change.sequence, message, message_body(message)) for message in messages]
            requests = batches(
                [d for d in deliveries if d.size <= MAX_DELIVERY_BYTES],
                lambda delivery: delivery.size,
                max_entries=MAX_BATCH,
                max_bytes=MAX_DELIVERY_BYTES,
            )
            body["sendMessageBatch"] = [
                {
                    "QueueUrl": self._notifications_url,
                    "Entries": [d.request(str(n)) for n, d in enumerate(request)],
                }
                for request in requests
            ]
        text = json.dumps(body, separators=(",", ":"))
        pointer_only = len(text.encode()) > MAX_SET_ASIDE_BYTES
        if pointer_only:
            text = pointer(body, events, messages)
        try:
            self._send(text)
        except (ClientError, BotoCoreError) as exc:
            if pointer_only or error_code(exc) not in SENDER_FAULT_CODES:
                return self._not_kept(change, reason, exc)
            pointer_only = True  # a queue that takes less than MAX_SET_ASIDE_BYTES
            try:
                self._send(pointer(body, events, messages))
            except (ClientError, BotoCoreError) as again:
                return self._not_kept(change, reason, again)
        self._metrics.add("EventRecordsSetAside", 1, Unit.COUNT)
        logger.error(
            "record set aside on the events failures queue",
            extra={
                "sequence_number": change.sequence,
                "reason": reason,
                "pointer_only": pointer_only,
                "event_ids": [event.id for event in events],
                "notification_ids": [message.id for message in messages],
            },
        )
        return True

    def _send(self, body: str) -> None:
        self._client.send_message(QueueUrl=self._url, MessageBody=body)

    @staticmethod
    def _not_kept(change: RecordChanges, reason: str, exc: ClientError | BotoCoreError) -> bool:
        logger.error(
            "record not set aside: it is retried",
            extra={"sequence_number": change.sequence, "reason": reason, "error": str(exc)},
        )
        return False

    def _entry(self, record: str, event: CloudEvent) -> dict[str, Any]:
        request = dict(entry_of(record, event, self._bus).request)
        request["Time"] = format_instant(event.time)
        return request


def pointer(
    body: dict[str, Any], events: Sequence[CloudEvent], messages: Sequence[NotificationMessage]
) -> str:
    """A set-aside message naming the record alone, for one whose requests the queue would not
    take: `body`'s `setAside` with `table` (from the stream's ARN) and `pointerOnly`, and the
    ids of the events and deliveries it could not deliver, without their requests (what they
    carried is read from the item its keys name). A few kilobytes whatever the record."""
    named = body["setAside"]
    stream = str(named.get("stream", ""))
    table = stream.split(":table/", 1)[1].split("/", 1)[0] if ":table/" in stream else ""
    kept = {
        "setAside": {**named, "table": table, "pointerOnly": True},
        "eventIds": [event.id for event in events],
        "notificationIds": [message.id for message in messages],
    }
    return json.dumps(kept, separators=(",", ":"))


class RecordDelivery:
    """Delivers a batch's records (see the module); `now` reads this host's clock."""

    def __init__(
        self,
        events: EventPublisher,
        notifications: NotificationQueue,
        kept: SetAsideQueue,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._events = events
        self._notifications = notifications
        self._kept = kept
        self._now = now

    def deliver(
        self, changes: Sequence[RecordChanges], *, time_left: Callable[[], float] = lambda: math.inf
    ) -> list[str]:
        """Publish each record's events and queue its deliveries, records in the given
        (stream) order. Returns the sequence numbers to report failed: the first record that
        was neither delivered nor set aside, and every record after it; [] when none. Never
        raises for a refused call. `time_left`: seconds the invocation has left."""
        pending = list(changes)
        start = 0
        while start < len(pending):
            rest = pending[start:]
            order = [change.sequence for change in rest]
            if start and time_left() < PASS_RESERVE_SECONDS:
                return order
            report = self._events.publish([(c.sequence, list(c.events)) for c in rest if c.events])
            unsent = order.index(report.failed_records[0]) if report.failed_records else len(rest)
            unqueued = self._notifications.send(
                [(c.sequence, list(c.messages)) for c in rest[:unsent] if c.messages]
            )
            at = order.index(unqueued[0]) if unqueued else unsent
            if at == len(rest):
                return []
            stuck = rest[at]
            refused_events = at == unsent  # its events refused (its deliveries not yet tried)
            if not self._old(stuck):
                return order[at:]
            if refused_events:
                if not self._kept.keep(stuck, events=stuck.events):
                    return order[at:]
                pending[start + at] = replace(stuck, events=())  # its deliveries go in the next pass
                start += at
            else:
                if not self._kept.keep(stuck, messages=stuck.messages):
                    return order[at:]
                # The records after it whose events went in this pass are not sent again, nor
                # their deliveries that went in the same call as its own.
                for n in range(at + 1, unsent):
                    done = rest[n].sequence not in unqueued
                    pending[start + n] = replace(
                        rest[n], events=(), messages=() if done else rest[n].messages
                    )
                start += at + 1
        return []

    def _old(self, change: RecordChanges) -> bool:
        """Whether `change`'s record has held its lane long enough to be set aside."""
        return self._now() - change.written_at >= timedelta(seconds=SET_ASIDE_AFTER_SECONDS)
