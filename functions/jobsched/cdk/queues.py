"""One queue per priority (jobsched.store.schema.QUEUES), each with its DLQ and redrive policy,
plus the queue that receives stream batches the outbox mapping gives up on, the one that
receives the every-minute ticks EventBridge could not deliver, and the one that delays the
reconciler's second tick each minute."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched.store.schema import QUEUES, QueueSpec

from .dead_letters import VISIBILITY_PER_FUNCTION_TIMEOUT, check_dead_letter_arithmetic, visibility_timeout
from .names import (
    EVENTS_FAILURE_QUEUE_ID,
    FUNCTIONS_BY_NAME,
    NOTIFICATIONS_DLQ_ID,
    NOTIFICATIONS_MAX_RECEIVES,
    NOTIFICATIONS_QUEUE_ID,
    NOTIFIER,
    OUTBOX_FAILURE_QUEUE_ID,
    RECONCILER,
    SECOND_TICK_DELAY_SECONDS,
    SECOND_TICK_QUEUE_ID,
    SECOND_TICK_RETENTION_SECONDS,
    TICK_FAILURE_QUEUE_ID,
    dlq_logical_id,
    queue_logical_id,
)

RETENTION = Duration.days(14)  # the SQS maximum: time to notice and redrive


def _queue(scope: Queues, construct_id: str, logical_id: str, **props: object) -> sqs.Queue:
    queue = sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        # Messages are pointers to runs; the reconciler republishes from the Runs table.
        removal_policy=RemovalPolicy.DESTROY,
        **props,  # type: ignore[arg-type]
    )
    queue.node.default_child.override_logical_id(scope.logical_prefix + logical_id)  # type: ignore[union-attr]
    return queue


class Queues(Construct):
    """`logical_prefix` goes before each queue's fixed logical id (names.Naming)."""

    def __init__(self, scope: Construct, construct_id: str, *, logical_prefix: str = "") -> None:
        super().__init__(scope, construct_id)
        self.logical_prefix = logical_prefix
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
        # The events mappings' on-failure destination: a batch of records whose invocations kept
        # failing until they aged out (jobsched.cdk.event_sources), named by shard and sequence;
        # and the events function's own: a record it set aside, with the requests that replay
        # it (jobsched.services.record_delivery).
        self.events_failures = _queue(
            self, "events-failures", EVENTS_FAILURE_QUEUE_ID, retention_period=RETENTION
        )
        # Notification deliveries (services.notifications): retried by the queue itself, a
        # receive every visibility timeout (six times the notifier's, AWS's rule for a Lambda
        # event source), then kept on their DLQ, whose depth alarms.
        self.notifications_dlq = _queue(
            self, "notifications-dlq", NOTIFICATIONS_DLQ_ID, retention_period=RETENTION
        )
        self.notifications = _queue(
            self,
            "notifications",
            NOTIFICATIONS_QUEUE_ID,
            retention_period=RETENTION,
            visibility_timeout=Duration.seconds(
                VISIBILITY_PER_FUNCTION_TIMEOUT * FUNCTIONS_BY_NAME[NOTIFIER].timeout_seconds
            ),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.notifications_dlq, max_receive_count=NOTIFICATIONS_MAX_RECEIVES
            ),
        )
        # The scheduled rules' targets' dead-letter queue: a tick EventBridge gave up on
        # (permission refused, function missing, retries spent) leaves a message here.
        self.tick_failures = _queue(self, "tick-failures", TICK_FAILURE_QUEUE_ID, retention_period=RETENTION)
        # The reconciler's second tick each minute (store.second_ticks): delayed half a
        # minute, expired two minutes after it was sent. Its visibility timeout (the
        # function's, six times over, as AWS asks of a Lambda event source) outlasts the
        # retention, so a pass that failed is never received again: the next tick does its work.
        self.second_ticks = _queue(
            self,
            "second-ticks",
            SECOND_TICK_QUEUE_ID,
            delivery_delay=Duration.seconds(SECOND_TICK_DELAY_SECONDS),
            retention_period=Duration.seconds(SECOND_TICK_RETENTION_SECONDS),
            visibility_timeout=Duration.seconds(
                VISIBILITY_PER_FUNCTION_TIMEOUT * FUNCTIONS_BY_NAME[RECONCILER].timeout_seconds
            ),
        )

    def failure_queues(self) -> dict[str, sqs.Queue]:
        """The queues that keep what a path other than the run queues gave up on: no function
        sends to or takes from them (Settings.own_queue_urls names them to the functions)."""
        return {
            "outbox-failures": self.outbox_failures,
            "events-failures": self.events_failures,
            "notifications-dlq": self.notifications_dlq,
            "tick-failures": self.tick_failures,
        }

    def all_dead_letter_queues(self) -> dict[str, sqs.Queue]:
        """Every queue whose depth means something was given up on."""
        return {**{f"{k}-dlq": q for k, q in self.dlqs.items()}, **self.failure_queues()}
