"""A dead-letter alarm reaches the alarm topic: set to ALARM (SetAlarmState), it must notify
the topic, observed through a temporary SQS subscription.

Against a deployed stack this is the whole path CloudWatch takes (alarm action, the topic's
policy and its KMS key). Local mode has no alarms, so the template's dead-letter alarms and
topic are made in moto; moto records SetAlarmState but runs no alarm actions, so there the
check stops at the alarm's configuration (action -> topic) and the subscription, and says so
as a skip."""

from __future__ import annotations

import pytest

from . import alarms
from .helpers import unique
from .targets import Target

pytestmark = pytest.mark.e2e


@pytest.fixture
def alarm_path(target: Target) -> alarms.AlarmPath:
    return alarms.in_moto(target) if target.is_local else alarms.deployed(target)


def test_dead_letter_alarm_reaches_its_topic(target: Target, alarm_path: alarms.AlarmPath) -> None:
    cloudwatch, topic = alarm_path.cloudwatch, alarm_path.topic_arn
    assert alarm_path.alarm_names, "the stack names no dead-letter alarms"
    described = cloudwatch.describe_alarms(AlarmNames=alarm_path.alarm_names)["MetricAlarms"]
    assert sorted(a["AlarmName"] for a in described) == sorted(alarm_path.alarm_names)
    for alarm in described:
        name = alarm["AlarmName"]
        assert alarm["ActionsEnabled"], name
        assert alarm["AlarmActions"] == [topic] and alarm["OKActions"] == [topic], name
        assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold" and alarm["Threshold"] == 1

    name = alarm_path.alarm_names[0]
    reason = f"end-to-end check {unique('alarm')}"
    with alarms.temporary_subscription(alarm_path) as queue:
        # The subscription is live once a message of our own comes through it.
        probe = unique("probe")
        alarm_path.sns.publish(TopicArn=topic, Message=probe)
        target.wait(
            lambda: any(n.get("text") == probe for n in alarms.notifications(alarm_path.sqs, queue)),
            what="a probe message through the test subscription",
        )
        cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason=reason)
        try:
            state = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]
            # ALARM, unless CloudWatch's own evaluation (every minute) has already replaced it.
            assert state["StateValue"] == "ALARM" or state["StateReason"] != reason, state
            if not alarm_path.delivers:
                pytest.skip(
                    "moto records SetAlarmState but runs no alarm actions: delivery to the topic "
                    "is checked against a deployed stack (make e2e-aws); here the alarms' "
                    "configuration (action -> topic) and the subscription were checked"
                )
            delivered = target.wait(
                lambda: [
                    n
                    for n in alarms.notifications(alarm_path.sqs, queue)
                    if n.get("AlarmName") == name and n.get("NewStateReason") == reason
                ],
                what=f"{name}'s ALARM notification on {topic}",
            )
            assert delivered[0]["NewStateValue"] == "ALARM"
        finally:
            # Back to OK at once (its next evaluation would do the same within a minute).
            cloudwatch.set_alarm_state(AlarmName=name, StateValue="OK", StateReason=f"{reason}: done")
