"""Local mode's console: what a person at the terminal needs, and nothing meant for Lambda.

- `quiet_console()`: no CloudWatch EMF documents on stdout (in Lambda they become metrics;
  the metrics port drops them while metrics are disabled, and this filters any Powertools
  prints regardless) and no Powertools warning about an invocation that had no metrics to
  publish.
- `startup_banner()`: where the API, its docs and the CLI are, and every API key.
- `RunTable`: one line per run state change, of every tenant, read from the runs table's
  stream (a second reader beside the outbox's event source mapping, as DynamoDB allows).
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import threading
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, cast

import boto3
from jobsched.domain.runs import Run, RunState
from jobsched.store.schema import DEFINITIONS, RUNS

from .config import DEV_KEY, LocalConfig
from .glue import Loop, read_stream
from .runtime import LocalRuntime

log = logging.getLogger("jobsched_local")

EMF_PREFIX = '{"_aws":'
DEFAULT_ENDPOINT = "http://127.0.0.1:8080"  # the CLI's default (jobsched_cli.DEFAULT_ENDPOINT)


class EmfFilter:
    """A text stream that passes everything on except EMF documents (and the newline `print`
    writes after each one)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._after_emf = threading.local()

    def write(self, text: str) -> int:
        if text.startswith(EMF_PREFIX):
            self._after_emf.pending = True
            return len(text)
        if getattr(self._after_emf, "pending", False):
            self._after_emf.pending = False
            if text == "\n":
                return len(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def quiet_console() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)
    if not isinstance(sys.stdout, EmfFilter):
        sys.stdout = cast(TextIO, EmfFilter(sys.stdout))


# --- the start-up lines ---


def cli_command(api_url: str, api_keys: dict[str, str], program: str | None = None) -> str:
    """The CLI as it must be called to reach this API: the endpoint and key spelled out only
    where the CLI's defaults (127.0.0.1:8080, the dev key) would not do."""
    env = []
    if api_url != DEFAULT_ENDPOINT:
        env.append(f"JOBSCHED_URL={api_url}")
    if DEV_KEY not in api_keys and api_keys:
        env.append(f"JOBSCHED_KEY={shlex.quote(next(iter(api_keys)))}")
    return " ".join([*env, program or cli_program()])


def cli_program() -> str:
    """The `jobsched` script beside the running interpreter, relative when under the
    current directory (`.venv/bin/jobsched`)."""
    script = Path(sys.executable).parent / "jobsched"
    if not script.exists():
        return "jobsched"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def startup_banner(api_url: str, moto_url: str, config: LocalConfig, program: str | None = None) -> str:
    keys = list(config.api_keys.items())
    width = max((len(key) for key, _ in keys), default=0)
    key_lines = [f"{key.ljust(width)}  tenant {tenant}" for key, tenant in keys] or ["(none configured)"]
    lines = [
        "jobsched local is running",
        f"  API       {api_url}",
        f"  console   {api_url}/console  (in a browser; sign in with a key below)",
        f"  docs      {api_url}/docs  (needs a key, as a deployed stack needs a signature:",
        f"            {cli_command(api_url, config.api_keys, program)} docs --open)",
        f"  API keys  {key_lines[0]}",
        *(f"            {line}" for line in key_lines[1:]),
        "            (send one as the x-api-key header)",
        f"  CLI       {cli_command(api_url, config.api_keys, program)} jobs list   (or tail, --help)",
        f"  AWS       {moto_url}  (moto: tables, stream, queues)",
        "State is in memory: Ctrl-C stops local mode and discards every job and run.",
        "Runs of every tenant are shown below as they change state.",
        "",
    ]
    return "\n".join(lines)


# --- the live table ---

HEADER = f"{'time':<9} {'tenant':<12} {'job':<18} {'scheduled for':<21} {'state':<11} {'att':>3}  detail"


class RunTable:
    """Prints a line whenever a run's state, attempt or redrive count changes.

    Runs materialised ahead of time (PENDING or QUEUED before they are due) are held back and
    shown once due, so the table reads in time order."""

    def __init__(
        self,
        streams: Any,
        stream_arn: str,
        job_name: Callable[[str], str | None],
        out: TextIO | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._streams = streams
        self._arn = stream_arn
        self._job_name = job_name
        self._out = out
        self._now = now
        self._iterators: dict[str, str] = {}
        self._names: dict[str, str] = {}
        self._held: dict[str, Run] = {}
        self._header_printed = False
        self._loop: Loop | None = None

    @classmethod
    def of(cls, runtime: LocalRuntime, out: TextIO | None = None) -> RunTable:
        """The table of a started runtime: its runs stream, job names from its definitions."""
        from jobsched.store.definitions import DefinitionStore

        assert runtime.moto is not None
        endpoint: dict[str, Any] = {"endpoint_url": runtime.moto.url, "region_name": runtime.config.region}
        definitions = DefinitionStore(
            boto3.client("dynamodb", **endpoint), DEFINITIONS.default_name, runtime.config.shard_count
        )

        def job_name(job_id: str) -> str | None:
            job = definitions.get(job_id)
            return job.spec.name if job else None

        stream_arn = runtime.resources["streams"][RUNS.logical_id]
        return cls(boto3.client("dynamodbstreams", **endpoint), stream_arn, job_name, out)

    def start(self, interval: float = 0.5) -> RunTable:
        self._loop = Loop("run-table", interval, self.poll)
        self._loop.start()
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()

    def poll(self) -> None:
        for record in self._read():
            self.observe(record)
        self.release_due()

    def observe(self, record: dict[str, Any]) -> None:
        """One stream record (as dynamodbstreams returns it)."""
        images = record.get("dynamodb") or {}
        new, old = images.get("NewImage"), images.get("OldImage")
        if record.get("eventName") == "REMOVE" or not new:
            return  # expired (TTL)
        run = _run_of(new)
        if run is None:
            return  # a transition overflow item (the run item carries the state), or unreadable
        if old is not None and _signature(_run_of(old)) == _signature(run):
            return  # a write that moved nothing a reader sees (a lease renewal, a rev bump)
        now = self._now()
        held = self._held.pop(run.run_key, None)
        if run.state in (RunState.PENDING, RunState.QUEUED) and run.due_at > now:
            self._held[run.run_key] = run
            return
        if held is not None and held.due_at <= now:
            self._print(held, held.due_at)  # came due before this record was read: it came first
        self._print(run, run.updated_at)

    def release_due(self) -> None:
        now = self._now()
        for run_key, run in sorted(self._held.items(), key=lambda item: item[1].due_at):
            if run.due_at <= now:
                del self._held[run_key]
                self._print(run, run.due_at)

    def _print(self, run: Run, at: datetime) -> None:
        out = self._out or sys.stdout
        if not self._header_printed:
            self._header_printed = True
            print(HEADER, file=out)
        name = self._names.get(run.job_id)
        if name is None:
            name = self._names[run.job_id] = self._job_name(run.job_id) or run.job_id
        print(
            f"{at.astimezone(UTC).strftime('%H:%M:%S'):<9} {run.tenant[:12]:<12} {name[:18]:<18} "
            f"{run.scheduled_for.strftime('%Y-%m-%dT%H:%M:%SZ'):<21} {run.state.value:<11} "
            f"{run.attempt:>3}  {detail_of(run)}".rstrip(),
            file=out,
            flush=True,
        )

    def _read(self) -> list[dict[str, Any]]:
        return read_stream(self._streams, self._arn, self._iterators)


def _run_of(image: dict[str, Any]) -> Run | None:
    # Imported here: the store brings the Powertools logger, which must be built after local
    # mode has set its environment (POWERTOOLS_LOG_LEVEL and the rest).
    from jobsched.store.runs import RUN_PREFIX, RunStore

    if not image.get("sk", {}).get("S", "").startswith(RUN_PREFIX):
        return None
    try:
        return RunStore.from_item(image)
    except Exception:
        return None  # the store's own readers log unreadable items


def _signature(run: Run | None) -> tuple[Any, ...]:
    return () if run is None else (run.state, run.attempt, run.redrives)


def detail_of(run: Run) -> str:
    if run.state is RunState.SUCCEEDED and run.result is not None:
        return json.dumps(run.result, separators=(",", ":"))[:60]
    if run.redrives and run.state in (RunState.PENDING, RunState.QUEUED) and run.attempt == 0:
        return f"redriven ({run.redrives})"
    return run.last_error_class or run.reason or ""
