"""Cost per run: every AWS request per stage, the billed units it costs, and dollars per
million successful runs at list prices (bench/prices.json).

Scenarios, each in a fresh in-process moto account with a simulated clock:
- idle: no jobs; what the minute ticks cost (the fixed part, subtracted from the others);
- recurring, dense: jobs every 60 s, ten due in each busy second (what batching sees at
  scale); the headline figure;
- recurring, sparse: one run due per second (batches of one);
- one-time: `runAt` jobs created through the API (with an idempotency key), one run each;
- the realistic ones, each job with an `http` target (delivered for real to the bench
  receiver on loopback, through the production HTTP client) and a 1 KB JSON payload, both
  of which a run references from its job (not copied into its item): minutely (the dense
  shape), hourly (one run per schedule advance, so each run pays for its job's advance and
  `due` index rekey), one-time via the API, and one-time answered 503 three times before its
  200 (three retries).

Lambda time is modelled, not taken from moto: our code's measured time (outside AWS
calls), scaled to the function's CPU share, plus an assumed in-region latency per AWS call."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobsched.domain.budget import MAX_RUN_BYTES
from jobsched.store.definitions import (
    GUARD_PREFIX,
    LIVE_PREFIX,
    RATE_PREFIX,
    SHARD_COUNT_ITEM,
    SIGNING_PREFIX,
    STATS_PREFIX,
)
from jobsched.store.runs import RUN_PREFIX
from jobsched.store.tenant_slots import SLOT_PREFIX

from . import handlers, units
from .calls import Call
from .harness import FUNCTION_OF, SHARD_COUNT, Harness
from .receiver import Receiver
from .stats import percentile

PRICES_FILE = Path(__file__).with_name("prices.json")

# Assumed in-region latency of one call from Lambda (ms): what replaces moto's time.
LATENCY_MS: dict[str, float] = {
    "dynamodb:GetItem": 4,
    "dynamodb:PutItem": 6,
    "dynamodb:UpdateItem": 6,
    "dynamodb:DeleteItem": 6,
    "dynamodb:Query": 6,
    "dynamodb:TransactWriteItems": 15,
    "dynamodb:BatchWriteItem": 12,
    "sqs:*": 12,
    # An HTTP target's receiver answering over a new connection (TLS included): the worker
    # waits for it, and Lambda bills the wait.
    "http:*": 50,
    "*": 10,
}
FULL_VCPU_MB = 1769  # Lambda gives one full vCPU at 1,769 MB; less memory, proportionally less CPU
PLATFORM_LOG_BYTES = 350  # START, END and REPORT lines Lambda writes per invocation
XRAY_SAMPLED = 0.05  # default sampling rule beyond the first request each second
ESM_IDLE_RECEIVES_PER_MINUTE = 3 * 5 * 3  # 3 queues x ~5 pollers x one 20 s long poll each
RUN_ITEM_OVERHEAD = 100  # bytes DynamoDB adds per stored item
# `billingMode: provisioned` (functions/jobsched/cdk/config.py): capacity auto-scaled to this utilisation, so
# each used unit pays for 1/0.7 units provisioned.
PROVISIONED_UTILIZATION = 0.70
MINUTES_PER_MONTH = 43_800

# Issue 46's goals for a run, reported per scenario (never asserted).
GOAL_WRITE_UNITS = 5.0
STRETCH_WRITE_UNITS = 3.0
GOAL_USD_PER_MILLION = 4.0
STRETCH_USD_PER_MILLION = 3.0
GOAL_ITEM_BYTES = 1024  # no run item over 1 KB on the usual path (success on the first attempt)

# What a realistic job runs: an `http` target and a JSON payload of this many bytes.
PAYLOAD_BYTES = 1024
WEBHOOK = "http target + 1 KB payload"

STAGES = ("api", "sweep", "outbox", "worker", "worker-esm", "reconcile")
STAGE_LABELS = {
    "api": "API",
    "sweep": "sweep",
    "outbox": "outbox",
    "worker": "worker",
    "worker-esm": "worker: SQS poller (receive, delete)",
    "reconcile": "reconcile",
}


def load_prices(path: Path = PRICES_FILE) -> dict[str, float]:
    data = json.loads(path.read_text())
    return {name: float(entry["usd"]) for name, entry in data["prices"].items()}


def function_memory() -> dict[str, int]:
    from jobsched.cdk.names import FUNCTIONS

    return {f.name: f.memory_mb for f in FUNCTIONS}


def latency(call: Call) -> float:
    key = f"{call.service}:{call.operation}"
    ms = LATENCY_MS.get(key, LATENCY_MS.get(f"{call.service}:*", LATENCY_MS["*"]))
    return ms / 1000


# --- labels: which transition a write is ---


def _s(item: dict[str, Any] | None, name: str) -> str | None:
    value = (item or {}).get(name)
    return value.get("S") if isinstance(value, dict) else None


def _is_run(item: dict[str, Any] | None) -> bool:
    """A run item of the runs table (not a tenant slot beside the runs)."""
    return (_s(item, "sk") or "").startswith(RUN_PREFIX)


def label(write: dict[str, Any]) -> str:
    table, old, new = write["table"], write["old"], write["new"]
    if old is None and new is None:
        return f"{table}: write that left no item (failed, or a delete of nothing)"
    if table == "jobsched-runs" and (_s(new or old, "job_id") or "").startswith(SLOT_PREFIX):
        return "tenant slot: take" if new else "tenant slot: release"
    if table == "jobsched-runs":
        before, after = _s(old, "state"), _s(new, "state")
        if before is None:
            return f"run: insert {after}"
        saved_now = '"result_saved_at"' in (_s(new, "doc") or "")
        saved_before = '"result_saved_at"' in (_s(old, "doc") or "")
        if before == after == "LEASED" and saved_now and not saved_before:
            return "run: effect result saved (idempotency record: completed)"
        return f"run: {before}→{after}" if before != after else f"run: rewrite {after}"
    if table == "jobsched-definitions":
        key = _s(new or old, "job_id") or ""
        if key.startswith(STATS_PREFIX) and (new or {}).get("fold_rev") != (old or {}).get("fold_rev"):
            return "job: counters fold"
        for prefix, name in DEFINITION_LABELS:
            if key.startswith(prefix):
                return name
        return "job: create" if old is None else "job: advance / save"
    return table


# Items of the definitions table beside the jobs, by key prefix.
DEFINITION_LABELS = (
    (STATS_PREFIX, "job: stats counter (ADD)"),
    (GUARD_PREFIX, "job: idempotency guard"),
    (SIGNING_PREFIX, "job: signing secret"),
    (LIVE_PREFIX, "tenant: live jobs (quota)"),
    (RATE_PREFIX, "tenant: API request counter"),
    (SHARD_COUNT_ITEM, "shard count record"),
)


# --- one scenario ---


@dataclass
class Measured:
    name: str
    runs: int
    calls: list[Call]
    invocations: dict[str, list[Any]]
    log_bytes: dict[str, int]
    minutes: float
    final_run_bytes: list[int]
    max_run_bytes: int = 0  # the largest run item any write left or found
    key: str = ""  # the scenario's name in code (the report looks scenarios up by it)
    usual_path: bool = True  # every run succeeds on its first attempt
    attempts: dict[str, int] = field(default_factory=dict)  # deliveries per run, http targets only


def _measure(name: str, h: Harness, runs: int, minutes: float, **more: Any) -> Measured:
    calls = [c for c in h.recorder.calls if c.stage != "setup"]
    final, largest = [], 0
    for call in calls:
        for write in call.writes:
            if write["table"] != "jobsched-runs":
                continue
            if _s(write["new"], "state") == "SUCCEEDED":
                final.append(units.item_size(write["new"]))
            for image in (write["old"], write["new"]):
                if _is_run(image):
                    largest = max(largest, units.item_size(image))
    return Measured(
        name, runs, calls, h.invocations_by_stage(), h.stage_bytes(), minutes, final, largest, **more
    )


def webhook_payload(size: int = PAYLOAD_BYTES) -> dict[str, Any]:
    """A JSON payload of exactly `size` bytes as the API measures it (compact JSON), shaped
    like a reminder a job might send."""
    from jobsched.domain.models import payload_size

    payload: dict[str, Any] = {
        "event": "invoice.reminder",
        "customerId": "cus_4f9a2c71d0",
        "invoiceId": "in_2026_11_0042",
        "amountCents": 12900,
        "currency": "EUR",
        "dueOn": "2026-11-30",
        "note": "",
    }
    room = size - payload_size(payload)
    if room < 0:
        raise ValueError(f"a payload is at least {size - room} bytes")
    payload["note"] = ("Your invoice is due soon; pay online or reply to this message. " * (room // 60 + 1))[
        :room
    ]
    return payload


def _webhook_fields(receiver: Receiver, **more: Any) -> dict[str, Any]:
    """The job fields of a realistic job: the receiver as its `http` target, the 1 KB payload."""
    return {"target": {"kind": "http", "url": receiver.url}, "payload": webhook_payload(), **more}


def idle(minutes: int = 2, shards: int = SHARD_COUNT) -> Measured:
    with Harness(shards=shards) as h:
        start = h.clock.t
        h.run_until(start + minutes * 60)
        return _measure("idle", h, 0, minutes)


PERIODS = {60: "minutely", 3600: "hourly"}


def recurring(
    jobs: int,
    per_second: int,
    minutes: int,
    shards: int = SHARD_COUNT,
    *,
    every: int = 60,
    webhook: bool = False,
) -> Measured:
    """`jobs` jobs every `every` seconds, `per_second` of them due in each busy second;
    `minutes` of sweeps, then a drain with only the reconciler ticking, so every run made is
    finished. `webhook`: each job has an `http` target (the receiver) and a 1 KB payload."""
    handlers.take()
    with Receiver() as receiver, Harness(shards=shards) as h:
        start = h.clock.t
        fields = _webhook_fields(receiver) if webhook else None
        h.add_recurring_jobs(jobs, per_second, prefix="r", tenants=5, every=every, fields=fields)
        h.invocations.clear()
        h.sink.bytes.clear()
        h.run_until(start + minutes * 60 + 1)
        drained = h.drain()
        if webhook:
            handlers.take()
            period = PERIODS.get(every, f"every {every} s")
            name, key, runs = f"{period}, {WEBHOOK}", f"{period}_http", len(receiver.succeeded)
        else:
            name = f"recurring, {per_second} due per busy second"
            key, runs = f"recurring_{per_second}", len(handlers.take())
        return _measure(name, h, runs, minutes + drained / 60, key=key, attempts=dict(receiver.attempts))


def one_time(
    jobs: int,
    per_second: int = 10,
    shards: int = SHARD_COUNT,
    *,
    webhook: bool = False,
    fail_first: int = 0,
) -> Measured:
    """`jobs` jobs created through the API, each to run once, `per_second` of them due in each
    busy second. `webhook`: each with an `http` target and a 1 KB payload, whose receiver
    answers the first `fail_first` attempts of each run 503 (the run retries that many
    times: `maxAttempts` is set to allow it)."""
    handlers.take()
    with Receiver(fail_first) as receiver, Harness(shards=shards) as h:
        start = h.clock.t
        more: dict[str, Any] = {"maxAttempts": fail_first + 1} if fail_first else {}
        fields = _webhook_fields(receiver, **more) if webhook else {}
        for i in range(jobs):
            h.api(
                "POST",
                "/v1/jobs",
                {
                    "name": f"o{i}",
                    "type": handlers.JOB_TYPE,
                    "runAt": h.iso(30 + i // per_second),
                    "idempotencyKey": f"bench-{i}",
                    **fields,
                },
                tenant=f"tenant-{i % 5}",
            )
        h.run_until(start + 60 + jobs // per_second + 120, sweep=True)
        for _ in range(10):  # retries back off: a few minutes more until every run has its 200
            if not webhook or len(receiver.succeeded) >= jobs:
                break
            h.run_until(h.clock.t + 60, sweep=True)
        if not webhook:
            return _measure(
                "one-time via API", h, len(handlers.take()), (h.clock.t - start) / 60, key="one_time"
            )
        handlers.take()
        name, key = f"one-time via API, {WEBHOOK}", "one_time_http"
        if fail_first:
            name += f", retried {fail_first} times (503)"
            key += f"_{fail_first}_retries"
        return _measure(
            name,
            h,
            len(receiver.succeeded),
            (h.clock.t - start) / 60,
            key=key,
            usual_path=not fail_first,
            attempts=dict(receiver.attempts),
        )


# --- from measurements to units and dollars ---


def _stage_totals(m: Measured, memory: dict[str, int]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "requests": Counter(),
            "ddb_requests": 0,
            "ddb_write_requests": 0,
            "wcu": 0.0,
            "gsi_wcu": Counter(),
            "rcu": 0.0,
            "sqs_requests": 0,
            "stream_requests": 0,
            "invocations": 0,
            "gb_seconds": 0.0,
            "gb_seconds_moto": 0.0,
            "log_bytes": 0,
        }
    )
    for call in m.calls:
        entry = out[call.stage]
        entry["requests"][f"{call.service}:{call.operation}"] += 1
        if call.service == "dynamodb":
            entry["ddb_requests"] += 1
            if call.writes:
                entry["ddb_write_requests"] += 1
        elif call.service == "sqs":
            entry["sqs_requests"] += call.requests
        elif call.service == "dynamodbstreams":
            entry["stream_requests"] += 1
        entry["wcu"] += call.wcu
        entry["rcu"] += call.rcu
        for write in call.writes:
            for index, u in write["gsi"].items():
                entry["gsi_wcu"][index] += u
    for stage_name, invocations in m.invocations.items():
        mem = memory[FUNCTION_OF[stage_name]]
        cpu_scale = max(1.0, FULL_VCPU_MB / mem)
        entry = out[stage_name]
        for inv in invocations:
            ours = max(0.0, inv.wall - inv.aws_wall)
            modeled = ours * cpu_scale + sum(latency(c) for c in inv.calls)
            entry["invocations"] += 1
            entry["gb_seconds"] += math.ceil(modeled * 1000) / 1000 * mem / 1024
            entry["gb_seconds_moto"] += math.ceil(inv.wall * 1000) / 1000 * mem / 1024
    for stage_name, count in m.log_bytes.items():
        out[stage_name]["log_bytes"] += count
    for stage_name in list(out):
        out[stage_name]["log_bytes"] += PLATFORM_LOG_BYTES * out[stage_name]["invocations"]
    return out


_NUMERIC = (
    "ddb_requests",
    "ddb_write_requests",
    "wcu",
    "rcu",
    "sqs_requests",
    "stream_requests",
    "invocations",
    "gb_seconds",
    "gb_seconds_moto",
    "log_bytes",
)


def _minus(a: dict[str, Any], b: dict[str, Any] | None, times: float) -> dict[str, Any]:
    """a - times * b, field by field, floored at zero (the fixed part of a tick)."""
    if b is None or times == 0:
        return a
    out = dict(a)
    for key in _NUMERIC:
        out[key] = max(0.0, a[key] - b[key] * times)
    out["gsi_wcu"] = Counter(
        {k: max(0.0, v - b["gsi_wcu"].get(k, 0) * times) for k, v in a["gsi_wcu"].items()}
    )
    return out


def _per(entry: dict[str, Any], runs: int) -> dict[str, Any]:
    out = {key: entry[key] / runs for key in _NUMERIC}
    out["gsi_wcu"] = {k: v / runs for k, v in sorted(entry["gsi_wcu"].items())}
    out["gsi_wcu_total"] = sum(out["gsi_wcu"].values())
    out["requests"] = {k: round(v / runs, 3) for k, v in sorted(entry["requests"].items())}
    return out


def dollars(entry: dict[str, Any], prices: dict[str, float], stage_name: str) -> dict[str, float]:
    wru = entry["wcu"] + entry["gsi_wcu_total"]
    out = {
        "dynamodb_write": wru * prices["dynamodb_write_request_unit"],
        "dynamodb_read": entry["rcu"] * prices["dynamodb_read_request_unit"],
        "sqs": entry["sqs_requests"] * prices["sqs_standard_request"],
        "lambda_requests": entry["invocations"] * prices["lambda_request"],
        "lambda_duration": entry["gb_seconds"] * prices["lambda_gb_second_arm64"],
        "logs": entry["log_bytes"] / 1e9 * prices["cloudwatch_logs_ingest_gb"],
        "xray": entry["invocations"] * XRAY_SAMPLED * prices["xray_trace_recorded"],
        "api_gateway": entry["invocations"] * prices["api_gateway_rest_request"]
        if stage_name == "api"
        else 0.0,
    }
    out["total"] = sum(out.values())
    return out


def analyse(
    m: Measured,
    baseline: dict[str, dict[str, Any]] | None,
    prices: dict[str, float],
    memory: dict[str, int],
    retention_days: int,
) -> dict[str, Any]:
    if not m.runs:
        raise RuntimeError(f"{m.name}: no run succeeded, so there is no cost per run")
    totals = _stage_totals(m, memory)
    stages: dict[str, Any] = {}
    for stage_name in STAGES:
        if stage_name not in totals:
            continue
        entry = totals[stage_name]
        if stage_name in ("sweep", "reconcile") and baseline and stage_name in baseline:
            entry = _minus(entry, baseline[stage_name], entry["invocations"])
        per_run = _per(entry, m.runs)
        per_run["usd"] = dollars(per_run, prices, stage_name)
        stages[stage_name] = per_run
    item = sum(m.final_run_bytes) / len(m.final_run_bytes) if m.final_run_bytes else 0.0
    months = retention_days / 30.4
    storage = (
        (item + RUN_ITEM_OVERHEAD)
        / 1e9
        * months
        * (prices["dynamodb_storage_gb_month"] + prices["dynamodb_pitr_gb_month"])
    )
    total = sum(s["usd"]["total"] for s in stages.values()) + storage
    sums = {
        key: sum(s[key] for s in stages.values())
        for key in (
            "wcu",
            "gsi_wcu_total",
            "rcu",
            "sqs_requests",
            "invocations",
            "ddb_requests",
            "ddb_write_requests",
            "gb_seconds",
            "log_bytes",
        )
    }
    # The same units on provisioned capacity: a unit-hour serves 3,600 units at full use.
    on_demand_ddb = sum(s["usd"]["dynamodb_write"] + s["usd"]["dynamodb_read"] for s in stages.values())
    provisioned_ddb = (
        (sums["wcu"] + sums["gsi_wcu_total"]) * prices["dynamodb_provisioned_wcu_hour"]
        + sums["rcu"] * prices["dynamodb_provisioned_rcu_hour"]
    ) / (3600 * PROVISIONED_UTILIZATION)
    return {
        "scenario": m.name,
        "key": m.key,
        "usual_path": m.usual_path,
        "runs": m.runs,
        "attempts_per_run": sum(m.attempts.values()) / m.runs if m.attempts and m.runs else None,
        "usd_per_million_provisioned": (total - on_demand_ddb + provisioned_ddb) * 1e6,
        "stages": stages,
        "per_run": {
            **sums,
            "write_units": sums["wcu"] + sums["gsi_wcu_total"],
            "run_item_bytes": item,
            "finished_item_bytes_p50": percentile(m.final_run_bytes, 50),
            "finished_item_bytes_max": max(m.final_run_bytes, default=0),
            "max_item_bytes": m.max_run_bytes,
            "usd_storage": storage,
            "usd": total,
        },
        "usd_per_million": total * 1e6,
        "transitions": transitions(m.calls, m.runs),
    }


def transitions(calls: list[Call], runs: int) -> list[dict[str, Any]]:
    """Where every write unit goes: per kind of write, per run."""
    rows: dict[str, dict[str, Any]] = {}
    for call in calls:
        for write in call.writes:
            name = label(write)
            row = rows.setdefault(
                name, {"write": name, "stage": call.stage, "count": 0, "table_wcu": 0.0, "gsi_wcu": Counter()}
            )
            row["count"] += 1
            row["table_wcu"] += write["units"]
            for index, u in write["gsi"].items():
                row["gsi_wcu"][index] += u
    out = []
    for row in rows.values():
        gsi = {k: v / runs for k, v in sorted(row["gsi_wcu"].items())}
        out.append(
            {
                "write": row["write"],
                "stage": row["stage"],
                "per_run": row["count"] / runs,
                "table_wcu": row["table_wcu"] / runs,
                "gsi_wcu": gsi,
                "total_wcu": row["table_wcu"] / runs + sum(gsi.values()),
            }
        )
    return sorted(out, key=lambda r: -r["total_wcu"])


def fixed_costs(
    baseline: dict[str, dict[str, Any]], idle_minutes: float, prices: dict[str, float]
) -> dict[str, Any]:
    """What the deployment costs per month with no runs at all."""
    per_month = {}
    for stage_name, entry in baseline.items():
        if stage_name not in ("sweep", "reconcile"):
            continue
        per_min = _per(entry, 1)
        per_min = {k: (v / idle_minutes if isinstance(v, float | int) else v) for k, v in per_min.items()}
        per_min["gsi_wcu_total"] = 0.0
        usd = dollars(per_min, prices, stage_name)
        per_month[stage_name] = {k: v * MINUTES_PER_MONTH for k, v in usd.items()}
    pollers = ESM_IDLE_RECEIVES_PER_MINUTE * MINUTES_PER_MONTH * prices["sqs_standard_request"]
    per_month["sqs pollers (empty long polls)"] = {"sqs": pollers, "total": pollers}
    return {"usd_per_month": per_month, "total_usd_per_month": sum(v["total"] for v in per_month.values())}


# --- what-ifs: the same writes under a changed design ---

Transform = Callable[[str, dict[str, Any]], dict[str, Any] | None]


def _strip(item: dict[str, Any] | None, *names: str) -> dict[str, Any] | None:
    if item is None:
        return None
    return {k: v for k, v in item.items() if k not in names}


@dataclass(frozen=True)
class WhatIf:
    name: str
    change: str  # what would change in the design
    drop: Callable[[str, dict[str, Any]], bool] | None = None  # writes that no longer happen
    image: Callable[[dict[str, Any] | None], dict[str, Any] | None] | None = None  # item as it would be


# Changes not made (each gives something up, named in `change`), re-computed on the recorded writes.
WHAT_IFS = (
    WhatIf(
        "skip QUEUED write",
        "outbox sends and does not write back (runs show PENDING until claimed); PENDING's"
        " repair deadline becomes due_at + queue dwell, so a lost publish is found later",
        drop=lambda name, w: name == "run: PENDING→QUEUED",
    ),
)

# Not a cut but a lifecycle this design does not have: a run made when it is first claimed (the
# claim writes it) instead of ahead, with SQS redelivery as its repair until then; re-computed
# on the same writes to put a figure on the floor's one way down that keeps every guarantee.
RUN_AT_CLAIM = WhatIf(
    "make the run at its claim",
    "no PENDING insert or QUEUED write, and no `open` entry on the usual path (the claim writes the item)",
    drop=lambda name, w: name in ("run: insert PENDING", "run: PENDING→QUEUED"),
    image=lambda item: _strip(item, "open_shard", "deadline_at") if item and "sk" in item else item,
)


# Made since the first measurement, when a run cost 35 write units (reported with the figures).
MADE = (
    "keys-only `open` and `claimable` indexes, `by_tenant` projecting only `state` (readers fetch the items)",
    "a run document without nulls, defaults or what the item's attributes already hold (< 1 KB)",
    "`claim_key` only on runs waiting for external workers",
    "an open-index check time the usual PENDING → QUEUED → LEASED path does not move",
    "sweeps make a due job's runs 300 s ahead (`sweepAheadSeconds`): one advance for several runs",
    "Powertools idempotency records on the run item, not a table of their own (the in-progress"
    " record is one write of the run between its claim and the effect)",
    "no `leased_by_tenant` index entries (nothing read them) and a keys-only `runs_by_tenant` written"
    " once; no listing `summary` on the item; a document that leaves out what its reader restores",
    "the completion is the completed idempotency record (the first write after the effect, as Powertools'"
    " own save was): no separate save of the result before it",
    "the tenant slot taken by a conditional put of its own before the claim's, not in one transaction with"
    " it (a transaction bills every item twice)",
    "a job's succeeded runs counted by folds of its runs (at a read of the job, and by the sweeper every"
    " 6 hours or 1,000 runs) instead of an ADD per run; runs a fold may not meet still ADD",
)


def _cost_under(writes: list[tuple[str, str, dict[str, Any]]], changes: list[WhatIf], runs: int) -> float:
    total = 0.0
    for name, _stage, write in writes:
        if any(c.drop and c.drop(name, write) for c in changes):
            continue
        old, new = write["old"], write["new"]
        for change in changes:
            if change.image:
                old, new = change.image(old), change.image(new)
        total += units.write_cost(units.SHAPES[write["table"]], old, new, transactional=write["tx"]).total
    return total / runs


def what_ifs(m: Measured) -> list[dict[str, Any]]:
    """Write units per run, each change alone and then cumulatively, biggest saving first."""
    writes = [(label(w), c.stage, w) for c in m.calls if c.stage in STAGES for w in c.writes]
    base = _cost_under(writes, [], m.runs)
    alone = sorted(((base - _cost_under(writes, [w], m.runs), w) for w in WHAT_IFS), key=lambda x: -x[0])
    rows, applied = [], []
    for saving, change in alone:
        applied.append(change)
        rows.append(
            {
                "change": change.name,
                "how": change.change,
                "saves_alone": saving,
                "write_units_after": _cost_under(writes, applied, m.runs),
            }
        )
    return [{"change": "as measured", "how": "", "saves_alone": 0.0, "write_units_after": base}, *rows]


def run_at_claim(m: Measured) -> float:
    """Write units per run had the run been made at its claim (RUN_AT_CLAIM)."""
    writes = [(label(w), c.stage, w) for c in m.calls if c.stage in STAGES for w in c.writes]
    return _cost_under(writes, [RUN_AT_CLAIM], m.runs)


def goals_met(scenario: dict[str, Any]) -> dict[str, bool]:
    """Issue 46's goals for one analysed scenario, each met or not. A run that retries is
    held only to its byte budget (domain.budget.MAX_RUN_BYTES): the units, dollars and 1 KB
    goals are the usual path's (success on the first attempt)."""
    pr = scenario["per_run"]
    if not scenario.get("usual_path", True):
        return {"item_bounded": pr["max_item_bytes"] <= MAX_RUN_BYTES}
    return {
        "write_units": pr["write_units"] <= GOAL_WRITE_UNITS,
        "write_units_stretch": pr["write_units"] <= STRETCH_WRITE_UNITS,
        "usd": scenario["usd_per_million"] <= GOAL_USD_PER_MILLION,
        "usd_stretch": scenario["usd_per_million"] <= STRETCH_USD_PER_MILLION,
        "item": pr["max_item_bytes"] <= GOAL_ITEM_BYTES,
    }


def run(
    dense: tuple[int, int] = (100, 4),
    sparse: tuple[int, int] = (20, 3),
    one_time_jobs: int = 100,
    idle_minutes: int = 2,
    shards: int = SHARD_COUNT,
    *,
    hourly_jobs: int = 100,
    retried_jobs: int = 20,
) -> dict[str, Any]:
    """`dense`/`sparse`: (jobs, minutes of sweeps) for the two recurring scenarios; the
    minutely scenario with an http target has the dense one's shape. `one_time_jobs` for
    both one-time scenarios, `hourly_jobs` hourly jobs (one run each), `retried_jobs`
    one-time jobs whose runs retry three times."""
    import warnings

    from jobsched.settings import Settings

    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    prices = load_prices()
    memory = function_memory()
    retention = Settings().retention_days
    base_m = idle(idle_minutes, shards)
    base_totals = _stage_totals(base_m, memory)
    baseline = {k: _per(v, max(1, v["invocations"])) for k, v in base_totals.items()}
    for v in baseline.values():
        v["gsi_wcu"] = Counter(v["gsi_wcu"])
    scenarios = [
        recurring(dense[0], 10, dense[1], shards),
        recurring(sparse[0], 1, sparse[1], shards),
        one_time(one_time_jobs, shards=shards),
        recurring(dense[0], 10, dense[1], shards, webhook=True),
        recurring(hourly_jobs, 10, 1, shards, every=3600, webhook=True),
        one_time(one_time_jobs, shards=shards, webhook=True),
        one_time(retried_jobs, shards=shards, webhook=True, fail_first=3),
    ]
    results = [analyse(m, baseline, prices, memory, retention) for m in scenarios]
    for result in results:
        result["goals_met"] = goals_met(result)
    results[0]["what_ifs"] = what_ifs(scenarios[0])
    results[0]["run_at_claim_write_units"] = run_at_claim(scenarios[0])
    results[0]["changes_made"] = list(MADE)
    return {
        "scenarios": results,
        "fixed": fixed_costs(base_totals, idle_minutes, prices),
        "eventbridge_scheduler_usd_per_million": prices["eventbridge_scheduler_invocation"] * 1e6,
        "assumptions": {
            "latency_ms": LATENCY_MS,
            "lambda_cpu": f"our code's measured time x {FULL_VCPU_MB}/memory MB (CPU share), not below 1x",
            "platform_log_bytes_per_invocation": PLATFORM_LOG_BYTES,
            "xray_sampled_fraction": XRAY_SAMPLED,
            "retention_days": retention,
            "esm_idle_receives_per_minute": ESM_IDLE_RECEIVES_PER_MINUTE,
            "provisioned_utilization": PROVISIONED_UTILIZATION,
            "memory_mb": memory,
            "http_target": "the bench receiver on loopback (bench/receiver.py), through the production HTTP"
            " client; its time replaced by latency_ms['http:*']",
            "payload_bytes": PAYLOAD_BYTES,
        },
    }
