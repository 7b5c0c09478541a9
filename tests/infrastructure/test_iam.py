"""IAM parity: each function's role holds exactly the statements of jobsched.cdk.permissions; every
AWS call the handlers make in the moto flows (tests/infrastructure/flows.py) is granted; and
every granted action is one the named code calls, and the flows exercise it.

The parity tests hold the `variant` stack, which grants tenant-a the flows' targets
(flows.FLOW_CONTEXT); the default stack grants no targets at all. Calls the worker makes
with a tenant's assumed role are that role's business, not the worker role's."""

from __future__ import annotations

import fnmatch
import importlib
import inspect
from typing import Any

import pytest
from jobsched.cdk import permissions
from jobsched.cdk.names import (
    API,
    EVENT_BUS_ID,
    EVENTS,
    EVENTS_FAILURE_QUEUE_ID,
    FUNCTIONS,
    NOTIFICATIONS_QUEUE_ID,
    OUTBOX_FAILURE_QUEUE_ID,
    SECOND_TICK_QUEUE_ID,
    WORKER,
    dlq_logical_id,
    queue_logical_id,
    table_logical_id,
)
from jobsched.store.schema import ALL_TABLES, EVENT_BUS_NAME, QUEUES

from tests.infrastructure.flows import (
    ACCOUNT,
    ASSUMED_SUFFIX,
    GRANTS_PARAMETER,
    NOTIFICATIONS_QUEUE,
    REGION,
    SECOND_TICK_QUEUE,
    TENANT_ROLE,
    Call,
)
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
    "sqs:ChangeMessageVisibility": ("change_message_visibility", "change_message_visibility_batch"),
    "lambda:InvokeFunction": ("invoke",),
    "sns:Publish": ("publish",),
    "events:PutEvents": ("put_events",),
    "states:StartExecution": ("start_execution",),
    "secretsmanager:GetSecretValue": ("get_secret_value",),
    "ssm:GetParameter": ("get_parameter", "get"),  # Powertools' SSMProvider.get
    "sts:AssumeRole": ("assume_role",),
    "sts:SetSourceIdentity": ("assume_role",),  # AssumeRole with SourceIdentity
}

# Granted but not reached by the flows, each with why it is still needed.
_RUNS_ARN = f"<{table_logical_id(SPECS['Runs'])}.Arn>"
_SLOTS_UNWIRED = (
    "a slot takeover's ConditionCheck on the holder's run: the flows never meet an expired holder"
)
NOT_EXERCISED: dict[tuple[str, str, str], str] = {
    (EVENTS, "sqs:SendMessage", f"<{EVENTS_FAILURE_QUEUE_ID}.Arn>"): (
        "a record set aside: the flows' bus and queue take every record at once "
        "(tests/integration/test_notifications.py sets one aside)"
    ),
    **{
        (function, action, _RUNS_ARN): _SLOTS_UNWIRED
        for function, actions in (
            (WORKER, ("dynamodb:ConditionCheckItem",)),
            (API, ("dynamodb:ConditionCheckItem",)),
        )
        for action in actions
    },
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
    # Ref of an SSM parameter is its name.
    parameter = f"<{synth.logical_id(synth.stack.grants.parameter)}>"
    return {(a, r.replace(parameter, synth.stack.grants.name)) for a, r in pairs}


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
    if res.kind == "events_failures":
        return [f"<{EVENTS_FAILURE_QUEUE_ID}.Arn>"]
    if res.kind == "notifications":
        return [f"<{NOTIFICATIONS_QUEUE_ID}.Arn>"]
    if res.kind == "second_ticks":
        return [f"<{SECOND_TICK_QUEUE_ID}.Arn>"]
    if res.kind == "event_bus":
        return [f"<{EVENT_BUS_ID}.Arn>"]
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
    if res.kind == "roles":
        return [render({"Fn::Sub": a}) for a in synth.stack.config.assumable_roles]
    if res.kind == "grants_parameter":
        return [f"arn:<AWS::Partition>:ssm:<AWS::Region>:<AWS::AccountId>:parameter{synth.stack.grants.name}"]
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
def test_role_holds_exactly_the_permission_table(variant, function):
    assert granted(variant, function) == expected(variant, function, permissions.grants(function))


@pytest.mark.parametrize("function", NAMES)
def test_the_default_stack_holds_the_table_too(synth, function):
    assert granted(synth, function) == expected(synth, function, permissions.grants(function))


def worker_statements(synth) -> list[dict[str, Any]]:
    role = synth.logical_id(synth.stack.functions.roles["worker"])
    return [
        statement
        for policy in synth.of_type("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_default_stack_grants_no_tenant_any_target(synth):
    """Nothing tenant-wide: no function, bus or role is reachable, the worker's queues only
    its own, and the only state machine the example's own target (granted to the example)."""
    actions = {
        (a, render(r))
        for s in worker_statements(synth)
        for a in _listed(s["Action"])
        for r in _listed(s["Resource"])
    }
    assert not [pair for pair in actions if pair[0] in ("lambda:InvokeFunction", "events:PutEvents")]
    assert not [pair for pair in actions if pair[0].startswith("sts:")]
    assert {r for a, r in actions if a == "states:StartExecution"} == {
        f"<{synth.logical_id(synth.stack.examples.run_target)}>"
    }
    own = {f"<{queue_logical_id(q.key)}.Arn>" for q in QUEUES} | {
        f"<{dlq_logical_id(q.key)}.Arn>" for q in QUEUES
    }
    assert {r for a, r in actions if a == "sqs:SendMessage"} <= own
    assert not any("jobsched-target-" in r for _, r in actions)


def test_the_worker_assumes_roles_only_with_an_external_id_and_its_source_identity(variant):
    statements = [
        s for s in worker_statements(variant) if any(a.startswith("sts:") for a in _listed(s["Action"]))
    ]
    assert statements, "assumableRoles is set in the variant"
    for statement in statements:
        assert sorted(_listed(statement["Action"])) == ["sts:AssumeRole", "sts:SetSourceIdentity"]
        assert statement["Condition"] == {
            "Null": {"sts:ExternalId": "false"},
            "StringLike": {"sts:SourceIdentity": "jobsched.*"},
        }
        assert [render(r) for r in _listed(statement["Resource"])] == [
            render({"Fn::Sub": r}) for r in variant.stack.config.assumable_roles
        ]


def test_the_grants_parameter_carries_the_home_and_the_example_grant(variant):
    """The document the functions read: the operator's grants, the deploy's home, and the
    example machine's caller granted the example target (and nothing else)."""
    (parameter,) = variant.of_type("AWS::SSM::Parameter").values()
    props = parameter["Properties"]
    assert props["Name"] == variant.stack.grants.name and props["Tier"] == "Standard"
    text = render(props["Value"])
    assert (
        '"home":{"partition":"<AWS::Partition>","region":"<AWS::Region>","account":"<AWS::AccountId>"}'
        in text
    )
    role = variant.logical_id(variant.stack.examples.create_schedule.role)
    machine = variant.logical_id(variant.stack.examples.run_target)
    assert f'{{"tenant":"<AWS::AccountId>/role/<{role}>","targets":["<{machine}>"]}}' in text
    assert '"tenant":"tenant-a"' in text and "jobsched-target-*" in text


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
    if call.service == "sqs" and call.operation in (
        "ChangeMessageVisibility",
        "ChangeMessageVisibilityBatch",
    ):
        return [("sqs:ChangeMessageVisibility", _queue(params["QueueUrl"]))]
    if call.service == "lambda" and call.operation == "Invoke":
        qualifier = f":{params['Qualifier']}" if params.get("Qualifier") else ""
        return [("lambda:InvokeFunction", params["FunctionName"] + qualifier)]
    if call.service == "events" and call.operation == "PutEvents":
        return [("events:PutEvents", _bus(e.get("EventBusName", "default"))) for e in params["Entries"]]
    if call.service == "sns" and call.operation == "Publish":
        return [("sns:Publish", params["TopicArn"])]
    if call.service == "stepfunctions" and call.operation == "StartExecution":
        return [("states:StartExecution", params["stateMachineArn"])]
    if call.service == "ssm" and call.operation == "GetParameter":
        return [("ssm:GetParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{params['Name']}")]
    if call.service == "sts" and call.operation == "AssumeRole":
        needed = [("sts:AssumeRole", params["RoleArn"])]
        if params.get("SourceIdentity"):
            needed.append(("sts:SetSourceIdentity", params["RoleArn"]))
        return needed
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
    if name == NOTIFICATIONS_QUEUE:
        return f"<{NOTIFICATIONS_QUEUE_ID}.Arn>"
    if name == SECOND_TICK_QUEUE:
        return f"<{SECOND_TICK_QUEUE_ID}.Arn>"
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def _bus(name: str) -> str:
    if name == EVENT_BUS_NAME:
        return f"<{EVENT_BUS_ID}.Arn>"  # the stack's own bus
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
def test_every_call_the_function_makes_is_granted(variant, recorded, function):
    calls = recorded.by_function(function)
    assert calls, f"the flows exercise {function}"
    allowed = granted(variant, function)
    missing = sorted(
        {req for call in calls for req in requests(call) if not any(covers(g, req) for g in allowed)}
    )
    assert missing == [], f"{function} calls AWS beyond its role: {missing}"


@pytest.mark.parametrize("function", NAMES)
def test_every_granted_code_action_is_exercised(variant, recorded, function):
    reached = {(a, family(r)) for call in recorded.by_function(function) for a, r in requests(call)}
    code = expected(variant, function, permissions.CODE[function])
    stack_refs = {f"<{variant.logical_id(variant.stack.examples.run_target)}>"}
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


@pytest.mark.parametrize("function", ["worker", "notifier"])
def test_calls_with_a_tenants_role_are_made_with_its_credentials_only(recorded, function):
    """The worker (a run's target) and the notifier (a notification's) assumed the tenant's
    role with its ExternalId, and sent with that role's credentials to the tenant's own queue
    (an account neither function's role has a grant in)."""
    (assume,) = [c for c in recorded.by_function(function) if c.operation == "AssumeRole"]
    assert assume.params["RoleArn"] == TENANT_ROLE and assume.params["ExternalId"] == "tenant-a"
    sent = [c for c in recorded.calls if c.function == function + ASSUMED_SUFFIX]
    assert sent, f"the flows make {function} act with a tenant's role"
    # One send per run of the job with that target (the worker) or per dead run told (the notifier).
    assert {(c.service, c.operation) for c in sent} == {("sqs", "SendMessage")}
    assert all("/111111111111/" in c.params["QueueUrl"] for c in sent)
    reads = [c for c in recorded.calls if c.operation == "GetParameter"]
    assert reads and {c.params["Name"] for c in reads} == {GRANTS_PARAMETER}


def test_the_exceptions_are_still_granted_and_still_unreached(variant, recorded):
    for function, action, resource in NOT_EXERCISED:
        assert (action, resource) in granted(variant, function)
        reached = {req for call in recorded.by_function(function) for req in requests(call)}
        assert not any(covers((action, resource), req) for req in reached), (
            "exercised now: drop the exception"
        )
