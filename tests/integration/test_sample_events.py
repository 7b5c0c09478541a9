"""The sample API Gateway events in events/ drive the real `api` handler successfully.

The events carry an IAM caller (no authorizer), as API Gateway IAM auth delivers them.
Events about one job name it `j_sample0000000000`; each test first creates a job with
events/api-create-job.json and puts that job's id in its place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

EVENTS = Path(__file__).resolve().parents[2] / "events"
PLACEHOLDER = "j_sample0000000000"
API_EVENTS = sorted(p.name for p in EVENTS.glob("api-*.json"))


def invoke(event: dict[str, Any]) -> dict[str, Any]:
    from jobsched.handlers import api
    from jobsched_local.lambda_context import InvocationContext

    return api.handler(event, InvocationContext(function_name="jobsched-api"))


def load(name: str) -> str:
    return (EVENTS / name).read_text(encoding="utf-8")


def test_every_api_handler_event_is_present():
    assert {
        "api-create-job.json",
        "api-list-jobs.json",
        "api-get-job.json",
        "api-patch-job.json",
        "api-pause-job.json",
    } <= set(API_EVENTS)


@pytest.mark.parametrize("name", API_EVENTS)
def test_sample_event_is_answered_with_2xx(container, name):
    text = load(name)
    event = json.loads(text)
    assert event["requestContext"]["identity"]["userArn"], "sample events use an IAM caller"
    assert not event["requestContext"].get("authorizer")
    if PLACEHOLDER in text:
        created = invoke(json.loads(load("api-create-job.json")))
        assert created["statusCode"] == 201, created
        event = json.loads(text.replace(PLACEHOLDER, json.loads(created["body"])["jobId"]))
    result = invoke(event)
    assert 200 <= result["statusCode"] < 300, result


def test_sample_events_act_as_one_iam_tenant(container):
    created = invoke(json.loads(load("api-create-job.json")))
    assert created["statusCode"] == 201, created
    job_id = json.loads(created["body"])["jobId"]
    listed = invoke(json.loads(load("api-list-jobs.json")))
    assert [job["jobId"] for job in json.loads(listed["body"])["items"]] == [job_id]
    stored = container.definitions.get(job_id)
    assert stored is not None and stored.tenant == "123456789012/role/tenant-acme"
