"""AWS service targets. Each call carries the run key so a retried attempt is recognisable:

- Lambda: `runKey` in the event; the function dedupes (e.g. Powertools idempotency on it).
- SQS: `runKey` message attribute; FIFO queues also dedupe on it for 5 minutes.
- EventBridge: PutEvents has no idempotency at all, so consumers must dedupe on
  `detail.runKey`.
- Step Functions: the execution name is derived from the run key, and a standard workflow
  refuses a second execution with the same name for 90 days (express workflows do not).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    HTTPClientError,
    ParamValidationError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from ..domain.errors import AmbiguousError, ExecutionError, PermanentError, RetryableError
from ..domain.grants import own_event_source
from ..domain.models import EventBridgeTarget, LambdaTarget, SqsTarget, StepFunctionsTarget
from .invocation import Invocation

# Worth retrying whatever the HTTP status says: throttling, service-side trouble, and
# credential/clock hiccups of the scheduler itself (the job is not at fault).
RETRYABLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceeded",
        "ProvisionedThroughputExceededException",
        "SlowDown",
        "BandwidthLimitExceeded",
        "EC2ThrottledException",
        "KMSThrottlingException",
        "KmsThrottlingException",
        "KmsThrottled",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalServerError",
        "InternalServerException",
        "InternalError",
        "InternalFailure",
        "InternalException",
        "ServiceException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "ResourceConflictException",  # Lambda: an update of the function is in progress
        "ResourceNotReadyException",
        "ExecutionLimitExceeded",  # Step Functions: too many open executions
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "RequestTimeTooSkewed",
    }
)

# Failed PutEvents entries are retried unless the code says the entry itself is bad.
_PERMANENT_ENTRY_CODES = frozenset(
    {
        "ValidationException",
        "MalformedDetail",
        "InvalidArgument",
        "NotAuthorized",
        "ResourceNotFoundException",
    }
)


def _is_throttling(code: str) -> bool:
    return code in RETRYABLE_CODES or "Throttl" in code or "TooManyRequests" in code


def classify_client_error(exc: ClientError) -> ExecutionError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code") or "Unknown")
    message = f"{exc.operation_name}: {code}: {error.get('Message') or exc}"
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if _is_throttling(code):
        return RetryableError(message, error_class=code)
    if "AccessDenied" in code:  # some (KMSAccessDeniedException) come back as 5xx
        return PermanentError(message, error_class=code)
    if status is None or status >= 500:
        return RetryableError(message, error_class=code)
    return PermanentError(message, error_class=code)


def classify_botocore_error(exc: BotoCoreError) -> ExecutionError:
    name = type(exc).__name__
    if isinstance(exc, ReadTimeoutError | ConnectionClosedError | ResponseStreamingError):
        return AmbiguousError(f"request sent, no complete response: {exc}", error_class=name)
    if isinstance(exc, ParamValidationError):
        return PermanentError(str(exc), error_class=name)
    if isinstance(exc, HTTPClientError):  # the connection failed mid-exchange
        return AmbiguousError(str(exc), error_class=name)
    # Connect failures and timeouts (nothing sent), missing credentials: the job is not at fault.
    return RetryableError(str(exc), error_class=name)


@contextmanager
def aws_errors() -> Iterator[None]:
    try:
        yield
    except ClientError as exc:
        raise classify_client_error(exc) from exc
    except BotoCoreError as exc:
        raise classify_botocore_error(exc) from exc


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")


# --- Lambda ---


def invoke_lambda(client: Any, target: LambdaTarget, invocation: Invocation) -> Any:
    request: dict[str, Any] = {
        "FunctionName": target.function_arn,
        "InvocationType": "RequestResponse",
        "Payload": invocation.envelope_json().encode(),
    }
    if target.qualifier:
        request["Qualifier"] = target.qualifier
    with aws_errors():
        response = client.invoke(**request)
        raw = response.get("Payload")
        data = raw.read() if hasattr(raw, "read") else (raw or b"")
    result = _decode(data)
    if response.get("FunctionError"):
        detail = result if isinstance(result, dict) else {}
        kind = detail.get("errorType") or response["FunctionError"]
        text = detail.get("errorMessage") or (result if isinstance(result, str) else "")
        raise RetryableError(
            f"{target.function_arn} failed: {kind}: {text}"[:2000], error_class="FunctionError"
        )
    return result


def _decode(data: bytes) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: kept as text
        return data.decode("utf-8", errors="replace")


# --- SQS ---

# SQS deduplication ids: at most 128 of alphanumerics and ASCII punctuation.
_SQS_ID = re.compile(r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}")


def sqs_deduplication_id(run_key: str) -> str:
    if _SQS_ID.fullmatch(run_key):
        return run_key
    return hashlib.sha256(run_key.encode()).hexdigest()


def send_sqs(client: Any, target: SqsTarget, invocation: Invocation) -> dict[str, Any]:
    request: dict[str, Any] = {
        "QueueUrl": target.queue_url,
        "MessageBody": invocation.envelope_json(),
        "MessageAttributes": {"runKey": {"DataType": "String", "StringValue": invocation.run_key}},
    }
    if target.queue_url.endswith(".fifo"):
        request["MessageDeduplicationId"] = sqs_deduplication_id(invocation.run_key)
        request["MessageGroupId"] = target.message_group_id or invocation.job_id
    with aws_errors():
        response = client.send_message(**request)
    result = {"messageId": response["MessageId"]}
    if response.get("SequenceNumber"):
        result["sequenceNumber"] = response["SequenceNumber"]
    return result


# --- EventBridge ---


def put_event(client: Any, target: EventBridgeTarget, invocation: Invocation) -> dict[str, Any]:
    """`Source` is the target's, or the tenant's own (jobsched.<tenant digest>)."""
    source = target.source if target.source is not None else own_event_source(invocation.tenant)
    entry = {
        "Source": source,
        "DetailType": target.detail_type,
        "Detail": invocation.envelope_json(),
        "EventBusName": target.event_bus_name,
        "Resources": [],
    }
    with aws_errors():
        response = client.put_events(Entries=[entry])
    return {"eventId": accepted_entry(response, target.event_bus_name).get("EventId")}


def accepted_entry(response: dict[str, Any], bus: str) -> dict[str, Any]:
    """The one entry of a single-entry PutEvents answer. Raises PermanentError when the bus
    refused it for a reason that will not pass, RetryableError for any other refusal."""
    result: dict[str, Any] = (response.get("Entries") or [{}])[0]
    code = result.get("ErrorCode")
    if response.get("FailedEntryCount", 0) or code:
        code = code or "FailedEntry"
        message = f"PutEvents to {bus}: {code}: {result.get('ErrorMessage', '')}"
        if code in _PERMANENT_ENTRY_CODES or "AccessDenied" in code or code.startswith("Invalid"):
            raise PermanentError(message, error_class=code)
        raise RetryableError(message, error_class=code)
    return result


# --- Step Functions ---

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_NAME_MAX = 80
_NAME_HASH = 16


def execution_name(run_key: str) -> str:
    """Readable and deterministic: the sanitised run key plus a hash of the exact run key,
    so two keys that sanitise alike still get different names."""
    digest = hashlib.sha256(run_key.encode()).hexdigest()[:_NAME_HASH]
    readable = _NAME_UNSAFE.sub("-", run_key)[: _NAME_MAX - _NAME_HASH - 1]
    return f"{readable}-{digest}"


def execution_arn(state_machine_arn: str, name: str) -> str | None:
    """arn:<partition>:states:<region>:<account>:stateMachine:<sm>[:<version|alias>]
    -> arn:<partition>:states:<region>:<account>:execution:<sm>:<name>"""
    parts = state_machine_arn.split(":")
    if len(parts) < 7 or parts[0] != "arn" or parts[2] != "states" or parts[5] != "stateMachine":
        return None
    return ":".join([*parts[:5], "execution", parts[6], name])


def start_execution(client: Any, target: StepFunctionsTarget, invocation: Invocation) -> dict[str, Any]:
    name = execution_name(invocation.run_key)
    try:
        response = client.start_execution(
            stateMachineArn=target.state_machine_arn, name=name, input=invocation.envelope_json()
        )
    except ClientError as exc:
        if error_code(exc) == "ExecutionAlreadyExists":
            # An earlier attempt started it: that is success, not a failure.
            return {"executionArn": execution_arn(target.state_machine_arn, name), "alreadyStarted": True}
        raise classify_client_error(exc) from exc
    except BotoCoreError as exc:
        raise classify_botocore_error(exc) from exc
    return {"executionArn": response["executionArn"], "alreadyStarted": False}
