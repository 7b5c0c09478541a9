"""Where the CPU goes: a deterministic profile of each function's path on the harness.

The real handlers run in-process on moto under the simulated clock (bench/harness.py), twice:
once plain, for CPU and wall time per run, and once under cProfile with a per-thread CPU clock
(`time.thread_time`), for the split. Every thread the code under test starts (a batch's record
threads, the effect pool, the heartbeat) gets profilers of its own, and each thread switches
at three boundaries, so each function's time lands in the right place:

- a handler invocation (api, sweep, outbox, worker) inside local mode's event source pollers:
  the poller's own time is "local glue", the handler's is the function's;
- an AWS call (`BaseClient._make_api_call`): time in there is botocore's, whatever file runs
  (its json, uuid and `email` header work included, in a sub-bucket of its own);
- moto serving the call in-process (its botocore `before-send` stubber): moto's, not ours and
  not the Lambda's. It is metered, not profiled (cProfile would slow it several times over).

Both passes meter each thread's CPU at these boundaries, so the time in AWS calls and in moto
is exact. Within the rest and within the AWS calls, a function's self time (tottime) goes to
the bucket of the file it is defined in; C builtins and generated code (`<string>`: dataclass
`__init__`s) to their caller's, except pydantic-core's validators and serialisers, which are
pydantic's. Profiling slows call-heavy code more than the rest, so each part's milliseconds
come from the plain pass and only its split from the profiled one. A frame that spans an AWS
call loses the self time it spends after the call (cProfile is switched off around it); the
functions it calls do not. Waiting is wall minus CPU of the plain pass: lock hand-offs and, on
a loaded machine, time spent runnable but not running.
"""

from __future__ import annotations

import cProfile
import os
import sys
import sysconfig
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import handlers
from .harness import HORIZON_SECONDS, Harness
from .lag import thread_stage

FUNCTIONS = ("api", "sweep", "outbox", "worker", "glue")
GLUE = "glue"
TOP = 10

# Buckets, grouped as the report shows them.
OURS = "ours"
MOTO = "moto"
BENCH = "bench harness"
STDLIB = "stdlib/other"
GROUPS = ("ours", "botocore/boto3", "moto", "pydantic", "powertools", "stdlib/other", "bench harness")

_BOTOCORE_PARTS = {
    "serialize": "serialise",
    "validate": "serialise",
    "auth": "sign",
    "signers": "sign",
    "credentials": "sign",
    "parsers": "parse",
    "response": "parse",
    "retryhandler": "retries",
    "retries": "retries",
    "endpoint_provider": "endpoint resolution",
    "regions": "endpoint resolution",
    "hooks": "events and handlers",
    "handlers": "events and handlers",
    "model": "model (shapes)",
    "endpoint": "request and send",
    "awsrequest": "request and send",
    "httpsession": "request and send",
    "httpchecksum": "request and send",
    "client": "client",
    "context": "client",
    "args": "client",
    "config": "client",
    "useragent": "client",
}
_POWERTOOLS_PARTS = {"logging": "logger", "metrics": "metrics", "tracing": "tracer"}

_STDLIB = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)
_ROOT = str(Path(__file__).resolve().parents[1]) + os.sep


def group_of(bucket: str) -> str:
    if bucket.startswith(("botocore", "boto3")):
        return "botocore/boto3"
    if bucket.startswith("powertools"):
        return "powertools"
    return bucket if bucket in GROUPS else STDLIB


def bucket_of_file(filename: str, *, in_aws_call: bool = False) -> str:
    """The bucket of code defined in `filename` (a code object's co_filename)."""
    path = filename.replace("\\", "/")
    if "/functions/jobsched" in path:
        return OURS
    if "/bench/" in path and "site-packages" not in path:
        return BENCH
    if "site-packages/" in path:
        rest = path.split("site-packages/", 1)[1]
        top, _, tail = rest.partition("/")
        if top == "botocore":
            module = tail.split("/", 1)[0].removesuffix(".py")
            return f"botocore: {_BOTOCORE_PARTS.get(module, 'other')}"
        if top == "boto3":
            return "boto3"
        if top in ("moto", "responses", "werkzeug", "jinja2", "xmltodict", "py_partiql_parser"):
            return MOTO
        if top in ("pydantic", "pydantic_core", "pydantic_settings", "annotated_types"):
            return "pydantic"
        if top == "aws_lambda_powertools":
            parts = tail.split("/")
            name = parts[1] if parts[0] == "utilities" and len(parts) > 2 else parts[0].removesuffix(".py")
            return f"powertools: {_POWERTOOLS_PARTS.get(name, name)}"
        if top == "aws_xray_sdk":
            return "powertools: tracer"
    if in_aws_call:
        return "botocore: stdlib and libraries it calls"
    return STDLIB


# --- profilers: one per (thread, function, part), switched at the boundaries ---


class Profiles:
    """Per-thread profilers keyed by (function, part), part "main" or "aws"; moto's part is
    metered, not profiled (cProfile would slow its call-heavy code several times over).

    Every switch also meters the thread's CPU (`time.thread_time`) per (function, part), so the
    time in AWS calls and in moto is known exactly, with or without profilers (`profile=False`)."""

    def __init__(self, *, profile: bool = True) -> None:
        self.profile = profile
        self.on = False
        self.collected: list[tuple[str, str, cProfile.Profile]] = []
        self.cpu: dict[tuple[str, str], float] = defaultdict(float)  # exclusive thread CPU seconds
        self.function = ""  # the invocation under way on the harness's thread
        self._local = threading.local()
        self._lock = threading.Lock()

    def _stack(self) -> list[list[Any]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
            self._local.mine = {}
        return stack

    def current(self) -> str:
        """The function the calling thread works for."""
        stack = self._stack()
        if stack:
            return str(stack[-1][0])
        return thread_function(threading.current_thread().name, self.function)

    def _charge(self, frame: list[Any], now: float) -> None:
        with self._lock:
            self.cpu[(frame[0], frame[1])] += now - frame[3]

    def push(self, function: str, part: str) -> None:
        now = time.thread_time()
        stack = self._stack()
        if stack:
            self._charge(stack[-1], now)
            if stack[-1][2] is not None:
                stack[-1][2].disable()
        profiler = None
        if self.profile and part != "moto":
            mine: dict[tuple[str, str], cProfile.Profile] = self._local.mine
            profiler = mine.get((function, part))
            if profiler is None:
                profiler = mine[(function, part)] = cProfile.Profile(time.thread_time)
                with self._lock:
                    self.collected.append((function, part, profiler))
        stack.append([function, part, profiler, time.thread_time()])
        if profiler is not None:
            profiler.enable()

    def pop(self) -> None:
        stack = self._stack()
        frame = stack.pop()
        if frame[2] is not None:
            frame[2].disable()
        self._charge(frame, time.thread_time())
        if stack:
            stack[-1][3] = time.thread_time()
            if stack[-1][2] is not None:
                stack[-1][2].enable()

    @contextmanager
    def within(self, function: str, part: str) -> Iterator[None]:
        if not self.on:
            yield
            return
        self.push(function, part)
        try:
            yield
        finally:
            self.pop()

    def _thread_started(self, frame: Any, event: str, arg: Any) -> None:
        """threading.setprofile hook: the first event of each new thread starts its profiler."""
        sys.setprofile(None)
        if self.on:
            self.push(thread_function(threading.current_thread().name, self.function), "main")

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Switch at AWS calls and at moto's stubber (and, profiling, profile new threads)."""
        from botocore.client import BaseClient
        from moto.core.botocore_stubber import BotocoreStubber

        profiles = self
        api_call = BaseClient._make_api_call  # type: ignore[attr-defined]
        stub = BotocoreStubber.__call__

        def _make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            with profiles.within(profiles.current(), "aws"):
                return api_call(client, operation, params)

        def _stubbed(stubber: Any, *args: Any, **kwargs: Any) -> Any:
            with profiles.within(profiles.current(), "moto"):
                return stub(stubber, *args, **kwargs)

        BaseClient._make_api_call = _make_api_call  # type: ignore[attr-defined]
        BotocoreStubber.__call__ = _stubbed  # type: ignore[method-assign,assignment]
        if self.profile:
            threading.setprofile(self._thread_started)
        try:
            yield
        finally:
            if self.profile:
                threading.setprofile(None)
            BaseClient._make_api_call = api_call  # type: ignore[attr-defined]
            BotocoreStubber.__call__ = stub  # type: ignore[method-assign]


def thread_function(name: str, current: str) -> str:
    """The function a thread started by the code under test works for."""
    stage = thread_stage(name)
    return stage if stage in FUNCTIONS else current or GLUE


# --- the harness, with the pollers' own time measured apart ---


class _Harness(Harness):
    def __init__(self, profiles: Profiles, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.profiles = profiles
        self.glue_wall = 0.0
        self.glue_cpu = 0.0

    def __enter__(self) -> _Harness:
        super().__enter__()
        self.stream.poll = self._glue(self.stream.poll)  # type: ignore[method-assign]
        for source in self.queues.values():
            source.poll = self._glue(source.poll)  # type: ignore[method-assign]
        return self

    def invoke(self, name: str, event: dict[str, Any]) -> Any:
        outer = self.profiles.function
        self.profiles.function = name
        try:
            with self.profiles.within(name, "main"):
                return super().invoke(name, event)
        finally:
            self.profiles.function = outer

    def _glue(self, poll: Callable[[], int]) -> Callable[[], int]:
        """A poller's round, timed without the invocations it makes."""

        def timed() -> int:
            first = len(self.invocations)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            try:
                with self.profiles.within(GLUE, "main"):
                    return poll()
            finally:
                nested = self.invocations[first:]
                self.glue_wall += time.perf_counter() - wall0 - sum(i.wall for i in nested)
                self.glue_cpu += time.process_time() - cpu0 - sum(i.cpu for i in nested)

        return timed


def _play(profiles: Profiles, jobs: int, minutes: int) -> dict[str, Any]:
    """Warm every path with one job whose first run is near, then measure `jobs` jobs
    created through the API and every run executed over `minutes` of schedule and the drain."""
    handlers.take()
    with profiles.installed(), _Harness(profiles, images=False) as h:
        h.api(
            "POST", "/v1/jobs", {"name": "warm", "type": handlers.JOB_TYPE, "every": 60, "startAt": h.iso(5)}
        )
        h.run_until(h.clock.t + 70, reconcile=False)
        handlers.take()
        h.invocations.clear()
        h.glue_wall = h.glue_cpu = 0.0
        profiles.on = True
        try:
            for i in range(jobs):
                start = h.iso(HORIZON_SECONDS + 10 + i // 10)  # the sweeper makes their runs
                h.api(
                    "POST",
                    "/v1/jobs",
                    {"name": f"p{i}", "type": handlers.JOB_TYPE, "every": 60, "startAt": start},
                )
            h.run_until(h.clock.t + minutes * 60 + 1, reconcile=False)
            h.run_until(h.clock.t + h.settings.sweep_ahead_seconds + 60, sweep=False, reconcile=False)
        finally:
            profiles.on = False
        out: dict[str, Any] = {"runs": len(handlers.take()), "api_requests": jobs, "functions": {}}
        by_stage = h.invocations_by_stage()
        for function in FUNCTIONS:
            if function == GLUE:
                wall, cpu, count = h.glue_wall, h.glue_cpu, 0
            else:
                invocations = by_stage.get(function, [])
                wall = sum(i.wall for i in invocations)
                cpu = sum(i.cpu for i in invocations)
                count = len(invocations)
            aws, moto = profiles.cpu[(function, "aws")], profiles.cpu[(function, "moto")]
            out["functions"][function] = {
                "wall": wall,
                "cpu": cpu,
                "aws": aws,
                "moto": moto,
                "main": max(0.0, cpu - aws - moto),
                "invocations": count,
            }
        return out


# --- reading the profiles ---

Key = tuple[str, int, str] | str  # (file, line, name) of Python code; a builtin's description


def _key(code: Any) -> Key:
    if isinstance(code, str):
        return code
    return (code.co_filename, code.co_firstlineno, code.co_name)


def _charged_to_caller(key: Key) -> bool:
    if isinstance(key, str):
        return "pydantic_core" not in key
    return key[0].startswith("<")


def _bucket(key: Key, part: str) -> str:
    if part == "moto":
        return MOTO
    if isinstance(key, str):
        if "pydantic_core" in key:
            return "pydantic"
        return "botocore: stdlib and libraries it calls" if part == "aws" else STDLIB
    return bucket_of_file(key[0], in_aws_call=part == "aws")


def label(key: Key) -> str:
    if isinstance(key, str):
        return key
    filename, line, name = key
    path = filename.replace("\\", "/")
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif path.startswith(_ROOT):
        path = path[len(_ROOT) :]
    else:
        for prefix in _STDLIB:
            if path.startswith(prefix):
                path = path[len(prefix) :]
                break
    return f"{path}:{line}:{name}"


def _read(profilers: list[tuple[str, str, cProfile.Profile]]) -> dict[str, Any]:
    """Per function: profiled seconds per "part|bucket", and per (code, part, bucket) self
    seconds and calls."""
    buckets: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    functions: dict[str, dict[tuple[Key, str, str], list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0.0, 0.0])
    )
    for function, part, profiler in profilers:
        entries = profiler.getstats()
        charged: dict[Key, float] = defaultdict(float)  # builtin time already charged to callers
        for entry in entries:
            key = _key(entry.code)
            if _charged_to_caller(key):
                continue
            bucket = _bucket(key, part)
            buckets[function][f"{part}|{bucket}"] += entry.inlinetime
            row = functions[function][(key, part, bucket)]
            row[0] += entry.inlinetime
            row[1] += entry.callcount
            for sub in entry.calls or ():
                sub_key = _key(sub.code)
                if _charged_to_caller(sub_key):
                    buckets[function][f"{part}|{bucket}"] += sub.inlinetime
                    charged[sub_key] += sub.inlinetime
                    sub_row = functions[function][(sub_key, part, bucket)]
                    sub_row[0] += sub.inlinetime
                    sub_row[1] += sub.callcount
        for entry in entries:  # what no caller in this profile accounts for
            key = _key(entry.code)
            if _charged_to_caller(key):
                rest = entry.inlinetime - charged[key]
                if rest > 1e-9:
                    bucket = _bucket(key, part)
                    buckets[function][f"{part}|{bucket}"] += rest
                    functions[function][(key, part, bucket)][0] += rest
    return {"buckets": buckets, "functions": functions}


def _split(seconds: dict[str, float], parts: dict[str, float]) -> dict[str, float]:
    """Each part's measured seconds spread over its buckets by their profiled shares."""
    out: dict[str, float] = defaultdict(float)
    for part, measured in parts.items():
        profiled = {b: v for b, v in seconds.items() if b.startswith(part + "|")}
        total = sum(profiled.values())
        if part == "moto":
            out[MOTO] += measured
            continue
        if total <= 0:
            out[STDLIB if part == "main" else "botocore: other"] += measured
            continue
        for key, value in profiled.items():
            out[key.split("|", 1)[1]] += measured * value / total
    return out


def run(jobs: int = 12, minutes: int = 1, top: int = TOP) -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    plain = _play(Profiles(profile=False), jobs, minutes)
    profiles = Profiles()
    profiled = _play(profiles, jobs, minutes)
    read = _read(profiles.collected)
    result: dict[str, Any] = {
        "jobs": jobs,
        "minutes": minutes,
        "runs": plain["runs"],
        "runs_profiled": profiled["runs"],
        "api_requests": jobs,
        "functions": {},
    }
    for function in FUNCTIONS:
        per = plain["api_requests"] if function == "api" else max(1, plain["runs"])
        per_profiled = profiled["api_requests"] if function == "api" else max(1, profiled["runs"])
        measured = plain["functions"][function]
        seconds = read["buckets"].get(function, {})
        split = _split(seconds, {"main": measured["main"], "aws": measured["aws"], "moto": measured["moto"]})
        total = sum(split.values()) or 1.0
        cpu_ms = 1000 * total / per
        wall_ms = 1000 * measured["wall"] / per
        # What the Lambda function itself would spend: moto and the harness left out.
        lambda_ms = 1000 * sum(v for b, v in split.items() if b not in (MOTO, BENCH)) / per
        buckets = {
            name: {
                "share": value / total,
                "ms": 1000 * value / per,
                "share_of_lambda": 0.0
                if name in (MOTO, BENCH) or not lambda_ms
                else 1000 * value / per / lambda_ms,
            }
            for name, value in sorted(split.items(), key=lambda kv: -kv[1])
        }
        groups: dict[str, dict[str, float]] = {
            g: {"share": 0.0, "ms": 0.0, "share_of_lambda": 0.0} for g in GROUPS
        }
        for name, figures in buckets.items():
            group = groups[group_of(name)]
            for field in ("share", "ms", "share_of_lambda"):
                group[field] += figures[field]
        # A function's rows: its profiled self time scaled as its part was.
        scale = {
            part: (measured[part] / sum(v for b, v in seconds.items() if b.startswith(part + "|")))
            if any(b.startswith(part + "|") for b in seconds)
            else 0.0
            for part in ("main", "aws")
        }
        rows = []
        for (key, part, bucket), (secs, calls) in read["functions"].get(function, {}).items():
            if bucket == BENCH:
                continue
            ms = 1000 * secs * scale[part] / per
            rows.append(
                {
                    "in_aws_call": part == "aws",
                    "function": label(key),
                    "bucket": bucket,
                    "share": ms / cpu_ms if cpu_ms else 0.0,
                    "share_of_lambda": ms / lambda_ms if lambda_ms else 0.0,
                    "ms": ms,
                    "calls_per_unit": calls / per_profiled,
                }
            )
        rows.sort(key=lambda r: -r["ms"])
        result["functions"][function] = {
            "unit": "request" if function == "api" else "run",
            "units": per,
            "invocations": measured["invocations"],
            "cpu_ms": cpu_ms,
            "lambda_cpu_ms": lambda_ms,
            "wall_ms": wall_ms,
            "waiting_ms": max(0.0, wall_ms - cpu_ms),
            "profiled_cpu_ms": 1000 * sum(seconds.values()) / per_profiled,
            "groups": groups,
            "buckets": buckets,
            "top": rows[:top],
            "top_outside_aws_calls": [r for r in rows if not r["in_aws_call"]][:top],
        }
    return result


# --- report ---

_NAMES = {
    "api": "API create (`POST /v1/jobs`)",
    "sweep": "sweeper",
    "outbox": "outbox",
    "worker": "worker",
    "glue": "local glue (stream and queue pollers)",
}


def _ms(value: float) -> str:
    return f"{value:,.2f}"


def summary(result: dict[str, Any]) -> str:
    """One line: the Lambda's CPU ms per run (per request for the API), ours and the AWS SDK's."""
    parts = []
    for function in ("worker", "outbox", "sweep", "api"):
        f = result["functions"][function]
        g = f["groups"]
        split = f"ours {g['ours']['ms']:.1f}, SDK {g['botocore/boto3']['ms']:.1f}"
        parts.append(f"{function} {f['lambda_cpu_ms']:.1f} ({split})")
    return ", ".join(parts)


def markdown(result: dict[str, Any]) -> list[str]:
    """The report's section (bench/report.md)."""
    out = [
        "## 8. Where the CPU goes",
        "",
        f"{result['jobs']} minutely jobs created through the API handler, then {result['minutes']} "
        f"minute(s) of schedule and the drain on the harness: {result['runs']} runs (after one warm-up "
        "job's first run, so clients, models and caches are built). A plain pass gives CPU and wall per "
        "run; a profiled pass (cProfile on a per-thread CPU clock, in every thread the handlers start) "
        "the split. The CPU inside AWS calls and inside moto is metered exactly in the plain pass; each "
        "part's buckets are spread by their profiled shares (`bench/profile.py`). The API column is per "
        "request, the rest per run executed. *Waiting* is wall minus CPU (lock hand-offs and, on a "
        "loaded machine, time runnable but not running). *moto* serves the AWS calls in-process and is "
        "not the Lambda's; *bench harness* is the recorder's bookkeeping. *Lambda ms* leaves both out; "
        "the shares in brackets are of it (moto's and the harness's of all the CPU).",
        "",
        "| Function | CPU ms | Lambda ms | waiting ms | " + " | ".join(GROUPS) + " |",
        "|---|---|---|---|" + "---|" * len(GROUPS),
    ]
    for function in FUNCTIONS:
        f = result["functions"][function]
        cells = " | ".join(
            f"{_ms(g['ms'])} ({g['share'] if name in (MOTO, BENCH) else g['share_of_lambda']:.0%})"
            for name, g in ((name, f["groups"][name]) for name in GROUPS)
        )
        out.append(
            f"| {_NAMES[function]} | {_ms(f['cpu_ms'])} | {_ms(f['lambda_cpu_ms'])} | "
            f"{_ms(f['waiting_ms'])} | {cells} |"
        )
    names = sorted(
        {
            b
            for f in result["functions"].values()
            for b in f["buckets"]
            if group_of(b) in ("botocore/boto3", "powertools")
        }
    )
    out += [
        "",
        "Inside botocore/boto3 and Powertools, ms per run:",
        "",
        "| Bucket | " + " | ".join(FUNCTIONS) + " |",
        "|---|" + "---|" * len(FUNCTIONS),
    ]
    for name in names:
        cells = " | ".join(
            _ms(result["functions"][f]["buckets"].get(name, {}).get("ms", 0.0)) for f in FUNCTIONS
        )
        out.append(f"| {name} | {cells} |")
    out += [
        "",
        "Top functions by self time (C builtins under their caller's bucket; moto and the harness left "
        "out), ms per run and share of the function's Lambda CPU:",
        "",
    ]
    for function in FUNCTIONS:
        f = result["functions"][function]
        out += [
            f"**{_NAMES[function]}** ({_ms(f['lambda_cpu_ms'])} ms Lambda CPU per {f['unit']})",
            "",
            f"| # | function | bucket | ms | share | calls per {f['unit']} |",
            "|---|---|---|---|---|---|",
        ]
        for i, row in enumerate(f["top"], 1):
            out.append(
                f"| {i} | `{row['function']}` | {row['bucket']} | {row['ms']:.3f} | "
                f"{row['share_of_lambda']:.1%} | {row['calls_per_unit']:,.1f} |"
            )
        outside = [r for r in f.get("top_outside_aws_calls", []) if r not in f["top"]][:5]
        out.append("")
        if outside:
            out += [
                "Next outside AWS calls: "
                + "; ".join(f"`{r['function']}` {r['ms']:.3f} ({r['bucket']})" for r in outside)
                + ".",
                "",
            ]
    return out


if __name__ == "__main__":  # a quick look: python -m bench.profile
    import json

    print(json.dumps(run(jobs=6, minutes=1), indent=1))
