"""Publishing run and job events to the stack's EventBridge bus (PutEvents).

The events consumer hands over each stream record's events, in stream order. They go out in
PutEvents calls of at most 10 entries and 256 KB (AWS's limits, entry sizes counted as AWS
counts them). An entry refused for a reason that passes (throttled, an internal failure) is
sent again, alone with the other such entries of its call, up to `attempts` times with
jittered backoff; a call that fails as a whole counts as each of its entries refused so. A
record whose event is still not accepted is reported, and so is every record after it,
unsent: the stream retries from the first reported record, so no event is skipped (the ones
sent before go again, with the same ids). An entry refused for a reason that will not pass
(an invalid argument, a malformed detail) would hold the stream back until its records age
out: it is logged with the event's id, counted (`EventsRejected`) and left out. EventBridge
promises no delivery order, and an entry accepted on a later try lands after a later event
sent beside it: a consumer orders one run's events by `data.sequence`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.events import CloudEvent
from ..domain.metrics import NO_METRICS, Metrics, Unit
from ..observability import logger
from .batching import batches as requests_of

MAX_ENTRIES = 10  # PutEvents: entries per request
# Entry error codes that pass with time; any other is the entry's own fault, refused again
# however often it is sent.
RETRYABLE_CODES = frozenset(
    {"ThrottlingException", "InternalFailure", "InternalException", "ServiceUnavailable"}
)
MAX_REQUEST_BYTES = 256 * 1024  # PutEvents: total entry size per request
TIME_BYTES = 14  # what AWS counts for an entry's Time, whatever its format


@dataclass(frozen=True)
class Entry:
    """One PutEvents entry and the record it came from."""

    record: str
    request: dict[str, Any]

    @property
    def size(self) -> int:
        """The entry's size as AWS counts it against MAX_REQUEST_BYTES."""
        detail = self.request["Detail"]
        return (
            TIME_BYTES
            + len(self.request["Source"].encode())
            + len(self.request["DetailType"].encode())
            + len(detail.encode())
        )


@dataclass
class PublishReport:
    published: int = 0
    failed_records: list[str] = field(default_factory=list)  # the first failed record and every later one
    retries: int = 0
    rejected: int = 0  # refused for a reason that will not pass: left out


def entry_of(record: str, event: CloudEvent, bus_name: str) -> Entry:
    """The PutEvents entry of `event`: its CloudEvents JSON as the detail, its source and type
    as EventBridge's (so rules match on them), its time as the entry's."""
    document = event.document()
    return Entry(
        record,
        {
            "EventBusName": bus_name,
            "Source": event.source,
            "DetailType": event.type.value,
            "Detail": json.dumps(document, separators=(",", ":"), ensure_ascii=False),
            "Time": event.time,
        },
    )


def batches(entries: Sequence[Entry]) -> list[list[Entry]]:
    """`entries` in order, cut into requests within MAX_ENTRIES and MAX_REQUEST_BYTES.
    Raises ValueError for an entry larger than a whole request (`publish` leaves those out
    first; the events' own limits keep every entry far below it)."""
    for entry in entries:
        if entry.size > MAX_REQUEST_BYTES:
            raise ValueError(f"event of record {entry.record} is {entry.size} bytes, over PutEvents' limit")
    return requests_of(
        entries, lambda entry: entry.size, max_entries=MAX_ENTRIES, max_bytes=MAX_REQUEST_BYTES
    )


class EventPublisher:
    """Sends events to one bus. `put_events` is an EventBridge client's method (boto3)."""

    def __init__(
        self,
        client: Any,
        bus_name: str,
        metrics: Metrics = NO_METRICS,
        *,
        attempts: int = 4,
        base_delay: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._bus = bus_name
        self._metrics = metrics
        self._attempts = attempts
        self._base_delay = base_delay
        self._sleep = sleep
        self._rng = rng or random.Random()

    def publish(self, records: Sequence[tuple[str, Sequence[CloudEvent]]]) -> PublishReport:
        """Publish each record's events, records in the given (stream) order.

        Takes (record id, events) pairs. Returns how many events were accepted and, when one
        was not after every attempt, that record's id and the id of every record after it
        (none of whose events were sent). Never raises for a failed call: a failure is a
        failed record."""
        report = PublishReport()
        entries = []
        for record, events in records:
            for event in events:
                entry = entry_of(record, event, self._bus)
                if entry.size > MAX_REQUEST_BYTES:
                    self._reject(entry, report, "TooLarge", f"{entry.size} bytes")
                else:
                    entries.append(entry)
        order = [record for record, _ in records]
        for request in batches(entries):
            failed = self._send(request, report)
            if failed is not None:
                report.failed_records = order[order.index(failed) :]
                break
        self._metrics.add("EventsPublished", report.published, Unit.COUNT)
        if report.retries:
            self._metrics.add("EventPublishRetries", report.retries, Unit.COUNT)
        if report.failed_records:
            self._metrics.add("EventRecordsFailed", len(report.failed_records), Unit.COUNT)
        if report.rejected:
            self._metrics.add("EventsRejected", report.rejected, Unit.COUNT)
        return report

    @staticmethod
    def _reject(entry: Entry, report: PublishReport, code: str | None, message: str | None) -> None:
        report.rejected += 1
        detail = json.loads(entry.request["Detail"])
        logger.error(
            "event refused by the bus for good: left out",
            extra={
                "record": entry.record,
                "event_id": detail.get("id"),
                "error_code": code,
                "error_message": message,
            },
        )

    def _send(self, request: list[Entry], report: PublishReport) -> str | None:
        """Send one request, its failed entries again up to the attempts; the record of the
        first entry still failing, or None."""
        pending = request
        for attempt in range(self._attempts):
            if attempt:
                report.retries += len(pending)
                self._sleep(self._rng.uniform(0, self._base_delay * 2**attempt))
            pending = self._put(pending, report)
            if not pending:
                return None
        first = pending[0]
        logger.error(
            "events not accepted by the bus",
            extra={"record": first.record, "entries": len(pending), "attempts": self._attempts},
        )
        return first.record

    def _put(self, entries: list[Entry], report: PublishReport) -> list[Entry]:
        """One PutEvents call; the entries it did not accept, in order."""
        try:
            response = self._client.put_events(Entries=[e.request for e in entries])
        except (ClientError, BotoCoreError) as exc:
            logger.warning("PutEvents failed", extra={"entries": len(entries), "error": str(exc)})
            return entries
        results = response.get("Entries") or []
        failed = []
        for index, entry in enumerate(entries):
            result = results[index] if index < len(results) else {}
            code = result.get("ErrorCode")
            if result.get("EventId") and not code:
                report.published += 1
            elif code and code not in RETRYABLE_CODES:
                self._reject(entry, report, code, result.get("ErrorMessage"))
            else:
                failed.append(entry)
                logger.warning(
                    "event not accepted",
                    extra={
                        "record": entry.record,
                        "error_code": result.get("ErrorCode"),
                        "error_message": result.get("ErrorMessage"),
                    },
                )
        return failed
