"""The HTTP exchange under `Client` (and the CLI): a transport moves bytes; the `Connection`
builds each request (JSON body, query, `x-api-key` or SigV4), sends it with bounded retries
and turns error answers into `ApiError`s.

Retries: an answer of 429 (refused before any work: the API applied nothing) is sent again
for every method, after its `Retry-After` (seconds or an HTTP date) or, without one, a
jittered exponential backoff. No answer (a timeout, a dropped connection), 502, 503 and 504
are sent again only for a request that is safe to repeat (GET, HEAD, OPTIONS, or one marked
idempotent, e.g. a create with an idempotency key): a 503 may follow a write the store
applied before its answer was lost (DynamoDB times out after applying), so a POST, PATCH or
DELETE that may have been applied is never repeated. A refused connection is reported at
once.

Redirects (the default transport's): only a GET or HEAD redirected within the endpoint's
origin (scheme, host and port) is followed, with the same headers. Any other redirect raises
`RedirectRefused` before anything is sent to its location: to another origin the API key
and the SigV4 headers would go along, from https to http they would go unencrypted, and a
write is never resent to another URL nor turned into a GET (urllib's way with a POST)."""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote, urlencode, urlsplit

from .errors import ApiError, ApiUnreachable, RedirectRefused, SigningUnavailable

USER_AGENT = "jobsched-client/0.1"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RETRIED_STATUSES = frozenset({429})  # the request was not applied: any method may repeat it
RETRIED_WHEN_SAFE = frozenset({502, 503, 504})  # it may have been: only a safe request repeats it
FOLLOWED_METHODS = frozenset({"GET", "HEAD"})  # redirected within the origin, these are followed
_DEFAULT_PORTS = {"http": 80, "https": 443}
_EXECUTE_API_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


class HttpReply(NamedTuple):
    """What a transport returns: the status, the headers (any case) and the raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Transport(Protocol):
    """Sends one request and returns its answer, whatever the status. Raises OSError (or
    ApiUnreachable) when there is no answer."""

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, Mapping[str, str], bytes]: ...


def origin(url: str) -> str:
    """`url`'s origin as `scheme://host:port`: scheme and host in lower case, the scheme's
    default port written out (`http://api.test` is `http://api.test:80`). A port out of
    range is kept as written, so the origin matches none a request can have."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return f"{scheme}://{parts.netloc.rpartition('@')[2].lower()}"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


def redirect_refusal(method: str, url: str, location: str) -> str | None:
    """Why the redirect of a `method` request for `url` to `location` (an absolute URL) is
    not followed, or None when it is: a GET or HEAD to the same origin (scheme, host, port).
    The reason names where it pointed."""
    there = origin(location)
    if urlsplit(url).scheme.lower() == "https" and urlsplit(location).scheme.lower() == "http":
        return (
            f"a redirect from https to http ({there}) is not followed: the API key or signature "
            "would travel unencrypted"
        )
    here = origin(url)
    if there != here:
        return (
            f"a redirect to another origin ({there}) is not followed: the API key or signature is "
            f"sent only to {here}; if the API moved, use its new address as the endpoint"
        )
    if method.upper() not in FOLLOWED_METHODS:
        return f"a redirect to {location} is not followed: a {method.upper()} is never resent to another URL"
    return None


class _RedirectPolicy(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, for those `redirect_refusal` allows; any other raises
    RedirectRefused before anything is sent to its location."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        method = req.get_method()
        reason = redirect_refusal(method, req.full_url, newurl)
        if reason is not None:
            fp.close()
            raise RedirectRefused(code, newurl, origin(newurl), reason, dict(headers.items()))
        followed = super().redirect_request(req, fp, code, msg, headers, newurl)
        if followed is not None:
            followed.method = method  # urllib's copy is a GET: a HEAD stays a HEAD
        return followed


class UrllibTransport:
    """The default transport: the standard library's urllib, following only the redirects
    `redirect_refusal` allows (any other raises RedirectRefused). `direct`: ignore proxies
    from the environment (local mode's loopback traffic must never reach one)."""

    def __init__(self, timeout: float = 30, *, direct: bool = False) -> None:
        self.timeout = timeout
        handlers: list[urllib.request.BaseHandler] = [_RedirectPolicy()]
        if direct:
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def __call__(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> HttpReply:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return HttpReply(response.status, dict(response.headers.items()), response.read())
        except urllib.error.HTTPError as exc:
            return HttpReply(exc.code, dict(exc.headers.items()) if exc.headers else {}, exc.read())


class Prepared(NamedTuple):
    """A request ready to send: what the transport is given."""

    method: str
    url: str
    headers: dict[str, str]
    data: bytes | None


class Reply(NamedTuple):
    """A 2xx answer: its status, headers (names in lower case) and body (parsed JSON, the
    text when it is not JSON, None when empty)."""

    status: int
    headers: dict[str, str]
    body: Any


def is_loopback(endpoint: str) -> bool:
    """Whether `endpoint`'s host is this machine (local mode)."""
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def quote_segment(value: str) -> str:
    """`value` as one path segment: run keys carry ':' and '@', encoded here."""
    return quote(value, safe="")


def etag(version: int | str) -> str:
    """A job version as the If-Match header carries it (`"3"`); a tag already quoted is kept."""
    text = str(version).strip()
    return text if text.startswith(('"', "W/")) else f'"{text}"'


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """`Retry-After` in seconds from `now` (epoch seconds): a number of seconds, or an HTTP
    date (a date in the past is 0). None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110: an HTTP date is GMT
        return None
    return max(0.0, when.timestamp() - now)


SIGV4_EXTRA = "jobsched[sigv4]"  # what installs botocore, which SigV4 signing needs


@contextmanager
def _botocore_installed() -> Iterator[None]:
    """Around botocore's imports: without botocore (a client installed without the extra),
    raises SigningUnavailable naming the extra that installs it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "botocore":
            raise
        raise SigningUnavailable(f"SigV4 needs botocore: pip install '{SIGV4_EXTRA}'") from exc


def _transient(exc: BaseException) -> bool:
    """No answer that another try may get: a timeout or a connection dropped mid-exchange (or
    a transport's own ApiUnreachable). A refused connection, a name that does not resolve or
    a certificate refused is answered at once, not tried again."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    transient = (TimeoutError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
    return isinstance(reason, (*transient, http.client.HTTPException, ApiUnreachable))


def parse_body(raw: bytes) -> Any:
    """JSON when it is, the text when not, None when empty."""
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class Connection:
    """One API endpoint with its authentication and retry policy.

    `endpoint`: the API's base URL (a stage path included). `api_key`: sent as `x-api-key`
    (local mode, or an API Gateway usage plan). `sigv4`: sign every request for `execute-api`
    with botocore's credentials (or `credentials`, anything with `get_frozen_credentials()`),
    in `region`, else the one in an execute-api host name, else botocore's configured region.
    `timeout`: seconds per try (the default transport's). `retries`: tries after the first,
    at most. `transport`: sends each request (default: urllib). `sleep`, `clock` and
    `jitter` (uniform in [0, 1)) are injected for tests. `backoff`/`max_backoff`: the first and the largest
    backoff in seconds without a Retry-After. `max_retry_after`: a longer Retry-After is not
    waited for: the error is raised with its `retry_after`."""

    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None = None,
        sigv4: bool = False,
        region: str | None = None,
        timeout: float = 30,
        retries: int = 3,
        transport: Transport | None = None,
        credentials: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        max_retry_after: float = 60.0,
    ) -> None:
        if retries < 0:
            raise ValueError("retries: must be >= 0")
        self.endpoint = endpoint.rstrip("/")
        self.api_key = api_key
        self.sigv4 = sigv4
        self.timeout = timeout
        self.retries = retries
        self.transport: Transport = transport or UrllibTransport(timeout, direct=is_loopback(self.endpoint))
        self._credentials = credentials
        self._region = region
        self._sleep = sleep
        self._clock = clock
        self._jitter = jitter
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._max_retry_after = max_retry_after

    # --- authentication ---

    @property
    def region(self) -> str:
        """The region SigV4 signs for: as given, else the execute-api host's, else botocore's
        configured one (AWS_REGION, AWS_DEFAULT_REGION, the profile). Raises
        SigningUnavailable when there is none."""
        if self._region:
            return self._region
        match = _EXECUTE_API_HOST.search(urlsplit(self.endpoint).hostname or "")
        if match:
            self._region = match.group(1)
            return self._region
        with _botocore_installed():
            import botocore.session

        configured = botocore.session.Session().get_config_variable("region")
        if not configured:
            raise SigningUnavailable("SigV4 needs a region: pass --region or set AWS_REGION")
        self._region = str(configured)
        return self._region

    def sign(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        """`headers` with SigV4's for `execute-api` added (every header given is signed).
        Raises SigningUnavailable without credentials or a region, or without botocore."""
        with _botocore_installed():
            import botocore.session
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest

        if self._credentials is None:
            self._credentials = botocore.session.Session().get_credentials()
            if self._credentials is None:
                raise SigningUnavailable("SigV4 needs AWS credentials (environment, profile or role)")
        request = AWSRequest(method=method, url=url, data=data or b"", headers=headers)
        # Frozen per request: refreshable credentials must not change between key and secret.
        SigV4Auth(self._credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(request)
        return dict(request.headers.items())

    # --- requests ---

    def prepare(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> Prepared:
        """The request as it is sent: `body` (JSON-able; None for none) as compact JSON,
        `query` without its None values, the key, `headers` (names lower-cased), then SigV4's.
        Raises SigningUnavailable."""
        method = method.upper()
        url = self.endpoint + path
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urlencode(params)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        all_headers = {"accept": "application/json", "user-agent": USER_AGENT}
        if data is not None:
            all_headers["content-type"] = "application/json"
        if self.api_key:
            all_headers["x-api-key"] = self.api_key
        all_headers.update({k.lower(): v for k, v in (headers or {}).items()})
        if self.sigv4:
            all_headers = self.sign(method, url, data, all_headers)
        return Prepared(method, url, all_headers, data)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
        *,
        idempotent: bool | None = None,
    ) -> Reply:
        """Send one request, with the retries described above; returns the 2xx answer.
        `idempotent`: whether the request may be repeated when it may have been applied
        (default: for GET, HEAD and OPTIONS only).

        Raises ApiError (its subclass for the status) on an error answer, once retries are
        spent, RedirectRefused (an ApiError) for a redirect the transport does not follow;
        ApiUnreachable when there is no answer; SigningUnavailable."""
        method = method.upper()
        repeatable = method in SAFE_METHODS if idempotent is None else idempotent
        attempt = 0
        while True:
            prepared = self.prepare(method, path, body, headers, query)  # signed afresh each try
            try:
                status, raw_headers, raw = self.transport(*prepared)
            except (OSError, http.client.HTTPException, ApiUnreachable) as exc:
                if repeatable and attempt < self.retries and _transient(exc):
                    self._sleep(self._jittered(attempt))
                    attempt += 1
                    continue
                if isinstance(exc, ApiUnreachable):
                    raise
                reason = getattr(exc, "reason", exc)
                raise ApiUnreachable(f"cannot reach {self.endpoint}: {reason}") from exc
            lowered = {k.lower(): v for k, v in raw_headers.items()}
            parsed = parse_body(raw)
            if 200 <= status < 300:
                return Reply(status, lowered, parsed)
            wait = retry_after_seconds(lowered.get("retry-after"), self._clock())
            if attempt < self.retries and (
                status in RETRIED_STATUSES or (repeatable and status in RETRIED_WHEN_SAFE)
            ):
                delay = wait if wait is not None else self._jittered(attempt)
                if delay <= self._max_retry_after:
                    self._sleep(delay)
                    attempt += 1
                    continue
            raise ApiError.of(status, parsed, lowered, wait)

    def _jittered(self, attempt: int) -> float:
        """Half the exponential backoff for `attempt`, plus up to as much again at random."""
        ceiling = min(self._max_backoff, self._backoff * 2**attempt)
        return ceiling / 2 + self._jitter() * ceiling / 2
