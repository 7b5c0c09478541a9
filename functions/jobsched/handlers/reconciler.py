"""`reconciler` Lambda: EventBridge every minute; the rule input may name one shard (fan-out)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from ..observability import log_metrics, logger, tracer
from ..wiring import container


def shard_of(event: dict[str, Any] | None) -> int | None:
    """`{"shard": n}` from the rule input (or an event's detail); None means every shard."""
    event = event or {}
    detail = event.get("detail")
    for source in (event, detail if isinstance(detail, dict) else {}):
        if source.get("shard") is not None:
            return int(source["shard"])
    return None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    services = container()
    shard = shard_of(event)
    if shard is None:
        report = services.reconciler.reconcile_all()
    else:
        report = services.reconciler.reconcile_shard(shard % services.settings.shard_count)
    if report.repaired:
        logger.info("reconciled", extra={"shards": report.shards, "repaired": len(report.repaired)})
    return report.as_dict()
