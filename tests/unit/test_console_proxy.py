"""`jobsched console`'s proxy against a stub upstream: API calls arrive signed (SigV4 with
the caller's credentials, verified here), with their bodies and the headers the API reads,
and nothing else; answers come back with status, body and headers, hop-by-hop ones dropped;
only API paths are forwarded; other origins and host names are refused; 127.0.0.1 only."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from jobsched_cli.args import build_parser
from jobsched_cli.client import ApiClient
from jobsched_console.assets import CONTENT_SECURITY_POLICY, STATIC_DIR
from jobsched_console.proxy import ConsoleProxy, Forwarder

REGION = "eu-west-1"
# tests/conftest.py puts these fake credentials in the environment for every test.
FAKE = Credentials("testing", "testing", "testing")
FAKE_TOKEN = "testing"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Upstream:
    """Records each request; answers with `status`, `headers` and `body`."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    body: bytes = b'{"items": [], "nextCursor": null}'
    seen: list[Seen] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    state = Upstream()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
            self.send_response(state.status)
            for name, value in state.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        do_POST = do_PATCH = do_DELETE = do_PUT = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    # The stage in the URL, as a deployed stack's ApiUrl has it.
    state.url = f"http://127.0.0.1:{server.server_address[1]}/prod/"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConsoleProxy]:
    # The credentials the signatures are checked against, whatever the process has set.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", FAKE_TOKEN)
    client = ApiClient(upstream.url, sigv4=True, region=REGION)
    server = ConsoleProxy(Forwarder(client)).start()
    try:
        yield server
    finally:
        server.stop()


def send(
    proxy: ConsoleProxy,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host="Host" in (headers or {}))
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def verify_sigv4(seen: Seen, host: str) -> None:
    """Recomputes the signature from what arrived: the method, path, query, signed headers
    and body must be exactly what was signed, with the caller's key, for execute-api."""
    authorization = seen.headers["Authorization"]
    match = re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=testing/(\d{8})/" + REGION + r"/execute-api/aws4_request, "
        r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})",
        authorization,
    )
    assert match, authorization
    signed = match.group(2).split(";")
    assert "host" in signed and "x-amz-date" in signed
    headers = {name: value for name, value in seen.headers.items() if name.lower() in signed}
    request = AWSRequest(method=seen.method, url=f"http://{host}{seen.path}", data=seen.body, headers=headers)
    request.context["timestamp"] = seen.headers["X-Amz-Date"]
    auth = SigV4Auth(FAKE, "execute-api", REGION)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    assert match.group(3) == expected


def own(proxy: ConsoleProxy, **extra: str) -> dict[str, str]:
    return {"Host": f"127.0.0.1:{proxy.port}", **extra}


def test_api_calls_arrive_signed_with_the_stage_path_and_query(
    proxy: ConsoleProxy, upstream: Upstream
) -> None:
    status, _, body = send(proxy, "GET", "/v1/jobs?state=ACTIVE&limit=20", headers=own(proxy))
    assert status == 200 and json.loads(body) == {"items": [], "nextCursor": None}
    [seen] = upstream.seen
    assert seen.path == "/prod/v1/jobs?state=ACTIVE&limit=20"
    assert seen.headers["X-Amz-Security-Token"] == "testing"
    verify_sigv4(seen, upstream.url.split("/")[2])


def test_a_body_and_the_headers_the_api_reads_are_forwarded_and_nothing_else(
    proxy: ConsoleProxy, upstream: Upstream
) -> None:
    payload = b'{"reason": "dependency fixed \xe2\x9c\x93"}'
    browser_headers = own(
        proxy,
        **{
            "Content-Type": "application/json",
            "Accept": "application/json",
            "If-Match": '"4"',
            "Idempotency-Key": "k-1",
            "Cookie": "session=secret",
            "Authorization": "Bearer from-the-browser",
            "X-Api-Key": "browser-key",
            "Origin": f"http://127.0.0.1:{proxy.port}",
            "Referer": f"http://127.0.0.1:{proxy.port}/console/",
            "Keep-Alive": "timeout=5",
            "Connection": "keep-alive, X-Secret",
            "X-Secret": "per-connection",
            "Proxy-Authorization": "Basic abc",
            "Upgrade": "h2c",
            "TE": "trailers",
        },
    )
    status, _, _ = send(
        proxy, "POST", "/v1/runs/j_1%402026-11-02T08%3A00%3A00Z/redrive", payload, browser_headers
    )
    assert status == 200
    [seen] = upstream.seen
    assert seen.method == "POST" and seen.body == payload
    assert seen.path == "/prod/v1/runs/j_1%402026-11-02T08%3A00%3A00Z/redrive"  # still one segment
    names = {name.lower() for name in seen.headers}
    assert {"content-type", "accept", "if-match", "idempotency-key"} <= names
    assert seen.headers["If-Match"] == '"4"' and seen.headers["Idempotency-Key"] == "k-1"
    dropped = {
        "cookie",
        "x-api-key",
        "origin",
        "referer",
        "keep-alive",
        "x-secret",
        "proxy-authorization",
        "upgrade",
        "te",
    }
    assert not names & dropped
    assert seen.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")  # ours, not the browser's
    verify_sigv4(seen, upstream.url.split("/")[2])


def test_answers_come_back_with_status_body_and_headers_hop_by_hop_dropped(
    proxy: ConsoleProxy, upstream: Upstream
) -> None:
    upstream.status = 412
    upstream.body = (
        b'{"code": "version_mismatch", "message": "If-Match: version 1 is not current", "currentVersion": 3}'
    )
    upstream.headers = {
        "Content-Type": "application/json",
        "ETag": '"3"',
        "X-Amzn-RequestId": "r-1",
        "Set-Cookie": "tracker=1",
        "Connection": "X-Hop",
        "X-Hop": "one connection only",
        "Keep-Alive": "timeout=5",
    }
    status, headers, body = send(
        proxy,
        "POST",
        "/v1/jobs/j_1/pause",
        b"",
        own(proxy, **{"If-Match": '"1"', "Origin": proxy.own_origin}),
    )
    assert status == 412 and json.loads(body)["currentVersion"] == 3
    assert headers["etag"] == '"3"' and headers["x-amzn-requestid"] == "r-1"
    assert headers["content-type"] == "application/json"
    assert not {"set-cookie", "x-hop", "keep-alive"} & set(headers)
    assert headers["content-length"] == str(len(body))
    # Whatever the upstream sends is data: a browser never runs it as a page of this origin.
    assert headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'; sandbox"


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc/passwd",
        "/admin",
        "/v2/jobs",
        "/v1",
        "/prod/v1/jobs",
        "/console/../v1/jobs",
        "/docs",
        "/v1/../admin",
        "/v1/%2e%2e/admin",
        "/v1/jobs/./x",
    ],
)
def test_only_api_paths_are_forwarded(proxy: ConsoleProxy, upstream: Upstream, path: str) -> None:
    # (A leading "//" never reaches the proxy: Python's HTTP server folds it into one "/".)
    status, _, _ = send(proxy, "GET", path, headers=own(proxy))
    assert status in (400, 404)
    assert upstream.seen == []


def test_the_console_files_are_served_here_with_their_headers(
    proxy: ConsoleProxy, upstream: Upstream
) -> None:
    status, headers, body = send(proxy, "GET", "/console/", headers=own(proxy))
    assert status == 200 and body == (STATIC_DIR / "index.html").read_bytes()
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    assert upstream.seen == []


@pytest.mark.parametrize(
    "extra",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Host": "rebound.example:8090"},  # DNS rebinding: another name for 127.0.0.1
    ],
)
def test_requests_from_other_origins_or_host_names_are_not_signed(
    proxy: ConsoleProxy, upstream: Upstream, extra: dict[str, str]
) -> None:
    status, _, _ = send(proxy, "POST", "/v1/jobs/j_1/trigger", b"", {**own(proxy), **extra})
    assert status in (403, 421)
    assert upstream.seen == []


def send_raw(proxy: ConsoleProxy, request: bytes) -> bytes:
    """Send bytes exactly as given (what http.client would refuse to write) and return the
    whole answer, or b"" if the proxy dropped the connection."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer:
                head, _, rest = answer.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                if length and len(rest) >= int(length.group(1)):
                    break
        return answer


@pytest.mark.parametrize(
    "path", [b"/v1/jobs/\xc3\xa9t\xc3\xa9", b"/v1/jobs/\x01", b"/v1/jobs/a\x7fb", b"/v1/\xff"]
)
def test_a_target_that_is_not_visible_ascii_is_a_400_not_a_dropped_connection(
    proxy: ConsoleProxy, upstream: Upstream, path: bytes
) -> None:
    answer = send_raw(proxy, b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % proxy.port)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"visible ASCII" in answer and upstream.seen == []


def test_a_header_folded_across_lines_is_a_400_and_never_forwarded(
    proxy: ConsoleProxy, upstream: Upstream
) -> None:
    request = (
        b"POST /v1/jobs/j_1/pause HTTP/1.1\r\n"
        b"Host: 127.0.0.1:%d\r\n"
        b"Origin: http://127.0.0.1:%d\r\n"
        b'If-Match: "1"\r\n X-Injected: yes\r\n'  # obs-fold: the value goes on after CR LF SP
        b"Content-Length: 0\r\n\r\n"
    ) % (proxy.port, proxy.port)
    answer = send_raw(proxy, request)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"if-match" in answer.lower() and upstream.seen == []


def test_an_answer_header_folded_across_lines_is_not_passed_back(
    proxy: ConsoleProxy, upstream: Upstream
) -> None:
    upstream.headers = {
        "Content-Type": "application/json",
        "X-Folded": "a\r\n Set-Cookie: x=1",
        "X-Plain": "b",
    }
    status, headers, _ = send(proxy, "GET", "/v1/jobs", headers=own(proxy))
    assert status == 200 and headers["x-plain"] == "b"
    assert "x-folded" not in headers and "set-cookie" not in headers


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT", "DELETE"])
def test_a_change_without_origin_or_fetch_metadata_is_not_signed(
    proxy: ConsoleProxy, upstream: Upstream, method: str
) -> None:
    status, _, body = send(proxy, method, "/v1/jobs/j_1/trigger", b"", own(proxy))
    assert status == 403 and upstream.seen == []
    assert f"Origin: {proxy.own_origin}" in json.loads(body)["message"]  # what curl must send


@pytest.mark.parametrize(
    "extra",
    [
        {"Origin": "http://127.0.0.1:{port}"},
        {"Origin": "http://localhost:{port}"},
        {"Sec-Fetch-Site": "same-origin"},
    ],
)
def test_a_change_from_the_consoles_origin_is_signed(
    proxy: ConsoleProxy, upstream: Upstream, extra: dict[str, str]
) -> None:
    headers = {name: value.format(port=proxy.port) for name, value in extra.items()}
    status, _, _ = send(proxy, "POST", "/v1/jobs/j_1/trigger", b"", own(proxy, **headers))
    assert status == 200 and len(upstream.seen) == 1
    verify_sigv4(upstream.seen[0], upstream.url.split("/")[2])


def test_curl_reads_through_the_proxy_without_origin(proxy: ConsoleProxy, upstream: Upstream) -> None:
    status, _, _ = send(proxy, "GET", "/v1/jobs", headers=own(proxy))
    assert status == 200 and len(upstream.seen) == 1


def test_an_absolute_target_is_refused(proxy: ConsoleProxy, upstream: Upstream) -> None:
    status, _, _ = send(proxy, "GET", "http://169.254.169.254/latest/meta-data/", headers=own(proxy))
    assert status == 400 and upstream.seen == []


def test_an_unreachable_upstream_is_a_502(upstream: Upstream) -> None:
    client = ApiClient("http://127.0.0.1:9/prod/", sigv4=True, region=REGION)
    server = ConsoleProxy(Forwarder(client, timeout=5)).start()
    try:
        status, _, body = send(server, "GET", "/v1/jobs", headers=own(server))
    finally:
        server.stop()
    assert status == 502 and json.loads(body)["code"] == "bad_gateway"


def test_it_binds_to_loopback_only(proxy: ConsoleProxy) -> None:
    assert proxy.address[0] == "127.0.0.1"


def test_the_cli_has_a_console_command() -> None:
    args = build_parser().parse_args(
        ["console", "--endpoint", "https://x.example/prod/", "--sigv4", "--port", "9000"]
    )
    assert args.port == 9000 and args.sigv4 and args.endpoint == "https://x.example/prod/"
    assert args.handler.__name__ == "cmd_console"
