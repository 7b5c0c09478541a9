"""The event bus run and job events go to, and its archive."""

from __future__ import annotations

import pytest
from jobsched.cdk.event_bus import MAX_ARCHIVE_NAME, SOURCE_PREFIX, archive_name
from jobsched.cdk.names import EVENT_BUS_ID, OUTPUT_EVENT_ARCHIVE, OUTPUT_EVENT_BUS


def archive(synth) -> dict:
    (props,) = [r["Properties"] for r in synth.of_type("AWS::Events::Archive").values()]
    return props


def test_the_archive_keeps_every_jobsched_event_of_the_stacks_bus(synth):
    props = archive(synth)
    assert props["SourceArn"] == {"Fn::GetAtt": [EVENT_BUS_ID, "Arn"]}
    assert props["EventPattern"] == {"source": [{"prefix": SOURCE_PREFIX}]}
    assert props["RetentionDays"] == synth.stack.config.event_archive_days == 365
    # An empty KmsKeyIdentifier (what the L2 writes without a key) fails some regions' deploys.
    assert "KmsKeyIdentifier" not in props
    assert len(props["ArchiveName"]) <= MAX_ARCHIVE_NAME


def test_outputs_name_the_bus_and_the_archive(synth):
    outputs = synth.template["Outputs"]
    assert outputs[OUTPUT_EVENT_BUS]["Value"] == {"Ref": EVENT_BUS_ID}
    assert outputs[OUTPUT_EVENT_ARCHIVE]["Value"] == {"Ref": synth.logical_id(synth.stack.events.archive)}


@pytest.mark.parametrize("stack", ["Jobsched", "a" * 128, "Jobsched-tenant-platform-production-eu-west-1"])
def test_archive_names_fit_eventbridges_limit_and_differ_per_stack(stack):
    name = archive_name(stack)
    assert len(name) <= MAX_ARCHIVE_NAME and name.endswith("-events")
    assert archive_name(stack + "x") != name


def test_archive_days_zero_keeps_events_indefinitely(tmp_path):
    from tests.infrastructure.synth import synthesize

    built = synthesize(tmp_path, {"eventArchiveDays": 0}, checks=False)
    assert archive(built).get("RetentionDays", 0) == 0  # EventBridge's 0: kept indefinitely
