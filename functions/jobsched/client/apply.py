"""Schedules kept in code: a file naming a tenant's jobs, and `apply`, which makes the server's
jobs match it.

The file is TOML (read with the standard library's `tomllib`: comments for reviewers, no new
dependency): a `set` naming which of the tenant's jobs the file owns, and `[[jobs]]`, each a
job as `POST /v1/jobs` takes it (the API's `JobBody`, so a job is checked by the server's own
rules and an error names its field).

Ownership: a job `apply` creates is stored under the name `apply:<set>/<name>`
(`managed_name`). Only jobs whose stored name carries the set's prefix are compared with the
file, changed or cancelled; every other job of the tenant is never touched. The job model has
no labels, so the name is the one marker stored with the job itself (the prefix is reserved
for `apply`; a job created by hand under it is treated as the set's)."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..api_models.problems import problems_of
from ..api_models.requests import JobBody
from ..api_models.views import JobFieldsView, JobView
from ..domain.errors import FieldProblem, ValidationFailed
from ..domain.models import Job, JobState
from .api import Client
from .errors import ApiError, Invalid, VersionMismatch

PREFIX = "apply:"
SET_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
FILE_KEYS = ("set", "jobs")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LIVE = (JobState.ACTIVE, JobState.PAUSED)


def managed_name(set_name: str, name: str) -> str:
    """The name a job of `set_name` is stored under: `apply:<set>/<name>`."""
    return f"{PREFIX}{set_name}/{name}"


@dataclass(frozen=True)
class JobsFile:
    """A checked jobs file: the set it owns and its jobs, by the names the file gives them."""

    set_name: str
    jobs: dict[str, JobBody]


def read_jobs_file(path: str | Path) -> JobsFile:
    """The jobs file at `path` (TOML), checked whole. Raises Invalid (status 400, field
    `file` for TOML it cannot read) as `parse_jobs_file` does."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise _invalid([FieldProblem("file", f"is not valid TOML ({exc})")], str(path)) from None
    return parse_jobs_file(data, source=str(path))


def parse_jobs_file(data: Mapping[str, Any], *, source: str = "jobs file") -> JobsFile:
    """The file's content (a TOML or JSON document as a mapping) checked whole: `set` (1-63
    of a-z 0-9 . _ -, starting with a letter or digit), and `jobs`, each a job body under the
    rules the API applies to a create (its stored name, `managed_name`, included), names
    unique, no `idempotencyKey` (apply keys its own creates).

    Raises Invalid (status 400, code `invalid_request`) listing every problem, each field
    spelled `jobs[i].<field>` and the message naming the job; nothing is sent."""
    problems: list[FieldProblem] = []
    labels: list[str] = []
    for key in data:
        if key not in FILE_KEYS:
            problems.append(FieldProblem(str(key), "is not a known field (set, jobs)"))
    set_name = data.get("set")
    if not isinstance(set_name, str) or not SET_PATTERN.fullmatch(set_name):
        problems.append(
            FieldProblem("set", "is required: 1-63 of a-z 0-9 . _ -, starting with a letter or digit")
        )
        set_name = "set"
    raw_jobs = data.get("jobs", [])
    if not isinstance(raw_jobs, list):
        problems.append(FieldProblem("jobs", "must be an array of tables ([[jobs]])"))
        raw_jobs = []
    jobs: dict[str, JobBody] = {}
    first_index: dict[str, int] = {}
    for index, raw in enumerate(raw_jobs):
        where = f"jobs[{index}]"
        name = raw.get("name") if isinstance(raw, dict) else None
        label = f'{where} "{name}"' if isinstance(name, str) else where
        found = _job_problems(raw, set_name)
        if isinstance(name, str) and name in first_index:
            found.append(FieldProblem("name", f"names the same job as jobs[{first_index[name]}]"))
        if found:
            labels.append(label)
            problems.extend(FieldProblem(f"{where}.{p.field}", p.rule) for p in found)
            continue
        assert isinstance(name, str)
        first_index[name] = index
        jobs[name] = JobBody.model_validate({**_json_values(raw), "name": managed_name(set_name, name)})
    if problems:
        raise _invalid(problems, source, labels)
    return JobsFile(set_name, jobs)


def _job_problems(raw: Any, set_name: str) -> list[FieldProblem]:
    """What is wrong with one job of the file (fields as the API spells them), or nothing."""
    if not isinstance(raw, dict):
        return [FieldProblem("body", "a job is a table of the fields POST /v1/jobs takes")]
    if "idempotencyKey" in raw:
        return [FieldProblem("idempotencyKey", "is set by apply (each create is keyed); remove it")]
    body = _json_values(raw)
    if isinstance(body.get("name"), str):
        body["name"] = managed_name(set_name, body["name"])
    try:
        JobBody.model_validate(body).to_spec()
    except ValidationError as exc:
        return problems_of(exc.errors())
    except ValidationFailed as exc:
        return list(exc.problems)
    return []


def _json_values(value: Any) -> Any:
    """TOML's own date and time values as RFC 3339 text (the API's spelling of an instant);
    everything else as it is. A date or time without an offset stays incomplete text, which
    the instant's rule then refuses by name."""
    if isinstance(value, dict):
        return {k: _json_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_values(v) for v in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat().replace("+00:00", "Z")
    return value


def _invalid(problems: list[FieldProblem], source: str, jobs: Iterable[str] = ()) -> Invalid:
    named = ", ".join(jobs)
    message = f"{source}: refused whole, nothing sent" + (f" (invalid: {named})" if named else "")
    body = {
        "code": "invalid_request",
        "message": message,
        "errors": [{"field": p.field, "rule": p.rule} for p in problems],
    }
    error = ApiError.of(400, body)
    assert isinstance(error, Invalid)
    return error


# --- the plan ---


class Action(StrEnum):
    CREATE = "create"
    CHANGE = "change"
    UNCHANGED = "unchanged"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Step:
    """One job's part of a plan. `name`: as the file names it. `job_id`, `version`: the
    server's job and the version a change or cancel is conditioned on (If-Match); None for a
    create. `body`: what a create sends. `patch`: what a change sends (a JSON merge patch);
    `changed`: the fields it changes."""

    action: Action
    name: str
    job_id: str | None = None
    version: int | None = None
    body: JobBody | None = None
    patch: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None

    @property
    def changed(self) -> list[str]:
        return sorted(self.patch)


@dataclass(frozen=True)
class Plan:
    """What `apply` does for a set: a step for every job the file names and for every live
    job of the set it no longer names, in the order applied (create, change, unchanged,
    cancel; by name within each)."""

    set_name: str
    steps: list[Step]

    def count(self, action: Action) -> int:
        return sum(step.action is action for step in self.steps)

    @property
    def writes(self) -> bool:
        """Whether applying it writes anything (a second apply of a file: False)."""
        return any(step.action is not Action.UNCHANGED for step in self.steps)


def plan(client: Client, jobs_file: JobsFile) -> Plan:
    """Compare the file with the set's jobs on the server (read through `client`; nothing is
    written). A job of the file with no live job (ACTIVE or PAUSED; or COMPLETED, which is
    left as it is) of its stored name is a create; one whose fields differ, as the server
    shows them, is a change at the version read; the set's live jobs the file no longer
    names (and any second live job of one name) are cancels. Jobs outside the set are not
    read into the plan. Archived jobs are read too: an archived COMPLETED job still stands
    for its name, so a one-time job is not created again."""
    prefix = managed_name(jobs_file.set_name, "")
    held: dict[str, list[JobView]] = {}
    for job in itertools.chain(client.iter_jobs(), client.iter_jobs(archived=True)):
        if job.name.startswith(prefix):
            held.setdefault(job.name[len(prefix) :], []).append(job)
    steps: list[Step] = []
    for name, body in sorted(jobs_file.jobs.items()):
        jobs = held.get(name, [])
        current = sorted((j for j in jobs if j.state is not JobState.CANCELLED), key=_age)
        if not current:
            steps.append(Step(Action.CREATE, name, body=body, idempotency_key=_create_key(body, jobs)))
            continue
        kept, *extra = current
        patch = merge_patch_between(_shown_fields(kept), _fields_of(body))
        action = Action.CHANGE if patch else Action.UNCHANGED
        steps.append(Step(action, name, kept.job_id, kept.version, patch=patch))
        steps.extend(Step(Action.CANCEL, name, j.job_id, j.version) for j in extra if j.state in _LIVE)
    for name, jobs in sorted(held.items()):
        if name not in jobs_file.jobs:
            live = sorted((j for j in jobs if j.state in _LIVE), key=_age)
            steps.extend(Step(Action.CANCEL, name, j.job_id, j.version) for j in live)
    order = list(Action)
    return Plan(jobs_file.set_name, sorted(steps, key=lambda s: order.index(s.action)))


def _age(job: JobView) -> tuple[str, str]:
    return (str(job.created_at), job.job_id)


def _create_key(body: JobBody, earlier: list[JobView]) -> str:
    """The idempotency key of a create: the same for the same job planned against the same
    jobs (a repeat after a lost answer finds the job made), another once a job of the name was
    made since (re-adding a job apply cancelled creates it anew)."""
    basis = [body.name, body.body_hash(), sorted(job.job_id for job in earlier)]
    digest = hashlib.sha256(json.dumps(basis, separators=(",", ":")).encode()).hexdigest()
    return f"jobsched-apply-{digest[:48]}"


def _fields_of(body: JobBody) -> dict[str, Any]:
    """A job body as the server shows the job it makes: defaults filled, durations in
    seconds, the time zone of a cron spelled out."""
    spec = body.to_spec()
    job = Job(job_id="j_0", tenant="-", spec=spec, created_at=_EPOCH, updated_at=_EPOCH)
    return JobFieldsView.from_job(job).model_dump(mode="json", by_alias=True, exclude_none=True)


def _shown_fields(job: JobView) -> dict[str, Any]:
    names = set(JobFieldsView.model_fields)
    return job.model_dump(mode="json", by_alias=True, include=names, exclude_none=True)


def merge_patch_between(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7396) that turns `current` into `desired`: a member gone is
    null, an object changed is patched member by member, anything else changed is replaced
    (the `payload` whole, as the API replaces it). Empty when they are equal."""
    patch: dict[str, Any] = {name: None for name in current if name not in desired}
    for name, value in desired.items():
        old = current.get(name)
        if old == value:
            continue
        if name != "payload" and isinstance(value, dict) and isinstance(old, dict):
            patch[name] = merge_patch_between(old, value)
        else:
            patch[name] = value
    return patch


# --- applying it ---


class Outcome(StrEnum):
    DONE = "done"  # written (or, for an unchanged job, nothing to write)
    PLANNED = "planned"  # a dry run: not written
    CONFLICT = "conflict"  # the job changed on the server since the plan read it: not written
    FAILED = "failed"  # the server refused the write


@dataclass(frozen=True)
class StepResult:
    """What became of one step: `job_id` and `version` of the job as written (or as read),
    `error` the server's refusal (a conflict: the version it has now)."""

    step: Step
    outcome: Outcome
    job_id: str | None = None
    version: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class ApplyResult:
    plan: Plan
    results: list[StepResult]
    dry_run: bool

    @classmethod
    def planned(cls, planned: Plan) -> ApplyResult:
        """The result of a dry run: every step PLANNED, nothing written."""
        results = [StepResult(s, Outcome.PLANNED, s.job_id, s.version) for s in planned.steps]
        return cls(planned, results, dry_run=True)

    @property
    def ok(self) -> bool:
        """No step was refused and none met a conflict."""
        return all(r.outcome in (Outcome.DONE, Outcome.PLANNED) for r in self.results)

    def as_json(self) -> dict[str, Any]:
        """The result in the API's spelling (camelCase), for a CI job to read."""
        return {
            "set": self.plan.set_name,
            "dryRun": self.dry_run,
            "ok": self.ok,
            "steps": [
                {
                    "action": r.step.action.value,
                    "name": r.step.name,
                    "jobId": r.job_id,
                    "plannedVersion": r.step.version,
                    "version": r.version,
                    "changed": r.step.changed,
                    "outcome": r.outcome.value,
                    "error": r.error,
                }
                for r in self.results
            ],
        }


def apply(client: Client, jobs_file: JobsFile, *, dry_run: bool = False) -> ApplyResult:
    """Plan the file against the server (`plan`), then, unless `dry_run`, carry the plan out
    (`execute`). A second apply of the same file plans nothing but unchanged jobs."""
    planned = plan(client, jobs_file)
    return ApplyResult.planned(planned) if dry_run else execute(client, planned)


def execute(client: Client, planned: Plan) -> ApplyResult:
    """Carry out each step of `planned`: a create with its idempotency key (a repeat finds the
    job made, never a second one), a change and a cancel conditioned on the version planned
    (If-Match). A job changed on the server since is a CONFLICT, left as it is; a refusal is
    FAILED; either way the other steps are carried out. Raises what the client raises when
    the server cannot be reached (the steps done so far stay done; an apply again resumes)."""
    results: list[StepResult] = []
    for step in planned.steps:
        try:
            results.append(_carry_out(client, step))
        except VersionMismatch as exc:
            now = exc.current_version
            said = f"changed on the server since version {step.version}" + (f" (now {now})" if now else "")
            results.append(StepResult(step, Outcome.CONFLICT, step.job_id, now, said))
        except ApiError as exc:
            outcome = Outcome.CONFLICT if exc.code == "idempotency_key_reused" else Outcome.FAILED
            results.append(StepResult(step, outcome, step.job_id, step.version, str(exc)))
    return ApplyResult(planned, results, dry_run=False)


def _carry_out(client: Client, step: Step) -> StepResult:
    if step.action is Action.CREATE:
        assert step.body is not None
        made = client.create_job(step.body, idempotency_key=step.idempotency_key)
        return StepResult(step, Outcome.DONE, made.job_id, made.version)
    if step.action is Action.UNCHANGED:
        return StepResult(step, Outcome.DONE, step.job_id, step.version)
    assert step.job_id is not None and step.version is not None
    if step.action is Action.CHANGE:
        changed = client.update_job(step.job_id, step.patch, version=step.version)
        return StepResult(step, Outcome.DONE, changed.job_id, changed.version)
    cancelled = client.cancel_job(step.job_id, version=step.version)
    return StepResult(step, Outcome.DONE, cancelled.job_id, cancelled.version)
