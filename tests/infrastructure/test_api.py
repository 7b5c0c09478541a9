"""REST API: every route the handler serves is declared (and nothing else), IAM auth on every
method, request validation, access logs, throttling, and the example role policies."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.cdk.names import API_ROLES, API_STAGE, REST_API_LOGICAL_ID, ROUTES

from tests.infrastructure.synth import SKIP_BUNDLING, render

ARN_PREFIX = (
    f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{REST_API_LOGICAL_ID}>/{API_STAGE}"
)


def declared_routes(synth) -> dict[tuple[str, str], dict]:
    """(method, path) → method properties, with paths rebuilt from the resource tree."""
    resources = synth.of_type("AWS::ApiGateway::Resource")

    def path_of(ref: dict) -> str:
        if "Fn::GetAtt" in ref:  # the root resource
            return ""
        props = resources[ref["Ref"]]["Properties"]
        return path_of(props["ParentId"]) + "/" + props["PathPart"]

    return {
        (m["Properties"]["HttpMethod"], path_of(m["Properties"]["ResourceId"])): m["Properties"]
        for m in synth.of_type("AWS::ApiGateway::Method").values()
    }


def test_declared_routes_are_exactly_the_route_table(synth):
    assert set(declared_routes(synth)) == {(r.method, r.path) for r in ROUTES}


def test_the_handler_serves_exactly_the_declared_routes():
    from jobsched.handlers.api import app

    served = {
        (route.method, re.sub(r"<(\w+)>", "{}", route.path))
        for route in app._static_routes + app._dynamic_routes  # the resolver's route table
    }
    declared = {(r.method, re.sub(r"\{\w+\}", "{}", r.path)) for r in ROUTES}
    assert served == declared


def test_every_method_requires_iam_and_validates_its_request(synth):
    validators = synth.of_type("AWS::ApiGateway::RequestValidator")
    (validator,) = validators.values()
    assert validator["Properties"]["ValidateRequestBody"] is True
    assert validator["Properties"]["ValidateRequestParameters"] is True
    for (method, path), props in declared_routes(synth).items():
        assert props["AuthorizationType"] == "AWS_IAM", (method, path)
        assert props["RequestValidatorId"] == {"Ref": next(iter(validators))}
        params = {f"method.request.path.{p[1:-1]}": True for p in path.split("/") if p.startswith("{")}
        assert props.get("RequestParameters", {}) == params, (method, path)
        integration = props["Integration"]
        assert integration["Type"] == "AWS_PROXY" and integration["IntegrationHttpMethod"] == "POST"
        assert render(integration["Uri"]).endswith(
            "<ApiFunction.Arn>/invocations".replace("ApiFunction", api_function(synth))
        )


def api_function(synth) -> str:
    (logical_id,) = [
        k
        for k, v in synth.of_type("AWS::Lambda::Function").items()
        if v["Properties"]["Handler"] == "jobsched.handlers.api.handler"
    ]
    return logical_id


def test_create_requires_name_and_type_before_the_function_is_called(synth):
    props = declared_routes(synth)[("POST", "/v1/jobs")]
    model = synth.props(props["RequestModels"]["application/json"]["Ref"])
    assert model["Schema"]["required"] == ["name", "type"]
    from jobsched.api_models.requests import JobBody

    required = {f.alias for f in JobBody.model_fields.values() if f.is_required()}
    assert required == {"name", "type"}  # the gateway asks no more than the function does


def test_stage_logs_access_traces_and_throttles(synth, config):
    (stage,) = synth.of_type("AWS::ApiGateway::Stage").values()
    props = stage["Properties"]
    assert props["StageName"] == API_STAGE
    assert props["TracingEnabled"] is True
    access = props["AccessLogSetting"]
    # The log group's ARN without the trailing :* (feature flag logGroupDestinationArnWithoutWildcard).
    destination = render(access["DestinationArn"])
    assert destination.endswith(":log-group:<" + synth.logical_id(synth.stack.api.access_logs) + ">")
    for field in (
        "$context.identity.caller",
        "$context.identity.user",
        "$context.status",
        "$context.requestId",
    ):
        assert field in access["Format"]
    (settings,) = props["MethodSettings"]
    assert settings["HttpMethod"] == "*" and settings["ResourcePath"] == "/*"
    assert settings["ThrottlingRateLimit"] == config.api_rate_limit
    assert settings["ThrottlingBurstLimit"] == config.api_burst_limit
    assert settings["LoggingLevel"] == "ERROR" and settings["DataTraceEnabled"] is False
    assert settings["MetricsEnabled"] is True


def test_the_stage_logs_through_a_role_the_stack_sets_unless_told_to_keep_the_accounts(synth, variant):
    """The stage's logging needs the account's one API Gateway CloudWatch role, which a new
    region does not have: by default the stack creates and sets it (AWS::ApiGateway::Account),
    before the stage; apiGatewayAccountRole=false keeps the account's own."""
    assert synth.props(synth.logical_id(synth.stack.api.rest_api.deployment_stage))["AccessLogSetting"]
    (account_id, account), *others = synth.of_type("AWS::ApiGateway::Account").items()
    assert not others
    role = synth.resources[account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]]
    assert role["DeletionPolicy"] == "Retain"  # the account setting keeps pointing at it
    assert account["DeletionPolicy"] == "Retain"
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "apigateway.amazonaws.com"
    }
    (stage,) = synth.of_type("AWS::ApiGateway::Stage").values()
    assert account_id in stage.get("DependsOn", [])
    assert variant.error is None, variant.error  # cdk-nag is satisfied either way
    assert not variant.of_type("AWS::ApiGateway::Account")


def test_gateway_errors_are_json(synth):
    kinds = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in synth.of_type("AWS::ApiGateway::GatewayResponse").values()
    }
    assert {"DEFAULT_4XX", "DEFAULT_5XX", "BAD_REQUEST_BODY", "BAD_REQUEST_PARAMETERS"} <= set(kinds)
    assert all("application/json" in p["ResponseTemplates"] for p in kinds.values())


def escape_javascript(text: str) -> str:
    r"""$util.escapeJavaScript as API Gateway documents it (Apache Commons' escapeJavaScript):
    ' and " and \ and / backslashed, control characters as \b \f \n \r \t or \uXXXX, and
    everything past ASCII as \uXXXX (UTF-16)."""
    named = {"'": "\\'", '"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
    named |= {"\r": "\\r", "\t": "\\t"}
    out = []
    for ch in text:
        if ch in named:
            out.append(named[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            units = ch.encode("utf-16-be")
            out += [f"\\u{int.from_bytes(units[i : i + 2]):04X}" for i in range(0, len(units), 2)]
        else:
            out.append(ch)
    return "".join(out)


CALL = re.compile(
    r'\$util\.escapeJavaScript\(\$context\.error\.(\w+)\)((?:\.replaceAll\("[^"]*","[^"]*"\))*)'
)
REPLACE = re.compile(r'\.replaceAll\("([^"]*)","([^"]*)"\)')


def render_gateway_template(template: str, error: dict[str, str]) -> str:
    """The subset of API Gateway's VTL the gateway responses use: $context.error values,
    escapeJavaScript of one, then Java's String.replaceAll (a regular expression)."""

    def call(match: re.Match[str]) -> str:
        value = escape_javascript(error[match.group(1)])
        for pattern, replacement in REPLACE.findall(match.group(2)):
            value = re.sub(pattern, replacement.replace("\\", "\\\\"), value)
        return value

    rendered = CALL.sub(call, template)
    return re.sub(r"\$context\.error\.(\w+)", lambda m: error[m.group(1)], rendered)


@pytest.mark.parametrize(
    "message",
    [
        "[instance value ('') failed to match]",
        'object has missing required properties (["name","type"])',
        "a back\\slash \\' and a/slash, a tab\there, a line\nbreak, naïve 🎉",
    ],
)
def test_validation_errors_are_json_whatever_the_message_holds(synth, message):
    r"""escapeJavaScript turns ' into \', which is not JSON: the template turns it back."""
    bodies = [
        r["Properties"]["ResponseTemplates"]["application/json"]
        for r in synth.of_type("AWS::ApiGateway::GatewayResponse").values()
        if r["Properties"]["ResponseType"] in ("BAD_REQUEST_BODY", "BAD_REQUEST_PARAMETERS")
    ]
    assert len(bodies) == 2
    for body in bodies:
        assert CALL.search(body), body  # the model above renders what the template says
        rendered = render_gateway_template(body, {"validationErrorString": message})
        assert json.loads(rendered) == {"code": "invalid_request", "message": message}


def test_one_invoke_permission_covers_the_whole_api(synth):
    function = api_function(synth)
    permissions = [
        p["Properties"]
        for p in synth.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [function, "Arn"]}
    ]
    (permission,) = permissions
    assert permission["Principal"] == "apigateway.amazonaws.com"
    assert render(permission["SourceArn"]).endswith("/*/*/*")


def policy_resources(synth, role: str) -> list[str]:
    props = synth.props(synth.logical_id(synth.stack.api.policies[role]))
    assert props["Description"].startswith(f"jobsched API: {role}")
    (statement,) = props["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "execute-api:Invoke"
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    return [render(r) for r in resources]


@pytest.mark.parametrize("role", API_ROLES)
def test_each_role_policy_grants_exactly_its_routes(synth, role):
    expected = sorted(f"{ARN_PREFIX}/{r.method}{r.arn_path}" for r in ROUTES if r.role == role)
    assert sorted(policy_resources(synth, role)) == expected


def test_every_route_belongs_to_one_role_and_reading_never_writes(synth):
    assert sorted(r.role for r in ROUTES if r.role not in API_ROLES) == []
    grants = {role: policy_resources(synth, role) for role in API_ROLES}
    for route in ROUTES:
        arn = f"{ARN_PREFIX}/{route.method}{route.arn_path}"
        assert [role for role, arns in grants.items() if arn in arns] == [route.role]
    assert all("/GET/" in arn for arn in grants["reader"])
    assert not any("/GET/" in arn for role, arns in grants.items() if role != "reader" for arn in arns)


# --- bodies Lambda cannot take: the web ACL's 413 ---

LAMBDA_SYNC_EVENT_BYTES = 6_291_456  # Lambda refuses a larger synchronous event (a 500 here)
API_GATEWAY_HEADER_BYTES = 10_240  # request line and headers together, API Gateway REST's cap
EVENT_CONTEXT_BYTES = 4_096  # the proxy event's request context and field names, generously
JSON_ESCAPE_FACTOR = 6  # a control byte becomes \u00XX in the event's JSON string


def test_bodies_lambda_cannot_take_are_a_413_from_the_stages_web_acl(synth, config):
    from jobsched.cdk.api import BODY_TOO_LARGE_RULE, integers_above

    limit = config.api_max_body_bytes
    assert (
        limit * JSON_ESCAPE_FACTOR + API_GATEWAY_HEADER_BYTES + EVENT_CONTEXT_BYTES < LAMBDA_SYNC_EVENT_BYTES
    ), "a body at the limit might not fit Lambda's event"
    ((acl_id, acl),) = synth.of_type("AWS::WAFv2::WebACL").items()
    props = acl["Properties"]
    assert props["Scope"] == "REGIONAL" and props["DefaultAction"] == {"Allow": {}}
    (rule,) = props["Rules"]
    assert rule["Name"] == BODY_TOO_LARGE_RULE
    statement = rule["Statement"]["RegexMatchStatement"]
    assert statement["FieldToMatch"] == {"SingleHeader": {"Name": "content-length"}}
    assert statement["RegexString"] == integers_above(limit)
    assert len(statement["RegexString"]) <= 512  # WAF's limit for a regex
    response = rule["Action"]["Block"]["CustomResponse"]
    assert response["ResponseCode"] == 413
    body = props["CustomResponseBodies"][response["CustomResponseBodyKey"]]
    assert body["ContentType"] == "APPLICATION_JSON"
    assert json.loads(body["Content"])["code"] == "payload_too_large"  # the API's error shape
    ((_, association),) = synth.of_type("AWS::WAFv2::WebACLAssociation").items()
    assert association["Properties"]["WebACLArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    (stage_id,) = synth.of_type("AWS::ApiGateway::Stage")
    assert stage_id in json.dumps(association["Properties"]["ResourceArn"])


WAF_METRIC_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")  # WAF's rules (VisibilityConfig.MetricName)


def web_acl_metric_names(acl: dict[str, Any]) -> list[str]:
    """The web ACL's own metric name, then its rules', from its resource or its construct's props."""
    config = [acl["VisibilityConfig"], *(rule["VisibilityConfig"] for rule in acl["Rules"])]
    return [c["MetricName"] for c in config]


def test_the_web_acls_metrics_are_named_after_the_stack(synth):
    ((_, acl),) = synth.of_type("AWS::WAFv2::WebACL").items()
    names = web_acl_metric_names(acl["Properties"])
    assert names == [f"{synth.stack.stack_name}-api", f"{synth.stack.stack_name}-api-body-too-large"]


def test_two_stacks_never_share_web_acl_metric_names_and_a_long_name_stays_valid():
    """WAF's metrics are the account's and region's: two schedulers, in stacks of two names or
    two in one stack, each count their own blocked requests; a name past WAF's 128 characters
    is cut short, deterministically, and still tells the stacks apart."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template
    from jobsched.cdk import JobScheduler

    app = cdk.App(context=SKIP_BUNDLING)
    long_name = "L" + "ong-stack-name" * 9  # 127 characters: CDK's stack names go to 128
    stacks = []
    for stack_name, construct_ids in (
        ("Alpha", ["Default"]),
        ("Beta", ["Default", "Second"]),
        (long_name, ["Default"]),
        (long_name[:-1] + "X", ["Default"]),
    ):
        stacks.append(stack := cdk.Stack(app, stack_name))
        for construct_id in construct_ids:
            JobScheduler(stack, construct_id, shard_count=2, alarms_without_subscriber=True)
    named = {
        f"{stack.stack_name}/{logical_id}": web_acl_metric_names(acl["Properties"])
        for stack in stacks
        for logical_id, acl in Template.from_stack(stack).find_resources("AWS::WAFv2::WebACL").items()
    }
    assert len(named) == 5
    every = [name for names in named.values() for name in names]
    assert len(set(every)) == len(every), named  # no two web ACLs, no two metrics alike
    assert all(WAF_METRIC_NAME.fullmatch(name) for name in every), every
    assert {names[0] for key, names in named.items() if key.startswith(("Alpha/", "Beta/"))} == {
        "Alpha-api",
        "Beta-api",
        "Beta-Second-api",
    }


@settings(max_examples=200, deadline=None)
@given(first=st.text(min_size=1, max_size=300), second=st.text(min_size=1, max_size=300))
def test_any_name_gives_a_metric_name_waf_takes_and_two_names_two(first, second):
    from jobsched.cdk.api import BODY_TOO_LARGE_METRIC, WEB_ACL_METRIC, waf_metric_name

    for suffix in (WEB_ACL_METRIC, BODY_TOO_LARGE_METRIC):
        made = waf_metric_name(first, suffix)
        assert WAF_METRIC_NAME.fullmatch(made) and made == waf_metric_name(first, suffix)
        if first != second:
            assert made != waf_metric_name(second, suffix)


def test_the_web_acl_is_associated_once_the_stage_exists(synth):
    """WAF refuses to associate a stage that does not exist yet, and CloudFormation retries
    only WAF's "retry your request": the association depends on the stage outright, whatever
    its ARN is written with."""
    ((_, association),) = synth.of_type("AWS::WAFv2::WebACLAssociation").items()
    (stage_id,) = synth.of_type("AWS::ApiGateway::Stage")
    assert stage_id in association.get("DependsOn", [])


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 10**9), length=st.integers(0, 10**12), zeros=st.integers(0, 3))
def test_the_content_length_rule_matches_exactly_the_lengths_past_the_limit(limit, length, zeros):
    """The rule's regex (in the subset WAF runs, read here by Python's re; WAF looks for a
    match anywhere in the header, hence `search`) against integer comparison: a
    Content-Length over the limit matches, one at or under it never does."""
    from jobsched.cdk.api import integers_above

    pattern = re.compile(integers_above(limit))
    for written in (str(length), "0" * zeros + str(length), f" {length} "):
        assert (pattern.search(written) is not None) is (length > limit), (limit, written)
    for boundary in (limit - 1, limit, limit + 1):
        assert (pattern.search(str(boundary)) is not None) is (boundary > limit)
    assert pattern.search("") is None and pattern.search("1e9") is None and pattern.search("-1") is None
