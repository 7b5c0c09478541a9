"""The migration gate: the synthesized template's tables against the last released ones
(infra/released-tables.json), or against what is deployed (read from moto here). A change
CloudFormation would do by replacing a table, or by creating or deleting more than one index
of a table in one update, and one DynamoDB or SSM refuses halfway (a stream's view type, a
TTL attribute, a lower warm throughput, an advanced parameter made standard), fails here
with the steps to follow instead."""

from __future__ import annotations

import copy

import pytest
from jobsched.cdk.config import Config, ConfigError

from infra.migrations import (
    GSI_STEPS,
    REPLACE_STEPS,
    STREAM_STEPS,
    TIER_STEPS,
    TTL_STEPS,
    WARM_STEPS,
    check,
    check_tiers,
    dumps,
    gate,
    parameter_tiers,
    read_deployed,
    released_shapes,
    table_shapes,
)
from tests.infrastructure.deployed import STACK, deploy, moto_account
from tests.infrastructure.synth import synthesize


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


# --- changes DynamoDB and SSM refuse halfway: refused before the deploy ---


def other_view_type(resources):
    resources["RunsTable"]["Properties"]["StreamSpecification"] = {"StreamViewType": "NEW_IMAGE"}


def other_ttl_attribute(resources):
    resources["DefinitionsTable"]["Properties"]["TimeToLiveSpecification"]["AttributeName"] = "expires_on"


@pytest.mark.parametrize(
    ("change", "refused", "steps"),
    [
        (
            other_view_type,
            "table RunsTable: the stream view type changes from NEW_AND_OLD_IMAGES to NEW_IMAGE",
            STREAM_STEPS,
        ),
        (
            other_ttl_attribute,
            "table DefinitionsTable: the TTL attribute changes from expires_at to expires_on",
            TTL_STEPS,
        ),
    ],
    ids=["stream-view-type", "ttl-attribute"],
)
def test_a_change_dynamodb_refuses_in_place_is_refused_with_the_steps(synth, current, change, refused, steps):
    (problem,) = check(current, planted(synth, change))
    assert problem.startswith(refused) and steps in problem

    def removed(resources):
        definitions = resources["DefinitionsTable"]["Properties"]
        definitions.pop("StreamSpecification")
        definitions.pop("TimeToLiveSpecification")

    # Adding or removing a stream or a TTL applies in place.
    assert check(current, planted(synth, removed)) == check(planted(synth, removed), current) == []


def test_lowering_a_warm_throughput_is_refused(synth):
    raised = planted(synth, lambda resources: set_warm(resources, 40_000, 30_000))
    (problem,) = check(raised, planted(synth, lambda resources: set_warm(resources, 20_000, 30_000)))
    assert problem.startswith(
        "table RunsTable: the deploy lowers the warm throughput of table from 40000 to 20000 write units"
    )
    assert "(warmThroughput.write)" in problem and WARM_STEPS in problem
    (problem,) = check(raised, planted(synth, lambda resources: set_warm(resources, 40_000, 12_000)))
    assert "of index open from 30000 to 12000 write units a second (warmThroughput.indexWrite)" in problem
    assert check(raised, planted(synth, lambda resources: set_warm(resources, 50_000, 30_000))) == []


def set_warm(resources: dict, table_writes: int, index_writes: int) -> None:
    """Warm write throughput on the runs table and its `open` index."""
    props = resources["RunsTable"]["Properties"]
    props["WarmThroughput"] = {"WriteUnitsPerSecond": table_writes}
    for index in props["GlobalSecondaryIndexes"]:
        if index["IndexName"] == "open":
            index["WarmThroughput"] = {"WriteUnitsPerSecond": index_writes}


def test_an_advanced_parameter_made_standard_is_refused():
    (problem,) = check_tiers({"Grants": "Advanced"}, {"Grants": "Standard"})
    assert problem.startswith("parameter Grants: the deploy makes it Standard, and it is Advanced")
    assert "-c grantsParameterTier=advanced" in problem and TIER_STEPS in problem
    assert check_tiers({"Grants": "Standard"}, {"Grants": "Advanced"}) == []
    assert check_tiers({"Grants": "Advanced"}, {"Grants": "Advanced"}) == []


def test_grants_parameter_tier_advanced_keeps_the_parameter_advanced(tmp_path, synth):
    (tier,) = parameter_tiers(synth.template).values()
    assert tier == "Standard"  # small grants: the free tier
    kept = synthesize(tmp_path, {"grantsParameterTier": "advanced"}, checks=False)
    assert list(parameter_tiers(kept.template).values()) == ["Advanced"]
    with pytest.raises(ConfigError, match="grantsParameterTier must be one of auto, advanced"):
        Config(grants_parameter_tier="standard")


# --- what is deployed, read from the account (moto), instead of the snapshot ---


@pytest.fixture
def account(monkeypatch):
    with moto_account(monkeypatch) as client:
        yield client


def edited(synth, change) -> dict:
    template = copy.deepcopy(synth.template)
    change(template["Resources"])
    return template


@pytest.mark.integration
def test_what_is_deployed_reads_as_the_template_that_deployed_it(synth, account):
    deploy(account, synth.template)
    deployed = read_deployed(account, STACK)
    assert deployed is not None
    assert set(deployed.tables) == set(table_shapes(synth.template)) == {"DefinitionsTable", "RunsTable"}
    for logical_id, shape in table_shapes(synth.template).items():
        described = {k: v for k, v in deployed.tables[logical_id].items() if k != "warm"}
        assert described == {k: v for k, v in shape.items() if k != "warm"}, logical_id
        # DynamoDB's own warm throughput: AWS's default on a table never raised.
        assert deployed.tables[logical_id]["warm"]["table"] == {"read": 12_000, "write": 4_000}
    assert deployed.parameter_tiers == parameter_tiers(synth.template)
    assert gate(synth.template, STACK, account) == (f"the deployed stack {STACK}", [])


@pytest.mark.integration
def test_a_stack_two_releases_behind_is_refused_what_the_snapshot_lets_through(synth, account):
    """The snapshot holds the last release; a stack that skipped it gets both index changes."""

    def two_releases_ago(resources):
        props = resources["RunsTable"]["Properties"]
        props["GlobalSecondaryIndexes"] = [
            index
            for index in props["GlobalSecondaryIndexes"]
            if index["IndexName"] not in ("open", "claimable")
        ]

    def last_release(resources):
        two_releases_ago(resources)
        props = resources["RunsTable"]["Properties"]
        (claimable,) = [
            index
            for index in synth.template["Resources"]["RunsTable"]["Properties"]["GlobalSecondaryIndexes"]
            if index["IndexName"] == "claimable"
        ]
        props["GlobalSecondaryIndexes"].append(copy.deepcopy(claimable))

    assert check(table_shapes(edited(synth, last_release)), table_shapes(synth.template)) == []
    deploy(account, edited(synth, two_releases_ago))
    baseline, (problem,) = gate(synth.template, STACK, account)
    assert baseline == f"the deployed stack {STACK}"
    assert "table RunsTable: the deploy creates claimable, open: 2 index creations" in problem
    assert GSI_STEPS in problem


@pytest.mark.integration
def test_a_deployed_stream_or_ttl_the_template_changes_is_refused(synth, account):
    def changed(resources):
        resources["RunsTable"]["Properties"]["StreamSpecification"] = {"StreamViewType": "KEYS_ONLY"}
        resources["DefinitionsTable"]["Properties"]["TimeToLiveSpecification"]["AttributeName"] = "gone_at"

    deploy(account, synth.template)
    _, problems = gate(edited(synth, changed), STACK, account)
    assert [p.split(".")[0] for p in problems] == [
        "table DefinitionsTable: the TTL attribute changes from expires_at to gone_at",
        "table RunsTable: the stream view type changes from NEW_AND_OLD_IMAGES to KEYS_ONLY",
    ]


@pytest.mark.integration
def test_warm_throughput_below_the_tables_own_is_refused_unless_the_deploy_leaves_it(synth, account):
    """DynamoDB's figure grows with traffic: a setting the deploy leaves as it was is no update
    and passes; one it changes must not go below what the table has now."""
    names = deploy(account, edited(synth, lambda resources: set_warm(resources, 20_000, 12_000)))
    same = edited(synth, lambda resources: set_warm(resources, 20_000, 12_000))
    assert gate(same, STACK, account)[1] == []
    account("dynamodb").update_table(
        TableName=names["RunsTable"],
        WarmThroughput={"ReadUnitsPerSecond": 12_000, "WriteUnitsPerSecond": 30_000},
    )
    assert gate(same, STACK, account)[1] == []  # grown since, but left as it was: no update
    (problem,) = gate(edited(synth, lambda resources: set_warm(resources, 25_000, 12_000)), STACK, account)[1]
    assert "lowers the warm throughput of table from 30000 to 25000 write units" in problem
    assert gate(edited(synth, lambda resources: set_warm(resources, 30_000, 12_000)), STACK, account)[1] == []
    assert gate(synth.template, STACK, account)[1] == []  # left unset: nothing asked of DynamoDB


@pytest.mark.integration
def test_a_deployed_advanced_parameter_is_refused_standard(synth, account):
    def advanced(resources):
        (parameter,) = [r for r in resources.values() if r["Type"] == "AWS::SSM::Parameter"]
        parameter["Properties"]["Tier"] = "Advanced"

    deploy(account, edited(synth, advanced))
    (logical_id,) = parameter_tiers(synth.template)
    _, (problem,) = gate(synth.template, STACK, account)
    assert problem.startswith(f"parameter {logical_id}: the deploy makes it Standard, and it is Advanced")
    assert gate(edited(synth, advanced), STACK, account)[1] == []


@pytest.mark.integration
def test_without_a_deployed_stack_or_without_credentials(synth, account):
    assert gate(synth.template, STACK, account) == (
        f"nothing: no stack {STACK} is deployed (a first deploy)",
        [],
    )
    baseline, problems = gate(synth.template, STACK, None)
    assert baseline.startswith("the released snapshot (no AWS credentials") and problems == []
