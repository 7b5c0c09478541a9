"""AWS targets on moto, with botocore's Stubber where moto cannot produce the case
(Lambda needs Docker to execute; PutEvents never reports failed entries)."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import Stubber
from jobsched.domain.errors import AmbiguousError, PermanentError, RetryableError
from jobsched.domain.grants import Grants, GrantsDocument, own_event_source
from jobsched.domain.models import EventBridgeTarget, LambdaTarget, SqsTarget, StepFunctionsTarget
from jobsched.targets import (
    HandlerRegistry,
    HttpTargetClient,
    Invocation,
    TargetAuthority,
    TargetRunner,
    classify_client_error,
    execution_arn,
    execution_name,
    sqs_deduplication_id,
)
from moto import mock_aws

if TYPE_CHECKING:  # the stubs are a dev dependency the 3.13 lane does not install
    from mypy_boto3_sqs.type_defs import MessageTypeDef

pytestmark = pytest.mark.integration

RUN_KEY = "j_7hq2@2026-11-02T09:00:00Z"
ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/jobsched-states"
FUNCTION = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:report-builder"


def invocation(**overrides: Any) -> Invocation:
    fields: dict[str, Any] = {
        "run_key": RUN_KEY,
        "job_id": "j_7hq2",
        "tenant": "tenant-a",
        "job_type": "report.build",
        "scheduled_for": datetime(2026, 11, 2, 9, 0, tzinfo=UTC),
        "attempt": 1,
        "payload": {"format": "pdf"},
        "timeout_seconds": 30.0,
    }
    fields.update(overrides)
    return Invocation(**fields)


# These tests are about the calls themselves: the tenant is granted this account's targets.
EVERYTHING_HERE = Grants(
    GrantsDocument.from_maps(
        {
            "tenant-a": [
                f"arn:aws:{service}:us-east-1:{ACCOUNT}:*"
                for service in ("lambda", "sqs", "events", "states")
            ]
        },
        {"tenant-a": ["acme.*"]},
        home={"partition": "aws", "region": "us-east-1", "account": ACCOUNT},
    )
)
OWN_SOURCE = own_event_source("tenant-a")


def runner_for(**clients: Any) -> TargetRunner:
    """A runner whose factory serves the given clients and fresh moto-backed ones otherwise."""
    return TargetRunner(
        lambda service: clients.get(service) or boto3.client(service),  # type: ignore[call-overload]
        HandlerRegistry(),
        HttpTargetClient(),
        authority=TargetAuthority(lambda: EVERYTHING_HERE),
    )


@pytest.fixture
def moto() -> Iterator[None]:
    with mock_aws():
        yield


def receive_all(queue_url: str) -> list[MessageTypeDef]:
    sqs = boto3.client("sqs")
    messages: list[MessageTypeDef] = []
    while True:
        batch = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], AttributeNames=["All"]
        ).get("Messages", [])
        if not batch:
            return messages
        messages.extend(batch)
        for message in batch:
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


# --- SQS ---


def test_sqs_standard_queue_receives_the_envelope_with_the_run_key_attribute(moto):
    url = boto3.client("sqs").create_queue(QueueName="runs")["QueueUrl"]
    inv = invocation()
    result = runner_for().run(SqsTarget(kind="sqs", queue_url=url), inv)

    [message] = receive_all(url)
    assert result == {"messageId": message["MessageId"]}
    assert json.loads(message["Body"]) == inv.envelope()
    assert message["MessageAttributes"]["runKey"] == {"StringValue": RUN_KEY, "DataType": "String"}


def test_sqs_standard_queue_does_not_dedupe_so_consumers_must(moto):
    url = boto3.client("sqs").create_queue(QueueName="runs")["QueueUrl"]
    runner = runner_for()
    runner.run(SqsTarget(kind="sqs", queue_url=url), invocation())
    runner.run(SqsTarget(kind="sqs", queue_url=url), invocation(attempt=2))
    messages = receive_all(url)
    assert [m["MessageAttributes"]["runKey"]["StringValue"] for m in messages] == [RUN_KEY, RUN_KEY]


def test_sqs_fifo_delivers_a_run_once_however_often_it_is_sent(moto):
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="runs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    runner = runner_for()
    target = SqsTarget(kind="sqs", queue_url=url)
    first = runner.run(target, invocation())
    runner.run(target, invocation())  # a redelivered attempt
    runner.run(target, invocation(attempt=2))  # a retry: different body, same run key
    runner.run(target, invocation(run_key="j_7hq2@2026-11-02T10:00:00Z"))  # the next run

    messages = receive_all(url)
    assert [json.loads(m["Body"])["runKey"] for m in messages] == [RUN_KEY, "j_7hq2@2026-11-02T10:00:00Z"]
    assert messages[0]["MessageId"] == first["messageId"]
    assert "sequenceNumber" in first
    assert messages[0]["Attributes"]["MessageDeduplicationId"] == RUN_KEY
    assert messages[0]["Attributes"]["MessageGroupId"] == "j_7hq2"


def test_sqs_fifo_uses_the_target_message_group(moto):
    url = boto3.client("sqs").create_queue(QueueName="runs.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    runner_for().run(SqsTarget(kind="sqs", queue_url=url, message_group_id="tenant-a"), invocation())
    [message] = receive_all(url)
    assert message["Attributes"]["MessageGroupId"] == "tenant-a"


def test_sqs_missing_queue_is_permanent(moto):
    url = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/missing"
    with pytest.raises(PermanentError) as caught:
        runner_for().run(SqsTarget(kind="sqs", queue_url=url), invocation())
    assert caught.value.error_class in {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}


def test_sqs_throttling_is_retryable(moto):
    sqs = boto3.client("sqs")
    url = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/runs"
    with Stubber(sqs) as stub:
        stub.add_client_error("send_message", service_error_code="RequestThrottled", http_status_code=403)
        with pytest.raises(RetryableError) as caught:
            runner_for(sqs=sqs).run(SqsTarget(kind="sqs", queue_url=url), invocation())
    assert caught.value.error_class == "RequestThrottled"


@pytest.mark.parametrize(
    ("run_key", "verbatim"),
    [
        (RUN_KEY, True),
        ("j_1@2026-11-02T09:00:00Z", True),
        ("job with space@2026-11-02T09:00:00Z", False),
        ("j_é@2026-11-02T09:00:00Z", False),
        ("j_" + "x" * 140 + "@2026-11-02T09:00:00Z", False),
    ],
)
def test_sqs_deduplication_id_is_the_run_key_when_sqs_accepts_it(run_key, verbatim):
    dedup = sqs_deduplication_id(run_key)
    assert (dedup == run_key) is verbatim
    assert 1 <= len(dedup) <= 128
    assert dedup == sqs_deduplication_id(run_key)
    if not verbatim:
        assert len(dedup) == 64 and all(c in "0123456789abcdef" for c in dedup)


# --- EventBridge ---


def test_eventbridge_delivers_the_envelope_as_detail_through_a_rule(moto):
    sqs, events = boto3.client("sqs"), boto3.client("events")
    url = sqs.create_queue(QueueName="events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.create_event_bus(Name="jobs")
    events.put_rule(Name="runs", EventBusName="jobs", EventPattern=json.dumps({"source": [OWN_SOURCE]}))
    events.put_targets(Rule="runs", EventBusName="jobs", Targets=[{"Id": "q", "Arn": queue_arn}])

    inv = invocation()
    result = runner_for().run(EventBridgeTarget(kind="eventbridge", event_bus_name="jobs"), inv)

    [message] = receive_all(url)
    event = json.loads(message["Body"])
    assert result == {"eventId": event["id"]}
    assert event["source"] == OWN_SOURCE  # the tenant's own: jobsched.<digest>
    assert event["detail-type"] == "jobsched.run"
    assert event["detail"] == inv.envelope()  # consumers dedupe on detail.runKey


def test_eventbridge_sends_source_detail_type_and_bus_as_configured(moto):
    events = boto3.client("events")
    target = EventBridgeTarget(
        kind="eventbridge", event_bus_name="jobs", source="acme.reports", detail_type="t"
    )
    inv = invocation()
    with Stubber(events) as stub:
        stub.add_response(
            "put_events",
            {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]},
            {
                "Entries": [
                    {
                        "Source": "acme.reports",
                        "DetailType": "t",
                        "Detail": inv.envelope_json(),
                        "EventBusName": "jobs",
                        "Resources": [],
                    }
                ]
            },
        )
        assert runner_for(events=events).run(target, inv) == {"eventId": "e-1"}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ThrottlingException", RetryableError),
        ("InternalFailure", RetryableError),
        ("SomethingNew", RetryableError),
        ("ValidationException", PermanentError),
        ("AccessDeniedException", PermanentError),
        ("MalformedDetail", PermanentError),
        ("InvalidArgument", PermanentError),
    ],
)
def test_eventbridge_failed_entries_are_classified_by_their_code(moto, code, expected):
    events = boto3.client("events")
    with Stubber(events) as stub:
        stub.add_response(
            "put_events", {"FailedEntryCount": 1, "Entries": [{"ErrorCode": code, "ErrorMessage": "no"}]}
        )
        with pytest.raises(expected) as caught:
            runner_for(events=events).run(EventBridgeTarget(kind="eventbridge"), invocation())
    assert caught.value.error_class == code
    assert type(caught.value) is expected


def test_eventbridge_missing_bus_is_permanent(moto):
    with pytest.raises(PermanentError) as caught:
        runner_for().run(EventBridgeTarget(kind="eventbridge", event_bus_name="nope"), invocation())
    assert caught.value.error_class == "ResourceNotFoundException"


# --- Step Functions ---


@pytest.fixture
def state_machine(moto) -> str:
    definition = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
    return boto3.client("stepfunctions").create_state_machine(
        name="report-flow", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]


def test_step_functions_starts_one_execution_per_run_key(state_machine):
    sfn = boto3.client("stepfunctions")
    target = StepFunctionsTarget(kind="stepfunctions", state_machine_arn=state_machine)
    runner = runner_for()

    first = runner.run(target, invocation())
    again = runner.run(target, invocation(attempt=2))  # a retry after an ambiguous first attempt

    assert first["alreadyStarted"] is False
    assert again == {"executionArn": first["executionArn"], "alreadyStarted": True}
    [execution] = sfn.list_executions(stateMachineArn=state_machine)["executions"]
    assert execution["executionArn"] == first["executionArn"]
    assert execution["name"] == execution_name(RUN_KEY)
    described = sfn.describe_execution(executionArn=first["executionArn"])
    assert json.loads(described["input"]) == invocation().envelope()


def test_step_functions_identical_retry_while_running_gets_the_same_execution(state_machine):
    target = StepFunctionsTarget(kind="stepfunctions", state_machine_arn=state_machine)
    runner = runner_for()
    first = runner.run(target, invocation())
    # Step Functions answers an identical start of a running execution with the original response.
    assert runner.run(target, invocation())["executionArn"] == first["executionArn"]
    assert (
        len(boto3.client("stepfunctions").list_executions(stateMachineArn=state_machine)["executions"]) == 1
    )


def test_step_functions_finished_execution_is_not_started_again(state_machine):
    sfn = boto3.client("stepfunctions")
    target = StepFunctionsTarget(kind="stepfunctions", state_machine_arn=state_machine)
    runner = runner_for()
    first = runner.run(target, invocation())
    sfn.stop_execution(executionArn=first["executionArn"])
    assert runner.run(target, invocation()) == {"executionArn": first["executionArn"], "alreadyStarted": True}
    assert len(sfn.list_executions(stateMachineArn=state_machine)["executions"]) == 1


def test_step_functions_different_run_keys_start_different_executions(state_machine):
    target = StepFunctionsTarget(kind="stepfunctions", state_machine_arn=state_machine)
    runner = runner_for()
    a = runner.run(target, invocation())
    b = runner.run(target, invocation(run_key="j_7hq2@2026-11-02T10:00:00Z"))
    assert a["executionArn"] != b["executionArn"]


def test_step_functions_missing_state_machine_is_permanent(moto):
    arn = f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:missing"
    with pytest.raises(PermanentError) as caught:
        runner_for().run(StepFunctionsTarget(kind="stepfunctions", state_machine_arn=arn), invocation())
    assert caught.value.error_class == "StateMachineDoesNotExist"


@pytest.mark.parametrize(
    "run_key",
    [
        RUN_KEY,
        "j_7hq2#2026-11-02T09:00:00Z",  # sanitises like RUN_KEY, must still differ
        "j_" + "x" * 200 + "@2026-11-02T09:00:00Z",
        "ジョブ@2026-11-02T09:00:00Z",
    ],
)
def test_execution_names_are_valid_deterministic_and_distinct(run_key):
    name = execution_name(run_key)
    assert 1 <= len(name) <= 80
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    assert name == execution_name(run_key)
    if run_key != RUN_KEY:
        assert name != execution_name(RUN_KEY)


@pytest.mark.parametrize(
    ("state_machine_arn", "expected"),
    [
        (
            "arn:aws:states:eu-west-1:111122223333:stateMachine:flow",
            "arn:aws:states:eu-west-1:111122223333:execution:flow:n",
        ),
        (
            "arn:aws:states:eu-west-1:111122223333:stateMachine:flow:prod",  # an alias
            "arn:aws:states:eu-west-1:111122223333:execution:flow:n",
        ),
        (
            "arn:aws-us-gov:states:us-gov-west-1:111122223333:stateMachine:flow",
            "arn:aws-us-gov:states:us-gov-west-1:111122223333:execution:flow:n",
        ),
        ("not-an-arn", None),
    ],
)
def test_execution_arn_is_derived_from_the_state_machine_arn(state_machine_arn, expected):
    assert execution_arn(state_machine_arn, "n") == expected


# --- Lambda (stubbed: moto needs Docker to run a function) ---


def streaming(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


def lambda_request(inv: Invocation, **extra: Any) -> dict[str, Any]:
    return {
        "FunctionName": FUNCTION,
        "InvocationType": "RequestResponse",
        "Payload": inv.envelope_json().encode(),
        **extra,
    }


def test_lambda_success_returns_the_parsed_payload(moto):
    client = boto3.client("lambda")
    inv = invocation()
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {"StatusCode": 200, "Payload": streaming(b'{"pages": 12}'), "ExecutedVersion": "7"},
            lambda_request(inv, Qualifier="live"),
        )
        result = runner_for(**{"lambda": client}).run(
            LambdaTarget(kind="lambda", function_arn=FUNCTION, qualifier="live"), inv
        )
        stub.assert_no_pending_responses()
    assert result == {"pages": 12}


def test_lambda_without_qualifier_and_empty_payload(moto):
    client = boto3.client("lambda")
    inv = invocation()
    with Stubber(client) as stub:
        stub.add_response("invoke", {"StatusCode": 200, "Payload": streaming(b"")}, lambda_request(inv))
        assert (
            runner_for(**{"lambda": client}).run(LambdaTarget(kind="lambda", function_arn=FUNCTION), inv)
            is None
        )


def test_lambda_function_error_is_retryable_and_names_the_error(moto):
    client = boto3.client("lambda")
    error = {"errorType": "KeyError", "errorMessage": "'pages'", "stackTrace": []}
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {
                "StatusCode": 200,
                "FunctionError": "Unhandled",
                "Payload": streaming(json.dumps(error).encode()),
            },
        )
        with pytest.raises(RetryableError) as caught:
            runner_for(**{"lambda": client}).run(
                LambdaTarget(kind="lambda", function_arn=FUNCTION), invocation()
            )
    assert caught.value.error_class == "FunctionError"
    assert "KeyError" in caught.value.message
    assert "'pages'" in caught.value.message


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ResourceNotFoundException", 404, PermanentError),
        ("InvalidParameterValueException", 400, PermanentError),
        ("RequestTooLargeException", 413, PermanentError),
        ("AccessDeniedException", 403, PermanentError),
        ("KMSAccessDeniedException", 502, PermanentError),
        ("TooManyRequestsException", 429, RetryableError),
        ("ServiceException", 500, RetryableError),
        ("EC2ThrottledException", 502, RetryableError),
        ("ResourceConflictException", 409, RetryableError),
    ],
)
def test_lambda_client_errors_are_classified(moto, code, status, expected):
    client = boto3.client("lambda")
    with Stubber(client) as stub:
        stub.add_client_error("invoke", service_error_code=code, http_status_code=status)
        with pytest.raises(expected) as caught:
            runner_for(**{"lambda": client}).run(
                LambdaTarget(kind="lambda", function_arn=FUNCTION), invocation()
            )
    assert type(caught.value) is expected
    assert caught.value.error_class == code


# --- the shared classification ---


def client_error(code: str, status: int | None) -> ClientError:
    response: dict[str, Any] = {"Error": {"Code": code, "Message": "m"}}
    if status is not None:
        response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, "Op")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ThrottlingException", 400, RetryableError),
        ("Throttling", 400, RetryableError),
        ("RequestLimitExceeded", 503, RetryableError),
        ("ProvisionedThroughputExceededException", 400, RetryableError),
        ("KMSThrottlingException", 400, RetryableError),
        ("ServiceUnavailable", 503, RetryableError),
        ("InternalServerError", 500, RetryableError),
        ("SomeNewServerFault", 503, RetryableError),
        ("ExpiredTokenException", 400, RetryableError),
        ("ResourceNotFoundException", 404, PermanentError),
        ("AccessDenied", 403, PermanentError),
        ("ValidationException", 400, PermanentError),
        ("InvalidParameterCombination", 400, PermanentError),
        ("SomeNewClientFault", 400, PermanentError),
        ("NoStatusAtAll", None, RetryableError),
    ],
)
def test_client_error_classification(code, status, expected):
    error = classify_client_error(client_error(code, status))
    assert type(error) is expected
    assert error.error_class == code


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ReadTimeoutError(endpoint_url="https://sqs"), AmbiguousError),
        (ConnectTimeoutError(endpoint_url="https://sqs"), RetryableError),
        (EndpointConnectionError(endpoint_url="https://sqs"), RetryableError),
    ],
)
def test_transport_failures_are_classified_by_whether_the_request_went_out(exc, expected):
    class Broken:
        def send_message(self, **kwargs: Any) -> Any:
            raise exc

    url = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/runs"
    with pytest.raises(expected) as caught:
        runner_for(sqs=Broken()).run(SqsTarget(kind="sqs", queue_url=url), invocation())
    assert type(caught.value) is expected
    assert caught.value.error_class == type(exc).__name__


def test_unexpected_exceptions_from_a_client_become_retryable():
    class Broken:
        def start_execution(self, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

    arn = f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:flow"
    with pytest.raises(RetryableError) as caught:
        runner_for(stepfunctions=Broken()).run(
            StepFunctionsTarget(kind="stepfunctions", state_machine_arn=arn), invocation()
        )
    assert caught.value.error_class == "RuntimeError"


def test_envelope_json_is_the_envelope():
    inv = dataclasses.replace(invocation(), attempt=3)
    assert inv.envelope()["attempt"] == 3
    assert json.loads(inv.envelope_json()) == inv.envelope()
