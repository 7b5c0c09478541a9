"""The whole pipeline in-process on moto (`mock_aws`) under a simulated clock.

The handlers are the real Lambda handlers; this file plays the AWS glue around them the
way local mode does (it reuses local mode's stream and SQS event source classes), but
one step at a time: ticks, stream polls and queue polls happen when `step()` says so. moto's
SQS clock is pointed at the simulated one, so DelaySeconds and visibility timeouts run
in simulated seconds and a ten-minute schedule takes seconds to play."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, redirect_stdout
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from jobsched.domain.tracing import TRACE_ENV
from jobsched.settings import Settings

from .calls import Call, Recorder, current_stage, moto_images, stage
from .handlers import JOB_TYPE
from .lag import thread_stage
from .receiver import ALLOW as RECEIVER_ALLOW

T0 = datetime(2026, 11, 2, 8, 0, 0, tzinfo=UTC)
REGION = "us-east-1"

# Mirror of jobsched/cdk/config.py and jobsched/cdk/event_sources.py defaults (checked by the
# smoke test; importing jobsched.cdk.config would start the jsii runtime). The runtime settings'
# defaults are the stack's: read from the model itself.
WORKER_BATCH_SIZE = {"high": 5, "default": 10, "low": 10}
WORKER_CONCURRENCY = {"high": 50, "default": 100, "low": 25}
OUTBOX_BATCH_SIZE = 100
OUTBOX_PARALLELIZATION = 4
_RUNTIME = Settings()
HORIZON_SECONDS = _RUNTIME.horizon_seconds
SHARD_COUNT = _RUNTIME.shard_count
SWEEP_AHEAD_SECONDS = _RUNTIME.sweep_ahead_seconds
SHARDS_PER_SWEEP = 1

# Stage -> the Lambda function that runs it.
FUNCTION_OF = {
    "api": "api",
    "sweep": "sweeper",
    "outbox": "outbox",
    "worker": "worker",
    "reconcile": "reconciler",
}


def _thread_stage(name: str) -> str | None:
    return thread_stage(name)


class SimClock:
    """Seconds since the epoch as a float; `now()` is whole seconds like SystemClock."""

    def __init__(self, start: datetime = T0) -> None:
        self.t = start.timestamp()

    def now(self) -> datetime:
        return datetime.fromtimestamp(int(self.t), tz=UTC)

    def precise(self) -> datetime:
        return datetime.fromtimestamp(self.t, tz=UTC)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """In real time, as ManualClock's: the event is another thread's."""
        return event.wait(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        self.t += seconds


class _Sink(io.TextIOBase):
    """Counts what would have gone to CloudWatch Logs, per stage."""

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()

    def write(self, text: str) -> int:
        self.bytes[current_stage(_thread_stage)] += len(text.encode())
        return len(text)

    def writable(self) -> bool:
        return True


@dataclass
class Invocation:
    stage: str
    wall: float
    calls: list[Call] = field(default_factory=list)
    cpu: float = 0.0  # process CPU seconds (every thread: the effect runs in a pool thread)

    @property
    def aws_wall(self) -> float:
        return sum(c.wall for c in self.calls)


class Harness:
    """`with Harness() as h:` — everything in-process; the one network peer an http target may
    reach is the bench receiver on loopback (bench.receiver), allowed as an operator's
    HTTP_ALLOW_DESTINATIONS would allow it."""

    def __init__(self, *, shards: int = SHARD_COUNT, images: bool = True, start: datetime = T0) -> None:
        self.shards = shards
        self.clock = SimClock(start)
        self._want_images = images
        self.invocations: list[Invocation] = []
        self.sink = _Sink()
        self._stack = ExitStack()
        self.recorder: Recorder
        self._stream_seen = -1
        self._traces = 0

    # --- setup ---

    def __enter__(self) -> Harness:
        # Restored on exit: the process (a test session's, say) gets its own settings back.
        saved_environment = dict(os.environ)

        def restore_environment() -> None:
            os.environ.clear()
            os.environ.update(saved_environment)

        self._stack.callback(restore_environment)
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_SESSION_TOKEN": "bench",
                "AWS_DEFAULT_REGION": REGION,
                "AWS_REGION": REGION,
                "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
                "POWERTOOLS_METRICS_NAMESPACE": "jobsched",
                "POWERTOOLS_TRACE_DISABLED": "1",
            }
        )
        os.environ.pop("JOBSCHED_AWS_ENDPOINT_URL", None)
        os.environ.pop("POWERTOOLS_METRICS_DISABLED", None)
        import boto3
        from jobsched import aws, settings, wiring
        from jobsched.settings import Settings
        from jobsched.store.schema import ALL_TABLES, RUNS
        from jobsched_local.glue import QueueSource, StreamSource
        from jobsched_local.moto_backend import create_queues
        from moto import mock_aws

        stack = self._stack
        stack.enter_context(mock_aws())
        self._patch_sqs_clock()
        settings.settings.cache_clear()
        aws.client.cache_clear()
        stack.callback(aws.client.cache_clear)
        stack.callback(settings.settings.cache_clear)

        ddb = boto3.client("dynamodb", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        stream_arn = ""
        for spec in ALL_TABLES:
            description = ddb.create_table(**spec.create_table_request())["TableDescription"]
            if spec is RUNS:
                stream_arn = description["LatestStreamArn"]
        urls, dlqs, arns = create_queues(sqs)
        self.settings = Settings(
            shard_count=self.shards,
            queue_urls=urls,
            dlq_urls=dlqs,
            handler_modules=("bench.handlers",),
            horizon_seconds=HORIZON_SECONDS,
            sweep_ahead_seconds=SWEEP_AHEAD_SECONDS,
            # The bench receiver on loopback, as an operator's HTTP_ALLOW_DESTINATIONS would.
            http_allow_destinations=(RECEIVER_ALLOW,),
        )
        self.container = wiring.Container(self.settings, self.clock)
        wiring.override(self.container)
        stack.callback(wiring.override, None)

        from jobsched.handlers import api, outbox, reconciler, sweeper, worker

        self._handlers = {
            "api": api.handler,
            "sweep": sweeper.handler,
            "outbox": outbox.handler,
            "worker": worker.handler,
            "reconcile": reconciler.handler,
        }
        self.recorder = Recorder(
            images=self._images() if self._want_images else None, thread_stage=_thread_stage
        )
        stack.enter_context(self.recorder)
        self._time_http_targets()
        self.stream = StreamSource(
            boto3.client("dynamodbstreams", region_name=REGION),
            stream_arn,
            self._invoker("outbox"),  # type: ignore[arg-type]
            region=REGION,
            matches=outbox.matches_filter,
            batch_size=OUTBOX_BATCH_SIZE,
        )
        self.queues = {
            key: QueueSource(
                sqs,
                urls[key],
                arns[key],
                self._invoker("worker"),  # type: ignore[arg-type]
                region=REGION,
                batch_size=WORKER_BATCH_SIZE[key],
            )
            for key in urls
        }
        self._capture_logs()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _patch_sqs_clock(self) -> None:
        import moto.sqs.models as sqs_models

        clock = self.clock
        saved = (sqs_models.unix_time, sqs_models.unix_time_millis)
        sqs_models.unix_time = lambda dt=None: clock.t
        sqs_models.unix_time_millis = lambda dt=None: clock.t * 1000

        def restore() -> None:
            sqs_models.unix_time, sqs_models.unix_time_millis = saved

        self._stack.callback(restore)

    def _time_http_targets(self) -> None:
        """Each request of an HTTP target (each hop) recorded as a call `http:<method>`: its
        time is the receiver's, not our code's."""
        from jobsched.targets.http import HttpTargetClient

        original = HttpTargetClient._exchange
        recorder = self.recorder

        def exchange(client: HttpTargetClient, dest: Any, method: str, *args: Any, **kwargs: Any) -> Any:
            with recorder.request("http", method):
                return original(client, dest, method, *args, **kwargs)

        HttpTargetClient._exchange = exchange  # type: ignore[method-assign,assignment]
        self._stack.callback(setattr, HttpTargetClient, "_exchange", original)

    @staticmethod
    def _images() -> Callable[[str, dict[str, Any]], dict[str, Any] | None]:
        return moto_images(REGION)

    def _capture_logs(self) -> None:
        """INFO logs and EMF metrics, as in the stack, counted instead of printed."""
        from jobsched.observability import logger

        self._stack.enter_context(redirect_stdout(self.sink))
        handlers = [
            h for h in logging.getLogger(logger.name).handlers if isinstance(h, logging.StreamHandler)
        ]
        for handler in handlers:
            previous = handler.setStream(self.sink)
            self._stack.callback(handler.setStream, previous)
        level = logging.getLogger(logger.name).level
        logger.setLevel("INFO")
        self._stack.callback(logger.setLevel, level)

    # --- invoking ---

    def _invoker(self, name: str) -> Callable[[dict[str, Any]], Any]:
        def invoke(event: dict[str, Any]) -> Any:
            return self.invoke(name, event)

        return invoke

    def invoke(self, name: str, event: dict[str, Any]) -> Any:
        from jobsched_local.lambda_context import InvocationContext

        # Setup work is invoked for real but left out of the figures.
        name_for_calls = "setup" if current_stage() == "setup" else name
        first = len(self.recorder.calls)
        started, cpu0 = time.perf_counter(), time.process_time()
        # As Lambda with tracing active: every invocation has a trace header of its own, and
        # the stores stamp its id on what the invocation writes.
        self._traces += 1
        os.environ[TRACE_ENV] = f"Root=1-{int(self.clock.t):08x}-{self._traces:024x};Sampled=0"
        try:
            with stage(name_for_calls):
                return self._handlers[name](event, InvocationContext(function_name=f"jobsched-{name}"))
        finally:
            os.environ.pop(TRACE_ENV, None)
            if name_for_calls == name:
                wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
                calls = [c for c in self.recorder.calls[first:] if c.stage == name]
                self.invocations.append(Invocation(name, wall, calls, cpu))

    def api(self, method: str, path: str, body: Any = None, *, tenant: str = "bench") -> dict[str, Any]:
        from jobsched_local.apigw import rest_event

        event = rest_event(
            method,
            path,
            body=json.dumps(body) if body is not None else None,
            headers={"content-type": "application/json"},
            tenant=tenant,
        )
        result = self.invoke("api", event)
        if int(result["statusCode"]) >= 300:
            raise RuntimeError(f"{method} {path}: {result['statusCode']} {result.get('body')}")
        return dict(json.loads(result["body"]))

    # --- the glue, one step at a time ---

    def sweep(self) -> None:
        groups = [
            list(range(s, min(s + SHARDS_PER_SWEEP, self.shards)))
            for s in range(0, self.shards, SHARDS_PER_SWEEP)
        ]
        for group in groups:
            self.invoke("sweep", {"shards": group})

    def reconcile(self, *, second: bool = False) -> None:
        """One pass per shard: a rule's tick, or (`second`) the second tick half a minute
        later, delivered as the second-tick queue's mapping delivers it (its SQS requests,
        three a shard, are not counted here)."""
        for shard in range(self.shards):
            if second:
                record = {
                    "messageId": f"second-{shard}",
                    "receiptHandle": f"second-{shard}",
                    "body": json.dumps({"shard": shard}),
                    "attributes": {"ApproximateReceiveCount": "1"},
                    "messageAttributes": {},
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:jobsched-second-ticks",
                }
                self.invoke("reconcile", {"Records": [record]})
            else:
                self.invoke("reconcile", {"shard": shard})

    def _sqs_queues(self) -> list[Any]:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.sqs.models import sqs_backends

        backend = sqs_backends[DEFAULT_ACCOUNT_ID][REGION]
        names = {url.rsplit("/", 1)[-1] for url in self.settings.queue_urls.values()}
        return [q for name, q in backend.queues.items() if name in names]

    def next_visible(self) -> float | None:
        """When the next message becomes receivable (peeked in moto's backend: no request)."""
        times = [
            max(m.delayed_until, m.visible_at + 1) / 1000 for q in self._sqs_queues() for m in q._messages
        ]
        future = [t for t in times if t > self.clock.t]
        return min(future) if future else None

    def _ready(self, source: Any) -> bool:
        name = source._url.rsplit("/", 1)[-1]
        return any(q.name == name and q.messages for q in self._sqs_queues())

    def pump(self) -> int:
        """Deliver what is ready: stream → outbox until quiet, then each queue → worker until empty.

        Polls only when there is something to read: the empty polls real pollers make are a
        fixed cost, priced separately."""
        delivered = 0
        while True:
            written = self.recorder.ddb_writes
            if written != self._stream_seen:
                self._stream_seen = written
                with stage("stream-esm"):
                    while self.stream.poll():
                        delivered += 1
            busy = False
            for source in self.queues.values():
                while self._ready(source):
                    busy = True
                    with stage("worker-esm"):
                        delivered += source.poll()
            if not busy and self.recorder.ddb_writes == self._stream_seen:
                return delivered

    def run_until(self, end: float, *, sweep: bool = True, reconcile: bool = True) -> None:
        """Play simulated time up to `end` (epoch seconds): the minute ticks of the sweeper and
        the reconciler and the reconciler's second ticks half a minute after (each when
        asked), and every moment a message becomes visible."""
        ticks = sweep or reconcile
        self.pump()  # what the last calls wrote reaches the stream at once, as in AWS
        while True:
            candidates = [end]
            if ticks:
                candidates.append((int(self.clock.t) // 30 + 1) * 30)
            visible = self.next_visible()
            if visible is not None:
                candidates.append(visible)
            target = min(candidates)
            if target > end:
                return
            self.clock.t = target
            if ticks and target % 60 == 0:
                if sweep:
                    self.sweep()
                if reconcile:
                    self.reconcile()
            elif ticks and target % 30 == 0 and reconcile:
                self.reconcile(second=True)
            self.pump()
            if target >= end:
                return

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Calls made here are setup: recorded under their own stage and left out of the figures."""
        with stage("setup"):
            yield

    # --- facts ---

    def stage_bytes(self) -> dict[str, int]:
        return dict(self.sink.bytes)

    def invocations_by_stage(self) -> dict[str, list[Invocation]]:
        out: dict[str, list[Invocation]] = defaultdict(list)
        for inv in self.invocations:
            out[inv.stage].append(inv)
        return out

    def iso(self, offset: float) -> str:
        return (self.clock.now() + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def add_recurring_jobs(
        self,
        count: int,
        per_second: int,
        *,
        prefix: str,
        tenants: int = 1,
        every: int = 60,
        fields: dict[str, Any] | None = None,
    ) -> None:
        """`count` jobs every `every` seconds (60 unless told), `per_second` of them due in
        each busy second, starting beyond the horizon so the sweeper (not the API)
        materialises every run; `fields` are added to each job (a target, a payload)."""
        with self.quiet():
            for i in range(count):
                self.api(
                    "POST",
                    "/v1/jobs",
                    {
                        "name": f"{prefix}{i}",
                        "type": JOB_TYPE,
                        "every": every,
                        "startAt": self.iso(HORIZON_SECONDS + 10 + i // per_second),
                        **(fields or {}),
                    },
                    tenant=f"tenant-{i % tenants}",
                )

    def drain(self) -> float:
        """Run on without sweeping past the furthest run a sweep made, so every run made is
        run; returns the seconds simulated."""
        seconds = float(self.settings.sweep_ahead_seconds + 60)
        self.run_until(self.clock.t + seconds, sweep=False)
        return seconds
