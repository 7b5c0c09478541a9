"""The `jobsched` command's start: wall and CPU time of `jobsched --help` and of a client
command (`jobsched jobs list`, answered by a stub API on 127.0.0.1 with an empty page), each a
fresh interpreter, as a user's shell starts it. Most of it is imports, so a module the
command does not need (boto3, Powertools, the server's settings) shows here first."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

COMMANDS = {"--help": ["--help"], "jobs list": ["jobs", "list"]}


def _once(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (the child's user + system) of one `python -m jobsched_cli argv`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobsched_cli", *argv], env=env, capture_output=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def run(repeats: int = 5) -> dict[str, Any]:
    """Per command: the median of `repeats` starts, in milliseconds."""
    from tests.helpers import StubApi

    api = StubApi()
    api.routes[("GET", "/v1/jobs")] = (200, {"items": [], "nextCursor": None}, {})
    try:
        out: dict[str, Any] = {"repeats": repeats, "commands": {}}
        for name, argv in COMMANDS.items():
            endpoint = [] if name == "--help" else ["--endpoint", api.url]
            samples = [_once(argv + endpoint) for _ in range(repeats)]
            out["commands"][name] = {
                "wall_ms_median": statistics.median(w for w, _ in samples) * 1000,
                "cpu_ms_median": statistics.median(c for _, c in samples) * 1000,
            }
        return out
    finally:
        api.close()


def markdown(result: dict[str, Any]) -> list[str]:
    out = [
        "## 9. The `jobsched` command's start",
        "",
        f"Each command in a fresh interpreter, the median of {result['repeats']} starts "
        "(`bench/cli.py`); `jobs list` is answered by a stub API on 127.0.0.1. Most of it is imports.",
        "",
        "| command | wall ms | CPU ms |",
        "|---|---|---|",
    ]
    for name, figures in result["commands"].items():
        wall, cpu = figures["wall_ms_median"], figures["cpu_ms_median"]
        out.append(f"| `jobsched {name}` | {wall:.0f} | {cpu:.0f} |")
    return [*out, ""]
