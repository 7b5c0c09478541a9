"""The resolver: routes from `jobs`, `runs` and `leases`, the per-tenant request rate, the
OpenAPI document, and the one place every failure becomes the API's JSON error body.

Request bodies are decoded strictly (`json_body`); responses are validated against their
view models, and one that breaks its schema is a 500 (a bug of ours), never a 400."""

from __future__ import annotations

import base64
import json
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.event_handler.openapi.models import OpenAPI, Server
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from ...domain.errors import FieldProblem, JobschedError, Unauthenticated
from ...observability import logger, tracer
from ...wiring import container
from . import jobs, leases, runs
from .common import json_response
from .identity import tenant_of
from .json_body import decode_json
from .problems import problems_of


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
for module in (jobs, runs, leases):
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
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return json_response(exc.status, exc.to_dict(), headers)
    return next_middleware(app)


app.use(middlewares=[rate_limit])


# --- errors: every failure is a JSON body naming what was wrong; nothing escapes as a bare 500 ---


def invalid_request(problems: list[FieldProblem], code: str = "invalid_request") -> dict[str, Any]:
    return {
        "code": code,
        "message": "; ".join(str(p) for p in problems),
        "errors": [{"field": p.field, "rule": p.rule} for p in problems],
    }


@app.exception_handler(JobschedError)
def domain_error(exc: JobschedError) -> Response[Any]:
    if exc.status >= 500:
        logger.warning("request failed", extra={"code": exc.code, "error": exc.message})
    return json_response(exc.status, exc.to_dict())


@app.exception_handler(RequestValidationError)
def request_invalid(exc: RequestValidationError) -> Response[Any]:
    return json_response(400, invalid_request(problems_of(exc.errors())))


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
    code = "unsupported_media_type" if status == 415 else "invalid_request"
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {},
        "body": json.dumps(invalid_request([FieldProblem(field, rule)], code), separators=(",", ":")),
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
