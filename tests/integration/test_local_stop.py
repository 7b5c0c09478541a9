"""Ctrl-C stops local mode promptly even while a handler's effect is still running: the
effect's thread holds nothing up at interpreter exit (services.attempt.start_effect). Local
mode runs in a process of its own, on real time; the bounds are generous (a loaded 2-core
machine), far below the handler's sleep."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
KEY = "key-stop"
HANDLER_SLEEP_SECONDS = 600  # the effect outlives the test by far
STOPPED_WITHIN_SECONDS = 30.0  # without the fix it takes HANDLER_SLEEP_SECONDS
HANDLERS = """
import time
from pathlib import Path

import jobsched


@jobsched.handler("slow.sleep")
def sleep(payload, invocation):
    Path(payload["started"]).write_text(invocation.run_key)
    time.sleep(payload["seconds"])
    return {"slept": payload["seconds"]}
"""


def _wait_for(
    what: str, check: Callable[[], bool], process: subprocess.Popen[bytes], err: Path, within: float = 90
) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert process.poll() is None, f"local mode exited before {what}: {err.read_text()}"
        assert time.monotonic() < deadline, f"no {what} within {within:g} s: {err.read_text()}"
        time.sleep(0.2)


def test_ctrl_c_with_an_effect_running_stops_local_mode_promptly(tmp_path: Path) -> None:
    (tmp_path / "slow_jobs.py").write_text(textwrap.dedent(HANDLERS))
    config = tmp_path / "local.json"
    config.write_text(
        json.dumps(
            {"handler_modules": ["slow_jobs"], "port": 0, "moto_port": 0, "api_keys": {KEY: "tenant-stop"}}
        )
    )
    started = tmp_path / "started.txt"
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    code = f"import sys; sys.path[:0] = [{str(FUNCTIONS)!r}]; from jobsched_cli import main; sys.exit(main())"
    command = [sys.executable, "-c", code, "local", "--config", str(config), "--follow", "none"]
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(command, cwd=tmp_path, env=dict(os.environ), stdout=stdout, stderr=stderr)
        try:
            url: list[str] = []

            def banner() -> bool:
                found = re.search(r"^  API +(http://\S+)", out.read_text(), re.M)
                url[:] = [found.group(1)] if found else []
                return bool(found)

            _wait_for("banner", banner, process, err)
            body = {
                "name": "sleeps",
                "type": "slow.sleep",
                "runAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "payload": {"started": str(started), "seconds": HANDLER_SLEEP_SECONDS},
            }
            request = urllib.request.Request(
                url[0] + "/v1/jobs",
                data=json.dumps(body).encode(),
                headers={"x-api-key": KEY, "content-type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 201
            _wait_for("effect started", started.exists, process, err)
            told = time.monotonic()
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOPPED_WITHIN_SECONDS)
            except subprocess.TimeoutExpired:
                pytest.fail(f"local mode still running {STOPPED_WITHIN_SECONDS:g} s after Ctrl-C")
            assert time.monotonic() - told < STOPPED_WITHIN_SECONDS
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
