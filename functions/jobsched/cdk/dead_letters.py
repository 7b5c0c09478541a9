"""The run queues' timing, as plain arithmetic over the queue specs and the worker's waits (no
CDK, for jobsched.cdk.queues and the tests): the visibility timeout AWS's rule for a Lambda event
source asks for, and how fast a message the worker keeps failing on reaches its DLQ (the
check synth makes)."""

from __future__ import annotations

from jobsched.handlers.worker_entry import START_HOLD_SECONDS
from jobsched.services.worker import DEFER_IN_PLACE, FAILURE_BACKOFF_CAP_SECONDS
from jobsched.store.schema import QueueSpec

from .names import FUNCTIONS_BY_NAME, WORKER

# How fast a record that keeps failing reaches a person: every receive of a message is either
# a deferral (the worker leaves it invisible for at most DEFER_IN_PLACE = 60 s, only on its
# first deferral_receives receives), a failure, after which the worker sets its visibility to
# a jittered backoff of at most FAILURE_BACKOFF_CAP_SECONDS = 60 s (10, 20, 40, 60, 60, ... s
# for receives 1, 2, 3, 4, 5, ...; jobsched.services.worker.failure_backoff_seconds), or an
# invocation whose worker could not start (its code not loaded, its services not built),
# whose messages the function's entry point held for START_HOLD_SECONDS = 30 s before anything
# could fail (jobsched.handlers.worker_entry). The 5400 s below only applies to a batch Lambda
# could not hand to the function (throttled), which Lambda retries meanwhile. So with
# maxReceiveCount 10, the waits before the DLQ add up to at most 10 x 60 s = 600 s, which
# leaves 300 s of the 15 minutes for the ten failing attempts themselves (30 s each: a failure
# before the claim takes milliseconds) and the pollers' latency; the DLQ alarms take it from
# there.
DEAD_LETTER_WITHIN_SECONDS = 15 * 60
ATTEMPT_ALLOWANCE_SECONDS = 30  # per receive: the failing attempt and the poller picking it up
LONGEST_WAIT_PER_RECEIVE = max(DEFER_IN_PLACE, FAILURE_BACKOFF_CAP_SECONDS, START_HOLD_SECONDS)


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


# AWS's rule for a queue that feeds a Lambda function: a visibility timeout of at least six
# times the function's timeout, so a batch the poller received but could not hand over (the
# function throttled) is retried by Lambda before SQS makes it visible again. 6 x 900 s =
# 5400 s. Each worker invocation first holds its batch's messages for START_HOLD_SECONDS
# (before anything that may fail to load), then, once the worker has started, for the lease
# plus 5 s (65 s), and while a run executes the heartbeat renews that, so a run whose
# invocation died is picked up again about a minute later.
VISIBILITY_PER_FUNCTION_TIMEOUT = 6
WORKER_QUEUE_VISIBILITY = VISIBILITY_PER_FUNCTION_TIMEOUT * FUNCTIONS_BY_NAME[WORKER].timeout_seconds


def visibility_timeout(spec: QueueSpec) -> int:
    """The schema's value (what local mode uses), raised to AWS's rule for Lambda event sources."""
    return max(spec.visibility_timeout, WORKER_QUEUE_VISIBILITY)
