"""Notifications: queued by the events consumer, delivered by the notifier.

`NotificationQueue.send` puts each delivery (domain.notifications.NotificationMessage) on
the notifications queue in SendMessageBatch calls, in stream order, each in its tenant's
message group (SQS fair queues: one tenant's backlog does not hold the others' back). An
entry SQS did not take for a reason that may pass is sent again (up to `attempts` times,
jittered); when one is still not taken, its record and every record after it are reported
unqueued: the stream retries them, so no delivery is lost (one queued before goes again,
with the same id). The calls hold at most 10 entries and MAX_DELIVERY_BYTES in all (the queue's
largest message, SendMessageBatch's largest request), so one tenant's large delivery never
shares a refused call with another's. An entry SQS would refuse as the sender's fault (it
would be refused forever and hold the shard back, and the deliveries of other tenants behind
it) is logged with its tenant, job and run, counted (`NotificationsRejected`) and left out:
one larger than MAX_DELIVERY_BYTES before any call, one refused with `SenderFault`, and one
whose call alone is refused whole for its size or content (`BatchRequestTooLong`,
`InvalidParameterValue`; a call of several refused so is sent again one entry a call). A job
write refuses a notification target too large for a delivery (domain.models.Notification).

`Notifier.deliver` makes one delivery: it checks, with the grants as they are now, that the
tenant may reach the target (a refusal is permanent: counted `NotificationsRefused`, logged,
never retried), then calls it with the scheduler's role or the tenant's assumed role, as a
run's target is called (targets.dispatch). A failure that may pass raises
`NotificationFailed`: the message comes back after the queue's visibility timeout, up to the
queue's receive count, then waits on the notifications DLQ (whose depth alarms). Nothing here
is on a run's path: a run is never held back by its notifications.

What each target receives: the event's CloudEvents JSON (the bus's `detail`) as the SQS body,
the SNS message, the EventBridge detail (`DetailType` the event type) or the HTTP body, with
the notification id (`<event id>#n<index>`) as the SQS/SNS `notificationId` attribute and
FIFO deduplication id, or the HTTP `Idempotency-Key` (and the signature's `webhook-id`)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.errors import ExecutionError, PermanentError
from ..domain.events import RunEventData
from ..domain.metrics import NO_METRICS, Metrics, Unit
from ..domain.models import (
    MAX_DELIVERY_BYTES,
    EventBridgeTarget,
    HttpTarget,
    NotifyTarget,
    SnsTarget,
    SqsTarget,
    queue_json,
)
from ..domain.notifications import NotificationMessage
from ..observability import logger
from ..store.queues import message_group_id
from ..targets.authority import event_source
from ..targets.aws_targets import accepted_entry, aws_errors, sqs_deduplication_id
from ..targets.invocation import Invocation
from .batching import batches

MAX_BATCH = 10  # SendMessageBatch: entries per request (and MAX_DELIVERY_BYTES in all)
# Whole-call refusals that are the request's own fault: sent again they are refused again.
SENDER_FAULT_CODES = frozenset({"BatchRequestTooLong", "InvalidParameterValue", "InvalidMessageContents"})
DELIVERY_TIMEOUT_SECONDS = 10.0  # one delivery's call, whatever the target's own timeout
NOTIFIER_ACTOR = "notifier"

# (service, target, tenant, seconds the call may take) -> a client allowed to make the call.
# Raises ExecutionError (TargetNotGranted) when the tenant may not.
ClientFor = Callable[[str, Any, str, float], Any]


class NotificationFailed(Exception):
    """A delivery that may succeed later: the queue gives the message back."""


class NotificationQueue:
    """Puts deliveries on the notifications queue. `client` is an SQS client (boto3); with no
    `queue_url` (a deployment without the queue) deliveries are counted and dropped."""

    def __init__(
        self,
        client: Any,
        queue_url: str | None,
        metrics: Metrics = NO_METRICS,
        *,
        attempts: int = 4,
        base_delay: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._url = queue_url
        self._metrics = metrics
        self._attempts = attempts
        self._base_delay = base_delay
        self._sleep = sleep
        self._rng = rng or random.Random()

    def send(self, records: Sequence[tuple[str, Sequence[NotificationMessage]]]) -> list[str]:
        """Queue each record's deliveries, records in the given (stream) order. Returns the
        records not queued, in order: the first whose delivery SQS did not take after every
        attempt, then each later one with a delivery SQS did not take or that was not sent
        (a record after it whose deliveries all went in the same call is not named). A
        delivery too large for the queue, or refused as the sender's fault, is left out
        (`NotificationsRejected`, logged): it never makes its record unqueued. Never raises."""
        if not records:
            return []
        if self._url is None:
            dropped = sum(len(messages) for _, messages in records)
            logger.error("no notifications queue: deliveries dropped", extra={"count": dropped})
            self._metrics.add("NotificationsDropped", dropped, Unit.COUNT)
            return []
        entries = []
        for record, messages in records:
            for message in messages:
                entry = Delivery(record, message, message_body(message))
                if entry.size > MAX_DELIVERY_BYTES:
                    self._reject(
                        entry, "TooLarge", f"{entry.size} bytes; the queue takes {MAX_DELIVERY_BYTES}"
                    )
                else:
                    entries.append(entry)
        order = [record for record, _ in records]
        queued = 0
        requests = batches(
            entries, lambda entry: entry.size, max_entries=MAX_BATCH, max_bytes=MAX_DELIVERY_BYTES
        )
        for n, batch in enumerate(requests):
            refused = self._send(batch)
            queued += len(batch) - len(refused)
            if refused:
                self._metrics.add("NotificationsQueued", queued, Unit.COUNT)
                unsent = [entry for later in requests[n + 1 :] for entry in later]
                unqueued = {entry.record for entry in (*refused, *unsent)}
                return [record for record in order if record in unqueued]
        self._metrics.add("NotificationsQueued", queued, Unit.COUNT)
        return []

    def _send(self, batch: list[Delivery]) -> list[Delivery]:
        """One batch, its refused entries again; the entries still refused, in order. A call
        refused whole as the sender's fault (too long, an invalid parameter) is sent again one
        entry a call, and an entry refused so alone is left out."""
        pending = {str(i): entry for i, entry in enumerate(batch)}
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(self._rng.uniform(0, self._base_delay * 2**attempt))
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self._url,
                    Entries=[entry.request(key) for key, entry in pending.items()],
                )
            except (ClientError, BotoCoreError) as exc:
                code = error_code(exc)
                if code in SENDER_FAULT_CODES:
                    entries = [pending[key] for key in sorted(pending, key=int)]
                    if len(entries) == 1:
                        self._reject(entries[0], code, str(exc))
                        return []
                    return [still for entry in entries for still in self._send([entry])]
                logger.warning("queueing notifications failed", extra={"error": str(exc)})
                continue
            failed = response.get("Failed") or []
            for failure in failed:
                if failure.get("SenderFault"):
                    self._reject(pending[str(failure.get("Id"))], failure.get("Code"), failure.get("Message"))
            refused = {str(f.get("Id")) for f in failed if not f.get("SenderFault")}
            pending = {key: entry for key, entry in pending.items() if key in refused}
            if not pending:
                return []
        still = [pending[key] for key in sorted(pending, key=int)]
        logger.error("notifications not queued", extra={"entries": len(still), "record": still[0].record})
        return still

    def _reject(self, entry: Delivery, code: str | None, reason: str | None) -> None:
        """Leave out a delivery the queue will never take: logged (its tenant, job and run)
        and counted."""
        message = entry.message
        logger.error(
            "notification refused by the queue for good: left out",
            extra={
                "record": entry.record,
                "notification_id": message.id,
                "tenant": message.tenant,
                "job_id": message.job_id,
                "run_key": message.event.get("subject"),
                "size": entry.size,
                "error_code": code,
                "error_message": reason,
            },
        )
        self._metrics.add("NotificationsRejected", 1, Unit.COUNT)


@dataclass(frozen=True)
class Delivery:
    """One delivery to queue, the record it came from and its body (`message_body`)."""

    record: str
    message: NotificationMessage
    body: str

    @property
    def size(self) -> int:
        """The body's size in bytes, as SQS counts it against MAX_DELIVERY_BYTES (ASCII)."""
        return len(self.body)

    def request(self, key: str) -> dict[str, str]:
        """The SendMessageBatch entry, `key` its `Id`."""
        return {"Id": key, "MessageBody": self.body, "MessageGroupId": message_group_id(self.message.tenant)}


def error_code(exc: ClientError | BotoCoreError) -> str:
    """The error code of a refused call, without SQS's `AWS.SimpleQueueService.` prefix ('':
    no answer)."""
    if not isinstance(exc, ClientError):
        return ""
    return str(exc.response.get("Error", {}).get("Code", "")).rsplit(".", 1)[-1]


def batch_entry(key: str, message: NotificationMessage) -> dict[str, str]:
    """`message` as a SendMessageBatch entry of the notifications queue, `key` its `Id`: the
    body (`message_body`) in its tenant's message group."""
    return Delivery("", message, message_body(message)).request(key)


def message_body(message: NotificationMessage) -> str:
    """The message as JSON in ASCII (`queue_json`): a tenant's free text (an error message)
    may hold code points SQS refuses. At most MAX_DELIVERY_BYTES for a target a job write
    accepts (`Notification`'s rule)."""
    return queue_json(message.model_dump(mode="json", by_alias=True))


@dataclass(frozen=True)
class Notice(Invocation):
    """A notification as the HTTP client sends it: `run_key` is the notification id (its
    `Idempotency-Key`), the body is the event's JSON."""

    body: str = ""

    def envelope_json(self) -> str:
        return self.body


class Notifier:
    """Delivers notifications. `client_for` gives the client for an AWS target once the tenant
    is allowed to make its call (targets.dispatch.TargetRunner.client_for); `http` sends an
    HTTP target's request (SSRF policy, signing with the job's secret, secret headers)."""

    def __init__(
        self,
        client_for: ClientFor,
        http: Any,
        metrics: Metrics = NO_METRICS,
        *,
        timeout_seconds: float = DELIVERY_TIMEOUT_SECONDS,
    ) -> None:
        self._client_for = client_for
        self._http = http
        self._metrics = metrics
        self._timeout = timeout_seconds

    def deliver(self, message: NotificationMessage, *, attempt: int = 1) -> bool:
        """Make one delivery. True when delivered, False when refused for good (not granted,
        a target that can never take it): counted and logged. Raises NotificationFailed when
        it may succeed on a later attempt."""
        kind = message.target.kind
        try:
            self._send(message, attempt)
        except PermanentError as exc:
            logger.error(
                "notification refused for good",
                extra={
                    "notification_id": message.id,
                    "tenant": message.tenant,
                    "job_id": message.job_id,
                    "error_class": exc.error_class,
                    "error": exc.message,
                },
            )
            self._metrics.add("NotificationsRefused", 1, Unit.COUNT, dimensions={"kind": kind})
            return False
        except ExecutionError as exc:  # retryable or ambiguous: the receiver dedupes on the id
            self._metrics.add("NotificationFailures", 1, Unit.COUNT, dimensions={"kind": kind})
            raise NotificationFailed(f"{message.id}: {exc.error_class}: {exc.message}") from exc
        except Exception as exc:
            self._metrics.add("NotificationFailures", 1, Unit.COUNT, dimensions={"kind": kind})
            raise NotificationFailed(f"{message.id}: {type(exc).__name__}: {exc}") from exc
        self._metrics.add("NotificationsDelivered", 1, Unit.COUNT, dimensions={"kind": kind})
        return True

    def _send(self, message: NotificationMessage, attempt: int) -> None:
        target: NotifyTarget = message.target
        body = json.dumps(message.event, separators=(",", ":"))  # ASCII: SQS refuses some code points
        if isinstance(target, HttpTarget):
            self._http.send(target, self._notice(message, body, attempt))
            return
        service = {SnsTarget: "sns", SqsTarget: "sqs", EventBridgeTarget: "events"}[type(target)]
        client = self._client_for(service, target, message.tenant, self._timeout)
        attributes = {
            "notificationId": {"DataType": "String", "StringValue": message.id},
            "type": {"DataType": "String", "StringValue": message.event_type},
        }
        with aws_errors():
            if isinstance(target, SnsTarget):
                request: dict[str, Any] = {
                    "TopicArn": target.topic_arn,
                    "Message": body,
                    "MessageAttributes": attributes,
                }
                if target.topic_arn.endswith(".fifo"):
                    request["MessageGroupId"] = message.job_id
                    request["MessageDeduplicationId"] = sqs_deduplication_id(message.id)
                client.publish(**request)
            elif isinstance(target, SqsTarget):
                request = {"QueueUrl": target.queue_url, "MessageBody": body, "MessageAttributes": attributes}
                if target.queue_url.endswith(".fifo"):
                    request["MessageGroupId"] = target.message_group_id or message.job_id
                    request["MessageDeduplicationId"] = sqs_deduplication_id(message.id)
                client.send_message(**request)
            else:
                self._put_event(client, target, message, body)

    @staticmethod
    def _put_event(client: Any, target: EventBridgeTarget, message: NotificationMessage, body: str) -> None:
        """PutEvents of the one entry; its refusal classified as a run target's is."""
        response = client.put_events(
            Entries=[
                {
                    "Source": event_source(target, message.tenant),
                    "DetailType": message.event_type,
                    "Detail": body,
                    "EventBusName": target.event_bus_name,
                }
            ]
        )
        accepted_entry(response, target.event_bus_name)

    def _notice(self, message: NotificationMessage, body: str, attempt: int) -> Notice:
        data = RunEventData.model_validate(message.event["data"])
        return Notice(
            run_key=message.id,
            job_id=message.job_id,
            tenant=message.tenant,
            job_type=data.job_type,
            scheduled_for=data.scheduled_for,
            attempt=attempt,
            payload=None,
            timeout_seconds=self._timeout,
            body=body,
        )
