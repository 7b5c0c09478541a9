"""Alarms on every dead letter queue, the age of every queue, the stream, every function and the
reconciler's repairs, all to one encrypted SNS topic; and the dashboard."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jobsched.cdk.config import ConfigError
from jobsched.cdk.names import (
    EVENTS_FAILURE_QUEUE_ID,
    FUNCTIONS,
    NOTIFICATIONS_DLQ_ID,
    OUTBOX_FAILURE_QUEUE_ID,
    QUEUE_KEYS,
    TICK_FAILURE_QUEUE_ID,
    dlq_logical_id,
    queue_logical_id,
)
from jobsched.services.reconciler import KINDS

from tests.infrastructure.synth import function_environment, render, synthesize

# What the session stack's functions emit under (its name, Jobsched; Config.metric_names).
NAMESPACE, SERVICE = "jobsched/Jobsched", "Jobsched"


def alarms(synth) -> list[dict]:
    return [a["Properties"] for a in synth.of_type("AWS::CloudWatch::Alarm").values()]


def topic(synth) -> str:
    (logical_id,) = synth.of_type("AWS::SNS::Topic")
    return logical_id


def simple_alarms(synth, metric: str) -> dict[str, dict]:
    """Alarms on one metric, by the logical id of the resource in their first dimension."""
    found = {}
    for alarm in alarms(synth):
        if alarm.get("MetricName") == metric:
            value = alarm["Dimensions"][0]["Value"]
            ref = value.get("Ref") or value.get("Fn::GetAtt", [None])[0]
            found[ref] = alarm
    return found


DEAD_LETTER_QUEUES = {dlq_logical_id(k) for k in QUEUE_KEYS} | {
    OUTBOX_FAILURE_QUEUE_ID,
    EVENTS_FAILURE_QUEUE_ID,
    NOTIFICATIONS_DLQ_ID,
    TICK_FAILURE_QUEUE_ID,
}


def math_alarms(synth) -> list[dict]:
    return [a for a in alarms(synth) if "Metrics" in a]


def stats_of(alarm: dict) -> list[dict]:
    return [m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m]


def test_every_dead_letter_queue_has_a_depth_alarm(synth):
    depth = simple_alarms(synth, "ApproximateNumberOfMessagesVisible")
    # Dimension values reference queue names (GetAtt QueueName).
    assert set(depth) == DEAD_LETTER_QUEUES
    for alarm in depth.values():
        assert alarm["Threshold"] == 1
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_outputs_name_the_dead_letter_alarms_and_their_topic(synth):
    """make e2e-aws finds what to set to ALARM, and where it must arrive, in these outputs."""
    outputs = synth.template["Outputs"]
    assert outputs["AlarmTopicArn"]["Value"] == {"Ref": topic(synth)}
    separator, parts = outputs["DeadLetterAlarmNames"]["Value"]["Fn::Join"]
    named = {part["Ref"] for part in parts}
    depth = {
        logical_id
        for logical_id, alarm in synth.of_type("AWS::CloudWatch::Alarm").items()
        if alarm["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
    }
    assert separator == "," and len(parts) == len(named) == len(DEAD_LETTER_QUEUES)
    assert named == depth
    for logical_id in named:
        assert synth.props(logical_id)["AlarmActions"] == [{"Ref": topic(synth)}]


def test_every_queue_has_an_oldest_message_alarm_above_the_sqs_delay(synth, config):
    age = simple_alarms(synth, "ApproximateAgeOfOldestMessage")
    assert set(age) == {queue_logical_id(k) for k in QUEUE_KEYS}
    for key in QUEUE_KEYS:
        assert age[queue_logical_id(key)]["Threshold"] == config.queue_age_alarm_seconds[key] > 900


def test_stream_iterator_age_is_alarmed(synth, config):
    """Each stream consumer: the outbox (runs published late) and the events consumer."""
    ages = [a for a in alarms(synth) if a.get("MetricName") == "IteratorAge"]
    handlers = {synth.props(a["Dimensions"][0]["Value"]["Ref"])["Handler"] for a in ages}
    assert handlers == {"jobsched.handlers.outbox.handler", "jobsched.handlers.events.handler"}
    assert all(a["Threshold"] == config.iterator_age_alarm_seconds * 1000 for a in ages)


@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
def test_every_function_has_error_and_throttle_alarms(synth, metric):
    alarmed = simple_alarms(synth, metric)
    handlers = {synth.props(ref)["Handler"] for ref in alarmed}
    assert handlers == {f.handler for f in FUNCTIONS}


def test_reconciler_repairs_of_every_kind_are_alarmed(synth, config):
    (alarm,) = [a for a in alarms(synth) if a["AlarmName"].endswith("-reconciler-repairs")]
    metrics = [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]
    assert {m["MetricName"] for m in metrics} == {"RepairsMade"}
    assert all(m["Namespace"] == NAMESPACE for m in metrics)
    kinds = {d["Value"] for m in metrics for d in m["Dimensions"] if d["Name"] == "kind"}
    assert kinds == set(KINDS)  # the dimension values the reconciler emits
    assert alarm["Threshold"] == config.repair_alarm_threshold


def test_every_alarm_notifies_the_topic_and_missing_data_is_fine_unless_it_must_keep_coming(synth):
    for alarm in alarms(synth):
        assert alarm["AlarmActions"] == [{"Ref": topic(synth)}]
        assert alarm["OKActions"] == [{"Ref": topic(synth)}]
        expected = "breaching" if render(alarm["AlarmName"]).endswith("-ticks-missing") else "notBreaching"
        assert alarm["TreatMissingData"] == expected, alarm["AlarmName"]


def test_a_stack_whose_alarms_reach_no_one_builds_and_says_so_in_its_outputs(tmp_path):
    """No traceback on the first command: the stack builds, synth warns (the construct's
    annotation) and every deploy prints the AlarmSubscriber output."""
    from aws_cdk import CfnOutput
    from jobsched.cdk.names import OUTPUT_ALARM_SUBSCRIBER

    from infra.app import build_app

    def subscriber(context: dict[str, Any]) -> str:
        _, stack = build_app({"aws:cdk:bundling-stacks": [], **context}, outdir=str(tmp_path), checks=False)
        output = stack.node.find_child(OUTPUT_ALARM_SUBSCRIBER)
        assert isinstance(output, CfnOutput)
        return str(output.value)

    silent = subscriber({"alarmEmail": ""})
    assert silent.startswith("NONE: alarmEmail is empty") and "alarmsWithoutSubscriber" in silent
    assert subscriber({"alarmEmail": "ops@example.com"}) == "ops@example.com"
    assert subscriber({"alarmsWithoutSubscriber": True}) == "subscribed outside the stack"


def test_every_dead_letter_queue_alarms_on_each_new_dead_letter(synth):
    """Depth stays in ALARM and notifies once; new arrivals notify each time: sends, and a
    rise in depth (a redrive policy's moves are not counted as sends)."""
    watched = {}
    for alarm in math_alarms(synth):
        names = {s["Metric"]["MetricName"] for s in stats_of(alarm)}
        if names != {"NumberOfMessagesSent", "ApproximateNumberOfMessagesVisible"}:
            continue
        queues = {s["Metric"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for s in stats_of(alarm)}
        (queue,) = queues
        (expression,) = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
        assert "DIFF(" in expression and "sent" in expression
        assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert all(s["Period"] == 60 for s in stats_of(alarm))
        watched[queue] = alarm
    assert set(watched) == DEAD_LETTER_QUEUES


def test_stopped_ticks_are_alarmed_with_missing_data_breaching(synth, config):
    from jobsched.cdk.names import RECONCILER, SWEEPER

    invocations = simple_alarms(synth, "Invocations")
    by_handler = {synth.props(ref)["Handler"]: alarm for ref, alarm in invocations.items()}
    expected = config.ticks_per_minute()
    for name in (SWEEPER, RECONCILER):
        alarm = by_handler[f"jobsched.handlers.{name}.handler"]
        assert alarm["ComparisonOperator"] == "LessThanThreshold"
        assert alarm["TreatMissingData"] == "breaching"  # no invocation at all is no data
        assert alarm["Statistic"] == "Sum"
        per_period = expected[name] * alarm["Period"] / 60
        assert 0 < alarm["Threshold"] < per_period  # below what arrives, so it can clear


def test_every_scheduled_rule_is_alarmed_on_failed_invocations(synth):
    rules = set(synth.of_type("AWS::Events::Rule"))
    alarmed = []
    for alarm in math_alarms(synth):
        stats = [s for s in stats_of(alarm) if s["Metric"]["MetricName"] == "FailedInvocations"]
        if not stats:
            continue
        assert len(stats_of(alarm)) <= 10  # CloudWatch's hard limit of metrics in one alarm
        assert alarm["Threshold"] == 1
        alarmed += [s["Metric"]["Dimensions"][0]["Value"]["Ref"] for s in stats]
    assert sorted(alarmed) == sorted(rules) and len(rules) > 2


def test_largest_stack_keeps_failed_invocation_alarms_within_cloudwatchs_limits(largest):
    rules = len(largest.of_type("AWS::Events::Rule"))
    failing = [
        a
        for a in math_alarms(largest)
        if any(s["Metric"]["MetricName"] == "FailedInvocations" for s in stats_of(a))
    ]
    assert all(len(stats_of(a)) <= 10 for a in failing)
    assert sum(len(a["Metrics"]) - 1 for a in failing) == rules


def test_account_concurrency_near_its_quota_is_alarmed_once_the_quota_is_given(synth, variant):
    from jobsched.cdk.monitoring import ACCOUNT_CONCURRENCY_SHARE

    assert not [a for a in alarms(synth) if a.get("MetricName") == "ConcurrentExecutions"]
    config = variant.stack.config
    (alarm,) = [a for a in alarms(variant) if a.get("MetricName") == "ConcurrentExecutions"]
    assert alarm["Namespace"] == "AWS/Lambda" and "Dimensions" not in alarm  # the account's
    assert alarm["Statistic"] == "Maximum"
    assert alarm["Threshold"] == int(config.account_concurrency * ACCOUNT_CONCURRENCY_SHARE)
    assert alarm["Threshold"] < config.account_concurrency


def test_failed_worker_records_are_alarmed_with_the_dimensions_the_worker_emits(synth):
    (alarm,) = [a for a in alarms(synth) if a.get("MetricName") == "RecordFailed"]
    assert alarm["Namespace"] == NAMESPACE and alarm["Statistic"] == "Sum"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SERVICE}]  # service-wide
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_a_worker_that_cannot_start_is_alarmed_on_what_its_entry_point_emits(synth):
    """The worker function's entry point counts a start that failed (its code not loaded, its
    services not built) in an embedded-metric line of its own, with Powertools' namespace and
    service dimension: the alarm reads exactly that, each minute."""
    from jobsched.handlers.worker_entry import START_FAILED_METRIC

    (alarm,) = [a for a in alarms(synth) if a.get("MetricName") == START_FAILED_METRIC]
    assert render(alarm["AlarmName"]).endswith("-worker-cannot-start")
    assert alarm["Namespace"] == NAMESPACE and alarm["Statistic"] == "Sum" and alarm["Period"] == 60
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SERVICE}]
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    worker = next(f for f in FUNCTIONS if f.name == "worker")
    assert worker.handler == "jobsched.handlers.worker_entry.handler"


def test_a_lowered_shard_count_is_alarmed_on_the_sweepers_metric(synth):
    (alarm,) = [a for a in alarms(synth) if a.get("MetricName") == "ShardCountBelowInUse"]
    assert alarm["Namespace"] == NAMESPACE and alarm["Statistic"] == "Maximum"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SERVICE}]
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_second_ticks_missing_is_alarmed_on_the_passes_they_make(synth, config):
    """The reconciler's invocations count both ticks; its second ticks alone are watched on
    the metric each second pass emits, so a share of them lost shows."""
    (alarm,) = [a for a in alarms(synth) if a.get("MetricName") == "SecondTickPasses"]
    assert alarm["Namespace"] == NAMESPACE and alarm["Statistic"] == "Sum"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SERVICE}]
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
    assert alarm["TreatMissingData"] == "breaching"  # none at all is no data
    expected = config.shard_count * alarm["Period"] / 60  # one second tick a shard a minute
    assert expected / 2 < alarm["Threshold"] < expected  # half of them lost raises it


def test_a_follow_up_of_a_landed_transition_that_failed_is_alarmed(synth):
    (alarm,) = [a for a in alarms(synth) if a.get("MetricName") == "AfterTransitionFailed"]
    assert alarm["Namespace"] == NAMESPACE and alarm["Statistic"] == "Sum"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": SERVICE}]
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def allows(statement: dict, principal: str, action: str) -> bool:
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    return (
        statement["Effect"] == "Allow"
        and statement.get("Principal") == {"Service": principal}
        and any(a == action or (a.endswith("*") and action.startswith(a[:-1])) for a in actions)
    )


def test_alarms_may_publish_to_the_topic_and_use_its_key(synth):
    """The whole chain an alarm notification takes in AWS: alarm → topic policy → key policy.
    A topic policy (enforce_ssl makes one) replaces SNS's default, so without an explicit
    Allow CloudWatch is refused and no e-mail is ever sent."""
    from tests.infrastructure.synth import render

    topics = {a["AlarmActions"][0]["Ref"] for a in alarms(synth)}
    assert topics == {topic(synth)}
    (policy,) = [
        p["Properties"]
        for p in synth.of_type("AWS::SNS::TopicPolicy").values()
        if {"Ref": topic(synth)} in p["Properties"]["Topics"]
    ]
    (publish,) = [
        s
        for s in policy["PolicyDocument"]["Statement"]
        if allows(s, "cloudwatch.amazonaws.com", "sns:Publish")
    ]
    assert publish["Resource"] == {"Ref": topic(synth)}
    conditions = publish["Condition"]
    assert conditions["StringEquals"]["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}
    source = render(conditions["ArnLike"]["aws:SourceArn"])
    assert source == "arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:alarm:*"
    # Still TLS only.
    assert any(s["Effect"] == "Deny" for s in policy["PolicyDocument"]["Statement"])

    key = synth.props(topic(synth))["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key_props = synth.props(key)
    assert key_props["EnableKeyRotation"] is True
    statements = key_props["KeyPolicy"]["Statement"]
    for action in ("kms:Decrypt", "kms:GenerateDataKey"):
        assert any(allows(s, "cloudwatch.amazonaws.com", action) for s in statements), action
    assert not synth.of_type("AWS::SNS::Subscription")  # no alarmEmail in cdk.json


def test_alarm_email_subscribes_to_the_topic(tmp_path):
    other = synthesize(tmp_path, {"alarmEmail": "ops@example.com"}, checks=False)
    (subscription,) = [s["Properties"] for s in other.of_type("AWS::SNS::Subscription").values()]
    assert subscription["Protocol"] == "email" and subscription["Endpoint"] == "ops@example.com"


def test_dashboard_shows_lag_throughput_retries_and_dead_letters(synth):
    (dashboard,) = synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for title in ("Lag", "Throughput", "Retries", "Dead letters"):
        assert title in body
    for metric in ("StartLag", "IteratorAge", "RunsPublished", "RetriesScheduled", "RepairsMade"):
        assert metric in body


def template_metrics(synth) -> list[tuple[str, str, tuple[str, ...]]]:
    """(namespace, metric, dimension names) of every metric an alarm or the dashboard reads."""
    from tests.infrastructure.synth import render

    found = []
    for alarm in alarms(synth):
        stats = [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
        if "MetricName" in alarm:
            stats.append(alarm)
        for metric in stats:
            names = tuple(sorted(d["Name"] for d in metric.get("Dimensions", [])))
            found.append((metric["Namespace"], metric["MetricName"], names))
    (dashboard,) = synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    for widget in body["widgets"]:
        for entry in widget.get("properties", {}).get("metrics", []):
            fields = [f for f in entry if isinstance(f, str)]
            if len(fields) >= 2:
                namespace, name, *pairs = fields
                found.append((namespace, name, tuple(sorted(pairs[0::2]))))
    return found


def test_app_metrics_are_read_with_the_dimensions_the_code_emits(synth, recorded):
    """A metric read with other dimensions than it is emitted with shows nothing, silently."""
    from pathlib import Path

    import jobsched

    own = function_environment(synth)["POWERTOOLS_METRICS_NAMESPACE"]
    emitted: dict[str, set[tuple[str, ...]]] = {}
    for namespace, name, dimensions in recorded.metrics:
        assert namespace == own
        emitted.setdefault(name, set()).add(dimensions)
    source = "\n".join(p.read_text() for p in Path(jobsched.__file__).parent.rglob("*.py"))
    read = [m for m in template_metrics(synth) if m[0] == own]
    assert len(read) > 10
    for _, name, dimensions in read:
        if name in emitted:
            assert dimensions in emitted[name], (name, dimensions, emitted[name])
        else:  # not reached by the flows: emitted through the service metrics (service dimension)
            assert f'"{name}"' in source, name
            assert dimensions == ("service",), (name, dimensions)


def test_sweeps_and_reconcile_passes_near_their_time_limit_are_alarmed(synth):
    durations = simple_alarms(synth, "Duration")
    handlers = {synth.props(ref)["Handler"]: alarm for ref, alarm in durations.items()}
    assert set(handlers) == {"jobsched.handlers.sweeper.handler", "jobsched.handlers.reconciler.handler"}
    for function, alarm in durations.items():
        timeout = synth.props(function)["Timeout"]  # read from the template, not the spec
        assert alarm["Statistic"] == "Maximum"
        assert 0.5 * timeout * 1000 <= alarm["Threshold"] < timeout * 1000


def test_api_server_errors_and_latency_are_alarmed(synth):
    from jobsched.cdk.names import API_STAGE

    api_alarms = {a["MetricName"]: a for a in alarms(synth) if a.get("Namespace") == "AWS/ApiGateway"}
    assert set(api_alarms) == {"5XXError", "Latency", "Count"}
    for alarm in api_alarms.values():
        dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        (stage,) = synth.of_type("AWS::ApiGateway::Stage")
        assert dimensions["Stage"] == {"Ref": stage}
        assert synth.props(stage)["StageName"] == API_STAGE
        assert set(dimensions) == {"ApiName", "Stage"}  # stage-wide: every route counts
        # The API's own name, the stack's: not RestApi, which any other API may be called.
        (api,) = synth.of_type("AWS::ApiGateway::RestApi").values()
        assert dimensions["ApiName"] == api["Properties"]["Name"] == synth.stack.stack_name
    assert api_alarms["5XXError"]["Statistic"] == "Sum"
    assert api_alarms["Latency"]["ExtendedStatistic"] == "p99"
    # Under the 29 s integration limit, above a cold start.
    assert 2000 <= api_alarms["Latency"]["Threshold"] < 29_000


def test_every_table_and_index_is_watched_for_throttling(synth):
    from jobsched.cdk.names import table_logical_id
    from jobsched.store.schema import ALL_TABLES

    watched: dict[str, set[tuple[str, str | None]]] = {}
    for alarm in alarms(synth):
        stats = [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
        for metric in stats:
            if metric["Namespace"] != "AWS/DynamoDB":
                continue
            dimensions = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
            assert metric["MetricName"] in ("ReadThrottleEvents", "WriteThrottleEvents")
            table = dimensions["TableName"]["Ref"]
            watched.setdefault(table, set()).add(
                (metric["MetricName"], dimensions.get("GlobalSecondaryIndexName"))
            )
    expected = {
        table_logical_id(spec): {
            (f"{kind}ThrottleEvents", index)
            for kind in ("Read", "Write")
            for index in (None, *(i.name for i in spec.indexes))
        }
        for spec in ALL_TABLES
    }
    assert watched == expected


def test_dropped_ticks_and_cut_recursion_are_alarmed(synth):
    dropped = simple_alarms(synth, "AsyncEventsDropped")
    assert {synth.props(ref)["Handler"] for ref in dropped} == {
        "jobsched.handlers.sweeper.handler",
        "jobsched.handlers.reconciler.handler",
    }
    # The worker's queues, and the reconciler's second ticks (a loop there is something else
    # sending to its queue).
    recursion = simple_alarms(synth, "RecursiveInvocationsDropped")
    assert {synth.props(ref)["Handler"] for ref in recursion} == {
        "jobsched.handlers.worker_entry.handler",
        "jobsched.handlers.reconciler.handler",
    }
    for alarm in [*dropped.values(), *recursion.values()]:
        assert alarm["Namespace"] == "AWS/Lambda"
        assert alarm["Threshold"] == 1 and alarm["Statistic"] == "Sum"


@pytest.mark.parametrize(
    "metric", ["RepairsFailed", "UnreadableRuns", "UnreadableJobs", "SweepFailures", "EventRecordsUnreadable"]
)
def test_work_left_behind_is_alarmed_with_the_dimensions_the_code_emits(synth, metric):
    """A run or job passed over (unrepaired, unreadable, unswept) or a stream record without its
    events: the loop went on without it, so only its count tells, and any of it is an alarm."""
    (failed,) = [a for a in alarms(synth) if a.get("MetricName") == metric]
    assert failed["Namespace"] == NAMESPACE
    assert failed["Dimensions"] == [{"Name": "service", "Value": SERVICE}]
    assert failed["Threshold"] == 1 and failed["Statistic"] == "Sum"
    assert failed["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_the_shared_stage_rate_is_alarmed_before_tenants_starve_each_other(synth, config):
    """Each tenant is held to its rate by the function, after the stage admitted the request:
    the stage's own rate is what all tenants share, and a busy stage is an alarm."""
    from jobsched.cdk.monitoring import API_STAGE_BUSY_SHARE

    (alarm,) = [a for a in alarms(synth) if render(a["AlarmName"]).endswith("-api-stage-busy")]
    assert alarm["MetricName"] == "Count" and alarm["Namespace"] == "AWS/ApiGateway"
    assert alarm["Statistic"] == "Sum" and alarm["Period"] == 60 and alarm["EvaluationPeriods"] == 5
    assert alarm["Threshold"] == int(config.api_rate_limit * 60 * API_STAGE_BUSY_SHARE)
    assert config.api_rate_limit >= 3 * config.tenant_requests_per_second  # never two tenants


def app_metric_reads(synth) -> list[tuple[str, str, dict[str, str]]]:
    """(namespace, metric, dimensions) of every metric outside AWS's own namespaces that an
    alarm or the dashboard reads."""
    found = []
    for alarm in alarms(synth):
        metrics = [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
        metrics += [alarm] if "MetricName" in alarm else []
        for metric in metrics:
            dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            found.append((metric["Namespace"], metric["MetricName"], dimensions))
    (dashboard,) = synth.of_type("AWS::CloudWatch::Dashboard").values()
    for widget in json.loads(render(dashboard["Properties"]["DashboardBody"]))["widgets"]:
        for entry in widget.get("properties", {}).get("metrics", []):
            fields = [f for f in entry if isinstance(f, str)]
            if len(fields) >= 2:
                namespace, name, *pairs = fields
                found.append((namespace, name, dict(zip(pairs[0::2], pairs[1::2], strict=True))))
    return [read for read in found if not read[0].startswith("AWS/")]


@pytest.mark.parametrize(
    ("context", "namespace", "service"),
    [
        ({"stackName": "Jobsched-staging"}, "jobsched/Jobsched-staging", "Jobsched-staging"),
        ({"metricsNamespace": "ops/scheduler", "serviceName": "scheduler"}, "ops/scheduler", "scheduler"),
    ],
    ids=["second-stack", "set"],
)
def test_each_stack_reads_the_metrics_its_own_functions_emit(synth, tmp_path, context, namespace, service):
    """Two schedulers in one account and region: each stack's functions emit under a namespace
    and service of its own (the stack's name, or metricsNamespace and serviceName), and every
    alarm and dashboard widget reads exactly those, so neither counts the other's figures."""
    other = synthesize(tmp_path, context, checks=False)
    seen = set()
    for built in (synth, other):
        env = function_environment(built)
        own = (env["POWERTOOLS_METRICS_NAMESPACE"], env["POWERTOOLS_SERVICE_NAME"])
        reads = app_metric_reads(built)
        assert len(reads) > 10
        for read_namespace, name, dimensions in reads:
            assert (read_namespace, dimensions.get("service")) == own, (name, read_namespace, dimensions)
        seen.add(own)
    assert function_environment(other)["POWERTOOLS_METRICS_NAMESPACE"] == namespace
    assert function_environment(other)["POWERTOOLS_SERVICE_NAME"] == service
    assert len(seen) == 2  # the default stack's differ from the other's


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"metricsNamespace": "AWS/Lambda"}, "metricsNamespace (POWERTOOLS_METRICS_NAMESPACE): must name"),
        ({"serviceName": "two words"}, "serviceName (POWERTOOLS_SERVICE_NAME): String should match"),
    ],
)
def test_a_namespace_or_service_cloudwatch_refuses_is_refused_at_synth(tmp_path, context, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        synthesize(tmp_path, context, checks=False)
