"""Entry point: `python -m infra.app` (what cdk.json runs) synthesizes the jobsched stack.

Context comes from cdk.json even without the CLI, so `cdk synth` and plain Python produce
the same template; `-c key=value` on the CLI overrides it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from jobsched.cdk import nag
from jobsched.cdk.config import Config
from jobsched.cdk.layer_asset import layer_code
from jobsched.cdk.names import STACK_ID

from . import ROOT
from .stack import JobschedStack

CDK_JSON = ROOT / "cdk.json"


def file_context() -> dict[str, Any]:
    if not CDK_JSON.exists():
        return {}
    return dict(json.loads(CDK_JSON.read_text()).get("context", {}))


def build_app(
    context: dict[str, Any] | None = None,
    outdir: str | None = None,
    *,
    checks: bool = True,
    layer_code_factory: Callable[[], lambda_.Code] = layer_code,
) -> tuple[cdk.App, JobschedStack]:
    app = cdk.App(context={**file_context(), **(context or {})}, outdir=outdir)
    config = Config.from_context(app.node)
    account = app.node.try_get_context("account")
    region = app.node.try_get_context("region")
    # Environment-agnostic unless pinned, so the template never depends on who runs synth.
    env = cdk.Environment(account=str(account), region=str(region)) if account and region else None
    stack = JobschedStack(
        app,
        str(app.node.try_get_context("stackName") or STACK_ID),
        config=config,
        env=env,
        description="jobsched: durable multi-tenant job scheduler",
        layer_code_factory=layer_code_factory,
    )
    if checks:
        nag.enable(app)
    return app, stack


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Synthesize the jobsched stack (cdk.json runs this)")
    parser.add_argument("--outdir", help="cloud assembly directory (default: CDK_OUTDIR or a temp dir)")
    parser.add_argument(
        "--skip-bundling", action="store_true", help="do not build the layer (checks and lint only)"
    )
    parser.add_argument("--no-checks", action="store_true", help="skip the cdk-nag gate")
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="context over cdk.json's, as `cdk -c` takes it",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    context: dict[str, Any] = {"aws:cdk:bundling-stacks": []} if args.skip_bundling else {}
    for pair in args.context:
        key, separator, value = pair.partition("=")
        if not separator:
            parser.error(f"--context {pair!r}: expected KEY=VALUE")
        context[key] = value
    app, stack = build_app(context, args.outdir, checks=not args.no_checks)
    app.synth()
    missing = stack.config.missing_subscriber()
    if missing:  # the CDK CLI prints the same warning annotation
        print(f"WARNING: {missing}", file=sys.stderr)
    if args.outdir:
        checks = "cdk-nag AwsSolutions: no unacknowledged findings; " if not args.no_checks else ""
        print(f"{checks}template: {args.outdir}/{stack.artifact_id}.template.json")


if __name__ == "__main__":
    main()
