"""What `jobsched local --demo` prints to a person's terminal: the banner, the run table and
real warnings, each line once and in order; the functions' Powertools JSON logs only with
--verbose. Local mode runs as the `jobsched` script runs it, in a process of its own, on real
time (the demo's runs come due within seconds; the waits are bounds, not figures under test)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
TABLE_HEADER = "time      tenant       job"
# The flaky job's run, each attempt failing, dead-lettered, redriven and then succeeding.
FLAKY_STATES = [
    "PENDING", "QUEUED", "LEASED", "RETRY_WAIT", "QUEUED", "LEASED", "RETRY_WAIT",
    "QUEUED", "LEASED", "DEAD", "PENDING", "QUEUED", "LEASED", "SUCCEEDED",
]  # fmt: skip
WEBHOOK_STATES = ["PENDING", "QUEUED", "LEASED", "SUCCEEDED"]


def run_local(tmp_path: Path, *options: str, until: tuple[str, str], within: float = 90) -> str:
    """stdout and stderr of `jobsched local --demo` (in that order), stopped with Ctrl-C once
    the run table shows `until` (a job and a state)."""
    config = tmp_path / "local.json"
    config.write_text(json.dumps({"port": 0, "moto_port": 0}))
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    code = f"import sys; sys.path[:0] = [{str(FUNCTIONS)!r}]; from jobsched_cli import main; sys.exit(main())"
    env = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_LOG_LEVEL"}
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", code, "local", "--demo", "--config", str(config), *options],
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=stderr,
            text=True,
        )
        try:
            deadline = time.monotonic() + within
            while time.monotonic() < deadline and until[1] not in table_states(
                out.read_text().splitlines(), until[0]
            ):
                assert process.poll() is None, err.read_text()
                time.sleep(0.5)
            process.send_signal(signal.SIGINT)
            process.wait(30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return out.read_text() + err.read_text()


def table_states(lines: list[str], job: str) -> list[str]:
    """The states the run table's lines show for `job`, in the order printed."""
    return [line.split()[4] for line in lines if len(line.split()) > 5 and line.split()[2] == job]


def test_by_default_the_terminal_shows_the_banner_the_run_table_and_nothing_twice(tmp_path: Path) -> None:
    printed = run_local(tmp_path, until=("flaky-then-dead", "SUCCEEDED"))
    lines = printed.splitlines()
    assert lines[0] == "jobsched local is running"
    assert not [line for line in lines if line.startswith("{")], "JSON log lines without --verbose"
    assert "UserWarning" not in printed
    assert "Traceback" not in printed
    assert sum(line.startswith(TABLE_HEADER) for line in lines) == 1
    repeated = [line for line, n in Counter(line for line in lines if line.strip()).items() if n > 1]
    assert repeated == []
    # In the order the run went through them (the first PENDING of a run made ahead is held).
    for job, states in (("flaky-then-dead", FLAKY_STATES), ("webhook-20s", WEBHOOK_STATES)):
        # Every transition, once, in order (the table reads each run's history, so changes
        # the stream merged into one record are all shown).
        assert table_states(lines, job) == states, printed
    times = [line.split()[0] for line in lines if len(line.split()) > 5 and line[:2].isdigit()]
    assert times == sorted(times), printed


def test_verbose_adds_the_functions_json_logs_once_each(tmp_path: Path) -> None:
    printed = run_local(tmp_path, "--verbose", until=("webhook-20s", "SUCCEEDED"))
    lines = printed.splitlines()
    documents = [json.loads(line) for line in lines if line.startswith("{")]
    assert any(d.get("level") == "INFO" and d.get("service") == "jobsched" for d in documents), printed
    # Each record once: as its JSON document, never also as a plain line.
    assert not [line for line in lines if " INFO jobsched" in line], printed
    assert "UserWarning" not in printed
    assert table_states(lines, "webhook-20s")[-1:] == ["SUCCEEDED"], printed
