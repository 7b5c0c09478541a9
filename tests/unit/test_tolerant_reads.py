"""Items a newer release wrote read back: a job or run item holding members this release does
not know (at any depth of its stored JSON) reads as the same job or run, so a rollback past a
release that added a field leaves every item it wrote readable. The models stay strict
everywhere else: a request, or a validation without the stored-read context, still refuses
an unknown member."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobsched.api_models.problems import problems_of
from jobsched.api_models.requests import JobBody
from jobsched.domain.models import WRITE, Job, JobSpec, Misfire, MissedWindow
from jobsched.domain.runs import Run, RunState, Transition, make_run
from jobsched.store.definitions import DefinitionStore
from jobsched.store.runs import RunStore
from pydantic import ValidationError

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
DEFINITIONS = DefinitionStore(client=None, table_name="definitions", shard_count=4, trace=lambda: None)
RUNS = RunStore(client=None, table_name="runs", shard_count=4, trace=lambda: None)
SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tenant-a/hooks-AbCdEf"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:tenant-a-alerts"
# A payload is the tenant's own JSON: members it holds are never "unknown" and never dropped.
PAYLOAD = {"rows": [1, 2], "added_later": "the tenant's own"}
BODY: dict[str, Any] = {
    "name": "nightly",
    "type": "report.build",
    "cron": "0 0 3 * * *",
    "timeZone": "Europe/London",
    "dst": {"gap": "skip"},
    "retry": {"baseSeconds": 4},
    "target": {
        "kind": "http",
        "url": "https://hooks.example.com/run",
        "headers": {"Authorization": {"valueFrom": SECRET, "prefix": "Bearer "}, "X-Tenant": "tenant-a"},
    },
    "payload": PAYLOAD,
    "notify": [{"on": ["dead"], "target": {"kind": "sns", "topicArn": TOPIC}}],
}
ADDED = "added_later"  # a member a newer release writes and this one does not know


def a_job() -> Job:
    spec = JobBody.model_validate(BODY).to_spec()
    window = MissedWindow(
        paused_at=T0 - timedelta(hours=2),
        resumed_at=T0 - timedelta(hours=1),
        policy=Misfire.RUN_ONCE,
        run_from=T0 - timedelta(hours=2),
    )
    return Job(
        job_id="j_9k4s0bwhmv1hf39c",
        tenant="tenant-a",
        spec=spec,
        next_run_at=T0,
        created_at=T0,
        updated_at=T0,
        definition_since=None,
        missed_windows=[window],
    )


def a_run(job: Job) -> Run:
    run = make_run(job, T0, now=T0, actor="sweeper")
    entry = Transition(
        at=T0 + timedelta(seconds=1),
        actor="outbox",
        source=RunState.PENDING,
        target=RunState.QUEUED,
        fence=0,
        attempt=0,
    )
    return run.model_copy(update={"state": RunState.QUEUED, "history": [*run.history, entry]})


def with_member(document: dict[str, Any], *paths: tuple[str | int, ...]) -> dict[str, Any]:
    """`document` with ADDED set in the object at each path (() is the document itself)."""
    for path in paths:
        node: Any = document
        for step in path:
            node = node[step]
        assert isinstance(node, dict), path
        node[ADDED] = {"nested": True}
    return document


# Every model a stored job's spec holds: the spec, its schedule and DST policy, policies and
# retry, the target and a secret reference in a header, a notification and its target.
SPEC_PATHS: list[tuple[str | int, ...]] = [
    (),
    ("schedule",),
    ("schedule", "dst"),
    ("policies",),
    ("policies", "retry"),
    ("target",),
    ("target", "headers", "Authorization"),
    ("notify", 0),
    ("notify", 0, "target"),
]


def test_a_job_item_with_members_this_release_does_not_know_reads_as_the_same_job():
    job = a_job()
    item = DEFINITIONS._job_item(job)
    assert DefinitionStore.job_from_item(item) == job  # the item as this release writes it
    spec = with_member(json.loads(item["spec"]["S"]), *SPEC_PATHS)
    windows = with_member(json.loads(item["missed_windows"]["S"]), (0,))
    newer = {
        **item,
        "spec": {"S": json.dumps(spec)},
        "missed_windows": {"S": json.dumps(windows)},
        ADDED: {"S": "an attribute of its own"},
    }

    read = DefinitionStore.job_from_item(newer)

    assert read == job
    assert read.spec.payload == PAYLOAD  # the payload's own members are all kept


def test_a_run_item_with_members_this_release_does_not_know_reads_as_the_same_run():
    run = a_run(a_job())
    item = RUNS.to_item(run)
    assert RunStore.from_item(item) == run
    doc = json.loads(item["doc"]["S"])
    assert len(doc["history"]) == 2
    paths = [(), ("history", 0), ("history", 1), ("policies",), ("policies", "retry"), ("target",)]
    paths += [("notify", 0), ("notify", 0, "target"), ("target", "headers", "Authorization")]
    newer = {**item, "doc": {"S": json.dumps(with_member(doc, *paths))}, ADDED: {"N": "7"}}

    read = RunStore.from_item(newer)

    assert read == run
    assert read.payload == PAYLOAD


@pytest.mark.parametrize("path", SPEC_PATHS, ids=lambda path: ".".join(map(str, path)) or "spec")
def test_outside_a_stored_read_an_unknown_member_is_still_refused(path):
    """Tolerance is the stored read's alone: the same member in a spec validated as a write
    or without context (what every request model does) is refused, and the API names it."""
    spec = with_member(json.loads(a_job().spec.model_dump_json(exclude_none=True)), path)
    for context in (None, WRITE):
        with pytest.raises(ValidationError) as refused:
            JobSpec.model_validate(spec, context=context)
        (problem,) = problems_of(refused.value.errors(), domain=True)
        assert problem.field.endswith("addedLater") and "is not a known field" in problem.rule
