"""Queues: one per schema QueueSpec with its DLQ and redrive policy, SQS-managed SSE, TLS only."""

from __future__ import annotations

import pytest
from jobsched.store.schema import QUEUES

from infra.names import OUTBOX_FAILURE_QUEUE_ID, dlq_logical_id, queue_logical_id

KEYS = [q.key for q in QUEUES]


def test_exactly_the_schema_queues_their_dlqs_and_the_outbox_failure_queue(synth):
    expected = {queue_logical_id(k) for k in KEYS} | {dlq_logical_id(k) for k in KEYS}
    assert set(synth.of_type("AWS::SQS::Queue")) == expected | {OUTBOX_FAILURE_QUEUE_ID}


@pytest.mark.parametrize("spec", QUEUES, ids=KEYS)
def test_queue_settings_and_redrive_follow_the_spec(synth, spec):
    props = synth.props(queue_logical_id(spec.key))
    assert props["VisibilityTimeout"] == spec.visibility_timeout
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


def test_worker_timeout_fits_inside_every_visibility_timeout(synth):
    from infra.names import FUNCTIONS_BY_NAME, WORKER

    worker = FUNCTIONS_BY_NAME[WORKER]
    # Lambda refuses a mapping whose function may outlive the message's visibility.
    assert all(worker.timeout_seconds <= q.visibility_timeout for q in QUEUES)
