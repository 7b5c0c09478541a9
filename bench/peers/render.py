# ruff: noqa: E501  (Markdown prose and table rows read better unwrapped)
"""The peers' table: in the terminal, and as the marked section of bench/report.md that
`make bench-peers` writes and `make bench` keeps (bench/report.py appends it from
bench/peers.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench peers: begin (make bench-peers writes this part) -->"
END = "<!-- bench peers: end -->"


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _ok(flag: bool | None) -> str:
    return "-" if flag is None else ("met" if flag else "**missed**")


def _cpu_parts(figures: dict[str, Any]) -> str:
    return ", ".join(f"{name} {_f(v, 1)}" for name, v in figures["cpu_per_1000"].items())


def table(results: dict[str, Any]) -> list[str]:
    out = [
        "| Workload | System | jobs | p50 s | p95 s | p99 s | max s | duplicates | missing | CPU s per 1,000 jobs, whole stack (by process) | of which not idle | created, jobs/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, systems in results["summary"].items():
        label = results["workloads"].get(workload, workload)
        for system, s in systems.items():
            lag = s["lag"]
            out.append(
                f"| {label} | {system} | {s['jobs']:,} | {_f(lag['p50'])} | {_f(lag['p95'])} | {_f(lag['p99'])} | {_f(lag['max'])} | "
                f"{s['duplicates']} | {s['missing']} | {_f(s['cpu_per_1000_total'], 1)} ({_cpu_parts(s)}) | "
                f"{_f(s.get('cpu_per_1000_net_of_idle'), 1)} | {_f(s['create_jobs_per_second'], 0)} |"
            )
    return out


def ratio_table(results: dict[str, Any]) -> list[str]:
    out = [
        "| Workload | jobsched ÷ | p99 lag | CPU, whole stack | CPU, jobsched's own ÷ peer's whole stack |",
        "|---|---|---|---|---|",
    ]
    for workload, peers in results["ratios"].items():
        label = results["workloads"].get(workload, workload)
        for peer, r in peers.items():
            out.append(
                f"| {label} | {peer} | {_f(r['p99'])}x | {_f(r['cpu_total'])}x | {_f(r['cpu_own'])}x |"
            )
    return out


def goal_table(results: dict[str, Any]) -> list[str]:
    out = [
        "| Goal | Measured | Target | Result | What holds it, measured here |",
        "|---|---|---|---|---|",
    ]
    for g in results["goals"]:
        holds = g.get("holds", "") if g["met"] is False else ""
        out.append(f"| {g['what']} | {g['measured']} | {g['goal']} | {_ok(g['met'])} | {holds or '-'} |")
    return out


def section(results: dict[str, Any]) -> str:
    env = results["environment"]
    idle = "; ".join(
        f"{system}: " + ", ".join(f"{name} {_f(v, 3)}" for name, v in groups.items())
        for system, groups in results["idle_cpu_per_second"].items()
    )
    settings = [
        f"- **{system}**: " + "; ".join(f"{k}: {v}" for k, v in values.items())
        for system, values in results["settings"].items()
    ]
    busy = max(env["load_before"][0], env["load_after"][0]) > 0.5 * (env["cpus"] or 1) + 1
    lines = [
        BEGIN,
        "## Side by side with procrastinate and APScheduler 3",
        "",
        f"Produced by `make bench-peers` on {env['finished_at']} ({env['cpus']} CPUs, Python {env['python']}; load average "
        f"before {_f(env['load_before'][0])}, after {_f(env['load_after'][0])}"
        + ("; other processes were using the machine, so wall-clock figures are pessimistic" if busy else "")
        + f"). Mode: {env['mode']}; {env['rounds']} round(s) of each workload, each system's stack started afresh "
        f"each round; jobs made due {_f(env['lead_seconds'], 0)} s or more after their creation ends. Every job's "
        "effect is an HTTP POST to the same loopback receiver; lag is its arrival there minus the job's due "
        "instant, pooled over the rounds. CPU is utime + stime of each process tree (reaped children included) "
        "from /proc, read before the jobs are created and after the last effect (plus 2 s), so it includes the "
        "stack's idle polling over that span. `docs/design/performance.md` says what each system guarantees "
        "that the others do not: read the ratios with it.",
        "",
        *table(results),
        "",
        *ratio_table(results),
        "",
        *goal_table(results),
        "",
        f"Idle CPU seconds a second, no job at all: {idle}.",
        "",
        "Settings:",
        "",
        *settings,
        END,
    ]
    return "\n".join(lines)


def terminal(results: dict[str, Any]) -> str:
    out = []
    for workload, systems in results["summary"].items():
        label = results["workloads"].get(workload, workload)
        out.append(label)
        for system, s in systems.items():
            lag = s["lag"]
            out.append(
                f"  {system:<14} p50 {_f(lag['p50']):>6}  p95 {_f(lag['p95']):>6}  p99 {_f(lag['p99']):>6}  max {_f(lag['max']):>6}"
                f"  dup {s['duplicates']:>3}  missing {s['missing']:>4}  CPU/1000 {_f(s['cpu_per_1000_total'], 1):>7}"
                f" ({_cpu_parts(s)})  create {_f(s['create_jobs_per_second'], 0)}/s"
            )
    for g in results["goals"]:
        out.append(f"{g['what']}: {g['measured']} (goal {g['goal']}): {_ok(g['met']).replace('*', '')}")
    return "\n".join(out)


def update_report(path: Path, results: dict[str, Any]) -> None:
    """Replace the marked peers section of report.md (or append it), leaving the rest alone."""
    block = section(results)
    text = path.read_text(encoding="utf-8") if path.exists() else "# jobsched benchmarks\n"
    begin, end = text.find(BEGIN), text.find(END)
    if begin >= 0 and end > begin:
        text = text[:begin] + block + text[end + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def saved_section(path: Path) -> list[str]:
    """The section from a saved peers.json (for `make bench`'s report.md), or nothing."""
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
        return [section(results), ""]
    except (OSError, ValueError, KeyError, TypeError):
        return []
