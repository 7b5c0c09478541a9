"""The argument parser: every command, its options and its help."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .commands import (
    DEFAULT_ENDPOINT,
    Context,
    _job_action,
    cmd_apply,
    cmd_calendars_delete,
    cmd_calendars_get,
    cmd_calendars_list,
    cmd_calendars_put,
    cmd_console,
    cmd_dlq_cancel,
    cmd_dlq_list,
    cmd_dlq_redrive,
    cmd_docs,
    cmd_doctor,
    cmd_events_tail,
    cmd_jobs_backfill,
    cmd_jobs_create,
    cmd_jobs_create_many,
    cmd_jobs_get,
    cmd_jobs_list,
    cmd_jobs_summary,
    cmd_jobs_trigger,
    cmd_jobs_update,
    cmd_local,
    cmd_runs_cancel,
    cmd_runs_get,
    cmd_runs_list,
    cmd_schedules_preview,
    cmd_tail,
)

JOB_STATES = ("ACTIVE", "PAUSED", "CANCELLED", "COMPLETED")
PRIORITIES = ("high", "default", "low")


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
    local.add_argument(
        "--handlers-path",
        action="append",
        default=None,
        metavar="DIR",
        help="a directory to import handler_modules from (repeatable; the current directory is searched too)",
    )
    local.add_argument(
        "--follow",
        choices=("mine", "all", "none"),
        default="mine",
        help="whose runs the live table shows: mine (default: the jobs created through this instance;"
        " the demo's recurring jobs for their first run only), all (every run of every tenant), none",
    )
    local.add_argument(
        "--verbose",
        action="store_true",
        help="also print the functions' Powertools JSON logs (from INFO, or $POWERTOOLS_LOG_LEVEL)",
    )
    local.set_defaults(local=cmd_local)

    doctor = commands.add_parser(
        "doctor",
        help="check the AWS account before a deploy (run from the repository root)",
        description="Deploy preflight: Lambda concurrency, API Gateway logging role, CDK bootstrap, "
        "quotas, the shard count in use and the cost at rest. Options after it go to the "
        "preflight (-c key=value, --region, --profile).",
        add_help=False,
    )
    # `jobsched doctor ...` is handed over whole before parsing (entry.main); this entry lists it.
    doctor.set_defaults(local=lambda _args: cmd_doctor([]))

    jobs = commands.add_parser("jobs", help="create, list and change jobs").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = command(jobs, "create", cmd_jobs_create, "create a job")
    create.add_argument("--name", required=True)
    create.add_argument("--type", required=True)
    add_job_options(create, create=True)
    create.add_argument("--idempotency-key", help="repeat-safe create: the same key returns the same job")

    many = command(
        jobs, "create-many", cmd_jobs_create_many, "create the jobs of a JSON Lines file, 100 per request"
    )
    many.add_argument(
        "file", metavar="FILE", help="one job body (as POST /v1/jobs takes it) per line; - for stdin"
    )
    many.add_argument(
        "--idempotency-key",
        help="repeat-safe: the job on line N gets the key KEY#N (unless it has its own idempotencyKey)",
    )

    listing = command(jobs, "list", cmd_jobs_list, "list jobs, newest first")
    listing.add_argument("--state", type=str.upper, choices=JOB_STATES)
    listing.add_argument(
        "--archived", action="store_true", help="archived jobs only (by default they are left out)"
    )
    add_paging(listing)

    get = command(jobs, "get", cmd_jobs_get, "show one job")
    get.add_argument("job_id", metavar="JOB")

    update = command(jobs, "update", cmd_jobs_update, "change a job (JSON merge patch)")
    update.add_argument("job_id", metavar="JOB")
    update.add_argument("--if-match", help="the job's current version (default: fetched first)")
    update.add_argument("--name")
    update.add_argument("--type")
    add_job_options(update, create=False)

    actions = (
        ("pause", "pause a job"),
        ("resume", "resume a paused job"),
        ("cancel", "cancel a job"),
        ("archive", "archive a cancelled or completed job (left out of lists)"),
    )
    for name, text in actions:
        action = command(jobs, name, _job_action(name), text)
        action.add_argument("job_id", metavar="JOB")
        action.add_argument("--if-match", help="only if the job is still at this version")

    trigger = command(jobs, "trigger", cmd_jobs_trigger, "start a run now")
    trigger.add_argument("job_id", metavar="JOB")

    backfill = command(jobs, "backfill", cmd_jobs_backfill, "make runs for past occurrences in [start, end)")
    backfill.add_argument("job_id", metavar="JOB")
    backfill.add_argument(
        "--start", required=True, help="included: RFC 3339 instant, now, or -DURATION (e.g. -2h)"
    )
    backfill.add_argument(
        "--end", required=True, help="excluded: RFC 3339 instant, now, or -DURATION (e.g. -30m)"
    )

    summary = command(jobs, "summary", cmd_jobs_summary, "next fire times, last runs and counters")
    summary.add_argument("job_id", metavar="JOB")

    schedules = commands.add_parser("schedules", help="schedules not saved").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    preview = command(
        schedules, "preview", cmd_schedules_preview, "a schedule's next fire times, and why any do not fire"
    )
    shape = preview.add_mutually_exclusive_group()
    shape.add_argument("--cron", help="5 fields, or 6 with leading seconds, or @daily, ...")
    shape.add_argument("--every", help="interval: seconds, 15m, 1h30m, or ISO 8601 (PT15M)")
    preview.add_argument("--tz", help="IANA time zone of --cron, specs and exclusions (default UTC)")
    preview.add_argument("--count", type=int, help="fire times to list, 1-100 (default 10)")
    preview.add_argument(
        "--after", help="list those after this RFC 3339 instant, or +/-DURATION (default now)"
    )
    preview.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help='any other schedule field as a job spells it: specs=\'[{"cron": "0 9 * * MON-FRI"}]\', '
        "exclude=..., dst.fold=both",
    )

    calendars = commands.add_parser(
        "calendars", help="the tenant's named calendars (dates jobs exclude, business-day holidays)"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    put = command(calendars, "put", cmd_calendars_put, "create a calendar, or replace all its entries")
    put.add_argument("name", metavar="NAME")
    put.add_argument("--date", action="append", default=[], metavar="YYYY-MM-DD", help="a day (repeatable)")
    put.add_argument(
        "--dates", action="append", default=[], metavar="FIRST..LAST", help="days, both included (repeatable)"
    )
    put.add_argument(
        "--entries",
        metavar="JSON",
        help='entries as JSON, or @file (@- for stdin): [{"date": ...}, {"start": ..., "end": ...}]',
    )
    command(calendars, "get", cmd_calendars_get, "a calendar's entries and its users").add_argument(
        "name", metavar="NAME"
    )
    command(calendars, "list", cmd_calendars_list, "the tenant's calendars")
    command(
        calendars, "delete", cmd_calendars_delete, "delete a calendar no active or paused job uses"
    ).add_argument("name", metavar="NAME")

    runs = commands.add_parser("runs", help="runs of a job and their history").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    runs_list = command(
        runs,
        "list",
        cmd_runs_list,
        "runs due by now, newest first: a job's, or with no JOB (or any filter) across jobs",
    )
    runs_list.add_argument("job_id", metavar="JOB", nargs="?")
    runs_list.add_argument(
        "--view",
        choices=("history", "upcoming", "all"),
        help="a JOB's runs only: history: due by now, newest first (default); upcoming: made ahead,"
        " soonest first; all: both",
    )
    runs_list.add_argument("--state", help="states, comma-separated (DEAD,RETRY_WAIT)")
    runs_list.add_argument("--type", dest="job_type", help="the job type")
    runs_list.add_argument("--trigger", choices=("schedule", "manual", "backfill"))
    runs_list.add_argument("--error", dest="error_class", help="the run's current error class (HTTP503)")
    runs_list.add_argument(
        "--time-field",
        choices=("scheduled", "finished"),
        help="what --since and --until bound (default: scheduled)",
    )
    runs_list.add_argument(
        "--since", help="RFC 3339 instant, now, -DURATION, or a bare DURATION meaning that long ago (1h)"
    )
    runs_list.add_argument("--until", help="RFC 3339 instant, now, +DURATION or -DURATION")
    add_paging(runs_list)
    runs_get = command(runs, "get", cmd_runs_get, "one run with its transitions")
    runs_get.add_argument("run_key", metavar="RUNKEY")
    runs_cancel = command(runs, "cancel", cmd_runs_cancel, "cancel an open run")
    runs_cancel.add_argument("run_key", metavar="RUNKEY")

    dlq = commands.add_parser("dead-letters", aliases=["dlq"], help="dead-lettered runs").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    dlq_list = command(dlq, "list", cmd_dlq_list, "dead runs, newest first")
    add_paging(dlq_list)
    redrive = command(
        dlq, "redrive", cmd_dlq_redrive, "run a dead run again (same run key), or all the filters keep"
    )
    cancel = command(dlq, "cancel", cmd_dlq_cancel, "dismiss dead runs (CANCELLED, never to run)")
    for bulk in (redrive, cancel):
        bulk.add_argument("run_key", metavar="RUNKEY", nargs="?")
        bulk.add_argument("--reason", help="recorded on each run's history")
        bulk.add_argument("--job", help="only this job's dead runs")
        bulk.add_argument(
            "--error", dest="error_class", help="only dead runs with this error class (HTTP503)"
        )
        bulk.add_argument(
            "--since",
            help="died at or after: RFC 3339, now, -DURATION, or a bare DURATION meaning that long ago (1h)",
        )
        bulk.add_argument("--until", help="died before: RFC 3339, now, +DURATION or -DURATION")
        bulk.add_argument("--dry-run", action="store_true", help="show what would change; change nothing")
        bulk.add_argument(
            "--accept-repeated-effect",
            action="store_true",
            help="redrive at-most-once runs whose effect may have run (it runs again)",
        )
    redrive.add_argument(
        "--payload", help="run with this payload instead (JSON, or @file; null sets null); --job or RUNKEY"
    )
    redrive.add_argument(
        "--target",
        help="run with this target instead (JSON, or @file; the job keeps its own); --job or RUNKEY",
    )

    docs = command(
        commands, "docs", cmd_docs, "save the API's Swagger UI page (--json: the OpenAPI document)"
    )
    docs.add_argument("--output", default="jobsched-api-docs.html", help="where to write the page")
    docs.add_argument("--open", action="store_true", help="open the saved page in a browser")

    apply = command(
        commands,
        "apply",
        cmd_apply,
        "make the jobs a TOML file names match the server: print the plan (create, change,"
        " unchanged, cancel), then carry it out",
    )
    apply.add_argument("file", metavar="FILE", help="the jobs file (TOML: set = ..., [[jobs]] ...)")
    apply.add_argument("--dry-run", action="store_true", help="print the plan and stop: nothing is written")

    console = command(
        commands,
        "console",
        cmd_console,
        "serve the run console on 127.0.0.1, forwarding its API calls to --endpoint "
        "(signed with --sigv4: a deployed stack)",
    )
    console.add_argument("--port", type=int, default=8090, help="local port (default 8090)")
    console.add_argument("--open", action="store_true", help="open the console in a browser")

    events = commands.add_parser("events", help="run and job events (local mode)").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    events_tail = command(
        events,
        "tail",
        cmd_events_tail,
        "print your run and job events as local mode's event bus receives them",
    )
    events_tail.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        help="only this type (run.dead, or jobsched.run.dead); repeat for more",
    )
    events_tail.add_argument("--from-start", action="store_true", help="first the events the bus still holds")
    events_tail.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    events_tail.add_argument("--count", type=int, default=None, help="stop after this many events")

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
