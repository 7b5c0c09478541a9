"""`python -m bench.peers` (`make bench-peers`): jobsched's local mode, procrastinate and
APScheduler 3 on the same workloads; writes bench/peers.json and the peers section of
bench/report.md, and prints the table."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from . import compute, procfs, render
from .receiver import Receiver

HERE = Path(__file__).resolve().parent.parent  # bench/


class Stack(Protocol):
    name: str
    settings: dict[str, str]

    def start(self) -> None: ...
    def create(self, jobs: list[tuple[str, float]], url: str) -> dict[str, Any]: ...
    def groups(self) -> dict[str, tuple[int, tuple[int, ...]]]: ...
    def own_groups(self) -> tuple[str, ...]: ...
    def stop(self) -> None: ...


def workloads(bursts: tuple[int, ...], stream_seconds: int) -> list[tuple[str, str, list[float]]]:
    """(key, label, due offsets in seconds from the first due instant)."""
    out = [(f"burst_{n}", f"{n:,} due at one instant", [0.0] * n) for n in bursts]
    if stream_seconds:
        out.append(
            (
                f"stream_{stream_seconds}",
                f"1 due per second for {stream_seconds} s",
                [float(i) for i in range(stream_seconds)],
            )
        )
    return out


def run_workload(
    stack: Stack,
    receiver: Receiver,
    key: str,
    offsets: list[float],
    *,
    round_: int,
    lead: float,
    create_rate: float,
    log: Any,
) -> dict[str, Any]:
    """Create the jobs so that the first is due `lead` s after creation should end (at the
    creation rate seen so far), wait for every effect, and read CPU around all of it."""
    n = len(offsets)
    expected = n / create_rate if create_rate > 0 else n * 0.05
    first_due = math.ceil(time.time() + 3.0 * expected + lead)
    prefix = f"{key}-r{round_}-{stack.name.split()[0].lower()}"
    jobs = [(f"{prefix}-{i}", first_due + off) for i, off in enumerate(offsets)]
    groups = stack.groups()
    before = procfs.cpu_seconds(groups)
    t0 = time.perf_counter()
    created = stack.create(jobs, receiver.url)
    created_at = time.time()
    late = sum(1 for _id, due in jobs if due < created_at + 1.0) if created_at > first_due - 1 else 0
    ids = {job_id for job_id, _due in jobs}
    last_due = max(due for _id, due in jobs)
    until = last_due + 60 + n * 0.2
    while time.time() < until and receiver.seen(ids) < n:
        time.sleep(0.2)
    time.sleep(2.0)  # a duplicate effect arriving just after the last first one is still counted
    interval = time.perf_counter() - t0
    after = procfs.cpu_seconds(groups)
    arrivals = receiver.take(ids)
    result = compute.effects(jobs, arrivals)
    cpu = compute.cpu_used(before, after)
    row = {
        "system": stack.name,
        "workload": key,
        "round": round_,
        "jobs": n,
        "create_seconds": created["seconds"],
        "throttled": created.get("throttled", 0),
        "created_in_batches": created.get("batch", False),
        "created_late": late,
        "lead_seconds": first_due - created_at,
        "interval_seconds": interval,
        "cpu": cpu,
        "own_groups": list(stack.own_groups()),
        **result,
    }
    log(
        f"  {stack.name:<14} {key:<12} round {round_}: p99 {result['lag']['p99']:.3f} s,"
        f" max {result['lag']['max']:.3f} s,"
        f" missing {result['missing']}, dup {result['duplicates']}, created in {created['seconds']:.1f} s"
        f" ({created.get('throttled', 0)} answers 429, {late} late),"
        f" CPU {sum(cpu.values()):.1f} s ({', '.join(f'{k} {v:.1f}' for k, v in cpu.items())})"
    )
    return row


def idle_cpu(stack: Stack, seconds: float) -> dict[str, float]:
    """CPU seconds a second each group uses with no job at all (polling, timers)."""
    groups = stack.groups()
    before = procfs.cpu_seconds(groups)
    time.sleep(seconds)
    used = compute.cpu_used(before, procfs.cpu_seconds(groups))
    return {k: v / seconds for k, v in used.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="smoke sizes: 50 due at once, 10 s of one a second, one round"
    )
    parser.add_argument("--bursts", default="200,1000", help="jobs due at one instant, comma-separated")
    parser.add_argument(
        "--stream-seconds", type=int, default=60, help="one job due each second for this long"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--lead", type=float, default=20.0, help="seconds from creation's end to the first due instant"
    )
    parser.add_argument("--systems", default="jobsched,procrastinate,apscheduler")
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="idle CPU measured this long per stack"
    )
    parser.add_argument(
        "--jobsched-config", type=Path, default=None, help="local-mode settings file (default: its defaults)"
    )
    parser.add_argument(
        "--jobsched-create",
        choices=("auto", "batch", "single"),
        default="auto",
        help="create jobsched's jobs with POST /v1/jobs/batch (auto: when the API has it) or one by one",
    )
    parser.add_argument("--out", type=Path, default=HERE, help="where peers.json goes (report.md beside it)")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="recompute the figures and the report section from the rows of the saved peers.json",
    )
    args = parser.parse_args(argv)
    if args.render_only:
        return rerender(args.out)
    if args.quick:
        args.bursts, args.stream_seconds, args.rounds, args.idle_seconds = "50", 10, 1, 3.0
    bursts = tuple(int(x) for x in args.bursts.split(",") if x.strip())
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(chosen) - {"jobsched", "procrastinate", "apscheduler"}
    if unknown:
        parser.error(f"unknown systems: {sorted(unknown)}")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    from .jobsched_side import JobschedStack
    from .postgres import Postgres
    from .sides import ApschedulerStack, ProcrastinateStack

    started = time.perf_counter()
    plan = workloads(bursts, args.stream_seconds)
    rows: list[dict[str, Any]] = []
    settings: dict[str, dict[str, str]] = {}
    idle: dict[str, list[dict[str, float]]] = {}
    load_before = os.getloadavg()
    receiver = Receiver()
    pg = Postgres().start() if {"procrastinate", "apscheduler"} & set(chosen) else None
    try:
        for round_ in range(1, args.rounds + 1):
            for name in chosen:
                stack: Stack
                if name == "jobsched":
                    stack = JobschedStack(args.jobsched_config, args.jobsched_create)
                elif name == "procrastinate":
                    assert pg is not None
                    stack = ProcrastinateStack(pg, f"procrastinate_r{round_}")
                else:
                    assert pg is not None
                    stack = ApschedulerStack(pg, f"apscheduler_r{round_}")
                settings[stack.name] = stack.settings
                log(f"bench-peers: round {round_}, {stack.name}: starting")
                stack.start()
                try:
                    idle_rate = idle_cpu(stack, args.idle_seconds)
                    idle.setdefault(stack.name, []).append(idle_rate)
                    # A probe of ten jobs an hour out: the creation rate sets how far ahead
                    # each workload's jobs are made due.
                    probe = stack.create(
                        [(f"probe-{round_}-{i}", time.time() + 3600) for i in range(10)], receiver.url
                    )
                    rate = 10 / max(probe["seconds"], 1e-3)
                    for key, _label, offsets in plan:
                        rows.append(
                            run_workload(
                                stack,
                                receiver,
                                key,
                                offsets,
                                round_=round_,
                                lead=args.lead,
                                create_rate=rate,
                                log=log,
                            )
                        )
                        rows[-1]["idle_cpu_per_second"] = idle_rate
                finally:
                    stack.stop()
    finally:
        if pg is not None:
            pg.stop()
        receiver.stop()
    summary = compute.summarise(rows)
    results: dict[str, Any] = {
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "mode": "quick (smoke sizes)" if args.quick else "default",
            "seconds": time.perf_counter() - started,
            "finished_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "rounds": args.rounds,
            "lead_seconds": args.lead,
        },
        "workloads": {key: label for key, label, _ in plan},
        "settings": settings,
        "idle_cpu_per_second": {name: _mean(values) for name, values in idle.items()},
        "summary": summary,
        "ratios": compute.ratios(summary),
        "goals": compute.goals(summary),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    from .. import __main__ as bench_main

    (args.out / "peers.json").write_text(json.dumps(bench_main._clean(results), indent=1) + "\n")
    render.update_report(args.out / "report.md", results)
    print(render.terminal(results))
    print(f"\nwrote {args.out / 'peers.json'} and the peers section of {args.out / 'report.md'}")
    return 0


def rerender(out: Path) -> int:
    from .. import __main__ as bench_main

    results = json.loads((out / "peers.json").read_text())
    summary = compute.summarise(results["rows"])
    results.update({"summary": summary, "ratios": compute.ratios(summary), "goals": compute.goals(summary)})
    (out / "peers.json").write_text(json.dumps(bench_main._clean(results), indent=1) + "\n")
    render.update_report(out / "report.md", results)
    print(render.terminal(results))
    return 0


def _mean(values: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for v in values for k in v}
    return {k: sum(v.get(k, 0.0) for v in values) / len(values) for k in sorted(keys)}


if __name__ == "__main__":
    raise SystemExit(main())
