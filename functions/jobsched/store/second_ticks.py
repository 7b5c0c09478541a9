"""SQS adapter: the reconciler's second tick each minute.

EventBridge rules tick at most once a minute, and a rate rule's ticks fall at whatever second
of the minute it was created at. So the pass a rule starts sends its own shard's
`{"shard": n}` to the second-tick queue (jobsched.cdk.queues), which holds it
SECOND_TICK_DELAY_SECONDS: every shard is reconciled twice a minute, half a minute apart,
whatever phase its rule has."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.metrics import NO_METRICS, Metrics, Unit
from ..observability import logger


class SecondTicks:
    """Sends second ticks. `client` is an SQS client (boto3; its own retries apply: the
    wiring gives it two attempts and short timeouts, as the send comes before the pass); with
    no `queue_url` (local mode, which ticks every 30 s itself) nothing is sent."""

    def __init__(self, client: Any, queue_url: str | None, metrics: Metrics = NO_METRICS) -> None:
        self._client = client
        self._url = queue_url
        self._metrics = metrics

    @property
    def enabled(self) -> bool:
        return self._url is not None

    def send(self, shard: int) -> bool:
        """Queue the second tick of `shard` (the queue delays it). Returns whether SQS took it;
        never raises: a tick not sent costs one pass, which the next minute's tick makes up,
        and is logged and counted (`SecondTicksNotSent`)."""
        if self._url is None:
            return False
        try:
            self._client.send_message(QueueUrl=self._url, MessageBody=json.dumps({"shard": shard}))
        except (BotoCoreError, ClientError):
            logger.exception("second tick not sent", extra={"shard": shard})
            self._metrics.add("SecondTicksNotSent", 1, Unit.COUNT)
            return False
        return True
