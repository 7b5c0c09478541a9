"""Sweep read amplification: items the sweeper reads ÷ items due, as the table grows.

N active jobs are written straight into the Definitions table (batch writes of 25, in the
exact shape DefinitionStore writes) with exactly `due` of them inside the sweep horizon;
then one full sweep runs and every item it reads is counted: items returned by the `due`
index queries plus any job it re-reads."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from .calls import Recorder

T0 = datetime(2026, 11, 2, 8, 0, 0, tzinfo=UTC)


def _jobs(total: int, due: int, store: Any, horizon: timedelta, seed: int = 7) -> list[dict[str, Any]]:
    from jobsched.domain.models import Job, JobSpec
    from jobsched.services.jobs import new_job_id

    rng = random.Random(seed)
    spec = JobSpec.model_validate(
        {
            "name": "amplification",
            "type": "bench.mark",
            "schedule": {"kind": "rate", "every_seconds": 86400, "anchor": T0},
        }
    )
    items = []
    for i in range(total):
        if i < due:
            at = T0 + timedelta(seconds=rng.randrange(0, int(horizon.total_seconds())))
        else:
            at = (
                T0
                + horizon
                + timedelta(seconds=1 + rng.randrange(0, 86400 - int(horizon.total_seconds()) - 1))
            )
        job = Job(
            job_id=new_job_id(),
            tenant=f"tenant-{i % 20}",
            spec=spec,
            next_run_at=at,
            created_at=T0,
            updated_at=T0,
        )
        items.append(store._job_item(job))
    return items


@contextmanager
def moto_container(shards: int) -> Iterator[tuple[Any, Any]]:
    """In-process moto with every table created, and a Container on it at T0 (manual clock)."""
    os.environ.update({"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled"})
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    import boto3
    from jobsched import aws, wiring
    from jobsched.domain.instants import ManualClock
    from jobsched.settings import Settings
    from jobsched.store.schema import ALL_TABLES
    from moto import mock_aws

    with mock_aws():
        aws.client.cache_clear()
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        for spec in ALL_TABLES:
            ddb.create_table(**spec.create_table_request())
        try:
            yield ddb, wiring.Container(Settings(shard_count=shards), ManualClock(T0))
        finally:
            aws.client.cache_clear()


def load_jobs(ddb: Any, items: list[dict[str, Any]]) -> None:
    """Job items straight into the Definitions table, 25 per batch write."""
    from jobsched.store.schema import DEFINITIONS

    for i in range(0, len(items), 25):
        ddb.batch_write_item(
            RequestItems={
                DEFINITIONS.default_name: [{"PutRequest": {"Item": it}} for it in items[i : i + 25]]
            }
        )


def measure(total: int, due: int = 500, shards: int = 16) -> dict[str, Any]:
    from jobsched.store.schema import DUE_INDEX

    with moto_container(shards) as (ddb, container):
        items = _jobs(total, due, container.definitions, container.materializer.horizon)
        started = time.perf_counter()
        load_jobs(ddb, items)
        load_seconds = time.perf_counter() - started
        with Recorder(images=None) as rec:
            started = time.perf_counter()
            report = container.sweeper.sweep()
            sweep_seconds = time.perf_counter() - started
    due_queries = [c for c in rec.calls if c.operation == "Query"]
    from_index = sum(int(c.extra.get("items", 0)) for c in due_queries)
    # The due index carries keys only: the sweeper reads the jobs it found by key.
    by_key = [c for c in rec.calls if c.operation in ("GetItem", "BatchGetItem") and c.service == "dynamodb"]
    rereads = sum(int(c.extra.get("items", 1)) if c.operation == "BatchGetItem" else 1 for c in by_key)
    read = from_index + rereads
    return {
        "active_jobs": total,
        "due": due,
        "index": DUE_INDEX,
        "queries": len(due_queries),
        "items_read_from_index": from_index,
        "jobs_reread": rereads,
        "items_read": read,
        "amplification": read / due,
        "jobs_swept": report.jobs_read,
        "runs_created": report.runs_created,
        "read_units_per_due_job": sum(c.rcu for c in [*due_queries, *by_key]) / due,
        "load_seconds": round(load_seconds, 1),
        "sweep_seconds_in_moto": round(sweep_seconds, 2),
    }


def run(sizes: tuple[int, ...] = (1_000, 10_000), due: int = 500) -> dict[str, Any]:
    return {"rows": [measure(n, due) for n in sizes]}
