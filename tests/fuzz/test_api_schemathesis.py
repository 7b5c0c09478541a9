"""Schema-driven fuzzing of the HTTP API: every documented operation, then stateful sequences.

The real `api` handler runs in-process behind a small WSGI shim that turns each request into
the API Gateway REST event Lambda would receive (tenant-a as the authenticated caller), on
moto. Checks: no server error (5xx), and every response — status code, content type, body —
conforms to the OpenAPI document the handler itself serves. Besides what the schema
generates, half the bodies, query strings and header sets carry one hostile value (the
shapes of tests/security/test_hostile_inputs.py: deep nesting, huge numbers, NaN, lone
surrogates, oversized strings, calendar edges, forged cursors), which must be a 4xx too.

The last tests pin what earlier fuzzing found: undocumented success responses and error
details, and 5xx answers to an undeclared Content-Type or a body that is not UTF-8."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.integration

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much]

# Success responses the handler gives besides the obvious one (once missing from the document).
SUCCESS = [
    ("get", "/v1/jobs", "200", "JobList"),
    ("get", "/v1/jobs/{job_id}", "200", "JobView"),
    ("patch", "/v1/jobs/{job_id}", "200", "JobView"),
    ("delete", "/v1/jobs/{job_id}", "200", "JobView"),
    ("post", "/v1/jobs/{job_id}/pause", "200", "JobView"),
    ("post", "/v1/jobs/{job_id}/resume", "200", "JobView"),
    ("post", "/v1/jobs", "200", "JobView"),  # a replay with the same idempotency key and body
]


class Backend:
    clock: Any = None  # the container's ManualClock while a test runs


def api_gateway(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """WSGI → API Gateway REST proxy event → `api` handler → WSGI."""
    from jobsched.handlers import api
    from jobsched_local.apigw import rest_event
    from jobsched_local.lambda_context import InvocationContext

    if Backend.clock is not None:
        Backend.clock.advance(1)  # one request per simulated second: the rate limit never bites
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else None
    headers = {
        key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = environ["CONTENT_TYPE"]
    # The path as sent, still percent-encoded, as the local HTTP front hands it on.
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    path = raw.split("?", 1)[0] if raw else quote(environ.get("PATH_INFO", "/").encode("latin-1"), safe="/@:")
    event = rest_event(
        environ["REQUEST_METHOD"],
        path,
        body=body,
        headers=headers,
        query=environ.get("QUERY_STRING", ""),
        tenant="tenant-a",
    )
    try:
        result = api.handler(event, InvocationContext(function_name="jobsched-api"))
    except Exception:
        # The function failed: API Gateway answers 502 with its own body.
        result = {
            "statusCode": 502,
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"message": "Internal server error"}),
        }
    payload = result.get("body") or ""
    data = base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode()
    reply = dict(result.get("headers") or {})
    for name, values in (result.get("multiValueHeaders") or {}).items():
        reply[name] = ", ".join(values)
    status = int(result["statusCode"])
    start_response(f"{status} {_reason(status)}", [*reply.items(), ("Content-Length", str(len(data)))])
    return [data]


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def served_document() -> dict[str, Any]:
    from jobsched.handlers.api import app

    return json.loads(app.get_openapi_json_schema())


schema = schemathesis.openapi.from_dict(served_document())
schema.app = api_gateway

# Random bodies rarely make a valid job (exactly one of runAt/cron/every, a real zone...), so
# half the creates are drawn valid: the stateful phase then has jobs to chain from.
_VALID_JOB = st.fixed_dictionaries(
    {
        "name": st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40),
        "type": st.sampled_from(["ext", "report.build", "a/b:c"]),
        "payload": st.none() | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
        "priority": st.sampled_from(["high", "default", "low"]),
    },
    optional={
        "maxAttempts": st.integers(1, 100),
        "overlap": st.sampled_from(["allow", "skip", "buffer-one"]),
    },
).flatmap(
    lambda body: st.one_of(
        st.just({**body, "runAt": "2026-11-02T08:05:00Z"}),
        st.sampled_from(["*/5 * * * *", "0 9 * * 1-5", "*/30 * * * * *"]).map(
            lambda cron: {**body, "cron": cron, "timeZone": "Europe/London"}
        ),
        st.integers(1, 86400).map(lambda every: {**body, "every": every}),
    )
)


@schema.hook("before_generate_body")
def _some_valid_jobs(context: Any, strategy: Any) -> Any:
    operation = context.operation
    if operation is not None and (operation.method, operation.path) == ("post", "/v1/jobs"):
        return st.one_of(_VALID_JOB, strategy)
    return strategy


# --- the hostile shapes of tests/security/test_hostile_inputs.py, drawn among generated inputs ---


def _nested(depth: int, leaf: Any, wrap: Any) -> Any:
    for _ in range(depth):
        leaf = wrap(leaf)
    return leaf


# Body values, as Python values the test client serialises: nesting past 32 levels, numbers
# past 64 characters, lone surrogates (sent escaped), strings far past every cap, instants at
# the calendar's edges and an epoch number where an instant belongs. NaN, Infinity and
# 4,301-digit numbers are no JSON the client will write; test_hostile_inputs sends them raw.
HOSTILE_VALUES = st.sampled_from(
    [
        _nested(40, 1, lambda inner: [inner]),
        _nested(40, 1, lambda inner: {"a": inner}),
        10**70,
        -(10**400),
        1e308,
        "\ud800",
        "ab\udfffcd",
        {"\ud800": 1},
        "x" * 420_000,
        "9999-12-31T23:30:00-01:00",
        "0001-01-01T00:30:00+01:00",
        "0001-01-01T00:00:00Z",
        1793606400,
    ]
)
# Header and query values (HTTP carries text): numbers past Python's 4,300-digit limit,
# values far past their caps, a forged cursor whose key holds a number.
HUGE_DIGITS = "1" * 4301
FORGED_CURSOR = (
    base64.urlsafe_b64encode(json.dumps({"s": "tenant-a", "k": {"job_id": 5}}).encode()).decode().rstrip("=")
)
HOSTILE_TEXT = st.sampled_from(
    [HUGE_DIGITS, f'"{HUGE_DIGITS}"', "x" * 300_000, "NaN", "1e400", FORGED_CURSOR]
)


def _with_one_hostile_field(value: Any) -> st.SearchStrategy[Any]:
    if isinstance(value, dict) and value:
        return st.sampled_from(sorted(value)).flatmap(
            lambda name: HOSTILE_VALUES.map(lambda hostile: {**value, name: hostile})
        )
    return HOSTILE_VALUES


@schema.hook("before_generate_body")
def _hostile_bodies(context: Any, strategy: Any) -> Any:
    return st.one_of(strategy, strategy.flatmap(_with_one_hostile_field))


def _with_one_hostile_text(values: Any) -> st.SearchStrategy[Any]:
    if isinstance(values, dict) and values:
        return st.sampled_from(sorted(values)).flatmap(
            lambda name: HOSTILE_TEXT.map(lambda hostile: {**values, name: hostile})
        )
    return st.just(values)


@schema.hook("before_generate_query")
def _hostile_query(context: Any, strategy: Any) -> Any:
    return st.one_of(strategy, strategy.flatmap(_with_one_hostile_text))


@schema.hook("before_generate_headers")
def _hostile_headers(context: Any, strategy: Any) -> Any:
    return st.one_of(strategy, strategy.flatmap(_with_one_hostile_text))


@pytest.fixture
def backend(aws, clock) -> Iterator[None]:
    """A fresh moto account and container per operation (the conftest `aws` fixture)."""
    from jobsched import wiring
    from jobsched.settings import Settings

    settings_ = Settings(shard_count=4, queue_urls=aws["urls"], dlq_urls=aws["dlq_urls"])
    wiring.override(wiring.Container(settings_, clock))
    Backend.clock = clock
    yield
    Backend.clock = None
    wiring.override(None)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SUPPRESS, derandomize=True)
def test_every_operation(case, backend):
    case.call_and_validate(checks=CHECKS)


def test_stateful_sequences():
    """Create → read / change / pause / trigger / runs..., chained through links inferred from
    the schema, validating every step. Each scenario starts from empty tables, so a failing
    one replays the same way."""

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            self._scenario = fresh_backend()
            next(self._scenario)

        def teardown(self) -> None:
            next(self._scenario, None)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs or None)

    Machine.run(
        settings=settings(
            max_examples=max(5, EXAMPLES),
            stateful_step_count=8,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )


def fresh_backend() -> Iterator[None]:
    """moto with every table and queue, and a container on a clock at T0, until resumed."""
    import boto3
    from jobsched import aws as aws_clients
    from jobsched import wiring
    from jobsched.domain.instants import ManualClock
    from jobsched.settings import Settings
    from jobsched.store.schema import ALL_TABLES
    from moto import mock_aws

    from tests.helpers import T0, create_queues

    with mock_aws():
        aws_clients.client.cache_clear()
        ddb = boto3.client("dynamodb")
        for spec in ALL_TABLES:
            ddb.create_table(**spec.create_table_request())
        queues = create_queues(boto3.client("sqs"))
        clock = ManualClock(T0)
        settings_ = Settings(shard_count=4, queue_urls=queues["urls"], dlq_urls=queues["dlq_urls"])
        wiring.override(wiring.Container(settings_, clock))
        Backend.clock = clock
        try:
            yield
        finally:
            Backend.clock = None
            wiring.override(None)
            aws_clients.client.cache_clear()


def test_every_route_is_fuzzed():
    operations = {(op.method, op.path) for op in (r.ok() for r in schema.get_all_operations())}
    documented = {(m, p) for p, ops in served_document()["paths"].items() for m in ops}
    assert operations == documented
    assert len(operations) >= 18


# --- what fuzzing found once: pinned so it stays fixed ---


def test_every_success_response_is_documented():
    paths = served_document()["paths"]
    missing = [
        f"{method.upper()} {path} {status}"
        for method, path, status, _ in SUCCESS
        if status not in paths[path][method]["responses"]
    ]
    assert missing == []


def test_error_details_are_documented(api):
    import jsonschema

    job_id = api.post("/v1/jobs", {"name": "n", "type": "ext", "cron": "0 * * * *"}).body["jobId"]
    api.post(f"/v1/jobs/{job_id}/pause")
    conflict = api.post(f"/v1/jobs/{job_id}/trigger")
    assert conflict.status == 409 and "state" in conflict.body
    document = served_document()
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/ErrorBody", "components": document["components"]}
    )
    assert list(validator.iter_errors(conflict.body)) == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/leases"),
        ("PATCH", "/v1/jobs/j_0"),
        ("POST", "/v1/runs/j_0@2026-11-02T08:00:00Z/redrive"),
    ],
)
def test_malformed_content_type_is_a_client_error(backend, method, path):
    from werkzeug.test import Client

    response = Client(api_gateway).open(
        path,
        method=method,
        data=b'{"types": ["x"], "workerId": "w"}',
        headers={"Content-Type": "multipart/form-data", "if-match": '"1"'},
    )
    assert 400 <= response.status_code < 500, response.get_data(as_text=True)


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/leases"])
def test_body_that_is_not_utf8_is_a_client_error(backend, path):
    from werkzeug.test import Client

    response = Client(api_gateway).open(
        path, method="POST", data=b"\x93\xa5j~\xd1", headers={"Content-Type": "application/json"}
    )
    assert 400 <= response.status_code < 500, response.get_data(as_text=True)
