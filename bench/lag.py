"""Start lag in local mode: due instant → handler start, through the real pipeline
(API → run written → stream → outbox → SQS delay → worker → handler).

Each scenario's lag is split per run into what was spent, between the due instant and the
handler's start:
- `not_visible`: the message was not yet visible (SQS delays are whole seconds: a message
  becomes visible up to 0.75 s after its run is due; or the publish itself came late);
- `moto`: the worker pipeline (event source polls, the worker's own calls) waiting on AWS
  calls, i.e. on moto;
- `ours`: the worker executing our code outside AWS calls;
- `idle`: none of those (poll intervals, thread switches, the GIL)."""

from __future__ import annotations

import http.client
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from . import handlers
from .calls import Call, Recorder
from .stats import Interval, clip, intersect, summary, union

WORKER_STAGES = ("worker", "worker-esm")


def thread_stage(name: str) -> str | None:
    """Threads the code under test starts: which stage their AWS calls belong to."""
    # "record": the worker handler runs each record of a batch on a thread of its own.
    if name.startswith(("record", "effect", "heartbeat")):
        return "worker"
    if name.startswith("worker-"):
        return "worker-esm"  # the SQS event source mapping: receive and delete
    if name == "outbox-stream":
        return "outbox-esm"  # the stream event source mapping: free for Lambda triggers
    if name == "ttl-reaper":
        return "ttl"
    if name.endswith("-tick"):
        return name.removesuffix("-tick")
    return None


@dataclass
class Timeline:
    """What the recorder and the wrapped invokers saw, on the perf_counter clock."""

    invocations: dict[str, list[Interval]] = field(default_factory=dict)
    visible_at: dict[str, float] = field(default_factory=dict)  # run key -> message visible (perf)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_call(self, call: Call, params: dict[str, Any], response: dict[str, Any] | None) -> None:
        if call.operation != "SendMessageBatch" or call.stage != "outbox" or call.error:
            return
        failed = {f["Id"] for f in (response or {}).get("Failed", [])}
        with self.lock:
            for entry in params.get("Entries", []):
                if entry["Id"] in failed:
                    continue
                key = json.loads(entry["MessageBody"])["runKey"]
                self.visible_at.setdefault(key, call.ended + int(entry.get("DelaySeconds", 0)))

    def wrap(self, name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        from .calls import stage

        spans = self.invocations.setdefault(name, [])

        def invoke(event: Any, context: Any) -> Any:
            started = time.perf_counter()
            try:
                with stage(name):
                    return handler(event, context)
            finally:
                with self.lock:
                    spans.append((started, time.perf_counter()))

        return invoke


class Api:
    """A keep-alive HTTP client for local mode's API front."""

    def __init__(self, url: str, key: str) -> None:
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
        self._key = key

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        data = json.dumps(body).encode()
        headers = {"content-type": "application/json", "x-api-key": self._key}
        self._conn.request("POST", path, body=data, headers=headers)
        response = self._conn.getresponse()
        text = response.read()
        return response.status, json.loads(text) if text else None

    def close(self) -> None:
        self._conn.close()


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LagBench:
    def __init__(
        self, poll_seconds: float = 0.05, stream_poll_seconds: float = 0.2, shard_count: int = 4
    ) -> None:
        from jobsched_local.config import LocalConfig
        from jobsched_local.runtime import LocalRuntime

        self.poll_seconds = poll_seconds
        self.timeline = Timeline()
        self.recorder = Recorder(thread_stage=thread_stage, on_call=self.timeline.on_call)
        self.runtime = LocalRuntime(
            LocalConfig(
                port=0,
                moto_port=0,
                shard_count=shard_count,
                handler_modules=["bench.handlers"],
                # Runs are written seconds ahead: the stream poll only has to beat the SQS delay.
                stream_poll_seconds=stream_poll_seconds,
                queue_poll_seconds=poll_seconds,
                # Only the API materialises in these scenarios; the ticks would only add load.
                sweep_seconds=3600,
                reconcile_seconds=3600,
                ttl_seconds=3600,
            )
        )
        self.api: Api | None = None
        # perf_counter = time.time() - offset
        self._offset = time.time() - time.perf_counter()

    def __enter__(self) -> LagBench:
        self.recorder.__enter__()
        self.runtime.start()
        # Every run here is default priority: the high and low pollers would only add empty
        # receives to the single-threaded moto server.
        for loop in self.runtime._loops:
            if loop.name in ("worker-high", "worker-low"):
                loop.stop()
        for name, invoker in self.runtime.invokers.items():
            invoker._handler = self.timeline.wrap(name, invoker._handler)
        self.api = Api(self.runtime.api_url, self.runtime.api_key)
        handlers.take()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.api:
            self.api.close()
        self.runtime.stop()
        self.recorder.__exit__()

    # --- scenarios ---

    def burst(self, count: int, *, lead: float | None = None) -> dict[str, Any]:
        """`count` one-time jobs due in the same second."""
        assert self.api is not None
        per_create = self._create_seconds()
        # Creating jobs slows down once their runs are being made and queued beside it (moto
        # serves one call at a time): leave room enough that every job exists before its due
        # second, or its lag would count its own creation (created_after_due_minus_1s says).
        lead = lead if lead is not None else max(6.0, count * per_create * 4.0 + 6.0)
        due = math.ceil(time.time() + lead)
        started = time.perf_counter()
        keys, late = [], 0
        for i in range(count):
            if time.time() > due - 1:
                late += 1
            status, body = self.api.post(
                "/v1/jobs", {"name": f"burst-{count}-{i}", "type": handlers.JOB_TYPE, "runAt": _iso(due)}
            )
            if status != 201:
                raise RuntimeError(f"create failed: {status} {body}")
            keys.append(f"{body['jobId']}@{_iso(due)}")
        created_in = time.perf_counter() - started
        result = self._collect(keys, until=due + 60 + count * 0.5)
        result.update(
            {
                "scenario": f"burst of {count} due in one second",
                "runs": count,
                "lead_seconds": lead,
                "created_in_seconds": round(created_in, 2),
                "created_after_due_minus_1s": late,
                "runs_per_second": _rate(result),
            }
        )
        return result

    def stream(self, count: int, *, lead: float = 6.0, seed: int = 11) -> dict[str, Any]:
        """A steady stream: one one-time job due each second, each created `lead` s ahead at a
        random point of its second (so the SQS delay rounding is sampled, not one shared offset)."""
        import random

        assert self.api is not None
        rng = random.Random(seed)
        first = math.ceil(time.time() + lead + 1)
        keys = []
        for i in range(count):
            due = first + i
            pause = due - lead + rng.random() - time.time()
            if pause > 0:
                time.sleep(pause)
            status, body = self.api.post(
                "/v1/jobs", {"name": f"stream-{i}", "type": handlers.JOB_TYPE, "runAt": _iso(due)}
            )
            if status != 201:
                raise RuntimeError(f"create failed: {status} {body}")
            keys.append(f"{body['jobId']}@{_iso(due)}")
        result = self._collect(keys, until=first + count + 60)
        result.update(
            {
                "scenario": f"steady stream: 1 run due per second for {count} s",
                "runs": count,
                "runs_per_second": _rate(result),
            }
        )
        return result

    # --- measurement ---

    def _create_seconds(self) -> float:
        """Time one create takes right now (the API invoker is serial: creates don't overlap)."""
        assert self.api is not None
        started = time.perf_counter()
        self.api.post(
            "/v1/jobs", {"name": "probe", "type": handlers.JOB_TYPE, "runAt": _iso(time.time() + 3600)}
        )
        return time.perf_counter() - started

    def _collect(self, keys: list[str], *, until: float) -> dict[str, Any]:
        wanted = set(keys)
        seen: dict[str, tuple[float, float]] = {}
        while time.time() < until and len(seen) < len(wanted):
            time.sleep(0.2)
            for key, value in handlers.take().items():
                if key in wanted:
                    seen[key] = value
        self._settle()
        for key, value in handlers.take().items():
            if key in wanted:
                seen[key] = value
        return self._analyse(seen, missing=len(wanted) - len(seen))

    def _settle(self, quiet: float = 1.0, limit: float = 60.0) -> None:
        """Wait until the worker has finished what it started (completions write after the handler)."""
        end = time.time() + limit
        last = -1
        while time.time() < end:
            spans = self.timeline.invocations.get("worker", [])
            count = len(spans)
            if count == last:
                return
            last = count
            time.sleep(quiet)

    def _analyse(self, seen: dict[str, tuple[float, float]], *, missing: int) -> dict[str, Any]:
        offset = self._offset
        calls = list(self.recorder.calls)
        worker_calls = union((c.started, c.ended) for c in calls if c.stage in WORKER_STAGES)
        worker_inv = union(self.timeline.invocations.get("worker", []))
        busy = union(worker_calls + worker_inv)
        calls_in_inv = intersect(worker_calls, worker_inv)
        rows = []
        for key, (start_epoch, due_epoch) in seen.items():
            start, due = start_epoch - offset, due_epoch - offset
            lag = start - due
            visible = self.timeline.visible_at.get(key, due)
            gate = min(max(due, visible), start)
            moto = clip(worker_calls, gate, start)
            ours = clip(worker_inv, gate, start) - clip(calls_in_inv, gate, start)
            idle = max(0.0, (start - gate) - clip(busy, gate, start))
            rows.append(
                {
                    "lag": lag,
                    "not_visible": gate - due if lag > 0 else 0.0,
                    "moto": moto,
                    "ours": max(0.0, ours),
                    "idle": idle,
                    "start": start,
                    "due": due,
                }
            )
        lags = [r["lag"] for r in rows]
        split = {part: summary([r[part] for r in rows]) for part in ("not_visible", "moto", "ours", "idle")}
        total = sum(max(0.0, lag) for lag in lags) or 1.0
        shares = {part: sum(r[part] for r in rows) / total for part in split}
        first_due = min((r["due"] for r in rows), default=0.0)
        last_start = max((r["start"] for r in rows), default=0.0)
        return {
            "lag": summary(lags),
            "lags": sorted(round(x, 4) for x in lags),
            "split": split,
            "share_of_lag": shares,
            "missing": missing,
            "window_seconds": last_start - first_due,
            "load_average": os.getloadavg(),
        }


def _rate(result: dict[str, Any]) -> float:
    window = result.get("window_seconds") or 0.0
    n = result["lag"]["n"]
    return round(n / window, 1) if window > 0 else math.nan


def run(
    bursts: tuple[int, ...] = (50, 200),
    stream_runs: int = 60,
    poll_seconds: float = 0.05,
    stream_poll_seconds: float = 0.2,
    lead: float | None = None,
) -> dict[str, Any]:
    import io
    from contextlib import redirect_stdout

    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    results: dict[str, Any] = {
        "poll_seconds": poll_seconds,
        "stream_poll_seconds": stream_poll_seconds,
        "scenarios": {},
    }
    # The handlers print EMF metrics to stdout; in local mode nobody reads them.
    with redirect_stdout(io.StringIO()), LagBench(poll_seconds, stream_poll_seconds) as bench:
        for count in bursts:
            results["scenarios"][f"burst_{count}"] = bench.burst(count, lead=lead)
        if stream_runs:
            results["scenarios"]["stream"] = bench.stream(stream_runs)
        results["aws_calls"] = _calls_by_stage(bench.recorder.calls)
    return results


def _calls_by_stage(calls: list[Call]) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for call in calls:
        entry = out.setdefault(call.stage, {"calls": 0, "seconds": 0.0})
        entry["calls"] += 1
        entry["seconds"] += call.wall
    for entry in out.values():
        entry["ms_per_call"] = round(1000 * entry["seconds"] / entry["calls"], 2)
        entry["seconds"] = round(entry["seconds"], 2)
    return out
