"""Capacity model: sustained and burst runs per minute for a shard count and worker
concurrency, from the measured calls and write units per run and documented AWS limits.

Pure arithmetic. Every limit below is a documented default (see LIMITS for sources);
several are adjustable quotas, and the per-partition figures are the conservative reading
(one partition per key value, before DynamoDB splits a hot key range for heat)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from .harness import OUTBOX_PARALLELIZATION, SHARD_COUNT, SHARDS_PER_SWEEP, WORKER_CONCURRENCY

LIMITS: dict[str, dict[str, Any]] = {
    "partition_wcu_per_s": {
        "value": 1000,
        "source": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html",
    },
    "partition_rcu_per_s": {
        "value": 3000,
        "source": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html",
    },
    "table_on_demand_wru_per_s": {
        "value": 40000,
        "source": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"
        " (per table, adjustable)",
    },
    "on_demand_instant_multiple_of_previous_peak": {
        "value": 2.0,
        "source": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html",
    },
    "lambda_account_concurrency": {
        "value": 1000,
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html"
        " (default, adjustable)",
    },
    "sqs_esm_max_concurrency": {
        "value": 1250,
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
    },
    "sqs_esm_scale_up_per_minute": {
        "value": 300,
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
    },
    "stream_batches_per_shard": {
        "value": OUTBOX_PARALLELIZATION,
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html"
        " (ParallelizationFactor, as deployed)",
    },
    "sweeper_budget_seconds": {
        "value": 50,
        "source": "infra/names.py: sweeper timeout (the tick is every 60 s)",
    },
    "sqs_inflight_per_queue": {
        "value": 120000,
        "source": "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html",
    },
}

TARGET_RUNS_PER_MINUTE = 100_000
BURST_FACTOR = 10
P99_DISPATCH_GOAL_S = 5.0
STACK_WORKER_CONCURRENCY = sum(WORKER_CONCURRENCY.values())  # the stack's default ceilings


def _v(name: str) -> float:
    return float(LIMITS[name]["value"])


def inputs_from(
    cost: dict[str, Any], hotpath: dict[str, Any] | None, latency_ms: dict[str, float], memory: dict[str, int]
) -> dict[str, Any]:
    """What the model needs, from the dense recurring cost scenario and the hot-path run."""
    scenario = cost["scenarios"][0]
    stages = scenario["stages"]
    per_table: dict[str, float] = defaultdict(float)
    per_index: dict[str, float] = defaultdict(float)
    job_advance_index: dict[str, float] = defaultdict(float)
    for row in scenario["transitions"]:
        table = (
            "runs"
            if row["write"].startswith("run:")
            else "definitions"
            if row["write"].startswith("job:")
            else "idempotency"
        )
        per_table[table] += row["table_wcu"]
        for index, u in row["gsi_wcu"].items():
            per_index[index] += u
            if row["write"] == "job: advance / save":
                job_advance_index[index] += u

    def seconds(stage_name: str, function: str) -> float:
        """Modelled Lambda seconds per run: our CPU (scaled to the memory's CPU share) + call latency."""
        calls = stages.get(stage_name, {}).get("requests", {})
        wait = 0.0
        for key, count in calls.items():
            ms = latency_ms.get(key, latency_ms.get(key.split(":")[0] + ":*", latency_ms["*"]))
            wait += count * ms / 1000
        us = (hotpath or {}).get("stages", {}).get(stage_name, {}).get("us_per_run_median", 0.0)
        return wait + us / 1e6 * max(1.0, 1769 / memory[function])

    return {
        "write_units_per_run": per_table | {f"gsi:{k}": v for k, v in per_index.items()},
        "job_advance_gsi_units": dict(job_advance_index),
        "worker_seconds_per_run": seconds("worker", "worker"),
        "outbox_seconds_per_run": seconds("outbox", "outbox"),
        "sweep_seconds_per_run": seconds("sweep", "sweeper"),
        "read_units_per_run": scenario["per_run"]["rcu"],
    }


def model(
    inp: dict[str, Any], shards: int, worker_concurrency: int, *, shards_per_sweep: int = SHARDS_PER_SWEEP
) -> dict[str, Any]:
    """Sustained runs/minute each limit allows, the binding one, and the burst drain."""
    w = inp["write_units_per_run"]
    part = _v("partition_wcu_per_s")
    table_cap = _v("table_on_demand_wru_per_s")
    limits: dict[str, float] = {}  # runs per second
    # Runs table and each of its GSIs is its own on-demand throughput bucket.
    if w.get("runs"):
        limits["Runs table: on-demand WRU/s quota"] = table_cap / w["runs"]
    for index in ("open", "claimable", "leased_by_tenant"):
        if w.get(f"gsi:{index}"):
            limits[f"Runs GSI {index}: on-demand WRU/s quota"] = table_cap / w[f"gsi:{index}"]
    if w.get("gsi:open"):
        # Partition key open_shard: `shards` key values, one partition each.
        limits["GSI open: partition per open_shard (1,000 WCU/s)"] = shards * part / w["gsi:open"]
    if w.get("gsi:due"):
        limits["GSI due: partition per due_shard (1,000 WCU/s)"] = shards * part / w["gsi:due"]
    defs = w.get("definitions", 0) + w.get("gsi:due", 0) + w.get("gsi:by_tenant", 0)
    if defs:
        limits["Definitions table+GSIs: on-demand WRU/s quota"] = table_cap / max(
            w.get("definitions", 0), w.get("gsi:due", 0), w.get("gsi:by_tenant", 0)
        )
    # Lambda.
    concurrency = min(worker_concurrency, _v("lambda_account_concurrency"))
    limits["worker concurrency"] = concurrency / inp["worker_seconds_per_run"]
    groups = math.ceil(shards / shards_per_sweep)
    if inp["sweep_seconds_per_run"] > 0:
        limits["sweeper: one invocation per shard group, 50 s each"] = (
            groups * _v("sweeper_budget_seconds") / 60 / inp["sweep_seconds_per_run"]
        )
    # The outbox runs one batch per stream shard, and shards follow the Runs table's
    # partitions: each partition writes at most 1,000 WCU/s, i.e. 1000 / (Runs WCU per run)
    # runs/s, whatever the total. Headroom >= 1 means the outbox keeps up at any scale.
    outbox_headroom = math.inf
    if inp["outbox_seconds_per_run"] > 0 and w.get("runs"):
        outbox_headroom = (_v("stream_batches_per_shard") / inp["outbox_seconds_per_run"]) / (
            part / w["runs"]
        )
    binding = min(limits, key=lambda k: limits[k])
    sustained = limits[binding]
    per_tenant = {}
    if w.get("gsi:claimable"):
        per_tenant["claimable (key tenant#type)"] = part / w["gsi:claimable"] * 60
    if w.get("gsi:leased_by_tenant"):
        per_tenant["leased_by_tenant (key tenant)"] = part / w["gsi:leased_by_tenant"] * 60
    job_idx = inp["job_advance_gsi_units"]
    if job_idx.get("by_tenant"):
        per_tenant["by_tenant on job advance (key tenant)"] = part / job_idx["by_tenant"] * 60
    return {
        "shards": shards,
        "worker_concurrency": worker_concurrency,
        "limits_runs_per_minute": {k: v * 60 for k, v in sorted(limits.items(), key=lambda kv: kv[1])},
        "binding": binding,
        "sustained_runs_per_minute": sustained * 60,
        "per_tenant_runs_per_minute": per_tenant,
        "outbox_headroom_per_stream_shard": outbox_headroom,
        "burst": burst(inp, limits, worker_concurrency),
    }


def burst(inp: dict[str, Any], limits: dict[str, float], worker_concurrency: int) -> dict[str, Any]:
    """A top-of-hour burst of BURST_FACTOR x the target minute, all due at :00:00, on top of
    a warm system at the target rate: how long until 99% have started."""
    total = BURST_FACTOR * TARGET_RUNS_PER_MINUTE
    steady_rate = TARGET_RUNS_PER_MINUTE / 60
    t_run = inp["worker_seconds_per_run"]
    cap = min(worker_concurrency, _v("lambda_account_concurrency"), _v("sqs_esm_max_concurrency") * 3)
    concurrency = min(cap, steady_rate * t_run)
    # DynamoDB caps the rate at the quota-level limits. (On-demand takes 2x the previous
    # peak at once: the first burst on a cold table may throttle; repeated hourly bursts
    # find the partitions already split, or use warm throughput.)
    store_limits = [v for k, v in limits.items() if "WRU" in k or "partition" in k]
    store_rate = min(store_limits) if store_limits else math.inf
    done, t, step = 0.0, 0.0, 0.1
    while done < 0.99 * total and t < 7200:
        rate = min(concurrency / t_run, store_rate)
        done += rate * step
        t += step
        concurrency = min(cap, concurrency + _v("sqs_esm_scale_up_per_minute") / 60 * step)
    needed_rate = 0.99 * total / P99_DISPATCH_GOAL_S
    return {
        "runs": total,
        "p99_dispatch_seconds": round(t, 1),
        "meets_goal": t <= P99_DISPATCH_GOAL_S,
        "rate_needed_for_goal_per_s": needed_rate,
        "concurrency_needed_for_goal": math.ceil(needed_rate * t_run),
    }


def run(cost: dict[str, Any], hotpath: dict[str, Any] | None) -> dict[str, Any]:
    from .cost import LATENCY_MS, function_memory

    inp = inputs_from(cost, hotpath, LATENCY_MS, function_memory())
    shard_counts = sorted({16, 64, 256, SHARD_COUNT})  # the three and the stack's default
    rows = [model(inp, shards, conc) for conc in (STACK_WORKER_CONCURRENCY, 1000) for shards in shard_counts]
    return {
        "inputs": inp,
        "target_runs_per_minute": TARGET_RUNS_PER_MINUTE,
        "burst_factor": BURST_FACTOR,
        "rows": rows,
        "limits": LIMITS,
    }
