"""Hot-path cost of our own code: CPU microseconds per run in the sweeper, outbox and worker,
with the AWS calls taken out.

Each invocation's process CPU time (all threads: the worker's effect runs in a pool
thread) minus the CPU spent inside botocore calls (request building, moto answering in the
same thread, response parsing). What is left is our code plus the libraries it calls
directly (pydantic, Powertools batch/idempotency/logging/metrics): the part a regression
in functions/ would move, whatever moto's speed."""

from __future__ import annotations

import statistics
from typing import Any

from . import handlers
from .harness import Harness

STAGES = ("sweep", "outbox", "worker")


def _round(jobs: int, per_second: int, minutes: int) -> dict[str, Any]:
    handlers.take()
    with Harness(images=False) as h:
        start = h.clock.t
        h.add_recurring_jobs(jobs, per_second, prefix="h")
        h.invocations.clear()
        h.run_until(start + minutes * 60 + 1)
        h.drain()
        runs = len(handlers.take())
        out: dict[str, Any] = {"runs": runs}
        for stage_name, invocations in h.invocations_by_stage().items():
            if stage_name not in STAGES:
                continue
            ours = sum(max(0.0, inv.cpu - sum(c.cpu for c in inv.calls)) for inv in invocations)
            in_calls = sum(c.cpu for inv in invocations for c in inv.calls)
            out[stage_name] = {
                "us_per_run": 1e6 * ours / runs,
                "us_in_aws_calls_per_run": 1e6 * in_calls / runs,
                "invocations": len(invocations),
                "calls_per_run": sum(len(inv.calls) for inv in invocations) / runs,
            }
        return out


def run(rounds: int = 3, jobs: int = 50, minutes: int = 2) -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    samples = [_round(jobs, 10, minutes) for _ in range(rounds)]
    result: dict[str, Any] = {"rounds": rounds, "runs_per_round": [s["runs"] for s in samples], "stages": {}}
    for stage_name in STAGES:
        values = [s[stage_name]["us_per_run"] for s in samples if stage_name in s]
        calls = [s[stage_name]["us_in_aws_calls_per_run"] for s in samples if stage_name in s]
        result["stages"][stage_name] = {
            "us_per_run_median": statistics.median(values),
            "us_per_run_min": min(values),
            "us_per_run_max": max(values),
            "us_in_aws_calls_per_run_median": statistics.median(calls),
            "calls_per_run": samples[-1][stage_name]["calls_per_run"],
        }
    result["total_us_per_run_median"] = sum(v["us_per_run_median"] for v in result["stages"].values())
    return result
