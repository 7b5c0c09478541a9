"""EventBridge ticks: every shard is swept and reconciled each minute, and each rule input is
a shape the handler accepts."""

from __future__ import annotations

import json
from collections import Counter

from jobsched.handlers.reconciler import shard_of
from jobsched.handlers.sweeper import shards_of


def targets_of(synth, handler: str) -> list[tuple[str, dict]]:
    found = []
    for logical_id, rule in synth.of_type("AWS::Events::Rule").items():
        for target in rule["Properties"]["Targets"]:
            function = target["Arn"]["Fn::GetAtt"][0]
            if synth.props(function)["Handler"] == handler:
                found.append((logical_id, target))
    return found


def test_rules_tick_every_minute_and_respect_the_target_limit(synth):
    for rule in synth.of_type("AWS::Events::Rule").values():
        props = rule["Properties"]
        assert props["ScheduleExpression"] == "rate(1 minute)"
        assert props["State"] == "ENABLED"
        assert 1 <= len(props["Targets"]) <= 5


def test_every_shard_is_swept_exactly_once_per_tick(synth, config):
    targets = targets_of(synth, "jobsched.handlers.sweeper.handler")
    assert len(targets) == -(-config.shard_count // config.shards_per_sweep)
    swept: Counter[int] = Counter()
    for _, target in targets:
        event = json.loads(target["Input"])
        assert set(event) == {"shards"}
        swept.update(shards_of(event, config.shard_count))  # what the handler makes of it
    assert swept == Counter(range(config.shard_count))


def test_every_shard_is_reconciled_exactly_once_per_tick(synth, config):
    targets = targets_of(synth, "jobsched.handlers.reconciler.handler")
    shards = [shard_of(json.loads(target["Input"])) for _, target in targets]
    assert sorted(shards) == list(range(config.shard_count))  # type: ignore[type-var]


def test_a_missed_tick_is_not_retried_for_long(synth):
    for rule in synth.of_type("AWS::Events::Rule").values():
        for target in rule["Properties"]["Targets"]:
            assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60


def test_each_rule_may_invoke_its_function(synth):
    permissions = synth.of_type("AWS::Lambda::Permission").values()
    allowed = {
        (p["Properties"]["SourceArn"]["Fn::GetAtt"][0], p["Properties"]["FunctionName"]["Fn::GetAtt"][0])
        for p in permissions
        if p["Properties"]["Principal"] == "events.amazonaws.com"
    }
    for logical_id, rule in synth.of_type("AWS::Events::Rule").items():
        for target in rule["Properties"]["Targets"]:
            assert (logical_id, target["Arn"]["Fn::GetAtt"][0]) in allowed
