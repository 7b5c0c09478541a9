"""EventBridge ticks: every shard is swept each minute and reconciled twice (the second time
through a queue that delays the tick half a minute), and each input is a shape the handler
accepts."""

from __future__ import annotations

import json
from collections import Counter
from fnmatch import fnmatchcase

from jobsched.handlers.reconciler import shard_of
from jobsched.handlers.sweeper import shards_of

from tests.infrastructure.synth import render

# The longest partition and region names, for estimates of policy size.
PARTITION = "aws-us-gov"
REGION = "ap-southeast-2"
ACCOUNT = "123456789012"


def targets_of(synth, handler: str) -> list[tuple[str, dict]]:
    found = []
    for logical_id, rule in synth.of_type("AWS::Events::Rule").items():
        for target in rule["Properties"]["Targets"]:
            function = target["Arn"]["Fn::GetAtt"][0]
            if synth.props(function).get("Handler") == handler:
                found.append((logical_id, target))
    return found


def second_tick_targets(synth) -> list[tuple[str, dict]]:
    from jobsched.cdk.names import SECOND_TICK_QUEUE_ID

    return [
        (logical_id, target)
        for logical_id, rule in synth.of_type("AWS::Events::Rule").items()
        for target in rule["Properties"]["Targets"]
        if target["Arn"] == {"Fn::GetAtt": [SECOND_TICK_QUEUE_ID, "Arn"]}
    ]


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


def test_every_shard_is_reconciled_again_half_a_minute_after_its_tick(synth, config):
    """Each shard's `{"shard": n}` goes every minute to a queue that holds it 30 s and lets
    it expire 60 s after it was sent; the queue's mapping invokes the reconciler, one shard a
    record, and a pass that failed is never received again (visibility outlasts retention)."""
    from jobsched.cdk.names import SECOND_TICK_QUEUE_ID
    from jobsched.handlers.reconciler import second_tick_shard

    targets = second_tick_targets(synth)
    shards = [second_tick_shard(target["Input"]) for _, target in targets]
    assert sorted(shards) == list(range(config.shard_count))
    queue = synth.props(SECOND_TICK_QUEUE_ID)
    assert queue["DelaySeconds"] == 30
    assert queue["MessageRetentionPeriod"] == 60
    assert queue["VisibilityTimeout"] > queue["MessageRetentionPeriod"]
    (mapping,) = [
        p["Properties"]
        for p in synth.of_type("AWS::Lambda::EventSourceMapping").values()
        if p["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [SECOND_TICK_QUEUE_ID, "Arn"]}
    ]
    function = mapping["FunctionName"]["Ref"]
    assert synth.props(function)["Handler"] == "jobsched.handlers.reconciler.handler"
    assert mapping["BatchSize"] == 1
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_only_the_second_tick_rules_may_send_to_the_second_tick_queue(synth):
    from jobsched.cdk.names import SECOND_TICK_QUEUE_ID

    (policy,) = [
        p["Properties"]
        for p in synth.of_type("AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": SECOND_TICK_QUEUE_ID}]
    ]
    (source,) = [
        concrete(s["Condition"]["ArnLike"]["aws:SourceArn"])
        for s in policy["PolicyDocument"]["Statement"]
        if s["Effect"] == "Allow" and s["Principal"] == {"Service": "events.amazonaws.com"}
    ]
    senders = {logical_id for logical_id, _ in second_tick_targets(synth)}
    assert senders
    for logical_id in synth.of_type("AWS::Events::Rule"):
        assert fnmatchcase(rule_arn(synth, logical_id), source) == (logical_id in senders), logical_id


def test_a_missed_tick_is_not_retried_for_long(synth):
    for rule in synth.of_type("AWS::Events::Rule").values():
        for target in rule["Properties"]["Targets"]:
            assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60


def rule_arn(synth, logical_id: str) -> str:
    name = synth.props(logical_id)["Name"]
    return f"arn:{PARTITION}:events:{REGION}:{ACCOUNT}:rule/{name}"


def concrete(value) -> str:
    """A template value as it would read in the longest partition and region."""
    text = render(value)
    for ref, literal in (("AWS::Partition", PARTITION), ("AWS::Region", REGION), ("AWS::AccountId", ACCOUNT)):
        text = text.replace(f"<{ref}>", literal)
    return text


def event_permissions(synth) -> dict[str, list[dict]]:
    """EventBridge's AWS::Lambda::Permission resources, by the function they are on."""
    found: dict[str, list[dict]] = {}
    for permission in synth.of_type("AWS::Lambda::Permission").values():
        props = permission["Properties"]
        if props["Principal"] == "events.amazonaws.com":
            found.setdefault(props["FunctionName"]["Fn::GetAtt"][0], []).append(props)
    return found


def test_each_rule_may_invoke_its_function_and_no_other(synth):
    permissions = event_permissions(synth)
    for logical_id, rule in synth.of_type("AWS::Events::Rule").items():
        arn = rule_arn(synth, logical_id)
        for target in rule["Properties"]["Targets"]:
            function = target["Arn"]["Fn::GetAtt"][0]
            for other, granted in permissions.items():
                matches = any(fnmatchcase(arn, concrete(p["SourceArn"])) for p in granted)
                assert matches == (other == function), (arn, other)
    for granted in permissions.values():
        assert all(p["SourceAccount"] == {"Ref": "AWS::AccountId"} for p in granted)


def policy_statement_bytes(props: dict) -> int:
    """About what one permission adds to the function's resource policy (longest names assumed)."""
    statement = {
        "Sid": "x" * 100,
        "Effect": "Allow",
        "Principal": {"Service": props["Principal"]},
        "Action": props["Action"],
        "Resource": f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:" + "f" * 64,
        "Condition": {
            "StringEquals": {"AWS:SourceAccount": ACCOUNT},
            "ArnLike": {"AWS:SourceArn": concrete(props["SourceArn"])},
        },
    }
    return len(json.dumps(statement, separators=(",", ":")))


def test_function_policies_stay_small_at_the_largest_shard_count(largest):
    # 52 each: the sweeper's, the reconciler's and its second tick's
    assert len(largest.of_type("AWS::Events::Rule")) == 3 * (-(-256 // 5))
    for function in largest.of_type("AWS::Lambda::Function"):
        granted = [
            p["Properties"]
            for p in largest.of_type("AWS::Lambda::Permission").values()
            if p["Properties"]["FunctionName"]["Fn::GetAtt"][0] == function
        ]
        assert len(granted) <= 2, function
        assert sum(policy_statement_bytes(p) for p in granted) < 20_000 // 4, function
    test_each_rule_may_invoke_its_function_and_no_other(largest)


def test_every_tick_target_has_a_dead_letter_queue_the_rules_may_send_to(synth):
    """A tick EventBridge gave up on leaves a message (alarmed like every DLQ), not nothing."""
    from jobsched.cdk.names import TICK_FAILURE_QUEUE_ID

    rules = synth.of_type("AWS::Events::Rule")
    for rule in rules.values():
        for target in rule["Properties"]["Targets"]:
            assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [TICK_FAILURE_QUEUE_ID, "Arn"]}}
    (policy,) = [
        p["Properties"]
        for p in synth.of_type("AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": TICK_FAILURE_QUEUE_ID}]
    ]
    sources = [
        render(s["Condition"]["ArnLike"]["aws:SourceArn"])
        for s in policy["PolicyDocument"]["Statement"]
        if s["Effect"] == "Allow"
        and s["Principal"] == {"Service": "events.amazonaws.com"}
        and s["Action"] == "sqs:SendMessage"
    ]
    assert len(sources) == 3  # one statement per kind, whatever the shard count
    prefix = "arn:<AWS::Partition>:events:<AWS::Region>:<AWS::AccountId>:rule/"
    for rule in rules.values():
        name = prefix + rule["Properties"]["Name"]
        assert sum(fnmatchcase(name, source) for source in sources) == 1, name
