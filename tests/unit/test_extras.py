"""What each extra of the distribution installs (pyproject.toml, as a wheel's metadata states
it): the client and the worker SDK get an HTTP client's dependencies, not the AWS SDK nor
Powertools, which only the server's runtime needs."""

from __future__ import annotations

import tomllib

import pytest

from infra import ROOT
from tests.helpers import installed_with, pyproject_requires_dist

SERVER_RUNTIME = {"boto3", "botocore", "aws-lambda-powertools", "aws-xray-sdk"}


@pytest.fixture(scope="module")
def requires_dist() -> list[str]:
    return pyproject_requires_dist(tomllib.loads((ROOT / "pyproject.toml").read_text()))


@pytest.mark.parametrize("extra", ["client", "worker"])
def test_the_client_and_worker_extras_install_neither_the_aws_sdk_nor_powertools(
    requires_dist: list[str], extra: str
) -> None:
    installed = installed_with(requires_dist, extra)
    assert installed >= {"pydantic", "croniter"}
    assert not installed & SERVER_RUNTIME


def test_sigv4_adds_botocore_alone(requires_dist: list[str]) -> None:
    assert installed_with(requires_dist, "sigv4") - installed_with(requires_dist, "client") == {"botocore"}


@pytest.mark.parametrize("extra", ["server", "cdk", "local", "dev"])
def test_what_runs_or_deploys_the_server_gets_its_runtime(requires_dist: list[str], extra: str) -> None:
    runtime = {"boto3", "aws-lambda-powertools", "urllib3", "standardwebhooks"}
    assert installed_with(requires_dist, extra) >= runtime
