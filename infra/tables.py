"""The stack's tables after `cdk destroy`: `python -m infra.tables adopt` (`make adopt-tables`)
brings the retained ones back into the stack, so a redeploy keeps the jobs and runs they hold.

`cdk destroy` leaves the two tables behind (Retain, deletion protection), and a deploy that
follows creates new, empty ones beside them. CloudFormation's resource import is the one way
a stack owns an existing table again (`Table.fromTableName` only references it): `cdk import`
with a resource mapping, run before any deploy of the stack, creates the stack with the
retained tables alone, and the next `cdk deploy` adds everything else around them.

`adopt` finds each table of the template: named (`--table DefinitionsTable=<name>`), or the
one table left of this stack (CloudFormation names a table `<stack>-<logical id>-<suffix>`, so
a `Jobsched-staging` stack's never matches `Jobsched`'s). It refuses before importing: a
stack of that name that exists, a table missing, not ACTIVE, still in a live stack, found
twice (say which), or whose keys, indexes, stream or TTL differ from the template's (adopt
with the release that deployed it, then upgrade). It writes the mapping file `cdk import`
reads ({logical id: {"TableName": name}}) and runs `cdk import` with it, unless `--dry-run`.
`list` prints a deployed stack's tables by logical id, as the teardown names them."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ROOT
from .migrations import ClientFactory, described_shape, stack_resources, synthesized_template, table_shapes

TABLE = "AWS::DynamoDB::Table"
# What adopting compares: the warm throughput is DynamoDB's own figure, and the name is the
# table's, not the template's.
SHAPE_KEYS = ("keys", "globalIndexes", "localIndexes", "stream", "ttl")
STACK_ID_TAG = "aws:cloudformation:stack-id"
CDK = ROOT / "node_modules" / ".bin" / "cdk"
Runner = Callable[[Sequence[str]], int]


class Refused(Exception):
    """Adopting would fail or take the wrong table; the message says why and what to do."""


@dataclass(frozen=True)
class Adoption:
    """The tables to import, by the template's logical ids, and `cdk import`'s mapping of them."""

    stack_name: str
    tables: dict[str, str]  # logical id -> table name

    def mapping(self) -> dict[str, dict[str, str]]:
        return {logical_id: {"TableName": name} for logical_id, name in sorted(self.tables.items())}


def stack_tables(client: ClientFactory, stack_name: str) -> dict[str, str] | None:
    """A deployed stack's tables (logical id -> table name), None when no such stack exists."""
    resources = stack_resources(client("cloudformation"), stack_name)
    if resources is None:
        return None
    return {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in resources
        if r["ResourceType"] == TABLE and r.get("PhysicalResourceId")
    }


def _generated(stack_name: str, logical_id: str) -> re.Pattern[str]:
    """The names CloudFormation gives a table of this stack and logical id."""
    return re.compile(rf"^{re.escape(stack_name)}-{re.escape(logical_id)}-[A-Za-z0-9]+$")


def _table_names(dynamodb: Any) -> list[str]:
    return [name for page in dynamodb.get_paginator("list_tables").paginate() for name in page["TableNames"]]


def _live_owner(client: ClientFactory, table: dict[str, Any]) -> str | None:
    """The live stack a table still belongs to, by its aws:cloudformation:stack-id tag, if any."""
    from botocore.exceptions import ClientError

    tags = client("dynamodb").list_tags_of_resource(ResourceArn=table["TableArn"]).get("Tags", [])
    stack_id = next((t["Value"] for t in tags if t["Key"] == STACK_ID_TAG), None)
    if stack_id is None:
        return None
    try:
        (stack,) = client("cloudformation").describe_stacks(StackName=stack_id)["Stacks"]
    except ClientError:
        return None  # deleted long enough ago to be forgotten
    return None if stack["StackStatus"] == "DELETE_COMPLETE" else str(stack["StackName"])


def plan_adoption(
    client: ClientFactory, stack_name: str, template: dict[str, Any], named: dict[str, str] | None = None
) -> Adoption:
    """Which retained table each of the template's tables adopts (`named`: logical id -> table
    name, else the one left of this stack). Raises Refused when importing them would fail or
    take the wrong table."""
    expected = table_shapes(template)
    named = dict(named or {})
    unknown = sorted(set(named) - set(expected))
    if unknown:
        raise Refused(f"{', '.join(unknown)}: no such table in the template (it has {', '.join(expected)})")
    owned = stack_tables(client, stack_name)
    if owned is not None:
        raise Refused(
            f"stack {stack_name} exists (its tables: {', '.join(sorted(owned.values())) or 'none'}): "
            "adopting creates the stack around the retained tables, so it comes before any deploy "
            f"after `cdk destroy`. If {stack_name} was deployed again with new tables, copy the "
            "items across instead (DynamoDB export to S3 and import), or destroy it again (its new "
            "tables are retained too: delete them once empty) and adopt before the next deploy"
        )
    dynamodb = client("dynamodb")
    names = None
    tables: dict[str, str] = {}
    for logical_id, shape in expected.items():
        if logical_id not in named:
            names = _table_names(dynamodb) if names is None else names
            pattern = _generated(stack_name, logical_id)
            found = [name for name in names if pattern.match(name)]
            if len(found) != 1:
                listed = "; ".join(_described(dynamodb, name) for name in found) or "none"
                raise Refused(
                    f"{logical_id}: {len(found)} retained tables of stack {stack_name} ({listed}): name "
                    f"the one to adopt with --table {logical_id}=<name>"
                )
            named[logical_id] = found[0]
        tables[logical_id] = _adoptable(client, logical_id, named[logical_id], shape)
    return Adoption(stack_name, tables)


def _described(dynamodb: Any, name: str) -> str:
    table = dynamodb.describe_table(TableName=name)["Table"]
    return (
        f"{name}, created {table['CreationDateTime']:%Y-%m-%d %H:%M}, about {table.get('ItemCount', 0)} items"
    )


def _adoptable(client: ClientFactory, logical_id: str, name: str, shape: dict[str, Any]) -> str:
    """`name`, once it is a table the template's `logical_id` may import as it stands."""
    from botocore.exceptions import ClientError

    dynamodb = client("dynamodb")
    try:
        table = dynamodb.describe_table(TableName=name)["Table"]
    except ClientError as exc:
        raise Refused(f"{logical_id}: no table {name} ({exc.response['Error']['Code']})") from None
    if table["TableStatus"] != "ACTIVE":
        raise Refused(f"{logical_id}: table {name} is {table['TableStatus']}, not ACTIVE")
    owner = _live_owner(client, table)
    if owner is not None:
        raise Refused(f"{logical_id}: table {name} belongs to stack {owner}; adopt only a retained table")
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    found = described_shape(table, ttl)
    differences = [key for key in SHAPE_KEYS if found[key] != shape[key]]
    if differences:
        detail = "; ".join(f"{key} {found[key]} here, {shape[key]} in the template" for key in differences)
        raise Refused(
            f"{logical_id}: table {name} differs from the template ({detail}). CloudFormation would "
            "import it as the template describes it, and never make it so: adopt it with the "
            "release that deployed it (its template matches), then upgrade as usual"
        )
    return name


def write_mapping(adoption: Adoption, path: Path) -> Path:
    """The resource-mapping file `cdk import --resource-mapping` reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(adoption.mapping(), indent=2) + "\n")
    return path


def import_command(adoption: Adoption, mapping: Path, context: Sequence[str]) -> list[str]:
    """`cdk import` of the mapped tables alone, with the deploy's context."""
    cdk = [str(CDK)] if CDK.exists() else ["npx", "cdk"]
    options = [arg for pair in context for arg in ("-c", pair)]
    return [*cdk, "import", adoption.stack_name, "--resource-mapping", str(mapping), *options]


def _run(command: Sequence[str]) -> int:
    # cdk.json runs `python -m infra.app`: this interpreter comes first on PATH.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(list(command), cwd=ROOT, env=env, check=False).returncode


def _list(client: ClientFactory, stack_name: str) -> int:
    tables = stack_tables(client, stack_name)
    if tables is None:
        print(f"no stack {stack_name}", file=sys.stderr)
        return 1
    for logical_id, name in sorted(tables.items()):
        print(f"{logical_id}\t{name}")
    return 0


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, separator, rest = value.partition("=")
        if not separator or not key or not rest:
            raise SystemExit(f"{flag} takes KEY=VALUE, got {value!r}")
        pairs[key] = rest
    return pairs


def main(argv: list[str] | None = None, client: ClientFactory | None = None, run: Runner = _run) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.tables", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    adopt = commands.add_parser("adopt", help="import the retained tables into the stack (cdk import)")
    listing = commands.add_parser("list", help="a deployed stack's tables by logical id")
    for command in (adopt, listing):
        command.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
        command.add_argument("--region", help="AWS region (default: the credentials' own)")
        command.add_argument("--profile", help="AWS profile (default: the standard chain)")
    adopt.add_argument("--table", action="append", default=[], metavar="LOGICAL_ID=NAME")
    adopt.add_argument("--mapping", type=Path, help="where to write the resource mapping (default: cdk.out/)")
    adopt.add_argument("--dry-run", action="store_true", help="check and write the mapping, import nothing")
    args = parser.parse_args(argv)
    context = _pairs(args.context, "-c")
    template, stack_name = synthesized_template(context)
    if client is None:
        import boto3

        session = boto3.Session(profile_name=args.profile, region_name=args.region)
        client = lambda service: session.client(service)  # type: ignore[call-overload]  # noqa: E731
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        if args.command == "list":
            return _list(client, stack_name)
        adoption = plan_adoption(client, stack_name, template, _pairs(args.table, "--table"))
    except Refused as exc:
        print(f"adopt: refused: {exc}", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as exc:
        print(f"{args.command}: could not read the account: {exc}", file=sys.stderr)
        return 2
    mapping = write_mapping(
        adoption, args.mapping or ROOT / "cdk.out" / f"{stack_name}.resource-mapping.json"
    )
    for logical_id, name in sorted(adoption.tables.items()):
        print(f"{logical_id} <- {name}")
    cdk_import = import_command(adoption, mapping, args.context)
    if args.dry_run:
        print(f"mapping: {mapping}\nnot imported (--dry-run): {' '.join(cdk_import)}")
        return 0
    code = run(cdk_import)
    if code == 0:
        print(f"imported: now deploy {stack_name} with the same -c settings (npx cdk deploy {stack_name})")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
