"""Local mode's SQS event source runs worker invocations side by side, up to the mapping's
MaximumConcurrency, as Lambda does: one slow target holds one invocation, not the queue."""

from __future__ import annotations

import threading
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from jobsched_local.glue import Invoker, QueueSource

SAFETY = 10  # seconds a wait may take before the test gives up (never reached when it passes)


class BlockingHandler:
    """A handler whose invocations all wait until the test lets them finish."""

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self.bodies: list[str] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.bodies.extend(r["body"] for r in event["Records"])
        self.started.release()
        assert self.release.wait(SAFETY)
        return {"batchItemFailures": []}


def test_the_queue_source_runs_up_to_its_maximum_concurrency_of_invocations(aws):
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="scratch")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for i in range(5):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    handler = BlockingHandler()
    threads: list[threading.Thread] = []

    def spawn(work):
        thread = threading.Thread(target=work, daemon=True)
        threads.append(thread)
        thread.start()

    invoker = Invoker("worker", handler, concurrent=True)
    source = QueueSource(
        sqs, url, arn, invoker, region="us-east-1", batch_size=1, max_concurrency=3, spawn=spawn
    )

    assert source.poll() == 3  # three slots, three one-message batches
    for _ in range(3):
        assert handler.started.acquire(timeout=SAFETY)
    assert source.in_flight == 3 and len(handler.bodies) == 3  # all three running at once
    assert source.poll() == 0  # no free slot: the rest wait in the queue
    handler.release.set()
    for thread in threads:
        thread.join(SAFETY)
    assert source.in_flight == 0
    assert source.poll() == 2
    for thread in threads:
        thread.join(SAFETY)
    assert sorted(handler.bodies) == [f"m{i}" for i in range(5)]
    assert source.most_in_flight == 3 and source.delivered == 5
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # every one deleted


def test_a_concurrent_invoker_lets_invocations_overlap():
    both = threading.Barrier(2, timeout=SAFETY)  # broken (and the test failed) if they cannot meet
    invoker = Invoker("worker", lambda event, context: both.wait(), concurrent=True)
    callers = [threading.Thread(target=invoker, args=({"Records": []},)) for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(SAFETY)
    assert not both.broken and invoker.errors == 0 and invoker.invocations == 2


class CountingSqs:
    """The SQS client, counting ReceiveMessage calls."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.receives = 0

    def receive_message(self, **kwargs: Any) -> Any:
        self.receives += 1
        return self._client.receive_message(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_an_empty_receive_quiets_the_source_for_its_idle_time_and_no_message_is_missed(aws):
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="scratch")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    counting = CountingSqs(sqs)
    now = [100.0]
    handler = BlockingHandler()
    handler.release.set()
    source = QueueSource(
        counting,
        url,
        arn,
        Invoker("worker", handler),
        region="us-east-1",
        idle_seconds=0.5,
        clock=lambda: now[0],
    )

    assert source.poll() == 0 and counting.receives == 1  # empty: quiet until 100.5
    sqs.send_message(QueueUrl=url, MessageBody="m0")
    now[0] = 100.4
    assert source.poll() == 0 and counting.receives == 1  # still quiet: no receive at all
    now[0] = 100.5
    assert source.poll() == 1 and handler.bodies == ["m0"]  # the message waited, it was not lost
    sqs.send_message(QueueUrl=url, MessageBody="m1")
    assert source.poll() == 1  # while messages come, the source receives at every interval
    assert handler.bodies == ["m0", "m1"]


class FailingReceives:
    """An SQS client whose first `failures` receives fail as a dropped connection would."""

    def __init__(self, inner: Any, failures: int) -> None:
        self._inner = inner
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def receive_message(self, **request: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:5055")
        return self._inner.receive_message(**request)


def scratch_queue(name: str = "scratch") -> tuple[Any, str, str]:
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return sqs, url, arn


def test_failed_receives_give_their_slots_back(aws):
    sqs, url, arn = scratch_queue()
    sqs.send_message(QueueUrl=url, MessageBody="m")
    handler = BlockingHandler()
    handler.release.set()
    failing = FailingReceives(sqs, failures=2)
    source = QueueSource(
        failing, url, arn, Invoker("worker", handler, concurrent=True), region="us-east-1", max_concurrency=2
    )
    for _ in range(2):  # as many failures as the mapping has slots
        with pytest.raises(EndpointConnectionError):
            source.poll()
    assert source.poll() == 1  # the queue is still served
    assert handler.started.acquire(timeout=SAFETY)


def test_a_batch_whose_invocation_cannot_start_is_visible_again_at_once(aws):
    sqs, url, arn = scratch_queue()
    sqs.send_message(QueueUrl=url, MessageBody="m")

    def no_threads_left(work):
        raise RuntimeError("can't start new thread")

    source = QueueSource(
        sqs,
        url,
        arn,
        Invoker("worker", BlockingHandler(), concurrent=True),
        region="us-east-1",
        max_concurrency=2,
        spawn=no_threads_left,
    )
    with pytest.raises(RuntimeError):
        source.poll()
    assert source.in_flight == 0
    # Not held for the queue's 300 s visibility timeout: received again at once.
    (message,) = sqs.receive_message(QueueUrl=url).get("Messages", [])
    assert message["Body"] == "m"
