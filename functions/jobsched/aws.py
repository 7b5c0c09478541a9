"""boto3 clients, built once per process with the retry mode the scheduler relies on.

Two kinds:

- `client(service)`: the scheduler's own calls (DynamoDB, SQS). Standard retries, timeouts
  included: every one of these calls is conditional or idempotent, so a repeat is harmless.
- `effect_client(service, timeout_seconds)`: a run's call to its target (Lambda Invoke, SQS
  SendMessage, PutEvents, StartExecution). A retried read timeout would run a slow target
  again (a 12 s function behind a 10 s read timeout ran six times per attempt), so
  the read timeout covers the run's budget and only failures that prove the request was
  not carried out are retried here: a refused connection, a connect timeout, throttling.
  Anything ambiguous goes back to the run's retry policy as an AmbiguousError.
"""

from __future__ import annotations

import math
import random
import threading
from functools import cache, lru_cache
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

from .settings import settings

# Standard mode retries throttling with backoff; what still fails surfaces as a domain error.
_CONFIG = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=3, read_timeout=10)
# A call worth a few seconds at most, before the work it precedes (the reconciler's second
# tick, sent before its pass): an SQS brownout must not eat the pass's 50 s.
QUICK_CONFIG = Config(
    retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=1, read_timeout=2
)

EFFECT_CONNECT_TIMEOUT = 3
EFFECT_MAX_ATTEMPTS = 3  # of a request that provably did not run (see _retry_if_not_run)
EFFECT_BACKOFF_BASE = 0.1  # seconds; full jitter, doubling per attempt
MAX_EFFECT_TIMEOUT = 900  # Lambda's longest synchronous invocation
EFFECT_CLIENT_CACHE = 128  # clients kept per process (all services, timeout buckets and role sessions)

# Error codes that mean "refused before it was run" (the request is safe to send again).
_NOT_RUN_CODES = frozenset(
    {
        "TooManyRequestsException",  # Lambda: concurrency or rate throttle, never invoked
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "EC2ThrottledException",
    }
)


# Clients are thread-safe once built, but building one reads boto3's default session, which
# is not: the worker's concurrent records would otherwise build their first clients at once.
_BUILDING = threading.Lock()


# The stores' own services: botocore's check of their requests is left to the service unless
# Settings.validate_store_requests asks for it.
STORE_SERVICES = frozenset({"dynamodb", "sqs"})


@cache
def client(service: str, *, quick: bool = False) -> Any:
    """A client of `service` with the SDK's standard retries; `quick`: two attempts in all and
    timeouts of 1 s (connect) and 2 s (read), for a call that must not hold up what follows."""
    config = QUICK_CONFIG if quick else _CONFIG
    if service in STORE_SERVICES and not settings().validate_store_requests:
        config = config.merge(Config(parameter_validation=False))
    with _BUILDING:
        return boto3.client(service, config=config, endpoint_url=settings().endpoint_url)  # type: ignore[call-overload]


def timeout_bucket(seconds: float) -> int:
    """The read timeout for an effect with `seconds` of budget: rounded up (the target gets at
    least its budget; the worker's own wait ends the attempt on time) to whole seconds up to
    10 s and to 5 s steps beyond, so a handful of clients serves every job's timeout."""
    seconds = max(1.0, min(float(seconds), MAX_EFFECT_TIMEOUT))
    if seconds <= 10:
        return math.ceil(seconds)
    return min(MAX_EFFECT_TIMEOUT, 5 * math.ceil(seconds / 5))


def effect_client(service: str, timeout_seconds: float) -> Any:
    """A client for a run's target call whose read timeout covers `timeout_seconds`."""
    return _effect_client(service, timeout_bucket(timeout_seconds), settings().endpoint_url)


def role_effect_client(service: str, timeout_seconds: float, credentials: Any) -> Any:
    """`effect_client`, calling with a tenant's assumed-role credentials
    (jobsched.targets.roles.Credentials); one client per session, kept while it is used."""
    keys = (credentials.access_key_id, credentials.secret_access_key, credentials.session_token)
    return _effect_client(service, timeout_bucket(timeout_seconds), settings().endpoint_url, keys)


@lru_cache(maxsize=EFFECT_CLIENT_CACHE)
def _effect_client(
    service: str, read_timeout: int, endpoint_url: str | None, keys: tuple[str, str, str] | None = None
) -> Any:
    config = Config(
        # botocore's own retries off (standard mode retries read timeouts); ours below.
        retries={"mode": "standard", "total_max_attempts": 1},
        connect_timeout=EFFECT_CONNECT_TIMEOUT,
        read_timeout=read_timeout,
        tcp_keepalive=True,  # a long synchronous invoke keeps its connection alive
    )
    signing: dict[str, str] = {}
    if keys is not None:
        signing = dict(
            zip(("aws_access_key_id", "aws_secret_access_key", "aws_session_token"), keys, strict=True)
        )
    with _BUILDING:
        made = boto3.client(service, config=config, endpoint_url=endpoint_url, **signing)  # type: ignore[call-overload]
    made.meta.events.register(
        f"needs-retry.{made.meta.service_model.service_id.hyphenize()}", _retry_if_not_run
    )
    return made


def _retry_if_not_run(
    attempts: int, response: Any = None, caught_exception: Exception | None = None, **_: Any
) -> float | None:
    """botocore's needs-retry hook: seconds to wait before sending again, or None not to.

    Sent again only when the request cannot have been carried out: the connection was never
    made, or the service answered with a throttle. A read timeout, a dropped connection or a
    5xx may follow a completed effect, so they are never retried here."""
    if attempts >= EFFECT_MAX_ATTEMPTS:
        return None
    if caught_exception is not None:
        not_run = isinstance(caught_exception, EndpointConnectionError | ConnectTimeoutError)
    elif response is not None:
        http, parsed = response
        code = str((parsed or {}).get("Error", {}).get("Code") or "")
        not_run = code in _NOT_RUN_CODES or (http.status_code == 429 and bool(code))
    else:
        not_run = False
    if not not_run:
        return None
    return random.uniform(0, EFFECT_BACKOFF_BASE * 2 ** (attempts - 1))
