"""The commands: each takes the parsed arguments, calls the API through `jobsched.client.Client`
and prints the answer (the server's own models, printed in the API's spelling)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from jobsched.client import (
    MAX_BATCH_JOBS,
    ApiError,
    BulkDeadLettersBody,
    BulkDeadLettersView,
    Client,
    JobList,
    RunList,
    RunSummaryList,
)
from jobsched.client.api import RunsView
from jobsched.client.apply import ApplyResult, execute, plan, read_jobs_file
from jobsched.client.http import is_loopback
from jobsched_local.keys import DEV_KEY
from pydantic import BaseModel

from .follow import RunFollower
from .rendering import (
    apply_lines,
    attempts_table,
    calendar_fields,
    calendars_table,
    event_line,
    format_fields,
    format_table,
    job_details,
    job_fields,
    jobs_table,
    plan_lines,
    preview_table,
    run_summaries_table,
    runs_table,
    tail_line,
    wire,
    with_more,
)
from .values import (
    UsageError,
    deep_merge,
    parse_assignments,
    parse_every,
    parse_instant,
    parse_json_arg,
    parse_since,
)

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
TAIL_FOLLOW_SECONDS = 300.0  # without --lookback, tail follows runs scheduled up to this long ago
Page = TypeVar("Page", JobList, RunList, RunSummaryList)


class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.json: bool = bool(getattr(args, "json", False))
        endpoint = args.endpoint or os.environ.get("JOBSCHED_URL") or DEFAULT_ENDPOINT
        key = args.api_key or os.environ.get("JOBSCHED_KEY") or None
        if key is None and not args.sigv4 and is_loopback(endpoint):
            key = DEV_KEY  # local mode's default key; never sent anywhere else
        self.client = Client(endpoint, api_key=key, sigv4=bool(args.sigv4), region=args.region)

    def emit(self, data: BaseModel | dict[str, Any], human: Callable[[], str]) -> int:
        """`--json`: the answer as the API sent it; else what `human` makes of it."""
        if self.json:
            print(json.dumps(wire(data) if isinstance(data, BaseModel) else data, indent=2))
        else:
            text = human()
            if text:
                print(text)
        return 0


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


def read_job_lines(path: str) -> list[dict[str, Any]]:
    """The job bodies of a JSON Lines file (blank lines skipped), or a UsageError naming the line."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    bodies: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(body, dict):
            raise UsageError(f"{path}:{number}: a job is a JSON object")
        bodies.append(body)
    return bodies


def cmd_jobs_create_many(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/jobs/batch, MAX_BATCH_JOBS lines at a time. Prints one line per job (created,
    replayed or refused, by its line's position among the jobs); exits 1 if any was refused."""
    bodies = read_job_lines(args.file)
    if args.idempotency_key:
        bodies = [{"idempotencyKey": f"{args.idempotency_key}#{n}", **body} for n, body in enumerate(bodies)]
    items: list[dict[str, Any]] = []
    lines: list[str] = []
    for start in range(0, len(bodies), MAX_BATCH_JOBS):
        answer = ctx.client.create_jobs(bodies[start : start + MAX_BATCH_JOBS])
        for item in answer.items:
            position = start + item.index
            shown = wire(item)
            items.append({**shown, "index": position})
            if item.job is not None:
                verb = "created" if item.status == 201 else "replayed"
                lines.append(f"{position}: {verb} {item.job.job_id} {item.job.name}")
            elif item.error is not None:
                lines.append(f"{position}: refused {item.status} {item.error.code}: {item.error.message}")
    statuses = [item["status"] for item in items]
    created, replayed = statuses.count(201), statuses.count(200)
    summary = {
        "items": items,
        "created": created,
        "replayed": replayed,
        "refused": len(items) - created - replayed,
    }
    ctx.emit(
        summary,
        lambda: "\n".join([*lines, f"{created} created, {replayed} replayed, {summary['refused']} refused"]),
    )
    return 1 if summary["refused"] else 0


def listing(fetch: Callable[[str | None], Page], cursor: str | None, all_pages: bool) -> Page:
    """The page at `cursor`; with `all_pages`, that page and every one after it as one page
    (each fetched with the same limit: the API's default unless --limit)."""
    page = fetch(cursor)
    if not all_pages:
        return page
    items = list(page.items)
    while page.next_cursor:
        page = fetch(page.next_cursor)
        items += page.items
    return page.model_copy(update={"items": items, "next_cursor": None})


def cmd_jobs_list(ctx: Context, args: argparse.Namespace) -> int:
    page = listing(
        lambda cursor: ctx.client.list_jobs(
            state=args.state, limit=args.limit, cursor=cursor, archived=args.archived
        ),
        args.cursor,
        args.all,
    )
    return ctx.emit(page, lambda: with_more(jobs_table(page.items), page))


def cmd_jobs_get(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client.get_job(args.job_id)
    return ctx.emit(job, lambda: job_details(job))


def cmd_jobs_update(ctx: Context, args: argparse.Namespace) -> int:
    patch = job_body(args)
    if not patch:
        raise UsageError("nothing to change: give --set key=value (or --name, --cron, ...)")
    version = args.if_match
    if version is None:
        version = ctx.client.get_job(args.job_id).version
        print(f"note: no --if-match given; using the current version {version}", file=sys.stderr)
    job = ctx.client.update_job(args.job_id, patch, version=version)
    return ctx.emit(job, lambda: format_fields(job_fields(job)))


def _job_action(name: str) -> Callable[[Context, argparse.Namespace], int]:
    def run(ctx: Context, args: argparse.Namespace) -> int:
        actions = {
            "pause": ctx.client.pause_job,
            "resume": ctx.client.resume_job,
            "cancel": ctx.client.cancel_job,
            "archive": ctx.client.archive_job,
        }
        job = actions[name](args.job_id, version=args.if_match)
        return ctx.emit(job, lambda: f"{job.job_id}  {job.state}  version {job.version}")

    return run


def cmd_jobs_trigger(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.trigger_job(args.job_id)
    return ctx.emit(run, lambda: f"triggered {run.run_key}  {run.state}")


def cmd_jobs_backfill(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.client.backfill_job(args.job_id, parse_instant(args.start), parse_instant(args.end))

    def human() -> str:
        created, existing = result.created, result.existing
        lines = [f"created {len(created)} run(s); {len(existing)} already existed"]
        lines += [f"  {key}" for key in created]
        return "\n".join(lines)

    return ctx.emit(result, human)


def cmd_jobs_summary(ctx: Context, args: argparse.Namespace) -> int:
    summary = ctx.client.job_summary(args.job_id)

    def human() -> str:
        shown = wire(summary)
        fields = [("jobId", shown["jobId"]), *shown["counters"].items()]
        for index, instant in enumerate(shown["nextFireTimes"]):
            fields.append(("nextFireTimes" if index == 0 else "", instant))
        return format_fields(fields) + "\n\nlast runs:\n" + runs_table(summary.last_runs)

    return ctx.emit(summary, human)


def cmd_schedules_preview(ctx: Context, args: argparse.Namespace) -> int:
    if args.tz and not (args.cron or args.set):
        raise UsageError("--tz: only applies with --cron, or with specs or exclude given by --set")
    named = {
        "cron": args.cron,
        "timeZone": args.tz,
        "every": parse_every(args.every) if args.every is not None else None,
        "count": args.count,
        "after": parse_instant(args.after) if args.after is not None else None,
    }
    body = deep_merge({k: v for k, v in named.items() if v is not None}, parse_assignments(args.set or []))
    shown = ctx.client.preview_schedule(body)
    return ctx.emit(shown, lambda: preview_table(shown.fire_times))


def calendar_entries(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The entries a `calendars put` names: `--entries` (a JSON list, or `{"entries": [...]}`,
    or `@file`), then each `--date` and each `--dates FIRST..LAST`."""
    entries: list[dict[str, Any]] = []
    if args.entries is not None:
        given = parse_json_arg("--entries", args.entries)
        given = given.get("entries") if isinstance(given, dict) else given
        if not isinstance(given, list):
            raise UsageError('--entries: expected a JSON list of entries, or {"entries": [...]}')
        entries += given
    entries += [{"date": day} for day in args.date]
    for span in args.dates:
        first, separator, last = span.partition("..")
        if not separator or not first or not last:
            raise UsageError(f"--dates {span!r}: expected FIRST..LAST, e.g. 2026-12-20..2027-01-03")
        entries.append({"startDate": first, "endDate": last})
    return entries


def cmd_calendars_put(ctx: Context, args: argparse.Namespace) -> int:
    calendar = ctx.client.put_calendar(args.name, calendar_entries(args))
    return ctx.emit(calendar, lambda: format_fields(calendar_fields(calendar)))


def cmd_calendars_get(ctx: Context, args: argparse.Namespace) -> int:
    calendar = ctx.client.get_calendar(args.name)
    return ctx.emit(calendar, lambda: format_fields(calendar_fields(calendar)))


def cmd_calendars_list(ctx: Context, args: argparse.Namespace) -> int:
    listed = ctx.client.list_calendars()
    return ctx.emit(listed, lambda: calendars_table(listed.items))


def cmd_calendars_delete(ctx: Context, args: argparse.Namespace) -> int:
    deleted = ctx.client.delete_calendar(args.name)
    return ctx.emit(deleted, lambda: f"deleted {deleted.name}  version {deleted.version}")


def cmd_runs_list(ctx: Context, args: argparse.Namespace) -> int:
    filters = {
        "state": args.state,
        "type": args.job_type,
        "trigger": args.trigger,
        "errorClass": args.error_class,
        "timeField": args.time_field,
        "since": parse_since(args.since) if args.since else None,
        "until": parse_instant(args.until) if args.until else None,
    }
    if args.job_id is not None and not any(filters.values()):
        view: RunsView = args.view or "history"
        runs = listing(
            lambda cursor: ctx.client.list_runs(args.job_id, view=view, limit=args.limit, cursor=cursor),
            args.cursor,
            args.all,
        )
        return ctx.emit(runs, lambda: with_more(runs_table(runs.items), runs))
    if args.view is not None:
        raise UsageError("--view lists one JOB's runs: it does not combine with the filters")
    page = listing(
        lambda cursor: ctx.client.list_runs_across_jobs(
            state=filters["state"],
            job_id=args.job_id,
            job_type=filters["type"],
            trigger=filters["trigger"],
            error_class=filters["errorClass"],
            time_field=filters["timeField"],
            since=filters["since"],
            until=filters["until"],
            limit=args.limit,
            cursor=cursor,
        ),
        args.cursor,
        args.all,
    )
    return ctx.emit(page, lambda: with_more(run_summaries_table(page.items), page))


def cmd_runs_get(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.get_run(args.run_key)

    def human() -> str:
        shown = wire(run)
        # `definitionAvailable` only when it is false: then `target` and `payload` are not the run's.
        skip = {"attempts", "transitions"} | ({"definitionAvailable"} if run.definition_available else set())
        fields = format_fields((k, v) for k, v in shown.items() if k not in skip)
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
            for t in shown["transitions"]
        ]
        headers = ["AT", "ACTOR", "FROM", "TO", "FENCE", "ATTEMPT", "ERROR", "DETAIL"]
        attempts = attempts_table(run.attempts)
        return f"{fields}\n\nattempts:\n{attempts}\n\ntransitions:\n{format_table(headers, rows)}"

    return ctx.emit(run, human)


def cmd_runs_cancel(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.cancel_run(args.run_key)
    return ctx.emit(run, lambda: f"{run.run_key}  {run.state}")


def cmd_dlq_list(ctx: Context, args: argparse.Namespace) -> int:
    page = listing(
        lambda cursor: ctx.client.list_dead_letters(limit=args.limit, cursor=cursor), args.cursor, args.all
    )

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
            for r in map(wire, page.items)
        ]
        headers = ["RUN KEY", "ATTEMPT", "REDRIVES", "ERROR", "MESSAGE", "FINISHED"]
        return with_more(format_table(headers, rows), page)

    return ctx.emit(page, human)


def cmd_dlq_redrive(ctx: Context, args: argparse.Namespace) -> int:
    if args.run_key is not None and not _bulk_asked(args):
        run = ctx.client.redrive_run(args.run_key, reason=args.reason, **_fix(args))
        return ctx.emit(run, lambda: f"redriven {run.run_key}  {run.state}  redrives {run.redrives}")
    return _bulk(ctx, args, "redrive")


def _fix(args: argparse.Namespace) -> dict[str, Any]:
    """A redrive's `--payload`/`--target` as the API names them; empty when neither is given."""
    fix: dict[str, Any] = {}
    if getattr(args, "payload", None) is not None:
        fix["payload"] = parse_json_arg("--payload", args.payload)
    if getattr(args, "target", None) is not None:
        fix["target"] = parse_json_arg("--target", args.target)
    return fix


def cmd_dlq_cancel(ctx: Context, args: argparse.Namespace) -> int:
    return _bulk(ctx, args, "cancel")


def _bulk_asked(args: argparse.Namespace) -> bool:
    return any(
        (args.job, args.error_class, args.since, args.until, args.dry_run, args.accept_repeated_effect)
    )


def _bulk(ctx: Context, args: argparse.Namespace, action: str) -> int:
    """A bulk request over the dead letters: the named RUNKEY, or those the filters keep,
    every page of them (each page one audited request) unless it is a dry run."""
    if args.run_key is None and not any((args.job, args.error_class, args.since, args.until)):
        raise UsageError("name a RUNKEY or filter the dead letters (--job, --error, --since, --until)")
    body: dict[str, Any] = {"reason": args.reason or f"{action} from the CLI", "dryRun": args.dry_run}
    if args.run_key is not None:
        body["runKeys"] = [args.run_key]
    for name, value in (
        ("jobId", args.job),
        ("errorClass", args.error_class),
        ("since", parse_since(args.since) if args.since else None),
        ("until", parse_instant(args.until) if args.until else None),
    ):
        if value is not None:
            body[name] = value
    if args.accept_repeated_effect:
        body["acceptRepeatedEffect"] = True
    body.update(_fix(args))
    send = ctx.client.redrive_dead_letters if action == "redrive" else ctx.client.cancel_dead_letters

    def page(cursor: str | None) -> BulkDeadLettersView:
        fields = body if cursor is None else {**body, "cursor": cursor}
        return send(BulkDeadLettersBody.model_validate(fields))

    outcomes = [page(None)]
    while outcomes[-1].next_cursor and not args.dry_run:
        outcomes.append(page(outcomes[-1].next_cursor))
    changed = [key for o in outcomes for key in o.run_keys]
    refused = [wire(r) for o in outcomes for r in o.refused]
    result = {
        "requestIds": [o.request_id for o in outcomes],
        "dryRun": args.dry_run,
        "count": len(changed),
        "runKeys": changed,
        "refused": refused,
        "more": bool(outcomes[-1].next_cursor),
    }

    def human() -> str:
        verb = {"redrive": "redriven", "cancel": "cancelled"}[action]
        lines = [f"{'would be ' if args.dry_run else ''}{verb}: {len(changed)}", *changed]
        lines += [f"refused {r['runKey']}: {r['code']} {r['message']}" for r in refused]
        if result["more"]:
            lines.append("(more match: a dry run shows the first page)")
        return "\n".join(lines)

    return ctx.emit(result, human)


# --- tail ---


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


def cmd_events_tail(ctx: Context, args: argparse.Namespace) -> int:
    """Local mode: print the tenant's events as the bus receives them (`--from-start`: those
    it still holds first)."""
    if args.interval <= 0:
        raise UsageError("--interval: must be > 0")
    if args.count is not None and args.count < 1:
        raise UsageError("--count: must be >= 1")
    kinds = set(args.type or [])
    try:
        cursor = 0 if args.from_start else _newest(ctx.client, 0)
    except ApiError as exc:
        if exc.status == 404:
            raise UsageError(
                "events tail reads local mode's copy of the event bus; a deployed stack's events are"
                " read from its bus (a rule to your queue or log group: docs/concepts/events.md)"
            ) from None
        raise
    printed = 0
    try:
        while True:
            page = ctx.client.local_events(cursor)
            cursor = int(page["cursor"])
            for event in page["items"]:
                if kinds and not kinds & {
                    event.get("type"),
                    str(event.get("type")).removeprefix("jobsched."),
                }:
                    continue
                print(json.dumps(event) if ctx.json else event_line(event), flush=True)
                printed += 1
                if args.count is not None and printed >= args.count:
                    return 0
            if not page["items"]:
                time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def _newest(client: Client, cursor: int) -> int:
    """The cursor past every event the bus already holds for the caller."""
    while True:
        page = client.local_events(cursor)
        if int(page["cursor"]) == cursor:
            return cursor
        cursor = int(page["cursor"])


# --- the API's own documentation ---


def cmd_apply(ctx: Context, args: argparse.Namespace) -> int:
    """Make the set of jobs a file names match the server: print the plan, and unless
    --dry-run carry it out. Exits 1 when a step met a conflict or was refused (the others are
    done); an invalid file is refused whole, before anything is sent."""
    try:
        jobs_file = read_jobs_file(args.file)
    except OSError as exc:
        raise UsageError(f"{args.file}: cannot read it ({exc.strerror or exc})") from None
    planned = plan(ctx.client, jobs_file)
    if not ctx.json:
        print(plan_lines(planned, args.file), flush=True)
    result = ApplyResult.planned(planned) if args.dry_run else execute(ctx.client, planned)
    if ctx.json:
        print(json.dumps(result.as_json(), indent=2))
    elif args.dry_run:
        print("dry run: nothing written")
    else:
        print(apply_lines(result))
    return 0 if result.ok else 1


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


def cmd_console(ctx: Context, args: argparse.Namespace) -> int:
    """The run console for the API at --endpoint: its files on 127.0.0.1, its calls signed."""
    from jobsched_console.proxy import serve

    if ctx.client.sigv4:
        ctx.client.connection.prepare("GET", "/v1/jobs")  # no credentials or region: say so now
    return serve(ctx.client.connection, args.port, open_browser=args.open)


def cmd_doctor(argv: list[str]) -> int:
    """The deploy preflight (infra.doctor) with `argv`, from a checkout of the repository: it
    synthesizes the stack, so it needs infra/ and the dev extra (aws-cdk-lib)."""
    root = os.getcwd()
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        # By name: infra/ is the repository's, not part of the installed package.
        doctor = importlib.import_module("infra.doctor").main
    except ImportError as exc:
        print(
            f"error: the preflight runs from the repository root with the dev tools (make venv): {exc}",
            file=sys.stderr,
        )
        return 1
    return int(doctor(list(argv)))


def cmd_local(args: argparse.Namespace) -> int:
    try:
        from jobsched_local.serve import serve
    except ImportError as exc:
        print(f"error: local mode is not available: {exc}", file=sys.stderr)
        return 1
    return serve(
        port=args.port,
        moto_port=args.moto_port,
        config_path=args.config,
        demo=args.demo,
        follow=args.follow,
        handlers_path=args.handlers_path,
        verbose=args.verbose,
    )
