"""Helpers shared by the suites: the test clock's start, workers and claims built the way the
stack builds them, a thread-safe wrapper for moto clients, a stub API over HTTP, and an API
client that drives the real `api` handler with API Gateway REST events. Fixtures live in
conftest.py and use these."""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# The caller's own AWS settings, for the one suite that may use them: the end-to-end suite
# against a deployed stack (tests/e2e, JOBSCHED_E2E_TARGET=aws) puts them back.
CALLER_AWS_ENVIRONMENT = {
    name: os.environ.get(name)
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
    )
}

T0 = datetime(2026, 11, 2, 8, 0, 0, tzinfo=UTC)

# Where bare target names resolve in the tests: moto's account and region.
HOME = {"partition": "aws", "region": "us-east-1", "account": "123456789012"}
# Every lambda, sqs, events and states ARN anywhere: for tests about something else than grants.
ANY_AWS_TARGET = tuple(f"arn:*:{service}:*:*:*" for service in ("lambda", "sqs", "events", "states"))


def grant(
    container: Any,
    tenant_targets: dict[str, Any],
    tenant_event_sources: dict[str, Any] | None = None,
    assumable_roles: tuple[str, ...] = (),
) -> None:
    """Give `container` these grants (jobsched.domain.grants), as the operator's configuration
    would: the services built from them are rebuilt on next use."""
    from jobsched.domain.grants import GrantsDocument

    document = GrantsDocument.from_maps(tenant_targets, tenant_event_sources, assumable_roles, HOME)
    container.settings = container.settings.model_copy(update={"target_grants": document})
    for built in ("grants", "target_authority", "jobs", "worker", "target_runner", "notifier"):
        container.__dict__.pop(built, None)


def boto3_client(service: str) -> Any:
    """A default boto3 client for `service` (moto's, under mock_aws): the target runner's factory."""
    import boto3

    return boto3.client(service)  # type: ignore[call-overload]  # any service name, not one Literal


def make_worker(container: Any, registry: Any, name: str = "w1", **options: Any) -> Any:
    """A worker on the container's stores and queues, running `registry`'s Python handlers,
    with Powertools idempotency kept on the run items (as the stack wires it)."""
    from jobsched.services.worker import Worker
    from jobsched.targets import TargetRunner

    return Worker(
        container.definitions,
        container.runs,
        container.queues,
        TargetRunner(boto3_client, registry=registry),
        container.clock,
        worker_id=name,
        **{"lease_seconds": 60, "metrics": container.metrics, **options},
    )


def claimed(run: Any, *, at: datetime, lease_for: float, owner: str = "w") -> Any:
    """`run` as a worker's claim writes it: the next fence and attempt, a lease for `lease_for` s."""
    from jobsched.domain.lifecycle import advance
    from jobsched.domain.runs import RunState

    return advance(
        run,
        RunState.LEASED,
        now=at,
        actor=f"worker:{owner}",
        fence=run.fence + 1,
        attempt=run.attempt + 1,
        lease_owner=owner,
        lease_expires_at=at + timedelta(seconds=lease_for),
        claim_token=secrets.token_hex(8),
    )


def create_queues(sqs) -> dict[str, dict[str, str]]:
    """Every queue of the schema with its DLQ and redrive policy; returns {"urls", "dlq_urls"}."""
    from jobsched_local.moto_backend import create_queues as create

    urls, dlq_urls, _ = create(sqs)
    return {"urls": urls, "dlq_urls": dlq_urls}


class SerializedClient:
    """Wraps a boto3 client so calls from many threads reach moto one at a time.

    moto's in-memory DynamoDB is not thread-safe (a failed transaction restores a snapshot
    of the whole table); real DynamoDB serialises conflicting writes itself. Threads still
    interleave between calls, which is where the races under test live."""

    def __init__(self, inner: Any) -> None:
        import threading

        self._inner = inner
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


class StubApi:
    """An HTTP server on `host` (a loopback address: 127.0.0.1, or 127.0.0.2 for another
    host) that answers from a table of (method, path) → (status, body, headers) and records
    every request it receives (its headers with names in lower case)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.routes: dict[tuple[str, str], Any] = {}  # (status, body, headers), or a callable answering one
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                stub.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": json.loads(body) if body else None,
                    }
                )
                route = stub.routes.get(
                    (self.command, self.path.split("?")[0]), (404, {"code": "not_found", "message": "no"}, {})
                )
                status, payload, headers = route() if callable(route) else route  # a callable: per request
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class ApiResponse:
    status: int
    headers: dict[str, str]
    body: Any

    def __repr__(self) -> str:
        return f"<{self.status} {json.dumps(self.body)[:400]}>"


class ApiClient:
    """Calls the `api` Lambda handler exactly as API Gateway would, as one tenant."""

    def __init__(self, tenant: str | None) -> None:
        self.tenant = tenant

    def request(
        self,
        method: str,
        path: str,
        json_body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        raw_body: str | None = None,
        query: str = "",
    ) -> ApiResponse:
        from jobsched.handlers import api
        from jobsched_local.apigw import rest_event
        from jobsched_local.lambda_context import InvocationContext

        body = (
            raw_body if raw_body is not None else (json.dumps(json_body) if json_body is not None else None)
        )
        hdrs = {"content-type": "application/json", **(headers or {})}
        event = rest_event(method, path, body=body, headers=hdrs, query=query, tenant=self.tenant)
        result = api.handler(event, InvocationContext(function_name="jobsched-api"))
        text = result.get("body") or ""
        try:
            parsed = json.loads(text) if text else None
        except json.JSONDecodeError:
            parsed = text
        headers = dict(result.get("headers") or {})
        headers.update({k: v[-1] for k, v in (result.get("multiValueHeaders") or {}).items() if v})
        return ApiResponse(result["statusCode"], headers, parsed)

    def get(self, path: str, **kw: Any) -> ApiResponse:
        return self.request("GET", path, **kw)

    def post(self, path: str, json_body: Any = None, **kw: Any) -> ApiResponse:
        return self.request("POST", path, json_body, **kw)

    def patch(self, path: str, json_body: Any = None, **kw: Any) -> ApiResponse:
        return self.request("PATCH", path, json_body, **kw)

    def put(self, path: str, json_body: Any = None, **kw: Any) -> ApiResponse:
        return self.request("PUT", path, json_body, **kw)

    def delete(self, path: str, **kw: Any) -> ApiResponse:
        return self.request("DELETE", path, **kw)


@contextmanager
def fast_local_mode(api_keys: dict[str, str], **settings: Any) -> Iterator[Any]:
    """Local mode on free ports, ticking every second, for the suites that drive it over HTTP
    (e2e, browser). The sweep horizon (120 s by default) is how far ahead runs are made: an
    every-2s job would queue 60 of them, and moto's SQS slows with queue depth; the behaviour
    under test is the same with a shorter one."""
    from jobsched_local.config import LocalConfig
    from jobsched_local.runtime import LocalRuntime

    config = LocalConfig(
        port=0,
        moto_port=0,
        sweep_seconds=1,
        reconcile_seconds=2,
        horizon_seconds=15,
        api_keys=api_keys,
        **settings,  # e.g. tenant_targets
    )
    runtime = LocalRuntime(config).start()
    try:
        yield runtime
    finally:
        runtime.stop()  # also restores the environment the process had before the runtime


def installed_with(requires_dist: list[str], extra: str, project: str = "jobsched") -> set[str]:
    """The distributions (canonical names) that installing `project[extra]` pulls in directly,
    from its `Requires-Dist` entries (a wheel's METADATA, or `pyproject_requires_dist`):
    those without a marker, those whose marker holds for `extra`, and, through an entry naming
    `project` itself (`jobsched[server]`), those of the extras it names."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted, seen, names = [extra], set[str](), set[str]()
    while wanted:
        current = wanted.pop()
        if current in seen:
            continue
        seen.add(current)
        for requirement in map(Requirement, requires_dist):
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": current}):
                continue
            if canonicalize_name(requirement.name) == canonicalize_name(project):
                wanted.extend(requirement.extras)
            else:
                names.add(canonicalize_name(requirement.name))
    return names


def pyproject_requires_dist(pyproject: dict[str, Any]) -> list[str]:
    """pyproject.toml's dependencies as a wheel's `Requires-Dist` entries: each extra's with
    `extra == "<name>"` for a marker (pyproject's own entries carry none)."""
    project = pyproject["project"]
    entries = list(project["dependencies"])
    for name, requirements in project["optional-dependencies"].items():
        entries += [f'{requirement}; extra == "{name}"' for requirement in requirements]
    return entries


def wheel_requires_dist(wheel: Path) -> list[str]:
    """The `Requires-Dist` entries of a built wheel's METADATA: what pip installs from it."""
    import zipfile
    from email.parser import HeaderParser

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = HeaderParser().parsestr(archive.read(name).decode())
    return list(metadata.get_all("Requires-Dist") or [])
