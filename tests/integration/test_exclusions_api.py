"""Exclusions (`exclude`) through the real `api` handler and the sweeper on moto: the shape
written and read back, each rule broken as a 400 naming the field, and excluded occurrences
making no run but counted (`excluded`), one counter write a pass."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from jobsched.domain.models import MAX_EXCLUSIONS

from tests.integration.test_union_schedules import all_runs, refused, times

HOURLY = {"name": "n", "type": "ext", "cron": "0 * * * *"}


def create(api, **fields):
    response = api.post("/v1/jobs", {**HOURLY, **fields})
    assert response.status == 201, response
    return response.body


def exclusion(**fields):
    """An exclusion as answers show it: each member, null when unset."""
    shown = {"cron": None, "calendar": None, "timeZone": None, "startDate": None, "endDate": None}
    shown.update({"start": None, "end": None})
    return {**shown, **fields}


def test_exclusions_are_written_read_back_and_leave_their_occurrences_out(api):
    body = create(
        api,
        cron="0 9 * * *",
        timeZone="Europe/London",
        exclude=[
            {"cron": "* * * * SAT,SUN"},
            {"startDate": "2026-11-04", "endDate": "2026-11-05", "timeZone": "UTC"},
            {"start": "2026-11-09T08:00:00Z", "end": "2026-11-09T10:00:00Z"},
        ],
    )
    assert body["exclude"] == [
        exclusion(cron="* * * * SAT,SUN", timeZone="Europe/London"),  # the job's zone by default
        exclusion(startDate="2026-11-04", endDate="2026-11-05", timeZone="UTC"),
        exclusion(start="2026-11-09T08:00:00Z", end="2026-11-09T10:00:00Z"),
    ]
    assert api.get(f"/v1/jobs/{body['jobId']}").body["nextFireTimes"] == [
        "2026-11-02T09:00:00Z",
        "2026-11-03T09:00:00Z",
        "2026-11-06T09:00:00Z",  # 4th and 5th excluded, then the weekend
        "2026-11-10T09:00:00Z",  # Monday the 9th excluded by instants
        "2026-11-11T09:00:00Z",
    ]


def test_an_every_job_takes_the_time_zone_for_its_exclusions(api):
    body = create(api, cron=None, every=3600, timeZone="Asia/Tokyo", exclude=[{"cron": "* 0-8 * * *"}])
    assert body["exclude"] == [exclusion(cron="* 0-8 * * *", timeZone="Asia/Tokyo")]
    assert body["timeZone"] is None  # an every job keeps no zone of its own
    # 08:00Z is 17:00 in Tokyo; 00:00-08:59 Tokyo is 15:00Z-23:59Z.
    assert api.get(f"/v1/jobs/{body['jobId']}").body["nextFireTimes"][:3] == [
        "2026-11-02T08:00:00Z",
        "2026-11-02T09:00:00Z",
        "2026-11-02T10:00:00Z",
    ]


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        (
            {"exclude": [{"cron": "0 9 * * *"}] * (MAX_EXCLUSIONS + 1)},
            "exclude",
            "must hold 1 to 20 exclusions; got 21",
        ),
        ({"exclude": [{"cron": "0 9 * * *"}] * 10_000}, "exclude", "must hold 1 to 20 exclusions; got 10000"),
        ({"exclude": []}, "exclude", "must hold 1 to 20 exclusions; got 0"),
        ({"exclude": [{"cron": "0 " * 600}]}, "exclude.0.cron", "at most 1024 characters"),
        ({"exclude": [{"cron": "0 9 * * *", "startDate": "2026-12-20"}]}, "exclude.0", "exactly one of cron"),
        ({"exclude": [{"startDate": "2026-12-20"}]}, "exclude.0.endDate", "is required with its pair"),
        ({"exclude": [{"startDate": "2026-12-20", "endDate": "2026-12-19"}]}, "exclude.0.endDate", "before"),
        (
            {"exclude": [{"startDate": 20261220, "endDate": "2026-12-21"}]},
            "exclude.0.startDate",
            "YYYY-MM-DD",
        ),
        (
            {"exclude": [{"startDate": "2026-12-20T00:00:00Z", "endDate": "2026-12-21"}]},
            "exclude.0.startDate",
            "YYYY-MM-DD",
        ),
        (
            {"exclude": [{"startDate": "2026-02-30", "endDate": "2026-03-01"}]},
            "exclude.0.startDate",
            "YYYY-MM-DD",
        ),
        ({"exclude": [{"start": "2026-12-20T00:00:00Z"}]}, "exclude.0.end", "is required with its pair"),
        (
            {"exclude": [{"start": "2026-12-20T00:00:00Z", "end": "2026-12-20T00:00:00Z"}]},
            "exclude.0.end",
            "after start",
        ),
        ({"exclude": [{"cron": "0 9 * * *", "timeZone": "Mars/Base"}]}, "exclude.0.timeZone", "IANA"),
        ({"exclude": [{"cron": "0 9 * * *", "when": 1}]}, "exclude.0.when", "not a known field"),
        (
            {"cron": None, "runAt": "2026-11-02T09:00:00Z", "exclude": [{"cron": "0 9 * * *"}]},
            "exclude",
            "recurring",
        ),
        ({"exclude": [{"cron": "* * * * *"}]}, "exclude", "covers every occurrence"),
        ({"exclude": [{"cron": "0 * * * * MON-FRI"}]}, "exclude.0.cron", "must have 5 fields"),
        (
            {
                "endAt": "2026-11-02T23:59:59Z",
                "exclude": [{"startDate": "2026-11-02", "endDate": "2026-11-02"}],
            },
            "exclude",
            "covers every occurrence within startAt/endAt",
        ),
    ],
)
def test_an_exclusion_breaking_a_rule_is_a_400_naming_the_field_and_the_rule(api, fields, field, rule):
    problems = refused(api.post("/v1/jobs", {k: v for k, v in {**HOURLY, **fields}.items() if v is not None}))
    assert field in problems, problems
    assert rule in problems[field], problems


def test_the_sweep_makes_no_run_for_an_excluded_occurrence_and_counts_it_once(api, container, clock):
    job = create(api, cron="*/10 * * * *", exclude=[{"cron": "* 9 * * *"}])  # not in the 09:00 hour
    for minute in range(0, 181, 1):
        clock.set(datetime(2026, 11, 2, 8, 0, tzinfo=UTC).replace(hour=8 + minute // 60, minute=minute % 60))
        assert not container.sweeper.sweep().failures
    made = [r.scheduled_for.strftime("%H:%M") for r in all_runs(container, job["jobId"])]
    assert "09:00" not in made and "09:50" not in made
    assert made[:7] == ["08:00", "08:10", "08:20", "08:30", "08:40", "08:50", "10:00"]
    assert container.definitions.counters(job["jobId"])[0]["excluded"] == 6
    summary = api.get(f"/v1/jobs/{job['jobId']}/summary").body
    assert summary["counters"]["excluded"] == 6


def test_missed_occurrences_and_excluded_ones_are_each_counted_in_their_own_counter(api, container, clock):
    job = create(
        api,
        cron="*/10 * * * *",
        missedRuns="run-once",
        catchUpWindow=3 * 3600,
        exclude=[{"start": "2026-11-02T09:00:00Z", "end": "2026-11-02T09:30:00Z"}],
    )
    clock.set(datetime(2026, 11, 2, 10, 5, tzinfo=UTC))  # the sweeper was down since 08:00
    assert not container.sweeper.sweep().failures
    assert times(all_runs(container, job["jobId"])) == [
        ("08:00:00", "PENDING", None),
        ("08:10:00", "SKIPPED", "misfire"),
        ("10:00:00", "PENDING", None),
    ]
    # 08:10-08:50 and 09:30-09:50 missed (8); 09:00, 09:10 and 09:20 excluded (3).
    assert all_runs(container, job["jobId"])[1].skipped_count == 8
    stats = container.definitions.counters(job["jobId"])[0]
    assert stats["missed"] == 8 and stats["excluded"] == 3


def test_a_patched_exclusion_applies_to_occurrences_not_yet_made(api, container, clock):
    job = create(api)
    patched = api.patch(
        f"/v1/jobs/{job['jobId']}",
        {"exclude": [{"startDate": "2026-11-02", "endDate": "2026-11-02"}]},
        headers={"If-Match": '"1"'},
    )
    assert patched.status == 200, patched
    # The 08:00 run was made before the patch: it stays, and fires; the rest of the day does not.
    assert api.get(f"/v1/jobs/{job['jobId']}").body["nextFireTimes"][:2] == [
        "2026-11-02T08:00:00Z",
        "2026-11-03T00:00:00Z",
    ]
    assert [r.scheduled_for.strftime("%H:%M") for r in all_runs(container, job["jobId"])] == ["08:00"]
    removed = api.patch(f"/v1/jobs/{job['jobId']}", {"exclude": None}, headers={"If-Match": '"2"'})
    assert removed.status == 200 and removed.body["exclude"] is None
    assert api.get(f"/v1/jobs/{job['jobId']}").body["nextFireTimes"][1] == "2026-11-02T09:00:00Z"
