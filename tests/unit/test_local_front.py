"""Local mode's HTTP front refuses what API Gateway would, before reading a body: a
Content-Length that is no number (400), negative (400) or past the stack's body limit
(413, the web ACL's answer), each in the API's error shape. Raw sockets, so the request is
exactly what a hostile client sends."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from jobsched.edge import MAX_BODY_BYTES
from jobsched_local.glue import HttpFront, body_length

KEY = "key-a"


class Recorder:
    """Stands in for the `api` function: records each event, answers 200."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": '{"ok": true}'}


@pytest.fixture
def front() -> Iterator[tuple[HttpFront, Recorder]]:
    recorder = Recorder()
    server = HttpFront("127.0.0.1", 0, recorder, lambda key: "tenant-a" if key == KEY else None)  # type: ignore[arg-type]
    server.start()
    try:
        yield server, recorder
    finally:
        server.stop()


# Stands for the front's own address in a request's Host header (any other is refused).
OWN_HOST = "<own-host>"


def exchange(front: HttpFront, head: str, body: bytes = b"") -> tuple[int, dict[str, str], Any]:
    """Send one raw request (OWN_HOST in it replaced by the front's address); read the answer
    to its end (the server closes or it is complete). The socket timeout only keeps a
    regression from hanging the suite."""
    host, port = front.url.removeprefix("http://").split(":")
    head = head.replace(OWN_HOST, f"{host}:{port}")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        header_text, _, payload = rest.partition(b"\r\n\r\n")
        headers = {}
        for line in header_text.decode().split("\r\n"):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        while len(payload) < int(headers.get("content-length", 0)):
            chunk = sock.recv(65536)
            if not chunk:
                break
            payload += chunk
    return int(status_line.split()[1]), headers, json.loads(payload) if payload else None


def post(length: str) -> str:
    return (
        f"POST /v1/jobs HTTP/1.1\nHost: {OWN_HOST}\nx-api-key: {KEY}\n"
        f"Content-Type: application/json\nContent-Length: {length}\n"
    )


@pytest.mark.parametrize("length", ["abc", "-1", "1.5", "0x10", " ", "\uff11\uff12"])
def test_a_content_length_that_is_no_byte_count_is_a_400(front, length):
    server, recorder = front
    status, headers, body = exchange(server, post(length))
    assert status == 400, body
    assert body["code"] == "invalid_request"
    assert body["errors"] == [
        {"field": "Content-Length", "rule": "must be a non-negative whole number of bytes"}
    ]
    assert headers["connection"] == "close"
    assert recorder.events == []


@pytest.mark.parametrize("length", [str(MAX_BODY_BYTES + 1), str(10**12), "9" * 5000])
def test_a_body_past_the_limit_is_a_413_without_reading_it(front, length):
    server, recorder = front
    status, _, body = exchange(server, post(length), b"{}")
    assert status == 413, body
    assert body["code"] == "payload_too_large" and str(MAX_BODY_BYTES) in body["message"]
    assert recorder.events == []


def test_two_different_lengths_are_a_400(front):
    server, recorder = front
    status, _, body = exchange(server, post("2") + "Content-Length: 3\n", b"{}")
    assert status == 400 and body["errors"][0]["field"] == "Content-Length"
    assert recorder.events == []


def test_a_body_within_the_cap_reaches_the_function(front):
    server, recorder = front
    status, _, body = exchange(server, post("2"), b"{}")
    assert (status, body) == (200, {"ok": True})
    (event,) = recorder.events
    assert event["body"] == "{}" and event["requestContext"]["path"] == "/v1/jobs"


@pytest.mark.parametrize("path", ["/openapi.json", "/docs"])
def test_the_document_needs_the_key_as_on_a_stack_it_needs_a_signature(front, path):
    server, recorder = front
    status, _, body = exchange(server, f"GET {path} HTTP/1.1\nHost: {OWN_HOST}\n")
    assert status == 401 and body["code"] == "unauthenticated"
    status, _, _ = exchange(server, f"GET {path} HTTP/1.1\nHost: {OWN_HOST}\nx-api-key: {KEY}\n")
    assert status == 200 and len(recorder.events) == 1


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (None, (0, None)),
        (["0"], (0, None)),
        (["1000000"], (MAX_BODY_BYTES, None)),
        (["1000001"], (0, (413, "the body may have at most 1000000 bytes"))),
        (["7", "7"], (7, None)),
        (["0" * 5000 + "2"], (2, None)),  # more digits than int() takes from text, all zeros but one
    ],
)
def test_body_length(values, expected):
    assert body_length(values) == expected
