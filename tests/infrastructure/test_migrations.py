"""The migration gate: the synthesized template's tables against the last released ones
(infra/released-tables.json). A change CloudFormation would do by replacing a table, or by
creating or deleting more than one index of a table in one update, fails here with the steps
to follow instead."""

from __future__ import annotations

import copy

import pytest

from infra.migrations import GSI_STEPS, REPLACE_STEPS, check, dumps, released_shapes, table_shapes


@pytest.fixture(scope="module")
def current(synth) -> dict:
    return table_shapes(synth.template)


def planted(synth, change) -> dict:
    """The tables of the session template after `change(resources)` edits a copy of it."""
    template = copy.deepcopy(synth.template)
    change(template["Resources"])
    return table_shapes(template)


def test_this_template_migrates_from_the_released_tables(current):
    """The gate itself: refresh the snapshot at a release (python -m infra.migrations --write)."""
    problems = check(released_shapes(), current)
    assert not problems, "\n\n".join(problems)


def test_the_snapshot_is_compact_and_current_with_its_format():
    from infra.migrations import RELEASED_TABLES

    text = RELEASED_TABLES.read_text()
    assert dumps(released_shapes()) == text  # what --write writes, one line per table
    assert "Properties" not in text and len(text) < 4000  # not the template


def test_a_key_change_is_refused_with_the_replacement_steps(synth, current):
    def change(resources):
        props = resources["DefinitionsTable"]["Properties"]
        props["KeySchema"] = [{"AttributeName": "tenant", "KeyType": "HASH"}]

    (problem,) = check(current, planted(synth, change))
    assert problem.startswith("table DefinitionsTable: key schema changed") and REPLACE_STEPS in problem


def test_a_key_type_change_or_a_table_name_is_a_replacement_too(synth, current):
    def change(resources):
        props = resources["RunsTable"]["Properties"]
        for attribute in props["AttributeDefinitions"]:
            if attribute["AttributeName"] == "sk":
                attribute["AttributeType"] = "N"
        resources["DefinitionsTable"]["Properties"]["TableName"] = "jobsched-definitions"

    problems = check(current, planted(synth, change))
    assert [p.split(".")[0] for p in problems] == [
        "table DefinitionsTable: table name changed",
        "table RunsTable: key schema changed",
    ]
    assert all(REPLACE_STEPS in p for p in problems)


def test_two_new_indexes_on_one_table_are_refused_with_the_steps(synth, current):
    def change(resources):
        props = resources["RunsTable"]["Properties"]
        for name in ("by_a", "by_b"):
            props["GlobalSecondaryIndexes"].append(
                {
                    "IndexName": name,
                    "KeySchema": [{"AttributeName": "job_id", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            )

    (problem,) = check(current, planted(synth, change))
    assert "table RunsTable: the deploy creates by_a, by_b: 2 index creations" in problem
    assert GSI_STEPS in problem


def test_changing_an_index_in_place_is_a_delete_and_a_create(synth, current):
    def change(resources):
        for index in resources["DefinitionsTable"]["Properties"]["GlobalSecondaryIndexes"]:
            if index["IndexName"] == "due":
                index["Projection"] = {"ProjectionType": "ALL"}

    (problem,) = check(current, planted(synth, change))
    assert "changes due: 2 index creations or deletions" in problem


def test_one_index_added_or_a_new_table_passes(synth, current):
    def change(resources):
        props = resources["RunsTable"]["Properties"]
        props["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"][1:]  # one deleted
        resources["ExtraTable"] = copy.deepcopy(resources["DefinitionsTable"])

    assert check(current, planted(synth, change)) == []


def test_a_table_gone_from_the_template_is_refused(synth, current):
    (problem,) = check(current, planted(synth, lambda resources: resources.pop("RunsTable")))
    assert problem.startswith("table RunsTable is gone from the template")
