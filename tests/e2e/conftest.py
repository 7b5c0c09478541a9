"""The e2e suite's target (see targets.py): local mode by default, in `make test`; a deployed
stack with JOBSCHED_E2E_TARGET=aws (`make e2e-aws`).

Local mode is one runtime (moto server + the AWS glue around the real handlers) for the whole
suite. Tests reach the system only over HTTP: the API through ApiClient and the CLI. State is
shared, so every test makes its own jobs. Tests marked `local_only` reach into moto or the
local glue, or need local mode's two API keys; against AWS they are deselected."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..helpers import CALLER_AWS_ENVIRONMENT, fast_local_mode
from .targets import AWS, Target, aws_target, chosen, local_target

DEPLOYED = pytest.StashKey[Target]()

TENANTS = {"key-a": "tenant-a", "key-b": "tenant-b"}
# What local mode's operator grants (test_target_grants_e2e): each tenant its own queues.
TENANT_TARGETS = {
    tenant: [
        f"arn:aws:{service}:us-east-1:123456789012:{kind}e2e-grants-{tenant[-1]}-*"
        for service, kind in (
            ("sqs", ""),
            ("lambda", "function:"),
            ("states", "stateMachine:"),
            ("events", "event-bus/"),
        )
    ]
    for tenant in ("tenant-a", "tenant-b")
}
HERE = Path(__file__).parent


if chosen() == AWS:
    # tests/conftest.py replaced the caller's credentials and region with moto's fakes; a
    # deployed stack is called with the real ones (and only this suite runs, see below).
    for name, value in CALLER_AWS_ENVIRONMENT.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if chosen() != AWS:
        return
    outside = [i.nodeid for i in items if HERE not in i.path.parents]
    if outside:
        raise pytest.UsageError(
            f"JOBSCHED_E2E_TARGET=aws runs tests/e2e only (with real AWS credentials); "
            f"also collected: {outside[:3]}"
        )
    local_only = [i for i in items if i.get_closest_marker("local_only")]
    if local_only:
        config.hook.pytest_deselected(items=local_only)
        items[:] = [i for i in items if i not in local_only]
    deployed, why = aws_target()
    if deployed is None:
        # One message, exit status 0: the deployed check is opt-in.
        pytest.exit(f"end-to-end against AWS skipped: {why}", returncode=0)
    config.stash[DEPLOYED] = deployed


# Package scope: stopped after the last e2e test, before any other suite in the same session
# runs (its loops would otherwise keep polling whatever AWS mock comes next).
@pytest.fixture(scope="package")
def runtime() -> Iterator[Any]:
    with fast_local_mode(dict(TENANTS), tenant_targets=TENANT_TARGETS) as rt:
        yield rt


@pytest.fixture(scope="package")
def target(request: pytest.FixtureRequest) -> Target:
    if chosen() == AWS:
        return request.config.stash[DEPLOYED]
    return local_target(request.getfixturevalue("runtime"))


@pytest.fixture(scope="package")
def api_url(target: Target) -> str:
    return target.endpoint


@pytest.fixture
def client_a(target: Target) -> Any:
    return target.client()


@pytest.fixture
def client_b(runtime: Any) -> Any:
    """A second tenant: local mode's other API key."""
    from jobsched_cli.client import ApiClient

    return ApiClient(str(runtime.api_url), api_key="key-b")
