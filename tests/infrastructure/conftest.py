"""One synthesis of the stack per session (layer bundling skipped), shared by every check.

The cdk-nag gate runs inside that synthesis; its outcome is kept for test_nag rather than
raised here, so one finding does not hide every other check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

SKIP_BUNDLING = {"aws:cdk:bundling-stacks": []}


@dataclass
class Synth:
    outdir: Path
    stack: Any  # infra.stack.JobschedStack
    template: dict[str, Any]
    error: str | None  # the cdk-nag gate's failure, if any
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template["Resources"]

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == kind}

    def props(self, logical_id: str) -> dict[str, Any]:
        return self.resources[logical_id].get("Properties", {})

    def logical_id(self, construct: Any) -> str:
        """The template logical id of a construct (or of its default child)."""
        from aws_cdk import CfnElement, Stack

        element = construct if isinstance(construct, CfnElement) else construct.node.default_child
        return str(Stack.of(element).resolve(element.logical_id))

    def asset_dir(self, logical_id: str) -> Path:
        """The staged asset directory of a Lambda function's code."""
        key = self.props(logical_id)["Code"]["S3Key"]
        return self.outdir / f"asset.{key.removesuffix('.zip')}"


def synthesize(outdir: Path, context: dict[str, Any] | None = None, *, checks: bool = True) -> Synth:
    from infra.app import build_app

    app, stack = build_app({**SKIP_BUNDLING, **(context or {})}, outdir=str(outdir), checks=checks)
    error = None
    try:
        app.synth()
    except RuntimeError as exc:  # cdk-nag findings; the template is written before validation
        error = str(exc)
    template = json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())
    report_path = outdir / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return Synth(outdir, stack, template, error, report)


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
    """The stack at the largest shard count the config allows (most rules, most reservations)."""
    return synthesize(
        tmp_path_factory.mktemp("largest"), {"shardCount": 256, "shardsPerSweep": 1}, checks=False
    )


@pytest.fixture(scope="session")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The stack with the opt-ins and non-default settings the tests compare against (cdk-nag on)."""
    return synthesize(
        tmp_path_factory.mktemp("variant"), {"logRetentionDays": 7, "apiGatewayAccountRole": True}
    )


@pytest.fixture(scope="session")
def config(synth: Synth) -> Any:
    return synth.stack.config


def function_environment(synth: Synth) -> dict[str, str]:
    """The plain-valued variables the template sets on the functions (the same on each)."""
    found = []
    for function in synth.of_type("AWS::Lambda::Function").values():
        variables = function["Properties"]["Environment"]["Variables"]
        found.append({k: v for k, v in variables.items() if isinstance(v, str)})
    assert all(env == found[0] for env in found), "functions differ in their environment"
    return found[0]


@pytest.fixture(scope="session")
def recorded(synth: Synth) -> Any:
    """The AWS calls and metrics of every handler, driven through their flows on moto, with
    the environment the template gives the functions (not the test process's)."""
    from tests.infrastructure.flows import record_all_flows

    env = function_environment(synth)
    assert env["POWERTOOLS_SERVICE_NAME"]
    return record_all_flows(env)


def render(value: Any) -> str:
    """A template value as text: Ref X → <X>, GetAtt X.Y → <X.Y>, Join and Sub flattened."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{'.'.join(arg)}>"
        if fn == "Fn::Join":
            separator, parts = arg
            return separator.join(render(p) for p in parts)
        if fn == "Fn::Sub" and isinstance(arg, str):
            return arg.replace("${", "<").replace("}", ">")
    raise ValueError(f"cannot render {value!r}")
