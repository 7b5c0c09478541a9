"""Local mode's copy of the event bus (jobsched_local.events_tail): each caller sees only its
own tenant's events, in order, paged by a cursor; bad paging is a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jobsched.domain.errors import MethodNotAllowed
from jobsched_local.events_tail import PATH, EventTail


class FakeQueue:
    def __init__(self, bodies: list[str]) -> None:
        self.bodies = list(bodies)
        self.deleted = 0

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int) -> dict[str, Any]:
        taken, self.bodies = self.bodies[:MaxNumberOfMessages], self.bodies[MaxNumberOfMessages:]
        return {"Messages": [{"Body": b, "ReceiptHandle": str(n)} for n, b in enumerate(taken)]}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> None:
        self.deleted += len(Entries)


def ask(tail: EventTail, query: str, tenant: str = "a", method: str = "GET") -> tuple[int, Any]:
    answered = tail.answer(method, PATH, query, tenant)
    assert answered is not None
    return answered


def bus_event(tenant: str, n: int) -> str:
    return json.dumps({"source": f"jobsched/x/{tenant}", "detail": {"id": f"{tenant}-{n}", "tenant": tenant}})


def test_each_tenant_pages_through_its_own_events_only():
    bodies = [bus_event("a" if n % 3 else "b", n) for n in range(30)] + ["not json", json.dumps([1])]
    queue = FakeQueue(bodies)
    tail = EventTail(queue, "url")
    assert tail.drain() == 30 and queue.deleted == 32  # unreadable messages are dropped too
    seen, cursor = [], 0
    while True:
        status, page = ask(tail, f"after={cursor}&limit=7")
        assert status == 200
        seen += [e["id"] for e in page["items"]]
        if page["cursor"] == cursor:
            break
        cursor = page["cursor"]
    assert seen == [f"a-{n}" for n in range(30) if n % 3]
    assert ask(tail, "after=0", "nobody")[1] == {"items": [], "cursor": 30}


def test_bad_paging_is_a_400_naming_the_field_and_other_paths_pass_through():
    tail = EventTail(FakeQueue([]), "url")
    assert tail.answer("GET", "/v1/jobs", "", "a") is None
    with pytest.raises(MethodNotAllowed) as refused:
        ask(tail, "", method="POST")
    assert refused.value.headers == {"Allow": "GET"}
    for query, field in (
        ("after=-1", "after"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("after=x", "after/limit"),
    ):
        status, body = ask(tail, query)
        assert status == 400 and body["errors"][0]["field"] == field, query


def test_the_buffer_keeps_the_newest_events():
    queue = FakeQueue([bus_event("a", n) for n in range(12)])
    tail = EventTail(queue, "url", capacity=5)
    tail.drain()
    status, page = ask(tail, "after=0")
    assert status == 200 and [e["id"] for e in page["items"]] == [f"a-{n}" for n in range(7, 12)]
