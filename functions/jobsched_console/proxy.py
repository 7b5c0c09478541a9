"""`jobsched console`: the console's files on 127.0.0.1, and its API calls forwarded to a
deployed stack, signed with the user's AWS credentials (SigV4, as the CLI signs them).

The browser holds no key and no credentials. Only API paths are forwarded, only the headers
the API reads go upstream, and only requests from the console's own origin are signed: a
page elsewhere (or a DNS name rebound to 127.0.0.1) cannot use the proxy to act as the user.

A request that changes something (any method but GET, HEAD and OPTIONS) must show it comes
from the console's origin: a browser sends `Origin` (or `Sec-Fetch-Site: same-origin`) by
itself and no page can forge either; a non-browser caller (curl, a script) sends
`Origin: http://127.0.0.1:<port>` (see `own_origin`). A request target that is not visible
ASCII, and a header folded across lines or holding a control character, are a 400."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Protocol
from urllib.parse import unquote

from .assets import CONSOLE_PATH, console_response

log = logging.getLogger("jobsched_console")

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8090
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
API_PREFIXES = ("/v1/",)
API_PATHS = ("/openapi.json",)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # RFC 9110 §9.2.1: they change nothing

# Request headers the API reads; everything else (cookies, the browser's own Authorization or
# x-api-key, Origin, hop-by-hop headers) stays here.
FORWARDED_REQUEST_HEADERS = ("accept", "content-type", "if-match", "if-none-match", "idempotency-key")
# RFC 9110 §7.6.1: meaningful for one connection only; never passed on, either way.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Answer headers not passed back: hop-by-hop ones, the length (recomputed), and cookies.
DROPPED_RESPONSE_HEADERS = HOP_BY_HOP | {"content-length", "set-cookie", "server", "date"}


class Signer(Protocol):
    """What the proxy needs of the CLI's ApiClient: its endpoint and its signing."""

    endpoint: str
    api_key: str | None
    sigv4: bool

    def sign(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, str]: ...


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def is_api_path(path: str) -> bool:
    """Only the API's own paths are forwarded: no dot-segments (encoded or not) and no
    leading `//`, which an upstream might read as another path or host."""
    decoded = unquote(path)
    if decoded.startswith("//") or any(part in (".", "..") for part in decoded.split("/")):
        return False
    return path.startswith(API_PREFIXES) or path in API_PATHS


def forwarded_headers(incoming: Mapping[str, str]) -> dict[str, str]:
    """The request headers passed upstream: the allowed ones, minus any the client named in
    Connection (those are hop-by-hop too)."""
    lowered = {name.lower(): value for name, value in incoming.items()}
    per_connection = {token.strip().lower() for token in lowered.get("connection", "").split(",")}
    return {
        name: lowered[name]
        for name in FORWARDED_REQUEST_HEADERS
        if name in lowered and name not in per_connection and name not in HOP_BY_HOP
    }


def is_visible_ascii(text: str) -> bool:
    """Whether `text` is all visible US-ASCII (0x21-0x7E), as a request target must be
    (RFC 9112 §3.2; anything else is percent-encoded)."""
    return all("!" <= character <= "~" for character in text)


def unsafe_header(headers: Any) -> str | None:
    """The name of the first header whose value spans lines (an obs-fold, RFC 9112 §5.2) or
    holds a control character other than a tab: passed on, its CR LF would start another
    header upstream or in the answer."""
    for name, value in headers.items():
        if any((character < " " and character != "\t") or character == "\x7f" for character in value):
            return str(name)
    return None


def returned_headers(upstream: Any) -> dict[str, str]:
    """The answer's headers passed back: not hop-by-hop, nor named in its Connection header,
    nor folded across lines or holding a control character."""
    items = list(upstream.items()) if upstream is not None else []
    per_connection = {
        token.strip().lower()
        for name, value in items
        if name.lower() == "connection"
        for token in value.split(",")
    }
    dropped = DROPPED_RESPONSE_HEADERS | per_connection
    return {
        name: value
        for name, value in items
        if name.lower() not in dropped and unsafe_header({name: value}) is None
    }


class Forwarder:
    """Sends one API request upstream: the client's endpoint + the path and query, signed."""

    def __init__(self, client: Signer, timeout: float = 30) -> None:
        self.client = client
        self.timeout = timeout
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        self._opener = urllib.request.build_opener(*handlers)

    def __call__(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None) -> Answer:
        url = self.client.endpoint.rstrip("/") + target
        outgoing = {"user-agent": "jobsched-console/0.1", **forwarded_headers(headers)}
        if self.client.api_key:
            outgoing["x-api-key"] = self.client.api_key
        if self.client.sigv4:
            # The same signing the CLI's requests get (botocore's SigV4, execute-api).
            outgoing = self.client.sign(method, url, body, outgoing)
        request = urllib.request.Request(url, data=body, headers=outgoing, method=method)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return Answer(response.status, returned_headers(response.headers), response.read())
        except urllib.error.HTTPError as error:
            return Answer(error.code, returned_headers(error.headers), error.read())
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            return _json_answer(502, "bad_gateway", f"cannot reach {self.client.endpoint}: {reason}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is passed back as it is: the signed request is never replayed elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _json_answer(status: int, code: str, message: str) -> Answer:
    body = json.dumps({"code": code, "message": message}).encode()
    return Answer(status, {"Content-Type": "application/json"}, body)


class ConsoleProxy:
    """The console's files and the signing forwarder, on 127.0.0.1 only."""

    def __init__(self, forward: Callable[[str, str, Mapping[str, str], bytes | None], Answer], port: int = 0):
        proxy = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy.handle(self)

            do_HEAD = do_POST = do_PATCH = do_DELETE = do_PUT = do_OPTIONS = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("console %s", format % args)

        self._forward = forward
        self._server = ThreadingHTTPServer((LOOPBACK, port), RequestHandler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="console", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> ConsoleProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def own_origin(self) -> str:
        """What a non-browser caller sends as `Origin` with a request that changes something."""
        return f"http://{LOOPBACK}:{self.port}"

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        target = request.path
        if not is_visible_ascii(target):
            # http.client would refuse it upstream with a traceback, after the handler had
            # already taken the connection: answered here, and the connection closed.
            rule = "the request target must be visible ASCII; percent-encode anything else"
            self._send(request, _json_answer(400, "invalid_request", rule), close=True)
            return
        folded = unsafe_header(request.headers)
        if folded is not None:
            rule = f"header {folded[:64]!r} is folded across lines or holds a control character"
            self._send(request, _json_answer(400, "invalid_request", rule), close=True)
            return
        if not target.startswith("/") or target.startswith("//"):
            # An absolute-form target (a client using this as a general proxy), or one a URL
            # parser would read as a host.
            absolute = _json_answer(400, "invalid_request", "only paths are served here")
            self._send(request, absolute, close=True)
            return
        refusal = self._refusal(request)
        if refusal is not None:
            self._send(request, refusal, close=True)
            return
        path = target.split("?", 1)[0].split("#", 1)[0]
        static = console_response(request.command, path)
        if static is not None:
            self._send(request, Answer(static.status, static.headers, static.body))
            return
        if not is_api_path(path):
            message = f"not found: the console is at {CONSOLE_PATH}/; only API paths (/v1/...) are forwarded"
            self._send(request, _json_answer(404, "not_found", message))
            return
        length = _content_length(request.headers.get_all("Content-Length"))
        if length is None or request.headers.get("Transfer-Encoding"):
            rule = "a body needs one Content-Length of at most 10 MB (no chunked bodies)"
            self._send(request, _json_answer(400, "invalid_request", rule), close=True)
            return
        body = request.rfile.read(length) if length else None
        answer = self._forward(request.command, target, dict(request.headers.items()), body)
        self._send(request, answer, head=request.command == "HEAD")

    def _refusal(self, request: BaseHTTPRequestHandler) -> Answer | None:
        """Requests the proxy will not sign: addressed to another host name (DNS rebinding),
        sent by a page of another origin (a cross-site form or fetch), or changing something
        without showing where they come from (neither `Origin` nor `Sec-Fetch-Site`: a
        browser that sends neither cannot be told from a page of another site)."""
        port = self.port
        own_hosts = {f"{LOOPBACK}:{port}", f"localhost:{port}"}
        host = (request.headers.get("Host") or "").strip().lower()
        if host not in own_hosts:
            return _json_answer(421, "misdirected_request", f"Host must be {LOOPBACK}:{port}")
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() not in {f"http://{h}" for h in own_hosts}:
            return _json_answer(403, "forbidden", "requests from other origins are not forwarded")
        fetch_site = request.headers.get("Sec-Fetch-Site")
        if (fetch_site or "same-origin").lower() not in ("same-origin", "none"):
            return _json_answer(403, "forbidden", "requests from other sites are not forwarded")
        same_origin = origin is not None or (fetch_site or "").lower() == "same-origin"
        if request.command.upper() not in SAFE_METHODS and not same_origin:
            return _json_answer(
                403,
                "forbidden",
                f"a {request.command} must come from the console's origin: a browser sends Origin "
                f"itself; curl or a script sends 'Origin: {self.own_origin}'",
            )
        return None

    @staticmethod
    def _send(
        request: BaseHTTPRequestHandler, answer: Answer, *, close: bool = False, head: bool = False
    ) -> None:
        request.send_response(answer.status)
        # A forwarded answer is data, never a page: sandboxed unless it is one of the console's
        # own files (which carry their own policy).
        headers = {
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; sandbox",
            **answer.headers,
        }
        for name, value in headers.items():
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(answer.body)))
        if close:
            request.close_connection = True
            request.send_header("Connection", "close")
        request.end_headers()
        if not head:
            request.wfile.write(answer.body)


def _content_length(values: list[str] | None) -> int | None:
    if not values:
        return 0
    if len(set(values)) > 1:
        return None
    text = values[0].strip()
    if not text.isascii() or not text.isdigit() or len(text) > 10 or int(text) > MAX_BODY_BYTES:
        return None
    return int(text)


def serve(client: Signer, port: int = DEFAULT_PORT, *, open_browser: bool = False) -> int:
    """Runs the console in the foreground until Ctrl-C."""
    try:
        proxy = ConsoleProxy(Forwarder(client), port).start()
    except OSError as exc:
        print(f"error: could not start the console on {LOOPBACK}:{port}: {exc} (try --port)", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    how = "signed with your AWS credentials (SigV4)" if client.sigv4 else "with the API key given"
    print(
        f"jobsched console at {proxy.url}{CONSOLE_PATH}/\n"
        f"  API calls go to {client.endpoint}, {how}; the browser needs no key.\n"
        f"  curl and scripts: send 'Origin: {proxy.own_origin}' with POST, PATCH and DELETE.\n"
        "  Ctrl-C stops it.",
        flush=True,
    )
    if open_browser:
        import webbrowser

        webbrowser.open(f"{proxy.url}{CONSOLE_PATH}/")
    try:
        stop.wait()
    finally:
        proxy.stop()
    return 0
