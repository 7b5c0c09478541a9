"""Request bodies as the API reads them: the media type compared case-insensitively (RFC
9110), JSON and RFC 7396's merge patch accepted where they apply and every other type a
clear 415, and a member name given twice in one object refused, naming it, at any depth."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

JOB = {"name": "n", "type": "ext", "every": 60}


def create(api):
    response = api.post("/v1/jobs", JOB)
    assert response.status == 201, response
    return response.body


@pytest.mark.parametrize(
    "content_type",
    [
        "APPLICATION/JSON",
        "Application/Json",
        "application/JSON; charset=UTF-8",
        'application/json;charset="utf-8"',
        "application/json ;",
    ],
)
def test_json_in_any_case_is_json(api, content_type):
    response = api.post("/v1/jobs", JOB, headers={"content-type": content_type})
    assert response.status == 201, response


@pytest.mark.parametrize("content_type", ["APPLICATION/MERGE-PATCH+JSON", "application/json"])
def test_a_patch_is_a_merge_patch_or_json_in_any_case(api, content_type):
    job = create(api)
    headers = {"If-Match": "1", "content-type": content_type}
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"name": "renamed"}, headers=headers)
    assert response.status == 200 and response.body["name"] == "renamed", response


ROUTES_WITH_BODIES = [
    ("POST", "/v1/jobs", JOB),
    ("POST", "/v1/leases", {"types": ["ext"], "workerId": "w"}),
    ("POST", "/v1/runs/j_0@2026-11-02T08:00:00Z/redrive", {"reason": "r"}),
    ("PATCH", "/v1/jobs/j_0", {"name": "x"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES_WITH_BODIES)
@pytest.mark.parametrize(
    ("content_type", "rule"),
    [
        ("application/vnd.api+json", "not application/vnd.api+json"),
        ("APPLICATION/VND.API+JSON", "not application/vnd.api+json"),
        ("application/problem+json", "not application/problem+json"),
        ("text/plain", "not text/plain"),
        ("application/json; charset=latin-1", "charset latin-1 is not supported"),
        ("application/json, text/plain", "is not a media type"),
        ("json", "is not a media type"),
        ("application/json" + "; a=b" * 60, "at most 256 characters"),
    ],
)
def test_any_other_media_type_is_a_415_naming_the_header(api, method, path, body, content_type, rule):
    response = api.request(method, path, body, headers={"content-type": content_type, "If-Match": "1"})
    assert response.status == 415, response
    assert response.body["code"] == "unsupported_media_type"
    [error] = response.body["errors"]
    assert error["field"] == "content-type" and rule in error["rule"], error


def test_merge_patch_is_for_patch_only(api):
    response = api.post("/v1/jobs", JOB, headers={"content-type": "application/merge-patch+json"})
    assert response.status == 415 and "must be application/json" in response.body["message"], response


def test_a_content_type_without_a_body_describes_nothing(api):
    job = create(api)
    for content_type in ("APPLICATION/JSON", "text/plain"):
        response = api.post(f"/v1/jobs/{job['jobId']}/pause", headers={"content-type": content_type})
        assert response.status in (200, 409), response
    missing = api.request("POST", "/v1/jobs", headers={"content-type": "APPLICATION/JSON"})
    assert missing.status == 400 and missing.body["errors"][0]["field"] == "body", missing


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"name": "a", "name": "b", "type": "ext", "every": 60}', "name"),
        ('{"name": "a", "type": "ext", "every": 60, "payload": {"x": 1, "y": 2, "x": 3}}', "payload.x"),
        (
            '{"name": "a", "type": "ext", "every": 60, "payload": {"list": [{"deep": {"k": 1, "k": 1}}]}}',
            "payload.list.0.deep.k",
        ),
        ('{"name": "a", "type": "ext", "every": 60, "retry": {"baseSeconds": 1, "baseSeconds": 1}}', None),
    ],
)
def test_a_member_name_given_twice_is_a_400_naming_it(api, raw, field):
    response = api.post("/v1/jobs", raw_body=raw)
    assert response.status == 400, response
    [error] = response.body["errors"]
    assert "more than once" in error["rule"], error
    expected = field or "retry.baseSeconds"
    assert error["field"] == expected, error
    assert api.get("/v1/jobs").body["items"] == []


def test_a_name_twice_in_a_patch_is_refused_too(api):
    job = create(api)
    response = api.patch(
        f"/v1/jobs/{job['jobId']}",
        raw_body=json.dumps({"name": "a"})[:-1] + ', "name": "b"}',
        headers={"If-Match": "1"},
    )
    assert response.status == 400 and response.body["errors"][0]["field"] == "name", response
