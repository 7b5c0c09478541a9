"""What a run does: call a Python handler or one external target, passing the run key as
the idempotency key, and class every failure as retryable, ambiguous or permanent."""

from .authority import Refusal, TargetAuthority
from .aws_targets import (
    classify_botocore_error,
    classify_client_error,
    execution_arn,
    execution_name,
    sqs_deduplication_id,
)
from .dispatch import ClientFactory, EffectClientFactory, RoleClientFactory, TargetRunner
from .http import HttpTargetClient
from .invocation import Invocation
from .registry import Handler, HandlerModuleError, HandlerRegistry, handler, import_handler_modules, registry
from .roles import AssumedRoles, Credentials, external_id, session_identity
from .ssrf import Destination, DestinationPolicy, refusal_reason

__all__ = [
    "AssumedRoles",
    "ClientFactory",
    "Credentials",
    "Destination",
    "DestinationPolicy",
    "EffectClientFactory",
    "Handler",
    "HandlerModuleError",
    "HandlerRegistry",
    "HttpTargetClient",
    "Invocation",
    "Refusal",
    "RoleClientFactory",
    "TargetAuthority",
    "TargetRunner",
    "classify_botocore_error",
    "classify_client_error",
    "execution_arn",
    "execution_name",
    "external_id",
    "handler",
    "import_handler_modules",
    "refusal_reason",
    "registry",
    "session_identity",
    "sqs_deduplication_id",
]
