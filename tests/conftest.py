"""Shared fixtures: moto-backed tables, an injectable clock, and an API client that
drives the real `api` handler with API Gateway REST events."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Imported first: it records the caller's AWS settings before the environment below replaces them.
from tests.helpers import T0, ApiClient, create_queues

# Before boto3 is imported anywhere: no real credentials, no real endpoints.
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        "POWERTOOLS_METRICS_NAMESPACE": "jobsched",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_DEV": "0",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        # botocore checks every store request too: moto checks less than DynamoDB does.
        "VALIDATE_STORE_REQUESTS": "true",
    }
)


@pytest.fixture
def clock():
    from jobsched.domain.instants import ManualClock

    return ManualClock(T0)


@pytest.fixture
def aws() -> Iterator[dict[str, dict[str, str]]]:
    """A fresh moto account with every table of the schema created. moto's DynamoDB is made
    safe for the threads a worker batch runs on, as local mode and chaos make it
    (jobsched_local.moto_transactions)."""
    import boto3
    from jobsched import aws as aws_clients
    from jobsched.store.schema import ALL_TABLES
    from jobsched_local.moto_transactions import install
    from moto import mock_aws

    install()
    with mock_aws():
        aws_clients.client.cache_clear()
        ddb = boto3.client("dynamodb")
        for spec in ALL_TABLES:
            ddb.create_table(**spec.create_table_request())
        yield create_queues(boto3.client("sqs"))
    aws_clients.client.cache_clear()


@pytest.fixture
def container(aws, clock):
    from jobsched import wiring
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched.settings import Settings

    # A sweep makes runs up to the horizon only (the stack's 300 s ahead is tested on its own):
    # the tests count the runs each sweep makes.
    settings = Settings(
        shard_count=4, sweep_ahead_seconds=120, queue_urls=aws["urls"], dlq_urls=aws["dlq_urls"]
    )
    built = wiring.Container(settings, clock, RecordedMetrics())  # what the services emit
    wiring.override(built)
    yield built
    wiring.override(None)


@pytest.fixture
def api(container) -> ApiClient:
    return ApiClient("tenant-a")


@pytest.fixture
def other_api(container) -> ApiClient:
    return ApiClient("tenant-b")


# --- the `integration` marker: on every test that talks to moto ---

# Fixtures that open a moto account; `fixturenames` holds every fixture a test reaches, so a
# test using one through another fixture (a suite's own conftest) is marked too.
MOTO_FIXTURES = frozenset({"aws", "container", "api", "other_api"})
# Suites that talk to moto throughout: in-process (integration, chaos, benchmarks, fuzz) or
# through local mode's moto server (e2e, browser).
MOTO_SUITES = frozenset({"integration", "e2e", "chaos", "benchmarks", "fuzz", "browser"})
TESTS_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        suite = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        if suite in MOTO_SUITES or MOTO_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _moto_needs_the_integration_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test that starts moto (mock_aws, or local mode's moto server) without the marker
    fails, so `pytest -m "not integration"` stays a loop that never waits on moto."""
    if request.node.get_closest_marker("integration"):
        yield
        return
    from jobsched_local.moto_backend import MotoServer
    from moto.core.models import MockAWS

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"{request.node.nodeid} talks to moto: mark it `integration` "
            "(pytestmark = pytest.mark.integration)"
        )

    monkeypatch.setattr(MockAWS, "start", refuse)
    monkeypatch.setattr(MotoServer, "start", refuse)
    yield
