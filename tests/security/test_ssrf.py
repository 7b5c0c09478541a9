"""HTTP targets are tenant input: they must never reach the scheduler's own network.

Internal destinations (loopback, private, CGNAT, link-local, the metadata endpoints,
unique-local) are refused however they are reached — as a literal, through a name that
resolves to them, or through a redirect — unless the deployment allow-lists them. The last
tests go end to end: the job is accepted, and the real worker ends its run DEAD with error
class Refused without opening a connection or resolving anything."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from jobsched.domain.errors import PermanentError
from jobsched.domain.models import HttpTarget
from jobsched.domain.runs import RunState
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Received
from jobsched.targets import DestinationPolicy, HttpTargetClient, Invocation

INTERNAL = {
    "loopback v4": "127.0.0.1",
    "loopback v4 (other)": "127.10.20.30",
    "loopback v6": "::1",
    "private 10/8": "10.1.2.3",
    "private 172.16/12": "172.20.0.5",
    "private 192.168/16": "192.168.0.10",
    "shared CGNAT": "100.64.1.1",
    "link-local v4": "169.254.10.10",
    "metadata v4": "169.254.169.254",
    "ECS credentials": "169.254.170.2",
    "metadata v6": "fd00:ec2::254",
    "unique-local v6 fc00::/7": "fc00::1",
    "unique-local v6 fd00::/8": "fd12:3456:789a::1",
    "link-local v6": "fe80::1",
    "IPv4-mapped metadata": "::ffff:169.254.169.254",
    "IPv4-mapped private": "::ffff:10.0.0.1",
    "unspecified v4": "0.0.0.0",
    "unspecified v6": "::",
}
PUBLIC = "93.184.215.14"


def url_for(address: str, path: str = "/") -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}{path}"


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"{host} must not be looked up")


def refused(policy: DestinationPolicy, url: str) -> PermanentError:
    with pytest.raises(PermanentError) as caught:
        policy.check(url)
    assert caught.value.error_class == "Refused", caught.value.message
    return caught.value


@pytest.mark.parametrize("address", INTERNAL.values(), ids=INTERNAL.keys())
def test_internal_literals_are_refused(address):
    error = refused(DestinationPolicy(resolver=no_dns), url_for(address, "/latest/meta-data/"))
    assert "refused" in error.message


@pytest.mark.parametrize("address", INTERNAL.values(), ids=INTERNAL.keys())
def test_names_resolving_to_internal_addresses_are_refused(address):
    policy = DestinationPolicy(resolver=lambda host, port: [address])
    refused(policy, "http://innocent.example.com/hook")


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "10.0.0.7"])
def test_one_internal_address_among_public_ones_is_enough_to_refuse(address):
    # DNS rebinding: a name that answers both, hoping the client picks the internal one.
    policy = DestinationPolicy(resolver=lambda host, port: [PUBLIC, address])
    refused(policy, "https://rebind.example.com/")


def test_public_addresses_pass():
    policy = DestinationPolicy(resolver=lambda host, port: [PUBLIC])
    assert policy.check("https://example.com/hook") == [PUBLIC]


def test_allow_list_admits_exactly_what_it_names():
    policy = DestinationPolicy(["10.0.0.0/8", "receiver.internal"], resolver=lambda host, port: ["10.9.9.9"])
    assert policy.check("http://10.1.2.3/") == ["10.1.2.3"]
    assert policy.check("http://receiver.internal/") == ["10.9.9.9"]
    # Allow-listing one private range opens nothing else.
    refused(policy, "http://192.168.1.1/")
    refused(policy, "http://169.254.169.254/latest/meta-data/")
    refused(policy, url_for("fd00:ec2::254"))
    refused(DestinationPolicy(["10.0.0.0/8"], resolver=lambda h, p: ["169.254.169.254"]), "http://x.test/")


# --- redirects ---


class Redirector:
    """A receiver on loopback that answers every request with a redirect to `?to=`."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                owner.requests.append(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                target = parse_qs(urlsplit(self.path).query).get("to", ["/"])[0]
                self.send_response(307)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def url(self, to: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hop?to={quote(to, safe='')}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def redirector() -> Iterator[Redirector]:
    server = Redirector()
    yield server
    server.close()


def invocation() -> Invocation:
    return Invocation(
        run_key="j_x@2026-11-02T08:00:00Z",
        job_id="j_x",
        tenant="tenant-a",
        job_type="hook",
        scheduled_for=datetime(2026, 11, 2, 8, tzinfo=UTC),
        attempt=1,
        payload={},
        timeout_seconds=5,
    )


REDIRECT_TARGETS = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[::1]/admin",
    "http://10.0.0.1/",
    "http://[fd12::1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://metadata.test/",  # a name resolving to the metadata endpoint
]


@pytest.mark.parametrize("to", REDIRECT_TARGETS)
def test_redirects_to_internal_destinations_are_refused(redirector, to):
    def resolver(host: str, port: int) -> list[str]:
        return {"metadata.test": ["169.254.169.254"]}.get(host, [PUBLIC])

    # Only the first hop (the loopback receiver) is allow-listed.
    client = HttpTargetClient(DestinationPolicy(["127.0.0.1/32"], resolver=resolver))
    with pytest.raises(PermanentError) as caught:
        client.send(HttpTarget(kind="http", url=redirector.url(to)), invocation())
    assert caught.value.error_class == "Refused"
    assert len(redirector.requests) == 1  # the redirect was never followed


# --- end to end through the real worker ---


@pytest.fixture
def network_log(monkeypatch) -> list[str]:
    """Every connection attempt and name lookup made by anything in the process."""
    attempts: list[str] = []

    def connect(self: socket.socket, address: Any) -> None:
        attempts.append(f"connect {address}")
        raise ConnectionRefusedError("no network in this test")

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(f"resolve {host}")
        if host == "metadata.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80))]
        raise socket.gaierror(socket.EAI_NONAME, "unknown")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return attempts


@pytest.mark.integration
@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]/latest/meta-data",
        "http://0xa9fea9fe/latest/meta-data",  # the metadata address in hex
    ],
)
def test_worker_ends_a_metadata_target_dead_without_connecting(api, container, network_log, url):
    created = api.post(
        "/v1/jobs",
        {
            "name": "steal",
            "type": "hook",
            "runAt": "2026-11-02T08:00:00Z",
            "target": {"kind": "http", "url": url},
        },
    )
    assert created.status == 201, created  # accepted: the destination is judged where it is used
    job_id = created.body["jobId"]
    key = f"{job_id}@2026-11-02T08:00:00Z"

    result = container.worker.process(Received(key, job_id, "2026-11-02T08:00:00Z", "default"))

    assert result.outcome is AttemptOutcome.DEAD
    run = container.runs.get_by_key(key)
    assert run.state is RunState.DEAD and run.attempt == 1  # a permanent error: never retried
    assert run.last_error_class == "Refused"
    assert network_log == []
    detail = api.get(f"/v1/runs/{quote(key, safe='')}").body
    assert detail["lastErrorClass"] == "Refused"
    assert json.dumps(detail).count("Refused") >= 1


@pytest.mark.integration
def test_worker_refuses_a_name_resolving_to_the_metadata_endpoint(api, container, network_log):
    created = api.post(
        "/v1/jobs",
        {
            "name": "rebind",
            "type": "hook",
            "runAt": "2026-11-02T08:00:00Z",
            "target": {"kind": "http", "url": "http://metadata.test/latest/meta-data"},
        },
    )
    job_id = created.body["jobId"]
    key = f"{job_id}@2026-11-02T08:00:00Z"
    result = container.worker.process(Received(key, job_id, "2026-11-02T08:00:00Z", "default"))
    assert result.outcome is AttemptOutcome.DEAD
    assert container.runs.get_by_key(key).last_error_class == "Refused"
    assert network_log == ["resolve metadata.test"]  # looked up once, never connected
