"""What a run does: call a Python handler or one external target, passing the run key as
the idempotency key, and class every failure as retryable, ambiguous or permanent."""

from .aws_targets import (
    classify_botocore_error,
    classify_client_error,
    execution_arn,
    execution_name,
    sqs_deduplication_id,
)
from .dispatch import ClientFactory, EffectClientFactory, TargetRunner
from .http import HttpTargetClient
from .invocation import Invocation
from .registry import Handler, HandlerRegistry, registry
from .ssrf import Destination, DestinationPolicy, refusal_reason

__all__ = [
    "ClientFactory",
    "Destination",
    "DestinationPolicy",
    "EffectClientFactory",
    "Handler",
    "HandlerRegistry",
    "HttpTargetClient",
    "Invocation",
    "TargetRunner",
    "classify_botocore_error",
    "classify_client_error",
    "execution_arn",
    "execution_name",
    "refusal_reason",
    "registry",
    "sqs_deduplication_id",
]
