"""EventBridge ticks: every shard is swept and reconciled each minute (and reconciled again
half a minute later through the second-tick queue), and each rule input is a shape the
handler accepts."""

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


def test_every_shard_is_reconciled_again_half_a_minute_after_its_rules_tick(synth, config):
    """The reconciler sends each rule tick's shard to a queue that holds it 30 s and lets it
    expire 120 s after it was sent; its mapping invokes the reconciler, one shard a record,
    and a pass that failed is never received again (visibility outlasts retention)."""
    from jobsched.cdk.names import SECOND_TICK_QUEUE_ID

    queue = synth.props(SECOND_TICK_QUEUE_ID)
    assert queue["DelaySeconds"] == 30
    assert queue["MessageRetentionPeriod"] == 120
    assert queue["VisibilityTimeout"] > queue["MessageRetentionPeriod"]
    (mapping,) = [
        p["Properties"]
        for p in synth.of_type("AWS::Lambda::EventSourceMapping").values()
        if p["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [SECOND_TICK_QUEUE_ID, "Arn"]}
    ]
    function = mapping["FunctionName"]["Ref"]
    props = synth.props(function)
    assert props["Handler"] == "jobsched.handlers.reconciler.handler"
    assert mapping["BatchSize"] == 1
    assert mapping.get("Enabled", True) is True
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # Every shard's second tick may run at once, within what the function reserves.
    concurrency = mapping["ScalingConfig"]["MaximumConcurrency"]
    assert min(config.shard_count, 1000) <= concurrency <= props.get("ReservedConcurrentExecutions", 1000)
    # The reconciler sends to it (the queue's URL in its environment).
    variables = props["Environment"]["Variables"]
    assert variables["SECOND_TICK_QUEUE_URL"] == {"Ref": SECOND_TICK_QUEUE_ID}
    # Only the ticks make second ticks: the queue's policy allows no one (it denies plain
    # HTTP); the reconciler's role is the one granted to send (tests/infrastructure/test_iam).
    for policy in synth.of_type("AWS::SQS::QueuePolicy").values():
        if {"Ref": SECOND_TICK_QUEUE_ID} in policy["Properties"]["Queues"]:
            statements = policy["Properties"]["PolicyDocument"]["Statement"]
            assert all(s["Effect"] == "Deny" for s in statements)


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
    assert len(largest.of_type("AWS::Events::Rule")) == 2 * 256 // 5 + 2  # 52 per function
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
    assert len(sources) == 2  # one statement per kind, whatever the shard count
    prefix = "arn:<AWS::Partition>:events:<AWS::Region>:<AWS::AccountId>:rule/"
    for rule in rules.values():
        name = prefix + rule["Properties"]["Name"]
        assert sum(fnmatchcase(name, source) for source in sources) == 1, name
