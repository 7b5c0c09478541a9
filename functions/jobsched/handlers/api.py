"""`api` Lambda: the HTTP API behind API Gateway (REST, IAM auth), on the Powertools resolver.

Routes only translate: HTTP in, one service call, HTTP out. The tenant is taken from the
authenticated caller in the request context, never from the request."""

from __future__ import annotations

import base64
import json
import re
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from ..domain.errors import JobschedError, PreconditionRequired, Unauthenticated, ValidationFailed
from ..domain.models import Job, JobState
from ..observability import logger, tracer
from ..wiring import container
from .api_models import ErrorBody, JobBody, JobList, JobView, decode_json, job_view, merge_patch, problems_of

app = APIGatewayRestResolver(enable_validation=True, json_body_deserializer=decode_json)
TITLE, VERSION, DESCRIPTION = "jobsched", "1", "Durable multi-tenant job scheduler"
app.configure_openapi(title=TITLE, version=VERSION, description=DESCRIPTION)
app.enable_swagger(path="/docs", title=TITLE, version=VERSION, description=DESCRIPTION)

JOB_ID = Path(pattern=r"^j_[0-9a-z]{1,64}$", description="job id")
ERRORS: dict[int, OpenAPIResponse] = {
    code: {"description": HTTPStatus(code).phrase, "content": {"application/json": {"model": ErrorBody}}}
    for code in (400, 401, 404, 409, 412, 428, 429, 503)
}


# --- caller identity ---


def tenant_of_request() -> str:
    """The tenant: an authorizer's `tenantId` (local mode, custom authorizers) or the IAM principal."""
    context = app.current_event.request_context
    authorizer = context.authorizer.raw_event if context.authorizer else {}
    tenant = authorizer.get("tenantId")
    if tenant:
        return authorizer_tenant(tenant)
    arn = context.identity.user_arn
    if arn:
        return principal_tenant(arn)
    raise Unauthenticated("the request carries no authenticated caller")


# Tenant ids made from IAM principals are `<account>/<kind>/...` or `<account>/root`; an
# authorizer's tenantId may be anything else, and never starts with 12 digits and a slash,
# so the two cannot collide.
_IAM_TENANT = re.compile(r"[0-9]{12}/")
_PRINCIPAL = re.compile(
    r"arn:aws[a-z-]*:(?:"
    r"iam::(?P<user_account>[0-9]{12}):user/(?P<user>[\w+=,.@/-]{1,576})"
    r"|sts::(?P<role_account>[0-9]{12}):assumed-role/(?P<role>[\w+=,.@-]{1,64})/[\w+=,.@-]{2,64}"
    r"|sts::(?P<fed_account>[0-9]{12}):federated-user/(?P<fed>[\w+=,.@-]{2,64})"
    r"|iam::(?P<root_account>[0-9]{12}):root"
    r")",
    re.ASCII,
)


def principal_tenant(arn: str) -> str:
    """The tenant of an IAM principal, kind and path included, so no two principals share one:

    `arn:aws:iam::123:user/deploy/ci` → `123/user/deploy/ci`; `arn:aws:sts::123:assumed-role/ci/s1`
    → `123/role/ci` (every session of a role is the role); `arn:aws:sts::123:federated-user/ci`
    → `123/federated-user/ci`; `arn:aws:iam::123:root` → `123/root`."""
    match = _PRINCIPAL.fullmatch(arn)
    if match is None:
        raise Unauthenticated(
            "the caller's IAM principal is not a user, role session, federated user or root"
        )
    found = {k: v for k, v in match.groupdict().items() if v is not None}
    if "user" in found:
        return f"{found['user_account']}/user/{found['user']}"
    if "role" in found:
        return f"{found['role_account']}/role/{found['role']}"
    if "fed" in found:
        return f"{found['fed_account']}/federated-user/{found['fed']}"
    return f"{found['root_account']}/root"


def authorizer_tenant(tenant: Any) -> str:
    """An authorizer's tenantId, as it is, unless it could be mistaken for an IAM principal's."""
    text = str(tenant)
    if _IAM_TENANT.match(text) or len(text) > 256 or not text.isprintable():
        logger.warning("authorizer tenantId refused", extra={"tenant_id": ascii(text[:64])})
        raise Unauthenticated(
            "the authorizer's tenantId must be 1-256 printable characters and not start with "
            "12 digits and '/' (the form of tenant ids made from IAM principals)"
        )
    return text


_IF_MATCH = re.compile(r'\s*(?:([0-9]{1,18})|(?:W/)?"([0-9]{1,18})")\s*', re.ASCII)


def parse_if_match(value: str | None, *, required: bool) -> int | None:
    if value is None:
        if required:
            raise PreconditionRequired("If-Match: required; send the job's current version (its ETag)")
        return None
    match = _IF_MATCH.fullmatch(value)
    if match is None:
        raise ValidationFailed("If-Match", 'must be the job version, e.g. "3" (at most 18 digits)')
    return int(match.group(1) or match.group(2))


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=body,
        headers=headers,
    )


def view(job: Job, *, with_fire_times: bool = False) -> dict[str, Any]:
    upcoming = container().jobs.next_fire_times(job, 5 if with_fire_times else 1)
    return job_view(job, upcoming, with_fire_times=with_fire_times)


def job_response(job: Job, status: int = 200, *, with_next: bool = False) -> Response:
    return json_response(status, view(job, with_fire_times=with_next), {"ETag": f'"{job.version}"'})


# --- per-tenant request rate: every /v1 call is counted before its route runs ---


def rate_limit(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response:
    if not app.current_event.path.startswith("/v1/"):
        return next_middleware(app)
    try:
        tenant = tenant_of_request()
    except Unauthenticated:
        return next_middleware(app)  # the route answers 401
    try:
        container().jobs.admit(tenant)
    except JobschedError as exc:
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return json_response(exc.status, exc.to_dict(), headers)
    return next_middleware(app)


app.use(middlewares=[rate_limit])


# --- routes ---


def _ok(description: str, model: Any) -> OpenAPIResponse:
    return {"description": description, "content": {"application/json": {"model": model}}}


JOB_RESPONSES: dict[int, OpenAPIResponse] = {200: _ok("OK", JobView), **ERRORS}

IfMatch = Annotated[str | None, Header(alias="if-match", max_length=64, description="the job version (ETag)")]


@app.post(
    "/v1/jobs",
    responses={
        201: {"description": "created", "content": {"application/json": {"model": JobView}}},
        200: _ok("replayed: the job this idempotency key created", JobView),
        **ERRORS,
    },
)
def create_job(
    body: Annotated[JobBody, Body()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key", max_length=255)] = None,
) -> Response[JobView]:
    tenant = tenant_of_request()
    key = body.idempotency_key or idempotency_key
    result = container().jobs.create(tenant, body.to_spec(), idempotency_key=key, body_hash=body.body_hash())
    return job_response(result.job, 201 if result.created else 200)


@app.get("/v1/jobs", responses={200: _ok("OK", JobList), **ERRORS})
def list_jobs(
    state: Annotated[JobState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=4096)] = None,
) -> Response[JobList]:
    page = container().jobs.list_jobs(tenant_of_request(), state=state, limit=limit, cursor=cursor)
    return json_response(200, {"items": [view(j) for j in page.items], "nextCursor": page.cursor})


@app.get("/v1/jobs/<job_id>", responses=JOB_RESPONSES)
def get_job(job_id: Annotated[str, JOB_ID]) -> Response[JobView]:
    return job_response(container().jobs.get(tenant_of_request(), job_id), with_next=True)


@app.patch("/v1/jobs/<job_id>", responses=JOB_RESPONSES)
def update_job(
    job_id: Annotated[str, JOB_ID], patch: Annotated[dict[str, Any], Body()], if_match: IfMatch = None
) -> Response[JobView]:
    version = parse_if_match(if_match, required=True)
    assert version is not None
    reset_anchor: list[bool] = []

    def build(job: Job) -> Any:
        body, reset = merge_patch(job, patch)
        reset_anchor.append(reset)
        anchor = None if reset else job.spec.schedule.anchor
        return body.to_spec(anchor)

    job = container().jobs.update(tenant_of_request(), job_id, version, build)
    return job_response(job, with_next=True)


@app.delete("/v1/jobs/<job_id>", responses=JOB_RESPONSES)
def cancel_job(job_id: Annotated[str, JOB_ID], if_match: IfMatch = None) -> Response[JobView]:
    version = parse_if_match(if_match, required=False)
    return job_response(container().jobs.cancel(tenant_of_request(), job_id, version))


@app.post("/v1/jobs/<job_id>/pause", responses=JOB_RESPONSES)
def pause_job(job_id: Annotated[str, JOB_ID], if_match: IfMatch = None) -> Response[JobView]:
    version = parse_if_match(if_match, required=False)
    return job_response(container().jobs.pause(tenant_of_request(), job_id, version))


@app.post("/v1/jobs/<job_id>/resume", responses=JOB_RESPONSES)
def resume_job(job_id: Annotated[str, JOB_ID], if_match: IfMatch = None) -> Response[JobView]:
    version = parse_if_match(if_match, required=False)
    return job_response(container().jobs.resume(tenant_of_request(), job_id, version), with_next=True)


@app.get("/openapi.json", include_in_schema=False)
def openapi_document() -> Response[Any]:
    return Response(
        status_code=200,
        content_type=content_types.APPLICATION_JSON,
        body=app.get_openapi_json_schema(title=TITLE, version=VERSION, description=DESCRIPTION),
    )


from .api_runs import router as runs_router  # noqa: E402 (needs the helpers above)

app.include_router(runs_router)


# --- errors: every failure is a JSON body naming what was wrong; nothing escapes as a bare 500 ---


@app.exception_handler(JobschedError)
def domain_error(exc: JobschedError) -> Response:
    if exc.status >= 500:
        logger.warning("request failed", extra={"code": exc.code, "error": exc.message})
    return json_response(exc.status, exc.to_dict())


@app.exception_handler(RequestValidationError)
def request_invalid(exc: RequestValidationError) -> Response:
    problems = problems_of(list(exc.errors()))
    body = {
        "code": "invalid_request",
        "message": "; ".join(str(p) for p in problems),
        "errors": [{"field": p.field, "rule": p.rule} for p in problems],
    }
    return json_response(400, body)


@app.exception_handler(Exception)
def unexpected(exc: Exception) -> Response:
    # A bug, not bad input: logged with its stack, answered in the API's shape.
    logger.exception("unhandled error")
    return json_response(
        500, {"code": "internal_error", "message": "an unexpected error; it has been logged"}
    )


@app.not_found
def route_not_found(exc: NotFoundError) -> Response:
    return json_response(404, {"code": "not_found", "message": f"no route for {app.current_event.path}"})


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    _accept_merge_patch(event)
    refused = _refuse_unreadable_body(event)
    if refused is not None:
        return refused
    return app.resolve(event, context)


def _refuse_unreadable_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """Bodies are JSON in UTF-8; anything else is the client's error, answered before the
    resolver (which would fail on it) in the API's own error shape."""
    body = event.get("body")
    if not body:
        return None
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    media_type = str(headers.get("content-type") or "application/json").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        return _error_event(415, "content-type", f"must be application/json, not {media_type or 'empty'}")
    if event.get("isBase64Encoded"):
        try:
            base64.b64decode(body, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return _error_event(400, "body", "must be JSON encoded as UTF-8")
    return None


def _error_event(status: int, field: str, rule: str) -> dict[str, Any]:
    body = {
        "code": "invalid_request",
        "message": f"{field}: {rule}",
        "errors": [{"field": field, "rule": rule}],
    }
    if status == 415:
        body["code"] = "unsupported_media_type"
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {},
        "body": json.dumps(body, separators=(",", ":")),
        "isBase64Encoded": False,
    }


def _accept_merge_patch(event: dict[str, Any]) -> None:
    """RFC 7396's media type is JSON; let the resolver's body validation treat it as such."""
    for key in ("headers", "multiValueHeaders"):
        headers = event.get(key) or {}
        for name, value in list(headers.items()):
            if name.lower() != "content-type":
                continue
            values = value if isinstance(value, list) else [value]
            fixed = [v.replace("application/merge-patch+json", "application/json") for v in values]
            headers[name] = fixed if isinstance(value, list) else fixed[0]
