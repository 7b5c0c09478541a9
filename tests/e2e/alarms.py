"""The stack's dead-letter alarms and their topic, for the alarm check: read from a deployed
stack's outputs, or, in local mode (which has no alarms), made in the runtime's moto server
exactly as the synthesized template defines them."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from .helpers import unique
from .targets import Target

ALARM_TOPIC_OUTPUT = "AlarmTopicArn"
DEAD_LETTER_ALARMS_OUTPUT = "DeadLetterAlarmNames"


@dataclass
class AlarmPath:
    cloudwatch: Any
    sns: Any
    sqs: Any
    topic_arn: str
    alarm_names: list[str]
    # CloudWatch runs alarm actions; moto records SetAlarmState but publishes nothing.
    delivers: bool


def deployed(target: Target) -> AlarmPath:
    def client(service: str) -> Any:
        return boto3.client(service, region_name=target.region)  # type: ignore[call-overload]

    stacks = client("cloudformation").describe_stacks(StackName=target.stack)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [k for k in (ALARM_TOPIC_OUTPUT, DEAD_LETTER_ALARMS_OUTPUT) if k not in outputs]
    assert not missing, f"stack {target.stack} has no {missing} output: deploy this version of the stack"
    return AlarmPath(
        client("cloudwatch"),
        client("sns"),
        client("sqs"),
        outputs[ALARM_TOPIC_OUTPUT],
        outputs[DEAD_LETTER_ALARMS_OUTPUT].split(","),
        delivers=True,
    )


def synthesized_template() -> dict[str, Any]:
    from infra.app import build_app

    with tempfile.TemporaryDirectory() as outdir:
        # No layer bundling and no cdk-nag: only the template is wanted.
        app, stack = build_app(
            {"aws:cdk:bundling-stacks": [], "alarmsWithoutSubscriber": True}, outdir=outdir, checks=False
        )
        app.synth()
        template: dict[str, Any] = json.loads(
            (Path(outdir) / f"{stack.artifact_id}.template.json").read_text()
        )
    return template


def in_moto(target: Target) -> AlarmPath:
    """The template's alarm topic and dead-letter alarms, made in local mode's moto server."""
    from jobsched.cdk.names import QUEUE_KEYS, dlq_logical_id

    runtime = target.runtime

    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=runtime.moto.url, region_name=runtime.config.region)  # type: ignore[call-overload]

    template = synthesized_template()
    resources, outputs = template["Resources"], template["Outputs"]
    topic_id = outputs[ALARM_TOPIC_OUTPUT]["Value"]["Ref"]
    assert resources[topic_id]["Type"] == "AWS::SNS::Topic"
    separator, parts = outputs[DEAD_LETTER_ALARMS_OUTPUT]["Value"]["Fn::Join"]
    assert separator == ","
    alarm_ids = [part["Ref"] for part in parts]

    sns, cloudwatch = client("sns"), client("cloudwatch")
    topic_arn = sns.create_topic(Name=unique("jobsched-alarms"))["TopicArn"]
    queue_names = {dlq_logical_id(k): runtime.resources["dlq_urls"][k].rsplit("/", 1)[1] for k in QUEUE_KEYS}

    def resolve(value: Any) -> Any:
        if isinstance(value, dict) and value.get("Ref") == topic_id:
            return topic_arn
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            queue_id, attribute = value["Fn::GetAtt"]
            assert attribute == "QueueName", value
            return queue_names.get(queue_id, queue_id)  # local mode has no outbox-failure queue
        assert not isinstance(value, dict), f"unresolved template value {value}"
        return value

    names = []
    for alarm_id in alarm_ids:
        alarm = resources[alarm_id]
        assert alarm["Type"] == "AWS::CloudWatch::Alarm", alarm_id
        props = alarm["Properties"]
        cloudwatch.put_metric_alarm(
            AlarmName=props["AlarmName"],
            AlarmDescription=props.get("AlarmDescription", ""),
            ActionsEnabled=props.get("ActionsEnabled", True),
            AlarmActions=[resolve(a) for a in props.get("AlarmActions", [])],
            OKActions=[resolve(a) for a in props.get("OKActions", [])],
            MetricName=props["MetricName"],
            Namespace=props["Namespace"],
            Statistic=props["Statistic"],
            Dimensions=[{"Name": d["Name"], "Value": resolve(d["Value"])} for d in props["Dimensions"]],
            Period=props["Period"],
            EvaluationPeriods=props["EvaluationPeriods"],
            Threshold=props["Threshold"],
            ComparisonOperator=props["ComparisonOperator"],
            TreatMissingData=props["TreatMissingData"],
        )
        names.append(props["AlarmName"])
    return AlarmPath(cloudwatch, sns, client("sqs"), topic_arn, names, delivers=False)


@contextmanager
def temporary_subscription(path: AlarmPath) -> Iterator[str]:
    """A temporary SQS queue subscribed to the alarm topic (its policy lets only that topic
    send); unsubscribed and deleted afterwards. Yields the queue's URL."""
    sqs, sns = path.sqs, path.sns
    url = sqs.create_queue(QueueName=unique("jobsched-e2e-alarms"))["QueueUrl"]
    try:
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "sns.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": arn,
                    "Condition": {"ArnEquals": {"aws:SourceArn": path.topic_arn}},
                }
            ],
        }
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(policy)})
        subscription = sns.subscribe(
            TopicArn=path.topic_arn, Protocol="sqs", Endpoint=arn, ReturnSubscriptionArn=True
        )["SubscriptionArn"]
        try:
            yield url
        finally:
            sns.unsubscribe(SubscriptionArn=subscription)
    finally:
        sqs.delete_queue(QueueUrl=url)


def notifications(sqs: Any, url: str) -> list[dict[str, Any]]:
    """The SNS messages (their `Message`, parsed when it is JSON) that reached the queue."""
    found = []
    for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
        "Messages", []
    ):
        envelope = json.loads(message["Body"])
        try:
            found.append(json.loads(envelope["Message"]))
        except (json.JSONDecodeError, TypeError):
            found.append({"text": envelope["Message"]})
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found
