"""What the route modules share: path parameters, paging, If-Match, JSON responses and the
responses each route documents."""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Annotated, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from ...api_models.requests import EmptyBody
from ...api_models.views import ErrorBody
from ...domain.errors import PreconditionRequired, ValidationFailed

JOB_ID = Path(pattern=r"^j_[0-9a-z]{1,64}$", description="job id")
RUN_KEY = Path(min_length=1, max_length=256, description="run key, `<jobId>@<RFC 3339 instant>`")
Limit = Annotated[int, Query(ge=1, le=100)]
Cursor = Annotated[str | None, Query(max_length=4096)]
IfMatch = Annotated[str | None, Header(alias="if-match", max_length=64, description="the job version (ETag)")]
# The body of every POST and DELETE route that takes none, declared so that one sent is
# validated (a member in it is a 400 naming it) rather than ignored: `body: NoBody = None`.
NoBody = Annotated[
    EmptyBody | None, Body(description="the route takes no body: send none, or `{}`; a member is refused")
]

# Every route: bad input, no caller, no such resource (or route), a body that is not JSON,
# the tenant's request rate, a bug, the store unavailable.
ERRORS = (400, 401, 404, 415, 429, 500, 503)
CHANGE_ERRORS = (*ERRORS, 409)  # the resource's state does not allow the change
VERSIONED_ERRORS = (*CHANGE_ERRORS, 412, 428)  # routes that take If-Match
NOT_GRANTED = 403  # target_not_granted: a target or secret the tenant was not granted


def _json(description: str, model: Any) -> OpenAPIResponse:
    return {"description": description, "content": {"application/json": {"model": model}}}


def documented(
    successes: dict[int, tuple[str, Any]], errors: tuple[int, ...] = ERRORS
) -> dict[int, OpenAPIResponse]:
    """A route's responses for the OpenAPI document: its successes, then its error bodies."""
    answers = {status: _json(text, model) for status, (text, model) in successes.items()}
    answers.update({status: _json(HTTPStatus(status).phrase, ErrorBody) for status in errors})
    return answers


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers
    )


_IF_MATCH = re.compile(r'\s*(?:([0-9]{1,18})|(?:W/)?"([0-9]{1,18})")\s*', re.ASCII)


def parse_if_match(value: str | None) -> int | None:
    if value is None:
        return None
    match = _IF_MATCH.fullmatch(value)
    if match is None:
        raise ValidationFailed("If-Match", 'must be the job version, e.g. "3" (at most 18 digits)')
    return int(match.group(1) or match.group(2))


def required_if_match(value: str | None) -> int:
    version = parse_if_match(value)
    if version is None:
        raise PreconditionRequired("If-Match: required; send the job's current version (its ETag)")
    return version


def run_key_of(raw: str) -> str:
    """Path segments may carry the key percent-encoded (`%40`, `%3A`) or raw."""
    return unquote(raw)
