# ruff: noqa: E501  (the goals' labels read better unwrapped)
"""The figures of `make bench-peers`, from what was recorded: lag at the receiver, duplicates
and missing effects, CPU per 1,000 jobs, creation rate, the ratios of jobsched to each peer
and the issue's three goals. Pure: no peer is imported."""

from __future__ import annotations

import math
from typing import Any

from ..stats import summary

JOBSCHED = "jobsched"
PROCRASTINATE = "procrastinate"
# The goals: jobsched's own CPU a run within 2x of procrastinate's whole stack; local
# mode's p99 for 1,000 due at once within 3x of procrastinate's; 1,000 jobs created through
# the API in under 10 s.
CPU_RATIO_GOAL = 2.0
P99_RATIO_GOAL = 3.0
CREATE_GOAL_JOBS = 1_000
CREATE_GOAL_SECONDS = 10.0


def effects(jobs: list[tuple[str, float]], arrivals: dict[str, list[float]]) -> dict[str, Any]:
    """Lag (first arrival - due instant) of each job whose effect arrived, and how many effects
    arrived more than once or never."""
    lags = []
    duplicates = duplicated_jobs = 0
    for job_id, due in jobs:
        seen = sorted(arrivals.get(job_id, []))
        if not seen:
            continue
        lags.append(seen[0] - due)
        if len(seen) > 1:
            duplicates += len(seen) - 1
            duplicated_jobs += 1
    return {
        "lag": summary(lags),
        "lags": sorted(round(x, 4) for x in lags),
        "duplicates": duplicates,
        "jobs_duplicated": duplicated_jobs,
        "missing": len(jobs) - len(lags),
    }


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each group used between the two readings (a group gone by `after`: 0)."""
    return {name: max(0.0, after.get(name, before[name]) - before[name]) for name in before}


def per_thousand(seconds: float, jobs: int) -> float:
    return 1000.0 * seconds / jobs if jobs else math.nan


def _ratio(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return math.nan
    return a / b


def pooled(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One system on one workload over its rounds: lags pooled, CPU and creation summed."""
    lags = [x for r in rows for x in r["lags"]]
    jobs = sum(r["jobs"] for r in rows)
    groups: dict[str, float] = {}
    for r in rows:
        for name, seconds in r["cpu"].items():
            groups[name] = groups.get(name, 0.0) + seconds
    own = sum(seconds for name, seconds in groups.items() if name in rows[0]["own_groups"])
    total = sum(groups.values())
    # What the stack would have used over the same spans with no job at all (its idle rate,
    # measured at its start): the rest is the jobs' own cost.
    idle = sum(sum(r.get("idle_cpu_per_second", {}).values()) * r.get("interval_seconds", 0.0) for r in rows)
    own_idle = sum(
        sum(v for k, v in r.get("idle_cpu_per_second", {}).items() if k in r["own_groups"])
        * r.get("interval_seconds", 0.0)
        for r in rows
    )
    created = sum(r["create_seconds"] for r in rows)
    return {
        "rounds": len(rows),
        "jobs": jobs,
        "lag": summary(lags),
        "duplicates": sum(r["duplicates"] for r in rows),
        "missing": sum(r["missing"] for r in rows),
        "cpu_per_1000": {name: per_thousand(s, jobs) for name, s in groups.items()},
        "cpu_per_1000_own": per_thousand(own, jobs),
        "cpu_per_1000_total": per_thousand(total, jobs),
        "cpu_per_1000_net_of_idle": per_thousand(max(0.0, total - idle), jobs),
        "cpu_per_1000_own_net_of_idle": per_thousand(max(0.0, own - own_idle), jobs),
        "interval_seconds": sum(r.get("interval_seconds", 0.0) for r in rows),
        "create_seconds_mean": created / len(rows) if rows else math.nan,
        "create_jobs_per_second": jobs / created if created > 0 else math.nan,
        "throttled": sum(r.get("throttled", 0) for r in rows),
        "created_in_batches": any(r.get("created_in_batches") for r in rows),
        "late_creates": sum(r.get("created_late", 0) for r in rows),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """workload -> system -> pooled figures, in the order the rows came."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    keys: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        keys.setdefault((r["workload"], r["system"]), []).append(r)
    for (workload, system), group in keys.items():
        out.setdefault(workload, {})[system] = pooled(group)
    return out


def ratios(summary_: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, float]]]:
    """workload -> peer -> jobsched's figure over the peer's (p99 lag, whole-stack CPU, jobsched's
    own CPU against the peer's whole stack)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for workload, systems in summary_.items():
        ours = systems.get(JOBSCHED)
        if ours is None:
            continue
        for peer, theirs in systems.items():
            if peer == JOBSCHED:
                continue
            out.setdefault(workload, {})[peer] = {
                "p99": _ratio(ours["lag"]["p99"], theirs["lag"]["p99"]),
                "cpu_total": _ratio(ours["cpu_per_1000_total"], theirs["cpu_per_1000_total"]),
                "cpu_own": _ratio(ours["cpu_per_1000_own"], theirs["cpu_per_1000_total"]),
            }
    return out


def goal_workload(summary_: dict[str, dict[str, dict[str, Any]]]) -> str | None:
    """The workload the goals are judged on: the largest burst (1,000 due at once at full size)."""
    bursts = [(w, s) for w, s in summary_.items() if w.startswith("burst") and JOBSCHED in s]
    if not bursts:
        return None
    return max(bursts, key=lambda ws: ws[1][JOBSCHED]["jobs"] / ws[1][JOBSCHED]["rounds"])[0]


def goals(summary_: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    workload = goal_workload(summary_)
    if workload is None:
        return []
    systems = summary_[workload]
    ours = systems[JOBSCHED]
    size = round(ours["jobs"] / ours["rounds"])
    rows: list[dict[str, Any]] = []
    peer = systems.get(PROCRASTINATE)
    if peer is not None:
        cpu = _ratio(ours["cpu_per_1000_own"], peer["cpu_per_1000_total"])
        moto = ours["cpu_per_1000"].get("moto", math.nan)
        drained = ours["lag"]["max"]
        rows.append(
            {
                "what": f"jobsched's own CPU a run (local mode, moto left out) vs procrastinate's whole stack, {size:,} due at once",
                "holds": (
                    f"{ours['cpu_per_1000_own']:.1f} ms of CPU a run in local mode's own process"
                    f" ({ours.get('cpu_per_1000_own_net_of_idle', math.nan):.1f} without its idle polling), spread over"
                    " the API, outbox, worker, events and glue, each mostly the AWS SDK's (*Where the CPU goes*)"
                ),
                "measured": f"{cpu:.2f}x ({ours['cpu_per_1000_own']:.1f} vs {peer['cpu_per_1000_total']:.1f} CPU s per 1,000;"
                f" idle polling taken off both: {_ratio(ours.get('cpu_per_1000_own_net_of_idle', math.nan), peer.get('cpu_per_1000_net_of_idle', math.nan)):.2f}x)",
                "goal": f"≤ {CPU_RATIO_GOAL:g}x",
                "met": cpu <= CPU_RATIO_GOAL if math.isfinite(cpu) else None,
            }
        )
        p99 = _ratio(ours["lag"]["p99"], peer["lag"]["p99"])
        rows.append(
            {
                "what": f"local mode's p99 lag vs procrastinate's, {size:,} due at once",
                "measured": f"{p99:.2f}x ({ours['lag']['p99']:.2f} s vs {peer['lag']['p99']:.2f} s)",
                "holds": (
                    f"the drain: {size:,} runs done {drained:.0f} s after their due instant"
                    f" ({size / drained if drained > 0 else math.nan:.1f} a second), moto serving every call in turn"
                    f" ({moto:.0f} CPU s per 1,000 runs: busy {moto * size / 1000 / drained if drained > 0 else math.nan:.0%}"
                    " of the drain), and the tenant's limit: each run beyond it waits for a look that finds a slot free"
                ),
                "goal": f"≤ {P99_RATIO_GOAL:g}x",
                "met": p99 <= P99_RATIO_GOAL if math.isfinite(p99) else None,
            }
        )
    created = ours["create_seconds_mean"] * CREATE_GOAL_JOBS / size if size else math.nan
    rows.append(
        {
            "what": f"creating {CREATE_GOAL_JOBS:,} jobs through the API"
            + (
                " (POST /v1/jobs/batch, 100 a request)"
                if ours.get("created_in_batches")
                else " (POST /v1/jobs, one a request)"
            ),
            "measured": (
                f"{created:.1f} s ({ours['create_jobs_per_second']:.0f} jobs/s"
                + (f"; {ours['throttled']} answers 429" if ours["throttled"] else "")
                + ("" if size == CREATE_GOAL_JOBS else f"; scaled from {size:,}")
                + ")"
            ),
            "goal": f"< {CREATE_GOAL_SECONDS:g} s",
            "met": created < CREATE_GOAL_SECONDS if math.isfinite(created) else None,
        }
    )
    return rows
