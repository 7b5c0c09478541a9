"""The resolver: routes from `jobs`, `runs`, `leases` and `schedules`, the per-tenant
request rate, the OpenAPI document, and the one place every failure becomes the API's JSON
error body.

Request bodies are decoded strictly (`json_body`); responses are validated against their
view models, and one that breaks its schema is a 500 (a bug of ours), never a 400."""

from __future__ import annotations

import base64
import json
import re
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.event_handler.openapi.models import OpenAPI, Server
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from ...api_models.problems import problems_of
from ...domain.errors import FieldProblem, JobschedError, MethodNotAllowed, Unauthenticated
from ...observability import logger, tracer
from ...wiring import container
from . import calendars, jobs, leases, runs, schedules
from .common import json_response
from .identity import tenant_of
from .json_body import decode_json


class Resolver(APIGatewayRestResolver):
    """Powertools' resolver, with the document stating what this API answers: its request
    errors are 400s in the API's own error body (Powertools documents a 422 on every route),
    and a response that breaks its schema is a 500 in that same body."""

    def get_openapi_schema(self, **kwargs: Any) -> OpenAPI:
        document = super().get_openapi_schema(**kwargs).model_dump(by_alias=True, exclude_none=True)
        internal_error = {
            "description": HTTPStatus.INTERNAL_SERVER_ERROR.phrase,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        }
        for path_item in document.get("paths", {}).values():
            for operation in path_item.values():
                if isinstance(operation, dict) and "responses" in operation:
                    responses = operation["responses"]
                    for status in (422, "422", 500, "500"):
                        responses.pop(status, None)
                    responses[500] = internal_error
        schemas = document.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
            schemas.pop(unused, None)
        return OpenAPI.model_validate(document)


app = Resolver(
    enable_validation=True,
    response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR,
    json_body_deserializer=decode_json,
)
TITLE, VERSION, DESCRIPTION = "jobsched", "1", "Durable multi-tenant job scheduler"
app.configure_openapi(title=TITLE, version=VERSION, description=DESCRIPTION)
app.enable_swagger(path="/docs", title=TITLE, version=VERSION, description=DESCRIPTION)
for module in (jobs, runs, leases, schedules, calendars):
    app.include_router(module.router)


@app.get("/openapi.json", include_in_schema=False)
def openapi_document() -> Response[Any]:
    """The document `/docs` shows (its `?format=json`): the same servers, worked out from
    the request the same way, so both read alike behind a stage path or in local mode."""
    servers = [Server(url=app._get_base_path() or "/")]
    return json_response(
        200,
        app.get_openapi_json_schema(title=TITLE, version=VERSION, description=DESCRIPTION, servers=servers),
    )


# --- per-tenant request rate: every /v1 call is counted before its route runs ---


def rate_limit(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response[Any]:
    if not app.current_event.path.startswith("/v1/"):
        return next_middleware(app)
    try:
        tenant = tenant_of(app.current_event)
    except Unauthenticated:
        return next_middleware(app)  # the route answers 401
    try:
        container().jobs.admit(tenant)
    except JobschedError as exc:
        return error_response(exc)
    return next_middleware(app)


app.use(middlewares=[rate_limit])


# --- errors: every failure is a JSON body naming what was wrong; nothing escapes as a bare 500 ---


def invalid_request(problems: list[FieldProblem], code: str = "invalid_request") -> dict[str, Any]:
    return {
        "code": code,
        "message": "; ".join(str(p) for p in problems),
        "errors": [{"field": p.field, "rule": p.rule} for p in problems],
    }


def error_response(exc: JobschedError) -> Response[Any]:
    """The API's answer for a domain error: its status, its body (`to_dict`) and its headers
    (`Retry-After` on a 429 and a 503, `Allow` on a 405)."""
    return json_response(exc.status, exc.to_dict(), exc.headers or None)


@app.exception_handler(JobschedError)
def domain_error(exc: JobschedError) -> Response[Any]:
    if exc.status >= 500:
        logger.warning("request failed", extra={"code": exc.code, "error": exc.message})
    return error_response(exc)


@app.exception_handler(RequestValidationError)
def request_invalid(exc: RequestValidationError) -> Response[Any]:
    errors = list(exc.errors())
    unknown = _impossible_job_id(errors)
    if unknown is not None:
        # No job has such an id (ids are made here, never chosen): not found, as for any
        # unknown id, rather than the path pattern a caller never wrote.
        return json_response(404, {"code": "not_found", "message": f"job {unknown} not found"})
    return json_response(400, invalid_request(problems_of(errors)))


def _impossible_job_id(errors: list[Any]) -> str | None:
    """The job id in the path when it alone broke the request, by not looking like one."""
    if len(errors) != 1:
        return None
    (error,) = errors
    if tuple(error.get("loc", ())) != ("path", "job_id") or error.get("type") != "string_pattern_mismatch":
        return None
    return str(error.get("input"))[:80]


@app.exception_handler(RequestUnsupportedContentType)
def unsupported_content_type(exc: RequestUnsupportedContentType) -> Response[Any]:
    # The handler's check answers first; this keeps any type it lets through a 415, not a 500.
    problem = FieldProblem("content-type", f"must be {JSON_MEDIA_TYPE}")
    return json_response(415, invalid_request([problem], "unsupported_media_type"))


INTERNAL_ERROR = {"code": "internal_error", "message": "an unexpected error; it has been logged"}


@app.exception_handler(ResponseValidationError)
def response_invalid(exc: ResponseValidationError) -> Response[Any]:
    # Our answer broke its own schema: a bug, logged with where, answered as one.
    errors = [{"loc": e.get("loc"), "type": e.get("type")} for e in exc.errors()]
    logger.error("response breaks its schema", extra={"path": app.current_event.path, "errors": errors})
    return json_response(500, INTERNAL_ERROR)


@app.exception_handler(Exception)
def unexpected(exc: Exception) -> Response[Any]:
    # A bug, not bad input: logged with its stack, answered in the API's shape.
    logger.exception("unhandled error")
    return json_response(500, INTERNAL_ERROR)


@app.not_found
def route_not_found(exc: NotFoundError) -> Response[Any]:
    """A path no route has is a 404 (one a route has, asked with a method it does not take,
    never gets here: `_refuse_method`)."""
    return json_response(404, {"code": "not_found", "message": f"no route for {app.current_event.path}"})


def methods_of(path: str) -> set[str]:
    """The methods of the resource `path` is (none: no route has it). Resources are matched
    as API Gateway matches them: of the routes whose rule matches `path`, those with a
    literal segment where the others have a parameter (the leftmost such segment decides)
    are its resource's, so `/v1/jobs/batch` takes POST alone though `/v1/jobs/<job_id>`
    matches it too."""
    routes = app._static_routes + app._dynamic_routes  # Powertools lists them nowhere public
    matching = [route for route in routes if route.rule.match(path)]
    if not matching:
        return set()
    resource = max(_literal_segments(route.path) for route in matching)
    return {route.method for route in matching if _literal_segments(route.path) == resource}


def _literal_segments(route_path: str) -> tuple[bool, ...]:
    """For each segment of a route's path (`/v1/jobs/<job_id>`), whether it is literal."""
    return tuple(not segment.startswith("<") for segment in route_path.split("/"))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
# Never the answer as trace metadata: the create and rotation answers carry a signing secret.
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    refused = _refuse_method(event) or _refuse_unreadable_body(event)
    if refused is not None:
        return refused
    return app.resolve(event, context)


def _refuse_method(event: dict[str, Any]) -> dict[str, Any] | None:
    """A method the resource of the request's path does not take (`methods_of`; OPTIONS, HEAD
    and TRACE included: the API sets no CORS) is a 405 naming those it takes, before the
    resolver, which would otherwise hand it to a route of another resource that matches the
    path too (`GET /v1/jobs/batch` to `/v1/jobs/<job_id>`'s) or answer 404. API Gateway
    answers such a request itself; local mode's front passes every method on."""
    path = str(event.get("path") or "")
    method = str(event.get("httpMethod") or "").upper()
    allowed = methods_of(path)
    if not allowed or method in allowed:
        return None
    refused = MethodNotAllowed(method, path, allowed)
    return _answer_event(refused.status, refused.to_dict(), refused.headers)


# --- bodies: JSON in UTF-8, named by a media type compared as RFC 9110 says ---

JSON_MEDIA_TYPE = "application/json"
MERGE_PATCH_MEDIA_TYPE = "application/merge-patch+json"  # RFC 7396: PATCH's body
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_MEDIA_TYPE = re.compile(
    # Each parameter starts at its ';' and can be read one way only (no ReDoS).
    rf"\s*({_TOKEN})/({_TOKEN})\s*((?:;\s*(?:{_TOKEN}=(?:{_TOKEN}|{_QUOTED})\s*)?)*)",
    re.ASCII,
)
MAX_CONTENT_TYPE_CHARS = 256
_PARAMETER = re.compile(rf";\s*({_TOKEN})=({_TOKEN}|{_QUOTED})", re.ASCII)


def parse_media_type(value: str) -> tuple[str, dict[str, str]] | None:
    """`type/subtype` in lower case (media types are case-insensitive) and the parameters,
    their names in lower case and their values unquoted; None when `value` is no media type."""
    match = _MEDIA_TYPE.fullmatch(value)
    if match is None:
        return None
    parameters = {}
    for name, raw in _PARAMETER.findall(match.group(3)):
        parameters[name.lower()] = re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
    return f"{match.group(1)}/{match.group(2)}".lower(), parameters


def _content_types(event: dict[str, Any]) -> list[str]:
    values = [v for k, v in (event.get("headers") or {}).items() if k.lower() == "content-type"]
    for name, listed in (event.get("multiValueHeaders") or {}).items():
        if name.lower() == "content-type":
            values.extend(listed or [])
    return [str(v).strip() for v in values if v is not None]


def _set_content_type(event: dict[str, Any], value: str | None) -> None:
    """Replace every Content-Type of the event (both header maps) with `value`, or drop them."""
    for key in ("headers", "multiValueHeaders"):
        headers = event.get(key)
        if not headers:
            continue
        for name in [n for n in headers if n.lower() == "content-type"]:
            del headers[name]
        if value is not None:
            headers["Content-Type"] = [value] if key == "multiValueHeaders" else value


def _refuse_unreadable_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """Bodies are JSON in UTF-8; anything else is the client's error, answered before the
    resolver (which would fail on it) in the API's own error shape.

    The media type is compared case-insensitively: `application/json` on every route, and
    RFC 7396's `application/merge-patch+json` on PATCH; any other type, other `+json` types
    included (`application/vnd.api+json` has its own document structure, not ours), and a
    charset other than UTF-8 are a 415 naming `content-type`. The accepted body reaches the
    resolver as `application/json` (the only spelling it decodes); a Content-Type on a
    request without a body describes nothing and is dropped."""
    body = event.get("body")
    given = set(_content_types(event))
    if len(given) > 1:
        return _error_event(400, "content-type", "is given more than once, with different values")
    if not body:
        _set_content_type(event, None)
        return None
    if given:
        refused = _refused_media_type(given.pop(), str(event.get("httpMethod") or "").upper())
        if refused is not None:
            return _error_event(415, "content-type", refused)
    _set_content_type(event, JSON_MEDIA_TYPE)
    if event.get("isBase64Encoded"):
        try:
            base64.b64decode(body, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return _error_event(400, "body", "must be JSON encoded as UTF-8")
    return None


def _refused_media_type(value: str, method: str) -> str | None:
    accepted = (JSON_MEDIA_TYPE, MERGE_PATCH_MEDIA_TYPE) if method == "PATCH" else (JSON_MEDIA_TYPE,)
    expected = " or ".join(accepted)
    if len(value) > MAX_CONTENT_TYPE_CHARS:
        return f"must be {expected}, in at most {MAX_CONTENT_TYPE_CHARS} characters"
    parsed = parse_media_type(value)
    if parsed is None:
        return f"must be {expected}; {value[:64]!r} is not a media type"
    media_type, parameters = parsed
    if media_type not in accepted:
        return f"must be {expected}, not {media_type[:64]}"
    charset = parameters.get("charset")
    if charset is not None and charset.lower() != "utf-8":
        return f"bodies are UTF-8; charset {charset[:32]} is not supported"
    return None


def _error_event(status: int, field: str, rule: str) -> dict[str, Any]:
    code = "unsupported_media_type" if status == 415 else "invalid_request"
    return _answer_event(status, invalid_request([FieldProblem(field, rule)], code))


def _answer_event(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A JSON answer as the handler returns it to API Gateway, without the resolver."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "multiValueHeaders": {},
        "body": json.dumps(body, separators=(",", ":")),
        "isBase64Encoded": False,
    }
