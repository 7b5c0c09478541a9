"""Local mode refuses the bodies a deployed stack refuses, with the same 413: the stack's web
ACL answers a Content-Length past `apiMaxBodyBytes` (1,000,000 by default) with its custom
body, and local mode's front answers the same length with the same status and body, before
reading it. A client tried against `make run` then meets the deployed limit, not a looser one."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from jobsched.edge import MAX_BODY_BYTES, payload_too_large_body
from jobsched_local.glue import HttpFront

pytestmark = pytest.mark.integration

KEY = "key-a"
DEPLOYED_LIMIT = MAX_BODY_BYTES  # the stack's default apiMaxBodyBytes (tests/infrastructure)


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[int] = []

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(len(event.get("body") or ""))
        return {"statusCode": 201, "headers": {"Content-Type": "application/json"}, "body": "{}"}


@pytest.fixture
def front() -> Iterator[tuple[HttpFront, Recorder]]:
    recorder = Recorder()
    server = HttpFront("127.0.0.1", 0, recorder, lambda key: "tenant-a" if key == KEY else None)  # type: ignore[arg-type]
    server.start()
    try:
        yield server, recorder
    finally:
        server.stop()


def post(front: HttpFront, size: int) -> tuple[int, Any]:
    host, port = front.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        # A JSON string of `size` bytes in all.
        body = b'"' + b"x" * (size - 2) + b'"'
        connection.request(
            "POST", "/v1/jobs", body=body, headers={"x-api-key": KEY, "Content-Type": "application/json"}
        )
        response = connection.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else None
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the front dropped the connection instead of answering")
    finally:
        connection.close()


def test_a_body_past_the_deployed_limit_gets_the_deployed_413(front):
    server, recorder = front
    status, body = post(server, DEPLOYED_LIMIT + 1)
    assert status == 413, body
    assert body == json.loads(payload_too_large_body(DEPLOYED_LIMIT))  # the web ACL's answer
    assert recorder.bodies == []


def test_a_body_at_the_deployed_limit_reaches_the_function(front):
    server, recorder = front
    status, _ = post(server, DEPLOYED_LIMIT)
    assert status == 201
    assert recorder.bodies == [DEPLOYED_LIMIT]


def test_a_zero_padded_length_is_judged_by_its_value_as_the_web_acl_judges_it(front):
    """The web ACL's pattern allows leading zeros (jobsched.cdk.api.integers_above): a small body with
    a padded length passes it, so it passes here too."""
    import socket

    server, recorder = front
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\nx-api-key: {KEY}\r\n"
        "Content-Type: application/json\r\nContent-Length: 0000000000000002\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + b"{}")
        status_line = sock.recv(65536).split(b"\r\n", 1)[0]
    assert status_line.split()[1] == b"201", status_line
    assert recorder.bodies == [2]


def test_a_client_still_sending_a_refused_body_reads_the_413_not_a_reset(front):
    """The front answers a length past the limit before reading the body; a client that sends
    its whole body first (most do) is still sending when the answer is written. The front
    reads and drops what follows before closing, so the client then reads the 413."""
    import socket
    import time

    server, recorder = front
    host, port = server.url.removeprefix("http://").split(":")
    size = DEPLOYED_LIMIT + 1
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\nx-api-key: {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode())
        time.sleep(0.5)  # the answer is written (and, without the linger, the socket closed)
        sock.sendall(b'"' + b"x" * (size - 2) + b'"')
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.split(b"\r\n", 1)[0].split()[1] == b"413", answer[:200]
    assert recorder.bodies == []
