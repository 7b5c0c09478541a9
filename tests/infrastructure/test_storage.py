"""Tables: keys, indexes, stream and TTL exactly as jobsched.store.schema (which local mode and
the moto tests also create tables from); on-demand, PITR, encrypted, retained."""

from __future__ import annotations

import pytest
from jobsched.store.schema import ALL_TABLES, RUNS, TableSpec

from infra.names import table_logical_id

SPECS = {spec.logical_id: spec for spec in ALL_TABLES}


def table(synth, spec: TableSpec) -> dict:
    resource = synth.resources[table_logical_id(spec)]
    assert resource["Type"] == "AWS::DynamoDB::Table"
    return resource


def test_exactly_the_schema_tables(synth):
    assert set(synth.of_type("AWS::DynamoDB::Table")) == {table_logical_id(s) for s in ALL_TABLES}


@pytest.mark.parametrize("name", SPECS)
def test_keys_and_indexes_equal_the_schema(synth, name):
    spec = SPECS[name]
    props = table(synth, spec)["Properties"]
    expected = spec.create_table_request()  # what local mode and the moto tests create
    assert props["KeySchema"] == expected["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=str) == sorted(expected["AttributeDefinitions"], key=str)

    def indexes(items):
        return {i["IndexName"]: (i["KeySchema"], i["Projection"]["ProjectionType"]) for i in items}

    assert indexes(props.get("GlobalSecondaryIndexes", [])) == indexes(
        expected.get("GlobalSecondaryIndexes", [])
    )
    assert "LocalSecondaryIndexes" not in props


@pytest.mark.parametrize("name", SPECS)
def test_stream_and_ttl_equal_the_schema(synth, name):
    spec = SPECS[name]
    props = table(synth, spec)["Properties"]
    if spec.stream:
        assert props["StreamSpecification"] == {"StreamViewType": spec.stream}
    else:
        assert "StreamSpecification" not in props
    if spec.ttl_attribute:
        assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
    else:
        assert "TimeToLiveSpecification" not in props


def test_runs_stream_carries_both_images_for_the_outbox(synth):
    props = table(synth, RUNS)["Properties"]
    assert props["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"


@pytest.mark.parametrize("name", SPECS)
def test_on_demand_pitr_encrypted_retained(synth, name):
    resource = table(synth, SPECS[name])
    props = resource["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert props["DeletionProtectionEnabled"] is True
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"
    assert "TableName" not in props  # CloudFormation names them, so stacks never collide
