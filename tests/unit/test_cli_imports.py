"""What the `jobsched` command imports: `--help` and the client commands load the HTTP client
and its models, never the AWS SDK, Powertools, moto or the server's modules (local mode and
SigV4 import theirs when they run). Each command runs in a fresh interpreter, whose
`sys.modules` afterwards is what that command loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import StubApi

# Packages a client command has no use for: the AWS SDK, Powertools and X-Ray, moto, and the
# server side of jobsched (its settings, stores, services, handlers, targets, local runtime).
SERVER_ONLY = (
    "boto3",
    "botocore",
    "aws_lambda_powertools",
    "aws_xray_sdk",
    "moto",
    "jobsched.settings",
    "jobsched.store",
    "jobsched.services",
    "jobsched.handlers",
    "jobsched.targets",
    "jobsched.wiring",
    "jobsched_local.config",
    "jobsched_local.serve",
)

RUN_COMMAND = """
import json, sys
from jobsched_cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@pytest.fixture
def api() -> Iterator[StubApi]:
    stub = StubApi()
    empty: tuple[int, dict[str, Any], dict[str, str]] = (200, {"items": [], "nextCursor": None}, {})
    stub.routes[("GET", "/v1/jobs")] = empty
    stub.routes[("GET", "/v1/jobs/j1/runs")] = empty
    yield stub
    stub.close()


def imported_by(*argv: str) -> list[str]:
    """The modules loaded by a fresh interpreter that ran `jobsched argv` (which must exit 0)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("JOBSCHED_", "AWS_"))},
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    done = subprocess.run(
        [sys.executable, "-c", RUN_COMMAND, *argv], capture_output=True, text=True, env=env, check=True
    )
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["code"] == 0, done.stdout + done.stderr
    return list(last["modules"])


def server_only(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in SERVER_ONLY)]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["jobs", "list"],
        ["runs", "list", "j1"],
    ],
    ids=["help", "jobs-list", "runs-list"],
)
def test_client_commands_import_no_aws_sdk_nor_server_modules(api: StubApi, argv: list[str]) -> None:
    endpoint = [] if argv == ["--help"] else ["--endpoint", api.url]
    modules = imported_by(*argv, *endpoint)
    assert server_only(modules) == []
    if argv != ["--help"]:
        assert api.requests, "the command did not reach the stub API"
        assert api.requests[0]["headers"]["x-api-key"] == "jobsched-dev-key"
