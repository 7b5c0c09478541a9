"""The migration gate: the tables a deploy of this template would change, against the last
released template's (infra/released-tables.json, checked in).

CloudFormation replaces a DynamoDB table whose key schema, key attribute types, name or local
secondary indexes change (with Retain the old table is orphaned, data and all, while the
functions point at a new, empty one), and it refuses an update that creates or deletes more
than one global secondary index of a table (changing an index's keys or projection is a
delete and a create). `make test` runs `check` on the synthesized template
(tests/infrastructure/test_migrations.py); a change it refuses comes with the steps to follow
instead (docs/operate/upgrade.md).

At a release: `python -m infra.migrations --write` records the template's tables as the
released ones. `python -m infra.migrations` checks the current template and exits 1 on a
refused change."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import ROOT

RELEASED_TABLES = ROOT / "infra" / "released-tables.json"

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
    "then delete the old one (deploy). Refresh the snapshot after each released step"
)


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


def table_shapes(template: dict[str, Any]) -> dict[str, Any]:
    """Each DynamoDB table of a synthesized template by logical id: its name (None when
    CloudFormation names it), key schema with types, and its global and local secondary
    indexes (keys, projection). Only what decides a replacement or an index change."""
    shapes = {}
    for logical_id, resource in sorted(template.get("Resources", {}).items()):
        if resource.get("Type") != "AWS::DynamoDB::Table":
            continue
        props = resource.get("Properties", {})
        types = _key_types(props)
        shapes[logical_id] = {
            "tableName": props.get("TableName"),
            "keys": _keys(props["KeySchema"], types),
            "globalIndexes": _indexes(props.get("GlobalSecondaryIndexes", []), types),
            "localIndexes": _indexes(props.get("LocalSecondaryIndexes", []), types),
        }
    return shapes


def check(released: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What a deploy from `released` to `current` (both `table_shapes`) would do that
    CloudFormation cannot do safely in one update, each with the steps to follow instead;
    empty when the deploy may go ahead. New tables are fine."""
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
    return problems


def dumps(shapes: dict[str, Any]) -> str:
    """The snapshot's text: one line per table, so a diff shows which table changed."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in shapes.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def released_shapes(path: Path = RELEASED_TABLES) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def synthesized_shapes() -> dict[str, Any]:
    """The tables of the template cdk.json's context gives (no layer bundling, no cdk-nag)."""
    from .app import build_app

    with tempfile.TemporaryDirectory() as outdir:
        context = {"aws:cdk:bundling-stacks": [], "alarmsWithoutSubscriber": True}
        app, stack = build_app(context, outdir=outdir, checks=False)
        app.synth()
        template = json.loads((Path(outdir) / f"{stack.artifact_id}.template.json").read_text())
    return table_shapes(template)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write", action="store_true", help=f"record the current tables as released ({RELEASED_TABLES.name})"
    )
    args = parser.parse_args(argv)
    current = synthesized_shapes()
    if args.write:
        RELEASED_TABLES.write_text(dumps(current))
        print(f"{RELEASED_TABLES}: {len(current)} tables recorded as released")
        return 0
    problems = check(released_shapes(), current)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("tables: no replacement and at most one index created or deleted per table")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
