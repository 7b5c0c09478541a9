"""One trace per run, through the public surface on moto: each history entry carries the
X-Ray trace id of the invocation that wrote it (the API request that made the run, the lease
API's, the worker's), the run page links each to the CloudWatch console, the outbox hands the
run's trace to SQS (`AWSTraceHeader`) so X-Ray links the worker's invocation to it, and an
HTTP target receives a W3C `traceparent` under the calling invocation's trace."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from jobsched.domain.instants import ManualClock
from jobsched.domain.lifecycle import queued
from jobsched.domain.models import HttpTarget
from jobsched.domain.runs import RunState, Transition
from jobsched.domain.tracing import TRACE_ENV, TraceContext, parse_trace_header
from jobsched.store.queues import RunQueues
from jobsched.store.runs import RunStore, _read_doc, run_doc
from jobsched.store.schema import RUNS
from jobsched.targets.http import HttpTargetClient
from jobsched.targets.invocation import Invocation
from jobsched.targets.ssrf import DestinationPolicy

from tests.integration.test_notifications import hooks  # noqa: F401  (the fixture)
from tests.integration.test_outbox import make_run

pytestmark = pytest.mark.integration

API_TRACE = "Root=1-674e6a07-8b1c2d3e4f5a6b7c8d9e0f1a;Parent=53995c3f42cd8ad8;Sampled=1"
LEASE_TRACE = "Root=1-674e6a09-0a1b2c3d4e5f60718293a4b5;Parent=aa995c3f42cd8ad8;Sampled=0"
TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]")


def root(header: str) -> str:
    context = parse_trace_header(header)
    assert context is not None
    return context.root


def test_each_transition_carries_its_writers_trace_and_the_run_page_links_it(api, container, monkeypatch):
    container.settings = container.settings.model_copy(update={"aws_region": "eu-west-1"})
    monkeypatch.setenv(TRACE_ENV, API_TRACE)
    created = api.post("/v1/jobs", {"name": "nightly", "type": "ext", "every": 3600})
    assert created.status == 201, created
    job = container.definitions.get(created.body["jobId"])
    assert job is not None and job.trace_id == root(API_TRACE)  # its events' traceId
    monkeypatch.setenv(TRACE_ENV, LEASE_TRACE)
    (lease,) = api.post("/v1/leases", {"types": ["ext"], "workerId": "w"}).body["leases"]
    done = api.post(
        f"/v1/leases/{lease['runKey']}/complete", {"fence": lease["fence"], "outcome": "succeeded"}
    )
    assert done.status == 200, done
    monkeypatch.delenv(TRACE_ENV)
    run = api.get(f"/v1/runs/{lease['runKey']}").body
    traces = [(t["to"], t["traceId"]) for t in run["transitions"]]
    assert traces[0] == ("PENDING", root(API_TRACE))  # made by the request that created the job
    assert traces[1:] == [("LEASED", root(LEASE_TRACE)), ("SUCCEEDED", root(LEASE_TRACE))]
    url = run["transitions"][0]["traceUrl"]
    assert url.startswith("https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1")
    assert url.endswith(f"#xray:traces/{root(API_TRACE)}")
    # Without a region the ids show and nothing links.
    container.settings = container.settings.model_copy(update={"aws_region": None})
    run = api.get(f"/v1/runs/{lease['runKey']}").body
    assert run["transitions"][0]["traceId"] == root(API_TRACE) and run["transitions"][0]["traceUrl"] is None


def test_a_write_outside_a_traced_invocation_reads_back_without_a_trace(aws, clock):
    trace: list[TraceContext | None] = [parse_trace_header(API_TRACE)]
    store = RunStore(boto3.client("dynamodb"), RUNS.default_name, 4, trace=lambda: trace[0])
    run = make_run(clock)
    assert store.insert(run)
    stored = store.get_by_key(run.run_key)
    assert stored is not None and stored.history[0].trace_id == root(API_TRACE)
    trace[0] = None  # an untraced writer next (no _X_AMZN_TRACE_ID)
    marked = store.commit(stored, lambda r: queued(r, now=clock.now(), actor="outbox"))
    again = store.get_by_key(run.run_key)
    assert again == marked
    assert [e.trace_id for e in again.history] == [root(API_TRACE), None]
    # The SDK re-sending the insert finds its own write: the stamp is not a difference.
    assert store.written_as(stored, run)


def test_the_outbox_hands_the_runs_trace_to_sqs(aws, clock):
    sqs = boto3.client("sqs")
    sent: list[dict[str, Any]] = []

    class Recording:
        """moto's SendMessageBatch drops `MessageSystemAttributes` (its SendMessage keeps them):
        the entries are read as sent, after botocore checked them against the API's shapes."""

        def send_message_batch(self, **request: Any) -> Any:
            sent.extend(request["Entries"])
            return sqs.send_message_batch(**request)

    queues = RunQueues(Recording(), aws["urls"], aws["dlq_urls"], fair=True)
    traced = make_run(clock)
    entry = traced.history[0].model_copy(update={"trace_id": root(API_TRACE)})
    traced = traced.model_copy(update={"history": [entry]})
    untraced = make_run(clock, due_in=60)
    queue = next(iter(aws["urls"]))
    assert queues.publish(queue, [(traced, 0), (untraced, 0)]) == []
    headers = {
        json.loads(e["MessageBody"])["runKey"]: e.get("MessageSystemAttributes", {}).get("AWSTraceHeader")
        for e in sent
    }
    assert headers == {
        traced.run_key: {"DataType": "String", "StringValue": f"Root={root(API_TRACE)}"},
        untraced.run_key: None,
    }


def invocation(attempt: int) -> Invocation:
    return Invocation(
        run_key="j_x@2026-12-03T02:00:00Z",
        job_id="j_x",
        tenant="tenant-a",
        job_type="report",
        scheduled_for=datetime(2026, 12, 3, 2, tzinfo=UTC),
        attempt=attempt,
        payload=None,
        timeout_seconds=5.0,
    )


def test_an_http_target_receives_a_traceparent_under_the_callers_trace(hooks):  # noqa: F811
    policy = DestinationPolicy(allow=("127.0.0.1/32",))
    target = HttpTarget(kind="http", url=hooks.url)
    context: list[TraceContext | None] = [parse_trace_header(API_TRACE)]
    client = HttpTargetClient(policy, trace=lambda: context[0])
    client.send(target, invocation(1))
    context[0] = None  # local mode: a trace of the run's own
    client.send(target, invocation(1))
    client.send(target, invocation(2))
    sampled, own_1, own_2 = (headers["traceparent"] for headers, _ in hooks.requests)
    assert all(TRACEPARENT.fullmatch(value) for value in (sampled, own_1, own_2))
    assert sampled.split("-")[1] == "674e6a078b1c2d3e4f5a6b7c8d9e0f1a" and sampled.endswith("-01")
    # The run's own trace: one trace id for every attempt, a span per attempt, not sampled.
    assert own_1.split("-")[1] == own_2.split("-")[1] and own_1.split("-")[2] != own_2.split("-")[2]
    assert own_1.endswith("-00")


def test_a_job_may_not_set_the_traceparent_header(api):
    answer = api.post(
        "/v1/jobs",
        {
            "name": "hook",
            "type": "http",
            "every": 60,
            "target": {"kind": "http", "url": "https://example.com/h", "headers": {"TraceParent": "00-x"}},
        },
    )
    assert answer.status == 400, answer
    (error,) = answer.body["errors"]
    assert error == {
        "field": "target.http.headers",
        "rule": "header 'TraceParent' is set by the scheduler (the attempt's trace)",
    }


def test_history_entries_keep_their_traces_through_compaction_of_the_doc():
    at = datetime(2026, 12, 3, 2, tzinfo=UTC)
    run = make_run(ManualClock(at))
    traces = [
        "1-00000001-aaaaaaaaaaaaaaaaaaaaaaaa",
        None,
        None,
        "1-00000002-bbbbbbbbbbbbbbbbbbbbbbbb",
        "1-00000002-bbbbbbbbbbbbbbbbbbbbbbbb",
        None,
        "1-00000001-aaaaaaaaaaaaaaaaaaaaaaaa",
    ]
    states = [
        RunState.PENDING,
        RunState.QUEUED,
        RunState.LEASED,
        RunState.RETRY_WAIT,
        RunState.QUEUED,
        RunState.LEASED,
        RunState.SUCCEEDED,
    ]
    history = [
        Transition(
            at=at,
            actor="a",
            source=None if i == 0 else states[i - 1],
            target=state,
            fence=0,
            attempt=0,
            trace_id=trace,
        )
        for i, (state, trace) in enumerate(zip(states, traces, strict=True))
    ]
    run = run.model_copy(update={"history": history})
    doc = json.loads(run_doc(run))
    assert sum("trace_id" in e for e in doc["history"]) == 5  # the repeats are left out
    read = _read_doc(doc, run.job_id)
    assert [e["trace_id"] for e in read["history"]] == traces
