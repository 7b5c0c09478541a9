"""`worker` Lambda's entry point: before anything that may fail to load, every message of the
batch is held for START_HOLD_SECONDS (`hold`); then the worker's handler (handlers.worker)
takes the batch.

The run queues' visibility timeout is 5,400 s, AWS's rule for an SQS event source (six times
the worker's 900 s timeout, so that Lambda can retry a batch it could not hand over while the
function was throttled). The worker's handler holds its batch for the lease plus 5 s, and
backs off a record that failed, but only once its code has loaded and its services are
built. A batch whose invocation fails before that (the code or the layer cannot be imported
after a bad deploy, a setting does not parse, a client cannot be built) would wait out the
whole timeout on each receive: ten receives, 15 hours to the DLQ. Held first, each message
comes back within START_HOLD_SECONDS and reaches its DLQ after maxReceiveCount receives,
minutes later (jobsched.cdk.dead_letters). Such a failure is logged and counted
(`WorkerStartFailed`, alarmed as `worker-cannot-start`), and the invocation fails with it
(Lambda's `Errors`).

Nothing from jobsched, Powertools or pydantic is imported before the hold: only the standard
library and boto3 (from the layer; the hold is skipped, and logged, if even that fails). A
batch Lambda could not hand to the function at all (throttled) never reaches this code: it
keeps the queue's visibility timeout, which is what lets Lambda retry it without spending
its receives; the `worker-throttles` alarm tells of it."""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from functools import cache
from typing import Any

WORKER_HANDLER = "jobsched.handlers.worker"
# Long enough for a cold start to import the worker and build its services (a few seconds),
# after which its own hold (the lease plus 5 s) takes over; short enough that a message whose
# worker cannot start spends its receives in minutes. At most the longest wait a receive may
# add (jobsched.cdk.dead_letters checks it).
START_HOLD_SECONDS = 30
START_FAILED_METRIC = "WorkerStartFailed"
MAX_BATCH = 10  # ChangeMessageVisibilityBatch

log = logging.getLogger("jobsched.worker_entry")


def handler(event: dict[str, Any], context: Any) -> Any:
    """Hold the batch's messages, then hand the batch to the worker's handler and return what
    it returns. Raises what loading or starting the worker raised (after counting it), and
    what the worker's handler raises."""
    hold(event.get("Records") or [], START_HOLD_SECONDS)
    try:
        worker = importlib.import_module(WORKER_HANDLER)
    except Exception:
        start_failed("the worker's code could not be loaded")
        raise
    try:
        return worker.handler(event, context)
    except Exception as exc:
        if not records_ran(exc):
            start_failed("the worker could not start its batch")
        raise


def records_ran(exc: BaseException) -> bool:
    """Whether `exc` is the batch processor's: every record ran and failed (each already
    backed off by the worker), as opposed to a failure before the records started."""
    from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

    return isinstance(exc, BatchProcessingError)


def hold(records: list[dict[str, Any]], seconds: int) -> None:
    """Make each record's message (its `eventSourceARN` and `receiptHandle`) visible again
    `seconds` from now: one ChangeMessageVisibilityBatch per queue and ten messages. Never
    raises: a change SQS refused, or a call that failed, is logged, and that message keeps the
    queue's visibility timeout."""
    by_queue: dict[str, list[str]] = {}
    for record in records:
        arn, handle = record.get("eventSourceARN") or "", record.get("receiptHandle") or ""
        if arn and handle:
            by_queue.setdefault(arn, []).append(handle)
    for arn, handles in by_queue.items():
        refused = 0
        try:
            sqs = _sqs()
            url = queue_url(sqs.meta.endpoint_url, arn)
            for start in range(0, len(handles), MAX_BATCH):
                entries = [
                    {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                    for i, handle in enumerate(handles[start : start + MAX_BATCH])
                ]
                response = sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
                refused += len(response.get("Failed") or [])
        except Exception:
            log.exception("messages not held before the worker starts", extra={"queue": arn})
            continue
        if refused:
            log.warning(
                "messages not held before the worker starts", extra={"queue": arn, "refused": refused}
            )


def queue_url(endpoint_url: str, arn: str) -> str:
    """The URL of the queue `arn` names (arn:<partition>:sqs:<region>:<account>:<name>) at
    the SQS endpoint `endpoint_url`. Raises ValueError for anything else."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs":
        raise ValueError(f"not a queue ARN: {arn!r}")
    return f"{endpoint_url.rstrip('/')}/{parts[4]}/{parts[5]}"


@cache
def _sqs() -> Any:
    """An SQS client for the hold: two attempts, short timeouts (it goes before the batch)."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=1, read_timeout=2)
    return boto3.session.Session().client("sqs", config=config)


def start_failed(reason: str) -> None:
    """Log the exception being handled and count `WorkerStartFailed` as Powertools' metrics
    are counted (an embedded-metric-format line, in POWERTOOLS_METRICS_NAMESPACE with the
    `service` dimension), written here because Powertools may be what failed to load."""
    log.exception("worker could not start: %s", reason)
    namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE")
    if not namespace or os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() == "true":
        return
    service = os.environ.get("POWERTOOLS_SERVICE_NAME") or namespace
    document = {
        "_aws": {
            "Timestamp": int(time.time() * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [["service"]],
                    "Metrics": [{"Name": START_FAILED_METRIC, "Unit": "Count"}],
                }
            ],
        },
        "service": service,
        START_FAILED_METRIC: 1,
    }
    print(json.dumps(document, separators=(",", ":")), flush=True)
