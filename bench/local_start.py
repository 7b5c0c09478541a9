"""Local mode's start: the wall time from starting `jobsched local --demo` (the command `make
run` runs) to its API answering `GET /v1/jobs` with 200, each start a fresh interpreter on
free loopback ports, stopped with Ctrl-C (SIGINT) after it answered.

The environment is already installed: a clean clone's first `make run` also creates `.venv`
and installs the `local` extra from the package registry, which depends on the network and
the registry's cache more than on jobsched, and is not measured here."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

# Longer than any start seen on a loaded machine; a start that takes it is reported as failed.
START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 30.0
_POLL_SECONDS = 0.05


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str, key: str) -> bool:
    request = urllib.request.Request(url, headers={"x-api-key": key})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _once() -> tuple[float, float]:
    """(seconds to the first 200 of GET /v1/jobs, seconds from Ctrl-C to the process's exit)
    of one `python -m jobsched_cli local --demo`. Raises RuntimeError when it exits before
    answering or does not answer within START_TIMEOUT_SECONDS."""
    from jobsched_local.keys import DEV_KEY

    port, moto_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    argv = [sys.executable, "-m", "jobsched_cli", "local", "--demo", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/v1/jobs"
    with tempfile.TemporaryDirectory() as cwd:  # nothing it may write lands in the checkout
        started = time.perf_counter()
        process = subprocess.Popen(
            [*argv, "--moto-port", str(moto_port)],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not _answers(url, DEV_KEY):
                if process.poll() is not None:
                    raise RuntimeError(f"jobsched local exited with {process.returncode} before answering")
                if time.perf_counter() - started > START_TIMEOUT_SECONDS:
                    raise RuntimeError(f"jobsched local did not answer within {START_TIMEOUT_SECONDS:g} s")
                time.sleep(_POLL_SECONDS)
            answered = time.perf_counter() - started
            told = time.perf_counter()
            process.send_signal(signal.SIGINT)
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
            return answered, time.perf_counter() - told
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def run(repeats: int = 3) -> dict[str, Any]:
    """The median of `repeats` starts (and of their stops), in seconds, and the load average
    before the first: the figure is meant for an idle machine."""
    load_before = os.getloadavg()[0]
    samples = [_once() for _ in range(repeats)]
    return {
        "repeats": repeats,
        "load_before": load_before,
        "answer_s_median": statistics.median(a for a, _ in samples),
        "answer_s_max": max(a for a, _ in samples),
        "stop_s_median": statistics.median(s for _, s in samples),
    }


def markdown(result: dict[str, Any]) -> list[str]:
    return [
        "## 10. Local mode's start (`make run`)",
        "",
        f"`jobsched local --demo`, the command `make run` runs, from its start to its API answering "
        f"`GET /v1/jobs` (200), each start a fresh interpreter, the median of {result['repeats']} "
        f"(`bench/local_start.py`; load average {result['load_before']:.2f} before). The environment "
        "is already installed: a clean clone's first `make run` also creates `.venv` and installs "
        "the `local` extra from the package registry, not measured here (it depends on the network).",
        "",
        "| what | seconds |",
        "|---|---|",
        f"| start to first answer, median | {result['answer_s_median']:.2f} |",
        f"| start to first answer, slowest | {result['answer_s_max']:.2f} |",
        f"| Ctrl-C to exit, median | {result['stop_s_median']:.2f} |",
        "",
    ]
