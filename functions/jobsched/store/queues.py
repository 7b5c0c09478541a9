"""SQS adapter: publishes run pointers to the priority queues, dead-letters, releases."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.errors import StorageUnavailable
from ..domain.instants import format_instant
from ..domain.runs import Run
from ..domain.tracing import parse_trace_header

MAX_BATCH = 10


def message_group_id(tenant: str) -> str:
    """The tenant's message group on the fair queues: the SHA-256 of its UTF-8 bytes, in hex.

    A tenant id (1-256 printable Unicode characters from an authorizer, or an IAM principal's
    `<account>/user/<path>/<name>` of up to 594) does not fit SQS's `MessageGroupId`, at most
    128 characters of ASCII letters, digits and punctuation: the raw id made AWS refuse the
    tenant's every message. The digest fits (64 characters of [0-9a-f]), is the same for every
    message of a tenant (the fairness SQS computes per group), and differs between tenants."""
    return hashlib.sha256(tenant.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RunMessage:
    """What travels on a queue: a pointer to the run, never its payload. `due_at`: the run's
    due instant when it was published (None in a message published without it): lets the
    worker judge how long the run has waited for its tenant's slots before reading it."""

    run_key: str
    job_id: str
    scheduled_for: str
    tenant: str
    priority: str
    due_at: str | None = None

    @classmethod
    def of(cls, run: Run) -> RunMessage:
        return cls(
            run.run_key,
            run.job_id,
            format_instant(run.scheduled_for),
            run.tenant,
            run.priority.value,
            format_instant(run.due_at),
        )

    def to_json(self) -> str:
        body = {
            "runKey": self.run_key,
            "jobId": self.job_id,
            "scheduledFor": self.scheduled_for,
            "tenant": self.tenant,
            "priority": self.priority,
        }
        if self.due_at is not None:
            body["dueAt"] = self.due_at
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> RunMessage:
        data = json.loads(body)
        due_at = data.get("dueAt")
        return cls(
            data["runKey"],
            data["jobId"],
            data["scheduledFor"],
            data["tenant"],
            data["priority"],
            due_at if isinstance(due_at, str) else None,
        )


class RunQueues:
    def __init__(self, client: Any, urls: dict[str, str], dlq_urls: dict[str, str], *, fair: bool) -> None:
        self._sqs = client
        self.urls = urls
        self.dlq_urls = dlq_urls
        self.fair = fair

    def url(self, queue: str) -> str:
        try:
            return self.urls[queue]
        except KeyError:
            raise StorageUnavailable(f"queue '{queue}' is not configured") from None

    def publish(self, queue: str, entries: list[tuple[Run, int]]) -> list[str]:
        """Send (run, delay seconds) pointers in batches of 10. Returns the run keys that failed."""
        failed: list[str] = []
        url = self.url(queue)
        for start in range(0, len(entries), MAX_BATCH):
            chunk = entries[start : start + MAX_BATCH]
            batch = []
            for index, (run, delay) in enumerate(chunk):
                entry: dict[str, Any] = {
                    "Id": str(index),
                    "MessageBody": RunMessage.of(run).to_json(),
                    "DelaySeconds": max(0, min(900, delay)),
                }
                if self.fair:
                    # Fair queues: one tenant's backlog must not raise everyone's dwell time.
                    entry["MessageGroupId"] = message_group_id(run.tenant)
                origin = parse_trace_header(f"Root={run.history[0].trace_id}") if run.history else None
                if origin is not None:
                    # X-Ray links the worker's invocation to the trace that made the run.
                    entry["MessageSystemAttributes"] = {
                        "AWSTraceHeader": {"DataType": "String", "StringValue": origin.header()}
                    }
                batch.append(entry)
            try:
                response = self._sqs.send_message_batch(QueueUrl=url, Entries=batch)
            except (ClientError, BotoCoreError):
                failed.extend(run.run_key for run, _ in chunk)
                continue
            failed.extend(chunk[int(f["Id"])][0].run_key for f in response.get("Failed", []))
        return failed

    def dead_letter(self, queue: str, run: Run, reason: str) -> None:
        """Put a copy of a DEAD run's pointer on its queue's DLQ so the DLQ-depth alarm fires."""
        url = self.dlq_urls.get(queue)
        if not url:
            return
        body = json.loads(RunMessage.of(run).to_json())
        body["reason"] = reason[:500]
        self._sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body, separators=(",", ":")))

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> None:
        """Make a received message visible again after `seconds` (0..43200)."""
        self._sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=max(0, min(43200, seconds))
        )

    def change_visibility_batch(self, queue_url: str, receipt_handles: list[str], seconds: int) -> list[str]:
        """Make each received message visible again after `seconds` (0..43200), ten to a call.
        Returns the receipt handles SQS did not change."""
        failed: list[str] = []
        timeout = max(0, min(43200, seconds))
        for start in range(0, len(receipt_handles), 10):
            chunk = receipt_handles[start : start + 10]
            entries = [
                {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": timeout}
                for i, handle in enumerate(chunk)
            ]
            response = self._sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
            failed += [chunk[int(entry["Id"])] for entry in response.get("Failed", [])]
        return failed

    def receive(
        self, queue: str, *, max_messages: int, visibility: int, wait: int = 0
    ) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(
            QueueUrl=self.url(queue),
            MaxNumberOfMessages=max(1, min(10, max_messages)),
            VisibilityTimeout=visibility,
            WaitTimeSeconds=wait,
            MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
        )
        return list(response.get("Messages", []))

    def delete(self, queue: str, receipt_handle: str) -> None:
        self._sqs.delete_message(QueueUrl=self.url(queue), ReceiptHandle=receipt_handle)

    def queue_of_url(self, url_or_arn: str) -> str | None:
        """Map a queue URL or ARN (as in an SQS event record) back to its key."""
        name = url_or_arn.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        for key, url in self.urls.items():
            if url.rsplit("/", 1)[-1] == name:
                return key
        return None
