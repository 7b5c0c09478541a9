"""Local mode's run table on a running local system: every tenant's runs, read from the runs
stream as they change state (not only the demo's jobs, which were all it showed before)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from jobsched_cli.client import ApiClient

pytestmark = pytest.mark.integration

KEYS = {"key-acme": "acme", "key-globex": "globex"}


@pytest.fixture(scope="module")
def runtime() -> Iterator[Any]:
    from jobsched_local.config import LocalConfig
    from jobsched_local.runtime import LocalRuntime

    rt = LocalRuntime(LocalConfig(port=0, moto_port=0, sweep_seconds=1, api_keys=dict(KEYS))).start()
    try:
        yield rt
    finally:
        rt.stop()


def test_the_table_shows_the_runs_of_every_tenant(runtime: Any) -> None:
    from jobsched_local.console import RunTable

    out = io.StringIO()
    table = RunTable.of(runtime, out=out)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for key, tenant in KEYS.items():
        ApiClient(runtime.api_url, api_key=key).create_job(
            {"name": f"{tenant} report", "type": "demo.hello", "runAt": now}
        )

    def finished() -> list[str]:
        return [line for line in out.getvalue().splitlines() if "SUCCEEDED" in line]

    deadline = time.monotonic() + 60  # a bound on waiting, not a figure under test
    while len(finished()) < 2 and time.monotonic() < deadline:
        table.poll()
        time.sleep(0.2)
    assert sorted(line.split()[1] for line in finished()) == ["acme", "globex"]
    assert "acme report" in out.getvalue() and "globex report" in out.getvalue()  # job names, not ids
