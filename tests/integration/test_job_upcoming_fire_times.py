"""`upcomingFireTimes` of `GET /v1/jobs/{id}` through the real `api` handler on moto: the job's
schedule from now on as `POST /v1/schedules/preview` lists it (each excluded or DST-placed
occurrence with why, the job's own calendars resolved), bounded as the preview is, ended by
`maxRuns`, empty unless the job is ACTIVE, and on the single job's answer only."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from tests.integration.test_calendars_api import put

PREVIEW = "/v1/schedules/preview"
# A week of a DST change in London: 01:30 local happens twice on Sunday 2026-10-25.
BEFORE_THE_FOLD = datetime(2026, 10, 22, tzinfo=UTC)
FOLD_SCHEDULE = {
    "cron": "30 1 * * *",
    "timeZone": "Europe/London",
    "dst": {"fold": "both"},
    "exclude": [{"calendar": "closed"}, {"cron": "* * * * SAT"}],
}


def create(api, **fields):
    response = api.post("/v1/jobs", {"name": "n", "type": "ext", **fields})
    assert response.status == 201, response
    return response.body


def lines(answer) -> list[tuple[str, bool, str | None]]:
    return [(line["at"], line["fires"], line["reason"]) for line in answer["upcomingFireTimes"]]


def test_each_excluded_or_dst_placed_occurrence_says_why(api, other_api, clock):
    clock.set(BEFORE_THE_FOLD)
    put(api, "closed", [{"date": "2026-10-23"}], 201)
    put(other_api, "closed", [{"date": "2026-10-22"}], 201)  # another tenant's: never read
    job = create(api, **FOLD_SCHEDULE)
    got = api.get(f"/v1/jobs/{job['jobId']}").body
    assert [line[:2] for line in lines(got)] == [
        ("2026-10-22T00:30:00Z", True),
        ("2026-10-23T00:30:00Z", False),
        ("2026-10-24T00:30:00Z", False),
        ("2026-10-25T00:30:00Z", True),
        ("2026-10-25T01:30:00Z", True),
        ("2026-10-26T01:30:00Z", True),
        ("2026-10-27T01:30:00Z", True),
    ]
    reasons = [line[2] for line in lines(got)]
    assert reasons[1] == "excluded by exclude.0 (calendar closed, its days in Europe/London)"
    assert reasons[2] == "excluded by exclude.1 (cron * * * * SAT in Europe/London)"
    assert "first reading (01:30:00 BST), as dst.fold=both says" in (reasons[3] or "")
    assert "second reading (01:30:00 GMT), as dst.fold=both says" in (reasons[4] or "")
    assert reasons[0] is None and reasons[5:] == [None, None]
    # Exactly what the preview of the stored schedule lists (five fire times: the default).
    preview = api.post(PREVIEW, {**FOLD_SCHEDULE, "count": 5}).body["fireTimes"]
    assert got["upcomingFireTimes"] == preview
    # nextFireTimes is as it was: the instants that will fire, nothing else.
    assert got["nextFireTimes"] == [line[0] for line in lines(got) if line[1]]


def test_another_tenants_job_is_not_found(api, other_api):
    job = create(api, cron="0 9 * * *")
    response = other_api.get(f"/v1/jobs/{job['jobId']}")
    assert response.status == 404, response
    assert "upcomingFireTimes" not in response.body


def test_a_schedule_that_excludes_nearly_everything_lists_a_bounded_few(api):
    # Fires at :59 each hour; the 59 minutes before are each excluded: the answer lists the
    # five fire times and the first five exclusions among them, as the preview would.
    job = create(api, cron="* * * * *", exclude=[{"cron": "0-58 * * * *"}])
    got = lines(api.get(f"/v1/jobs/{job['jobId']}").body)
    assert got[:5] == [
        (f"2026-11-02T08:0{m}:00Z", False, "excluded by exclude.0 (cron 0-58 * * * * in UTC)")
        for m in range(5)
    ]
    assert got[5:] == [(f"2026-11-02T{h:02}:59:00Z", True, None) for h in range(8, 13)]


def test_a_calendar_that_excludes_everything_lists_nothing(api):
    put(api, "closed", [], 201)
    job = create(api, cron="0 9 * * *", exclude=[{"calendar": "closed"}])
    put(api, "closed", [{"startDate": "1970-01-01", "endDate": "9998-12-31"}], 200)
    got = api.get(f"/v1/jobs/{job['jobId']}").body
    assert got["upcomingFireTimes"] == [] and got["nextFireTimes"] == []


def test_max_runs_ends_the_lines_at_the_jobs_last_fire_time(api):
    job = create(
        api, cron="0 9 * * *", maxRuns=2, exclude=[{"startDate": "2026-11-03", "endDate": "2026-11-03"}]
    )
    assert lines(api.get(f"/v1/jobs/{job['jobId']}").body) == [
        ("2026-11-02T09:00:00Z", True, None),
        ("2026-11-03T09:00:00Z", False, "excluded by exclude.0 (dates 2026-11-03 to 2026-11-03 in UTC)"),
        ("2026-11-04T09:00:00Z", True, None),
    ]
    one_left = create(api, cron="0 9 * * *", maxRuns=1, exclude=[{"cron": "* * * * WED"}])
    # The exclusion after its only fire time (Wednesday 11-04) is not listed.
    assert lines(api.get(f"/v1/jobs/{one_left['jobId']}").body) == [("2026-11-02T09:00:00Z", True, None)]


def test_a_paused_or_cancelled_job_lists_none(api):
    job = create(api, cron="0 9 * * *")
    paused = api.post(f"/v1/jobs/{job['jobId']}/pause")
    assert paused.status == 200, paused
    assert api.get(f"/v1/jobs/{job['jobId']}").body["upcomingFireTimes"] == []
    api.delete(f"/v1/jobs/{job['jobId']}")
    assert api.get(f"/v1/jobs/{job['jobId']}").body["upcomingFireTimes"] == []


def test_only_the_single_jobs_answer_carries_them(api):
    job = create(api, cron="0 9 * * *")
    assert job["upcomingFireTimes"] is None
    assert len(api.get(f"/v1/jobs/{job['jobId']}").body["upcomingFireTimes"]) == 5
    assert [item["upcomingFireTimes"] for item in api.get("/v1/jobs").body["items"]] == [None]
    patched = api.patch(f"/v1/jobs/{job['jobId']}", {"name": "m"}, headers={"If-Match": '"1"'})
    assert patched.status == 200, patched
    assert patched.body["upcomingFireTimes"] is None


def test_max_runs_counts_the_runs_made_ahead_as_made(api):
    # Every minute, four runs at most: the create makes the runs of its 120 s horizon ahead
    # (08:00 to 08:02, counted in runsCreated), which leaves one more to list.
    job = create(api, cron="* * * * *", maxRuns=4)
    got = api.get(f"/v1/jobs/{job['jobId']}").body
    assert got["runsCreated"] == 3, got
    assert lines(got) == [(f"2026-11-02T08:0{m}:00Z", True, None) for m in range(4)]
    assert got["nextFireTimes"] == [line[0] for line in lines(got)]


def test_the_example_of_the_schedules_page_answers_as_shown(api):
    """docs/concepts/schedules.md, A job's upcoming fire times: the job's body as sent there,
    its calendar as the page writes it, and the answer printed."""
    page = (Path(__file__).resolve().parents[2] / "docs/concepts/schedules.md").read_text(encoding="utf-8")
    holidays = page.split("## Named calendars", 1)[1].split("/v1/calendars/us-holidays", 1)[1]
    put(api, "us-holidays", json.loads(holidays.split("-d '", 1)[1].split("'", 1)[0])["entries"], 201)
    section = page.split("## A job's upcoming fire times, and why", 1)[1]
    body = json.loads(section.split("-d '", 1)[1].split("'", 1)[0])
    shown = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    job = create(api, **body)
    got = api.get(f"/v1/jobs/{job['jobId']}").body
    assert {name: got[name] for name in shown} == shown
