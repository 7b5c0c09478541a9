"""The running local mode, as `jobsched local` assembles it, gives a web page nothing on
either port (tests/integration/test_local_closed.py has each rule), while boto3 and the API
clients keep working. Local mode only: a deployed stack has no moto port."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

HOSTILE = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}


def send(url: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> int:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_a_page_gets_nothing_from_the_running_moto_server(runtime: Any) -> None:
    moto = runtime.moto.url
    host = urlsplit(moto).netloc
    form = b"Action=ListQueues&Version=2012-11-05"
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Authorization": "AWS4-HMAC-SHA256 Credential=local/20261101/us-east-1/sqs/aws4_request",
    }
    assert send(moto, "POST", "/", {"Host": host, **headers, **HOSTILE}, form) == 403
    assert send(moto, "POST", "/", {"Host": f"evil.example:{urlsplit(moto).port}", **headers}, form) == 403
    # The runtime's own clients are served: its queues are all there.
    sqs = boto3.client("sqs", endpoint_url=moto, region_name=runtime.config.region)
    assert set(runtime.resources["queue_urls"].values()) <= set(sqs.list_queues()["QueueUrls"])


def test_a_page_gets_nothing_from_the_running_api(runtime: Any) -> None:
    api = runtime.api_url
    port = urlsplit(api).port
    own = {"Host": f"127.0.0.1:{port}", "x-api-key": runtime.api_key, "Content-Type": "application/json"}
    body = json.dumps({"name": "from-a-page", "type": "demo.hello", "every": 60}).encode()
    assert send(api, "POST", "/v1/jobs", {**own, **HOSTILE}, body) == 403
    assert send(api, "GET", "/v1/jobs", {**own, "Host": f"evil.example:{port}"}) == 421
    assert send(api, "GET", "/console/", {"Host": f"evil.example:{port}"}) == 421
    assert send(api, "GET", "/v1/jobs", own) == 200
