"""Hostile inputs at every route that reads a body, a header or a query parameter: each is a
4xx (never a 5xx) whose body names the field it was sent in.

The shapes are the ones that once reached a 500: arrays nested thousands deep, numbers past
Python's 4,300-digit limit or past a float's range, NaN and Infinity, lone UTF-16 surrogates
(no Unicode text; an error message echoing one cannot be encoded), strings of hundreds of
thousands of characters, instants at the edges of the calendar, and forged cursors. Each
route gets every shape in each of its fields; `HOSTILE_INPUTS` counts them (the docs
state the number)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.integration

NOW = "2026-11-02T08:00:00Z"  # tests.helpers.T0
HUGE = "1" * 4301  # one digit past Python's int-from-string limit

# Raw JSON fragments: each is what the field's value is replaced with, byte for byte.
ANY_FIELD = {
    "5,000 nested arrays": "[" * 5000 + "]" * 5000,
    "33 nested objects": '{"a":' * 33 + "1" + "}" * 33,
    "4,301-digit integer": HUGE,
    "negative 4,301-digit integer": "-" + HUGE,
    "4,301-digit fraction": "0." + HUGE,
    "1e400 (past a float)": "1e400",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "lone high surrogate": '"\\ud800"',
    "lone low surrogate inside text": '"ab\\udfffcd"',
    "surrogate in a member name": '{"\\ud800": 1}',
}
LONG_TEXT = {"420,000 characters": json.dumps("x" * 420_000)}
CALENDAR_EDGES = {
    "9999-12-31T23:30:00-01:00": '"9999-12-31T23:30:00-01:00"',
    "0001-01-01T00:30:00+01:00": '"0001-01-01T00:30:00+01:00"',
    "0001-01-01T00:00:00Z": '"0001-01-01T00:00:00Z"',
    "9999-12-31T23:59:59Z": '"9999-12-31T23:59:59Z"',
    "epoch seconds": "1793606400",
}

ANY, TEXT, INSTANT = "any", "text", "instant"


def shapes(kind: str) -> dict[str, str]:
    if kind == INSTANT:
        return {**ANY_FIELD, **LONG_TEXT, **CALENDAR_EDGES}
    if kind == TEXT:
        return {**ANY_FIELD, **LONG_TEXT}
    return dict(ANY_FIELD)


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # with {job} and {run} filled by the fixture
    template: dict[str, Any]  # a body the route would accept
    fields: dict[str, str]  # dotted path in the body -> kind
    headers: dict[str, str] | None = None


JOB = {"name": "n", "type": "ext", "cron": "0 * * * *"}
HTTP = {"kind": "http", "url": "https://example.com/hook", "headers": {"x-a": "v"}, "timeoutSeconds": 5}
JOB_FIELDS = {
    "name": TEXT,
    "type": TEXT,
    "cron": TEXT,
    "timeZone": TEXT,
    "maxRuns": ANY,
    "idempotencyKey": TEXT,
    "priority": TEXT,
    "missedRuns": TEXT,
    "catchUpWindow": TEXT,
    "overlap": TEXT,
    "dst.gap": TEXT,
    "maxAttempts": ANY,
    "retry.baseSeconds": ANY,
    "retry.capSeconds": ANY,
    "retry.maxAgeSeconds": ANY,
    "delivery": TEXT,
    "jitterSeconds": ANY,
    "timeoutSeconds": ANY,
    "pauseOnFailure": ANY,
    "payload": TEXT,
    "startAt": INSTANT,
    "endAt": INSTANT,
}
TARGETS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {**HTTP},
        {"target.url": TEXT, "target.method": TEXT, "target.headers.x-a": TEXT, "target.timeoutSeconds": ANY},
    ),
    (
        {
            "kind": "lambda",
            "functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:f",
            "qualifier": "live",
        },
        {"target.functionArn": TEXT, "target.qualifier": TEXT},
    ),
    (
        {
            "kind": "sqs",
            "queueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/q",
            "messageGroupId": "g",
        },
        {"target.queueUrl": TEXT, "target.messageGroupId": TEXT},
    ),
    (
        {"kind": "eventbridge", "eventBusName": "default", "source": "s", "detailType": "d"},
        {"target.eventBusName": TEXT, "target.source": TEXT, "target.detailType": TEXT},
    ),
    (
        {"kind": "stepfunctions", "stateMachineArn": "arn:aws:states:eu-west-1:123456789012:stateMachine:m"},
        {"target.stateMachineArn": TEXT},
    ),
]
IF_MATCH = {"if-match": '"1"'}

ROUTES = {
    "create": Route("POST", "/v1/jobs", {**JOB, "target": HTTP}, JOB_FIELDS),
    "create once": Route("POST", "/v1/jobs", {"name": "n", "type": "ext", "runAt": NOW}, {"runAt": INSTANT}),
    "create rate": Route("POST", "/v1/jobs", {"name": "n", "type": "ext", "every": 60}, {"every": TEXT}),
    "create union": Route(
        "POST",
        "/v1/jobs",
        {
            "name": "n",
            "type": "ext",
            "specs": [{"cron": "0 9 * * *"}, {"monthly": "last-day", "at": "17:00"}],
            "exclude": [{"startDate": "2026-12-20", "endDate": "2026-12-21"}],
        },
        {"specs": ANY, "exclude": ANY},
    ),
    "preview": Route(
        "POST",
        "/v1/schedules/preview",
        {"cron": "0 * * * *", "timeZone": "UTC", "count": 3, "after": NOW, "dst": {"fold": "both"}},
        {"cron": TEXT, "timeZone": TEXT, "count": ANY, "after": INSTANT, "dst.fold": TEXT},
    ),
    **{
        f"create {target['kind']} target": Route("POST", "/v1/jobs", {**JOB, "target": target}, fields)
        for target, fields in TARGETS
    },
    # Each job of a batch is checked as a single create's body is (per job, in the answer);
    # what is refused whole is the batch itself: its `jobs`, or a body the decoder refuses.
    "create batch": Route("POST", "/v1/jobs/batch", {"jobs": [JOB, {**JOB, "target": HTTP}]}, {"jobs": ANY}),
    "patch": Route(
        "PATCH",
        "/v1/jobs/{job}",
        {"name": "m", "cron": "0 * * * *", "payload": {"k": 1}, "target": HTTP},
        {
            "name": TEXT,
            "cron": TEXT,
            "timeZone": TEXT,
            "payload": TEXT,
            "target.headers.x-a": TEXT,
            "every": TEXT,
        },
        IF_MATCH,
    ),
    "backfill": Route(
        "POST",
        "/v1/jobs/{job}/backfill",
        {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T01:00:00Z"},
        {"start": INSTANT, "end": INSTANT},
    ),
    "redrive": Route("POST", "/v1/runs/{run}/redrive", {"reason": "r"}, {"reason": TEXT}),
    "put calendar": Route(
        "PUT",
        "/v1/calendars/{calendar}",
        {
            "entries": [
                {"date": "2026-12-25"},
                {"startDate": "2026-12-28", "endDate": "2026-12-31"},
                {"start": "2027-01-04T00:00:00Z", "end": "2027-01-04T12:00:00Z"},
            ]
        },
        {"entries": ANY},
    ),
    "create with calendars": Route(
        "POST",
        "/v1/jobs",
        {
            "name": "n",
            "type": "ext",
            "specs": [{"monthly": "nearest-business-day 15", "at": "09:00", "holidays": "{calendar}"}],
            "exclude": [{"calendar": "{calendar}"}],
        },
        {"specs": ANY, "exclude": ANY},
    ),
    # Routes that take no body read one all the same (`{}` is accepted), so a body sent is
    # refused whole, never ignored.
    **{
        name: Route(method, path, {}, {})
        for name, (method, path) in {
            "cancel job": ("DELETE", "/v1/jobs/{job}"),
            "pause": ("POST", "/v1/jobs/{job}/pause"),
            "resume": ("POST", "/v1/jobs/{job}/resume"),
            "archive": ("POST", "/v1/jobs/{job}/archive"),
            "rotate signing secret": ("POST", "/v1/jobs/{job}/signing-secret"),
            "trigger": ("POST", "/v1/jobs/{job}/trigger"),
            "cancel run": ("POST", "/v1/runs/{run}/cancel"),
            "delete calendar": ("DELETE", "/v1/calendars/{calendar}"),
        }.items()
    },
    **{
        f"bulk {action}": Route(
            "POST",
            f"/v1/dead-letters/{action}",
            {
                "reason": "r",
                "dryRun": True,
                "errorClass": "E",
                "since": "2026-11-01T00:00:00Z",
                "until": "2026-11-01T01:00:00Z",
                "limit": 10,
            },
            {
                "reason": TEXT,
                "dryRun": ANY,
                "errorClass": TEXT,
                "since": INSTANT,
                "until": INSTANT,
                "limit": ANY,
            },
        )
        for action in ("redrive", "cancel")
    },
    "claim": Route(
        "POST",
        "/v1/leases",
        {"types": ["ext"], "workerId": "w", "max": 1, "leaseSeconds": 60},
        {"types": TEXT, "workerId": TEXT, "max": ANY, "leaseSeconds": ANY},
    ),
    "heartbeat": Route(
        "POST",
        "/v1/leases/{run}/heartbeat",
        {"fence": 1, "leaseSeconds": 60},
        {"fence": ANY, "leaseSeconds": ANY},
    ),
    "complete": Route(
        "POST",
        "/v1/leases/{run}/complete",
        {
            "fence": 1,
            "outcome": "failed",
            "result": None,
            "error": {"class": "E", "message": "m", "retryable": True},
        },
        {
            "fence": ANY,
            "outcome": TEXT,
            "result": ANY,  # a long result is kept as a preview, not refused
            "error.class": TEXT,
            "error.message": TEXT,
            "error.retryable": ANY,
        },
    ),
}

# Headers and query parameters: (route, where, name, value).
LONG = "x" * 420_000


def _cursor(scope: str, key: dict[str, Any]) -> str:
    raw = json.dumps({"s": scope, "k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parameter_cases(job: str) -> list[tuple[str, str, str, str, str, str]]:
    """(method, path, where, name, value, field expected in the error)."""
    tenant_key = {"job_id": 5, "tenant": "tenant-a", "created_at": NOW}
    cases: list[tuple[str, str, str, str, str, str]] = []
    for method, path in [
        ("PATCH", f"/v1/jobs/{job}"),
        ("DELETE", f"/v1/jobs/{job}"),
        ("POST", f"/v1/jobs/{job}/pause"),
        ("POST", f"/v1/jobs/{job}/resume"),
        ("POST", f"/v1/jobs/{job}/archive"),
    ]:
        for value in (HUGE, f'"{HUGE}"', f'W/"{HUGE}"', LONG, "\u00b2", "-1", "1e3", '"1', "NaN"):
            cases.append((method, path, "header", "if-match", value, "if-match"))
    cases.append(("POST", "/v1/jobs", "header", "idempotency-key", LONG, "idempotency-key"))
    cases.append(("POST", "/v1/jobs/batch", "header", "idempotency-key", LONG, "idempotency-key"))
    for path in ("/v1/jobs", f"/v1/jobs/{job}/runs", "/v1/dead-letters", "/v1/runs"):
        for value in (HUGE, "-" + HUGE, "NaN", "Infinity", "1e400", "1.5", "true", LONG):
            cases.append(("GET", path, "query", "limit", value, "limit"))
        for value in (LONG, "%00", "\u00e9", "e30="):
            cases.append(("GET", path, "query", "cursor", value, "cursor"))
    cases.append(("GET", "/v1/jobs", "query", "state", LONG, "state"))
    for value in (LONG, "yes", "1", "True", ""):
        cases.append(("GET", "/v1/jobs", "query", "archived", value, "archived"))
    for name, value in (("state", LONG), ("state", "DEAD,,"), ("since", LONG), ("until", "NaN")):
        cases.append(("GET", "/v1/runs", "query", name, value, name))
    for name, value in (("jobId", LONG), ("type", LONG), ("errorClass", LONG), ("timeField", "\u00e9")):
        cases.append(("GET", "/v1/runs", "query", name, value, name))
    forged = [
        _cursor("tenant-a", tenant_key),
        _cursor("tenant-a", {**tenant_key, "job_id": job, "created_at": 5}),
        _cursor("tenant-a", {**tenant_key, "job_id": job, "tenant": "tenant-b"}),
        _cursor("tenant-a", {**tenant_key, "job_id": {"S": job}}),
        _cursor("tenant-a", {**tenant_key, "job_id": int(HUGE[:300])}),
    ]
    cases += [("GET", "/v1/jobs", "query", "cursor", c, "cursor") for c in forged]
    cases += [
        ("GET", f"/v1/jobs/{job}/runs", "query", "cursor", _cursor(job, {"job_id": job, "sk": 7}), "cursor"),
        (
            "GET",
            f"/v1/jobs/{job}/runs",
            "query",
            "cursor",
            _cursor(job, {"job_id": "j_other", "sk": "R#"}),
            "cursor",
        ),
        (
            "GET",
            "/v1/dead-letters",
            "query",
            "cursor",
            _cursor("tenant-a", {"job_id": job, "sk": "R#", "dead_tenant": "tenant-a", "dead_at": 1.5}),
            "cursor",
        ),
    ]
    return cases


def body_cases() -> list[tuple[str, str, str]]:
    """(route name, field, shape name) for every field of every route with a body."""
    return [
        (name, field, shape)
        for name, route in ROUTES.items()
        for field, kind in route.fields.items()
        for shape in shapes(kind)
        if not (field == "result" and shape in LONG_TEXT)
    ]


BODY_CASES = body_cases()
WHOLE_BODY_CASES = [
    (name, shape) for name in ROUTES for shape in ("5,000 nested arrays", "NaN", "4,301-digit integer")
]
PARAMETER_CASE_COUNT = len(parameter_cases("j_x")) + 2  # + the two run keys at the calendar's edges
HOSTILE_INPUTS = len(BODY_CASES) + len(WHOLE_BODY_CASES) + PARAMETER_CASE_COUNT


def poisoned(template: dict[str, Any], field: str, fragment: str) -> str:
    """The template as JSON text with `field`'s value replaced by the raw fragment."""
    marker = "\u0000hostile\u0000"
    body = json.loads(json.dumps(template))
    *parents, leaf = field.split(".")
    node = body
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = marker
    return json.dumps(body).replace(json.dumps(marker), fragment)


@pytest.fixture
def resources(api) -> dict[str, str]:
    job = api.post("/v1/jobs", {"name": "e", "type": "ext", "cron": "0 * * * *"})  # stays ACTIVE
    assert job.status == 201, job
    calendar = api.put("/v1/calendars/hols", {"entries": [{"date": "2026-12-25"}]})
    assert calendar.status == 201, calendar
    return {"job": job.body["jobId"], "run": quote(f"{job.body['jobId']}@{NOW}", safe=""), "calendar": "hols"}


def refused(response: Any, field: str) -> str | None:
    """None when the answer is a 4xx in the API's error shape naming `field`; else what is wrong."""
    if not 400 <= response.status < 500:
        return f"status {response.status}: {response}"
    body = response.body
    if not isinstance(body, dict) or not {"code", "message"} <= set(body):
        return f"not the error shape: {response}"
    named = [e["field"] for e in body.get("errors") or []]
    top = field.split(".")[0]
    if not any(n.lower() == field.lower() or n.split(".")[0] == top for n in named):
        return f"names {named}, not {field}: {response}"
    return None


def send(api: Any, route: Route, resources: dict[str, str], raw: str) -> Any:
    path = route.path.format(**resources)
    raw = raw.replace("{calendar}", resources["calendar"])
    return api.request(route.method, path, raw_body=raw, headers=route.headers)


@pytest.mark.parametrize("name", list(ROUTES))
def test_templates_are_accepted_as_they_are(api, resources, name):
    """The hostile cases poison one field of a body the route takes, so they test that field."""
    route = ROUTES[name]
    response = send(api, route, resources, json.dumps(route.template))
    assert response.status < 500 and response.status != 400, response


@pytest.mark.parametrize("name", list(ROUTES))
def test_every_hostile_value_in_every_field_is_a_4xx_naming_it(api, resources, name):
    route = ROUTES[name]
    failures = []
    for route_name, field, shape in BODY_CASES:
        if route_name != name:
            continue
        fragment = shapes(route.fields[field])[shape]
        problem = refused(send(api, route, resources, poisoned(route.template, field, fragment)), field)
        if problem:
            failures.append(f"{field} = {shape}: {problem[:300]}")
    assert failures == []


@pytest.mark.parametrize("name", list(ROUTES))
def test_a_hostile_body_as_a_whole_is_a_4xx_naming_the_body(api, resources, name):
    route = ROUTES[name]
    failures = []
    for route_name, shape in WHOLE_BODY_CASES:
        if route_name == name:
            problem = refused(send(api, route, resources, ANY_FIELD[shape]), "body")
            if problem:
                failures.append(f"{shape}: {problem[:300]}")
    assert failures == []


def test_every_hostile_header_and_query_parameter_is_a_4xx_naming_it(api, resources):
    failures = []
    for method, path, where, name, value, field in parameter_cases(resources["job"]):
        if where == "header":
            response = api.request(
                method, path, json_body={} if method == "PATCH" else None, headers={name: value}
            )
        else:
            response = api.request(method, path, query=f"{name}={quote(value, safe='')}")
        problem = refused(response, field)
        if problem:
            failures.append(f"{method} {path} {name}={value[:40]!r}: {problem[:300]}")
    assert failures == []


@pytest.mark.parametrize("instant", ["9999-12-31T23:30:00-01:00", "0001-01-01T00:30:00+01:00"])
def test_a_run_key_at_the_calendars_edge_is_not_found(api, resources, instant):
    response = api.get(f"/v1/runs/{quote(resources['job'] + '@' + instant, safe='')}")
    assert response.status == 404, response


def test_every_route_with_a_body_header_or_query_is_covered(api):
    """A new route that reads a body, header or query parameter must be added above."""
    paths = api.get("/openapi.json").body["paths"]
    taking = set()
    for path, operations in paths.items():
        for method, operation in operations.items():
            params = [p for p in operation.get("parameters", []) if p["in"] in ("header", "query")]
            if "requestBody" in operation or params:
                taking.add(f"{method.upper()} {path}")
    names = {"{job}": "{job_id}", "{run}": "{run_key}", "{calendar}": "{name}"}
    templates = set()
    for r in ROUTES.values():
        path = r.path
        for filled, documented in names.items():
            path = path.replace(filled, documented)
        templates.add(f"{r.method} {path}")
    covered = templates | {
        "GET /v1/jobs",
        "GET /v1/jobs/{job_id}/runs",
        "GET /v1/dead-letters",
        "GET /v1/runs",
    }
    assert taking <= covered, sorted(taking - covered)


def test_the_docs_state_how_many_hostile_inputs_the_suite_tries():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "design" / "reliability.md").read_text()
    assert f"{HOSTILE_INPUTS:,} hostile inputs" in page, HOSTILE_INPUTS
