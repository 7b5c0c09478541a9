"""How the CLI prints what the API answers: tables, fields, errors and tail lines.

Answers arrive as the server's own models (`jobsched.client`); each is printed from its wire
form (`wire`): the names, instants and values exactly as the API spells them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from jobsched.api_models.problems import problems_of
from jobsched.api_models.views import AttemptView, CalendarSummaryView, CalendarView, PreviewLineView
from jobsched.client import ApiError, JobList, JobView, RunList, RunSummaryList, RunSummaryView, RunView
from jobsched.client.apply import Action, ApplyResult, Outcome, Plan
from pydantic import BaseModel, ValidationError


def wire(model: BaseModel) -> dict[str, Any]:
    """The model as the API sends it: camelCase names, RFC 3339 instants, nulls included."""
    return model.model_dump(mode="json", by_alias=True)


def refused_here(exc: ValidationError) -> ApiError:
    """A request body the client refused before sending it (a value not of the field's
    type), as the API's own 400 would name each field and rule."""
    problems = problems_of(exc.errors())
    body = {
        "code": "invalid_request",
        "message": "; ".join(str(p) for p in problems),
        "errors": [{"field": p.field, "rule": p.rule} for p in problems],
    }
    return ApiError.of(400, body)


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
    """The error's status, code and message, then each field's rule once: the API's message
    for a 400 joins the rules (`cron: bad; timeZone: unknown`), so with rules to list the
    message is not repeated, and a single rule stays on the first line."""
    items = [f"{item.field}: {item.rule}" for item in error.errors]
    if len(items) == 1:
        lines = [f"error: {error.status} {error.code}: {items[0]}"]
    elif items:
        lines = [f"error: {error.status} {error.code}", *(f"  {item}" for item in items)]
    else:
        lines = [f"error: {error.status} {error.code}: {error.message}"]
    if items and error.message and error.message != "; ".join(items):
        lines.append(f"  ({error.message})")
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
    """A job's schedule from its wire form (a union's specs joined by ` | `)."""
    if job.get("specs"):
        return " | ".join(schedule_of(spec) for spec in job["specs"])
    if job.get("monthly"):
        return f"monthly {job['monthly']} at {job.get('at')} ({job.get('timeZone') or 'UTC'})"
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


def job_fields(model: JobView) -> list[tuple[str, Any]]:
    job = wire(model)
    first = ["jobId", "name", "type", "state", "version"]
    fields: list[tuple[str, Any]] = [(k, job.get(k)) for k in first]
    fields.append(("schedule", schedule_of(job)))
    skip = {*first, "cron", "timeZone", "every", "specs", "runAt", "nextFireTimes", "upcomingFireTimes"}
    fields += [(k, v) for k, v in job.items() if k not in skip]
    for index, instant in enumerate(job.get("nextFireTimes") or []):
        fields.append(("nextFireTimes" if index == 0 else "", instant))
    return fields


def job_details(model: JobView) -> str:
    """A job's fields, then, when the answer has them (`jobs get`), its upcoming fire times
    as a preview table: each line firing or excluded, and why."""
    text = format_fields(job_fields(model))
    lines = model.upcoming_fire_times
    if lines is None:
        return text
    if not lines:
        return f"{text}\n\nupcoming fire times: none"
    return f"{text}\n\nupcoming fire times:\n{preview_table(lines)}"


def jobs_table(jobs: Iterable[JobView]) -> str:
    rows = [
        (j.get("jobId"), j.get("name"), j.get("type"), schedule_of(j), j.get("state"), j.get("nextRunAt"))
        for j in map(wire, jobs)
    ]
    return format_table(["JOB ID", "NAME", "TYPE", "SCHEDULE", "STATE", "NEXT RUN"], rows)


# Why a run was SKIPPED, by the reason the run records (domain.lifecycle, services.materialize).
SKIP_REASONS = {
    "overlap": "an earlier run was still open (overlap)",
    "paused": "missed while its job was paused",
    "misfire": "missed (missedRuns)",
    "expired": "older than the catch-up window",
}


def skip_reason(run: dict[str, Any]) -> str | None:
    """A SKIPPED run's reason in words (wire form), with how many occurrences its record
    stands for when more than one; None for a run in any other state."""
    if run.get("state") != "SKIPPED":
        return None
    reason = run.get("reason")
    words = f"skipped: {SKIP_REASONS.get(reason, reason)}" if reason else "skipped"
    count = run.get("skippedCount")
    return f"{words} ({count} occurrences)" if count and count > 1 else words


def preview_table(lines: Iterable[PreviewLineView]) -> str:
    """A schedule preview: each instant, whether it fires (or is excluded), which specs, why."""
    rows = [
        (
            wire(line)["at"],
            "fires" if line.fires else "excluded",
            "-" if line.specs is None else ",".join(str(i) for i in line.specs),
            line.reason or "",
        )
        for line in lines
    ]
    return format_table(["AT", "", "SPECS", "WHY"], rows)


def calendars_table(calendars: Iterable[CalendarSummaryView]) -> str:
    rows = [(c["name"], c["entryCount"], c["version"], c["updatedAt"]) for c in map(wire, calendars)]
    return format_table(["NAME", "ENTRIES", "VERSION", "UPDATED"], rows)


def calendar_fields(calendar: CalendarView) -> list[tuple[str, Any]]:
    """A calendar's fields, then one line per entry (a date, dates FIRST..LAST, or instants)."""
    shown = wire(calendar)
    fields: list[tuple[str, Any]] = [
        (name, shown[name]) for name in ("name", "version", "usedBy", "entryCount", "updatedAt")
    ]
    for index, entry in enumerate(shown["entries"]):
        if entry["date"] is not None:
            text = entry["date"]
        elif entry["startDate"] is not None:
            text = f"{entry['startDate']}..{entry['endDate']}"
        else:
            text = f"{entry['start']} until {entry['end']}"
        fields.append(("entries" if index == 0 else "", text))
    return fields


def runs_table(runs: Iterable[RunView]) -> str:
    """One row per run; ERROR is the run's error, or why it was skipped or cancelled;
    WAITING FOR says why an open run is not running (the API's waitingFor)."""
    rows = [
        (
            r.get("runKey"),
            r.get("state"),
            r.get("trigger"),
            r.get("attempt"),
            r.get("lastErrorClass") or skip_reason(r) or r.get("reason"),
            r.get("waitingFor"),
        )
        for r in map(wire, runs)
    ]
    return format_table(["RUN KEY", "STATE", "TRIGGER", "ATTEMPT", "ERROR", "WAITING FOR"], rows)


def run_summaries_table(runs: Iterable[RunSummaryView]) -> str:
    """One row per run of a listing across jobs (`GET /v1/runs`); ERROR as in runs_table."""
    rows = [
        (
            r.get("runKey"),
            r.get("state"),
            r.get("trigger"),
            r.get("attempts"),
            r.get("startedAt"),
            r.get("finishedAt"),
            r.get("errorClass") or skip_reason(r) or r.get("reason"),
        )
        for r in map(wire, runs)
    ]
    return format_table(["RUN KEY", "STATE", "TRIGGER", "ATTEMPTS", "STARTED", "FINISHED", "ERROR"], rows)


def attempts_table(attempts: Iterable[AttemptView]) -> str:
    """The run's attempts as the API returns them: one per claim, its outcome and error."""
    rows = [
        (
            a.get("attempt"),
            a.get("fence"),
            a.get("startedAt"),
            a.get("endedAt"),
            a.get("outcome"),
            a.get("errorClass"),
        )
        for a in map(wire, attempts)
    ]
    return format_table(["ATTEMPT", "FENCE", "STARTED", "ENDED", "OUTCOME", "ERROR"], rows)


def with_more(table: str, page: JobList | RunList | RunSummaryList) -> str:
    if page.next_cursor:
        table += f"\n(more: --all, or --cursor {page.next_cursor})"
    return table


def event_line(event: dict[str, Any]) -> str:
    """One CloudEvent (domain.events) as a line: time, type, subject, what it says."""
    data = event.get("data") or {}
    kind = str(event.get("type", "")).removeprefix("jobsched.")
    if kind.startswith("run."):
        moved = f"{data.get('from') or '-'} → {data.get('state')}"
        detail = f"{moved}  attempt {data.get('attempt')}  {data.get('actor')}"
    else:
        detail = f"{data.get('name')}  v{data.get('version')}  {data.get('state')}  {data.get('actor')}"
    error = data.get("errorClass") or ""
    return f"{short_time(event.get('time'))}  {kind:<14}  {event.get('subject')}  {detail}  {error}".rstrip()


def tail_line(event: dict[str, Any]) -> str:
    source = event.get("from") or "-"
    error = event.get("errorClass") or ""
    return (
        f"{short_time(event.get('at'))}  {str(event.get('jobName'))[:24]:<24}  {event['runKey']}  "
        f"{source:>10} → {event.get('to'):<10}  attempt {event.get('attempt')}  {error}"
    ).rstrip()


def plan_lines(planned: Plan, source: str) -> str:
    """The plan for a jobs file: a count of each action, then a row per job (the version a
    change or cancel is conditioned on, the fields a change changes)."""
    counts = ", ".join(f"{planned.count(action)} {action.value}" for action in Action)
    rows = [
        (step.action.value, step.name, step.job_id, step.version, ",".join(step.changed) or None)
        for step in planned.steps
    ]
    table = format_table(["ACTION", "NAME", "JOB", "VERSION", "CHANGES"], rows) if rows else "(no jobs)"
    return f"plan for set {planned.set_name!r} ({source}): {counts}\n{table}"


def apply_lines(result: ApplyResult) -> str:
    """What applying did: a row per step that wrote or was refused, then a closing line."""
    rows = [
        (r.outcome.value, r.step.action.value, r.step.name, r.job_id, r.version, r.error)
        for r in result.results
        if r.step.action is not Action.UNCHANGED or r.outcome is not Outcome.DONE
    ]
    lines = [format_table(["OUTCOME", "ACTION", "NAME", "JOB", "VERSION", "ERROR"], rows)] if rows else []
    if result.ok:
        lines.append("applied" if rows else "nothing to change")
    else:
        lines.append(
            "not all applied: a conflict is a job changed on the server since the plan read it"
            " (left as it is: apply again to plan against it); a failure is the server's refusal"
        )
    return "\n".join(lines)
