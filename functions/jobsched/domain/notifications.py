"""Notifications a tenant sets on a job (`notify`): which of a run's events each one is sent
for, and the message that carries one delivery. Pure.

The events consumer reads each run change's events (domain.events) and, for a run whose job
asked for them, queues one message per notification and event: the event (CloudEvents JSON,
as the bus carries it) and the notification's target, as the run was made with it. The
notifier delivers each message on its own (services.notifications), so one tenant's failing
target costs only its own retries. A message's `id` (`<event id>#n<index>`) is stable across
stream redelivery and every retry: a receiver dedupes on it."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .events import CloudEvent, EventType
from .models import Model, Notification, NotifyOn, NotifyTarget

# Which event each notification kind is sent for.
NOTIFIED_TYPES: dict[EventType, NotifyOn] = {
    EventType.RUN_DEAD: NotifyOn.DEAD,
    EventType.RUN_LATE: NotifyOn.LATE,
    EventType.RUN_SKIPPED: NotifyOn.SKIPPED,
}


class NotificationMessage(Model):
    """One delivery: a run event to one of its job's notification targets."""

    id: str = Field(min_length=1, description="`<event id>#n<index>`: stable, dedupe on it")
    tenant: str
    job_id: str
    index: int = Field(ge=0, description="the notification's position in the job's `notify`")
    target: NotifyTarget
    event: dict[str, Any] = Field(description="the CloudEvents document, as the bus carries it")

    @property
    def event_type(self) -> str:
        return str(self.event.get("type"))


def messages_for(notify: list[Notification], events: list[CloudEvent]) -> list[NotificationMessage]:
    """The deliveries `events` (one run's, in order) ask for under `notify`: for each event a
    notification kind names, one message per notification that names it."""
    messages = []
    for event in events:
        kind = NOTIFIED_TYPES.get(event.type)
        if kind is None:
            continue
        for index, notification in enumerate(notify):
            if kind in notification.on:
                messages.append(
                    NotificationMessage(
                        id=f"{event.id}#n{index}",
                        tenant=event.tenant,
                        job_id=event.data.job_id,
                        index=index,
                        target=notification.target,
                        event=event.document(),
                    )
                )
    return messages
