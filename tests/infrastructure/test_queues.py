"""Queues: one per schema QueueSpec with its DLQ and redrive policy, SQS-managed SSE, TLS only."""

from __future__ import annotations

import pytest
from jobsched.cdk.names import (
    EVENTS_FAILURE_QUEUE_ID,
    NOTIFICATIONS_DLQ_ID,
    NOTIFICATIONS_QUEUE_ID,
    OUTBOX_FAILURE_QUEUE_ID,
    SECOND_TICK_QUEUE_ID,
    TICK_FAILURE_QUEUE_ID,
    dlq_logical_id,
    queue_logical_id,
)
from jobsched.store.schema import QUEUES

KEYS = [q.key for q in QUEUES]


def test_exactly_the_schema_queues_their_dlqs_and_the_failure_queues(synth):
    expected = {queue_logical_id(k) for k in KEYS} | {dlq_logical_id(k) for k in KEYS}
    assert set(synth.of_type("AWS::SQS::Queue")) == expected | {
        OUTBOX_FAILURE_QUEUE_ID,
        EVENTS_FAILURE_QUEUE_ID,
        TICK_FAILURE_QUEUE_ID,
        NOTIFICATIONS_QUEUE_ID,
        NOTIFICATIONS_DLQ_ID,
        SECOND_TICK_QUEUE_ID,
    }


def test_notifications_are_retried_by_their_queue_then_kept_on_its_dlq(synth):
    from jobsched.cdk.names import FUNCTIONS_BY_NAME, NOTIFICATIONS_MAX_RECEIVES, NOTIFIER

    props = synth.props(NOTIFICATIONS_QUEUE_ID)
    assert props["VisibilityTimeout"] == 6 * FUNCTIONS_BY_NAME[NOTIFIER].timeout_seconds
    assert props["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [NOTIFICATIONS_DLQ_ID, "Arn"]},
        "maxReceiveCount": NOTIFICATIONS_MAX_RECEIVES,
    }


@pytest.mark.parametrize("spec", QUEUES, ids=KEYS)
def test_queue_settings_and_redrive_follow_the_spec(synth, spec):
    props = synth.props(queue_logical_id(spec.key))
    assert props["VisibilityTimeout"] >= spec.visibility_timeout
    assert props["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_logical_id(spec.key), "Arn"]},
        "maxReceiveCount": spec.max_receive_count,
    }
    assert props["MessageRetentionPeriod"] == 14 * 86400
    assert synth.props(dlq_logical_id(spec.key))["MessageRetentionPeriod"] == 14 * 86400


def test_every_queue_is_encrypted_and_refuses_plain_http(synth):
    queues = synth.of_type("AWS::SQS::Queue")
    enforced = set()
    for policy in synth.of_type("AWS::SQS::QueuePolicy").values():
        props = policy["Properties"]
        for statement in props["PolicyDocument"]["Statement"]:
            if (
                statement["Effect"] == "Deny"
                and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
                and statement["Action"] == "sqs:*"
            ):
                enforced |= {q["Ref"] for q in props["Queues"]}
    assert enforced == set(queues)
    for logical_id, queue in queues.items():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True, logical_id


def test_visibility_is_six_worker_timeouts_and_receives_fit_the_retention(synth):
    """AWS's rule for a Lambda event source: visibility >= 6 x the function's timeout, read
    here from the template (the mapping's function and the queue it polls)."""
    for mapping in synth.of_type("AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        source = props["EventSourceArn"].get("Fn::GetAtt", [None])[0]
        if synth.resources.get(source, {}).get("Type") != "AWS::SQS::Queue" or source in (
            NOTIFICATIONS_QUEUE_ID,
            SECOND_TICK_QUEUE_ID,
        ):
            continue  # the notifications and second-tick queues have their own rules
        timeout = synth.props(props["FunctionName"]["Ref"])["Timeout"]
        queue = synth.props(source)
        assert queue["VisibilityTimeout"] >= 6 * timeout, source
        receives = queue["RedrivePolicy"]["maxReceiveCount"]
        assert 5 <= receives <= 10, source  # 5: AWS's minimum for a Lambda event source
        # A message that keeps failing reaches its DLQ long before the queue would drop it.
        assert receives * queue["VisibilityTimeout"] < queue["MessageRetentionPeriod"] / 10


def test_every_record_of_a_batch_gets_a_jobs_longest_timeout(synth):
    """A batch's records run at once, so each has the whole invocation: the worker's timeout
    must hold the longest timeoutSeconds a job may ask for plus the worker's own overhead,
    within Lambda's 900 s; its queues' visibility stays six times that."""
    from jobsched.domain.models import MAX_TIMEOUT_SECONDS
    from jobsched.services.worker import WORKER_OVERHEAD_SECONDS

    for mapping in synth.of_type("AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        source = props["EventSourceArn"].get("Fn::GetAtt", [None])[0]
        if synth.resources.get(source, {}).get("Type") != "AWS::SQS::Queue" or source in (
            NOTIFICATIONS_QUEUE_ID,
            SECOND_TICK_QUEUE_ID,
        ):
            continue  # the notifications and second-tick queues have their own rules
        timeout = synth.props(props["FunctionName"]["Ref"])["Timeout"]
        assert MAX_TIMEOUT_SECONDS + WORKER_OVERHEAD_SECONDS <= timeout <= 900
        assert synth.props(source)["VisibilityTimeout"] >= 6 * timeout
        # Deferrals in place spend at most deferral_receives; the rest are failures.
        spec = next(q for q in QUEUES if queue_logical_id(q.key) == source)
        assert synth.props(source)["RedrivePolicy"]["maxReceiveCount"] == (
            spec.deferral_receives + spec.failure_receives
        )
        assert spec.failure_receives >= 5
