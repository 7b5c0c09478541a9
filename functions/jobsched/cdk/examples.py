"""Two example state machines: one creates a schedule through the API (IAM-signed), the other
is the target that schedule's runs start through the Step Functions target."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from .api import Api
from .functions import log_retention
from .names import API_STAGE

# Step Functions delivers a state machine's logs as vended logs: enabling them adds the log
# group to the account's CloudWatch Logs resource policy, which holds 5,120 characters, and an
# account with many such log groups fills it ("The CloudWatch Logs Resource Policy size was
# exceeded"). Log groups under this prefix are covered by one wildcard entry instead, and
# add nothing to it (docs.aws.amazon.com/step-functions/latest/dg/bp-cwl.html).
VENDED_LOGS_PREFIX = "/aws/vendedlogs/states/"


def log_group_name(name: str, machine: str) -> str:
    """The log group of an example state machine: under VENDED_LOGS_PREFIX, made unique in the
    region by the scheduler's name (names.Naming, the stack's for the app's)."""
    return f"{VENDED_LOGS_PREFIX}{name}-{machine}"


def _logging(scope: Construct, construct_id: str, group_name: str, retention_days: int) -> sfn.LogOptions:
    group = logs.LogGroup(
        scope,
        construct_id,
        log_group_name=group_name,
        retention=log_retention(retention_days),
        removal_policy=RemovalPolicy.DESTROY,
    )
    return sfn.LogOptions(destination=group, level=sfn.LogLevel.ALL, include_execution_data=False)


class Examples(Construct):
    """`name`: the scheduler's (names.Naming), which the log groups' names are made of."""

    def __init__(
        self, scope: Construct, construct_id: str, *, api: Api, log_retention_days: int, name: str
    ) -> None:
        super().__init__(scope, construct_id)

        # Started by a run: the input is the run envelope (runKey, jobId, scheduledFor, payload...).
        # The execution name is derived from the run key, so a retried start is a no-op.
        record = sfn.Pass(
            self,
            "RecordRun",
            parameters={
                "runKey.$": "$.runKey",
                "scheduledFor.$": "$.scheduledFor",
                "attempt.$": "$.attempt",
                "payload.$": "$.payload",
            },
        )
        self.run_target = sfn.StateMachine(
            self,
            "RunTarget",
            definition_body=sfn.DefinitionBody.from_chainable(record.next(sfn.Succeed(self, "Done"))),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=Duration.minutes(5),
            tracing_enabled=True,
            logs=_logging(self, "RunTargetLogs", log_group_name(name, "RunTarget"), log_retention_days),
        )

        # Creates a one-time job whose run starts the machine above. Step Functions signs the
        # request with its role (IAM_ROLE auth); the execution name is the idempotency key, so
        # re-running an execution of the same name returns the job it created.
        create = tasks.CallApiGatewayRestApiEndpoint(
            self,
            "CreateJob",
            api=api.rest_api,
            stage_name=API_STAGE,
            method=tasks.HttpMethod.POST,
            api_path="/v1/jobs",
            auth_type=tasks.AuthType.IAM_ROLE,
            headers=sfn.TaskInput.from_object(
                {
                    "Content-Type": ["application/json"],
                    "Idempotency-Key.$": "States.Array($$.Execution.Name)",
                }
            ),
            request_body=sfn.TaskInput.from_object(
                {
                    "name.$": "$.name",
                    "type": "example.report",
                    "runAt.$": "$.runAt",
                    "target": {"kind": "stepfunctions", "stateMachineArn": self.run_target.state_machine_arn},
                    "payload.$": "$.payload",
                }
            ),
            result_selector={"status.$": "$.StatusCode", "job.$": "$.ResponseBody"},
        )
        create.add_retry(errors=["States.TaskFailed"], max_attempts=3, interval=Duration.seconds(2))
        self.create_schedule = sfn.StateMachine(
            self,
            "CreateSchedule",
            definition_body=sfn.DefinitionBody.from_chainable(create),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=Duration.minutes(5),
            tracing_enabled=True,
            logs=_logging(
                self, "CreateScheduleLogs", log_group_name(name, "CreateSchedule"), log_retention_days
            ),
        )
