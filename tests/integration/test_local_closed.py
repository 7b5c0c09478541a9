"""Local mode is closed to web pages (docs/design/security.md): a page in the developer's browser,
or one on a name rebound to 127.0.0.1, gets nothing from either port, while boto3, the AWS
CLI, the CLI and the console keep working.

The moto port is the one that matters most: it has no authentication, so whatever reaches it
reads and writes every tenant's data. The hostile requests here are what a page sends: a
fetch's preflight and the request after it, an image's GET (no Origin, but Fetch Metadata),
and the same requests under a rebound Host, where the page is same-origin with itself."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from jobsched_local.config import LocalConfig
from jobsched_local.glue import HttpFront
from jobsched_local.moto_backend import MotoProcess, MotoServer

pytestmark = pytest.mark.integration

HOSTILE_ORIGIN = "http://evil.example"
REBOUND = "evil.example"  # a name whose DNS the attacker points at 127.0.0.1
KEY = "key-a"


def request(
    url: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def sqs_client(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoProcess]:
    server = MotoProcess("127.0.0.1", 0)  # as `jobsched local` runs it
    server.start()
    try:
        yield server
    finally:
        server.stop()


def create_queue_form(name: str) -> bytes:
    """A CreateQueue in SQS's query protocol."""
    return f"Action=CreateQueue&QueueName={name}&Version=2012-11-05".encode()


def form_headers(host: str, **extra: str) -> dict[str, str]:
    """What a page's fetch sends once its preflight passed (moto's CORS let every origin
    send any header), or what a page on a rebound name sends to its own origin: the
    credential scope names the service for moto."""
    return {
        "Host": host,
        "Content-Type": "application/x-www-form-urlencoded",
        "Authorization": "AWS4-HMAC-SHA256 Credential=local/20261101/us-east-1/sqs/aws4_request",
        **extra,
    }


def queue_names(url: str) -> list[str]:
    return [u.rsplit("/", 1)[1] for u in sqs_client(url).list_queues().get("QueueUrls", [])]


# --- the moto port ---


def test_boto3_still_works_and_is_granted_no_cors(moto):
    sqs = sqs_client(moto.url)
    url = sqs.create_queue(QueueName="from-boto3")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["hello"]
    host = urlsplit(moto.url).netloc
    status, headers, _ = request(moto.url, "POST", "/", form_headers(host), create_queue_form("plain"))
    assert status == 200
    assert not [name for name in headers if name.startswith("access-control-")]


@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed here")
def test_the_aws_cli_still_works(moto):
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    env.pop("AWS_SESSION_TOKEN", None)
    done = subprocess.run(
        [
            "aws",
            "--endpoint-url",
            moto.url,
            "--region",
            "us-east-1",
            "sqs",
            "create-queue",
            "--queue-name",
            "cli",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "cli" in queue_names(moto.url)


def test_a_cross_site_post_gets_nothing_and_changes_nothing(moto):
    host = urlsplit(moto.url).netloc
    status, headers, _ = request(
        moto.url,
        "POST",
        "/",
        form_headers(host, Origin=HOSTILE_ORIGIN, **{"Sec-Fetch-Site": "cross-site"}),
        create_queue_form("stolen-by-form"),
    )
    assert status == 403
    assert "access-control-allow-origin" not in headers
    assert "stolen-by-form" not in queue_names(moto.url)


def test_a_fetch_preflight_is_refused_without_cors(moto):
    host = urlsplit(moto.url).netloc
    status, headers, _ = request(
        moto.url,
        "OPTIONS",
        "/",
        {
            "Host": host,
            "Origin": HOSTILE_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-amz-target,content-type",
        },
    )
    assert status == 403
    assert not [name for name in headers if name.startswith("access-control-")]


def test_a_page_request_without_an_origin_is_refused_by_its_fetch_metadata(moto):
    # An <img> or a top-level navigation: a GET without Origin, but with Sec-Fetch-Site.
    host = urlsplit(moto.url).netloc
    status, _, _ = request(
        moto.url, "GET", "/moto-api/data.json", {"Host": host, "Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403


@pytest.mark.parametrize("host", [REBOUND, f"{REBOUND}:5055", "127.0.0.1.evil.example", "10.0.0.1"])
def test_a_rebound_host_gets_nothing(moto, host):
    # A page on a rebound name is same-origin with itself: no Origin, full read access.
    status, _, body = request(moto.url, "GET", "/moto-api/data.json", {"Host": host})
    assert status == 403
    assert b"sqs" not in body
    status, _, _ = request(
        moto.url, "POST", "/", form_headers(host), create_queue_form("stolen-by-rebinding")
    )
    assert status == 403
    assert "stolen-by-rebinding" not in queue_names(moto.url)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]"])
def test_loopback_names_are_served(moto, host):
    port = urlsplit(moto.url).port
    status, _, _ = request(moto.url, "POST", "/", form_headers(f"{host}:{port}"), create_queue_form("named"))
    assert status == 200


def test_the_in_process_moto_server_is_closed_the_same_way():
    server = MotoServer("127.0.0.1", 0)
    server.start()
    try:
        host = urlsplit(server.url).netloc
        assert request(server.url, "GET", "/moto-api/data.json", {"Host": REBOUND})[0] == 403
        status, _, _ = request(
            server.url, "POST", "/", form_headers(host, Origin=HOSTILE_ORIGIN), create_queue_form("x")
        )
        assert status == 403
    finally:
        server.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_only_a_loopback_address_is_bound(host):
    with pytest.raises(ValueError, match="loopback"):
        MotoProcess(host, 0)
    with pytest.raises(ValueError, match="host"):
        LocalConfig(host=host)


def test_a_config_file_with_a_public_host_is_refused_naming_the_setting(tmp_path):
    path = tmp_path / "local.json"
    path.write_text(json.dumps({"host": "0.0.0.0"}))
    with pytest.raises(ValueError, match=re.escape("host: '0.0.0.0' is not a loopback address")):
        LocalConfig.load(path)


# --- the API port ---


class Recorder:
    """Stands in for the `api` function: records each event, answers 200."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": "{}"}


@pytest.fixture
def front() -> Iterator[tuple[HttpFront, Recorder]]:
    recorder = Recorder()
    server = HttpFront("127.0.0.1", 0, recorder, lambda key: "tenant-a" if key == KEY else None)  # type: ignore[arg-type]
    server.start()
    try:
        yield server, recorder
    finally:
        server.stop()


def api_headers(server: HttpFront, **extra: str) -> dict[str, str]:
    return {
        "Host": urlsplit(server.url).netloc,
        "x-api-key": KEY,
        "Content-Type": "application/json",
        **extra,
    }


@pytest.mark.parametrize(
    "extra",
    [
        {"Origin": HOSTILE_ORIGIN},
        {"Origin": "null"},  # a sandboxed frame or a file:// page
        {"Origin": HOSTILE_ORIGIN, "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another port of 127.0.0.1: the moto port, a dev server
    ],
)
def test_a_cross_site_request_reaches_no_api_route(front, extra):
    server, recorder = front
    status, headers, body = request(server.url, "POST", "/v1/jobs", api_headers(server, **extra), b"{}")
    assert status == 403, body
    assert json.loads(body)["code"] == "forbidden"
    assert "access-control-allow-origin" not in headers
    assert recorder.events == []


@pytest.mark.parametrize("path", ["/v1/jobs", "/console/", "/openapi.json"])
def test_a_rebound_host_reaches_nothing(front, path):
    server, recorder = front
    headers = {**api_headers(server), "Host": f"{REBOUND}:{urlsplit(server.url).port}"}
    status, _, body = request(server.url, "GET", path, headers)
    assert status == 421, body
    assert json.loads(body)["code"] == "misdirected_request"
    assert recorder.events == []


def test_the_cli_and_the_console_own_origin_are_served(front):
    server, recorder = front
    # The CLI (urllib): neither Origin nor Sec-Fetch-Site.
    assert request(server.url, "POST", "/v1/jobs", api_headers(server), b"{}")[0] == 200
    # The console's fetches from its own page, by either loopback name.
    port = urlsplit(server.url).port
    for name in ("127.0.0.1", "localhost"):
        own = {"Host": f"{name}:{port}", "Origin": f"http://{name}:{port}", "Sec-Fetch-Site": "same-origin"}
        assert request(server.url, "POST", "/v1/jobs", api_headers(server, **own), b"{}")[0] == 200
    # Typing the console's address: a navigation, Sec-Fetch-Site "none".
    status, _, _ = request(
        server.url, "GET", "/console/", {"Host": f"127.0.0.1:{port}", "Sec-Fetch-Site": "none"}
    )
    assert status == 200
    assert len(recorder.events) == 3
