"""One local runtime (moto server + the AWS glue around the real handlers) for the e2e suite.

Tests reach it only over HTTP: the API through ApiClient and the CLI, and, for the glue's
own fidelity, the moto server. State is shared, so every test makes its own jobs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

TENANTS = {"key-a": "tenant-a", "key-b": "tenant-b"}


# Package scope: stopped after the last e2e test, before any other suite in the same session
# runs (its loops would otherwise keep polling whatever AWS mock comes next).
@pytest.fixture(scope="package")
def runtime() -> Iterator[Any]:
    from jobsched.local.config import LocalConfig
    from jobsched.local.runtime import LocalRuntime

    # The sweep horizon (120 s by default) is how far ahead runs are made; an every-2s job
    # would queue 60 of them, and moto's SQS slows with queue depth. The behaviour under
    # test is the same with a shorter one.
    config = LocalConfig(
        port=0,
        moto_port=0,
        sweep_seconds=1,
        reconcile_seconds=2,
        horizon_seconds=15,
        api_keys=dict(TENANTS),
    )
    rt = LocalRuntime(config).start()
    try:
        yield rt
    finally:
        rt.stop()  # also restores the environment the process had before the runtime


@pytest.fixture(scope="package")
def api_url(runtime: Any) -> str:
    return str(runtime.api_url)


@pytest.fixture
def client_a(api_url: str) -> Any:
    from jobsched.client import ApiClient

    return ApiClient(api_url, api_key="key-a")


@pytest.fixture
def client_b(api_url: str) -> Any:
    from jobsched.client import ApiClient

    return ApiClient(api_url, api_key="key-b")
