"""Polling and naming helpers shared by the e2e tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from jobsched_cli.client import ApiClient, ApiError

T = TypeVar("T")
TERMINAL = {"SUCCEEDED", "DEAD", "SKIPPED", "CANCELLED"}


def wait_for(probe: Callable[[], T], *, what: str, timeout: float = 20.0, interval: float = 0.2) -> T:
    """Call `probe` until it returns something truthy; fail with the last value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {value!r}")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def instant(seconds_from_now: float = 0) -> str:
    moment = datetime.now(UTC) + timedelta(seconds=seconds_from_now)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def all_runs(client: ApiClient, job_id: str) -> list[dict[str, Any]]:
    return client.list_runs(job_id, limit=100, all_pages=True, view="all")["items"]


def runs_in(client: ApiClient, job_id: str, state: str) -> list[dict[str, Any]]:
    return [r for r in all_runs(client, job_id) if r["state"] == state]


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(endpoint: str, auth: list[str], *args: str, timeout: float = 60) -> CliResult:
    """The real entry point in its own process (local mode's threads share this one's stdout).
    `auth` is the connection options (`--api-key ...` or `--sigv4 --region ...`), or none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSCHED_")}
    command = [sys.executable, "-m", "jobsched_cli", "--endpoint", endpoint, *auth]
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def finish(client: ApiClient, job_id: str) -> None:
    """Cleanup: cancel the job unless it already ended (a completed job cannot be cancelled)."""
    try:
        client.cancel_job(job_id)
    except ApiError as exc:
        if exc.status != 409:
            raise
