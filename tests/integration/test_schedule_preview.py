"""`POST /v1/schedules/preview` through the real `api` handler: a schedule not saved, its next
fire times with why each excluded or DST-placed one is so, the rules a job's schedule obeys
(each broken as the 400 a create answers), and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from jobsched.store.schema import DEFINITIONS

from tests.integration.test_union_schedules import refused

PREVIEW = "/v1/schedules/preview"


def lines(response) -> list[tuple[str, bool, str | None, list[int] | None]]:
    assert response.status == 200, response
    return [(x["at"], x["fires"], x["reason"], x["specs"]) for x in response.body["fireTimes"]]


def test_a_union_with_exclusions_lists_its_fire_times_and_what_was_excluded_and_why(api):
    answer = api.post(
        PREVIEW,
        {
            "specs": [{"cron": "0 9 * * MON-FRI"}, {"cron": "0 12 * * SAT"}, {"cron": "0 9 * * MON"}],
            "timeZone": "Europe/London",
            "exclude": [{"startDate": "2026-11-04", "endDate": "2026-11-04"}],
            "count": 5,
        },
    )
    assert lines(answer) == [
        ("2026-11-02T09:00:00Z", True, None, [0, 2]),
        ("2026-11-03T09:00:00Z", True, None, [0]),
        (
            "2026-11-04T09:00:00Z",
            False,
            "excluded by exclude.0 (dates 2026-11-04 to 2026-11-04 in Europe/London)",
            [0],
        ),
        ("2026-11-05T09:00:00Z", True, None, [0]),
        ("2026-11-06T09:00:00Z", True, None, [0]),
        ("2026-11-07T12:00:00Z", True, None, [1]),
    ]
    # No job is saved (the tenant's request-rate counter is the one item written).
    items = boto3.client("dynamodb").scan(TableName=DEFINITIONS.default_name).get("Items", [])
    assert [item["job_id"]["S"] for item in items if not item["job_id"]["S"].startswith("rate#")] == []


def test_dst_placed_fire_times_say_how(api):
    gap = api.post(
        PREVIEW,
        {"cron": "30 1 * * *", "timeZone": "Europe/London", "after": "2026-03-28T12:00:00Z", "count": 1},
    )
    assert lines(gap) == [
        (
            "2026-03-29T01:00:00Z",
            True,
            "the local times before 02:00:00 do not exist in Europe/London on 2026-03-29 (clocks go "
            "forward): moved to the end of the gap (02:00:00 BST), as dst.gap=shift says",
            None,
        )
    ]
    fold = api.post(
        PREVIEW,
        {
            "cron": "30 1 * * *",
            "timeZone": "Europe/London",
            "dst": {"fold": "both"},
            "after": "2026-10-24T12:00:00Z",
            "count": 3,
        },
    )
    got = lines(fold)
    assert [line[0] for line in got] == [
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-26T01:30:00Z",
    ]
    assert "first reading (01:30:00 BST), as dst.fold=both" in (got[0][2] or "")
    assert "second reading (01:30:00 GMT), as dst.fold=both" in (got[1][2] or "")
    assert got[2][2] is None


def test_a_rate_counts_from_now_or_start_at_and_max_runs_bounds_the_list(api):
    assert [x[0] for x in lines(api.post(PREVIEW, {"every": "PT1H", "count": 2}))] == [
        "2026-11-02T08:00:00Z",
        "2026-11-02T09:00:00Z",
    ]
    assert [
        x[0]
        for x in lines(api.post(PREVIEW, {"every": 3600, "startAt": "2026-11-02T08:30:00Z", "maxRuns": 1}))
    ] == ["2026-11-02T08:30:00Z"]


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"count": 101, "cron": "0 9 * * *"}, "count", "less than or equal to 100"),
        ({"count": 0, "cron": "0 9 * * *"}, "count", "greater than or equal to 1"),
        ({"count": "5", "cron": "0 9 * * *"}, "count", "integer"),
        ({}, "schedule", "exactly one of runAt, cron, every or specs"),
        ({"cron": "0 25 * * *"}, "cron", "not a valid cron expression"),
        ({"cron": "0 0 30 2 *"}, "cron", "has no occurrence"),
        ({"specs": [{"cron": "0 9 * * *"}] * 11}, "specs", "must hold 1 to 10 specs; got 11"),
        ({"specs": [{"cron": "0 9 * * *"}, {"cron": "0 0 30 2 *"}]}, "specs.1", "has no occurrence"),
        ({"cron": "0 9 * * *", "exclude": [{"cron": "* * * * *"}]}, "exclude", "covers every occurrence"),
        (
            {
                "specs": [{"cron": "* * * * * *"}],
                "exclude": [{"cron": "0 9 * * *"}, {"cron": "1-59 * * * * *"}],
            },
            "exclude.1.cron",
            "must have 5 fields",
        ),
        ({"cron": "0 9 * * *", "name": "x"}, "name", "not a known field"),
        ({"runAt": "2026-11-01T00:00:00Z"}, "runAt", "in the past beyond the catch-up window"),
    ],
)
def test_a_schedule_breaking_a_rule_is_the_400_a_create_answers(api, body, field, rule):
    problems = refused(api.post(PREVIEW, body))
    assert field in problems, problems
    assert rule in problems[field], problems


def test_the_route_is_in_the_openapi_document(api):
    document = api.get("/openapi.json").body
    assert "post" in document["paths"]["/v1/schedules/preview"]


def test_the_example_of_the_jobs_page_answers_as_shown(api):
    """docs/concepts/jobs.md, POST /v1/schedules/preview: the answer printed there."""
    body = {
        "cron": "30 1 * * *",
        "timeZone": "Europe/London",
        "dst": {"fold": "both"},
        "count": 3,
        "exclude": [{"cron": "* * * * SAT"}],
        "after": "2026-10-22T00:00:00Z",
    }
    page = (Path(__file__).resolve().parents[2] / "docs/concepts/jobs.md").read_text(encoding="utf-8")
    section = page.split("## POST /v1/schedules/preview", 1)[1]
    shown = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    assert api.post(PREVIEW, body).body == shown
