"""The handler layer itself: modules that import on their own, helpers defined once, the
OpenAPI document against the routes the resolver really serves, and responses validated
against their schema (a broken one is our 500, never the client's 400)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
HANDLERS = FUNCTIONS / "jobsched" / "handlers"


def handler_modules() -> list[str]:
    modules = []
    for path in sorted(HANDLERS.rglob("*.py")):
        parts = path.relative_to(FUNCTIONS).with_suffix("").parts
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


@pytest.mark.parametrize("module", handler_modules())
def test_each_handler_module_imports_first_in_a_fresh_interpreter(module):
    """An import cycle shows only when the module on one side of it is imported first."""
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(FUNCTIONS), "PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "eu-west-1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_no_helper_is_defined_twice_in_the_api_package():
    names: Counter[str] = Counter()
    for path in (HANDLERS / "api").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names.update(
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("__")
        )
    assert [name for name, count in names.items() if count > 1] == []


def test_the_lambda_entry_point_the_stack_names_is_the_api_handler():
    import importlib

    from jobsched.cdk.names import API, FUNCTIONS_BY_NAME
    from jobsched.handlers.api.app import handler

    module, _, name = FUNCTIONS_BY_NAME[API].handler.rpartition(".")
    assert getattr(importlib.import_module(module), name) is handler


# --- the OpenAPI document against the routes served ---


def served_routes() -> set[tuple[str, str]]:
    from jobsched.handlers.api import app

    return {
        (route.method.lower(), route.openapi_path)
        for route in app._static_routes + app._dynamic_routes
        if route.include_in_schema
    }


def test_the_document_lists_every_route_the_resolver_serves(api):
    from jobsched.handlers.api import app

    document = api.get("/openapi.json").body
    documented = {(method, path) for path, ops in document["paths"].items() for method in ops}
    assert documented == served_routes()
    assert len(documented) == 29
    hidden = {r.openapi_path for r in app._static_routes + app._dynamic_routes if not r.include_in_schema}
    assert hidden == {"/openapi.json", "/docs"}


# Routes that take a body but change nothing: no state of theirs can refuse them (no 409).
CHANGING_NOTHING = {"/v1/schedules/preview"}


def test_every_route_documents_its_error_bodies(api):
    document = api.get("/openapi.json").body
    error_body = "#/components/schemas/ErrorBody"
    missing = []
    for path, ops in document["paths"].items():
        for method, operation in ops.items():
            wanted = {400, 401, 404, 415, 429, 500, 503}
            if method != "get" and path not in CHANGING_NOTHING:
                wanted.add(409)
            if any(p["name"] == "if-match" for p in operation.get("parameters", [])):
                wanted |= {412, 428}
            for status in sorted(wanted):
                answer = operation["responses"].get(str(status), {})
                schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
                if schema.get("$ref") != error_body:
                    missing.append(f"{method.upper()} {path} {status}")
    assert missing == []


def test_openapi_json_is_the_document_docs_shows(api):
    document = api.get("/openapi.json").body
    shown = api.get("/docs", query="format=json").body
    assert document == shown
    page = api.get("/docs")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")


# --- response validation ---


def test_a_response_that_breaks_its_schema_is_a_500_not_a_400(api, monkeypatch):
    from jobsched.api_models import views

    job_id = api.post("/v1/jobs", {"name": "n", "type": "ext", "every": 60}).body["jobId"]

    def broken(cls, job, upcoming, *, with_fire_times=False):
        return cls.model_construct(job_id=job.job_id)  # every other required field missing

    monkeypatch.setattr(views.JobView, "of", classmethod(broken))
    response = api.get(f"/v1/jobs/{job_id}")
    assert response.status == 500, response
    assert response.body == {"code": "internal_error", "message": "an unexpected error; it has been logged"}


def test_a_response_of_the_wrong_type_is_a_500_not_a_400(api, monkeypatch):
    from jobsched.handlers.api import common, runs

    job_id = api.post("/v1/jobs", {"name": "n", "type": "ext", "every": 60}).body["jobId"]

    def wrong_body(status, body, headers=None):
        return common.json_response(status, {"created": "not a list", "existing": [{"no": "string"}]})

    monkeypatch.setattr(runs, "json_response", wrong_body)
    response = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-02T07:00:00Z", "end": "2026-11-02T07:02:00Z"}
    )
    assert response.status == 500, response
    assert response.body["code"] == "internal_error"


# --- validation errors carry the field structurally ---


def test_no_field_is_read_out_of_an_error_message():
    source = "\n".join(p.read_text(encoding="utf-8") for p in (HANDLERS / "api").glob("*.py"))
    assert "_FIELD_IN_MESSAGE" not in source and "Value error, " not in source


BIG_HTTP_TARGET = {
    "kind": "http",
    "url": "https://example.com/hook",
    "headers": {f"x-h{i}": "v" * 4000 for i in range(12)},
}


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"every": 60, "retry": {"baseSeconds": 10, "capSeconds": 5}}, "retry.capSeconds", "at least"),
        ({"every": 60, "startAt": "2026-11-05T00:00:00Z", "endAt": "2026-11-04T00:00:00Z"}, "endAt", "after"),
        ({"cron": "0 25 * * *"}, "cron", "not a valid cron expression"),
        ({"cron": "0 * * * *", "timeZone": "Mars/Base"}, "timeZone", "IANA"),
        ({"every": 60, "payload": "x" * 60_000, "target": BIG_HTTP_TARGET}, "body", "bytes as stored"),
    ],
)
def test_rules_checked_across_fields_name_the_field(api, body, field, rule):
    response = api.post("/v1/jobs", {"name": "n", "type": "ext", **body})
    assert response.status == 400, response
    (error,) = response.body["errors"]
    assert error["field"] == field and rule in error["rule"], response
    assert response.body["message"] == f"{field}: {error['rule']}"


def test_a_field_rule_names_its_field_even_when_the_rule_text_has_a_colon():
    """A rule reading `x: y` is no longer mistaken for a field named x."""
    from jobsched.api_models.problems import validation_failed
    from jobsched.domain.models import rule_on
    from pydantic import BaseModel, ValidationError, model_validator

    class Shape(BaseModel):
        a: int = 0

        @model_validator(mode="after")
        def _check(self) -> Shape:
            raise rule_on("a", "cron: looks like a field")

    with pytest.raises(ValidationError) as raised:
        Shape()
    failure = validation_failed(raised.value)
    assert (failure.field, failure.problems[0].rule) == ("a", "cron: looks like a field")


def test_error_bodies_are_json_with_the_documented_shape(api):
    response = api.request("POST", "/v1/jobs", raw_body="{bad")
    assert response.status == 400
    assert response.body["errors"][0]["field"] == "body"
    assert json.loads(json.dumps(response.body))["code"] == "invalid_request"


# --- methods a path does not take ---


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/v1/jobs", "GET, POST"),  # no CORS: not a preflight
        ("HEAD", "/v1/runs", "GET"),
        ("TRACE", "/v1/jobs/j_1/runs", "GET"),
        ("PROPFIND", "/openapi.json", "GET"),
        ("PUT", "/v1/jobs/j_1", "DELETE, GET, PATCH"),
        ("GET", "/v1/leases", "POST"),
    ],
)
def test_a_method_the_path_does_not_take_is_a_405_naming_those_it_takes(api, method, path, allow):
    response = api.request(method, path)
    assert response.status == 405, response
    assert response.headers["Allow"] == allow
    assert response.body == {
        "code": "method_not_allowed",
        "message": f"{path} does not take {method}; it takes {allow}",
    }
    assert "Access-Control-Allow-Origin" not in response.headers


@pytest.mark.parametrize("method", ["GET", "OPTIONS", "TRACE"])
def test_a_path_no_route_has_is_a_404_whatever_the_method(api, method):
    response = api.request(method, "/v1/nowhere")
    assert response.status == 404, response
    assert response.body == {"code": "not_found", "message": "no route for /v1/nowhere"}
    assert "Allow" not in response.headers
