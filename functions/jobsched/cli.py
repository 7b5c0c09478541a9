"""The `jobsched` command: local mode, and a client for the HTTP API.

Exit codes: 0 ok, 1 the API answered with an error (or could not be reached), 2 usage."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .client import ApiClient, ApiError, ApiUnreachable, SigningUnavailable, is_loopback
from .local.config import DEV_KEY

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
JOB_STATES = ("ACTIVE", "PAUSED", "CANCELLED", "COMPLETED")
PRIORITIES = ("high", "default", "low")
OPEN_RUN_STATES = frozenset({"PENDING", "QUEUED", "LEASED", "RETRY_WAIT"})
TAIL_FOLLOW_SECONDS = 300.0  # without --lookback, tail follows runs scheduled up to this long ago


class UsageError(Exception):
    """Bad command-line input found after argparse (exit code 2)."""


# --- parsing helpers ---


def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, booleans, null, objects), else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """`key=value` pairs into a body; dotted keys (`retry.baseSeconds=1`) nest."""
    body: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected key=value")
        parts = key.split(".")
        if any(not p for p in parts):
            raise UsageError(f"--set {item!r}: empty name in {key!r}")
        node = body
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(f"--set {item!r}: {'.'.join(parts[: depth + 1])} is already set to a value")
            node = child
        if isinstance(node.get(parts[-1]), dict):
            raise UsageError(f"--set {item!r}: {key} already has nested fields")
        node[parts[-1]] = parse_value(raw)
    return body


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def parse_json_arg(option: str, text: str) -> Any:
    """A JSON document, or `@file` (`@-` for stdin) holding one."""
    source = text
    if text.startswith("@"):
        name = text[1:]
        try:
            source = sys.stdin.read() if name == "-" else Path(name).read_text()
        except OSError as exc:
            raise UsageError(f"{option}: cannot read {name}: {exc.strerror or exc}") from None
    try:
        return json.loads(source)
    except ValueError as exc:
        raise UsageError(f"{option}: not valid JSON ({exc})") from None


_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int | None:
    """`90`, `90s`, `15m`, `1h30m`, `2d` as seconds; None when it is none of these."""
    value = text.strip().lower()
    if value.isdigit():
        return int(value)
    if value and _DURATION.sub("", value) == "":
        return sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(value))
    return None


def parse_every(text: str) -> int | str:
    """Seconds or a shorthand become a number; anything else (ISO 8601 `PT15M`) goes as is,
    so the server's rule decides."""
    seconds = duration_seconds(text)
    return seconds if seconds is not None else text


def parse_instant(text: str, now: datetime | None = None) -> str:
    """RFC 3339 as is; `now`, `+DURATION` or `-DURATION` relative to now (`+30s`, `-2h`), in UTC."""
    value = text.strip()
    current = (now or datetime.now(UTC)).replace(microsecond=0)
    if value == "now":
        return current.strftime("%Y-%m-%dT%H:%M:%SZ")
    if value.startswith(("+", "-")):
        seconds = duration_seconds(value[1:])
        if seconds is None:
            raise UsageError(
                f"{text!r}: expected an instant, now, +DURATION or -DURATION such as +30s or -2h"
            )
        sign = 1 if value[0] == "+" else -1
        return (current + timedelta(seconds=sign * seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


# argparse reads `-2h` as an option (only plain negative numbers pass as values), so
# `--start -2h` would stop with "expected one argument": such a value is glued to its option.
INSTANT_OPTIONS = frozenset({"--start", "--end", "--at"})
_NEGATIVE_DURATION = re.compile(r"-\d[\dsmhd]*", re.IGNORECASE)


def attach_negative_values(argv: Sequence[str]) -> list[str]:
    """`--start -2h` → `--start=-2h` for the options that take an instant; nothing after `--`."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--":
            return out + list(argv[index:])
        following = argv[index + 1] if index + 1 < len(argv) else None
        if token in INSTANT_OPTIONS and following is not None and _NEGATIVE_DURATION.fullmatch(following):
            out.append(f"{token}={following}")
            index += 2
            continue
        out.append(token)
        index += 1
    return out


# --- output ---


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; all-number columns right-aligned."""
    raw = [list(row) for row in rows]
    cells = [[cell(v) for v in row] for row in raw]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))

    def is_number(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    numeric = [
        any(is_number(row[i]) for row in raw) and all(is_number(row[i]) or row[i] is None for row in raw)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        padded = [
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])


def format_fields(fields: Iterable[tuple[str, Any]]) -> str:
    pairs = [(name, cell(value)) for name, value in fields]
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(f"{name.ljust(width)}  {value}".rstrip() for name, value in pairs)


def format_api_error(error: ApiError) -> str:
    lines = [f"error: {error.status} {error.code}: {error.message}"]
    for item in error.errors:
        lines.append(f"  {item.get('field', '?')}: {item.get('rule', '')}")
    body = error.body if isinstance(error.body, dict) else {}
    for name, value in body.items():
        if name not in ("code", "message", "errors", "Message"):
            lines.append(f"  {name}: {cell(value)}")
    return "\n".join(lines)


def human_seconds(seconds: int) -> str:
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            count, seconds = divmod(seconds, size)
            if count:
                parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def schedule_of(job: dict[str, Any]) -> str:
    if job.get("cron"):
        return f"cron {job['cron']} ({job.get('timeZone') or 'UTC'})"
    if job.get("every") is not None:
        return f"every {human_seconds(int(job['every']))}"
    if job.get("runAt"):
        return f"at {job['runAt']}"
    return "-"


def short_time(instant: str | None) -> str:
    """`2026-11-02T09:00:05Z` → `09:00:05` (UTC): tail lines are read as they happen."""
    if not instant:
        return "-"
    return instant[11:19] if len(instant) >= 19 else instant


# --- commands ---


class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.json: bool = bool(getattr(args, "json", False))
        endpoint = args.endpoint or os.environ.get("JOBSCHED_URL") or DEFAULT_ENDPOINT
        key = args.api_key or os.environ.get("JOBSCHED_KEY") or None
        if key is None and not args.sigv4 and is_loopback(endpoint):
            key = DEV_KEY  # local mode's default key; never sent anywhere else
        self.client = ApiClient(endpoint, api_key=key, sigv4=bool(args.sigv4), region=args.region)

    def emit(self, data: Any, human: Callable[[], str]) -> int:
        if self.json:
            print(json.dumps(data, indent=2))
        else:
            text = human()
            if text:
                print(text)
        return 0


def job_fields(job: dict[str, Any]) -> list[tuple[str, Any]]:
    first = ["jobId", "name", "type", "state", "version"]
    fields: list[tuple[str, Any]] = [(k, job.get(k)) for k in first]
    fields.append(("schedule", schedule_of(job)))
    skip = {*first, "cron", "timeZone", "every", "runAt", "nextFireTimes"}
    fields += [(k, v) for k, v in job.items() if k not in skip]
    for index, instant in enumerate(job.get("nextFireTimes") or []):
        fields.append(("nextFireTimes" if index == 0 else "", instant))
    return fields


def jobs_table(jobs: list[dict[str, Any]]) -> str:
    rows = [
        (j.get("jobId"), j.get("name"), j.get("type"), schedule_of(j), j.get("state"), j.get("nextRunAt"))
        for j in jobs
    ]
    return format_table(["JOB ID", "NAME", "TYPE", "SCHEDULE", "STATE", "NEXT RUN"], rows)


def runs_table(runs: list[dict[str, Any]]) -> str:
    rows = [
        (r.get("runKey"), r.get("state"), r.get("trigger"), r.get("attempt"), r.get("lastErrorClass"))
        for r in runs
    ]
    return format_table(["RUN KEY", "STATE", "TRIGGER", "ATTEMPT", "ERROR"], rows)


def with_more(table: str, page: dict[str, Any]) -> str:
    if page.get("nextCursor"):
        table += f"\n(more: --all, or --cursor {page['nextCursor']})"
    return table


def job_body(args: argparse.Namespace) -> dict[str, Any]:
    """The body fields given by the named options, then --set on top."""
    if args.tz and not args.cron:
        raise UsageError("--tz: only applies with --cron")
    body: dict[str, Any] = {}
    named = {
        "name": args.name,
        "type": args.type,
        "cron": args.cron,
        "timeZone": args.tz,
        "every": parse_every(args.every) if args.every is not None else None,
        "runAt": parse_instant(args.at) if args.at is not None else None,
        "maxAttempts": args.max_attempts,
        "priority": args.priority,
    }
    body.update({k: v for k, v in named.items() if v is not None})
    if args.payload is not None:
        body["payload"] = parse_json_arg("--payload", args.payload)
    if args.target is not None:
        body["target"] = parse_json_arg("--target", args.target)
    return deep_merge(body, parse_assignments(args.set or []))


def cmd_jobs_create(ctx: Context, args: argparse.Namespace) -> int:
    body = job_body(args)
    job = ctx.client.create_job(body, idempotency_key=args.idempotency_key)
    return ctx.emit(job, lambda: format_fields(job_fields(job)))


def cmd_jobs_list(ctx: Context, args: argparse.Namespace) -> int:
    page = ctx.client.list_jobs(state=args.state, limit=args.limit, cursor=args.cursor, all_pages=args.all)
    return ctx.emit(page, lambda: with_more(jobs_table(page.get("items") or []), page))


def cmd_jobs_get(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client.get_job(args.job_id)
    return ctx.emit(job, lambda: format_fields(job_fields(job)))


def cmd_jobs_update(ctx: Context, args: argparse.Namespace) -> int:
    patch = job_body(args)
    if not patch:
        raise UsageError("nothing to change: give --set key=value (or --name, --cron, ...)")
    version = args.if_match
    if version is None:
        version = str(ctx.client.get_job(args.job_id)["version"])
        print(f"note: no --if-match given; using the current version {version}", file=sys.stderr)
    job = ctx.client.update_job(args.job_id, patch, version)
    return ctx.emit(job, lambda: format_fields(job_fields(job)))


def _job_action(name: str) -> Callable[[Context, argparse.Namespace], int]:
    def run(ctx: Context, args: argparse.Namespace) -> int:
        actions = {"pause": ctx.client.pause, "resume": ctx.client.resume, "cancel": ctx.client.cancel_job}
        job = actions[name](args.job_id, if_match=args.if_match)
        return ctx.emit(job, lambda: f"{job.get('jobId')}  {job.get('state')}  version {job.get('version')}")

    return run


def cmd_jobs_trigger(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.trigger(args.job_id)
    return ctx.emit(run, lambda: f"triggered {run.get('runKey')}  {run.get('state')}")


def cmd_jobs_backfill(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.client.backfill(args.job_id, parse_instant(args.start), parse_instant(args.end))

    def human() -> str:
        created, existing = result.get("created") or [], result.get("existing") or []
        lines = [f"created {len(created)} run(s); {len(existing)} already existed"]
        lines += [f"  {key}" for key in created]
        return "\n".join(lines)

    return ctx.emit(result, human)


def cmd_jobs_summary(ctx: Context, args: argparse.Namespace) -> int:
    summary = ctx.client.job_summary(args.job_id)

    def human() -> str:
        counters = summary.get("counters") or {}
        fields = [("jobId", summary.get("jobId")), *counters.items()]
        for index, instant in enumerate(summary.get("nextFireTimes") or []):
            fields.append(("nextFireTimes" if index == 0 else "", instant))
        return format_fields(fields) + "\n\nlast runs:\n" + runs_table(summary.get("lastRuns") or [])

    return ctx.emit(summary, human)


def cmd_runs_list(ctx: Context, args: argparse.Namespace) -> int:
    page = ctx.client.list_runs(args.job_id, limit=args.limit, cursor=args.cursor, all_pages=args.all)
    return ctx.emit(page, lambda: with_more(runs_table(page.get("items") or []), page))


def cmd_runs_get(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.get_run(args.run_key)

    def human() -> str:
        skip = {"attempts", "transitions"}
        fields = format_fields((k, v) for k, v in run.items() if k not in skip)
        rows = [
            (
                t.get("at"),
                t.get("actor"),
                t.get("from"),
                t.get("to"),
                t.get("fence"),
                t.get("attempt"),
                t.get("errorClass"),
                t.get("reason") or t.get("errorMessage"),
            )
            for t in run.get("transitions") or []
        ]
        headers = ["AT", "ACTOR", "FROM", "TO", "FENCE", "ATTEMPT", "ERROR", "DETAIL"]
        return f"{fields}\n\ntransitions:\n{format_table(headers, rows)}"

    return ctx.emit(run, human)


def cmd_runs_cancel(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.cancel_run(args.run_key)
    return ctx.emit(run, lambda: f"{run.get('runKey')}  {run.get('state')}")


def cmd_dlq_list(ctx: Context, args: argparse.Namespace) -> int:
    page = ctx.client.dead_letters(limit=args.limit, cursor=args.cursor, all_pages=args.all)

    def human() -> str:
        rows = [
            (
                r.get("runKey"),
                r.get("attempt"),
                r.get("redrives"),
                r.get("lastErrorClass"),
                (r.get("lastErrorMessage") or "")[:60] or None,
                r.get("finishedAt"),
            )
            for r in page.get("items") or []
        ]
        headers = ["RUN KEY", "ATTEMPT", "REDRIVES", "ERROR", "MESSAGE", "FINISHED"]
        return with_more(format_table(headers, rows), page)

    return ctx.emit(page, human)


def cmd_dlq_redrive(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.redrive(args.run_key, reason=args.reason)
    return ctx.emit(
        run, lambda: f"redriven {run.get('runKey')}  {run.get('state')}  redrives {run.get('redrives')}"
    )


# --- tail ---


class RunFollower:
    """Finds new run transitions by polling: the runs of each job (newest first, down to
    `lookback` before now), and the full history of any run whose state moved.

    Runs not yet due are left alone until they are (materialised ahead by the sweeper, they
    would otherwise flood the output long before anything happens to them); once due, a run
    is reported from its scheduled time on, so its earlier bookkeeping (PENDING, QUEUED ahead
    of time) never appears late and out of order. With `history`, the first poll reports the
    transitions of the last `lookback` seconds; without, it only takes note of where runs are."""

    def __init__(
        self,
        client: ApiClient,
        job_ids: list[str],
        lookback: float,
        now: Callable[[], datetime],
        *,
        history: bool = False,
    ):
        self.client = client
        self.fixed = list(job_ids)
        self.lookback = timedelta(seconds=lookback)
        self.now = now
        self.history = history
        self.names: dict[str, str] = {}
        self.signatures: dict[str, tuple[Any, ...]] = {}
        self.reported: dict[str, int] = {}  # run key -> transitions already reported
        self.baseline: dict[str, dict[str, Any]] = {}  # runs first seen before tail started
        self.tracked: dict[str, str] = {}  # open runs older than the lookback: run key -> job id
        self.started = False

    def _jobs(self) -> list[str]:
        if self.fixed:
            for job_id in self.fixed:
                if job_id not in self.names:
                    self.names[job_id] = str(self.client.get_job(job_id).get("name"))
            return self.fixed
        ids = []
        for job in self.client.iter_jobs():
            self.names[job["jobId"]] = str(job.get("name"))
            ids.append(job["jobId"])
        return ids

    def _recent_runs(self, job_id: str, horizon: str, floor: str) -> Iterable[dict[str, Any]]:
        cursor = None
        while True:
            page = self.client.list_runs(job_id, limit=100, cursor=cursor)
            for run in page.get("items") or []:
                if run["scheduledFor"] < floor:
                    return
                if run["scheduledFor"] <= horizon:
                    yield run
            cursor = page.get("nextCursor")
            if not cursor:
                return

    def poll(self) -> list[dict[str, Any]]:
        """One round; returns the new transitions, oldest first, as tail events."""
        now = self.now()
        horizon = _iso(now)
        floor = _iso(now - self.lookback)
        seen: dict[str, dict[str, Any]] = {}
        for job_id in self._jobs():
            for run in self._recent_runs(job_id, horizon, floor):
                seen[run["runKey"]] = run
        for run_key in [k for k in self.tracked if k not in seen]:
            try:
                seen[run_key] = self.client.get_run(run_key)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                del self.tracked[run_key]  # expired (TTL) or its job is gone
        events: list[dict[str, Any]] = []
        for run_key, run in seen.items():
            signature = (run.get("state"), run.get("attempt"), run.get("redrives"), run.get("updatedAt"))
            if self.signatures.get(run_key) == signature:
                continue
            self.signatures[run_key] = signature
            if run.get("state") in OPEN_RUN_STATES:
                self.tracked[run_key] = run["jobId"]
            else:
                self.tracked.pop(run_key, None)
            if not self.started and not self.history:
                self.baseline[run_key] = run
                continue
            events += self._new_transitions(run_key, run, since=floor if not self.started else None)
        self.started = True
        events.sort(key=lambda e: (e["at"] or "", e["runKey"]))
        return events

    def _new_transitions(
        self, run_key: str, run: dict[str, Any], since: str | None = None
    ) -> list[dict[str, Any]]:
        detail = run if "transitions" in run else self.client.get_run(run_key)
        transitions = detail.get("transitions") or []
        if run_key in self.reported:
            start = self.reported[run_key]
        elif run_key in self.baseline:
            start = _after_baseline(transitions, self.baseline.pop(run_key))
        else:
            # First seen now that it is due: what happened before it was (or before the
            # history window) is no news.
            floor = max(since or "", str(run.get("scheduledFor") or ""))
            start = next(
                (i for i, t in enumerate(transitions) if (t.get("at") or "") >= floor), len(transitions)
            )
        self.reported[run_key] = len(transitions)
        job_id = detail.get("jobId") or run.get("jobId")
        return [
            {
                "at": t.get("at"),
                "jobId": job_id,
                "jobName": self.names.get(job_id or "", job_id),
                "runKey": run_key,
                "from": t.get("from"),
                "to": t.get("to"),
                "attempt": t.get("attempt"),
                "errorClass": t.get("errorClass"),
                "actor": t.get("actor"),
            }
            for t in transitions[start:]
        ]


def _after_baseline(transitions: list[dict[str, Any]], seen: dict[str, Any]) -> int:
    """Index of the first transition after the state the run was in when tail started."""
    for index in range(len(transitions) - 1, -1, -1):
        t = transitions[index]
        same = t.get("to") == seen.get("state") and t.get("attempt") == seen.get("attempt")
        if same and (t.get("at") or "") <= (seen.get("updatedAt") or ""):
            return index + 1
    return sum(1 for t in transitions if (t.get("at") or "") <= (seen.get("updatedAt") or ""))


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tail_line(event: dict[str, Any]) -> str:
    source = event.get("from") or "-"
    error = event.get("errorClass") or ""
    return (
        f"{short_time(event.get('at'))}  {str(event.get('jobName'))[:24]:<24}  {event['runKey']}  "
        f"{source:>10} → {event.get('to'):<10}  attempt {event.get('attempt')}  {error}"
    ).rstrip()


def utc_now() -> datetime:
    return datetime.now(UTC)


def cmd_tail(ctx: Context, args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise UsageError("--interval: must be > 0")
    if args.count is not None and args.count < 1:
        raise UsageError("--count: must be >= 1")
    if args.lookback is not None and args.lookback < 0:
        raise UsageError("--lookback: must be >= 0")
    history = args.lookback is not None
    lookback = args.lookback if history else TAIL_FOLLOW_SECONDS
    follower = RunFollower(ctx.client, args.jobs, lookback, utc_now, history=history)
    printed = 0
    try:
        while True:
            for event in follower.poll():
                print(json.dumps(event) if ctx.json else tail_line(event), flush=True)
                printed += 1
                if args.count is not None and printed >= args.count:
                    return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


# --- the API's own documentation ---


def cmd_docs(ctx: Context, args: argparse.Namespace) -> int:
    """/docs and /openapi.json need the same authentication as every other route (an API key
    in local mode, SigV4 on a stack), which a browser cannot add: fetch them here instead."""
    if ctx.json:
        print(json.dumps(ctx.client.openapi(), indent=2))
        return 0
    path = Path(args.output)
    path.write_text(ctx.client.docs_page(), encoding="utf-8")
    print(f"wrote {path} (Swagger UI with the API's OpenAPI document; open it in a browser)")
    if args.open:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
    return 0


# --- local mode ---


def cmd_local(args: argparse.Namespace) -> int:
    try:
        from .local.serve import serve
    except ImportError as exc:
        print(f"error: local mode is not available: {exc}", file=sys.stderr)
        return 1
    return serve(port=args.port, moto_port=args.moto_port, config_path=args.config, demo=args.demo)


# --- the parser ---


def add_client_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """On the top-level parser and again on every command, so options go before or after
    the command. Commands default to SUPPRESS so they never overwrite a top-level value."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("connection")
    group.add_argument(
        "--endpoint",
        default=default(None),
        help=f"API base URL (default: $JOBSCHED_URL or {DEFAULT_ENDPOINT})",
    )
    group.add_argument(
        "--api-key",
        default=default(None),
        help="x-api-key (default: $JOBSCHED_KEY, or local mode's dev key on a loopback endpoint)",
    )
    group.add_argument(
        "--sigv4",
        action="store_true",
        default=default(False),
        help="sign requests with AWS credentials (a deployed API with IAM auth)",
    )
    group.add_argument("--region", default=default(None), help="AWS region for --sigv4")
    group.add_argument(
        "--json", action="store_true", default=default(False), help="print the raw JSON answer"
    )


Handler = Callable[[Context, argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobsched", description="Durable multi-tenant job scheduler")
    add_client_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        group: Any, name: str, handler: Handler, help_text: str, **kw: Any
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(name, help=help_text, description=help_text, **kw)
        add_client_options(sub, top=False)
        sub.set_defaults(handler=handler)
        return sub

    local = commands.add_parser("local", help="run the whole scheduler on this machine")
    local.add_argument("--port", type=int, default=None, help="API port (default 8080)")
    local.add_argument("--moto-port", type=int, default=None, help="moto server port (default 5055)")
    local.add_argument("--config", default=None, help="JSON file with local settings (API keys, ...)")
    local.add_argument("--demo", action="store_true", help="create demo jobs and watch their runs")
    local.set_defaults(local=cmd_local)

    jobs = commands.add_parser("jobs", help="create, list and change jobs").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = command(jobs, "create", cmd_jobs_create, "create a job")
    create.add_argument("--name", required=True)
    create.add_argument("--type", required=True)
    add_job_options(create, create=True)
    create.add_argument("--idempotency-key", help="repeat-safe create: the same key returns the same job")

    listing = command(jobs, "list", cmd_jobs_list, "list jobs, newest first")
    listing.add_argument("--state", type=str.upper, choices=JOB_STATES)
    add_paging(listing)

    get = command(jobs, "get", cmd_jobs_get, "show one job")
    get.add_argument("job_id", metavar="JOB")

    update = command(jobs, "update", cmd_jobs_update, "change a job (JSON merge patch)")
    update.add_argument("job_id", metavar="JOB")
    update.add_argument("--if-match", help="the job's current version (default: fetched first)")
    update.add_argument("--name")
    update.add_argument("--type")
    add_job_options(update, create=False)

    actions = (("pause", "pause a job"), ("resume", "resume a paused job"), ("cancel", "cancel a job"))
    for name, text in actions:
        action = command(jobs, name, _job_action(name), text)
        action.add_argument("job_id", metavar="JOB")
        action.add_argument("--if-match", help="only if the job is still at this version")

    trigger = command(jobs, "trigger", cmd_jobs_trigger, "start a run now")
    trigger.add_argument("job_id", metavar="JOB")

    backfill = command(jobs, "backfill", cmd_jobs_backfill, "make runs for past occurrences")
    backfill.add_argument("job_id", metavar="JOB")
    backfill.add_argument("--start", required=True, help="RFC 3339 instant, now, or -DURATION (e.g. -2h)")
    backfill.add_argument("--end", required=True, help="RFC 3339 instant, now, or -DURATION (e.g. -30m)")

    summary = command(jobs, "summary", cmd_jobs_summary, "next fire times, last runs and counters")
    summary.add_argument("job_id", metavar="JOB")

    runs = commands.add_parser("runs", help="runs of a job and their history").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    runs_list = command(runs, "list", cmd_runs_list, "a job's runs, newest first")
    runs_list.add_argument("job_id", metavar="JOB")
    add_paging(runs_list)
    runs_get = command(runs, "get", cmd_runs_get, "one run with its transitions")
    runs_get.add_argument("run_key", metavar="RUNKEY")
    runs_cancel = command(runs, "cancel", cmd_runs_cancel, "cancel an open run")
    runs_cancel.add_argument("run_key", metavar="RUNKEY")

    dlq = commands.add_parser("dlq", help="dead-lettered runs").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    dlq_list = command(dlq, "list", cmd_dlq_list, "dead runs, newest first")
    add_paging(dlq_list)
    redrive = command(dlq, "redrive", cmd_dlq_redrive, "run a dead run again (same run key)")
    redrive.add_argument("run_key", metavar="RUNKEY")
    redrive.add_argument("--reason", help="recorded on the run's history")

    docs = command(
        commands, "docs", cmd_docs, "save the API's Swagger UI page (--json: the OpenAPI document)"
    )
    docs.add_argument("--output", default="jobsched-api-docs.html", help="where to write the page")
    docs.add_argument("--open", action="store_true", help="open the saved page in a browser")

    tail = command(commands, "tail", cmd_tail, "follow run state changes as they happen")
    tail.add_argument("jobs", nargs="*", metavar="JOB", help="jobs to follow (default: all of yours)")
    tail.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    tail.add_argument("--count", type=int, default=None, help="stop after this many lines")
    tail.add_argument(
        "--lookback",
        type=float,
        default=None,
        metavar="SECONDS",
        help="first show the transitions of the runs scheduled in the last SECONDS, then follow "
        "(default: only what happens from now on, following runs scheduled up to 300 s ago)",
    )
    return parser


def add_job_options(parser: argparse.ArgumentParser, *, create: bool) -> None:
    schedule = parser.add_mutually_exclusive_group(required=create)
    schedule.add_argument("--cron", help="5 fields, or 6 with leading seconds, or @daily, ...")
    schedule.add_argument("--every", help="interval: seconds, 15m, 1h30m, or ISO 8601 (PT15M)")
    schedule.add_argument("--at", help="one run at an RFC 3339 instant, or +DURATION from now")
    parser.add_argument("--tz", help="IANA time zone of --cron (default UTC)")
    parser.add_argument("--payload", help="JSON passed to the target, or @file")
    parser.add_argument("--target", help='target as JSON ({"kind": "http", ...}), or @file')
    parser.add_argument("--max-attempts", type=int)
    parser.add_argument("--priority", choices=PRIORITIES)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other field (dotted for nested: retry.baseSeconds=1); the value is JSON if it parses",
    )


def add_paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, help="page size, 1-100")
    parser.add_argument("--cursor", help="continue from a previous page")
    parser.add_argument("--all", action="store_true", help="fetch every page")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(attach_negative_values(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    if getattr(args, "local", None):
        return int(args.local(args))
    try:
        ctx = Context(args)
        return int(args.handler(ctx, args))
    except BrokenPipeError:
        # The reader went away (`jobsched runs list J | head`): it has what it wanted.
        _discard_stdout()
        return 0
    except UsageError as exc:
        print(f"jobsched: error: {exc}", file=sys.stderr)
        return 2
    except SigningUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(format_api_error(exc), file=sys.stderr)
        return 1
    except ApiUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not report the pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
