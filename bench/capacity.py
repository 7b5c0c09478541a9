"""Capacity model: sustained and burst runs per minute for a shard count and worker
concurrency, from the measured calls and write units per run and documented AWS limits.

Pure arithmetic. Every limit below is a documented default (see LIMITS for sources);
several are adjustable quotas, and the per-partition figures are the conservative reading
(one partition per key value, before DynamoDB splits a hot key range for heat)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from typing import Any

from .harness import (
    HORIZON_SECONDS,
    OUTBOX_PARALLELIZATION,
    SHARD_COUNT,
    SHARDS_PER_SWEEP,
    WORKER_BATCH_SIZE,
    WORKER_CONCURRENCY,
)

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
        "source": "functions/jobsched/cdk/names.py: sweeper timeout (the tick is every 60 s)",
    },
    "sqs_inflight_per_queue": {
        "value": 120000,
        "source": "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html",
    },
    "sqs_esm_provisioned_scale_up_per_minute": {
        "value": 1000,
        "source": "https://aws.amazon.com/blogs/aws/aws-lambda-enhances-sqs-processing-with-new-provisioned-mode-3x-faster-scaling-16x-higher-capacity"
        " (provisioned mode: up to 1,000 concurrency a minute, 3x the default)",
    },
    "sqs_esm_provisioned_max_concurrency": {
        "value": 20000,
        "source": "same announcement (up to 20,000 concurrency per mapping)",
    },
    "sqs_invocations_per_poller": {
        "value": 10,
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html"
        " (each SQS event poller: up to 10 concurrent invocations)",
    },
    "sqs_min_pollers_max": {
        "value": 200,
        "source": "https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/"
        "aws-properties-lambda-eventsourcemapping-provisionedpollerconfig.html (MinimumPollers 2..200)",
    },
    "lambda_scale_up_per_10s_per_function": {
        "value": 1000,
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html"
        " (1,000 execution environments every 10 s per function)",
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
    at_dispatch: dict[str, float] = defaultdict(float)  # what the worker writes: the burst's load
    for row in scenario["transitions"]:
        table = (
            "runs"
            if row["write"].startswith("run:")
            else "definitions"
            if row["write"].startswith("job:")
            else "idempotency"
        )
        per_table[table] += row["table_wcu"]
        if row.get("stage") == "worker":
            at_dispatch[table] += row["table_wcu"]
        for index, u in row["gsi_wcu"].items():
            per_index[index] += u
            if row.get("stage") == "worker":
                at_dispatch[f"gsi:{index}"] += u
            if row["write"] == "job: advance / save":
                job_advance_index[index] += u

    def parts(stage_name: str, function: str) -> tuple[float, float]:
        """Modelled Lambda seconds per run: (waiting on calls, our CPU scaled to the memory's CPU share)."""
        calls = stages.get(stage_name, {}).get("requests", {})
        wait = 0.0
        for key, count in calls.items():
            ms = latency_ms.get(key, latency_ms.get(key.split(":")[0] + ":*", latency_ms["*"]))
            wait += count * ms / 1000
        us = (hotpath or {}).get("stages", {}).get(stage_name, {}).get("us_per_run_median", 0.0)
        return wait, us / 1e6 * max(1.0, 1769 / memory[function])

    def seconds(stage_name: str, function: str) -> float:
        return sum(parts(stage_name, function))

    return {
        "write_units_per_run": per_table | {f"gsi:{k}": v for k, v in per_index.items()},
        "job_advance_gsi_units": dict(job_advance_index),
        "worker_write_units_per_run": dict(at_dispatch),
        "worker_seconds_per_run": seconds("worker", "worker"),
        "worker_wait_seconds_per_run": parts("worker", "worker")[0],
        "worker_cpu_seconds_per_run": parts("worker", "worker")[1],
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
    for index in ("open", "claimable", "runs_by_tenant"):
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
    pollers, prewarm_gb_s = poller_price(), price("lambda_provisioned_concurrency_gb_second_arm64")
    return {
        "inputs": inp,
        "target_runs_per_minute": TARGET_RUNS_PER_MINUTE,
        "burst_factor": BURST_FACTOR,
        "rows": rows,
        "top_of_hour": [
            top_of_hour(inp, preset, poller_price=pollers, prewarm_gb_second_usd=prewarm_gb_s)
            for preset in BURST_PRESETS
        ],
        "poller_price": asdict(pollers),
        "limits": LIMITS,
    }


def _price_entry(name: str) -> dict[str, Any]:
    import json
    from pathlib import Path

    entry: dict[str, Any] = json.loads((Path(__file__).with_name("prices.json")).read_text())["prices"][name]
    return entry


def price(name: str) -> float:
    return float(_price_entry(name)["usd"])


@dataclass(frozen=True)
class PollerPrice:
    """How provisioned mode bills an SQS event source's pollers: in Event Poller Units (EPU) of
    `pollers_per_epu` pollers each, per EPU-hour, per second with a minimum per use, and never
    fewer than `minimum_pollers` (AWS Lambda pricing, "Provisioned Mode for ESM")."""

    usd_per_epu_hour: float = 0.0
    pollers_per_epu: int = 1
    minimum_billed_seconds: float = 60.0
    minimum_pollers: int = 2

    def epus(self, pollers: float) -> int:
        """EPUs billed for `pollers` provisioned pollers (0: standard mode, not billed)."""
        if pollers <= 0:
            return 0
        return math.ceil(max(pollers, self.minimum_pollers) / self.pollers_per_epu)

    def billed_hours(self, seconds: float) -> float:
        return max(seconds, self.minimum_billed_seconds) / 3600


def poller_price() -> PollerPrice:
    entry = _price_entry("lambda_sqs_event_poller_unit_hour")
    return PollerPrice(
        usd_per_epu_hour=float(entry["usd"]),
        pollers_per_epu=int(entry["pollers_per_epu"]),
        minimum_billed_seconds=float(entry["minimum_billed_seconds"]),
        minimum_pollers=int(entry["minimum_pollers"]),
    )


# --- top-of-hour burst: runs made ahead, released at :00 by their SQS delay ---

HOURS_PER_MONTH = 730
UNRESERVED = 100  # Lambda keeps this much of the account's concurrency unreserved


@dataclass(frozen=True)
class BurstSettings:
    """The stack settings a top-of-hour burst depends on (jobsched/cdk/config.py names in comments)."""

    label: str
    shards: int = SHARD_COUNT  # shardCount (shardsPerSweep 1)
    horizon_seconds: int = HORIZON_SECONDS  # horizonSeconds: how early an hourly job's run is made
    max_concurrency: int = WORKER_CONCURRENCY["default"]  # workerConcurrency.default (standard mode)
    min_pollers: int = 0  # workerMinPollers.default (0: standard mode)
    max_pollers: int = 0  # workerMaxPollers.default
    batch_size: int = WORKER_BATCH_SIZE["default"]  # workerBatchSize.default
    account_concurrency: int = 1000  # the account's Lambda quota (accountConcurrency)
    table_wru_per_s: float = 40000  # each on-demand table's / index's throughput quota
    # What each table and index takes at once before any burst has warmed it (warmThroughput
    # write and indexWrite): 4,000 for a new on-demand table. Hourly bursts find the
    # partitions already split; the first one finds only this.
    warm_wru_per_s: float = 4000
    worker_memory_mb: int = 1024  # the worker's memory (its CPU share)
    # Worker environments kept initialised over the top of the hour (Lambda provisioned
    # concurrency on a schedule; not a stack setting): past them Lambda adds 1,000 a 10 s.
    prewarmed: int = 0
    prewarm_minutes_per_hour: int = 5

    @property
    def provisioned(self) -> bool:
        return self.min_pollers > 0

    def concurrency_cap(self) -> float:
        """Worker invocations the default queue's mapping can reach at most."""
        if self.provisioned:
            mapping = min(
                self.max_pollers * _v("sqs_invocations_per_poller"), _v("sqs_esm_provisioned_max_concurrency")
            )
        else:
            mapping = min(self.max_concurrency, _v("sqs_esm_max_concurrency"))
        return min(mapping, self.account_concurrency - UNRESERVED)

    def scale_up_per_second(self) -> float:
        """Concurrency the mapping adds a second, within Lambda's per-function scaling rate."""
        esm = _v(
            "sqs_esm_provisioned_scale_up_per_minute" if self.provisioned else "sqs_esm_scale_up_per_minute"
        )
        return min(esm / 60, _v("lambda_scale_up_per_10s_per_function") / 10)


def invocation_seconds(inp: dict[str, Any], batch_size: int, memory_mb: int = 1024) -> float:
    """One worker invocation of a full batch: its records wait on AWS calls side by side (one
    thread each), while their CPU time adds up on the function's CPU share (the measured CPU is
    already scaled to 1,024 MB; a full vCPU comes at 1,769 MB)."""
    cpu = inp["worker_cpu_seconds_per_run"] * max(1.0, 1769 / memory_mb) / max(1.0, 1769 / 1024)
    return inp["worker_wait_seconds_per_run"] + batch_size * cpu


def lambda_environments(warm: float, prewarmed: int, t: float) -> float:
    """Worker environments Lambda has t seconds after :00: those already initialised, then
    1,000 more at once and every 10 s."""
    step = _v("lambda_scale_up_per_10s_per_function")
    return max(warm, prewarmed) + step * (math.floor(t / 10) + 1)


def store_runs_per_second(inp: dict[str, Any], settings: BurstSettings) -> tuple[float, str]:
    """Runs/s DynamoDB takes at dispatch (the worker's writes only; the run was written and
    queued before :00): each table and index has its own on-demand quota, and the `open`
    index one 1,000 WCU/s partition per shard."""
    w = inp["worker_write_units_per_run"]
    limits = {
        f"{name}: on-demand quota": settings.table_wru_per_s / units for name, units in w.items() if units
    }
    if w.get("gsi:open"):
        limits["gsi:open: partition per shard"] = settings.shards * _v("partition_wcu_per_s") / w["gsi:open"]
    binding = min(limits, key=lambda k: limits[k])
    return limits[binding], binding


def first_burst_store_runs_per_second(inp: dict[str, Any], settings: BurstSettings) -> tuple[float, str]:
    """Runs/s DynamoDB takes at the first burst on new tables: each table and index at
    most its warm throughput (never above its quota), on top of the hourly limits."""
    rate, binding = store_runs_per_second(inp, settings)
    warm = min(settings.warm_wru_per_s, settings.table_wru_per_s)
    for name, units in inp["worker_write_units_per_run"].items():
        if units and warm / units < rate:
            rate, binding = warm / units, f"{name}: warm throughput"
    return rate, binding


def materialise(
    inp: dict[str, Any], settings: BurstSettings, runs: float, steady_per_minute: float
) -> dict[str, Any]:
    """How many of the burst's runs the sweepers make (and the outbox queues) before :00.

    An hourly job's :00 run is made by the first tick that finds it within the horizon; in
    the worst case that is a tick up to 60 s after it entered it, so floor(horizon / 60) ticks
    come before :00. Each tick makes what its invocations manage in their 50 s, less the
    steady load's runs."""
    per_tick = (
        math.ceil(settings.shards / SHARDS_PER_SWEEP)
        * _v("sweeper_budget_seconds")
        / inp["sweep_seconds_per_run"]
    )
    spare = max(0.0, per_tick - steady_per_minute)
    ticks = settings.horizon_seconds // 60
    before = min(runs, ticks * spare)
    return {
        "ticks_before": ticks,
        "spare_runs_per_tick": spare,
        "made_before": before,
        "made_late": runs - before,
        "tick_seconds_at_burst": min(runs / max(ticks, 1) + steady_per_minute, per_tick)
        * inp["sweep_seconds_per_run"]
        / math.ceil(settings.shards / SHARDS_PER_SWEEP),
    }


def top_of_hour(
    inp: dict[str, Any],
    settings: BurstSettings,
    *,
    runs: float = BURST_FACTOR * TARGET_RUNS_PER_MINUTE,
    steady_per_minute: float = TARGET_RUNS_PER_MINUTE,
    poller_price: PollerPrice = PollerPrice(),
    prewarm_gb_second_usd: float = 0.0,
    step: float = 0.05,
) -> dict[str, Any]:
    """p99 dispatch of `runs` due at :00:00 on a system warm at `steady_per_minute`."""
    steady = steady_per_minute / 60
    t_inv = invocation_seconds(inp, settings.batch_size, settings.worker_memory_mb)
    per_invocation = settings.batch_size / t_inv  # runs/s one busy invocation dispatches
    cap = settings.concurrency_cap()
    warm = steady / per_invocation  # invocations the steady load keeps busy
    start = min(cap, max(warm, settings.min_pollers * _v("sqs_invocations_per_poller")))
    store, store_binding = store_runs_per_second(inp, settings)
    made = materialise(inp, settings, runs, steady_per_minute)
    late_rate = made["spare_runs_per_tick"] / 60  # runs/s made after :00 (one tick spread over its minute)
    target = 0.99 * runs
    polled = start  # invocations the pollers would run; Lambda's environments may hold them back
    concurrency = min(polled, lambda_environments(warm, settings.prewarmed, 0.0))
    done, t, binding = 0.0, 0.0, ""
    while done < target and t < 7200:
        by_lambda = concurrency * per_invocation - steady
        by_store = store - steady
        available = made["made_before"] + late_rate * t - done
        limits = {"worker concurrency": by_lambda, f"DynamoDB ({store_binding})": by_store}
        binding = min(limits, key=lambda k: limits[k])
        rate = max(0.0, limits[binding])
        if available < rate * step:
            binding, rate = "runs made after :00 (sweeper)", max(0.0, available / step)
        done += rate * step
        t += step
        polled = min(cap, polled + settings.scale_up_per_second() * step)
        concurrency = min(polled, lambda_environments(warm, settings.prewarmed, t))
    peak_pollers = math.ceil(polled / _v("sqs_invocations_per_poller")) if settings.provisioned else 0
    # The minimum's EPUs all month, plus the extra EPUs of each hourly burst while it lasts
    # (billed per second, at least a minute each time).
    always_on_epus = poller_price.epus(settings.min_pollers)
    extra_epus = max(0, poller_price.epus(peak_pollers) - always_on_epus)
    always_on = always_on_epus * HOURS_PER_MONTH
    bursting = extra_epus * poller_price.billed_hours(t) * HOURS_PER_MONTH if extra_epus else 0.0
    return {
        "settings": asdict(settings),
        "runs": runs,
        "p99_dispatch_seconds": round(t, 1),
        "meets_goal": t <= P99_DISPATCH_GOAL_S,
        "binding": binding,
        "invocation_seconds": t_inv,
        "concurrency_at_start": start,
        "concurrency_cap": cap,
        "store_runs_per_second": store,
        "first_burst_store_runs_per_second": first_burst_store_runs_per_second(inp, settings)[0],
        "materialise": made,
        "concurrency_needed_for_goal": math.ceil((target / P99_DISPATCH_GOAL_S + steady) / per_invocation),
        "store_wru_per_s_needed_for_goal": {
            name: (target / P99_DISPATCH_GOAL_S + steady) * units
            for name, units in inp["worker_write_units_per_run"].items()
        },
        "peak_pollers": peak_pollers,
        "epu_hours_per_month": always_on + bursting,
        "prewarm_gb_seconds_per_month": (
            gb_s := settings.prewarmed
            * settings.worker_memory_mb
            / 1024
            * settings.prewarm_minutes_per_hour
            * 60
            * HOURS_PER_MONTH
        ),
        "provisioned_usd_per_month": (always_on + bursting) * poller_price.usd_per_epu_hour
        + gb_s * prewarm_gb_second_usd,
    }


# The stack's defaults, and what a user expecting a million-run top of hour would set: pollers
# ready for the whole drain at :00 (MinimumPollers' ceiling), room to grow, the account quota
# raised to hold them, the horizon and shards so the sweepers make every run minutes ahead,
# and the tables and indexes warmed to their quota so the first burst is not held to 4,000
# write units a second (warmThroughput write and indexWrite 40000).
_BURST_1M = BurstSettings(
    "1M top of hour (workerMinPollers 30, workerMaxPollers 400, horizonSeconds 600, shardCount 64, "
    "warmThroughput write and indexWrite 40000)",
    shards=64,
    horizon_seconds=600,
    min_pollers=30,
    max_pollers=400,
    account_concurrency=5000,
    warm_wru_per_s=40000,
)
# The same preset as cdk.json context (functions/jobsched/cdk/config.py), for the README.
BURST_1M_CONTEXT = {
    "shardCount": 64,
    "horizonSeconds": 600,
    "sweepAheadSeconds": 600,  # at least the horizon
    "workerMinPollers": {"default": 30},
    "workerMaxPollers": {"default": 400},
    "accountConcurrency": 5000,
    "warmThroughput": {"write": 40000, "indexWrite": 40000},
}
# Beyond the stack's settings: each row adds to the one before.
_BURST_QUOTAS = replace(
    _BURST_1M,
    label="the same with DynamoDB quotas raised to 1.5M WRU/s and 256 shards",
    shards=256,
    min_pollers=200,
    table_wru_per_s=1_500_000,
    warm_wru_per_s=1_500_000,
)
_BURST_PREWARMED = replace(
    _BURST_QUOTAS,
    label="and 2,000 worker environments pre-warmed at 1,769 MB (one vCPU) for 5 min an hour",
    worker_memory_mb=1769,
    prewarmed=2000,
)
BURST_PRESETS = (BurstSettings("stack defaults"), _BURST_1M, _BURST_QUOTAS, _BURST_PREWARMED)
