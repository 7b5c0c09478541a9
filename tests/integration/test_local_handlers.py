"""Local mode loads the user's handler modules from where it is started (or --handlers-path),
and a module that cannot be imported stops it at start with one error naming the module,
never a traceback per function and a 500 later."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from jobsched_cli.client import ApiClient

from ..helpers import fast_local_mode

KEYS = {"key-handlers": "tenant-handlers"}
FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
HANDLER = """
import jobsched


@jobsched.handler("{job_type}")
def send_invoice(payload, invocation):
    return {{
        "sent": payload["invoice"],
        "runKey": invocation.run_key,
        "attempt": invocation.attempt,
        "fence": invocation.fence,
        "deadlineAfterScheduled": invocation.deadline > invocation.scheduled_for,
    }}
"""


def write_package(root: Path, package: str, handlers: str) -> None:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "handlers.py").write_text(textwrap.dedent(handlers))


@pytest.fixture
def start_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory, not on sys.path, that local mode is started from; sys.path as it
    was afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def test_a_handler_module_in_the_start_directory_runs_a_job_of_its_type(start_directory: Path) -> None:
    package = f"myjobs_{uuid.uuid4().hex[:8]}"  # the process-wide registry keeps every type
    job_type = f"{package}.invoice.send"
    write_package(start_directory, package, HANDLER.format(job_type=job_type))

    with fast_local_mode(dict(KEYS), handler_modules=[f"{package}.handlers"]) as runtime:
        client = ApiClient(runtime.api_url, api_key="key-handlers")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        job = client.create_job(
            {"name": "invoice-42", "type": job_type, "runAt": now, "payload": {"invoice": 42}}
        )
        runs = finished_runs(client, job["jobId"])
        assert [r["state"] for r in runs] == ["SUCCEEDED"], runs
        run = client.get_run(runs[0]["runKey"])
    assert run["result"] == {
        "sent": 42,
        "runKey": run["runKey"],
        "attempt": 1,
        "fence": run["fence"],
        "deadlineAfterScheduled": True,
    }


def finished_runs(client: ApiClient, job_id: str) -> list[dict[str, Any]]:
    """The job's runs once its first has finished (SUCCEEDED or DEAD), within 30 s."""
    deadline = time.monotonic() + 30
    runs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        runs = client.list_runs(job_id, view="all")["items"]
        if runs and runs[0]["state"] in {"SUCCEEDED", "DEAD"}:
            break
        time.sleep(0.2)
    return runs


def test_the_guide_s_handler_module_runs_as_the_guide_says(start_directory: Path) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "handlers.md").read_text()
    example = re.search(r"<!-- handlers-example -->\n```python\n(.*?)^```", page, re.S | re.M)
    assert example is not None
    write_package(start_directory, "myjobs", example.group(1))

    with fast_local_mode(dict(KEYS), handler_modules=["myjobs.handlers"]) as runtime:
        client = ApiClient(runtime.api_url, api_key="key-handlers")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        report = client.create_job({"name": "daily-report", "type": "report.daily", "runAt": now})
        invoice = client.create_job(
            {"name": "invoice-none", "type": "invoice.send", "runAt": now, "payload": {}, "maxAttempts": 3}
        )
        reported = finished_runs(client, report["jobId"])
        refused = finished_runs(client, invoice["jobId"])
    assert [(r["state"], r["result"]) for r in reported] == [
        ("SUCCEEDED", {"day": now[:10], "attempt": 1})
    ], reported
    # A PermanentError: dead at its first attempt, whatever maxAttempts allows.
    assert [(r["state"], r["attempt"], r["lastErrorClass"]) for r in refused] == [
        ("DEAD", 1, "BadPayload")
    ], refused


def start_local(cwd: Path, modules: list[str], *options: str) -> subprocess.CompletedProcess[str]:
    """`jobsched local` started in `cwd` with `modules` as its handler_modules. A run that does
    start is stopped after 60 s (and then fails the test on its exit code)."""
    config = cwd / "local.json"
    config.write_text(json.dumps({"handler_modules": modules, "port": 0, "moto_port": 0}))
    # -I: like the `jobsched` script, the start directory is not on sys.path by itself.
    code = f"import sys; sys.path[:0] = [{str(FUNCTIONS)!r}]; from jobsched_cli import main; sys.exit(main())"
    command = [sys.executable, "-I", "-c", code, "local", "--config", str(config), "--follow", "none"]
    try:
        return subprocess.run(
            [*command, *options], cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"local mode started with {modules}: {exc.stdout!r}") from None


def test_a_missing_handler_module_is_one_error_at_start_naming_it(tmp_path: Path) -> None:
    started = start_local(
        tmp_path, ["jobsched.demo_handlers", "nosuch_handlers.jobs"], "--handlers-path", "src"
    )
    assert started.returncode == 2
    assert started.stdout == ""  # nothing started, not even the banner
    assert "Traceback" not in started.stderr
    root = tmp_path.resolve()
    assert started.stderr.splitlines() == [
        "error: handler module 'nosuch_handlers.jobs' could not be imported: no module named "
        f"'nosuch_handlers' in {root / 'src'}, {root}, the installed packages",
        "  start local mode from the directory that holds it, or name that directory with --handlers-path",
    ]


def test_a_handler_module_that_raises_on_import_is_one_error_at_start_naming_it(tmp_path: Path) -> None:
    write_package(tmp_path / "src", "broken_jobs", 'import jobsched\nSETTINGS = {}["api_token"]\n')
    started = start_local(tmp_path, ["broken_jobs.handlers"], "--handlers-path", "src")
    assert started.returncode == 2
    assert "Traceback" not in started.stderr
    first = started.stderr.splitlines()[0]
    handlers = (tmp_path / "src" / "broken_jobs" / "handlers.py").resolve()
    assert first == (
        "error: handler module 'broken_jobs.handlers' could not be imported: "
        f"KeyError: 'api_token' ({handlers}, line 2)"
    )
