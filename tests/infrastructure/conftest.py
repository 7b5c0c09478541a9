"""One synthesis of the stack per session (layer bundling skipped), shared by every check.

The cdk-nag gate runs inside that synthesis; its outcome is kept for test_nag rather than
raised here, so one finding does not hide every other check."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infrastructure.synth import Synth, function_environment, synthesize

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def cfn_lint(synth: Synth) -> Iterator[subprocess.Popen[str]]:
    """cfn-lint on the session template, started at once so it runs while other tests do."""
    template = synth.outdir / f"{synth.stack.artifact_id}.template.json"
    command = [
        str(Path(sys.executable).with_name("cfn-lint")),
        "--ignore-checks",
        "W3005",
        "--",
        str(template),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield process
    process.kill()
    process.wait()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The lint result is collected last, so it runs while everything else does.
    items.sort(key=lambda item: item.path.name == "test_cfn_lint.py")


@pytest.fixture(scope="session", autouse=True)
def _start_cfn_lint_early(request: pytest.FixtureRequest) -> None:
    if any(item.path.name == "test_cfn_lint.py" for item in request.session.items):
        request.getfixturevalue("cfn_lint")


@pytest.fixture(scope="session")
def largest(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The stack at the largest shard count the config allows (most rules, most reservations:
    the sweeper's 320 and the reconciler's 640, with the quota that holds them)."""
    return synthesize(
        tmp_path_factory.mktemp("largest"),
        {"shardCount": 256, "shardsPerSweep": 1, "accountConcurrency": 1500},
        checks=False,
    )


@pytest.fixture(scope="session")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The stack with the opt-ins and non-default settings the tests compare against (cdk-nag on)."""
    from tests.infrastructure.flows import FLOW_CONTEXT

    # Grants too: the flows' targets and roles, which the IAM tests hold the worker's role to.
    # An account whose quota was given (reservations), an API capped, the account's own API
    # Gateway logging role kept.
    return synthesize(
        tmp_path_factory.mktemp("variant"),
        {
            "logRetentionDays": 7,
            "apiGatewayAccountRole": False,
            "accountConcurrency": 1000,
            "apiReservedConcurrency": 50,
            **FLOW_CONTEXT,
        },
    )


@pytest.fixture(scope="session")
def config(synth: Synth) -> Any:
    return synth.stack.config


@pytest.fixture(scope="session")
def recorded(synth: Synth) -> Any:
    """The AWS calls and metrics of every handler, driven through their flows on moto, with
    the environment the template gives the functions (not the test process's)."""
    from tests.infrastructure.flows import record_all_flows

    env = function_environment(synth)
    assert env["POWERTOOLS_SERVICE_NAME"]
    return record_all_flows(env)
