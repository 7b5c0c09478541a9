"""Jobs whose schedule is a union of specs (`specs`), through the real `api` handler and the
sweeper on moto: the shape written and read back, each rule broken as a 400 naming the field,
and every policy (misfire, overlap, backfill, pause, trigger-now) with a two-spec schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from jobsched.domain.models import MAX_SCHEDULE_SPECS
from jobsched.store.schema import DEFINITIONS

from tests.integration.test_api_runs import claim, run_of

# On the hour and at half past, as two specs; 2026-11-02 08:00Z is T0.
TWO_SPECS = [{"cron": "0 * * * *"}, {"cron": "30 * * * *"}]


def create(api, **fields):
    body = {"name": "n", "type": "ext", "specs": TWO_SPECS, **fields}
    response = api.post("/v1/jobs", {k: v for k, v in body.items() if v is not None})
    assert response.status == 201, response
    return response.body


def spec(cron=None, time_zone=None, every=None) -> dict:
    """A spec as answers show it: each member, null when unset."""
    return {
        "cron": cron,
        "timeZone": time_zone,
        "every": every,
        "monthly": None,
        "at": None,
        "holidays": None,
    }


def refused(response) -> dict[str, str]:
    assert response.status == 400, response
    assert response.body["code"] == "invalid_request"
    return {e["field"]: e["rule"] for e in response.body["errors"]}


def times(runs) -> list[tuple[str, str, str | None]]:
    return [(r.scheduled_for.strftime("%H:%M:%S"), r.state.value, r.reason) for r in runs]


def all_runs(container, job_id):
    page = container.runs.list_for_job(job_id, limit=1000, cursor=None)
    return sorted(page.items, key=lambda r: r.scheduled_for)


# --- the shape ---


def test_a_union_job_is_written_read_back_and_fires_at_each_instant_once(api):
    body = create(
        api,
        specs=[
            {"cron": "0 9 * * MON-FRI"},
            {"cron": "0 12 * * SAT", "timeZone": "America/New_York"},
            {"cron": "0 9 * * MON"},  # coincides with the first on Mondays
        ],
        timeZone="Europe/London",
    )
    # The job's timeZone is the default of the specs that name none; each is shown with its own.
    assert body["specs"] == [
        spec("0 9 * * MON-FRI", "Europe/London"),
        spec("0 12 * * SAT", "America/New_York"),
        spec("0 9 * * MON", "Europe/London"),
    ]
    assert body["cron"] is None and body["timeZone"] is None and body["every"] is None
    shown = api.get(f"/v1/jobs/{body['jobId']}").body
    assert shown["nextFireTimes"] == [
        "2026-11-02T09:00:00Z",
        "2026-11-03T09:00:00Z",
        "2026-11-04T09:00:00Z",
        "2026-11-05T09:00:00Z",
        "2026-11-06T09:00:00Z",
    ]
    item = boto3.client("dynamodb").get_item(
        TableName=DEFINITIONS.default_name, Key={"job_id": {"S": body["jobId"]}}
    )["Item"]
    assert "union" in str(item)


def test_a_rate_spec_counts_from_start_at(api):
    body = create(api, specs=[{"every": "PT40M"}, {"cron": "0 9 * * *"}], startAt="2026-11-02T08:10:00Z")
    assert body["specs"] == [spec(every=2400), spec("0 9 * * *", "UTC")]
    assert api.get(f"/v1/jobs/{body['jobId']}").body["nextFireTimes"] == [
        "2026-11-02T08:10:00Z",
        "2026-11-02T08:50:00Z",
        "2026-11-02T09:00:00Z",
        "2026-11-02T09:30:00Z",
        "2026-11-02T10:10:00Z",
    ]


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        (
            {"specs": [{"cron": "0 9 * * *"}] * (MAX_SCHEDULE_SPECS + 1)},
            "specs",
            "must hold 1 to 10 specs; got 11",
        ),
        ({"specs": [{"cron": "0 9 * * *"}] * 5000}, "specs", "must hold 1 to 10 specs; got 5000"),
        ({"specs": []}, "specs", "must hold 1 to 10 specs; got 0"),
        ({"specs": [{"cron": "0 " * 600}]}, "specs.0.cron", "at most 1024 characters"),
        ({"specs": [{"cron": "0 9 * * *", "every": 60}]}, "specs.0", "exactly one of cron, every or monthly"),
        ({"specs": [{}]}, "specs.0", "exactly one of cron, every or monthly"),
        (
            {"specs": [{"every": 60, "timeZone": "UTC"}]},
            "specs.0.timeZone",
            "only applies to a cron or monthly spec",
        ),
        ({"specs": [{"every": 1.5}]}, "specs.0.every", "whole number of seconds"),
        ({"specs": [{"cron": "0 9 * * *", "timeZone": "Mars/Base"}]}, "specs.0.timeZone", "IANA"),
        ({"specs": [{"cron": "0 25 * * *"}]}, "specs.0.cron", "not a valid cron expression"),
        ({"specs": [{"cron": "0 9 * * *", "color": "red"}]}, "specs.0.color", "not a known field"),
        ({"specs": TWO_SPECS, "cron": "0 9 * * *"}, "schedule", "exactly one of runAt, cron, every or specs"),
        ({"specs": [{"cron": "0 9 * * *"}, {"cron": "0 0 30 2 *"}]}, "specs.1", "has no occurrence"),
        (
            {"specs": [{"cron": "0 9 * * *"}, {"cron": "0 9 1 1 *"}], "endAt": "2026-12-01T00:00:00Z"},
            "specs.1",
            "has no occurrence within startAt/endAt",
        ),
    ],
)
def test_a_union_breaking_a_rule_is_a_400_naming_the_field_and_the_rule(api, fields, field, rule):
    problems = refused(api.post("/v1/jobs", {"name": "n", "type": "ext", **fields}))
    assert field in problems, problems
    assert rule in problems[field], problems


def test_patching_specs_replaces_the_schedule_and_a_cron_replaces_the_specs(api):
    job = create(api, timeZone="Europe/London")
    patched = api.patch(
        f"/v1/jobs/{job['jobId']}",
        {"specs": [{"cron": "0 7 * * *"}, {"every": 86_400}]},
        headers={"If-Match": '"1"'},
    )
    assert patched.status == 200, patched
    # The job had no zone of its own (a union names each spec's), so the new cron is in UTC.
    assert patched.body["specs"] == [spec("0 7 * * *", "UTC"), spec(every=86_400)]
    renamed = api.patch(f"/v1/jobs/{job['jobId']}", {"name": "renamed"}, headers={"If-Match": '"2"'})
    assert renamed.status == 200 and renamed.body["specs"] == patched.body["specs"]
    back = api.patch(
        f"/v1/jobs/{job['jobId']}", {"cron": "0 6 * * *", "timeZone": "UTC"}, headers={"If-Match": '"3"'}
    )
    assert back.status == 200, back
    assert back.body["specs"] is None and back.body["cron"] == "0 6 * * *"


def test_a_cron_job_patched_to_specs_keeps_its_zone_for_them(api):
    job = api.post("/v1/jobs", {"name": "n", "type": "ext", "cron": "0 9 * * *", "timeZone": "Asia/Tokyo"})
    patched = api.patch(
        f"/v1/jobs/{job.body['jobId']}", {"specs": [{"cron": "0 18 * * *"}]}, headers={"If-Match": '"1"'}
    )
    assert patched.status == 200, patched
    assert patched.body["specs"] == [spec("0 18 * * *", "Asia/Tokyo")]


# --- policies with two specs ---


@pytest.mark.parametrize(
    ("policy", "window", "expected"),
    [
        # Paused at 08:00, resumed at 10:00:30: 08:30, 09:00, 09:30 and 10:00 fell while paused,
        # two from each spec, and are decided as one schedule's.
        ("skip", 4000, [("08:30:00", "SKIPPED", "misfire")]),
        ("run-once", 6000, [("08:30:00", "SKIPPED", "misfire"), ("10:00:00", "PENDING", None)]),
        (
            "catch-up",
            3000,
            [
                ("08:30:00", "SKIPPED", "expired"),
                ("09:30:00", "PENDING", None),
                ("10:00:00", "PENDING", None),
            ],
        ),
    ],
)
def test_misfire_after_a_pause_of_a_two_spec_job(api, container, clock, policy, window, expected):
    job = create(api, missedRuns=policy, catchUpWindow=window)
    assert api.post(f"/v1/jobs/{job['jobId']}/pause").status == 200
    clock.set(datetime(2026, 11, 2, 10, 0, 30, tzinfo=UTC))
    assert api.post(f"/v1/jobs/{job['jobId']}/resume").status == 200
    got = times(all_runs(container, job["jobId"]))
    assert got[0] == ("08:00:00", "SKIPPED", "paused")
    assert got[1:] == expected
    counted = {"skip": 4, "run-once": 3, "catch-up": 2}[policy]
    assert all_runs(container, job["jobId"])[1].skipped_count == counted
    assert container.definitions.counters(job["jobId"])[0]["missed"] == counted + 1
    assert container.definitions.get(job["jobId"]).next_run_at == datetime(2026, 11, 2, 10, 30, tzinfo=UTC)


def test_a_sweep_after_downtime_runs_the_latest_of_a_two_spec_job_once(api, container, clock):
    job = create(api, missedRuns="run-once", catchUpWindow=3 * 3600)
    clock.set(datetime(2026, 11, 2, 10, 5, tzinfo=UTC))
    assert not container.sweeper.sweep().failures
    assert times(all_runs(container, job["jobId"])) == [
        ("08:00:00", "PENDING", None),
        ("08:30:00", "SKIPPED", "misfire"),
        ("10:00:00", "PENDING", None),
    ]
    assert all_runs(container, job["jobId"])[1].skipped_count == 3  # 08:30, 09:00, 09:30


def test_backfill_of_a_two_spec_job_makes_one_run_per_instant_chained_under_overlap_skip(api):
    job = create(api, specs=[*TWO_SPECS, {"cron": "0 */2 * * *"}], overlap="skip")
    response = api.post(
        f"/v1/jobs/{job['jobId']}/backfill", {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T02:00:00Z"}
    )
    assert response.status == 201, response
    keys = response.body["created"]
    assert [k.split("@")[1] for k in keys] == [
        "2026-11-01T00:00:00Z",
        "2026-11-01T00:30:00Z",
        "2026-11-01T01:00:00Z",
        "2026-11-01T01:30:00Z",
    ]
    assert [run_of(api, k)["blockedBy"] for k in keys] == [None, *keys[:-1]]
    assert [lease["runKey"] for lease in claim(api, max=10)] == [
        keys[0],
        f"{job['jobId']}@2026-11-02T08:00:00Z",
    ]


def test_trigger_now_and_the_sweep_of_a_two_spec_job(api, container, clock):
    job = create(api)
    clock.advance(90)
    manual = api.post(f"/v1/jobs/{job['jobId']}/trigger")
    assert manual.status == 201 and manual.body["trigger"] == "manual"
    clock.set(datetime(2026, 11, 2, 9, 29, tzinfo=UTC))
    assert not container.sweeper.sweep().failures
    scheduled = [r for r in all_runs(container, job["jobId"]) if r.trigger.value == "schedule"]
    assert [r.scheduled_for.strftime("%H:%M") for r in scheduled] == ["08:00", "08:30", "09:00", "09:30"]


def test_a_missed_range_too_long_to_count_at_once_is_recorded_in_parts_each_occurrence_once(
    api, container, clock, monkeypatch
):
    """Counting a union walks its sparser specs' occurrences; a range that would walk more than
    MAX_COUNT_WALK is recorded a part a pass, the job staying due, and the parts hold every
    missed occurrence exactly once, counted in `missed`."""
    from jobsched.domain import schedule as schedule_math

    monkeypatch.setattr(schedule_math, "MAX_COUNT_WALK", 50)
    job = create(api, specs=[{"every": 60}, {"every": 90}], missedRuns="skip", startAt="2026-11-02T08:00:00Z")
    clock.set(datetime(2026, 11, 2, 10, 0, tzinfo=UTC))  # two hours down: 80 of the 90 s spec
    first = container.sweeper.sweep()
    assert not first.failures and first.skipped_records == 1 and first.runs_created == 0
    assert container.definitions.get(job["jobId"]).next_run_at < clock.now()  # still due
    second = container.sweeper.sweep()
    assert not second.failures and second.skipped_records == 1 and second.runs_created > 0
    stored = container.definitions.get(job["jobId"])
    skipped = [r for r in all_runs(container, job["jobId"]) if r.state.value == "SKIPPED"]
    held: list[datetime] = []
    for record in skipped:
        assert record.reason == "misfire" and record.skipped_through is not None
        span = schedule_math.fires_between(
            stored.spec.schedule, record.scheduled_for - timedelta(seconds=1), record.skipped_through, 10_000
        )
        assert len(span) == record.skipped_count
        held += span
    made = sorted(r.scheduled_for for r in all_runs(container, job["jobId"]) if r.state.value != "SKIPPED")
    # Runs up to 08:02 were made at creation (the horizon); the next one made is on time.
    at_creation = max(t for t in made if t <= datetime(2026, 11, 2, 8, 2, tzinfo=UTC))
    on_time = min(t for t in made if t > at_creation)
    assert on_time >= clock.now() - timedelta(seconds=60)
    expected = schedule_math.fires_between(
        stored.spec.schedule, at_creation, on_time - timedelta(seconds=1), 10_000
    )
    assert sorted(held) == expected  # each missed one, once
    assert container.definitions.counters(job["jobId"])[0]["missed"] == len(held)


def test_a_calendar_rule_is_a_spec_written_and_read_back(api):
    body = create(
        api,
        specs=[{"monthly": "last-weekday", "at": "17:00"}, {"monthly": "2nd tue", "at": "09:30:15"}],
        timeZone="Europe/London",
    )
    assert body["specs"] == [
        {**spec(time_zone="Europe/London"), "monthly": "last-weekday", "at": "17:00"},
        {**spec(time_zone="Europe/London"), "monthly": "2nd TUE", "at": "09:30:15"},
    ]
    assert api.get(f"/v1/jobs/{body['jobId']}").body["nextFireTimes"] == [
        "2026-11-10T09:30:15Z",
        "2026-11-30T17:00:00Z",  # a Monday
        "2026-12-08T09:30:15Z",
        "2026-12-31T17:00:00Z",  # a Thursday
        "2027-01-12T09:30:15Z",
    ]


@pytest.mark.parametrize(
    ("spec_body", "field", "rule"),
    [
        ({"monthly": "last-week", "at": "09:00"}, "specs.0.monthly", "must be last-day"),
        ({"monthly": "x" * 33, "at": "09:00"}, "specs.0.monthly", "at most 32 characters"),
        ({"monthly": "last-day", "at": "25:00"}, "specs.0.at", "HH:MM"),
        ({"monthly": "last-day"}, "specs.0.at", "required with monthly"),
        (
            {"monthly": "last-day", "at": "09:00", "every": 60},
            "specs.0",
            "exactly one of cron, every or monthly",
        ),
    ],
)
def test_a_malformed_calendar_rule_is_a_400_naming_the_field(api, spec_body, field, rule):
    problems = refused(api.post("/v1/jobs", {"name": "n", "type": "ext", "specs": [spec_body]}))
    assert field in problems, problems
    assert rule in problems[field], problems


def test_a_long_pause_of_a_dense_union_under_an_exclusion_cron_costs_a_bounded_walk_a_pass(
    api, container, clock, monkeypatch
):
    """Resuming after six hours of a per-second union and each sweep pass after it build a
    bounded number of cron walkers (MAX_COUNT_WALK), not one per occurrence of the range for
    each step of a search; the missed range is recorded in parts, one a pass."""
    from jobsched.domain import schedule as schedule_math

    built = 0
    real = schedule_math.croniter

    def counted(*args, **kwargs):
        nonlocal built
        built += 1
        return real(*args, **kwargs)

    job = create(
        api,
        specs=[{"cron": "* * * * * *"}, {"cron": "*/2 * * * * *"}],
        exclude=[{"cron": "0 0 1 1 *"}],
        missedRuns="skip",
    )
    assert not container.sweeper.sweep().failures
    assert api.post(f"/v1/jobs/{job['jobId']}/pause", None).status == 200
    clock.advance(6 * 3600)
    monkeypatch.setattr(schedule_math, "croniter", counted)
    assert api.post(f"/v1/jobs/{job['jobId']}/resume", None).status == 200
    assert built <= schedule_math.MAX_COUNT_WALK, built
    cursor = container.definitions.get(job["jobId"]).next_run_at
    for _ in range(3):
        built = 0
        clock.advance(30)
        report = container.sweeper.sweep()
        assert not report.failures and report.skipped_records == 1
        assert built <= schedule_math.MAX_COUNT_WALK, built
        advanced = container.definitions.get(job["jobId"]).next_run_at
        assert advanced > cursor  # a part recorded each pass
        cursor = advanced
