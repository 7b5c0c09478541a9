"""`python -m bench`: run the benchmarks, print the table, write the results and report."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ALL = (
    "lag",
    "cost",
    "amplification",
    "backlog",
    "hotpath",
    "capacity",
    "bulk",
    "events",
    "profile",
    "cli",
    "local_start",
)


def _clean(value: Any) -> Any:
    """JSON without NaN/inf (strict parsers reject them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def run(
    only: tuple[str, ...] = ALL,
    *,
    quick: bool = False,
    out: Path = HERE,
    log: Any = print,
    keep: bool = False,
) -> dict[str, Any]:
    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))  # `bench.handlers` must import in every handler
    started = time.perf_counter()
    results: dict[str, Any] = {
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": os.getloadavg(),
            "mode": "quick (smoke sizes)" if quick else "default",
        },
        "seconds": {},
    }
    if keep and (out / "results.json").exists():
        # The parts not re-run keep their last figures; the report says when each was taken.
        previous = json.loads((out / "results.json").read_text())
        results.update({k: v for k, v in previous.items() if k in ALL and k not in only})
        results["seconds"] = {k: v for k, v in previous.get("seconds", {}).items() if k not in only}
        results["environment"]["mode"] += (
            f"; {', '.join(sorted(set(ALL) - set(only)))} kept from the previous run"
        )

    def timed(name: str, fn: Any) -> None:
        if name not in only:
            return
        log(f"bench: {name} ...")
        t0 = time.perf_counter()
        results[name] = fn()
        results["seconds"][name] = round(time.perf_counter() - t0, 1)
        log(f"bench: {name} done in {results['seconds'][name]} s")

    from . import amplification, backlog, bulk, capacity, cli, cost, events, hotpath, lag, local_start
    from . import profile as cpu_profile

    if quick:
        timed("lag", lambda: lag.run(bursts=(3,), stream_runs=2, lead=3.0))
        timed(
            "cost",
            lambda: cost.run(
                dense=(10, 1), sparse=(2, 1), one_time_jobs=5, idle_minutes=1, hourly_jobs=10, retried_jobs=3
            ),
        )
    else:
        timed("lag", lambda: lag.run(bursts=(50, 200), stream_runs=60))
        timed("cost", lambda: cost.run())
    sizes = (200,) if quick else (1_000, 10_000, 50_000)
    due = 20 if quick else 500

    def amp() -> dict[str, Any]:
        return amplification.run(sizes, due)

    timed("amplification", amp)
    timed(
        "backlog",
        lambda: (
            backlog.run((0, 2), on_time=10, budget=1.0) if quick else backlog.run((0, 10, 40), on_time=200)
        ),
    )
    timed(
        "hotpath",
        lambda: (
            hotpath.run(rounds=1, jobs=10, minutes=1) if quick else hotpath.run(rounds=3, jobs=30, minutes=2)
        ),
    )
    timed("bulk", lambda: bulk.run(dead=20 if quick else 500))
    timed("events", lambda: events.run(runs_per_kind=10 if quick else 200))
    timed("profile", lambda: cpu_profile.run(jobs=3, minutes=1) if quick else cpu_profile.run())
    timed("cli", lambda: cli.run(repeats=1 if quick else 5))
    timed("local_start", lambda: local_start.run(repeats=1 if quick else 3))
    if "capacity" in only and "cost" in results:
        timed("capacity", lambda: capacity.run(results["cost"], results.get("hotpath")))
    results["environment"]["load_after"] = os.getloadavg()
    results["environment"]["seconds"] = time.perf_counter() - started
    results["environment"]["finished_at"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    from . import report

    out.mkdir(parents=True, exist_ok=True)
    drawn = report.picture(results, out / "lag.png")
    (out / "results.json").write_text(json.dumps(_clean(results), indent=1, default=str) + "\n")
    (out / "report.md").write_text(report.markdown(results, "lag.png" if drawn else None))
    (out / "README-performance.md").write_text(report.readme_section(results))
    if not quick and out == HERE:  # `make bench`: its figures are the docs' Performance page
        report.update_docs_page(results, HERE.parent / "docs" / "design" / "performance.md")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke sizes: seconds, figures meaningless")
    parser.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {','.join(ALL)}")
    parser.add_argument("--out", type=Path, default=HERE, help="where results.json, report.md and lag.png go")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the previous results.json's figures for the parts not in --only",
    )
    args = parser.parse_args(argv)
    only = tuple(part.strip() for part in args.only.split(",") if part.strip())
    unknown = set(only) - set(ALL)
    if unknown:
        parser.error(f"unknown benchmarks: {sorted(unknown)}")
    results = run(
        only, quick=args.quick, out=args.out, log=lambda m: print(m, file=sys.stderr), keep=args.keep
    )
    from .report import terminal

    print(terminal(results))
    print(f"\nwrote {args.out / 'results.json'}, {args.out / 'report.md'}, {args.out / 'lag.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
