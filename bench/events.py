"""Run events: how many each `runEvents` level publishes, and what they cost a million runs.

Runs go through their real lifecycle on moto (made, marked QUEUED as the outbox marks them,
claimed and completed by the real worker): runs that succeed, runs that die on a permanent
error, and runs that fail twice before they succeed. The Runs table's stream is then read
from its start and, for each level, each record goes through the events mapping's filter
(handlers.events.filter_patterns, as Lambda applies it) in batches of the mapping's size to
the events consumer's own gathering (handlers.events.gather_changes). What is counted is
what the consumer would publish and how often Lambda would invoke it; the dollars come from
bench/prices.json: PutEvents entries (each 64 KB chunk of an entry one event), the archive's
ingestion, and the consumer's Lambda requests and time — its CPU time as measured here
(scaled to the function's CPU share), plus an assumed in-region latency per PutEvents call.
Stream reads by Lambda's event source mapping are not billed."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from .amplification import T0, moto_container
from .cost import FULL_VCPU_MB

TENANT = "tenant-bench"
OK_TYPE, BAD_TYPE, FLAKY_TYPE = "bench.events.ok", "bench.events.bad", "bench.events.flaky"
EVENTS_BATCH_SIZE = 100  # jobsched.cdk.event_sources.EVENTS_BATCH_SIZE (the smoke test checks it)
EVENTS_MEMORY_MB = 512  # jobsched.cdk.names: the events function
PUT_EVENTS_LATENCY_MS = 25  # assumed: one PutEvents call of up to 10 entries from Lambda
EVENT_CHUNK_BYTES = 64 * 1024  # EventBridge bills each 64 KB of an entry as one event
KINDS = ("succeeded", "dead", "retried")


def _prices() -> dict[str, float]:
    from .cost import PRICES_FILE

    prices = json.loads(PRICES_FILE.read_text())["prices"]
    return {name: float(entry["usd"]) for name, entry in prices.items()}


def _make_runs(container: Any, count: int) -> dict[str, list[str]]:
    """`count` runs of each kind, each through the outbox's mark and the worker."""
    import boto3
    from jobsched.domain.errors import PermanentError, RetryableError
    from jobsched.domain.lifecycle import queued
    from jobsched.domain.models import JobSpec
    from jobsched.domain.runs import RunState, make_run
    from jobsched.services.worker import Received, Worker
    from jobsched.targets import TargetRunner
    from jobsched.targets.registry import HandlerRegistry

    registry = HandlerRegistry()
    failures: dict[str, int] = {}

    @registry.register(OK_TYPE)
    def ok(payload: Any, invocation: Any) -> Any:
        return {"ok": True}

    @registry.register(BAD_TYPE)
    def bad(payload: Any, invocation: Any) -> Any:
        raise PermanentError("payload rejected", error_class="HTTP400")

    @registry.register(FLAKY_TYPE)
    def flaky(payload: Any, invocation: Any) -> Any:
        failures[invocation.run_key] = failures.get(invocation.run_key, 0) + 1
        if failures[invocation.run_key] <= 2:
            raise RetryableError("upstream 503", error_class="HTTP503")
        return {"ok": True}

    worker = Worker(
        container.definitions,
        container.runs,
        container.queues,
        TargetRunner(lambda service: boto3.client(service), registry=registry),  # type: ignore[call-overload]
        container.clock,
        worker_id="bench",
        lease_seconds=60,
    )
    made: dict[str, list[str]] = {}
    for kind, job_type in zip(KINDS, (OK_TYPE, BAD_TYPE, FLAKY_TYPE), strict=True):
        schedule = {"kind": "cron", "cron": "* * * * *", "time_zone": "UTC"}
        policies = {"retry": {"max_attempts": 3, "base_seconds": 1, "cap_seconds": 1}}
        fields = {"name": kind, "type": job_type, "schedule": schedule, "policies": policies}
        spec = JobSpec.model_validate(fields)
        job = container.jobs.create(TENANT, spec).job
        keys = made.setdefault(kind, [])
        for i in range(count):
            run = make_run(job, T0 - timedelta(minutes=count - i), now=T0, actor="bench")
            container.runs.insert(run)
            instant = run.run_key.split("@", 1)[1]
            for _ in range(5):  # each attempt: marked QUEUED (the outbox), then claimed and completed
                current = container.runs.get_by_key(run.run_key)
                if current.state not in (RunState.PENDING, RunState.RETRY_WAIT):
                    break
                container.runs.commit(current, lambda r: queued(r, now=container.clock.now(), actor="outbox"))
                container.clock.advance(2)  # past a retry's backoff
                worker.process(Received(run.run_key, job.job_id, instant, "default"))
            keys.append(run.run_key)
    return made


def _stream_records() -> list[dict[str, Any]]:
    """Every record of the Runs table's stream, as Lambda hands them to a function."""
    import boto3
    from jobsched.store.schema import RUNS
    from jobsched_local.glue import lambda_stream_record, read_stream

    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=RUNS.default_name)["Table"]["LatestStreamArn"]
    records: list[dict[str, Any]] = []
    iterators: dict[str, str] = {}
    while True:
        batch = read_stream(streams, arn, iterators)
        if not batch:
            return records
        records += [lambda_stream_record(r, arn, "us-east-1") for r in batch]


def _level(records: list[dict[str, Any]], level: Any, made: dict[str, list[str]]) -> dict[str, Any]:
    """What the consumer does at `level` for each kind of run: records the filter passes,
    events it publishes and their bytes; and its CPU seconds a record (all kinds)."""
    from jobsched.handlers.events import gather_changes, matches_filter
    from jobsched.store.schema import RUNS

    kind_of = {key: kind for kind, keys in made.items() for key in keys}

    def kind(record: dict[str, Any]) -> str | None:
        image = record["dynamodb"].get("NewImage") or record["dynamodb"].get("OldImage") or {}
        job_id, sk = image.get("job_id", {}).get("S", ""), image.get("sk", {}).get("S", "")
        return kind_of.get(f"{job_id}@{sk.removeprefix('R#')}")

    # Only the runs made here: the jobs' own runs made ahead when they were created are not.
    passed = [r for r in records if kind(r) is not None and matches_filter(r, level, RUNS)]
    per_kind = {k: {"records": 0, "events": 0, "billed_events": 0, "bytes": 0} for k in KINDS}
    cpu = 0.0
    for record in passed:
        per_kind[str(kind(record))]["records"] += 1
    for start in range(0, len(passed), EVENTS_BATCH_SIZE):
        batch = passed[start : start + EVENTS_BATCH_SIZE]
        started = time.process_time()
        gathered = gather_changes(batch, "Jobsched", level)
        documents = [
            (e.subject, json.dumps(e.document(), separators=(",", ":")))
            for change in gathered
            for e in change.events
        ]
        cpu += time.process_time() - started
        for subject, document in documents:
            size = len(document.encode())
            counts = per_kind[kind_of[subject]]
            counts["events"] += 1
            counts["billed_events"] += -(-size // EVENT_CHUNK_BYTES)
            counts["bytes"] += size
    return {"per_kind": per_kind, "cpu_seconds_per_record": cpu / max(1, len(passed))}


def _dollars_per_million(
    counts: dict[str, int], runs: int, cpu_per_record: float, prices: dict[str, float]
) -> float:
    """A million runs like these: at scale the mapping's batches are full (EVENTS_BATCH_SIZE
    records an invocation) and PutEvents calls carry 10 entries."""
    invocations = counts["records"] / EVENTS_BATCH_SIZE
    seconds = counts["records"] * cpu_per_record * max(1.0, FULL_VCPU_MB / EVENTS_MEMORY_MB) + (
        counts["events"] / 10
    ) * (PUT_EVENTS_LATENCY_MS / 1000)
    dollars = (
        counts["billed_events"] * prices["eventbridge_custom_event"]
        + counts["bytes"] / 1e9 * prices["eventbridge_archive_gb"]
        + invocations * prices["lambda_request"]
        + seconds * EVENTS_MEMORY_MB / 1024 * prices["lambda_gb_second_arm64"]
    )
    return dollars / max(1, runs) * 1e6


def run(runs_per_kind: int = 100) -> dict[str, Any]:
    from jobsched import wiring
    from jobsched.domain.events import RunEventsLevel

    with moto_container(4) as (_, container):
        wiring.override(container)
        try:
            made = _make_runs(container, runs_per_kind)
            records = _stream_records()
        finally:
            wiring.override(None)
        levels = {level.value: _level(records, level, made) for level in RunEventsLevel}
    prices = _prices()
    out: dict[str, Any] = {
        "runs": {kind: len(keys) for kind, keys in made.items()},
        "stream_records": len(records),
        "levels": {},
    }
    for name, figures in levels.items():
        out["levels"][name] = {
            kind: {
                "events_per_run": round(counts["events"] / max(1, len(made[kind])), 2),
                "records_per_run": round(counts["records"] / max(1, len(made[kind])), 2),
                "bytes_per_event": round(counts["bytes"] / max(1, counts["events"])),
                "usd_per_million_runs": round(
                    _dollars_per_million(counts, len(made[kind]), figures["cpu_seconds_per_record"], prices),
                    3,
                ),
            }
            for kind, counts in figures["per_kind"].items()
        }
    return out
