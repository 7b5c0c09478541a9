"""Tables: keys, indexes, stream and TTL exactly as jobsched.store.schema (which local mode and
the moto tests also create tables from); on-demand, PITR, encrypted, retained."""

from __future__ import annotations

import json

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
        return {i["IndexName"]: (i["KeySchema"], i["Projection"]) for i in items}

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


def test_provisioned_billing_autoscales_every_table_and_index(tmp_path):
    from tests.infrastructure.synth import synthesize

    other = synthesize(tmp_path, {"billingMode": "provisioned"})
    assert other.error is None, other.error  # cdk-nag has nothing to say either
    capacity = other.stack.config.provisioned_capacity
    floor = {"ReadCapacityUnits": capacity["minRead"], "WriteCapacityUnits": capacity["minWrite"]}
    expected_targets = set()
    for spec in ALL_TABLES:
        props = other.resources[table_logical_id(spec)]["Properties"]
        assert props.get("BillingMode", "PROVISIONED") == "PROVISIONED"
        assert props["ProvisionedThroughput"] == floor
        for index in props.get("GlobalSecondaryIndexes", []):
            assert index["ProvisionedThroughput"] == floor
        for dimension in ("ReadCapacityUnits", "WriteCapacityUnits"):
            expected_targets.add((table_logical_id(spec), None, dimension))
            for index in spec.indexes:
                expected_targets.add((table_logical_id(spec), index.name, dimension))

    targets = other.of_type("AWS::ApplicationAutoScaling::ScalableTarget")
    found = set()
    for target in targets.values():
        props = target["Properties"]
        resource = json.dumps(props["ResourceId"])
        table_id = next(t for t in (table_logical_id(s) for s in ALL_TABLES) if t in resource)
        index = next((i.name for s in ALL_TABLES for i in s.indexes if f"/index/{i.name}" in resource), None)
        kind = "table" if index is None else "index"
        assert props["ScalableDimension"].startswith(f"dynamodb:{kind}:")
        found.add((table_id, index, props["ScalableDimension"].rsplit(":", 1)[-1]))
        unit = "Read" if props["ScalableDimension"].endswith("ReadCapacityUnits") else "Write"
        bounds = (capacity[f"min{unit}"], capacity[f"max{unit}"])
        assert (props["MinCapacity"], props["MaxCapacity"]) == bounds
    assert found == expected_targets
    policies = other.of_type("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    assert len(policies) == len(targets)
    assert {p["Properties"]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] for p in policies} == {
        capacity["targetUtilization"]
    }
