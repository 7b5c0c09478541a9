"""Acting with a tenant's own authority: the worker assumes the role a target names.

Every AssumeRole passes, derived from the tenant id alone (so a role's trust policy can name
exactly one tenant, and tenant A can never use B's role):

- `ExternalId`: the tenant id itself when it fits STS's rule (2-1224 characters of
  ``[\\w+=,.@:/-]``) and does not start with ``sha256:``; otherwise ``sha256:`` + the 64 hex
  digits of SHA-256 of its UTF-8 bytes (`external_id`). One tenant, one id, never shared.
- `SourceIdentity` and `RoleSessionName`: ``jobsched.<tenant digest>`` (32 hex digits, see
  jobsched.domain.grants.tenant_digest), which fits both fields (2-64 characters of
  ``[\\w+=,.@-]``). The session is shared by the tenant's runs while its credentials last, so
  it names the tenant behind it; each call carries its run key (`runKey`, the execution name).

Credentials are cached per (role, tenant) until `REFRESH_BEFORE` ahead of their expiry. A
failed assume never reaches the target; it is a PermanentError `AssumeRoleDenied` (the trust
policy or our policy refuses) or `AssumeRoleInvalid` (a request STS will never take), or a
RetryableError `AssumeRoleUnavailable` (throttling, STS trouble, no connection)."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from ..domain.errors import ExecutionError, PermanentError, RetryableError
from ..domain.grants import OWN_SOURCE_PREFIX, tenant_digest
from ..domain.instants import Clock, SystemClock
from .aws_targets import RETRYABLE_CODES

_EXTERNAL_ID = re.compile(r"[\w+=,.@:/-]{2,1224}", re.ASCII)
DIGEST_EXTERNAL_ID_PREFIX = "sha256:"
SESSION_SECONDS = 3600  # every role allows at least one hour
REFRESH_BEFORE = timedelta(minutes=5)  # a cached session is renewed this long before it expires
MAX_SESSIONS = 1024  # (role, tenant) pairs kept per process, least recently used dropped


def external_id(tenant: str) -> str:
    """The `sts:ExternalId` a tenant's role trusts (see the module docstring)."""
    if _EXTERNAL_ID.fullmatch(tenant) and not tenant.startswith(DIGEST_EXTERNAL_ID_PREFIX):
        return tenant
    return DIGEST_EXTERNAL_ID_PREFIX + hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()


def session_identity(tenant: str) -> str:
    """`SourceIdentity` and `RoleSessionName` of a tenant's sessions: jobsched.<digest>."""
    return OWN_SOURCE_PREFIX + tenant_digest(tenant)


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration: datetime  # aware


class AssumedRoles:
    """Assumes roles for tenants and caches their credentials. Thread-safe: concurrent runs of
    one (role, tenant) wait for one AssumeRole rather than each making its own.

    `sts` returns the scheduler's own STS client (its role's credentials)."""

    def __init__(
        self,
        sts: Callable[[], Any],
        clock: Clock | None = None,
        *,
        session_seconds: int = SESSION_SECONDS,
        refresh_before: timedelta = REFRESH_BEFORE,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self._sts = sts
        self._clock = clock or SystemClock()
        self._session_seconds = session_seconds
        self._refresh_before = refresh_before
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], Credentials] = OrderedDict()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def credentials(self, role_arn: str, tenant: str) -> Credentials:
        """Credentials of `role_arn` assumed for `tenant`, valid for at least `refresh_before`.
        Raises PermanentError or RetryableError (never the target's own error classes)."""
        key = (role_arn, tenant)
        fresh = self._cached(key)
        if fresh is not None:
            return fresh
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            fresh = self._cached(key)  # another thread may have assumed it meanwhile
            if fresh is not None:
                return fresh
            made = self._assume(role_arn, tenant)
            with self._guard:
                self._sessions[key] = made
                self._sessions.move_to_end(key)
                while len(self._sessions) > self._max_sessions:
                    dropped, _ = self._sessions.popitem(last=False)
                    self._locks.pop(dropped, None)
            return made

    def _cached(self, key: tuple[str, str]) -> Credentials | None:
        with self._guard:
            found = self._sessions.get(key)
            if found is None:
                return None
            if found.expiration - self._refresh_before <= self._clock.now():
                return None
            self._sessions.move_to_end(key)
            return found

    def _assume(self, role_arn: str, tenant: str) -> Credentials:
        identity = session_identity(tenant)
        try:
            response = self._sts().assume_role(
                RoleArn=role_arn,
                RoleSessionName=identity,
                ExternalId=external_id(tenant),
                SourceIdentity=identity,
                DurationSeconds=self._session_seconds,
            )
        except ClientError as exc:
            raise assume_error(role_arn, tenant, exc) from exc
        except BotoCoreError as exc:
            raise assume_error(role_arn, tenant, exc) from exc
        found = response["Credentials"]
        return Credentials(
            access_key_id=found["AccessKeyId"],
            secret_access_key=found["SecretAccessKey"],
            session_token=found["SessionToken"],
            expiration=found["Expiration"],
        )


def assume_error(role_arn: str, tenant: str, exc: Exception) -> ExecutionError:
    """How a failed AssumeRole is classed. Nothing reached the target, so nothing is ambiguous."""
    where = f"sts:AssumeRole of {role_arn}"
    if isinstance(exc, ParamValidationError):
        return PermanentError(f"{where} is malformed: {exc}", error_class="AssumeRoleInvalid")
    if not isinstance(exc, ClientError):
        return RetryableError(f"{where} failed: {exc}", error_class="AssumeRoleUnavailable")
    error = exc.response.get("Error", {})
    code = str(error.get("Code") or "Unknown")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    text = f"{where}: {code}: {error.get('Message') or exc}"
    if code in RETRYABLE_CODES or "Throttl" in code or status is None or status >= 500:
        return RetryableError(text, error_class="AssumeRoleUnavailable")
    if "AccessDenied" in code:
        return PermanentError(
            f"{text}. The role's trust policy must allow the scheduler's worker role "
            f"sts:AssumeRole with sts:ExternalId {external_id(tenant)!r}, and sts:SetSourceIdentity",
            error_class="AssumeRoleDenied",
        )
    return PermanentError(text, error_class="AssumeRoleInvalid")
