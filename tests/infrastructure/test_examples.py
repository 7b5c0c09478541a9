"""The example state machines: one creates a schedule through the API with IAM auth, the other
is started by that schedule's run through the Step Functions target."""

from __future__ import annotations

import json
from typing import Any

from jobsched.cdk.names import API_STAGE, REST_API_LOGICAL_ID

from tests.infrastructure.synth import render


def definition(synth, machine) -> dict:
    props = synth.props(synth.logical_id(machine))
    text = render(props["DefinitionString"])
    return json.loads(text.replace(f"<{synth.logical_id(machine)}>", "self"))


def test_create_schedule_calls_the_api_signed_with_its_role(synth):
    examples = synth.stack.examples
    states = definition(synth, examples.create_schedule)["States"]
    (task,) = [s for s in states.values() if s["Type"] == "Task"]
    assert task["Resource"].endswith(":states:::apigateway:invoke")
    params = task["Parameters"]
    assert params["AuthType"] == "IAM_ROLE"
    assert params["Method"] == "POST" and params["Path"] == "/v1/jobs" and params["Stage"] == API_STAGE
    assert params["ApiEndpoint"].startswith(f"<{REST_API_LOGICAL_ID}>.execute-api.")
    # The execution name is the idempotency key: a rerun returns the job it created.
    assert params["Headers"]["Idempotency-Key.$"] == "States.Array($$.Execution.Name)"


def test_the_body_is_a_job_the_api_accepts(synth):
    from jobsched.api_models.requests import JobBody

    examples = synth.stack.examples
    (task,) = [
        s for s in definition(synth, examples.create_schedule)["States"].values() if s["Type"] == "Task"
    ]
    template = task["Parameters"]["RequestBody"]
    sample: dict[str, Any] = {"name": "nightly", "runAt": "2026-11-02T09:00:00Z", "payload": {"n": 1}}
    body = {
        k.removesuffix(".$"): sample[k.removesuffix(".$")] if k.endswith(".$") else v
        for k, v in template.items()
    }
    target_arn = body["target"]["stateMachineArn"]
    assert target_arn == f"<{synth.logical_id(examples.run_target)}>"
    body["target"]["stateMachineArn"] = "arn:aws:states:us-east-1:123456789012:stateMachine:example"
    JobBody.model_validate(body).to_spec()  # raises if the API would answer 400


def test_create_schedule_role_may_call_only_that_route(synth):
    examples = synth.stack.examples
    role = synth.logical_id(examples.create_schedule.role)
    invokes = [
        s
        for p in synth.of_type("AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "execute-api:Invoke"
    ]
    (statement,) = invokes
    assert render(statement["Resource"]).endswith(f"<{REST_API_LOGICAL_ID}>/{API_STAGE}/POST/v1/jobs")


def test_the_worker_may_start_the_run_target(synth):
    examples = synth.stack.examples
    worker_role = synth.logical_id(synth.stack.functions.roles["worker"])
    starts = [
        s
        for p in synth.of_type("AWS::IAM::Policy").values()
        if {"Ref": worker_role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "states:StartExecution"
    ]
    (statement,) = starts
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    # The only machine of the default stack, granted only to the example's caller (test_iam).
    assert resources == [{"Ref": synth.logical_id(examples.run_target)}]


def test_machines_log_and_trace(synth):
    for machine in (synth.stack.examples.create_schedule, synth.stack.examples.run_target):
        props = synth.props(synth.logical_id(machine))
        assert props["StateMachineType"] == "STANDARD"  # execution names stay unique for 90 days
        assert props["TracingConfiguration"] == {"Enabled": True}
        assert props["LoggingConfiguration"]["Level"] == "ALL"


def machine_log_retention(synth) -> set[int]:
    found = set()
    for machine in (synth.stack.examples.create_schedule, synth.stack.examples.run_target):
        props = synth.props(synth.logical_id(machine))
        (destination,) = props["LoggingConfiguration"]["Destinations"]
        group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
        found.add(synth.props(group)["RetentionInDays"])
    return found


def test_machine_logs_are_kept_as_long_as_every_other_log(synth, variant):
    for stack in (synth, variant):
        days = stack.stack.config.log_retention_days
        functions = {
            stack.resources[f["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]]["Properties"][
                "RetentionInDays"
            ]
            for f in stack.of_type("AWS::Lambda::Function").values()
        }
        assert machine_log_retention(stack) == functions == {days}
    assert variant.stack.config.log_retention_days == 7


def test_outputs_name_what_docs_deploy_uses(synth):
    from jobsched.cdk import names

    outputs = synth.template["Outputs"]
    expected = {
        names.OUTPUT_API_URL,
        names.OUTPUT_API_ID,
        names.OUTPUT_ALARM_TOPIC,
        names.OUTPUT_DASHBOARD,
        names.OUTPUT_CREATE_SCHEDULE_SM,
        names.OUTPUT_RUN_TARGET_SM,
        *(names.output_policy(role) for role in names.API_ROLES),
    }
    assert expected <= set(outputs)


def test_the_machines_log_where_the_accounts_log_resource_policy_cannot_overflow(synth):
    """Logging a state machine adds its log group to the account's CloudWatch Logs resource
    policy (5,120 characters), unless the group is under /aws/vendedlogs/, which one wildcard
    covers: an account with many log groups refuses the machine otherwise."""
    examples = synth.stack.examples
    names = []
    for machine in (examples.run_target, examples.create_schedule):
        config = synth.props(synth.logical_id(machine))["LoggingConfiguration"]
        (destination,) = config["Destinations"]
        arn = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]
        group = synth.props(arn["Fn::GetAtt"][0])
        names.append(group["LogGroupName"])
    assert all(name.startswith("/aws/vendedlogs/states/") for name in names), names
    assert len(set(names)) == 2
    # Unique in the region: the stack's name is in each (two stacks cannot share one).
    assert all(f"/{synth.stack.stack_name}-" in name for name in names), names
