"""`reconciler` Lambda: EventBridge every minute, the rule input naming one shard (fan-out),
and the same shard again half a minute later: the rule's pass first sends its shard's second
tick to the second-tick queue (store.second_ticks), which delays it, and the queue's mapping
delivers it as an SQS event whose records each name one shard."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from ..domain.metrics import Unit
from ..observability import log_metrics, logger, tracer
from ..services.reconciler import RepairReport
from ..wiring import container

# A failed pass is reported as a batch item failure; a batch whose every record failed (one
# record a batch) raises, so the invocation fails and the function's error alarm sees it, as
# it sees a rule's pass fail. The message is never received again (the queue's visibility
# timeout outlasts its retention): the next tick does its work.
processor = BatchProcessor(event_type=EventType.SQS)


def shard_of(event: dict[str, Any] | None) -> int | None:
    """`{"shard": n}` from the rule input (or an event's detail); None means every shard."""
    event = event or {}
    detail = event.get("detail")
    for source in (event, detail if isinstance(detail, dict) else {}):
        if source.get("shard") is not None:
            return int(source["shard"])
    return None


def reconcile(shard: int | None) -> RepairReport:
    """One pass over `shard` (taken modulo the shard count), or over every shard when None."""
    services = container()
    if shard is None:
        report = services.reconciler.reconcile_all()
    else:
        report = services.reconciler.reconcile_shard(shard % services.settings.shard_count)
    if report.repaired:
        logger.info("reconciled", extra={"shards": report.shards, "repaired": len(report.repaired)})
    return report


def second_tick_shard(body: str) -> int:
    """The shard a second tick's body names: `{"shard": n}`, n a whole number >= 0 (taken
    modulo the shard count by the pass). Raises ValueError for anything else."""
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    shard = payload.get("shard") if isinstance(payload, dict) else None
    if not isinstance(shard, int) or isinstance(shard, bool) or shard < 0:
        raise ValueError(f'the body must be {{"shard": <whole number >= 0>}}, got {body[:100]!r}')
    return shard


def second_tick(record: SQSRecord) -> None:
    """The second tick's pass over the shard its body names (counted: `SecondTickPasses`).
    A body that names none is logged, counted and dropped (retrying cannot help); a pass
    that fails is logged and raises."""
    services = container()
    try:
        shard = second_tick_shard(record.body)
    except ValueError as exc:
        extra = {"message_id": record.message_id, "error": str(exc)}
        logger.error("unreadable second tick: dropped", extra=extra)
        services.metrics.add("TicksUnreadable", 1, Unit.COUNT)
        return
    try:
        reconcile(shard)
    except Exception:
        logger.exception("second tick's pass failed", extra={"shard": shard})
        raise
    services.metrics.add("SecondTickPasses", 1, Unit.COUNT)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """A rule's tick (`{"shard": n}`, or nothing: every shard) sends the shard's second tick,
    then returns the pass's report; the second-tick queue's SQS event returns its batch item
    failures."""
    if isinstance(event, dict) and isinstance(event.get("Records"), list):
        return dict(process_partial_response(event, second_tick, processor, context))
    shard = shard_of(event)
    if shard is not None:
        # Before the pass, so the next one comes half a minute after this one started
        # however long this takes, and a pass that fails still has its second.
        container().second_ticks.send(shard % container().settings.shard_count)
    return reconcile(shard).as_dict()
