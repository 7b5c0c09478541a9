"""Creating jobs through the API: CPU per job and DynamoDB requests per job, in process on moto.

`python -m bench.create [--jobs N]` drives the real `api` handler with API Gateway events, as
tests/integration does, for four kinds of create: a cron job, a one-time job due inside the
horizon (written with its first run), the same with an idempotency key, and batches of 100
through `POST /v1/jobs/batch`. CPU is this process's (time.process_time), moto's answering
included: on a loaded machine it moves far less than wall time. Requests are counted at
botocore, per operation. The tenant's request rate is counted as in the stack (one UpdateItem per
request) with its limit lifted, so a loop of singles is not refused; the job limit is the
default."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH = 100
_SEND = "_make_api_call"  # botocore's one method every operation goes through


def _environment() -> None:
    for path in (ROOT, ROOT / "functions"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
            "POWERTOOLS_TRACE_DISABLED": "1",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
    )
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")


def _body(kind: str, index: int) -> dict[str, Any]:
    if kind == "cron":
        return {"name": f"job {index}", "type": "ext", "cron": "0 9 * * *", "payload": {"n": index}}
    due = (datetime.now(UTC) + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, Any] = {"name": f"job {index}", "type": "ext", "runAt": due}
    if kind == "once+key":
        body["idempotencyKey"] = f"key {index}"
    return body


def _scenario(kind: str, jobs: int, batch: bool) -> dict[str, Any]:
    import boto3
    import botocore.client
    from jobsched import aws as aws_clients
    from jobsched import wiring
    from jobsched.domain.instants import SystemClock
    from jobsched.settings import Settings
    from jobsched.store.schema import ALL_TABLES
    from jobsched_local.moto_backend import create_queues
    from jobsched_local.moto_transactions import install
    from moto import mock_aws

    from tests.helpers import ApiClient

    calls: Counter[str] = Counter()
    original: Callable[..., Any] = getattr(botocore.client.BaseClient, _SEND)

    def counted(client: Any, operation: str, params: Any) -> Any:
        calls[operation] += 1
        return original(client, operation, params)

    install()
    setattr(botocore.client.BaseClient, _SEND, counted)
    try:
        with mock_aws():
            aws_clients.client.cache_clear()
            for table in ALL_TABLES:
                boto3.client("dynamodb").create_table(**table.create_table_request())
            urls, dlq_urls, _ = create_queues(boto3.client("sqs"))
            settings = Settings(queue_urls=urls, dlq_urls=dlq_urls, tenant_requests_per_second=10**6)
            wiring.override(wiring.Container(settings, SystemClock()))
            api = ApiClient("bench")
            assert api.post("/v1/jobs", _body("cron", -1)).status == 201  # warm: the first write
            calls.clear()
            started = time.process_time()
            if batch:
                for start in range(0, jobs, BATCH):
                    chunk = [_body(kind, i) for i in range(start, min(jobs, start + BATCH))]
                    answer = api.post("/v1/jobs/batch", {"jobs": chunk})
                    assert answer.status == 200 and answer.body["created"] == len(chunk), answer
            else:
                for index in range(jobs):
                    answer = api.post("/v1/jobs", _body(kind, index))
                    assert answer.status == 201, answer
            cpu = time.process_time() - started
    finally:
        setattr(botocore.client.BaseClient, _SEND, original)
        wiring.override(None)
        aws_clients.client.cache_clear()
    return {
        "cpu_ms_per_job": round(1000 * cpu / jobs, 2),
        "requests_per_job": round(sum(calls.values()) / jobs, 3),
        "requests": dict(calls),
    }


def run(jobs: int = 300) -> dict[str, Any]:
    _environment()
    results: dict[str, Any] = {}
    for kind in ("cron", "once", "once+key"):
        results[f"single {kind}"] = _scenario(kind, jobs, batch=False)
        results[f"batch {kind}"] = _scenario(kind, jobs, batch=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    print(json.dumps(run(parser.parse_args().jobs), indent=2))


if __name__ == "__main__":
    main()
