"""Bulk redrive of dead letters: what `POST /v1/dead-letters/redrive` costs for many runs.

`dead` runs of one job die through the real worker (a handler refusing its payload
permanently), so each dead run has the history and attempt records a real one has. Then,
through the `api` handler as API Gateway calls it, a dry run counts them and the redrive
follows each `nextCursor` until none is left. Every AWS request of the redrive is recorded;
write units are billed from the items before and after each write (bench.units), not taken
from moto. The result is checked: every run PENDING again with exactly one new history
entry, naming the request that changed it."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from .amplification import T0, moto_container
from .calls import Recorder, moto_images

TENANT = "tenant-bench"
JOB_TYPE = "bench.rejects"


def _post(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One API request through the `api` handler, as the tenant."""
    from jobsched.handlers import api
    from jobsched_local.apigw import rest_event
    from jobsched_local.lambda_context import InvocationContext

    event = rest_event(
        "POST", path, body=json.dumps(body), headers={"content-type": "application/json"}, tenant=TENANT
    )
    result = api.handler(event, InvocationContext(function_name="jobsched-api"))
    return result["statusCode"], json.loads(result.get("body") or "{}")


def _dead_letters(container: Any, count: int) -> tuple[str, list[str]]:
    """`count` DEAD runs of one every-minute job, each killed by the worker on its first attempt."""
    import boto3
    from jobsched.domain.errors import PermanentError
    from jobsched.domain.models import JobSpec
    from jobsched.domain.runs import make_run
    from jobsched.services.attempt import AttemptOutcome
    from jobsched.services.worker import Received, Worker
    from jobsched.targets import TargetRunner
    from jobsched.targets.registry import HandlerRegistry

    registry = HandlerRegistry()

    @registry.register(JOB_TYPE)
    def rejects(payload: Any, invocation: Any) -> Any:
        raise PermanentError("payload rejected", error_class="HTTP400")

    worker = Worker(
        container.definitions,
        container.runs,
        container.queues,
        TargetRunner(lambda service: boto3.client(service), registry=registry),  # type: ignore[call-overload]
        container.clock,
        worker_id="bench",
        lease_seconds=60,
    )
    schedule = {"kind": "cron", "cron": "* * * * *", "time_zone": "UTC"}
    spec = JobSpec.model_validate({"name": "bulk", "type": JOB_TYPE, "schedule": schedule})
    job = container.jobs.create(TENANT, spec).job
    keys = []
    for i in range(count):
        run = make_run(job, T0 - timedelta(minutes=count - i), now=T0, actor="bench")
        container.runs.insert(run)
        instant = run.run_key.split("@", 1)[1]
        outcome = worker.process(Received(run.run_key, job.job_id, instant, "default")).outcome
        assert outcome is AttemptOutcome.DEAD, outcome
        keys.append(run.run_key)
    return job.job_id, keys


def measure(dead: int = 500) -> dict[str, Any]:
    from jobsched import wiring

    with moto_container(4) as (_, container):
        wiring.override(container)
        try:
            job_id, keys = _dead_letters(container, dead)
            before = {key: len(container.runs.get_by_key(key).history) for key in keys}
            body = {"reason": "bench: target fixed", "jobId": job_id}
            with Recorder(images=moto_images()) as rec:
                started = time.perf_counter()
                status, dry = _post("/v1/dead-letters/redrive", {**body, "dryRun": True})
                dry_seconds = time.perf_counter() - started
                assert status == 200, dry
                dry_calls = len(rec.calls)
                answers, cursor = [], None
                while True:
                    status, answer = _post(
                        "/v1/dead-letters/redrive", {**body, **({"cursor": cursor} if cursor else {})}
                    )
                    assert status == 200, answer
                    answers.append(answer)
                    if not (cursor := answer.get("nextCursor")):
                        break
                seconds = time.perf_counter() - started - dry_seconds
            redrive_calls = rec.calls[dry_calls:]
            changed = [key for answer in answers for key in answer["runKeys"]]
            refused = [r for answer in answers for r in answer["refused"]]
            audited = 0
            for key in keys:
                run = container.runs.get_by_key(key)
                new = run.history[before[key] :]
                request = next(a["requestId"] for a in answers if key in a["runKeys"])
                if run.state.value == "PENDING" and len(new) == 1 and request in (new[0].reason or ""):
                    audited += 1
        finally:
            wiring.override(None)
    ddb = [c for c in redrive_calls if c.service == "dynamodb"]
    by_index: dict[str, float] = {}
    for call in ddb:
        for write in call.writes:
            for index, units in write["gsi"].items():
                by_index[index] = by_index.get(index, 0) + units
    operations: dict[str, int] = {}
    for call in ddb:
        operations[call.operation] = operations.get(call.operation, 0) + 1
    return {
        "dead_letters": dead,
        "dry_run_count": dry["count"],
        "dry_run_seconds": round(dry_seconds, 2),
        "api_requests": 1 + len(answers),
        "redriven": len(changed),
        "refused": len(refused),
        "runs_with_one_audited_entry": audited,
        "dynamodb_requests": len(ddb),
        "write_units": round(sum(c.wcu for c in ddb), 1),
        "dynamodb_operations": operations,
        "gsi_write_units": round(sum(c.gsi_wcu for c in ddb), 1),
        "gsi_write_units_by_index": {k: round(v, 1) for k, v in sorted(by_index.items())},
        "read_units": round(sum(c.rcu for c in ddb), 1),
        "write_units_per_run": round(sum(c.wcu + c.gsi_wcu for c in ddb) / max(1, len(changed)), 2),
        "seconds_in_moto": round(seconds, 2),
    }


def run(dead: int = 500) -> dict[str, Any]:
    return measure(dead)
