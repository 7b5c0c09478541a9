"""Every global index of a table is one the code queries, or a retired one that no write
feeds: an index is written with each change of its keys or projected attributes, so one that
nothing reads is only a cost per run."""

from __future__ import annotations

import ast
from pathlib import Path

import jobsched
from jobsched.store import schema

PACKAGE = Path(jobsched.__file__).parent


def _package_trees() -> list[ast.Module]:
    """The package's modules but the schema itself and the CDK code."""
    return [
        ast.parse(path.read_text(), str(path))
        for path in PACKAGE.rglob("*.py")
        if "cdk" not in path.relative_to(PACKAGE).parts and path.name != "schema.py"
    ]


def _name_value(value: ast.expr) -> str | None:
    if isinstance(value, ast.Name) and isinstance(getattr(schema, value.id, None), str):
        return str(getattr(schema, value.id))
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return None


def queried_index_names() -> set[str]:
    """The index names the package's queries pass as `IndexName` (a keyword argument or a
    request dict's key), resolved through the schema's constants."""
    names: set[str] = set()
    for tree in _package_trees():
        for node in ast.walk(tree):
            values: list[ast.expr] = []
            if isinstance(node, ast.Dict):
                values = [v for k, v in zip(node.keys, node.values, strict=True) if _is_key(k, "IndexName")]
            elif isinstance(node, ast.Call):
                values = [kw.value for kw in node.keywords if kw.arg == "IndexName"]
            names.update(name for name in map(_name_value, values) if name is not None)
    return names


def string_constants() -> set[str]:
    """Every string literal of the package (an attribute an item is given is named by one)."""
    return {
        node.value
        for tree in _package_trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def _is_key(key: ast.expr | None, name: str) -> bool:
    return isinstance(key, ast.Constant) and key.value == name


def test_every_index_of_every_table_is_queried_or_retired():
    declared = {index.name for table in schema.ALL_TABLES for index in table.indexes}
    assert declared - queried_index_names() == schema.RETIRED_INDEXES


def test_no_code_names_a_retired_index_or_its_partition_key():
    retired = [i for t in schema.ALL_TABLES for i in t.indexes if i.name in schema.RETIRED_INDEXES]
    assert retired
    named = string_constants()
    for index in retired:
        assert index.name not in queried_index_names()
        assert index.partition.name not in named, f"something writes {index.partition.name}"


def test_the_scan_finds_the_queries_it_is_meant_to_find():
    # The runs listing, the repair pass and the sweep query these; a scan finding none would pass.
    assert {schema.TENANT_RUNS_INDEX, schema.OPEN_INDEX, schema.DUE_INDEX} <= queried_index_names()
    assert "claim_key" in string_constants()


def test_the_runs_listing_index_holds_keys_only_so_no_transition_rewrites_it():
    # Its keys come from the run's tenant, job, key and instant, which no transition changes:
    # an entry is written once. Projecting any attribute that changes (a state, a summary)
    # would rewrite it at every transition, one write unit each.
    index = next(i for i in schema.RUNS.indexes if i.name == schema.TENANT_RUNS_INDEX)
    assert (index.projection, index.include) == ("KEYS_ONLY", ())
    assert (index.partition.name, index.sort and index.sort.name) == ("run_lane", "run_order")
