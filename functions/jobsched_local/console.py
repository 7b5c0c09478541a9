"""Local mode's console: what a person at the terminal needs, and nothing meant for Lambda.

- `quiet_console()`: one writer for the terminal (`Terminal`: whole lines, in order, from
  every thread); no CloudWatch EMF documents on stdout (in Lambda they become metrics; the
  metrics port drops them while metrics are disabled, and this filters any Powertools prints
  regardless), no Powertools warning about an invocation that had no metrics to publish, and
  Powertools JSON logs only when asked for (`--verbose`): otherwise warnings and errors as
  one plain line each.
- `startup_banner()`: where the API, its docs and the CLI are, and every API key.
- `RunTable`: one line per run state change, read from the runs table's stream (a second
  reader beside the outbox's event source mapping, as DynamoDB allows); `--follow` says
  whose runs (`mine`: of the jobs created through this instance, the demo's recurring jobs
  for their first run only; `all`: every run of every tenant; `none`: no table). Job names
  are read in one batch for the runs a poll shows (a burst of runs due at once is one read,
  not one per job, taken from the moto server the worker is waiting on) and kept, each with
  the job's version: a run made from a later version (a rename bumps it) reads it again.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, cast

import boto3
from jobsched.domain.events import last_sequence, sequence_of
from jobsched.domain.run_status import current_error
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


class Terminal:
    """The one writer of local mode's terminal: every thread's output (the banner, the run
    table, the demo, log records, warnings) reaches `stream` as whole lines, one line at a
    time under one lock, flushed at once, so lines never interleave mid-line and appear in
    the order they were completed. Text without its newline yet is kept per thread until the
    newline comes (`print` writes a line and its newline in two calls)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._partial = threading.local()

    def write(self, text: str) -> int:
        *lines, rest = (getattr(self._partial, "text", "") + text).split("\n")
        self._partial.text = rest
        if lines:
            with self._lock:
                for line in lines:
                    self.stream.write(line + "\n")
                self.stream.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class _TerminalLogHandler(logging.StreamHandler):
    """Log records and warnings as one plain line each (times in UTC, as the run table's)."""


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def quiet_console(*, verbose: bool = False) -> Terminal:
    """Routes everything local mode prints through one `Terminal` on stdout (returned) and
    keeps what is meant for Lambda off it: no EMF documents, no warning about an invocation
    with no metrics to publish.

    Without `verbose`, records of WARNING and above (from jobsched, local mode, and Python
    warnings) are one plain line each, and the Powertools JSON handler is taken off; with
    `verbose`, jobsched's records are Powertools JSON documents only (from INFO, or
    POWERTOOLS_LOG_LEVEL when set), never also as plain lines."""
    from jobsched.observability import logger as powertools_logger

    terminal = (
        sys.stdout if isinstance(sys.stdout, Terminal) else Terminal(cast(TextIO, EmfFilter(sys.stdout)))
    )
    sys.stdout = cast(TextIO, terminal)
    warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)
    logging.captureWarnings(True)  # warnings as log records: one writer, one line each
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    for handler in [h for h in root.handlers if isinstance(h, _TerminalLogHandler)]:
        root.removeHandler(handler)
    plain = _TerminalLogHandler(cast(TextIO, terminal))
    formatter = logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S")
    formatter.converter = time.gmtime
    plain.setFormatter(formatter)
    root.addHandler(plain)

    jobsched_log = logging.getLogger(powertools_logger.name)
    json_handler = powertools_logger.registered_handler
    chosen = os.environ.get("POWERTOOLS_LOG_LEVEL")
    if verbose:
        if isinstance(json_handler, logging.StreamHandler):
            json_handler.setStream(terminal)
        if json_handler not in jobsched_log.handlers:
            jobsched_log.addHandler(json_handler)
        jobsched_log.propagate = False
        jobsched_log.setLevel((chosen or "INFO").upper())
    else:
        jobsched_log.removeHandler(json_handler)
        jobsched_log.propagate = True
        jobsched_log.setLevel((chosen or "WARNING").upper())
    return terminal


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
        "Runs are shown below as they change state (--follow all|mine|none).",
        "",
    ]
    return "\n".join(lines)


# --- the live table ---

HEADER = f"{'time':<9} {'tenant':<12} {'job':<18} {'scheduled for':<21} {'state':<11} {'att':>3}  detail"


FOLLOW_CHOICES = ("mine", "all", "none")
DETAIL_WIDTH = 60
NAMES_KEPT = 10_000  # job names the table keeps (least recently shown dropped first)
RUNS_KEPT = 10_000  # runs whose last shown transition the table keeps (least recent dropped)

# Job ids -> (the job's version, its name) for the jobs that exist; one read for them all.
JobNames = Callable[[Collection[str]], Mapping[str, tuple[int, str]]]


class RunTable:
    """Prints a line for every transition a run's history records, in order, each once.

    Several writes of one run can reach the table as one stream record (the stream merges
    them; the table polls), and a record can be read twice: the table keeps, per run, the
    sequence of the last transition it showed (domain.events.sequence_of, as the events
    consumer numbers them) and shows each transition of the new image past it, as the run
    stood after it. A run first seen in a record starts from its old image's last
    transition. A run without history (written before runs carried one) is shown once per
    change of its state, attempt or redrive count.

    Runs materialised ahead of time (PENDING or QUEUED before they are due) are held back and
    shown once due, so the table reads in time order. With `follow="mine"` the runs of the
    jobs in `tour_jobs` (the demo's, as it creates them) are shown for each job's first run
    only, then one line says the rest are hidden; `follow="all"` shows every run.

    `job_names` reads the names of many jobs at once: each poll asks once for the jobs of the
    runs it shows whose names are not kept, or were kept from a version older than the run's
    (`definition_version`: the job was changed, perhaps renamed, after the name was read)."""

    def __init__(
        self,
        streams: Any,
        stream_arn: str,
        job_names: JobNames,
        out: TextIO | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        follow: str = "all",
        tour_jobs: Container[str] = frozenset(),
    ) -> None:
        if follow not in FOLLOW_CHOICES[:2]:
            raise ValueError(f"follow must be one of {', '.join(FOLLOW_CHOICES[:2])} (none: no table)")
        self._follow = follow
        self._tour_jobs = tour_jobs
        self._tour_shown: dict[str, str] = {}  # tour job id -> the run key shown for it
        self._streams = streams
        self._arn = stream_arn
        self._job_names = job_names
        self._out = out
        self._now = now
        self._iterators: dict[str, str] = {}
        # job id -> (the version the name was read at, the name; None for a job not found)
        self._names: OrderedDict[str, tuple[int, str | None]] = OrderedDict()
        self._held: dict[str, Run] = {}
        # run key -> the sequence of its last transition shown (or passed over), least recent first
        self._reached: OrderedDict[str, int] = OrderedDict()
        self._header_printed = False
        self._loop: Loop | None = None

    @classmethod
    def of(
        cls,
        runtime: LocalRuntime,
        out: TextIO | None = None,
        *,
        follow: str = "all",
        tour_jobs: Container[str] = frozenset(),
    ) -> RunTable:
        """The table of a started runtime: its runs stream, job names from its definitions."""
        from jobsched.store.definitions import DefinitionStore

        assert runtime.moto is not None
        endpoint: dict[str, Any] = {"endpoint_url": runtime.moto.url, "region_name": runtime.config.region}
        definitions = DefinitionStore(
            boto3.client("dynamodb", **endpoint), DEFINITIONS.default_name, runtime.config.shard_count
        )

        def job_names(job_ids: Collection[str]) -> dict[str, tuple[int, str]]:
            # One BatchGetItem per 100 jobs (a single job: one GetItem).
            return {job.job_id: (job.version, job.spec.name) for job in definitions.get_many(list(job_ids))}

        stream_arn = runtime.resources["streams"][RUNS.logical_id]
        streams = boto3.client("dynamodbstreams", **endpoint)
        return cls(streams, stream_arn, job_names, out, follow=follow, tour_jobs=tour_jobs)

    def start(self, interval: float = 0.5) -> RunTable:
        self._loop = Loop("run-table", interval, self.poll)
        self._loop.start()
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()

    def poll(self) -> None:
        changes = [change for change in map(_change_of, self._read()) if change is not None]
        # The names of the jobs of every change in one read (a held run a change replaces is of
        # the same job); release_due reads those of the held runs coming due, in one more.
        self._read_names(run for run, _ in changes)
        for run, before in changes:
            self._observe(run, before)
        self.release_due()

    def observe(self, record: dict[str, Any]) -> None:
        """One stream record (as dynamodbstreams returns it)."""
        change = _change_of(record)
        if change is not None:
            self._observe(*change)

    def _observe(self, run: Run, before: int) -> None:
        now = self._now()
        if run.run_key not in self._reached:
            self._reached[run.run_key] = before
        self._reached.move_to_end(run.run_key)
        while len(self._reached) > RUNS_KEPT:
            self._reached.popitem(last=False)
        held = self._held.pop(run.run_key, None)
        if run.state in (RunState.PENDING, RunState.QUEUED) and run.due_at > now:
            self._held[run.run_key] = run
            return
        if held is not None and held.due_at <= now:
            self._show(held, not_before=held.due_at)  # came due before this record was read
        self._show(run)

    def release_due(self) -> None:
        now = self._now()
        self._read_names(run for run in self._held.values() if run.due_at <= now)
        for run_key, run in sorted(self._held.items(), key=lambda item: item[1].due_at):
            if run.due_at <= now:
                del self._held[run_key]
                self._show(run, not_before=run.due_at)

    def _show(self, run: Run, not_before: datetime | None = None) -> None:
        """Prints the transitions of `run` past the last one shown, each at its own instant (a
        run held until due: not before `not_before`, so the table reads in time order)."""
        if not run.history:
            self._print(run, max(run.updated_at, not_before or run.updated_at))
            return
        reached = self._reached.get(run.run_key, -1)
        for sequence, state in states_since(run, reached):
            self._reached[run.run_key] = sequence
            entry = state.history[-1]
            if entry.source == entry.target:
                continue  # no change of state (a repair's republish, a late notice): not a line
            self._print(state, max(state.updated_at, not_before or state.updated_at))

    def _shown(self, run: Run) -> bool:
        """Whether `run` is followed: every run with `all`; with `mine`, a tour job's first
        run only (saying once that its later runs are hidden)."""
        if self._follow == "all" or run.job_id not in self._tour_jobs:
            return True
        first = self._tour_shown.setdefault(run.job_id, run.run_key)
        if first == run.run_key:
            return True
        if first != "":
            self._tour_shown[run.job_id] = ""  # said once
            name = self._name(run)
            print(
                f"{'':<9} {name}: its later runs are not shown (jobsched local --follow all shows them)",
                file=self._out or sys.stdout,
                flush=True,
            )
        return False

    def _stale(self, run: Run) -> bool:
        kept = self._names.get(run.job_id)
        return kept is None or kept[0] < run.definition_version

    def _read_names(self, runs: Iterable[Run]) -> None:
        """Read, in one call, the names of the jobs of `runs` not kept at their runs' version."""
        wanted: dict[str, int] = {}
        for run in runs:
            if self._stale(run):
                wanted[run.job_id] = max(wanted.get(run.job_id, 0), run.definition_version)
            else:
                self._names.move_to_end(run.job_id)  # about to be shown: kept over older ones
        if not wanted:
            return
        found = self._job_names(list(wanted))
        for job_id, version in wanted.items():
            # A job gone (deleted) is shown by its id, and not asked for again at this version.
            read_at, name = found.get(job_id) or (version, None)
            self._names[job_id] = (max(read_at, version), name)
            self._names.move_to_end(job_id)
        while len(self._names) > max(NAMES_KEPT, len(wanted)):  # never the names just read
            self._names.popitem(last=False)

    def _name(self, run: Run) -> str:
        if self._stale(run):
            self._read_names([run])  # a run the poll did not read ahead (observe called directly)
        self._names.move_to_end(run.job_id)
        return self._names[run.job_id][1] or run.job_id

    def _print(self, run: Run, at: datetime) -> None:
        if not self._shown(run):
            return
        out = self._out or sys.stdout
        if not self._header_printed:
            self._header_printed = True
            print(HEADER, file=out)
        name = self._name(run)
        print(
            f"{at.astimezone(UTC).strftime('%H:%M:%S'):<9} {run.tenant[:12]:<12} {name[:18]:<18} "
            f"{run.scheduled_for.strftime('%Y-%m-%dT%H:%M:%SZ'):<21} {run.state.value:<11} "
            f"{run.attempt:>3}  {detail_of(run)}".rstrip(),
            file=out,
            flush=True,
        )

    def _read(self) -> list[dict[str, Any]]:
        return read_stream(self._streams, self._arn, self._iterators)


def _change_of(record: dict[str, Any]) -> tuple[Run, int] | None:
    """The run a stream record shows changed and the sequence of its old image's last
    transition (-1 for none), or None: a removal (expiry by TTL), a transition overflow item
    (the run item carries the state), an unreadable item, or a write that moved nothing a
    reader sees (no transition: a lease renewal, a rev bump)."""
    images = record.get("dynamodb") or {}
    new, old = images.get("NewImage"), images.get("OldImage")
    if record.get("eventName") == "REMOVE" or not new:
        return None
    run = _run_of(new)
    before = _run_of(old) if old is not None else None
    if run is None:
        return None
    if run.history:
        return None if last_sequence(run) <= last_sequence(before) else (run, last_sequence(before))
    if old is not None and _signature(before) == _signature(run):
        return None
    return run, -1


def states_since(run: Run, reached: int) -> list[tuple[int, Run]]:
    """(sequence, the run as it stood after that transition) for each transition in `run`'s
    history whose sequence is past `reached`, oldest first; the last is `run` itself. An
    earlier state carries its transition's state, attempt, instant, reason and error, and no
    result."""
    states = []
    last = len(run.history) - 1
    for index, entry in enumerate(run.history):
        sequence = sequence_of(run, index)
        if sequence <= reached:
            continue
        if index == last:
            states.append((sequence, run))
            continue
        state = run.model_copy(
            update={
                "state": entry.target,
                "attempt": entry.attempt,
                "updated_at": entry.at,
                "history": run.history[: index + 1],
                "result": None,
                "reason": entry.reason,
                "last_error_class": entry.error_class,
                "last_error_message": entry.error_message,
            }
        )
        states.append((sequence, state))
    return states


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
    """The line's last column: a succeeded run's result, a redrive, a repair (`requeued by
    reconciler`), the run's own error, or why it moved; at most DETAIL_WIDTH characters, cut
    between JSON members or words, never inside one."""
    if run.state is RunState.SUCCEEDED and run.result is not None:
        return shorten_json(run.result, DETAIL_WIDTH)
    if run.redrives and run.state in (RunState.PENDING, RunState.QUEUED) and run.attempt == 0:
        return f"redriven ({run.redrives})"
    last = run.history[-1] if run.history else None
    repair = repair_label(run)
    if repair is not None:
        text = f"{repair} ({last.error_class})" if last is not None and last.error_class else repair
    else:
        error_class, _ = current_error(run)
        text = error_class or run.reason or (last.reason if last is not None else None) or ""
    return shorten_words(text, DETAIL_WIDTH)


# What the reconciler's transitions do, as a reader of the table says it.
_REPAIRS = {"requeue": "requeued", "republish": "republished", "unblocked": "unblocked"}


def repair_label(run: Run) -> str | None:
    """`requeued by reconciler` (or republished, unblocked, ...) when the run's latest
    transition is a repair; None otherwise."""
    last = run.history[-1] if run.history else None
    if last is None or last.actor != "reconciler":
        return None
    done = _REPAIRS.get(last.reason or "")
    if done is None:
        done = "lease expired; moved" if last.source is RunState.LEASED else "moved"
    return f"{done} by reconciler"


def shorten_words(text: str, width: int) -> str:
    """`text` if it fits in `width`, else cut at the last space before it, with `…` (just
    `…` when no space comes early enough: a word is never cut open)."""
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    space = cut.rfind(" ")
    return (cut[:space] + " " if space > 0 else "") + "…"


def shorten_json(value: Any, width: int) -> str:
    """Compact JSON of `value` in at most `width` characters: whole members of an object or
    items of an array while they fit, then `…` (a string or timestamp is never cut open)."""
    text = json.dumps(value, separators=(",", ":"))
    if len(text) <= width:
        return text
    if isinstance(value, dict | list):
        opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
        members = (
            [f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}" for k, v in value.items()]
            if isinstance(value, dict)
            else [json.dumps(v, separators=(",", ":")) for v in value]
        )
        kept: list[str] = []
        for member in members:
            if len(opening + ",".join([*kept, member]) + ",…" + closing) > width:
                break
            kept.append(member)
        if not kept and isinstance(value, dict):
            # Not even the first member fits: its string value shortened at a space (a
            # timestamp or an id has none, so it is left out whole rather than cut open).
            name, first = next(iter(value.items()))
            if isinstance(first, str):
                room = width - len(opening + json.dumps(name) + ':"",…' + closing)
                shortened = json.dumps(shorten_words(first, room), ensure_ascii=False)
                kept = [f"{json.dumps(name)}:{shortened}"] if room > 1 else []
        return opening + ",".join([*kept, "…"]) + closing
    return "…"
