"""The event bus as the events consumer's PutEvents client sees it in chaos: each entry is
accepted or refused (InternalFailure, at the `bus_refusal` rate), and every accepted event
is recorded in the order the bus took it, beside the code under test. The checker judges
the run events against the transitions the Runs stream carried: none lost, and no id
accepted twice with two different contents (`events_lost`, `events_conflicting`).

The notifications queue as the events consumer's SendMessageBatch client sees it is the
same: entries refused now and then (`ServiceUnavailable`, not the sender's fault), every
accepted message recorded. The checker wants, for each notified event the bus accepted, the
notification its job asks for (`notices_lost`), and no id queued with two contents
(`notices_conflicting`)."""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChaosBus:
    rng: random.Random
    refusal: float = 0.0  # per entry, while faults are injected
    injecting: bool = True
    accepted: list[dict[str, Any]] = field(default_factory=list)  # CloudEvents, in acceptance order
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        answers: list[dict[str, Any]] = []
        with self.lock:
            for entry in Entries:
                if self.injecting and self.refusal and self.rng.random() < self.refusal:
                    self.refused += 1
                    answers.append({"ErrorCode": "InternalFailure", "ErrorMessage": "injected"})
                    continue
                self.accepted.append(json.loads(entry["Detail"]))
                answers.append({"EventId": f"chaos-{len(self.accepted)}"})
        failed = sum(1 for a in answers if "ErrorCode" in a)
        return {"FailedEntryCount": failed, "Entries": answers}


@dataclass
class ChaosNoticeQueue:
    rng: random.Random
    refusal: float = 0.0  # per SendMessageBatch entry, while faults are injected
    injecting: bool = True
    accepted: list[dict[str, Any]] = field(default_factory=list)  # notification messages, in order
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        successful: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        with self.lock:
            for entry in Entries:
                if self.injecting and self.refusal and self.rng.random() < self.refusal:
                    self.refused += 1
                    failed.append({"Id": entry["Id"], "SenderFault": False, "Code": "ServiceUnavailable"})
                    continue
                self.accepted.append(json.loads(entry["MessageBody"]))
                successful.append({"Id": entry["Id"], "MessageId": f"notice-{len(self.accepted)}"})
        return {"Successful": successful, "Failed": failed}
