"""The migration gate: what a deploy of this template would do to the stack's tables (and to
its grants parameter) that CloudFormation cannot do in one update, refused before the deploy
with the steps to follow instead.

CloudFormation replaces a DynamoDB table whose key schema, key attribute types, name or local
secondary indexes change (with Retain the old table is orphaned, data and all, while the
functions point at a new, empty one), and it refuses an update that creates or deletes more
than one global secondary index of a table (changing an index's keys or projection is a
delete and a create). Some updates it starts fail halfway, and roll back: DynamoDB changes
neither a stream's view type nor a TTL attribute in place, and never lowers warm
throughput; SSM never turns an advanced parameter back into a standard one.

Compared with what is deployed when credentials can read it (`read_deployed`: each table's
DescribeTable and DescribeTimeToLive, the deployed template's settings, the parameter's
tier: `python -m infra.migrations`, and the preflight), else with the last released
template's tables (infra/released-tables.json, checked in; what `make test` runs,
tests/infrastructure/test_migrations.py). Only what is deployed catches a deploy that skips a
release: two index changes, each released on its own, arrive in one update. The steps are in
docs/operate/upgrade.md.

At a release: `python -m infra.migrations --write` records the template's tables as the
released ones. `python -m infra.migrations [-c key=value ...]` checks the current template
and exits 1 on a refused change."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from . import ROOT

RELEASED_TABLES = ROOT / "infra" / "released-tables.json"
# Clients by service name: boto3.Session.client, or a test's moto-backed one.
ClientFactory = Callable[[str], Any]

REPLACE_STEPS = (
    "CloudFormation would replace the table: with Retain the old one is orphaned with its "
    "data while the functions use a new, empty one. Instead: (1) add the new shape as a new "
    "table (its own TableSpec and logical id) next to the old one and deploy; (2) copy the "
    "items across (DynamoDB export to S3 and import, or a scan that writes each item) while "
    "writes go to both or the scheduler is paused; (3) point the code at the new table and "
    "deploy; (4) remove the old table's spec in a later release, and delete the retained "
    "table by hand once it is no longer needed"
)
GSI_STEPS = (
    "CloudFormation creates or deletes one global secondary index per table update. Split "
    "the change into deploys of one index each: to change an index's keys or projection, "
    "add it under a new name (deploy, wait until it is ACTIVE), move the code to it (deploy), "
    "then delete the old one (deploy). Refresh the snapshot after each released step; a "
    "stack that skipped a release deploys the releases in between first, one at a time"
)
STREAM_STEPS = (
    "DynamoDB cannot change the view type of an enabled stream: it must be disabled and a "
    "new stream enabled, under a new ARN, so the update fails halfway ('Table already has an "
    "enabled stream') or replaces every event source mapping on the stream, and the records "
    "the old mappings had not read are lost. Instead keep the view type; to change it: (1) "
    "stop the writes that feed the stream (pause the jobs or disable the sweeper's rules, "
    "let the queues drain) and wait until its consumers' IteratorAge is 0; (2) deploy with "
    "the stream and the mappings on it removed; (3) deploy with the new view type (the new "
    "mappings read the new stream from its start), then resume the writes"
)
TTL_STEPS = (
    "DynamoDB cannot move a table's TTL to another attribute in place: TTL must be disabled "
    "first, and it takes one TTL change per table an hour, so the update fails halfway. "
    "Instead: (1) write the new attribute beside the old one on every item that should "
    "expire (deploy); (2) deploy with TTL disabled on the table; (3) an hour later, deploy "
    "with the new attribute; (4) stop writing the old one. Nothing expires between (2) and (3)"
)
WARM_STEPS = (
    "DynamoDB never lowers warm throughput, so the update fails halfway. Instead keep the "
    "setting at the value shown or above (warmThroughput: read and write for the table, "
    "indexRead and indexWrite for its indexes); a raise is billed once and costs nothing after"
)
TIER_STEPS = (
    "SSM cannot turn an advanced parameter back into a standard one, so the update fails "
    "halfway. Instead deploy with -c grantsParameterTier=advanced (grants_parameter_tier="
    "'advanced' for the construct): the parameter stays advanced (about $0.05 a month), and "
    "its 8 KB stay available"
)
ADVANCED = "Advanced"
STANDARD = "Standard"


def _key_types(props: dict[str, Any]) -> dict[str, str]:
    return {a["AttributeName"]: a["AttributeType"] for a in props.get("AttributeDefinitions", [])}


def _keys(schema: list[dict[str, str]], types: dict[str, str]) -> list[list[str]]:
    """[[name, HASH|RANGE, S|N|B], ...]: a key's type change replaces what it keys."""
    return [[k["AttributeName"], k["KeyType"], types.get(k["AttributeName"], "?")] for k in schema]


def _indexes(items: list[dict[str, Any]], types: dict[str, str]) -> dict[str, Any]:
    found = {}
    for index in items:
        projection = index.get("Projection", {})
        found[index["IndexName"]] = {
            "keys": _keys(index["KeySchema"], types),
            "projection": projection.get("ProjectionType", "KEYS_ONLY"),
            "include": sorted(projection.get("NonKeyAttributes", [])),
        }
    return dict(sorted(found.items()))


def _units(warm: dict[str, Any] | None) -> dict[str, int]:
    """{read, write} of a WarmThroughput (the template's, or DescribeTable's), as given."""
    warm = warm or {}
    units = {"read": warm.get("ReadUnitsPerSecond"), "write": warm.get("WriteUnitsPerSecond")}
    return {kind: int(value) for kind, value in units.items() if value}


def _warm(props: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Warm throughput by what it is set on: "table", and "index <name>" for each index."""
    found = {"table": _units(props.get("WarmThroughput"))}
    for index in props.get("GlobalSecondaryIndexes", []):
        found[f"index {index['IndexName']}"] = _units(index.get("WarmThroughput"))
    return {target: units for target, units in sorted(found.items()) if units}


def table_shape(props: dict[str, Any]) -> dict[str, Any]:
    """What decides how CloudFormation can update a table, from its template properties (or
    DescribeTable's, which `described_shape` brings to the same form): its name (None when
    CloudFormation names it), key schema with types, global and local secondary indexes
    (keys, projection), stream view type and TTL attribute (None: none), and warm throughput."""
    types = _key_types(props)
    ttl = props.get("TimeToLiveSpecification") or {}
    return {
        "tableName": props.get("TableName"),
        "keys": _keys(props["KeySchema"], types),
        "globalIndexes": _indexes(props.get("GlobalSecondaryIndexes", []), types),
        "localIndexes": _indexes(props.get("LocalSecondaryIndexes", []), types),
        "stream": (props.get("StreamSpecification") or {}).get("StreamViewType"),
        "ttl": ttl.get("AttributeName") if ttl.get("Enabled") else None,
        "warm": _warm(props),
    }


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource.get("Properties", {})
        for logical_id, resource in sorted(template.get("Resources", {}).items())
        if resource.get("Type") == kind
    }


def table_shapes(template: dict[str, Any]) -> dict[str, Any]:
    """Each DynamoDB table of a template by logical id (`table_shape`)."""
    return {
        logical_id: table_shape(props)
        for logical_id, props in _of_type(template, "AWS::DynamoDB::Table").items()
    }


def described_shape(
    table: dict[str, Any], time_to_live: dict[str, Any], table_name: str | None = None
) -> dict[str, Any]:
    """`table_shape` of a deployed table: DescribeTable's `Table`, DescribeTimeToLive's
    `TimeToLiveDescription`, and the TableName its template sets (None: CloudFormation named
    it). The warm throughput is DynamoDB's own figure (AWS's default on a table never raised,
    and what its traffic raised it to)."""
    stream = table.get("StreamSpecification") or {}
    ttl_enabled = time_to_live.get("TimeToLiveStatus") in ("ENABLED", "ENABLING")
    return table_shape(
        {
            "TableName": table_name,
            "KeySchema": table["KeySchema"],
            "AttributeDefinitions": table["AttributeDefinitions"],
            "GlobalSecondaryIndexes": table.get("GlobalSecondaryIndexes", []),
            "LocalSecondaryIndexes": table.get("LocalSecondaryIndexes", []),
            "StreamSpecification": stream if stream.get("StreamEnabled") else None,
            "TimeToLiveSpecification": {"AttributeName": time_to_live.get("AttributeName"), "Enabled": True}
            if ttl_enabled
            else None,
            "WarmThroughput": table.get("WarmThroughput"),
        }
    )


def parameter_tiers(template: dict[str, Any]) -> dict[str, str]:
    """Each SSM parameter's tier in a template by logical id (Standard when not set)."""
    return {
        logical_id: str(props.get("Tier") or STANDARD)
        for logical_id, props in _of_type(template, "AWS::SSM::Parameter").items()
    }


def _warm_key(target: str, kind: str) -> str:
    return kind if target == "table" else f"index{kind.capitalize()}"


def _warm_problems(
    logical_id: str, before: dict[str, Any], after: dict[str, Any], settled: dict[str, Any] | None
) -> list[str]:
    """A warm throughput the deploy would set below the table's (or index's) own. With
    `settled` (the deployed template's settings), one the deploy leaves as it was is no
    update, so it is let through whatever DynamoDB's figure has grown to since."""
    problems = []
    for target, units in after.get("warm", {}).items():
        for kind, new in units.items():
            if settled is not None and settled.get(target, {}).get(kind) == new:
                continue
            old = before.get("warm", {}).get(target, {}).get(kind)
            if old is not None and new < old:
                problems.append(
                    f"table {logical_id}: the deploy lowers the warm throughput of {target} from {old} "
                    f"to {new} {kind} units a second (warmThroughput.{_warm_key(target, kind)}). "
                    f"{WARM_STEPS}"
                )
    return problems


def check(
    released: dict[str, Any], current: dict[str, Any], settled: dict[str, Any] | None = None
) -> list[str]:
    """What a deploy from `released` to `current` (both `table_shapes`, or `released` the
    deployed tables' `described_shape`s) would do that CloudFormation cannot do safely in one
    update, each with the steps to follow instead; empty when the deploy may go ahead. New
    tables are fine. `settled`: the deployed template's warm throughput by table, when
    `released` is what is deployed. A shape that does not record something (an older
    snapshot) lets it through."""
    problems = []
    for logical_id, before in released.items():
        after = current.get(logical_id)
        if after is None:
            problems.append(
                f"table {logical_id} is gone from the template (renamed or removed): the deploy "
                f"would delete it from the stack and orphan it (Retain). {REPLACE_STEPS}"
            )
            continue
        changed = [
            what
            for what, key in (
                ("key schema", "keys"),
                ("table name", "tableName"),
                ("local secondary indexes", "localIndexes"),
            )
            if before[key] != after[key]
        ]
        if changed:
            problems.append(f"table {logical_id}: {' and '.join(changed)} changed. {REPLACE_STEPS}")
        old, new = before["globalIndexes"], after["globalIndexes"]
        created = sorted(set(new) - set(old))
        deleted = sorted(set(old) - set(new))
        altered = sorted(name for name in set(old) & set(new) if old[name] != new[name])
        operations = len(created) + len(deleted) + 2 * len(altered)
        if operations > 1:
            parts = [
                f"{label} {', '.join(names)}"
                for label, names in (("creates", created), ("deletes", deleted), ("changes", altered))
                if names
            ]
            problems.append(
                f"table {logical_id}: the deploy {'; '.join(parts)}: {operations} index creations "
                f"or deletions in one update (a changed index is both). {GSI_STEPS}"
            )
        for what, key, steps in (
            ("stream view type", "stream", STREAM_STEPS),
            ("TTL attribute", "ttl", TTL_STEPS),
        ):
            was, now = before.get(key), after.get(key)
            if was and now and was != now:
                problems.append(f"table {logical_id}: the {what} changes from {was} to {now}. {steps}")
        problems += _warm_problems(
            logical_id, before, after, None if settled is None else settled.get(logical_id, {})
        )
    return problems


def check_tiers(deployed: dict[str, str], current: dict[str, str]) -> list[str]:
    """An SSM parameter the deploy would make standard while it is advanced (`deployed`: the
    parameters' tiers as SSM reports them; `current`: `parameter_tiers` of the template)."""
    return [
        f"parameter {logical_id}: the deploy makes it {STANDARD}, and it is {ADVANCED}. {TIER_STEPS}"
        for logical_id, tier in sorted(current.items())
        if tier == STANDARD and deployed.get(logical_id) == ADVANCED
    ]


class Deployed(BaseModel):
    """What is deployed of a stack, as the gate compares it: its tables' `described_shape`s and
    the warm throughput its template sets on each (`table_shape`'s `warm`), by logical id, and
    its SSM parameters' tiers as SSM reports them."""

    model_config = ConfigDict(frozen=True)

    stack_name: str
    tables: dict[str, dict[str, Any]] = {}
    warm_settings: dict[str, dict[str, Any]] = {}
    parameter_tiers: dict[str, str] = {}


def deployed_problems(deployed: Deployed, tables: dict[str, Any], tiers: dict[str, str]) -> list[str]:
    """What a deploy of a template (its `table_shapes` and `parameter_tiers`) onto `deployed`
    would fail on or lose (`check`, `check_tiers`)."""
    return [
        *check(deployed.tables, tables, deployed.warm_settings),
        *check_tiers(deployed.parameter_tiers, tiers),
    ]


def stack_resources(cloudformation: Any, stack_name: str) -> list[dict[str, Any]] | None:
    """The stack's resources, None when no stack of that name exists."""
    from botocore.exceptions import ClientError

    try:
        pages = cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name)
        return [summary for page in pages for summary in page["StackResourceSummaries"]]
    except ClientError as exc:
        if "does not exist" in str(exc):
            return None
        raise


def _deployed_template(cloudformation: Any, stack_name: str) -> dict[str, Any]:
    body = cloudformation.get_template(StackName=stack_name, TemplateStage="Original")["TemplateBody"]
    return body if isinstance(body, dict) else dict(json.loads(body))


def read_deployed(client: ClientFactory, stack_name: str) -> Deployed | None:
    """The stack's tables and parameters as deployed, read with `client` (service name ->
    client); None when no stack of that name exists. Raises botocore's errors (no access, no
    region) for the caller to report."""
    cloudformation = client("cloudformation")
    resources = stack_resources(cloudformation, stack_name)
    if resources is None:
        return None
    template = _deployed_template(cloudformation, stack_name)
    settings = _of_type(template, "AWS::DynamoDB::Table")
    physical = {
        r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId"))
        for r in resources
        if r.get("PhysicalResourceId") and "DELETE" not in r.get("ResourceStatus", "")
    }
    tables: dict[str, dict[str, Any]] = {}
    tiers: dict[str, str] = {}
    for logical_id, (kind, name) in sorted(physical.items()):
        if kind == "AWS::DynamoDB::Table":
            dynamodb = client("dynamodb")
            table = dynamodb.describe_table(TableName=name)["Table"]
            ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
            tables[logical_id] = described_shape(table, ttl, settings.get(logical_id, {}).get("TableName"))
        elif kind == "AWS::SSM::Parameter":
            found = client("ssm").describe_parameters(
                ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [name]}]
            )["Parameters"]
            if found:
                tiers[logical_id] = str(found[0].get("Tier") or STANDARD)
    return Deployed(
        stack_name=stack_name,
        tables=tables,
        warm_settings={logical_id: _warm(props) for logical_id, props in settings.items()},
        parameter_tiers=tiers,
    )


def dumps(shapes: dict[str, Any]) -> str:
    """The snapshot's text: one line per table, so a diff shows which table changed."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in shapes.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def released_shapes(path: Path = RELEASED_TABLES) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def synthesized_template(context: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The template cdk.json's context (with `context` over it) gives, and its stack's name
    (no layer bundling, no cdk-nag)."""
    from .app import build_app

    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    with tempfile.TemporaryDirectory() as outdir:
        base = {"aws:cdk:bundling-stacks": [], "alarmsWithoutSubscriber": True}
        app, stack = build_app({**base, **(context or {})}, outdir=outdir, checks=False)
        app.synth()
        template = json.loads((Path(outdir) / f"{stack.artifact_id}.template.json").read_text())
    return template, stack.stack_name


def synthesized_shapes() -> dict[str, Any]:
    """The tables of the template cdk.json's context gives."""
    return table_shapes(synthesized_template()[0])


def _session_client(profile: str | None, region: str | None) -> ClientFactory | None:
    """A client factory on the standard credential chain, None when it finds no credentials
    or no region (the gate then compares with the snapshot)."""
    import boto3

    session = boto3.Session(profile_name=profile, region_name=region)
    if session.get_credentials() is None or not session.region_name:
        return None
    return lambda service: session.client(service)  # type: ignore[call-overload]


def gate(template: dict[str, Any], stack_name: str, client: ClientFactory | None) -> tuple[str, list[str]]:
    """(what the template was compared with, the problems): the deployed stack when `client`
    can read it, else the released snapshot."""
    from botocore.exceptions import BotoCoreError, ClientError

    if client is not None:
        try:
            deployed = read_deployed(client, stack_name)
        except (BotoCoreError, ClientError) as exc:
            baseline = f"the released snapshot (could not read stack {stack_name}: {exc})"
        else:
            if deployed is None:
                return f"nothing: no stack {stack_name} is deployed (a first deploy)", []
            problems = deployed_problems(deployed, table_shapes(template), parameter_tiers(template))
            return f"the deployed stack {stack_name}", problems
    else:
        baseline = "the released snapshot (no AWS credentials or region: what is deployed was not read)"
    return baseline, check(released_shapes(), table_shapes(template))


def main(argv: list[str] | None = None, client: ClientFactory | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write", action="store_true", help=f"record the current tables as released ({RELEASED_TABLES.name})"
    )
    parser.add_argument(
        "--released", action="store_true", help="compare with the released snapshot, not what is deployed"
    )
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--region", help="AWS region (default: the credentials' own)")
    parser.add_argument("--profile", help="AWS profile (default: the standard chain)")
    args = parser.parse_args(argv)
    context: dict[str, Any] = {}
    for pair in args.context:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            parser.error(f"-c takes key=value, got {pair!r}")
        context[key] = value
    template, stack_name = synthesized_template(context)
    if args.write:
        current = table_shapes(template)
        RELEASED_TABLES.write_text(dumps(current))
        print(f"{RELEASED_TABLES}: {len(current)} tables recorded as released")
        return 0
    if client is None and not args.released:
        client = _session_client(args.profile, args.region)
    baseline, problems = gate(template, stack_name, None if args.released else client)
    print(f"compared with {baseline}")
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("tables: nothing replaced, at most one index change a table, nothing that fails halfway")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
