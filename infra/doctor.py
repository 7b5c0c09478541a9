"""The preflight, run before a deploy with the deployer's credentials: `make preflight`,
`jobsched doctor` or `python -m infra.doctor [-c key=value ...]`.

It synthesizes the stack exactly as `cdk deploy` would (cdk.json's context, `-c` overrides,
layer bundling skipped), reads the account (infra.preflight_reads), prints one line per check
(infra.preflight) and exits 1 when any check blocks the deploy, 2 when the config itself is
refused at synth (the message names the key and the rule)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .preflight import AccountFacts, Check, Plan, Status, exit_code, plan_from_template, render, run_checks
from .preflight_reads import ClientFactory, read_facts

PRICES = Path(__file__).resolve().parent.parent / "bench" / "prices.json"


def load_prices(path: Path = PRICES) -> dict[str, float]:
    return {name: float(entry["usd"]) for name, entry in json.loads(path.read_text())["prices"].items()}


def parse_context(pairs: list[str]) -> dict[str, Any]:
    """`-c key=value` pairs, as the CDK CLI takes them (values stay strings; the config coerces)."""
    context: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"doctor: -c takes key=value, got {pair!r}")
        context[key] = value
    return context


def synthesized_plan(context: dict[str, Any]) -> Plan:
    """Synthesize the stack with `context` over cdk.json's and return its Plan. Raises
    jobsched.cdk.config.ConfigError when the config is refused (as `cdk synth` would)."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from jobsched.cdk.config import Config

    from .app import build_app

    with tempfile.TemporaryDirectory(prefix="jobsched-preflight-") as outdir:
        app, stack = build_app({"aws:cdk:bundling-stacks": [], **context}, outdir, checks=False)
        assembly = app.synth()
        template = assembly.get_stack_by_name(stack.stack_name).template
        config = Config.from_context(app.node)
        return plan_from_template(template, config, stack.stack_name)


def preflight(plan: Plan, client: ClientFactory) -> tuple[list[Check], AccountFacts]:
    facts = read_facts(client, plan)
    return run_checks(plan, facts, load_prices()), facts


def main(argv: list[str] | None = None, client: ClientFactory | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jobsched doctor", description="check an AWS account and region before deploying jobsched"
    )
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--region", help="AWS region (default: the credentials' own)")
    parser.add_argument("--profile", help="AWS profile (default: the standard chain)")
    args = parser.parse_args(argv)
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")  # before jsii starts
    from jobsched.cdk.config import ConfigError

    try:
        plan = synthesized_plan(parse_context(args.context))
    except ConfigError as exc:
        print(f"{Status.BLOCKED.value:<7} config: {exc}")
        print("preflight: the config is refused at synth; fix it first")
        return 2
    if client is None:
        import boto3

        session = boto3.Session(profile_name=args.profile, region_name=args.region)

        def session_client(service: str) -> Any:
            return session.client(service)  # type: ignore[call-overload]

        client = session_client
    checks, _ = preflight(plan, client)
    print(render(checks))
    return exit_code(checks)


if __name__ == "__main__":
    sys.exit(main())
