"""The API's permission groups, judged the way IAM would: each example managed policy is
evaluated against concrete requests (real job ids and run keys in the method ARN, with IAM's
wildcard rules), so a pattern that is too wide is caught even if its text looks right."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("aws_cdk")

from jobsched.cdk.names import API_ROLES, API_STAGE, OPERATOR, READER, REDRIVER, REST_API_LOGICAL_ID, ROUTES

from tests.infrastructure.synth import render, synthesize

ARN_PREFIX = (
    f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{REST_API_LOGICAL_ID}>/{API_STAGE}"
)
VALUES = {"{id}": "j_7hq2abcd", "{runKey}": "j_7hq2abcd@2026-11-02T09:00:00Z"}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="module")
def grants(synth) -> dict[str, list[str]]:
    """Role → the execute-api resources its managed policy allows (Allow statements only)."""
    found: dict[str, list[str]] = {}
    for role in API_ROLES:
        props = synth.props(synth.logical_id(synth.stack.api.policies[role]))
        resources: list[str] = []
        for statement in props["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert actions == ["execute-api:Invoke"]
            listed = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            resources += [render(r) for r in listed]
        found[role] = resources
    return found


def request_arn(method: str, path: str) -> str:
    for template, value in VALUES.items():
        path = path.replace(template, value)
    return f"{ARN_PREFIX}/{method}{path}"


def iam_matches(pattern: str, value: str) -> bool:
    """IAM resource matching: `*` is any run of characters (slashes included), `?` one character."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value) is not None


def allows(grants: dict[str, list[str]], role: str, method: str, path: str) -> bool:
    arn = request_arn(method, path)
    return any(iam_matches(pattern, arn) for pattern in grants[role])


def test_reader_cannot_cancel_or_change_anything(grants):
    assert not allows(grants, READER, "DELETE", "/v1/jobs/{id}")  # cancel a job
    assert not allows(grants, READER, "POST", "/v1/runs/{runKey}/cancel")  # cancel a run
    assert not allows(grants, READER, "POST", "/v1/jobs/{id}/pause")
    assert not allows(grants, READER, "PATCH", "/v1/jobs/{id}")
    assert allows(grants, READER, "GET", "/v1/jobs/{id}")  # control: it can read
    assert allows(grants, READER, "GET", "/v1/runs/{runKey}")


def test_operator_cannot_redrive(grants):
    assert not allows(grants, OPERATOR, "POST", "/v1/runs/{runKey}/redrive")
    assert allows(grants, OPERATOR, "POST", "/v1/runs/{runKey}/cancel")  # control: it can operate
    assert allows(grants, OPERATOR, "DELETE", "/v1/jobs/{id}")
    assert allows(grants, REDRIVER, "POST", "/v1/runs/{runKey}/redrive")


@pytest.mark.parametrize("role", API_ROLES)
def test_each_group_reaches_exactly_its_own_routes(grants, role):
    """Every route against every group: allowed if and only if the route belongs to it."""
    wrong = [
        f"{route.method} {route.path}"
        for route in ROUTES
        if allows(grants, role, route.method, route.path) != (route.role == role)
    ]
    assert wrong == []


@pytest.mark.parametrize("role", API_ROLES)
def test_no_group_reaches_routes_that_do_not_exist(grants, role):
    """Wildcards stop at the declared routes: no method or path outside the table is granted."""
    strays = [
        ("POST", "/v1/jobs/{id}/runs"),
        ("DELETE", "/v1/runs/{runKey}"),
        ("PUT", "/v1/jobs/{id}"),
        ("POST", "/v1/admin"),
        ("PATCH", "/v1/runs/{runKey}"),
    ]
    assert [s for s in strays if allows(grants, role, *s)] == []
