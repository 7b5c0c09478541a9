"""`python -m chaos --seed N --runs N`: exit 1 when any must-be-0 figure is not 0."""

from __future__ import annotations

import argparse
import sys
import time

from .harness import ChaosConfig, run_chaos
from .mutants import BY_NAME


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--runs", type=int, default=1000, help="occurrences to schedule (default 1000)")
    parser.add_argument("--window", type=int, default=None, help="simulated seconds of injected faults")
    parser.add_argument(
        "--mutant", choices=sorted(BY_NAME), default=None, help="run a mutant of the pipeline (chaos.mutants)"
    )
    parser.add_argument(
        "--tenant-concurrency",
        type=int,
        default=4,
        help="TENANT_CONCURRENCY, worker and lease API (0: off)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)

    started = time.monotonic()
    config = ChaosConfig(
        seed=args.seed,
        runs=args.runs,
        window_seconds=args.window,
        mutant=args.mutant,
        tenant_concurrency=args.tenant_concurrency,
        verbose=args.verbose,
    )
    report = run_chaos(config)
    print(report.figures.line())
    faults = " ".join(f"{k}={v}" for k, v in sorted(report.faults.items()))
    outcomes = " ".join(f"{k}={v}" for k, v in sorted(report.outcomes.items()))
    print(f"faults: {faults}")
    print(f"outcomes: {outcomes}")
    print(
        f"simulated {report.simulated_seconds}s in {time.monotonic() - started:.0f}s;"
        f" settled={'yes' if report.settled else 'NO'}"
    )
    for text in report.unexpected:
        print(f"unexpected error: {text}")
    if report.failed:
        print(f"FAILED (seed {args.seed})")
        if report.figures.restart_over_goal:
            for run_key, seconds in report.figures.slowest_restarts:
                print(f"  slow restart: {run_key}: {seconds:.0f}s")
        for violation in report.figures.violations[:200]:
            print(f"  {violation.figure}: {violation.run_key}: {violation.detail}")
        for run_key, story in report.explanations.items():
            print(f"history of {run_key}:")
            for line in story:
                print(f"    {line}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
