"""The HTTP webhook target against a real server on 127.0.0.1, plus Python handler dispatch."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from jobsched.domain.errors import AmbiguousError, PermanentError, RetryableError
from jobsched.domain.models import HttpTarget, SecretRef
from jobsched.targets import (
    DestinationPolicy,
    HandlerRegistry,
    HttpTargetClient,
    Invocation,
    TargetRunner,
)

RUN_KEY = "j_7hq2@2026-11-02T09:00:00Z"
LOOPBACK_ONLY = ["127.0.0.1/32"]


def invocation(**overrides: Any) -> Invocation:
    fields: dict[str, Any] = {
        "run_key": RUN_KEY,
        "job_id": "j_7hq2",
        "tenant": "tenant-a",
        "job_type": "report.build",
        "scheduled_for": datetime(2026, 11, 2, 9, 0, tzinfo=UTC),
        "attempt": 2,
        "payload": {"format": "pdf", "pages": [1, 2]},
        "timeout_seconds": 5.0,
    }
    fields.update(overrides)
    return Invocation(**fields)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


class Receiver:
    """A webhook receiver whose behaviour is chosen by the request path."""

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Recorded] = []
        self.release = threading.Event()  # lets /slow finish at teardown instead of sleeping
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                receiver.handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        # A short poll interval keeps shutdown (once per test) fast.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        self.requests.append(Recorded(h.command, h.path, dict(h.headers.items()), body))
        parts = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        route = parts.path
        if route == "/ok":
            self.reply(h, 200, json.dumps({"received": h.headers.get("Idempotency-Key")}), "application/json")
        elif route == "/text":
            self.reply(h, 200, "done", "text/plain")
        elif route == "/big":
            self.reply(h, 200, "x" * 10_000, "text/plain")
        elif route == "/deep":  # valid JSON, nested past any parser's recursion limit
            self.reply(h, 200, "[" * 2000 + "]" * 2000, "application/json")
        elif route == "/surrogate":  # valid JSON naming a lone surrogate, which UTF-8 cannot hold
            self.reply(h, 200, '{"text": "\\ud800"}', "application/json")
        elif route == "/empty":
            self.reply(h, 204, "", "text/plain")
        elif route.startswith("/status/"):
            self.reply(h, int(route.rsplit("/", 1)[1]), '{"error":"nope"}', "application/json")
        elif route == "/slow":
            self.release.wait(5)
            self.reply(h, 200, "late", "text/plain")
        elif route == "/redirect":
            h.send_response(int(query.get("code", "302")))
            h.send_header("Location", query["to"])
            h.send_header("Content-Length", "0")
            h.end_headers()
        else:
            self.reply(h, 404, "no such route", "text/plain")

    @staticmethod
    def reply(h: BaseHTTPRequestHandler, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def client(allow: list[str] | None = None, resolver: Any = None, **kw: Any) -> HttpTargetClient:
    allow = LOOPBACK_ONLY if allow is None else allow
    return HttpTargetClient(DestinationPolicy(allow, resolver=resolver), **kw)


def target(url: str, **kw: Any) -> HttpTarget:
    return HttpTarget(kind="http", url=url, **kw)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the request ---


def test_post_carries_the_envelope_and_the_run_key_verbatim(receiver):
    inv = invocation()
    result = client().send(target(receiver.url("/ok?x=1"), headers={"Authorization": "Bearer t"}), inv)

    assert result == {"status": 200, "body": {"received": RUN_KEY}}
    [request] = receiver.requests
    assert request.method == "POST"
    assert request.path == "/ok?x=1"
    assert request.header("Idempotency-Key") == RUN_KEY
    assert request.header("X-Jobsched-Run-Key") == RUN_KEY
    assert request.header("X-Jobsched-Attempt") == "2"
    assert request.header("Content-Type") == "application/json"
    assert request.header("User-Agent") == "jobsched"
    assert request.header("Authorization") == "Bearer t"
    assert request.header("Host") == f"127.0.0.1:{receiver.port}"
    assert json.loads(request.body) == inv.envelope()
    assert inv.envelope() == {
        "runKey": RUN_KEY,
        "jobId": "j_7hq2",
        "tenant": "tenant-a",
        "type": "report.build",
        "scheduledFor": "2026-11-02T09:00:00Z",
        "attempt": 2,
        "payload": {"format": "pdf", "pages": [1, 2]},
    }


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_other_methods_with_a_body_send_the_envelope(receiver, method):
    client().send(target(receiver.url("/ok"), method=method), invocation())
    [request] = receiver.requests
    assert request.method == method
    assert json.loads(request.body)["runKey"] == RUN_KEY


def test_get_sends_no_body_but_still_the_idempotency_key(receiver):
    client().send(target(receiver.url("/ok"), method="GET"), invocation())
    [request] = receiver.requests
    assert request.method == "GET"
    assert request.body == b""
    assert request.header("Content-Type") is None
    assert request.header("Idempotency-Key") == RUN_KEY


def unchecked_target(url: str, headers: dict[str, str | SecretRef]) -> HttpTarget:
    """A target as an older definition might have stored it, before the model refused such headers."""
    return HttpTarget.model_construct(
        kind="http", url=url, method="POST", headers=headers, timeout_seconds=10.0
    )


def test_reserved_and_broken_headers_are_refused_when_the_target_is_defined():
    for headers in ({"X-Jobsched-Run-Key": "x"}, {"Content-Type": "text/plain"}, {"X-A": "a\r\nB: 1"}):
        with pytest.raises(ValueError):
            target("https://example.com/hook", headers=headers)


def test_target_headers_cannot_override_the_scheduler_headers(receiver):
    headers: dict[str, str | SecretRef] = {
        "X-Jobsched-Run-Key": "forged",
        "content-type": "text/plain",
        "X-Custom": "1",
    }
    client().send(unchecked_target(receiver.url("/ok"), headers), invocation())
    [request] = receiver.requests
    assert request.header("X-Jobsched-Run-Key") == RUN_KEY
    assert request.header("Content-Type") == "application/json"
    assert request.header("X-Custom") == "1"


def test_non_ascii_in_the_url_is_percent_encoded_and_escapes_are_kept(receiver):
    client().send(target(receiver.url("/ok?name=café&x=a b&y=%2F")), invocation())
    assert receiver.requests[0].path == "/ok?name=caf%C3%A9&x=a%20b&y=%2F"


def test_header_values_with_line_breaks_are_refused_before_sending(receiver):
    with pytest.raises(PermanentError) as caught:
        client().send(unchecked_target(receiver.url("/ok"), {"X-A": "a\r\nX-Injected: 1"}), invocation())
    assert caught.value.error_class == "BadHeader"
    assert receiver.requests == []


# --- responses ---


def test_text_and_empty_bodies(receiver):
    assert client().send(target(receiver.url("/text")), invocation()) == {"status": 200, "body": "done"}
    assert client().send(target(receiver.url("/empty")), invocation()) == {"status": 204, "body": None}


def test_long_bodies_are_truncated_to_4_kib(receiver):
    result = client().send(target(receiver.url("/big")), invocation())
    assert result["status"] == 200
    assert result["body"] == "x" * 4096
    assert result["truncated"] is True


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429, 408])
def test_server_errors_throttling_and_request_timeout_are_retryable(receiver, status):
    with pytest.raises(RetryableError) as caught:
        client().send(target(receiver.url(f"/status/{status}")), invocation())
    assert type(caught.value) is RetryableError  # the receiver answered: not ambiguous
    assert caught.value.error_class == f"HTTP{status}"
    assert str(status) in caught.value.message


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422])
def test_other_client_errors_are_permanent(receiver, status):
    with pytest.raises(PermanentError) as caught:
        client().send(target(receiver.url(f"/status/{status}")), invocation())
    assert caught.value.error_class == f"HTTP{status}"


# --- transport failures ---


@pytest.mark.parametrize(("target_timeout", "budget"), [(0.3, 5.0), (10.0, 0.3)])
def test_no_response_in_time_is_ambiguous(receiver, target_timeout, budget):
    started = time.monotonic()
    with pytest.raises(AmbiguousError) as caught:
        client().send(
            target(receiver.url("/slow"), timeout_seconds=target_timeout),
            invocation(timeout_seconds=budget),
        )
    assert caught.value.error_class == "Timeout"
    assert time.monotonic() - started < 2.0  # the smaller of the two limits applied
    assert len(receiver.requests) == 1  # it was sent: that is what makes it ambiguous


def test_connection_refused_is_retryable_and_not_ambiguous():
    with pytest.raises(RetryableError) as caught:
        client().send(target(f"http://127.0.0.1:{unused_port()}/ok"), invocation())
    assert not isinstance(caught.value, AmbiguousError)
    assert caught.value.error_class == "ConnectFailed"


def test_no_budget_left_sends_nothing(receiver):
    with pytest.raises(RetryableError) as caught:
        client().send(target(receiver.url("/ok")), invocation(timeout_seconds=0))
    assert caught.value.error_class == "Timeout"
    assert receiver.requests == []


def test_dns_failure_is_retryable():
    def fail(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    with pytest.raises(RetryableError) as caught:
        client(resolver=fail).send(target("http://receiver.example/ok"), invocation())
    assert caught.value.error_class == "DNS"


# --- the destination guard ---


def test_loopback_is_refused_without_the_allow_list_before_any_connection(receiver):
    with pytest.raises(PermanentError) as caught:
        HttpTargetClient().send(target(receiver.url("/ok")), invocation())
    assert caught.value.error_class == "Refused"
    assert "127.0.0.1" in caught.value.message
    assert receiver.requests == []


def test_the_connection_is_pinned_to_the_vetted_address(receiver):
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    # "receiver.test" exists only in this resolver: any second lookup elsewhere would fail.
    result = client(resolver=resolver).send(target(receiver.url("/ok", host="receiver.test")), invocation())
    assert result["status"] == 200
    assert lookups == ["receiver.test"]
    assert receiver.requests[0].header("Host") == f"receiver.test:{receiver.port}"


def test_a_name_that_resolves_internally_is_refused(receiver):
    def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    with pytest.raises(PermanentError):
        client(allow=[], resolver=resolver).send(
            target(receiver.url("/ok", host="rebind.test")), invocation()
        )
    assert receiver.requests == []


# --- redirects ---


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_redirects_within_the_allow_list_are_followed_with_method_and_body(receiver, code):
    url = receiver.url(f"/redirect?code={code}&to=/ok")
    result = client().send(target(url), invocation())
    assert result == {"status": 200, "body": {"received": RUN_KEY}}
    first, second = receiver.requests
    assert (first.path, second.path) == (f"/redirect?code={code}&to=/ok", "/ok")
    assert second.method == "POST"
    assert json.loads(second.body)["runKey"] == RUN_KEY
    assert second.header("Idempotency-Key") == RUN_KEY


def test_303_is_followed_with_get_and_no_body(receiver):
    client().send(target(receiver.url("/redirect?code=303&to=/ok")), invocation())
    second = receiver.requests[1]
    assert (second.method, second.body) == ("GET", b"")


def test_redirect_to_the_metadata_endpoint_is_refused(receiver):
    url = receiver.url("/redirect?to=http://169.254.169.254/latest/meta-data/")
    with pytest.raises(PermanentError) as caught:
        client().send(target(url), invocation())
    assert caught.value.error_class == "Refused"
    assert "169.254.169.254" in caught.value.message
    assert len(receiver.requests) == 1


def test_redirect_to_a_refused_name_is_refused(receiver):
    def resolver(host: str, port: int) -> list[str]:
        return {"receiver.test": ["127.0.0.1"], "evil.test": ["10.0.0.1"]}[host]

    url = receiver.url("/redirect?to=http://evil.test/steal", host="receiver.test")
    with pytest.raises(PermanentError) as caught:
        client(resolver=resolver).send(target(url), invocation())
    assert caught.value.error_class == "Refused"


def test_more_than_three_redirects_are_permanent(receiver):
    loop = receiver.url("/redirect?to=/redirect%3Fto%3D/redirect%253Fto%253D/redirect")
    hops = "/redirect?to=" + loop  # absolute URL in Location, then relative ones
    with pytest.raises(PermanentError) as caught:
        client().send(target(receiver.url(hops)), invocation())
    assert caught.value.error_class == "TooManyRedirects"
    assert len(receiver.requests) == 4


def test_cross_origin_redirect_drops_target_headers_but_keeps_the_run_key(receiver):
    def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    url = receiver.url(f"/redirect?to=http://other.test:{receiver.port}/ok", host="receiver.test")
    client(resolver=resolver).send(target(url, headers={"Authorization": "Bearer secret"}), invocation())
    first, second = receiver.requests
    assert first.header("Authorization") == "Bearer secret"
    assert second.header("Authorization") is None
    assert second.header("Host") == f"other.test:{receiver.port}"
    assert second.header("Idempotency-Key") == RUN_KEY


# --- https with a pinned address ---


def write_certificates(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A throwaway CA and a leaf certificate for `name`: (ca.pem, cert.pem, key.pem)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jobsched test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@pytest.fixture
def tls_receiver(tmp_path) -> Iterator[tuple[Receiver, ssl.SSLContext, list[str | None]]]:
    ca, cert, key = write_certificates(tmp_path, "receiver.test")
    server_names: list[str | None] = []
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    server_tls.sni_callback = lambda sock, name, ctx: server_names.append(name)
    server = Receiver(tls=server_tls)
    yield server, ssl.create_default_context(cafile=str(ca)), server_names
    server.close()


def test_https_connects_to_the_vetted_address_but_verifies_the_name(tls_receiver):
    server, trust, server_names = tls_receiver

    def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    https = client(resolver=resolver, ssl_context=trust)
    result = https.send(target(server.url("/ok", host="receiver.test", scheme="https")), invocation())
    assert result == {"status": 200, "body": {"received": RUN_KEY}}
    assert server_names == ["receiver.test"]  # SNI carried the name, not the IP
    assert server.requests[0].header("Host") == f"receiver.test:{server.port}"


def test_https_certificate_for_another_name_is_permanent(tls_receiver):
    server, trust, _ = tls_receiver

    def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    https = client(resolver=resolver, ssl_context=trust)
    with pytest.raises(PermanentError) as caught:
        https.send(target(server.url("/ok", host="impostor.test", scheme="https")), invocation())
    assert caught.value.error_class == "TLSCertificate"
    assert server.requests == []


# --- dispatch: HTTP targets and Python handlers ---


def test_runner_sends_http_targets_through_the_http_client(receiver):
    runner = TargetRunner(lambda service: None, HandlerRegistry(), client())
    assert runner.run(target(receiver.url("/ok")), invocation())["status"] == 200


def test_registered_handler_receives_payload_and_invocation():
    handlers = HandlerRegistry()
    seen: list[tuple[Any, Invocation]] = []

    @handlers.register("report.build")
    def build(payload: Any, inv: Invocation) -> Any:
        seen.append((payload, inv))
        return {"pages": len(payload["pages"])}

    inv = invocation()
    runner = TargetRunner(lambda service: None, handlers, client())
    assert runner.run(None, inv) == {"pages": 2}
    assert seen == [(inv.payload, inv)]
    assert handlers.types() == ["report.build"]
    assert handlers.get("report.build") is build


def test_duplicate_registration_is_an_error():
    handlers = HandlerRegistry()
    handlers.add("a", lambda payload, inv: None)
    with pytest.raises(ValueError):
        handlers.add("a", lambda payload, inv: None)


def test_handler_execution_errors_propagate_unchanged():
    handlers = HandlerRegistry()

    @handlers.register("report.build")
    def build(payload: Any, inv: Invocation) -> Any:
        raise PermanentError("bad report spec", error_class="BadSpec")

    with pytest.raises(PermanentError) as caught:
        TargetRunner(lambda service: None, handlers, client()).run(None, invocation())
    assert caught.value.error_class == "BadSpec"


def test_other_handler_exceptions_become_retryable_with_their_class():
    handlers = HandlerRegistry()

    @handlers.register("report.build")
    def build(payload: Any, inv: Invocation) -> Any:
        raise ValueError("pages out of range")

    with pytest.raises(RetryableError) as caught:
        TargetRunner(lambda service: None, handlers, client()).run(None, invocation())
    assert caught.value.error_class == "ValueError"
    assert "pages out of range" in caught.value.message
    assert isinstance(caught.value.__cause__, ValueError)


def test_missing_handler_is_permanent():
    with pytest.raises(PermanentError) as caught:
        TargetRunner(lambda service: None, HandlerRegistry(), client()).run(None, invocation())
    assert caught.value.error_class == "NoHandler"
    assert "report.build" in caught.value.message


# --- signatures and secrets ---


def signed_client(secrets_of: Any, **kw: Any) -> HttpTargetClient:
    from jobsched.domain.instants import SystemClock
    from jobsched.targets.signing import DeliverySigner

    return client(signer=DeliverySigner(secrets_of, SystemClock()), **kw)


def test_every_request_of_a_delivery_is_signed_even_after_a_303(receiver):
    from jobsched.domain.signing import SigningSecrets
    from standardwebhooks.webhooks import Webhook

    signing = SigningSecrets.first("j_7hq2", "tenant-a", datetime.now(UTC))
    secret = signing.current
    assert secret is not None
    there = receiver.url("/ok")
    url = receiver.url(f"/redirect?code=303&to={there}")
    signed_client(lambda job_id: signing if job_id == "j_7hq2" else None).send(target(url), invocation())
    post, get = receiver.requests
    assert post.method == "POST" and get.method == "GET" and get.body == b""
    for request in (post, get):
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert headers["webhook-id"] == f"{RUN_KEY}#2"
        Webhook(secret).verify(request.body, headers, json_parse=False)


def test_target_headers_cannot_forge_the_signature(receiver):
    forged = {"webhook-signature": "v1,forged", "Webhook-Id": "other"}
    signed_client(lambda job_id: None).send(target(receiver.url("/ok"), headers=forged), invocation())
    [request] = receiver.requests
    assert request.header("webhook-signature") is None and request.header("webhook-id") is None


def test_secrets_of_another_tenants_job_never_sign(receiver):
    from jobsched.domain.signing import SigningSecrets

    theirs = SigningSecrets.first("j_7hq2", "tenant-b", datetime.now(UTC))
    with pytest.raises(PermanentError, match="another tenant"):
        signed_client(lambda job_id: theirs).send(target(receiver.url("/ok")), invocation())
    assert receiver.requests == []


def test_a_referenced_header_without_a_secret_reader_fails_before_sending(receiver):
    ref = {"valueFrom": "arn:aws:ssm:us-east-1:123456789012:parameter/x"}
    with pytest.raises(PermanentError) as failed:
        client().send(target(receiver.url("/ok"), headers={"X-Api-Key": ref}), invocation())
    assert failed.value.error_class == "SecretUnavailable" and receiver.requests == []
