"""Event source mappings: the Runs stream → outbox with the handler's own filter patterns, both
tables' streams → the events consumer at the configured level, and one mapping per priority
queue → worker, each with its own concurrency ceiling."""

from __future__ import annotations

import json

import pytest
from jobsched.cdk.names import (
    EVENTS_FAILURE_QUEUE_ID,
    NOTIFICATIONS_QUEUE_ID,
    NOTIFIER_BATCH_SIZE,
    OUTBOX_FAILURE_QUEUE_ID,
    QUEUE_KEYS,
    queue_logical_id,
    table_logical_id,
)
from jobsched.domain.events import RunEventsLevel
from jobsched.handlers.events import NO_RECORD, filter_patterns
from jobsched.handlers.events import matches_filter as events_matches
from jobsched.handlers.outbox import FILTER_PATTERNS, matches_filter
from jobsched.store.schema import DEFINITIONS, RUNS


def mappings(synth) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in synth.of_type("AWS::Lambda::EventSourceMapping").items()}


def handler_of(synth, props: dict) -> str:
    return synth.props(props["FunctionName"]["Ref"])["Handler"]


def stream_mappings(synth, spec, handler: str) -> list[dict]:
    return [
        p
        for p in mappings(synth).values()
        if p["EventSourceArn"] == {"Fn::GetAtt": [table_logical_id(spec), "StreamArn"]}
        and handler_of(synth, p) == handler
    ]


def outbox_mapping(synth) -> dict:
    (props,) = stream_mappings(synth, RUNS, "jobsched.handlers.outbox.handler")
    return props


@pytest.mark.parametrize("spec", [RUNS, DEFINITIONS], ids=lambda s: s.logical_id)
def test_both_streams_feed_the_events_consumer_with_its_filter_at_the_level(synth, spec):
    (props,) = stream_mappings(synth, spec, "jobsched.handlers.events.handler")
    deployed = [json.loads(f["Pattern"]) for f in props["FilterCriteria"]["Filters"]]
    assert deployed == filter_patterns(RunEventsLevel(synth.stack.config.run_events), spec)
    assert props["StartingPosition"] == "TRIM_HORIZON" and props["BisectBatchOnFunctionError"] is True
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # Retried until the record is six hours old, then named in its own failure queue.
    assert props["MaximumRecordAgeInSeconds"] == 6 * 3600 and props["MaximumRetryAttempts"] == 10_000
    assert props["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [EVENTS_FAILURE_QUEUE_ID, "Arn"]}}
    }


def test_the_failures_level_passes_only_dead_and_skipped_runs_and_every_job_change(synth):
    assert synth.stack.config.run_events == "failures"
    level = RunEventsLevel.FAILURES

    def run(state: str) -> dict:
        # A run item's keys: its job's id and its sort key (the job id matches the job filter).
        keys = {"job_id": {"S": "j_abc"}, "sk": {"S": "R#x"}}
        return {"eventName": "MODIFY", "dynamodb": {"Keys": keys, "NewImage": {"state": {"S": state}}}}

    assert events_matches(run("DEAD"), level, RUNS) and events_matches(run("SKIPPED"), level, RUNS)
    assert not events_matches(run("QUEUED"), level, RUNS)
    assert not events_matches(run("SUCCEEDED"), level, RUNS)
    job = {"eventName": "MODIFY", "dynamodb": {"Keys": {"job_id": {"S": "j_abc"}}}}
    assert events_matches(job, level, DEFINITIONS)
    for other in ("guard#1", "rate#tenant#1", "stats#j_abc", "signing#j_abc"):
        assert not events_matches(
            {"eventName": "INSERT", "dynamodb": {"Keys": {"job_id": {"S": other}}}}, level, DEFINITIONS
        )
    assert events_matches(run("QUEUED"), RunEventsLevel.ALL, RUNS)
    assert not events_matches(job, RunEventsLevel.NONE, DEFINITIONS)


def events_mappings(synth) -> dict[str, dict]:
    """The events consumer's mappings by logical id."""
    return {
        logical_id: props
        for logical_id, props in mappings(synth).items()
        if handler_of(synth, props) == "jobsched.handlers.events.handler"
    }


def test_switching_run_events_off_and_on_only_changes_the_mappings_filters(synth, tmp_path):
    """At `none` both mappings stay (a Definitions mapping made anew when the level comes back
    would start at TRIM_HORIZON and publish up to 24 hours of old job changes): the same
    logical ids, every property but the filter the same. A filter changes in place, and the
    mapping goes on from where it is."""
    from tests.infrastructure.synth import synthesize

    built = synthesize(tmp_path, {"runEvents": "none"}, checks=False)
    off, on = events_mappings(built), events_mappings(synth)
    assert set(off) == set(on) and len(on) == 2
    for logical_id, props in off.items():
        assert {k: v for k, v in props.items() if k != "FilterCriteria"} == {
            k: v for k, v in on[logical_id].items() if k != "FilterCriteria"
        }, logical_id
    (runs,) = stream_mappings(built, RUNS, "jobsched.handlers.events.handler")
    deployed = [json.loads(f["Pattern"]) for f in runs["FilterCriteria"]["Filters"]]
    assert deployed == filter_patterns(RunEventsLevel.NONE, RUNS)
    # Only the runs of jobs that asked for notifications pass.
    assert all(p["dynamodb"]["NewImage"]["notify_on"] == {"S": [{"exists": True}]} for p in deployed)
    # And no job change at all.
    (jobs,) = stream_mappings(built, DEFINITIONS, "jobsched.handlers.events.handler")
    assert [json.loads(f["Pattern"]) for f in jobs["FilterCriteria"]["Filters"]] == [NO_RECORD]
    for name in ("INSERT", "MODIFY", "REMOVE"):
        record = {"eventName": name, "dynamodb": {"Keys": {"job_id": {"S": "j_abc"}}}}
        assert not events_matches(record, RunEventsLevel.NONE, DEFINITIONS)


def test_the_notifications_queue_feeds_the_notifier_reporting_each_failure(synth):
    (props,) = [
        p for p in mappings(synth).values() if handler_of(synth, p) == "jobsched.handlers.notifier.handler"
    ]
    assert props["EventSourceArn"] == {"Fn::GetAtt": [NOTIFICATIONS_QUEUE_ID, "Arn"]}
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BatchSize"] == NOTIFIER_BATCH_SIZE and props["ScalingConfig"]["MaximumConcurrency"] >= 2


def test_stream_feeds_the_outbox_with_the_handlers_filter_patterns(synth):
    props = outbox_mapping(synth)
    assert handler_of(synth, props) == "jobsched.handlers.outbox.handler"
    deployed = [json.loads(f["Pattern"]) for f in props["FilterCriteria"]["Filters"]]
    assert deployed == FILTER_PATTERNS


def test_the_deployed_filter_lets_through_what_the_handler_expects(synth):
    (pattern,) = [json.loads(f["Pattern"]) for f in outbox_mapping(synth)["FilterCriteria"]["Filters"]]
    pending = {
        "eventName": "INSERT",
        "dynamodb": {"NewImage": {"sk": {"S": "R#x"}, "state": {"S": "PENDING"}}},
    }
    queued = {"eventName": "MODIFY", "dynamodb": {"NewImage": {"sk": {"S": "R#x"}, "state": {"S": "QUEUED"}}}}
    assert pattern["dynamodb"]["NewImage"]["state"]["S"] == ["PENDING", "RETRY_WAIT"]
    assert matches_filter(pending) and not matches_filter(queued)


def test_outbox_mapping_batches_bisects_retries_and_keeps_what_it_gives_up_on(synth):
    props = outbox_mapping(synth)
    assert props["StartingPosition"] == "TRIM_HORIZON"
    assert props["BatchSize"] == 100
    assert props["ParallelizationFactor"] == 4
    assert props["BisectBatchOnFunctionError"] is True
    assert props["MaximumRetryAttempts"] == 5
    assert props["MaximumRecordAgeInSeconds"] == 3600
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [OUTBOX_FAILURE_QUEUE_ID, "Arn"]}}
    }


@pytest.mark.parametrize("key", QUEUE_KEYS)
def test_each_queue_feeds_the_worker_with_its_own_ceiling(synth, config, key):
    (props,) = [
        p
        for p in mappings(synth).values()
        if p["EventSourceArn"] == {"Fn::GetAtt": [queue_logical_id(key), "Arn"]}
    ]
    assert handler_of(synth, props) == "jobsched.handlers.worker_entry.handler"
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BatchSize"] == config.worker_batch_size[key]
    assert props["MaximumBatchingWindowInSeconds"] == config.worker_batch_window_seconds[key]
    assert props["ScalingConfig"] == {"MaximumConcurrency": config.worker_concurrency[key]}


def test_low_priority_is_never_starved(synth, config):
    # Every queue has its own mapping and ceiling (so high cannot use low's pollers), and
    # low's ceiling is above Lambda's minimum of 2.
    worker_mappings = [
        p
        for p in mappings(synth).values()
        if "ScalingConfig" in p and handler_of(synth, p) == "jobsched.handlers.worker_entry.handler"
    ]
    assert len(worker_mappings) == len(QUEUE_KEYS)
    assert all(p["ScalingConfig"]["MaximumConcurrency"] >= 2 for p in worker_mappings)


def test_the_default_stack_provisions_no_pollers(synth):
    # Provisioned pollers are billed while they exist: a burst setting, never a default.
    assert all("ProvisionedPollerConfig" not in p for p in mappings(synth).values())


@pytest.fixture(scope="module")
def burst(tmp_path_factory):
    """The stack as set for a million-run top of the hour (docs/design/performance.md)."""
    from tests.infrastructure.synth import synthesize

    return synthesize(
        tmp_path_factory.mktemp("burst"),
        {
            "workerMinPollers": {"default": 30},
            "workerMaxPollers": {"default": 400},
            "workerReservedConcurrency": 3000,
            "accountConcurrency": 5000,
            "horizonSeconds": 600,
            "sweepAheadSeconds": 600,
            "shardCount": 64,
        },
        checks=False,
    )


def test_provisioned_mode_replaces_the_maximum_concurrency_of_its_queue_only(burst):
    by_queue = {
        key: next(
            p
            for p in mappings(burst).values()
            if p["EventSourceArn"] == {"Fn::GetAtt": [queue_logical_id(key), "Arn"]}
        )
        for key in QUEUE_KEYS
    }
    # AWS refuses a mapping with both: provisioned mode and MaximumConcurrency are exclusive.
    assert by_queue["default"]["ProvisionedPollerConfig"] == {"MinimumPollers": 30, "MaximumPollers": 400}
    assert "ScalingConfig" not in by_queue["default"]
    assert by_queue["high"]["ScalingConfig"] == {"MaximumConcurrency": 50}
    assert by_queue["low"]["ScalingConfig"] == {"MaximumConcurrency": 25}
    assert (
        "ProvisionedPollerConfig" not in by_queue["high"] and "ProvisionedPollerConfig" not in by_queue["low"]
    )


def test_the_worker_reserves_what_the_burst_needs(burst):
    (worker,) = [
        f["Properties"]
        for f in burst.of_type("AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "jobsched.handlers.worker_entry.handler"
    ]
    assert worker["ReservedConcurrentExecutions"] == 3000
    variables = worker["Environment"]["Variables"]
    assert variables["HORIZON_SECONDS"] == "600" and variables["SHARD_COUNT"] == "64"


def test_mappings_are_created_after_their_roles_can_poll(synth):
    for logical_id, resource in synth.of_type("AWS::Lambda::EventSourceMapping").items():
        function = synth.props(resource["Properties"]["FunctionName"]["Ref"])
        role = function["Role"]["Fn::GetAtt"][0]
        policies = [
            k
            for k, v in synth.of_type("AWS::IAM::Policy").items()
            if {"Ref": role} in v["Properties"]["Roles"]
        ]
        assert set(policies) <= set(resource.get("DependsOn", [])), logical_id
