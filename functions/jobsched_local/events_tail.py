"""Local mode's view of the event bus: a rule on the bus sends every jobsched event to a queue
(moto_backend.create_event_bus); this drains it into a bounded buffer that the local front
serves at `GET /local/events`, each caller seeing only its own tenant's events (`jobsched
events tail`). A deployed stack has no such path: its events are read by subscribing to the
bus (docs/concepts/events.md)."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from jobsched.domain.errors import MethodNotAllowed

CAPACITY = 5000  # events kept; older ones fall off (a cursor before them starts at the oldest)
PAGE = 100
PATH = "/local/events"


@dataclass(frozen=True)
class Tailed:
    position: int  # 1, 2, ... in the order the bus delivered them
    tenant: str
    event: dict[str, Any]  # the CloudEvent (the bus event's `detail`)


class EventTail:
    def __init__(self, sqs: Any, queue_url: str, capacity: int = CAPACITY) -> None:
        self._sqs = sqs
        self._url = queue_url
        self._events: deque[Tailed] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._position = 0

    def drain(self) -> int:
        """Move what the queue holds into the buffer; how many events were added."""
        added = 0
        while True:
            messages = (
                self._sqs.receive_message(QueueUrl=self._url, MaxNumberOfMessages=10).get("Messages") or []
            )
            if not messages:
                return added
            for message in messages:
                event = _cloud_event(message.get("Body", ""))
                if event is not None and isinstance(event.get("tenant"), str):
                    with self._lock:
                        self._position += 1
                        self._events.append(Tailed(self._position, str(event.get("tenant")), event))
                    added += 1
            self._sqs.delete_message_batch(
                QueueUrl=self._url,
                Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)],
            )

    def page(self, tenant: str, after: int, limit: int = PAGE) -> dict[str, Any]:
        """The tenant's events after position `after`, oldest first, and the cursor to ask from next."""
        with self._lock:
            newest = self._events[-1].position if self._events else 0
            after = min(after, newest)  # a cursor from before local mode restarted
            mine = [t for t in self._events if t.position > after and t.tenant == tenant][: limit + 1]
        if len(mine) > limit:  # more to come: go on after the last one given
            mine = mine[:limit]
            return {"items": [t.event for t in mine], "cursor": mine[-1].position}
        # Everything after `after` was looked at: other tenants' events are passed over.
        return {"items": [t.event for t in mine], "cursor": max(after, newest)}

    def answer(self, method: str, path: str, query: str, tenant: str) -> tuple[int, Any] | None:
        """The local front's hook: `GET /local/events?after=N&limit=M`, or None for another path.
        Raises MethodNotAllowed for another method on it."""
        if path != PATH:
            return None
        if method != "GET":
            raise MethodNotAllowed(method, PATH, ["GET"])
        values = parse_qs(query)
        try:
            after = int(values.get("after", ["0"])[0])
            limit = int(values.get("limit", [str(PAGE)])[0])
        except ValueError:
            return 400, _invalid("after/limit", "must be integers")
        if after < 0:
            return 400, _invalid("after", "must be >= 0")
        if not 1 <= limit <= PAGE:
            return 400, _invalid("limit", f"must be 1..{PAGE}")
        return 200, self.page(tenant, after, limit)


def _invalid(field: str, rule: str) -> dict[str, Any]:
    return {
        "code": "invalid_request",
        "message": f"{field}: {rule}",
        "errors": [{"field": field, "rule": rule}],
    }


def _cloud_event(body: str) -> dict[str, Any] | None:
    try:
        envelope = json.loads(body)
    except ValueError:
        return None
    detail = envelope.get("detail") if isinstance(envelope, dict) else None
    return detail if isinstance(detail, dict) else None
