"""Every error the domain and its adapters raise. Each carries an HTTP status so the API
maps them in one place, and validation errors name the field and the rule broken."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class JobschedError(Exception):
    """Base class. `status` is the HTTP status the API answers with; `code` is stable for clients."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        body.update({k: v for k, v in self.details.items() if v is not None})
        return body

    @property
    def headers(self) -> dict[str, str]:
        """The HTTP headers the answer carries beside its body (none unless a subclass says)."""
        return {}


@dataclass(frozen=True)
class FieldProblem:
    field: str
    rule: str

    def __str__(self) -> str:
        return f"{self.field}: {self.rule}"


class ValidationFailed(JobschedError):
    """Input breaks a rule. Always names the field (API spelling) and the rule."""

    status = 400
    code = "invalid_request"

    def __init__(self, field: str, rule: str, *more: FieldProblem) -> None:
        self.problems: list[FieldProblem] = [FieldProblem(field, rule), *more]
        super().__init__(
            "; ".join(str(p) for p in self.problems),
            errors=[{"field": p.field, "rule": p.rule} for p in self.problems],
        )

    @property
    def field(self) -> str:
        return self.problems[0].field


class Unauthenticated(JobschedError):
    status = 401
    code = "unauthenticated"


class NotFound(JobschedError):
    """Missing, or owned by another tenant: the two are indistinguishable on purpose."""

    status = 404
    code = "not_found"


class MethodNotAllowed(JobschedError):
    """The path exists, but not with this method; `allowed` (sorted) is what it takes, sent
    as the `Allow` header."""

    status = 405
    code = "method_not_allowed"

    def __init__(self, method: str, path: str, allowed: Iterable[str]) -> None:
        self.allowed = tuple(sorted(set(allowed)))
        super().__init__(f"{path} does not take {method}; it takes {', '.join(self.allowed)}")

    @property
    def headers(self) -> dict[str, str]:
        return {"Allow": ", ".join(self.allowed)}


class Conflict(JobschedError):
    """The request is valid but the resource's state does not allow it."""

    status = 409
    code = "conflict"


class ConcurrentUpdate(Conflict):
    """Another writer changed the item between our read and our conditional write."""

    code = "concurrent_update"


class EffectMayRepeat(Conflict):
    """A change that would run an at-most-once effect again, asked for without saying so."""

    code = "effect_may_repeat"


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"


class VersionMismatch(JobschedError):
    """If-Match named a version that is no longer current."""

    status = 412
    code = "version_mismatch"


class PreconditionRequired(JobschedError):
    status = 428
    code = "precondition_required"


class LimitExceeded(JobschedError):
    """A per-tenant limit (request rate, live jobs) is reached; the message names it."""

    status = 429
    code = "limit_exceeded"

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class TenantAtLimit(LimitExceeded):
    """Every one of the tenant's concurrency slots (TENANT_CONCURRENCY) is held by a live
    lease, so no run of the tenant may be claimed now (store.tenant_slots)."""

    code = "tenant_at_limit"


class StaleFence(JobschedError):
    """A lease holder whose fence is no longer current tried to change a run."""

    status = 409
    code = "stale_fence"


class StorageUnavailable(JobschedError):
    """The store throttled or failed after retries; safe for the caller to retry, after
    `retry_after` seconds (the API's `Retry-After`)."""

    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int = 1, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


# --- execution outcomes: how a target's failure is classed for the retry policy ---


class ExecutionError(Exception):
    """A run's effect failed. `error_class` is recorded on the transition and in metrics."""

    retryable: bool = True
    error_class: str = "ExecutionError"

    def __init__(self, message: str, *, error_class: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_class:
            self.error_class = error_class


class RetryableError(ExecutionError):
    """Transient: throttling, 5xx, connection failure. Retried under the policy."""

    retryable = True
    error_class = "Retryable"


class AmbiguousError(RetryableError):
    """The effect may or may not have happened (e.g. a timeout after sending). Retried, and
    safe only because every target receives the run key as its idempotency key."""

    error_class = "Ambiguous"


class PermanentError(ExecutionError):
    """Retrying cannot help: bad request, refused destination, missing handler. Dead at once."""

    retryable = False
    error_class = "Permanent"


class DefinitionMissing(PermanentError):
    """A run references its job's definition of a version (`Run.definition_since`) that
    neither the job nor a stored snapshot holds: it cannot be run with what it was made from."""

    error_class = "DefinitionMissing"
