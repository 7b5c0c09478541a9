"""Named calendars through the real `api` handler, the store and the sweeper on moto: the
routes, their limits, a job's references (checked at write, counted so that a calendar in
use cannot be deleted), a calendar's change reaching occurrences not yet made, one read per
calendar per sweep, and a job whose calendar went missing held rather than fired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from jobsched.domain.calendars import MAX_CALENDAR_ENTRIES
from jobsched.store.calendars import calendar_key
from jobsched.store.dynamo import to_item

from tests.integration.test_union_schedules import all_runs, refused

DAILY = {"name": "n", "type": "ext", "cron": "0 9 * * *", "timeZone": "UTC"}
HOLIDAYS = [{"date": "2026-11-04"}, {"startDate": "2026-11-06", "endDate": "2026-11-07"}]


def put(api, name, entries, status=(200, 201)):
    response = api.put(f"/v1/calendars/{name}", {"entries": entries})
    assert response.status in ((status,) if isinstance(status, int) else status), response
    return response


def create(api, **fields):
    response = api.post("/v1/jobs", {**DAILY, **fields})
    assert response.status == 201, response
    return response.body


def fire_times(api, job_id):
    return api.get(f"/v1/jobs/{job_id}").body["nextFireTimes"]


def made(container, job_id):
    return [
        r.scheduled_for.strftime("%m-%d %H:%M")
        for r in all_runs(container, job_id)
        if r.state.value != "SKIPPED"
    ]


def sweep_days(container, clock, first: datetime, days: int):
    for day in range(days):
        clock.set(first + timedelta(days=day))
        report = container.sweeper.sweep()
        assert not report.failures, report


# --- the routes ---


def count_calendar_reads(container, monkeypatch) -> list[str]:
    """The names of the calendars read from the store from now on, one entry a read."""
    reads: list[str] = []
    store = container.calendar_store
    original = store.get

    def counted(tenant, name):
        reads.append(name)
        return original(tenant, name)

    monkeypatch.setattr(store, "get", counted)
    return reads


def test_a_calendar_is_created_read_replaced_listed_and_deleted(api):
    created = put(api, "us-holidays", HOLIDAYS, 201).body
    assert created["name"] == "us-holidays" and created["version"] == 1 and created["usedBy"] == 0
    assert created["entries"][0]["date"] == "2026-11-04" and created["entryCount"] == 2
    replaced = put(
        api, "us-holidays", [{"start": "2026-11-09T00:00:00Z", "end": "2026-11-10T00:00:00Z"}], 200
    )
    assert replaced.body["version"] == 2 and replaced.body["entryCount"] == 1
    put(api, "freeze-2026", [], 201)
    listed = api.get("/v1/calendars").body["items"]
    assert [(c["name"], c["entryCount"], c["version"]) for c in listed] == [
        ("freeze-2026", 0, 1),
        ("us-holidays", 1, 2),
    ]
    got = api.get("/v1/calendars/us-holidays").body
    assert got["entries"] == [
        {
            "date": None,
            "startDate": None,
            "endDate": None,
            "start": "2026-11-09T00:00:00Z",
            "end": "2026-11-10T00:00:00Z",
        }
    ]
    deleted = api.delete("/v1/calendars/us-holidays")
    assert deleted.status == 200 and deleted.body["name"] == "us-holidays"
    assert api.get("/v1/calendars/us-holidays").status == 404
    assert api.delete("/v1/calendars/us-holidays").status == 404
    assert [c["name"] for c in api.get("/v1/calendars").body["items"]] == ["freeze-2026"]


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"entries": [{"date": "2026-11-04", "start": "2026-11-04T00:00:00Z"}]}, "entries.0", "exactly one"),
        ({"entries": [{"startDate": "2026-11-05", "endDate": "2026-11-04"}]}, "entries.0.endDate", "before"),
        ({"entries": [{"date": "2026-13-01"}]}, "entries.0.date", "YYYY-MM-DD"),
        ({"entries": [{"date": 20261104}]}, "entries.0.date", "YYYY-MM-DD"),
        ({"entries": [{"start": "2026-11-04T00:00:00Z"}]}, "entries.0.end", "pair"),
        ({"entries": [{"date": "2026-11-04", "note": "x"}]}, "entries.0.note", ""),
        ({"entries": [{"date": "2026-11-04"}] * (MAX_CALENDAR_ENTRIES + 1)}, "entries", "at most 1000"),
        ({"entries": [{"date": "2026-11-04"}] * 100_000}, "entries", "got 100000"),
        ({}, "entries", ""),
    ],
)
def test_a_calendar_breaking_a_rule_is_a_400_naming_the_field(api, body, field, rule):
    problems = refused(api.put("/v1/calendars/c", body))
    assert field in problems, problems
    assert rule in problems[field], problems
    assert api.get("/v1/calendars/c").status == 404


@pytest.mark.parametrize("name", ["a b", "-lead", "x" * 65, "café", "a%2Fb", "..", "a$b"])
def test_a_name_breaking_the_rule_is_refused_and_never_stored(api, name):
    from urllib.parse import quote

    response = api.put(f"/v1/calendars/{quote(name, safe='')}", {"entries": []})
    assert response.status in (400, 404), response
    assert api.get("/v1/calendars").body["items"] == []


def test_a_tenant_holds_at_most_its_limit_of_calendars(api, other_api, container):
    container.calendars.max_calendars = 2
    put(api, "a", [], 201)
    put(api, "b", [], 201)
    refused_one = api.put("/v1/calendars/c", {"entries": []})
    assert refused_one.status == 429 and "2 calendars" in refused_one.body["message"], refused_one
    put(api, "b", [{"date": "2026-11-04"}], 200)  # a replacement takes no more room
    put(other_api, "c", [], 201)  # another tenant's room is its own
    api.delete("/v1/calendars/a")
    put(api, "c", [], 201)


def test_calendars_are_per_tenant_by_name(api, other_api):
    put(api, "hols", HOLIDAYS, 201)
    assert other_api.get("/v1/calendars/hols").status == 404
    assert other_api.get("/v1/calendars").body["items"] == []
    assert other_api.delete("/v1/calendars/hols").status == 404
    # The same name is another calendar for another tenant: A's is untouched.
    mine = put(other_api, "hols", [{"date": "2030-01-01"}], 201).body
    assert mine["version"] == 1
    assert api.get("/v1/calendars/hols").body["entryCount"] == 2
    # A job resolves a name in its own tenant only.
    job = create(other_api, exclude=[{"calendar": "hols"}])
    assert "2026-11-04T09:00:00Z" in fire_times(other_api, job["jobId"])


# --- references from jobs ---


def test_a_job_referencing_a_calendar_that_does_not_exist_is_a_400_naming_the_field(api, other_api):
    problems = refused(
        api.post("/v1/jobs", {**DAILY, "exclude": [{"cron": "0 * * * SUN"}, {"calendar": "nope"}]})
    )
    assert "no calendar named 'nope'" in problems["exclude.1.calendar"], problems
    put(other_api, "theirs", [], 201)
    problems = refused(api.post("/v1/jobs", {**DAILY, "exclude": [{"calendar": "theirs"}]}))
    assert "exclude.0.calendar" in problems
    union = {
        "name": "n",
        "type": "ext",
        "specs": [{"monthly": "last-business-day", "at": "17:00", "holidays": "nope"}],
    }
    assert "specs.0.holidays" in refused(api.post("/v1/jobs", union))
    batch = api.post("/v1/jobs/batch", {"jobs": [{**DAILY, "exclude": [{"calendar": "nope"}]}, DAILY]})
    assert batch.status == 200, batch
    results = batch.body["results"] if "results" in batch.body else batch.body["items"]
    assert results[0]["status"] == 400 and results[1]["status"] == 201, results


def test_a_job_leaves_out_what_its_calendar_covers_and_the_preview_names_it(api):
    put(api, "hols", HOLIDAYS, 201)
    job = create(api, exclude=[{"calendar": "hols"}])
    assert job["exclude"][0]["calendar"] == "hols" and job["exclude"][0]["timeZone"] == "UTC"
    assert fire_times(api, job["jobId"]) == [
        "2026-11-02T09:00:00Z",
        "2026-11-03T09:00:00Z",
        "2026-11-05T09:00:00Z",
        "2026-11-08T09:00:00Z",
        "2026-11-09T09:00:00Z",
    ]
    preview = api.post(
        "/v1/schedules/preview", {"cron": "0 9 * * *", "exclude": [{"calendar": "hols"}], "count": 3}
    ).body["fireTimes"]
    assert [(line["at"], line["fires"], line["reason"]) for line in preview] == [
        ("2026-11-02T09:00:00Z", True, None),
        ("2026-11-03T09:00:00Z", True, None),
        ("2026-11-04T09:00:00Z", False, "excluded by exclude.0 (calendar hols, its days in UTC)"),
        ("2026-11-05T09:00:00Z", True, None),
    ]


def test_the_preview_resolves_only_the_callers_calendars(api, other_api):
    put(api, "hols", HOLIDAYS, 201)
    response = other_api.post(
        "/v1/schedules/preview", {"cron": "0 9 * * *", "exclude": [{"calendar": "hols"}]}
    )
    assert "exclude.0.calendar" in refused(response)


def test_a_business_day_rule_takes_its_holidays_from_a_calendar(api):
    put(api, "hols", [{"date": "2026-12-15"}], 201)
    job = create(
        api,
        cron=None,
        specs=[{"monthly": "nearest-business-day 15", "at": "09:00", "holidays": "hols"}],
    )
    assert job["specs"][0]["holidays"] == "hols"
    # 11-15 is a Sunday (Monday the 16th); 12-15 a holiday Tuesday (Monday the 14th);
    # 2027-01-15 a Friday; 02-15 a Monday; 03-15 a Monday.
    assert fire_times(api, job["jobId"]) == [
        "2026-11-16T09:00:00Z",
        "2026-12-14T09:00:00Z",
        "2027-01-15T09:00:00Z",
        "2027-02-15T09:00:00Z",
        "2027-03-15T09:00:00Z",
    ]


def test_a_calendar_a_live_job_uses_cannot_be_deleted_until_no_live_job_does(api):
    put(api, "hols", HOLIDAYS, 201)
    first = create(api, exclude=[{"calendar": "hols"}, {"calendar": "hols"}])
    second = create(api, exclude=[{"calendar": "hols"}])
    assert api.get("/v1/calendars/hols").body["usedBy"] == 2
    refused_delete = api.delete("/v1/calendars/hols")
    assert refused_delete.status == 409 and refused_delete.body["code"] == "calendar_in_use", refused_delete
    assert refused_delete.body["users"] == 2 and "2 active or paused jobs" in refused_delete.body["message"]
    # A paused job still uses it; a cancelled one does not; a job patched off it does not.
    assert api.post(f"/v1/jobs/{first['jobId']}/pause").status == 200
    assert api.get("/v1/calendars/hols").body["usedBy"] == 2
    assert api.delete(f"/v1/jobs/{first['jobId']}").status == 200
    assert api.get("/v1/calendars/hols").body["usedBy"] == 1
    patched = api.patch(f"/v1/jobs/{second['jobId']}", {"exclude": None}, headers={"If-Match": '"1"'})
    assert patched.status == 200, patched
    assert api.get("/v1/calendars/hols").body["usedBy"] == 0
    assert api.delete("/v1/calendars/hols").status == 200


def test_a_patch_to_a_calendar_that_does_not_exist_is_refused_and_changes_nothing(api):
    put(api, "hols", HOLIDAYS, 201)
    job = create(api, exclude=[{"calendar": "hols"}])
    response = api.patch(
        f"/v1/jobs/{job['jobId']}", {"exclude": [{"calendar": "gone"}]}, headers={"If-Match": '"1"'}
    )
    assert "exclude.0.calendar" in refused(response)
    assert api.get(f"/v1/jobs/{job['jobId']}").body["version"] == 1
    assert api.get("/v1/calendars/hols").body["usedBy"] == 1


def test_a_job_completed_by_the_sweeper_stops_using_its_calendar(api, container, clock):
    put(api, "hols", HOLIDAYS, 201)
    create(api, exclude=[{"calendar": "hols"}], maxRuns=1)
    sweep_days(container, clock, datetime(2026, 11, 2, 9, 0, tzinfo=UTC), 1)
    assert api.get("/v1/calendars/hols").body["usedBy"] == 0
    assert api.delete("/v1/calendars/hols").status == 200


# --- the sweeper ---


def test_a_calendar_change_reaches_occurrences_not_yet_made(api, container, clock):
    put(api, "hols", [{"date": "2026-11-04"}], 201)
    job = create(api, exclude=[{"calendar": "hols"}])
    sweep_days(container, clock, datetime(2026, 11, 2, 8, 59, tzinfo=UTC), 2)  # the 2nd's and 3rd's runs
    # The 4th was excluded when the 3rd's run was made: the sweeper still looks at the job then.
    put(api, "hols", [{"date": "2026-11-05"}], 200)
    sweep_days(container, clock, datetime(2026, 11, 4, 8, 59, tzinfo=UTC), 3)
    assert made(container, job["jobId"]) == ["11-02 09:00", "11-03 09:00", "11-04 09:00", "11-06 09:00"]
    assert container.definitions.counters(job["jobId"])[0]["excluded"] == 1


def test_one_sweep_reads_each_calendar_once_and_a_job_without_one_reads_none(
    api, container, clock, monkeypatch
):
    put(api, "hols", HOLIDAYS, 201)
    put(api, "freeze", [], 201)
    for _ in range(3):
        create(api, exclude=[{"calendar": "hols"}])
    create(api, exclude=[{"calendar": "hols"}, {"calendar": "freeze"}])
    create(api)
    reads = count_calendar_reads(container, monkeypatch)
    clock.set(datetime(2026, 11, 3, 8, 59, tzinfo=UTC))
    report = container.sweeper.sweep()
    assert report.jobs_read == 5 and report.runs_created == 5 and not report.failures
    assert sorted(reads) == ["freeze", "hols"]


def test_a_page_of_jobs_and_a_batch_read_each_calendar_once(api, container, monkeypatch):
    put(api, "hols", HOLIDAYS, 201)
    for _ in range(4):
        create(api, exclude=[{"calendar": "hols"}])
    reads = count_calendar_reads(container, monkeypatch)
    listed = api.get("/v1/jobs", query="limit=10")
    assert listed.status == 200 and len(listed.body["items"]) == 4
    assert reads == ["hols"]
    reads.clear()
    jobs = [{**DAILY, "name": f"b{i}", "exclude": [{"calendar": "hols"}]} for i in range(3)]
    batch = api.post("/v1/jobs/batch", {"jobs": jobs})
    assert batch.status == 200 and batch.body["created"] == 3, batch.body
    assert reads.count("hols") <= 2  # the writes' check, then the answers' views: once each


def test_a_job_whose_calendar_went_missing_is_held_until_it_is_back(api, container, clock):
    put(api, "hols", [{"date": "2026-11-04"}], 201)
    job = create(api, exclude=[{"calendar": "hols"}])
    sweep_days(container, clock, datetime(2026, 11, 2, 8, 59, tzinfo=UTC), 1)
    # Deleted behind the API's back (its delete refuses while a live job uses it).
    container.definitions._db.delete_item(
        TableName=container.settings.definitions_table,
        Key=to_item({"job_id": calendar_key("tenant-a", "hols")}),
    )
    clock.set(datetime(2026, 11, 3, 8, 59, tzinfo=UTC))
    report = container.sweeper.sweep()
    assert report.failures == [job["jobId"]]
    stored = container.definitions.get(job["jobId"])
    assert made(container, job["jobId"]) == ["11-02 09:00"] and stored.next_run_at.day == 3
    assert fire_times(api, job["jobId"]) == []  # it fires at nothing until the calendar is back
    # The tenant is told why: the view names the calendar that holds it.
    assert api.get(f"/v1/jobs/{job['jobId']}").body["missingCalendars"] == ["hols"]
    put(api, "hols", [{"date": "2026-11-04"}], 201)
    assert api.get(f"/v1/jobs/{job['jobId']}").body["missingCalendars"] == []
    clock.set(datetime(2026, 11, 3, 9, 0, 30, tzinfo=UTC))
    assert not container.sweeper.sweep().failures
    assert made(container, job["jobId"]) == ["11-02 09:00", "11-03 09:00"]


def test_a_calendar_made_to_exclude_everything_neither_completes_the_job_nor_spins(api, container, clock):
    put(api, "hols", [], 201)
    job = create(api, cron="0 * * * *", exclude=[{"calendar": "hols"}])
    put(api, "hols", [{"startDate": "1970-01-01", "endDate": "9998-12-31"}], 200)
    clock.set(datetime(2026, 11, 2, 8, 30, tzinfo=UTC))
    passes = []
    for minute in range(0, 180, 5):
        clock.set(datetime(2026, 11, 2, 8, 30, tzinfo=UTC) + timedelta(minutes=minute))
        passes.append(container.sweeper.sweep().jobs_read)
    assert made(container, job["jobId"]) == ["11-02 08:00"]  # made with the job, before the change
    stored = container.definitions.get(job["jobId"])
    assert stored.state.value == "ACTIVE"
    # Looked at once an hour (its schedule without the calendar), not once a sweep.
    assert sum(passes) <= 4, passes
    assert fire_times(api, job["jobId"]) == []
    put(api, "hols", [], 200)  # relaxed: it fires again, from the occurrences not yet made
    clock.set(datetime(2026, 11, 2, 11, 59, tzinfo=UTC))
    assert not container.sweeper.sweep().failures
    assert made(container, job["jobId"])[-1] == "11-02 12:00"


def test_a_backfill_leaves_out_what_the_calendar_covers(api, container, clock):
    put(api, "hols", [{"date": "2026-11-02"}], 201)
    job = create(api, cron="0 * * * *", exclude=[{"calendar": "hols"}], startAt="2026-11-01T00:00:00Z")
    clock.set(datetime(2026, 11, 3, 0, 0, tzinfo=UTC))
    response = api.post(
        f"/v1/jobs/{job['jobId']}/backfill", {"start": "2026-11-01T22:00:00Z", "end": "2026-11-02T02:00:00Z"}
    )
    assert response.status == 201, response
    backfilled = [
        r.scheduled_for.strftime("%d %H:%M")
        for r in all_runs(container, job["jobId"])
        if r.trigger.value == "backfill"
    ]
    assert backfilled == ["01 22:00", "01 23:00"]
