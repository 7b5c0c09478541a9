"""Local mode's HTTP front passes every method on, whatever its name: http.server answers an
HTML 501 for one it has no handler for, where the API answers JSON. A method a path does not
take is the API's 405 with `Allow` (OPTIONS included: the API sets no CORS), a path no route
has is its 404, the console's paths answer as the console does, and an answer to HEAD has no
body. The real `api` handler, in process on moto, behind the real front."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from jobsched_local.events_tail import EventTail
from jobsched_local.glue import HttpFront, Invoker

KEY = "key-a"


@pytest.fixture
def front(container: Any) -> Iterator[HttpFront]:
    from jobsched.handlers import api

    tail = EventTail(sqs=None, queue_url="")  # answers /local/events; never drained here
    server = HttpFront(
        "127.0.0.1",
        0,
        Invoker("api", api.handler),
        lambda key: "tenant-a" if key == KEY else None,
        tail.answer,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def send(
    server: HttpFront, method: str, path: str, *, key: str | None = KEY
) -> tuple[int, dict[str, str], bytes]:
    """One request on a connection that is then used again: an answer whose length is wrong
    (a body after HEAD) would break the second one."""
    parts = urlsplit(server.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    headers = {"x-api-key": key} if key else {}
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        answer = response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        connection.request("GET", "/v1/jobs", headers={"x-api-key": KEY})
        follow_up = connection.getresponse()
        assert follow_up.status == 200 and json.loads(follow_up.read())["items"] == []
        return answer
    finally:
        connection.close()


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "PROPFIND", "PUT"])
def test_a_method_an_api_path_does_not_take_is_the_apis_405(front, method):
    status, headers, body = send(front, method, "/v1/jobs")
    assert status == 405, body
    assert headers["allow"] == "GET, POST"
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["code"] == "method_not_allowed"
    assert "access-control-allow-origin" not in headers


def test_head_is_answered_without_a_body(front):
    status, headers, body = send(front, "HEAD", "/v1/jobs")
    assert (status, headers["allow"], body) == (405, "GET, POST", b"")


def test_a_path_no_route_has_is_the_apis_404_whatever_the_method(front):
    status, _, body = send(front, "TRACE", "/v1/nowhere")
    assert status == 404 and json.loads(body)["code"] == "not_found"


def test_without_a_key_any_method_is_a_401(front):
    status, _, body = send(front, "PROPFIND", "/v1/jobs", key=None)
    assert status == 401 and json.loads(body)["code"] == "unauthenticated"


def test_local_modes_own_path_answers_405_with_allow(front):
    status, headers, body = send(front, "TRACE", "/local/events")
    assert status == 405 and headers["allow"] == "GET"
    assert json.loads(body) == {
        "code": "method_not_allowed",
        "message": "/local/events does not take TRACE; it takes GET",
    }


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "PROPFIND"])
def test_a_console_path_answers_as_the_console_does(front, method):
    status, headers, body = send(front, method, "/console/", key=None)
    assert (status, headers["allow"], body) == (405, "GET, HEAD", b"method not allowed")
    assert headers["content-type"].startswith("text/plain")
    status, headers, body = send(front, "HEAD", "/console/", key=None)
    assert status == 200 and body == b"" and headers["content-type"].startswith("text/html")


# A literal segment takes precedence over a path parameter, as API Gateway matches resources:
# `/v1/jobs/batch` is its own resource (POST), though `/v1/jobs/{id}` would match it too.
ALLOWED = [
    ("/v1/jobs/batch", "POST"),
    ("/v1/jobs/j_0123456789abcdef", "DELETE, GET, PATCH"),
    ("/v1/jobs/j_0123456789abcdef/runs", "GET"),
    ("/v1/jobs/j_0123456789abcdef/pause", "POST"),
    ("/v1/runs/j_0123456789abcdef@2026-11-02T08:00:00Z", "GET"),
    ("/v1/runs", "GET"),
    ("/v1/leases/j_0123456789abcdef@2026-11-02T08:00:00Z/heartbeat", "POST"),
    ("/v1/dead-letters/redrive", "POST"),
]


@pytest.mark.parametrize(("path", "allowed"), ALLOWED)
def test_a_405_names_the_methods_of_the_resource_the_path_is(front, path, allowed):
    for method in ("PUT", "TRACE"):
        status, headers, body = send(front, method, path)
        assert (status, headers["allow"]) == (405, allowed), (method, body)
        assert json.loads(body)["code"] == "method_not_allowed"


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_a_method_of_a_less_specific_resource_is_its_405_not_that_resources_route(front, method):
    """`/v1/jobs/batch` is not job `batch`: a method `/v1/jobs/{id}` takes is no job's there."""
    status, headers, body = send(front, method, "/v1/jobs/batch")
    assert (status, headers["allow"]) == (405, "POST"), body
    assert json.loads(body) == {
        "code": "method_not_allowed",
        "message": f"/v1/jobs/batch does not take {method}; it takes POST",
    }


@pytest.mark.parametrize(
    ("body", "status"), [(None, 200), (b"{}", 200), (b'{"zzz": 1}', 400)], ids=["none", "empty", "member"]
)
def test_a_body_sent_to_a_route_that_takes_none_is_answered_as_the_api_answers_it(front, api, body, status):
    job = api.post("/v1/jobs", {"name": "n", "type": "t", "cron": "0 9 * * *"}).body["jobId"]
    parts = urlsplit(front.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    headers = {"x-api-key": KEY, "content-type": "application/json"}
    try:
        connection.request("POST", f"/v1/jobs/{job}/pause", body=body, headers=headers)
        response = connection.getresponse()
        answer = response.status, json.loads(response.read())
    finally:
        connection.close()
    assert answer[0] == status, answer
    if status == 400:
        assert answer[1]["errors"] == [{"field": "zzz", "rule": "is not a known field"}]
    else:
        assert answer[1]["state"] == "PAUSED"
