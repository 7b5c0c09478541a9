"""IAM parity: each function's role holds exactly the statements of infra.permissions; every
AWS call the handlers make in the moto flows (tests/infrastructure/flows.py) is granted; and
every granted action is one the named code calls, and the flows exercise it."""

from __future__ import annotations

import fnmatch
import importlib
import inspect
from typing import Any

import pytest
from jobsched.store.schema import ALL_TABLES, QUEUES

from infra import permissions
from infra.names import (
    API,
    FUNCTIONS,
    OUTBOX_FAILURE_QUEUE_ID,
    WORKER,
    dlq_logical_id,
    queue_logical_id,
    table_logical_id,
)
from tests.infrastructure.flows import ACCOUNT, REGION, Call
from tests.infrastructure.synth import render

NAMES = [f.name for f in FUNCTIONS]
SPECS = {spec.logical_id: spec for spec in ALL_TABLES}
TABLE_BY_NAME = {spec.default_name: spec for spec in ALL_TABLES}

# Which client methods need which action.
OPERATIONS = {
    "dynamodb:GetItem": ("get_item",),
    "dynamodb:PutItem": ("put_item", "transact_write_items"),
    "dynamodb:UpdateItem": ("update_item", "transact_write_items"),
    "dynamodb:DeleteItem": ("delete_item", "transact_write_items"),
    "dynamodb:ConditionCheckItem": ("transact_write_items",),
    "dynamodb:Query": ("query",),
    "dynamodb:BatchGetItem": ("batch_get_item",),
    "sqs:SendMessage": ("send_message", "send_message_batch"),
    "sqs:ChangeMessageVisibility": ("change_message_visibility",),
    "lambda:InvokeFunction": ("invoke",),
    "events:PutEvents": ("put_events",),
    "states:StartExecution": ("start_execution",),
    "secretsmanager:GetSecretValue": ("get_secret_value",),
    "ssm:GetParameter": ("get_parameter",),
}

# Granted but not reached by the flows, each with why it is still needed.
_RUNS_ARN = f"<{table_logical_id(SPECS['Runs'])}.Arn>"
_SLOTS_UNWIRED = (
    "a slot takeover's ConditionCheck on the holder's run: the flows never meet an expired holder"
)
NOT_EXERCISED: dict[tuple[str, str, str], str] = {
    **{
        (function, action, _RUNS_ARN): _SLOTS_UNWIRED
        for function, actions in (
            (WORKER, ("dynamodb:ConditionCheckItem",)),
            (API, ("dynamodb:ConditionCheckItem",)),
        )
        for action in actions
    }
}


# --- what the template grants ---


def granted(synth, function: str) -> set[tuple[str, str]]:
    role = synth.logical_id(synth.stack.functions.roles[function])
    pairs = set()
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            pairs |= {(a, render(r)) for a in actions for r in resources}
    return pairs


def rendered(synth, function: str, res: permissions.Res) -> list[str]:
    if res.kind == "table":
        return [f"<{table_logical_id(SPECS[res.name])}.Arn>"]
    if res.kind == "index":
        return [f"<{table_logical_id(SPECS[res.name])}.Arn>/index/{res.index}"]
    if res.kind == "stream":
        return [f"<{table_logical_id(SPECS[res.name])}.StreamArn>"]
    if res.kind == "queue":
        return [f"<{queue_logical_id(res.name)}.Arn>"]
    if res.kind == "dlq":
        return [f"<{dlq_logical_id(res.name)}.Arn>"]
    if res.kind == "outbox_failures":
        return [f"<{OUTBOX_FAILURE_QUEUE_ID}.Arn>"]
    if res.kind == "log_group":
        return [f"<{synth.logical_id(synth.stack.functions.log_groups[function])}.Arn>"]
    if res.kind == "targets":
        configured = [render({"Fn::Sub": a}) for a in synth.stack.config.targets_for(res.name)]
        if res.name == "states":
            configured.append(f"<{synth.logical_id(synth.stack.examples.run_target)}>")
        return configured
    if res.kind == "secrets":
        return [render({"Fn::Sub": a}) for a in synth.stack.config.secret_patterns(res.name)]
    if res.kind == "secret_keys":
        return ["arn:<AWS::Partition>:kms:*:*:key/*"] if synth.stack.config.secret_patterns(res.name) else []
    if res.kind == "any":
        return ["*"]
    raise AssertionError(res)


def expected(synth, function: str, grants: tuple[permissions.Grant, ...]) -> set[tuple[str, str]]:
    return {
        (action, text)
        for grant in grants
        for res in grant.resources
        for text in rendered(synth, function, res)
        for action in grant.actions
    }


@pytest.mark.parametrize("function", NAMES)
def test_role_holds_exactly_the_permission_table(synth, function):
    assert granted(synth, function) == expected(synth, function, permissions.grants(function))


# --- what the code does ---


def requests(call: Call) -> list[tuple[str, str]]:
    """The (IAM action, resource) pairs a recorded call needs, in the template's notation."""
    params = call.params
    if call.service == "dynamodb":
        if call.operation == "TransactWriteItems":
            items = [(kind, body) for entry in params["TransactItems"] for kind, body in entry.items()]
            kinds = {
                "Put": "PutItem",
                "Update": "UpdateItem",
                "Delete": "DeleteItem",
                "ConditionCheck": "ConditionCheckItem",
            }
            return [(f"dynamodb:{kinds[k]}", _table(body["TableName"])) for k, body in items]
        if call.operation == "BatchGetItem":
            return [("dynamodb:BatchGetItem", _table(name)) for name in params["RequestItems"]]
        resource = _table(params["TableName"])
        if params.get("IndexName"):
            resource += f"/index/{params['IndexName']}"
        return [(f"dynamodb:{call.operation}", resource)]
    if call.service == "sqs" and call.operation in ("SendMessage", "SendMessageBatch"):
        return [("sqs:SendMessage", _queue(params["QueueUrl"]))]
    if call.service == "sqs" and call.operation == "ChangeMessageVisibility":
        return [("sqs:ChangeMessageVisibility", _queue(params["QueueUrl"]))]
    if call.service == "lambda" and call.operation == "Invoke":
        qualifier = f":{params['Qualifier']}" if params.get("Qualifier") else ""
        return [("lambda:InvokeFunction", params["FunctionName"] + qualifier)]
    if call.service == "events" and call.operation == "PutEvents":
        return [("events:PutEvents", _bus(e.get("EventBusName", "default"))) for e in params["Entries"]]
    if call.service == "stepfunctions" and call.operation == "StartExecution":
        return [("states:StartExecution", params["stateMachineArn"])]
    return [(f"{call.service}:{call.operation}", "unmapped")]


def _table(name: str) -> str:
    return f"<{table_logical_id(TABLE_BY_NAME[name])}.Arn>"


def _queue(url: str) -> str:
    name = url.rsplit("/", 1)[-1]
    for queue in QUEUES:
        if name == queue.default_name:
            return f"<{queue_logical_id(queue.key)}.Arn>"
        if name == queue.dlq_name:
            return f"<{dlq_logical_id(queue.key)}.Arn>"
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def _bus(name: str) -> str:
    return name if name.startswith("arn:") else f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{name}"


def family(resource: str) -> str:
    """Which priority's queue (or DLQ) a run uses is data, not a code path: one stands for all."""
    for queue in QUEUES:
        resource = resource.replace(f"<{queue_logical_id(queue.key)}.Arn>", "<priority queue>")
        resource = resource.replace(f"<{dlq_logical_id(queue.key)}.Arn>", "<priority DLQ>")
    return resource


def covers(grant: tuple[str, str], request: tuple[str, str]) -> bool:
    action, resource = grant
    concrete = (
        resource.replace("<AWS::Partition>", "aws")
        .replace("<AWS::Region>", REGION)
        .replace("<AWS::AccountId>", ACCOUNT)
    )
    return action == request[0] and (concrete == request[1] or fnmatch.fnmatchcase(request[1], concrete))


@pytest.mark.parametrize("function", NAMES)
def test_every_call_the_function_makes_is_granted(synth, recorded, function):
    calls = recorded.by_function(function)
    assert calls, f"the flows exercise {function}"
    allowed = granted(synth, function)
    missing = sorted(
        {req for call in calls for req in requests(call) if not any(covers(g, req) for g in allowed)}
    )
    assert missing == [], f"{function} calls AWS beyond its role: {missing}"


@pytest.mark.parametrize("function", NAMES)
def test_every_granted_code_action_is_exercised(synth, recorded, function):
    reached = {(a, family(r)) for call in recorded.by_function(function) for a, r in requests(call)}
    code = expected(synth, function, permissions.CODE[function])
    stack_refs = {f"<{synth.logical_id(synth.stack.examples.run_target)}>"}
    idle = sorted(
        grant
        for grant in code
        if grant[1] not in stack_refs
        and not any(covers((grant[0], family(grant[1])), req) for req in reached)
        and (function, *grant) not in NOT_EXERCISED
    )
    assert idle == [], f"{function} holds actions the flows never needed: {idle}"


def _resolve(ref: str) -> Any:
    module, _, qualname = ref.partition(":")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("function", NAMES)
def test_every_granted_code_action_is_called_by_the_code_it_names(function):
    for grant in permissions.CODE[function]:
        assert grant.via and grant.why, grant
        source = "\n".join(inspect.getsource(_resolve(ref)) for ref in grant.via)
        for action in grant.actions:
            assert any(f".{op}(" in source for op in OPERATIONS[action]), (function, action, grant.via)


def test_the_calls_map_to_known_actions(recorded):
    unmapped = sorted(
        {
            (c.function, c.service, c.operation)
            for c in recorded.calls
            if c.function != "harness" and requests(c)[0][1] == "unmapped"
        }
    )
    assert unmapped == []


def test_the_exceptions_are_still_granted_and_still_unreached(synth, recorded):
    for function, action, resource in NOT_EXERCISED:
        assert (action, resource) in granted(synth, function)
        reached = {req for call in recorded.by_function(function) for req in requests(call)}
        assert not any(covers((action, resource), req) for req in reached), (
            "exercised now: drop the exception"
        )
