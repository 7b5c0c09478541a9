"""What the client raises. Every error answer is an `ApiError` (or the subclass for its status)
carrying the API's `code`, `message`, field `errors` and the HTTP `status` (a redirect not
followed is `RedirectRefused`); no answer at all is `ApiUnreachable`; a success whose body is
not the documented shape is `UnexpectedResponse`."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError

from ..api_models.views import ErrorBody, ErrorItem


class ClientError(Exception):
    """Base of everything `jobsched.client` raises."""


class ApiUnreachable(ClientError):
    """The endpoint gave no answer (connection refused, DNS, TLS, timeout), as opposed to an
    error answer. A request that was sent may or may not have been applied."""


class SigningUnavailable(ClientError):
    """SigV4 was asked for but there are no credentials or no region to sign with."""


class UnexpectedResponse(ClientError):
    """A 2xx answer whose body is not the shape the API documents for it (a client and a
    server of different versions, or something between them answering). `status`, `body`;
    its message is one line, naming what is wrong (`shape_problems`)."""

    def __init__(self, status: int, body: Any, problem: str) -> None:
        self.status = status
        self.body = body
        one_line = " ".join(problem.split())
        super().__init__(f"{status}: the answer is not the documented shape: {one_line}")


def shape_problems(error: ValidationError) -> str:
    """What an answer got wrong, on one line: `<member path>: <rule>` for each member pydantic
    refused, joined by `; ` (`body` for the answer as a whole)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or 'body'}: {problem['msg']}"
        for problem in error.errors()
    )


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


def _items(raw: Any) -> list[ErrorItem]:
    items = []
    for entry in raw if isinstance(raw, list) else ():
        try:
            items.append(ErrorItem.model_validate(entry))
        except ValidationError:
            continue
    return items


class ApiError(ClientError):
    """A non-2xx answer.

    `status`: the HTTP status. `code`: the API's stable error code (`not_found`,
    `version_mismatch`, ...; for an answer without one, e.g. API Gateway's own, the status
    phrase in snake case). `message`: the API's message. `errors`: the field errors
    (`ErrorItem`: `field` as the request spelled it, `rule` broken), empty when none.
    `details`: the body's other members (e.g. `currentVersion`). `body`: the parsed body (a
    dict, a string, or None). `headers`: the answer's headers, names in lower case.
    `retry_after`: seconds the server asked to wait before sending again, or None."""

    def __init__(
        self,
        status: int,
        body: Any,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}
        self.retry_after = retry_after
        data = body if isinstance(body, dict) else {}
        phrase = _phrase(status)
        self.code: str = str(data.get("code") or phrase.lower().replace(" ", "_"))
        text = data.get("message") or data.get("Message")  # API Gateway's own errors: "Message"
        if text is None:
            text = body if isinstance(body, str) and body else phrase
        self.message: str = str(text)
        self.errors: list[ErrorItem] = _items(data.get("errors"))
        self.details: dict[str, Any] = {
            k: v for k, v in data.items() if k not in ("code", "message", "errors", "Message")
        }
        super().__init__(f"{status} {self.code}: {self.message}")

    @property
    def fields(self) -> list[str]:
        """The names of the fields the answer says were wrong, in its order."""
        return [item.field for item in self.errors]

    @property
    def error_body(self) -> ErrorBody | None:
        """The body as the API's ErrorBody, or None when it is not one (a gateway's answer)."""
        try:
            return ErrorBody.model_validate(self.body)
        except ValidationError:
            return None

    @staticmethod
    def of(
        status: int, body: Any, headers: Mapping[str, str] | None = None, retry_after: float | None = None
    ) -> ApiError:
        """The error for an answer: the subclass for its status, else ApiError (ServerError for 5xx)."""
        cls: type[ApiError] = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
        return cls(status, body, headers, retry_after)


class RedirectRefused(ApiError):
    """A redirect (3xx) the client did not follow; nothing was sent to its `location`. Only
    a GET or HEAD redirected within the endpoint's origin (scheme, host and port) is
    followed: a redirect to another origin would carry the API key or signature there, one
    from https to http would carry them unencrypted, and a write is never resent to another
    URL nor turned into a GET.

    `status`: the 3xx. `location`: the URL it pointed to. `origin`: that URL's
    `scheme://host:port`. `code`: `redirect_refused`; `message`: why; `body` is the client's
    own (`code`, `message`, `location`), not the answer's."""

    def __init__(
        self, status: int, location: str, origin: str, reason: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.location = location
        self.origin = origin
        body = {"code": "redirect_refused", "message": reason, "location": location}
        super().__init__(status, body, headers)


class Invalid(ApiError):
    """400 or 422: the request broke a rule; `errors` names each field and rule."""


class Unauthorized(ApiError):
    """401: no caller could be identified (no key, or no valid signature)."""


class Forbidden(ApiError):
    """403: the caller may not do this (e.g. `target_not_granted`, or API Gateway refusing)."""


class NotFound(ApiError):
    """404: no such job or run for this tenant (or no such route)."""


class Conflict(ApiError):
    """409: the resource's state does not allow the change (`conflict`, `stale_fence`,
    `effect_may_repeat`, `idempotency_key_reused`, `concurrent_update`)."""


class VersionMismatch(Conflict):
    """412 `version_mismatch`: the job changed since the version sent in If-Match;
    `current_version` is the version it has now (when the answer says)."""

    @property
    def current_version(self) -> int | None:
        value = self.details.get("currentVersion")
        return value if isinstance(value, int) else None


class PreconditionRequired(ApiError):
    """428: the route needs If-Match (the job's version) and none was sent."""


class RateLimited(ApiError):
    """429: the tenant's request rate or a limit; `retry_after` says when to send again.
    Raised once the client's retries are spent (or the wait asked is beyond its bound)."""


class ServerError(ApiError):
    """5xx: the server failed (a bug of its own, or something between)."""


class Unavailable(ServerError):
    """503: storage (or the service) is unavailable for now; the request was not applied.
    Raised once the client's retries are spent."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: Invalid,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    412: VersionMismatch,
    422: Invalid,
    428: PreconditionRequired,
    429: RateLimited,
    503: Unavailable,
}
