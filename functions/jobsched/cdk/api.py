"""REST API in front of the `api` function: IAM auth on every method, request validation,
access logs, throttling, a web ACL refusing bodies Lambda could not take, and one explicit
resource/method per route so IAM policies can grant routes by method ARN. Ships an example
managed policy per caller role."""

from __future__ import annotations

import hashlib
import re

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from jobsched.edge import payload_too_large_body

from .config import Config
from .functions import log_retention
from .names import API_ROLES, API_STAGE, REST_API_LOGICAL_ID, ROUTES, Route, policy_id

# Gateway-side rejections in the same JSON shape the function uses for its errors.
_ERROR_TEMPLATE = '{"code": "$context.error.responseType", "message": $context.error.messageString}'
# escapeJavaScript turns ' into \', which JSON does not allow: AWS's documented remedy turns
# it back (the regular expression \\' is a backslash and a quote).
_VALIDATION_TEMPLATE = (
    '{"code": "invalid_request", "message": '
    '"$util.escapeJavaScript($context.error.validationErrorString).replaceAll("\\\\\'","\'")"}'
)

_CREATE_SCHEMA = apigw.JsonSchema(
    schema=apigw.JsonSchemaVersion.DRAFT4,
    type=apigw.JsonSchemaType.OBJECT,
    required=["name", "type"],
    properties={
        "name": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING, min_length=1),
        "type": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING, min_length=1),
    },
)
_OBJECT_SCHEMA = apigw.JsonSchema(schema=apigw.JsonSchemaVersion.DRAFT4, type=apigw.JsonSchemaType.OBJECT)


BODY_TOO_LARGE_RULE = "body-too-large"
# What the web ACL's CloudWatch metric names end with, after the scheduler's name (WAF's
# metrics are per account and region: the name keeps two schedulers' figures apart).
WEB_ACL_METRIC = "api"
BODY_TOO_LARGE_METRIC = "api-body-too-large"
# WAF's rules for a metric name (VisibilityConfig.MetricName): 1..128 characters, letters,
# digits, - and _ only (no reserved name such as All or Default_Action: the suffixes rule that out).
WAF_METRIC_NAME_LENGTH = 128
_WAF_METRIC_REFUSED = re.compile(r"[^A-Za-z0-9_-]")


def waf_metric_name(name: str, suffix: str) -> str:
    """The web ACL's metric name `<name>-<suffix>` of the scheduler named `name`
    (names.Naming), as WAF takes it. A name WAF would refuse (a character other than letters,
    digits, - and _, or too long for the suffix) becomes what it can keep, cut to fit, with 8
    hex of the whole name's sha256: deterministic, and no two names meet."""
    kept = _WAF_METRIC_REFUSED.sub("-", name)
    whole = f"{kept}-{suffix}"
    if kept == name and len(whole) <= WAF_METRIC_NAME_LENGTH:
        return whole
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    room = WAF_METRIC_NAME_LENGTH - len(suffix) - len(digest) - 2
    return f"{kept[:room]}-{digest}-{suffix}"


def integers_above(limit: int) -> str:
    """A regular expression (the subset AWS WAF runs: classes, counted repeats, no
    look-around) matching exactly the decimal integers greater than `limit`, leading zeros
    and surrounding blanks allowed: a Content-Length past the limit."""
    digits = str(limit)
    longer = f"[1-9][0-9]{{{len(digits)},}}"  # more digits than the limit has
    same_length = [
        f"{digits[:i]}[{int(d) + 1}-9]"
        + {0: "", 1: "[0-9]"}.get(rest := len(digits) - i - 1, f"[0-9]{{{rest}}}")
        for i, d in enumerate(digits)
        if d != "9"
    ]
    return rf"^\s*0*(?:{'|'.join([longer, *same_length])})\s*$"


class Api(Construct):
    """`name`: the scheduler's (names.Naming), the API's name; `logical_prefix` goes before
    the REST API's fixed logical id."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        handler: lambda_.IFunction,
        name: str,
        logical_prefix: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=log_retention(config.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            # API Gateway's metrics name the API by this (ApiName): the stack's name keeps the
            # alarms on this API alone, not on every API of the default name in the region.
            rest_api_name=name,
            description="jobsched: durable multi-tenant job scheduler",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # API Gateway needs an account-level role (one per account and region) to write
            # the stage's execution and access logs, and a new region has none: the stage
            # would fail the deploy. With apiGatewayAccountRole (the default) the stack creates
            # it, and its AWS::ApiGateway::Account replaces the account's current role for
            # every API (the same AWS-managed policy). Kept on destroy: the account setting
            # would otherwise point at a deleted role.
            cloud_watch_role=config.api_gateway_account_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN if config.api_gateway_account_role else None,
            deploy_options=apigw.StageOptions(
                stage_name=API_STAGE,
                throttling_rate_limit=config.api_rate_limit,
                throttling_burst_limit=config.api_burst_limit,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # request bodies may carry customer payloads
                metrics_enabled=True,
                tracing_enabled=True,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
            ),
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
        )
        self.rest_api.node.default_child.override_logical_id(logical_prefix + REST_API_LOGICAL_ID)  # type: ignore[union-attr]
        self.rest_api.node.try_remove_child("Endpoint")  # the stack's ApiUrl output replaces it
        for response_id, response_type in (
            ("Default4xx", apigw.ResponseType.DEFAULT_4_XX),
            ("Default5xx", apigw.ResponseType.DEFAULT_5_XX),
        ):
            self.rest_api.add_gateway_response(
                response_id, type=response_type, templates={"application/json": _ERROR_TEMPLATE}
            )
        for response_id, response_type in (
            ("BadRequestBody", apigw.ResponseType.BAD_REQUEST_BODY),
            ("BadRequestParameters", apigw.ResponseType.BAD_REQUEST_PARAMETERS),
        ):
            self.rest_api.add_gateway_response(
                response_id, type=response_type, templates={"application/json": _VALIDATION_TEMPLATE}
            )

        validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        models = {
            ("POST", "/v1/jobs"): self.rest_api.add_model("CreateJob", schema=_CREATE_SCHEMA),
            ("PATCH", "/v1/jobs/{id}"): self.rest_api.add_model("PatchJob", schema=_OBJECT_SCHEMA),
        }
        # One permission for the whole API rather than one per method: the function's resource
        # policy would otherwise outgrow its 20 KB limit.
        integration = apigw.LambdaIntegration(handler, proxy=True, scope_permission_to_method=False)
        self.methods: dict[tuple[str, str], apigw.Method] = {}
        for route in ROUTES:
            resource = self.rest_api.root.resource_for_path(route.path)
            params = {f"method.request.path.{p[1:-1]}": True for p in route.path.split("/") if p[:1] == "{"}
            model = models.get((route.method, route.path))
            self.methods[(route.method, route.path)] = resource.add_method(
                route.method,
                integration,
                authorization_type=apigw.AuthorizationType.IAM,
                request_validator=validator,
                request_parameters=params or None,
                request_models={"application/json": model} if model else None,
            )

        self.web_acl = (
            self._body_limit(config.api_max_body_bytes, name) if config.api_max_body_bytes else None
        )

        self.policies: dict[str, iam.ManagedPolicy] = {}
        for role in API_ROLES:
            routes = [r for r in ROUTES if r.role == role]
            self.policies[role] = iam.ManagedPolicy(
                self,
                policy_id(role),
                description=f"jobsched API: {role} ({', '.join(f'{r.method} {r.path}' for r in routes)})",
                statements=[
                    iam.PolicyStatement(
                        actions=["execute-api:Invoke"], resources=[self.method_arn(r) for r in routes]
                    )
                ],
            )

    def _body_limit(self, limit: int, name: str) -> wafv2.CfnWebACL:
        """A body Lambda cannot take (its event is at most 6 MB, the body JSON-escaped in it)
        passes API Gateway's 10 MB limit and comes back as a 500. API Gateway itself bounds a
        proxy integration's body by nothing else (no model keyword bounds a document's size,
        request validation checks headers for presence only, and a proxy integration has no
        mapping template), so a web ACL on the stage refuses a Content-Length past `limit`
        with a 413 in the API's error shape. Its metrics are named after `name`, the
        scheduler's (waf_metric_name)."""

        def visibility(name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
            return wafv2.CfnWebACL.VisibilityConfigProperty(
                cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=False
            )

        acl = wafv2.CfnWebACL(
            self,
            "WebAcl",
            scope="REGIONAL",
            description=f"jobsched API: request bodies of at most {limit} bytes",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=visibility(waf_metric_name(name, WEB_ACL_METRIC)),
            custom_response_bodies={
                "payloadTooLarge": wafv2.CfnWebACL.CustomResponseBodyProperty(
                    content_type="APPLICATION_JSON", content=payload_too_large_body(limit)
                )
            },
            rules=[
                wafv2.CfnWebACL.RuleProperty(
                    name=BODY_TOO_LARGE_RULE,
                    priority=0,
                    action=wafv2.CfnWebACL.RuleActionProperty(
                        block=wafv2.CfnWebACL.BlockActionProperty(
                            custom_response=wafv2.CfnWebACL.CustomResponseProperty(
                                response_code=413, custom_response_body_key="payloadTooLarge"
                            )
                        )
                    ),
                    statement=wafv2.CfnWebACL.StatementProperty(
                        regex_match_statement=wafv2.CfnWebACL.RegexMatchStatementProperty(
                            field_to_match=wafv2.CfnWebACL.FieldToMatchProperty(
                                single_header={"Name": "content-length"}
                            ),
                            regex_string=integers_above(limit),
                            text_transformations=[
                                wafv2.CfnWebACL.TextTransformationProperty(priority=0, type="NONE")
                            ],
                        )
                    ),
                    visibility_config=visibility(waf_metric_name(name, BODY_TOO_LARGE_METRIC)),
                )
            ],
        )
        association = wafv2.CfnWebACLAssociation(
            self,
            "WebAclAssociation",
            resource_arn=self.rest_api.deployment_stage.stage_arn,
            web_acl_arn=acl.attr_arn,
        )
        # Associated once the stage exists: before it, WAF refuses at once ("your resource
        # doesn't exist"; CloudFormation retries only WAF's "retry your request"). The ARN's
        # Ref of the stage implies the order as CDK renders it today; said outright, so no
        # way of writing the ARN (the stage's name as text, say) can lose it.
        association.node.add_dependency(self.rest_api.deployment_stage)
        return acl

    def method_arn(self, route: Route) -> str:
        return self.rest_api.arn_for_execute_api(route.method, route.arn_path, API_STAGE)

    @property
    def url(self) -> str:
        return self.rest_api.url
