"""Tables: keys, indexes, stream and TTL exactly as jobsched.store.schema (which local mode and
the moto tests also create tables from); on-demand, PITR, encrypted, retained."""

from __future__ import annotations

import json

import pytest
from jobsched.cdk.names import table_logical_id
from jobsched.store.schema import ALL_TABLES, RUNS, TableSpec

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
    expected_targets: set[tuple[str, str | None, str]] = set()
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


def test_the_due_index_carries_keys_only(synth):
    """Every advance moves a job's next_run_at, so its index row is rewritten each occurrence:
    with ALL that is the whole item at one write unit a KB; the sweeper reads the jobs by key."""
    from jobsched.store.schema import DEFINITIONS, DUE_INDEX

    props = table(synth, DEFINITIONS)["Properties"]
    (due,) = [i for i in props["GlobalSecondaryIndexes"] if i["IndexName"] == DUE_INDEX]
    assert due["Projection"] == {"ProjectionType": "KEYS_ONLY"}


WARM = {"read": 30000, "write": 40000, "indexRead": 12000, "indexWrite": 20000}
ON_DEMAND = {"maxRead": 50000, "maxWrite": 45000}


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    from tests.infrastructure.synth import synthesize

    return synthesize(
        tmp_path_factory.mktemp("warm"),
        {"warmThroughput": json.dumps(WARM), "onDemandThroughput": json.dumps(ON_DEMAND)},
        checks=False,
    )


def test_warm_and_on_demand_throughput_reach_every_table_and_index(warmed, synth):
    for spec in ALL_TABLES:
        props = warmed.resources[table_logical_id(spec)]["Properties"]
        assert props["WarmThroughput"] == {"ReadUnitsPerSecond": 30000, "WriteUnitsPerSecond": 40000}
        assert props["OnDemandThroughput"] == {"MaxReadRequestUnits": 50000, "MaxWriteRequestUnits": 45000}
        indexes = props.get("GlobalSecondaryIndexes", [])
        assert len(indexes) == len(spec.indexes)
        for index in indexes:
            assert index["WarmThroughput"] == {"ReadUnitsPerSecond": 12000, "WriteUnitsPerSecond": 20000}
            assert index["OnDemandThroughput"] == props["OnDemandThroughput"]
        # The defaults (0) leave AWS's own.
        default = synth.resources[table_logical_id(spec)]["Properties"]
        assert "WarmThroughput" not in default and "OnDemandThroughput" not in default


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"warmThroughput": '{"write": 3000}'}, "warmThroughput.write must be 0"),
        ({"warmThroughput": '{"indexRead": 100}'}, "warmThroughput.indexRead must be 0"),
        ({"onDemandThroughput": '{"maxWrite": -1}'}, "onDemandThroughput.maxWrite must be >= 0"),
        (
            {"onDemandThroughput": '{"maxRead": 100}', "billingMode": "provisioned"},
            "onDemandThroughput.maxRead caps on-demand tables",
        ),
    ],
)
def test_throughput_settings_outside_what_dynamodb_takes_are_refused(context, message):
    import aws_cdk as cdk
    from jobsched.cdk.config import Config, ConfigError

    from infra.app import file_context

    app = cdk.App(context={**file_context(), **context})
    with pytest.raises(ConfigError, match=message):
        Config.from_context(app.node)
