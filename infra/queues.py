"""One queue per priority (jobsched.store.schema.QUEUES), each with its DLQ and redrive policy,
plus the queue that receives stream batches the outbox mapping gives up on and the one that
receives the every-minute ticks EventBridge could not deliver."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from jobsched.services.worker import DEFER_IN_PLACE, FAILURE_BACKOFF_CAP_SECONDS
from jobsched.store.schema import QUEUES, QueueSpec

from .names import (
    FUNCTIONS_BY_NAME,
    OUTBOX_FAILURE_QUEUE_ID,
    TICK_FAILURE_QUEUE_ID,
    WORKER,
    dlq_logical_id,
    queue_logical_id,
)

RETENTION = Duration.days(14)  # the SQS maximum: time to notice and redrive
# AWS's rule for a queue that feeds a Lambda function: a visibility timeout of at least six
# times the function's timeout, so a batch the poller received but could not hand over (the
# function throttled) is retried by Lambda before SQS makes it visible again. 6 x 900 s =
# 5400 s. While a run executes the worker's heartbeat sets the message's visibility to
# the lease plus 5 s (65 s) and renews it, so a crashed worker's run is still picked up
# within minutes.
VISIBILITY_PER_FUNCTION_TIMEOUT = 6
WORKER_QUEUE_VISIBILITY = VISIBILITY_PER_FUNCTION_TIMEOUT * FUNCTIONS_BY_NAME[WORKER].timeout_seconds

# How fast a record that keeps failing reaches a person: every receive of a message is either
# a deferral (the worker leaves it invisible for at most DEFER_IN_PLACE = 60 s, only on its
# first deferral_receives receives) or a failure, after which the worker sets its visibility to
# a jittered backoff of at most FAILURE_BACKOFF_CAP_SECONDS = 60 s (10, 20, 40, 60, 60, ... s
# for receives 1, 2, 3, 4, 5, ...; jobsched.services.worker.failure_backoff_seconds). The 5400 s
# above only applies to a batch Lambda could not hand to the function. So with maxReceiveCount
# 10, the waits before the DLQ add up to at most 10 x 60 s = 600 s, which leaves 300 s of the
# 15 minutes for the ten failing attempts themselves (30 s each: a failure before the claim
# takes milliseconds) and the pollers' latency; the DLQ alarms take it from there.
DEAD_LETTER_WITHIN_SECONDS = 15 * 60
ATTEMPT_ALLOWANCE_SECONDS = 30  # per receive: the failing attempt and the poller picking it up
LONGEST_WAIT_PER_RECEIVE = max(DEFER_IN_PLACE, FAILURE_BACKOFF_CAP_SECONDS)


def seconds_to_dead_letter(spec: QueueSpec) -> int:
    """The longest a message the worker keeps failing on (or deferring, then failing on) takes
    to reach the DLQ: each of its maxReceiveCount receives waits at most
    LONGEST_WAIT_PER_RECEIVE, plus ATTEMPT_ALLOWANCE_SECONDS for the attempt itself."""
    return spec.max_receive_count * (LONGEST_WAIT_PER_RECEIVE + ATTEMPT_ALLOWANCE_SECONDS)


def check_dead_letter_arithmetic(spec: QueueSpec) -> None:
    """Raises ValueError when a failing record of `spec`'s queue could take longer than
    DEAD_LETTER_WITHIN_SECONDS to reach its DLQ (synth refuses such a stack)."""
    worst = seconds_to_dead_letter(spec)
    if worst > DEAD_LETTER_WITHIN_SECONDS:
        raise ValueError(
            f"queue {spec.key}: {spec.max_receive_count} receives x ({LONGEST_WAIT_PER_RECEIVE} s wait + "
            f"{ATTEMPT_ALLOWANCE_SECONDS} s attempt) = {worst} s before the DLQ, over "
            f"{DEAD_LETTER_WITHIN_SECONDS} s: lower maxReceiveCount or the backoff cap"
        )


def visibility_timeout(spec: QueueSpec) -> int:
    """The schema's value (what local mode uses), raised to AWS's rule for Lambda event sources."""
    return max(spec.visibility_timeout, WORKER_QUEUE_VISIBILITY)


def _queue(scope: Construct, construct_id: str, logical_id: str, **props: object) -> sqs.Queue:
    queue = sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        # Messages are pointers to runs; the reconciler republishes from the Runs table.
        removal_policy=RemovalPolicy.DESTROY,
        **props,  # type: ignore[arg-type]
    )
    queue.node.default_child.override_logical_id(logical_id)  # type: ignore[union-attr]
    return queue


class Queues(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.specs: dict[str, QueueSpec] = {q.key: q for q in QUEUES}
        self.queues: dict[str, sqs.Queue] = {}
        self.dlqs: dict[str, sqs.Queue] = {}
        for spec in QUEUES:
            check_dead_letter_arithmetic(spec)
            dlq = _queue(self, spec.key + "-dlq", dlq_logical_id(spec.key), retention_period=RETENTION)
            self.dlqs[spec.key] = dlq
            self.queues[spec.key] = _queue(
                self,
                spec.key,
                queue_logical_id(spec.key),
                retention_period=RETENTION,
                visibility_timeout=Duration.seconds(visibility_timeout(spec)),
                # 10 receives: the worker defers a run in place (the message stays, invisible
                # for the wait) only on its first 5 receives and hands it to the outbox after,
                # so the last 5 (AWS's minimum for a Lambda event source) are always failures;
                # a message the worker keeps failing on reaches the DLQ within 15 minutes
                # (check_dead_letter_arithmetic above), well inside the 14-day retention.
                dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=spec.max_receive_count),
            )
        self.outbox_failures = _queue(
            self, "outbox-failures", OUTBOX_FAILURE_QUEUE_ID, retention_period=RETENTION
        )
        # The scheduled rules' targets' dead-letter queue: a tick EventBridge gave up on
        # (permission refused, function missing, retries spent) leaves a message here.
        self.tick_failures = _queue(self, "tick-failures", TICK_FAILURE_QUEUE_ID, retention_period=RETENTION)

    def all_dead_letter_queues(self) -> dict[str, sqs.Queue]:
        """Every queue whose depth means something was given up on."""
        return {
            **{f"{k}-dlq": q for k, q in self.dlqs.items()},
            "outbox-failures": self.outbox_failures,
            "tick-failures": self.tick_failures,
        }
