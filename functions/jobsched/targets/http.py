"""HTTP webhook target: one request per attempt, pinned to the addresses the policy vetted.

The receiver gets the run key in `Idempotency-Key`, so a retried or redelivered attempt can
be recognised and answered without repeating the effect, a Standard Webhooks signature
(targets.signing) proving the request is ours, and a W3C `traceparent` under the worker's
X-Ray trace (domain.tracing) so the receiver's own spans join it. Header values referenced
by ARN are read just before the request (targets.secrets) and scrubbed from whatever the
answer records."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, Timeout
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.util.ssl_match_hostname import CertificateError

from ..domain.errors import AmbiguousError, ExecutionError, PermanentError, RetryableError
from ..domain.models import FRAMING_HEADERS, HttpTarget
from ..domain.tracing import TraceContext, traceparent
from ..observability import current_trace
from .invocation import Invocation
from .secrets import SecretReader, scrub
from .signing import WEBHOOK_HEADERS, DeliverySigner
from .ssrf import Destination, DestinationPolicy

RESULT_BODY_LIMIT = 4096  # bytes of response body kept in the run's result
ERROR_SNIPPET = 300  # characters of an error response quoted in the failure message
MAX_REDIRECTS = 3
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Set by the scheduler; a same-named target header is dropped rather than sent twice.
_OWN_HEADERS = frozenset(
    {
        "idempotency-key",
        "content-type",
        "user-agent",
        "x-jobsched-run-key",
        "x-jobsched-attempt",
        "host",
        "traceparent",
    }
    | WEBHOOK_HEADERS
    | FRAMING_HEADERS  # the transport's; only jobs stored before the rule still name them
)


class HttpTargetClient:
    """`signer` signs every request (without one, requests go unsigned: tests of the transport
    alone); `secrets` reads referenced header values (without one, a target that references a
    secret fails permanently); `trace` reads the calling invocation's trace context (None:
    a trace of the run's own, domain.tracing.traceparent)."""

    def __init__(
        self,
        policy: DestinationPolicy | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_redirects: int = MAX_REDIRECTS,
        signer: DeliverySigner | None = None,
        secrets: SecretReader | None = None,
        trace: Callable[[], TraceContext | None] = current_trace,
    ) -> None:
        self.policy = policy or DestinationPolicy()
        self._ssl_context = ssl_context
        self._max_redirects = max_redirects
        self._signer = signer
        self._secrets = secrets
        self._trace = trace

    def send(self, target: HttpTarget, invocation: Invocation) -> dict[str, Any]:
        """Returns {"status", "body"}; raises an ExecutionError subclass on any other outcome.
        Neither ever carries the value of a referenced secret."""
        deadline = time.monotonic() + min(target.timeout_seconds, invocation.timeout_seconds)
        referenced = self._referenced(target, invocation)
        hidden = _hidden_values(target, referenced)
        try:
            return self._send(target, invocation, deadline, referenced, hidden)
        except ExecutionError as exc:
            exc.message = scrub(exc.message, hidden)
            exc.args = (exc.message,)
            raise
        except Exception as exc:
            if not hidden:
                raise
            # Recorded as the run's error (dispatch.TargetRunner): scrubbed, and without the
            # chain, whose text is not ours to vouch for.
            raise RetryableError(
                scrub(str(exc), hidden) or type(exc).__name__, error_class=type(exc).__name__
            ) from None

    def _referenced(self, target: HttpTarget, invocation: Invocation) -> dict[str, str]:
        if not target.secret_headers:
            return {}
        if self._secrets is None:
            raise PermanentError("this worker cannot read secrets", error_class="SecretUnavailable")
        return self._secrets.header_values(invocation.tenant, target)

    def _send(
        self,
        target: HttpTarget,
        invocation: Invocation,
        deadline: float,
        referenced: dict[str, str],
        hidden: list[str],
    ) -> dict[str, Any]:
        literal = {name: value for name, value in target.headers.items() if isinstance(value, str)}
        extra = _checked_headers({**literal, **referenced})
        url, method = target.url, target.method
        body = None if method == "GET" else invocation.envelope_json().encode()
        signing = self._signer.secrets_for(invocation) if self._signer else []
        origin: tuple[str, str, int] | None = None
        for hop in range(self._max_redirects + 1):
            dest = self.policy.destination(url)  # every hop is vetted, redirects included
            if origin is None:
                origin = dest.origin
            elif dest.origin != origin:
                extra = {}  # target headers often carry credentials meant only for the first origin
            headers = {**extra, **_own_headers(dest, invocation, has_body=body is not None)}
            headers["traceparent"] = traceparent(self._trace(), invocation.run_key, invocation.attempt)
            if self._signer is not None:
                headers.update(self._signer.headers(signing, invocation, body))
            status, location, content_type, data = self._exchange(
                dest, method, headers, body, deadline, read_extra=max(map(len, hidden), default=0)
            )
            if hidden:
                data = _scrubbed(data, hidden)
            if 200 <= status < 300:
                return {"status": status, **_result_body(data, content_type)}
            if status in _REDIRECTS and location:
                if hop == self._max_redirects:
                    raise PermanentError(
                        f"more than {self._max_redirects} redirects from {_shown(target.url)}",
                        error_class="TooManyRedirects",
                    )
                url = urljoin(url, location)
                if status == 303:  # "see other" means fetch the answer, never resend the effect
                    method, body = "GET", None
                continue
            raise _status_error(status, url, data)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _exchange(
        self,
        dest: Destination,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        deadline: float,
        *,
        read_extra: int = 0,
    ) -> tuple[int, str | None, str, bytes]:
        """One request/response, trying each vetted address until one accepts the connection."""
        failure: Exception | None = None
        for address in dest.addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            pool = self._pool(dest, address, remaining)
            try:
                response = pool.urlopen(
                    method,
                    dest.target,
                    body=body,
                    headers=headers,
                    retries=False,
                    redirect=False,
                    assert_same_host=False,
                    preload_content=False,
                )
                try:
                    # Beyond the kept 4 KiB by a secret's length: an echoed secret cut at the
                    # limit is still found whole, and scrubbed, before the cut.
                    data = response.read(RESULT_BODY_LIMIT + 1 + read_extra)
                finally:
                    response.release_conn()
                return (
                    response.status,
                    response.headers.get("Location"),
                    response.headers.get("Content-Type", ""),
                    data,
                )
            except (NewConnectionError, ConnectTimeoutError) as exc:
                failure = exc  # nothing was sent: try the next address
            except Exception as exc:
                raise _transport_error(exc, dest) from exc
            finally:
                pool.close()
        if failure is None:
            raise RetryableError(f"time budget spent before connecting to {dest.host}", error_class="Timeout")
        raise RetryableError(
            f"could not connect to {dest.host}:{dest.port}: {failure}", error_class="ConnectFailed"
        ) from failure

    def _pool(self, dest: Destination, address: str, timeout: float) -> HTTPConnectionPool:
        # Connect to the vetted IP; Host, SNI and the certificate check still use the name.
        t = Timeout(connect=timeout, read=timeout)
        if dest.scheme == "https":
            return HTTPSConnectionPool(
                address,
                dest.port,
                timeout=t,
                maxsize=1,
                retries=False,
                cert_reqs="CERT_REQUIRED",
                server_hostname=dest.host,
                assert_hostname=dest.host,
                ssl_context=self._ssl_context,
            )
        return HTTPConnectionPool(address, dest.port, timeout=t, maxsize=1, retries=False)


def _hidden_values(target: HttpTarget, referenced: dict[str, str]) -> list[str]:
    """Every secret value this delivery sends, with and without its literal prefix."""
    hidden = set()
    for name, value in referenced.items():
        hidden.add(value)
        prefix = target.secret_headers[name].prefix or ""
        if prefix and value.startswith(prefix) and len(value) > len(prefix):
            hidden.add(value[len(prefix) :])
    return sorted(hidden, key=len, reverse=True)


def _scrubbed(data: bytes, hidden: list[str]) -> bytes:
    """The response with each secret (as UTF-8, and as JSON escapes it) replaced."""
    text = data.decode("utf-8", errors="surrogateescape")
    forms = {form for value in hidden for form in (value, json.dumps(value)[1:-1])}
    cleaned = scrub(text, sorted(forms, key=len, reverse=True))
    return cleaned.encode("utf-8", errors="surrogateescape")


def _checked_headers(headers: dict[str, str]) -> dict[str, str]:
    for name, value in headers.items():
        if any(ch in value for ch in "\r\n\0"):
            raise PermanentError(
                f"header '{name}' has a control character in its value", error_class="BadHeader"
            )
    return {name: value for name, value in headers.items() if name.lower() not in _OWN_HEADERS}


def _own_headers(dest: Destination, invocation: Invocation, *, has_body: bool) -> dict[str, str]:
    headers = {
        "Host": dest.host_header,
        "User-Agent": "jobsched",
        "Idempotency-Key": invocation.run_key,
        "X-Jobsched-Run-Key": invocation.run_key,
        "X-Jobsched-Attempt": str(invocation.attempt),
    }
    if has_body:
        headers["Content-Type"] = "application/json"
    return headers


def _result_body(data: bytes, content_type: str) -> dict[str, Any]:
    if len(data) > RESULT_BODY_LIMIT:
        text = data[:RESULT_BODY_LIMIT].decode("utf-8", errors="ignore")
        return {"body": text, "truncated": True}
    if not data:
        return {"body": None}
    if "json" in content_type.lower():
        try:
            return {"body": json.loads(data)}
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: kept as text
            pass
    return {"body": data.decode("utf-8", errors="replace")}


def _status_error(status: int, url: str, data: bytes) -> ExecutionError:
    snippet = data[:ERROR_SNIPPET].decode("utf-8", errors="replace").strip()
    message = f"{_shown(url)} answered {status}" + (f": {snippet}" if snippet else "")
    error_class = f"HTTP{status}"
    if status in (408, 429) or status >= 500:
        return RetryableError(message, error_class=error_class)
    return PermanentError(message, error_class=error_class)


def _shown(url: str) -> str:
    """The URL without its query, which often carries tokens, for failure messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _transport_error(exc: Exception, dest: Destination) -> ExecutionError:
    where = f"{dest.scheme}://{dest.host_header}"
    if isinstance(exc, ReadTimeoutError):
        # The request went out; whether it took effect is unknown.
        return AmbiguousError(f"no response from {where} in time", error_class="Timeout")
    if isinstance(exc, SSLError):
        if _caused_by(exc, ssl.SSLCertVerificationError, CertificateError):
            return PermanentError(f"TLS certificate of {where} rejected: {exc}", error_class="TLSCertificate")
        return RetryableError(f"TLS handshake with {where} failed: {exc}", error_class="TLSError")
    if isinstance(exc, ProtocolError | OSError):
        return AmbiguousError(f"connection to {where} broke: {exc}", error_class="ConnectionBroken")
    if isinstance(exc, ValueError):  # http.client refuses an invalid request line or header
        return PermanentError(f"request to {where} is malformed: {exc}", error_class="BadRequest")
    if isinstance(exc, HTTPError):
        return AmbiguousError(f"request to {where} failed: {exc}", error_class=type(exc).__name__)
    return RetryableError(f"request to {where} failed: {exc!r}", error_class=type(exc).__name__)


def _caused_by(exc: BaseException, *types: type[BaseException]) -> bool:
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, types):
            return True
        stack.extend(a for a in current.args if isinstance(a, BaseException))
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False
