"""Routes that take no body refuse one they would otherwise ignore: a member sent to
`POST /v1/jobs/{id}/pause` (and every other bodiless POST and DELETE) is a 400 naming it,
as an unknown member of any other body is; no body, an empty one or `{}` is accepted."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.helpers import ApiClient

pytestmark = pytest.mark.integration

JOB = {"name": "nightly", "type": "report.build", "cron": "0 9 * * *", "payload": {}}

# Each bodiless route: its method, its path and the status it answers when it succeeds.
ROUTES = {
    "cancel-job": ("DELETE", "/v1/jobs/{job}", 200),
    "pause": ("POST", "/v1/jobs/{job}/pause", 200),
    "resume": ("POST", "/v1/jobs/{job}/resume", 200),
    "signing-secret": ("POST", "/v1/jobs/{job}/signing-secret", 200),
    "trigger": ("POST", "/v1/jobs/{job}/trigger", 201),
    "cancel-run": ("POST", "/v1/runs/{run}/cancel", 200),
}


def prepared(api: ApiClient, route: str) -> tuple[str, str, int, str]:
    """A job (and a run) in the state `route` succeeds from: its method, path, success
    status and the job's id."""
    method, path, status = ROUTES[route]
    job = api.post("/v1/jobs", JOB).body["jobId"]
    run = ""
    if route == "resume":
        assert api.post(f"/v1/jobs/{job}/pause").status == 200
    if route == "cancel-run":
        run = quote(api.post(f"/v1/jobs/{job}/trigger").body["runKey"], safe="")
    return method, path.format(job=job, run=run), status, job


def written(api: ApiClient, job: str) -> tuple[object, object]:
    """What the routes change: the job and its runs."""
    return api.get(f"/v1/jobs/{job}").body, api.get(f"/v1/jobs/{job}/runs", query="view=all").body


@pytest.mark.parametrize("route", ROUTES)
def test_a_member_in_the_body_of_a_route_that_takes_none_is_refused_naming_it(api, route):
    method, path, _, job = prepared(api, route)
    before = written(api, job)
    response = api.request(method, path, {"zzz": 1})
    assert response.status == 400, response
    assert response.body == {
        "code": "invalid_request",
        "message": "zzz: is not a known field",
        "errors": [{"field": "zzz", "rule": "is not a known field"}],
    }
    assert written(api, job) == before  # nothing was done


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("body", [None, "", "{}", " { } "], ids=["absent", "empty", "object", "spaced"])
def test_a_route_that_takes_no_body_accepts_none_an_empty_one_or_an_empty_object(api, route, body):
    method, path, status, _ = prepared(api, route)
    response = api.request(method, path, raw_body=body)
    assert response.status == status, response


@pytest.mark.parametrize(
    ("raw", "rule"), [("[]", "valid dictionary"), ('"zzz"', "valid dictionary"), ("zzz", "not valid JSON")]
)
def test_a_body_that_is_no_object_is_refused_naming_the_body(api, raw, rule):
    method, path, _, _ = prepared(api, "pause")
    response = api.request(method, path, raw_body=raw)
    assert response.status == 400, response
    (error,) = response.body["errors"]
    assert error["field"] == "body" and rule in error["rule"], response


def test_every_route_but_a_get_declares_its_body():
    """A POST, PATCH or DELETE route without a body parameter would never read a body sent
    to it: each declares one (`NoBody` when it takes none), so none can be ignored."""
    from jobsched.handlers.api import app

    undeclared = [
        f"{route.method} {route.path}"
        for route in app._static_routes + app._dynamic_routes
        if route.method != "GET" and not route.dependant.body_params
    ]
    assert undeclared == []


def test_the_document_shows_the_body_of_a_route_that_takes_none_as_an_optional_empty_object(api):
    document = api.get("/openapi.json").body
    for route, (method, path, _) in ROUTES.items():
        documented = path.replace("{job}", "{job_id}").replace("{run}", "{run_key}")
        body = document["paths"][documented][method.lower()]["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        assert not body.get("required"), route
        assert {"$ref": "#/components/schemas/EmptyBody"} in schema["anyOf"], route
    empty = document["components"]["schemas"]["EmptyBody"]
    assert (empty.get("properties", {}), empty["additionalProperties"]) == ({}, False)
