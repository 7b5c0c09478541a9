"""`sweeper` Lambda: EventBridge every minute (one rule target per shard group)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from ..observability import log_metrics, logger, tracer
from ..wiring import container


def shards_of(event: dict[str, Any], shard_count: int) -> list[int] | None:
    """The rule input may name `shard` or `shards`; otherwise every shard is swept."""
    if "shard" in event:
        return [int(event["shard"]) % shard_count]
    if "shards" in event:
        return sorted({int(s) % shard_count for s in event["shards"]})
    return None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    services = container()
    report = services.sweeper.sweep(shards_of(event or {}, services.settings.shard_count))
    return report.as_dict()
