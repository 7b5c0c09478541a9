"""The worker Lambda as chaos invokes it: the production handler
(`jobsched.handlers.worker.handler`, Powertools' `process_partial_response` with the
ConcurrentBatchProcessor: every record of a batch on its own thread) called with the SQS
event Lambda's event source builds, and the container it reads installed by
`wiring.override`.

The one seam is `ChaosWorker`, the production Worker whose `process` hands each record's
attempt to the harness's `watch` on the record's own thread: the harness sees the result,
or the exception the batch processor then swallows into `batchItemFailures` (a simulated
crash, a storage error), with the invocation's context."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from jobsched import wiring
from jobsched.domain.instants import Clock
from jobsched.domain.metrics import Metrics
from jobsched.services.attempt import AttemptResult
from jobsched.services.worker import Received, Worker
from jobsched.store.queues import RunQueues

from .faults import REGION, SimulatedLambdaContext

if TYPE_CHECKING:
    from jobsched.wiring import Container

ACCOUNT = "123456789012"  # moto's default account: the queues' ARNs

# (the bound worker, the record's delivery, its attempt) -> the attempt's result
Watch = Callable[["ChaosWorker", Received, Callable[[], AttemptResult]], AttemptResult]


# The run key of the record the calling thread's worker is processing (each record of a
# batch has a thread of its own): what a look at the tenant's slots was for.
DELIVERING = threading.local()


class ChaosWorker(Worker):
    """The production Worker; each record's attempt runs through `watch` (see the module)."""

    def __init__(self, *args: Any, watch: Watch, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watch = watch
        self.context: SimulatedLambdaContext | None = None

    def bind(self, context: Any) -> None:
        super().bind(context)
        self.context = context

    def process(self, delivery: Received) -> AttemptResult:
        DELIVERING.run_key = delivery.run_key
        return self.watch(self, delivery, lambda: Worker.process(self, delivery))


class ChaosServices:
    """What the worker and events handlers read from `wiring.container()`: `worker` (the one
    the calling thread chose for its invocation, `serving`), `queues` (to name a record's
    queue from its ARN), `clock`, `metrics`, `settings`, `event_publisher`,
    `notification_queue` and `record_delivery`."""

    def __init__(self, queues: RunQueues, clock: Clock, metrics: Metrics) -> None:
        self.queues = queues
        self.clock = clock
        self.metrics = metrics
        self._local = threading.local()
        # What the events handler reads (the harness sets them): the settings' level and
        # source name, the publisher whose client is the chaos bus, the notification queue
        # whose client is the chaos notices queue, and the delivery of both.
        self.settings: Any = None
        self.event_publisher: Any = None
        self.notification_queue: Any = None
        self.record_delivery: Any = None

    @property
    def worker(self) -> Worker:
        worker = getattr(self._local, "worker", None)
        if worker is None:
            raise RuntimeError("no chaos worker chosen for this invocation")
        return cast(Worker, worker)

    @contextlib.contextmanager
    def serving(self, worker: Worker) -> Iterator[None]:
        """`worker` answers `container().worker` on this thread (the invocation's own)."""
        self._local.worker = worker
        try:
            yield
        finally:
            self._local.worker = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[ChaosServices]:
        """Installed as the process's container, and the one before put back after."""
        previous = wiring._container
        wiring.override(cast("Container", self))  # offers what the worker handler reads
        try:
            yield self
        finally:
            wiring.override(previous)


def queue_arn(url: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{url.rsplit('/', 1)[-1]}"


def sqs_event(url: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The event Lambda's SQS event source hands the function for `messages` (as
    ReceiveMessage answered them, with every system attribute) from the queue at `url`."""
    arn = queue_arn(url)
    keep = ("ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp")
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": {k: v for k, v in message.get("Attributes", {}).items() if k in keep},
                "messageAttributes": {},
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": REGION,
            }
            for message in messages
        ]
    }


def acknowledged(event: dict[str, Any], response: Any) -> list[dict[str, Any]]:
    """The records Lambda deletes after the handler answered `response`: every one not
    listed in its `batchItemFailures`."""
    failures = response.get("batchItemFailures", []) if isinstance(response, dict) else []
    failed = {failure.get("itemIdentifier") for failure in failures}
    return [record for record in event["Records"] if record["messageId"] not in failed]
