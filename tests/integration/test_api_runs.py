"""Every run route through the real `api` handler on moto: history, trigger, backfill, dead
letters, redrive, cancel, and the external-worker lease protocol, with their failures."""

from __future__ import annotations

import re
from collections import Counter
from datetime import timedelta
from urllib.parse import quote

import pytest
from jobsched.domain.errors import PermanentError, RetryableError
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Received
from jobsched.targets import HandlerRegistry

from tests.helpers import T0, make_worker

NOW = "2026-11-02T08:00:00Z"  # T0
FAILED = {"fence": 1, "outcome": "failed"}


# --- helpers ---


def create(api, **fields):
    body = {"name": "n", "type": "ext", "runAt": NOW, **fields}
    response = api.post("/v1/jobs", {k: v for k, v in body.items() if v is not None})
    assert response.status == 201, response
    return response.body["jobId"]


def hourly(api, **fields):
    """A cron job (UTC, on the hour) that stays ACTIVE, so it can be triggered and backfilled.
    Its 08:00 occurrence is due at creation, so it starts with that one scheduled run."""
    return create(api, runAt=None, cron="0 * * * *", **fields)


def scheduled_fors(api, job_id):
    return [r["scheduledFor"] for r in api.get(f"/v1/jobs/{job_id}/runs", query="limit=100").body["items"]]


def key_of(job_id, instant=NOW):
    return f"{job_id}@{instant}"


def run_of(api, key):
    response = api.get(f"/v1/runs/{quote(key, safe='')}")
    assert response.status == 200, response
    return response.body


def errors_of(response):
    assert response.status == 400, response
    assert response.body["code"] == "invalid_request"
    return {e["field"] for e in response.body["errors"]}


@pytest.fixture
def calls():
    return Counter()


@pytest.fixture
def seen():
    return []  # the payloads the `rows` handler was called with


@pytest.fixture
def worker(container, calls, seen):
    registry = HandlerRegistry()

    @registry.register("rows")
    def rows(payload, invocation):
        seen.append(payload)
        if not isinstance(payload, dict) or payload.get("rows", 0) <= 0:
            raise PermanentError("rows must be positive", error_class="HTTP400")
        return payload["rows"]

    @registry.register("ok")
    def ok(payload, invocation):
        calls[invocation.run_key] += 1
        return {"done": invocation.attempt}

    @registry.register("flaky")
    def flaky(payload, invocation):
        calls[invocation.run_key] += 1
        if calls[invocation.run_key] == 1:
            raise RetryableError("downstream 503", error_class="HTTP503")
        return "second time lucky"

    @registry.register("bad")
    def bad(payload, invocation):
        calls[invocation.run_key] += 1
        if calls[invocation.run_key] == 1:
            raise PermanentError("payload rejected", error_class="HTTP400")
        return "fixed"

    return make_worker(container, registry)


def deliver(worker, key):
    job_id, instant = key.split("@")
    return worker.process(Received(key, job_id, instant, "default"))


def claim(api, types=("ext",), **fields):
    response = api.post("/v1/leases", {"types": list(types), "workerId": "ext-1", **fields})
    assert response.status == 200, response
    return response.body["leases"]


# --- runs of a job ---


def test_list_runs_newest_first_with_pagination(api, clock):
    job_id = hourly(api)
    backfilled = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-02T03:00:00Z", "end": "2026-11-02T08:00:00Z"}
    )
    assert backfilled.status == 201, backfilled
    seen, cursor = [], None
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(f"/v1/jobs/{job_id}/runs", query=query)
        assert page.status == 200, page
        assert len(page.body["items"]) <= 2
        seen += [item["scheduledFor"] for item in page.body["items"]]
        cursor = page.body["nextCursor"]
        if not cursor:
            break
    assert seen == [f"2026-11-02T0{h}:00:00Z" for h in (8, 7, 6, 5, 4, 3)]
    item = api.get(f"/v1/jobs/{job_id}/runs", query="limit=2").body["items"][1]
    assert item["runKey"] == key_of(job_id, "2026-11-02T07:00:00Z")
    assert item["state"] == "PENDING" and item["trigger"] == "backfill"
    assert set(item) >= {
        "runKey", "jobId", "state", "trigger", "scheduledFor", "dueAt", "attempt", "fence", "redrives",
        "definitionVersion", "priority", "reason", "lastErrorClass", "lastErrorMessage", "result",
        "createdAt", "updatedAt", "finishedAt", "leaseExpiresAt", "skippedThrough", "skippedCount",
    }  # fmt: skip


def _listed(api, job_id, view, limit=100):
    seen, cursor = [], None
    while True:
        query = f"limit={limit}&view={view}" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(f"/v1/jobs/{job_id}/runs", query=query)
        assert page.status == 200, page
        seen += [item["scheduledFor"] for item in page.body["items"]]
        cursor = page.body["nextCursor"]
        if not cursor:
            return seen


def test_job_runs_split_into_history_by_default_and_upcoming(api, clock):
    """A 2-second job has a horizon of runs made ahead: the default (history) shows only what
    was due by now, newest first; `upcoming` the runs made ahead, soonest first; `all` both."""
    job_id = create(api, runAt=None, every=2)
    clock.advance(7)  # 08:00:00 .. 08:00:06 are due
    history = api.get(f"/v1/jobs/{job_id}/runs").body["items"]
    assert [r["scheduledFor"] for r in history] == [f"2026-11-02T08:00:0{s}Z" for s in (6, 4, 2, 0)]
    upcoming = _listed(api, job_id, "upcoming", limit=7)
    assert len(upcoming) > 20 and upcoming == sorted(upcoming)
    assert upcoming[0] == "2026-11-02T08:00:08Z"
    everything = _listed(api, job_id, "all")
    assert everything == sorted(upcoming + [r["scheduledFor"] for r in history], reverse=True)


def test_an_upcoming_cursor_still_pages_once_its_runs_are_due(api, clock):
    """A page of upcoming runs whose last run is due by the next request: the cursor resumes
    from its key (DynamoDB refuses a start key outside the query's range)."""
    job_id = create(api, runAt=None, every=2)
    first = api.get(f"/v1/jobs/{job_id}/runs", query="view=upcoming&limit=3").body
    assert [r["scheduledFor"][-3:] for r in first["items"]] == ["02Z", "04Z", "06Z"]
    clock.advance(30)
    second = api.get(f"/v1/jobs/{job_id}/runs", query=f"view=upcoming&limit=3&cursor={first['nextCursor']}")
    assert second.status == 200, second
    assert [r["scheduledFor"][-3:] for r in second.body["items"]] == ["08Z", "10Z", "12Z"]


def test_list_bounds_hold_the_cursor_key():
    from jobsched.store.runs import list_bounds, run_sk

    now = T0
    later = run_sk(T0 + timedelta(seconds=30))
    earlier = run_sk(T0 - timedelta(seconds=30))
    assert list_bounds("upcoming", now, None)[0] == run_sk(now) + "~~"
    assert list_bounds("upcoming", now, earlier)[0] == earlier
    assert list_bounds("history", now, None)[1] == run_sk(now) + "~~"
    assert list_bounds("history", now, later)[1] == later
    assert list_bounds("all", None, None) == ("R#", "R#~")
    with pytest.raises(ValueError, match="current instant"):
        list_bounds("history", None, None)


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=x", "limit"), ("cursor=bad!", "cursor"), ("view=future", "view")],
)
def test_list_runs_rejects_bad_query(api, query, field):
    job_id = create(api)
    assert field in errors_of(api.get(f"/v1/jobs/{job_id}/runs", query=query))


def test_list_runs_of_unknown_or_other_tenants_job_is_404(api, other_api):
    job_id = create(api)
    assert other_api.get(f"/v1/jobs/{job_id}/runs").status == 404
    assert api.get("/v1/jobs/j_unknown/runs").status == 404


# --- one run: transitions and attempts ---


def test_get_run_shows_transitions_and_attempts(api, clock, container, worker):
    job_id = create(api, type="flaky")
    key = key_of(job_id)
    assert deliver(worker, key).outcome is AttemptOutcome.RETRY_SCHEDULED
    clock.set(container.runs.get_by_key(key).due_at)
    assert deliver(worker, key).outcome is AttemptOutcome.SUCCEEDED

    run = run_of(api, key)
    assert run["state"] == "SUCCEEDED" and run["attempt"] == 2 and run["fence"] == 2
    assert run["result"] == "second time lucky"
    assert [(t["from"], t["to"], t["actor"], t["fence"]) for t in run["transitions"]] == [
        (None, "PENDING", "sweeper", 0),
        ("PENDING", "LEASED", "worker:w1", 1),
        ("LEASED", "RETRY_WAIT", "worker:w1", 1),
        ("RETRY_WAIT", "LEASED", "worker:w1", 2),
        ("LEASED", "SUCCEEDED", "worker:w1", 2),
    ]
    failed = run["transitions"][2]
    assert failed["errorClass"] == "HTTP503" and failed["errorMessage"] == "downstream 503"
    assert [(a["attempt"], a["fence"], a["outcome"], a["errorClass"]) for a in run["attempts"]] == [
        (1, 1, "failed", "HTTP503"),
        (2, 2, "succeeded", None),
    ]
    first = run["attempts"][0]
    assert first["startedAt"] == NOW and first["endedAt"] == NOW


def test_run_key_may_be_raw_or_percent_encoded(api):
    key = key_of(create(api))
    raw = api.get(f"/v1/runs/{key}")
    encoded = api.get(f"/v1/runs/{quote(key, safe='')}")
    assert raw.status == encoded.status == 200
    assert raw.body["runKey"] == encoded.body["runKey"] == key


def test_run_key_with_another_offset_finds_the_same_run(api):
    job_id = create(api)
    response = api.get(f"/v1/runs/{quote(job_id + '@2026-11-02T09:00:00+01:00', safe='')}")
    assert response.status == 200 and response.body["runKey"] == key_of(job_id)


@pytest.mark.parametrize("key", ["nonsense", "j_abc@", "@2026-11-02T08:00:00Z", "j_abc@yesterday"])
def test_malformed_or_unknown_run_key_is_404(api, key):
    response = api.get(f"/v1/runs/{quote(key, safe='')}")
    assert response.status == 404 and response.body["code"] == "not_found"


def test_other_tenants_run_is_404(api, other_api):
    key = key_of(create(api))
    assert other_api.get(f"/v1/runs/{key}").status == 404


# --- trigger ---


def test_trigger_creates_a_manual_run_now(api, clock):
    job_id = hourly(api)
    clock.advance(90)
    response = api.post(f"/v1/jobs/{job_id}/trigger")
    assert response.status == 201, response
    run = response.body
    # A key of its own: the second it was asked for, then ~m and 10 random characters.
    assert re.fullmatch(re.escape(key_of(job_id, "2026-11-02T08:01:30Z")) + r"~m[0-9a-z]{10}", run["runKey"])
    assert run["trigger"] == "manual" and run["state"] == "PENDING"
    assert run["scheduledFor"] == run["dueAt"] == "2026-11-02T08:01:30Z"
    assert run_of(api, run["runKey"])["transitions"][0]["actor"] == "api:tenant-a"


def test_triggers_in_one_second_each_get_their_own_run(api, clock):
    job_id = hourly(api)
    clock.advance(5)
    keys = {api.post(f"/v1/jobs/{job_id}/trigger").body["runKey"] for _ in range(3)}
    assert len(keys) == 3
    for key in keys:
        assert run_of(api, key)["trigger"] == "manual"


def test_a_trigger_whose_write_was_replayed_makes_one_run(api, container, clock, monkeypatch):
    """The table applied the insert, its answer was lost, and the SDK's retry was refused
    against the write itself: one trigger is still one manual run."""
    job_id = hourly(api)
    db = container.runs._db
    real_put = db.put_item
    replayed: list[str] = []

    def put_item(**request):
        answer = real_put(**request)
        if "~m" in request["Item"]["sk"]["S"] and "ConditionExpression" in request and not replayed:
            replayed.append(request["Item"]["sk"]["S"])
            return real_put(**request)  # the SDK's resend: ConditionalCheckFailed
        return answer

    monkeypatch.setattr(db, "put_item", put_item)
    response = api.post(f"/v1/jobs/{job_id}/trigger")
    assert response.status == 201, response
    assert replayed
    manual = [r for r in api.get(f"/v1/jobs/{job_id}/runs").body["items"] if r["trigger"] == "manual"]
    assert [r["runKey"] for r in manual] == [response.body["runKey"]]


def test_trigger_on_a_second_the_schedule_fires_is_not_refused(api, clock):
    """Every trigger of a per-second job used to collide with the scheduled run of its second."""
    job_id = api.post(
        "/v1/jobs", {"name": "every second", "type": "t", "cron": "* * * * * *", "timeZone": "UTC"}
    ).body["jobId"]
    assert run_of(api, key_of(job_id, "2026-11-02T08:00:01Z"))["state"] == "PENDING"
    clock.advance(1)
    response = api.post(f"/v1/jobs/{job_id}/trigger")
    assert response.status == 201, response
    assert response.body["runKey"].startswith(key_of(job_id, "2026-11-02T08:00:01Z") + "~m")
    # The scheduled run of that second is still there, untouched.
    assert run_of(api, key_of(job_id, "2026-11-02T08:00:01Z"))["trigger"] == "schedule"


def test_trigger_of_paused_job_is_409_naming_the_state(api):
    job_id = hourly(api)
    api.post(f"/v1/jobs/{job_id}/pause")
    response = api.post(f"/v1/jobs/{job_id}/trigger")
    assert response.status == 409 and "PAUSED" in response.body["message"]
    assert response.body["state"] == "PAUSED"


def test_trigger_of_cancelled_job_is_409(api):
    job_id = hourly(api)
    api.delete(f"/v1/jobs/{job_id}")
    response = api.post(f"/v1/jobs/{job_id}/trigger")
    assert response.status == 409 and "CANCELLED" in response.body["message"]


def test_trigger_of_other_tenants_job_is_404(api, other_api):
    job_id = hourly(api)
    assert other_api.post(f"/v1/jobs/{job_id}/trigger").status == 404
    assert scheduled_fors(api, job_id) == [NOW]


# --- backfill ---


def test_backfill_creates_each_occurrence_once(api):
    job_id = hourly(api)
    window = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T05:00:00Z"}
    first = api.post(f"/v1/jobs/{job_id}/backfill", window)
    assert first.status == 201, first
    expected = [key_of(job_id, f"2026-11-01T0{h}:00:00Z") for h in range(5)]
    assert first.body == {"created": expected, "existing": []}
    run = run_of(api, expected[0])
    assert run["trigger"] == "backfill" and run["state"] == "PENDING" and run["blockedBy"] is None

    again = api.post(f"/v1/jobs/{job_id}/backfill", window)
    assert again.status == 201 and again.body == {"created": [], "existing": expected}

    wider = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T03:30:00+00:00", "end": "2026-11-01T07:00:00Z"}
    )
    assert wider.body["existing"] == expected[4:]
    assert wider.body["created"] == [key_of(job_id, f"2026-11-01T0{h}:00:00Z") for h in (5, 6)]


def test_backfill_window_is_half_open(api):
    """[start, end): an occurrence exactly at start is made, one exactly at end is not, so
    back-to-back windows make each occurrence once, and none twice."""
    job_id = hourly(api)
    first = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T01:00:00Z", "end": "2026-11-01T05:00:00Z"}
    )
    assert first.status == 201, first
    assert first.body == {
        "created": [key_of(job_id, f"2026-11-01T0{h}:00:00Z") for h in (1, 2, 3, 4)],
        "existing": [],
    }
    assert "2026-11-01T05:00:00Z" not in scheduled_fors(api, job_id)

    next_window = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T05:00:00Z", "end": "2026-11-01T07:00:00Z"}
    )
    assert next_window.body == {
        "created": [key_of(job_id, f"2026-11-01T0{h}:00:00Z") for h in (5, 6)],
        "existing": [],
    }

    one_second = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T07:00:00Z", "end": "2026-11-01T07:00:01Z"}
    )
    assert one_second.body == {"created": [key_of(job_id, "2026-11-01T07:00:00Z")], "existing": []}
    # A fraction of a second rounds a bound up, never down: 08:00:00 is inside [07:59:59.2,
    # 08:00:00.5), and 09:00:00 outside [08:00:00.5, ...): occurrences are whole seconds.
    fractions = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T07:59:59.2Z", "end": "2026-11-01T08:00:00.5Z"}
    )
    assert fractions.body == {"created": [key_of(job_id, "2026-11-01T08:00:00Z")], "existing": []}
    later = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T08:00:00.5Z", "end": "2026-11-01T09:00:00Z"}
    )
    assert later.body == {"created": [], "existing": []}  # [08:00:01, 09:00:00) holds none
    up_to_now = api.post(f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T08:00:01Z", "end": NOW})
    assert up_to_now.status == 201, up_to_now  # end may be now; the occurrence at now is not backfilled
    day = [f"2026-11-01T{h:02d}:00:00Z" for h in range(9, 24)] + [f"2026-11-02T0{h}:00:00Z" for h in range(8)]
    assert up_to_now.body == {"created": [key_of(job_id, at) for at in day], "existing": []}
    # A client's "now" carries its fraction: an end within the current second is not in the
    # future, and reaches the occurrence at now (due now); one a second later would not be.
    this_second = api.post(f"/v1/jobs/{job_id}/backfill", {"start": NOW, "end": NOW[:-1] + ".999999Z"})
    assert this_second.body == {"created": [], "existing": [key_of(job_id, NOW)]}  # made at create
    future = api.post(f"/v1/jobs/{job_id}/backfill", {"start": NOW, "end": "2026-11-02T08:00:01.5Z"})
    assert future.status == 400 and errors_of(future) == {"end"}


def test_backfill_with_overlap_skip_chains_the_runs(api, container, clock):
    job_id = hourly(api, overlap="skip")
    response = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T03:00:00Z"}
    )
    keys = response.body["created"]
    assert len(keys) == 3
    assert [run_of(api, k)["blockedBy"] for k in keys] == [None, keys[0], keys[1]]
    # Blocked runs are invisible to external workers until their blocker finishes.
    assert [lease["runKey"] for lease in claim(api, max=10)] == [keys[0], key_of(job_id)]

    # Once the blocker ends, its completion releases the next run at once.
    lease = run_of(api, keys[0])
    done = api.post(f"/v1/leases/{keys[0]}/complete", {"fence": lease["fence"], "outcome": "succeeded"})
    assert done.status == 200, done
    assert run_of(api, keys[1])["blockedBy"] is None
    assert run_of(api, keys[2])["blockedBy"] == keys[1]
    # Cancelling a chained run releases its successor too.
    assert api.post(f"/v1/runs/{keys[1]}/cancel").status == 200
    assert run_of(api, keys[2])["blockedBy"] is None


def test_a_lost_release_is_repaired_by_the_reconciler(api, container, clock, monkeypatch):
    job_id = hourly(api, overlap="skip")
    keys = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T02:00:00Z"}
    ).body["created"]
    monkeypatch.setattr(container.completer, "unblock_successor", lambda run: None)
    lease = run_of(api, keys[0])
    claim(api, max=10)
    lease = run_of(api, keys[0])
    api.post(f"/v1/leases/{keys[0]}/complete", {"fence": lease["fence"], "outcome": "succeeded"})
    assert run_of(api, keys[1])["blockedBy"] == keys[0]
    clock.advance(timedelta(minutes=6).total_seconds())
    container.reconciler.reconcile_all()
    assert run_of(api, keys[1])["blockedBy"] is None


def test_backfill_with_overlap_allow_does_not_chain(api):
    job_id = hourly(api)
    keys = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T03:00:00Z"}
    ).body["created"]
    assert [run_of(api, k)["blockedBy"] for k in keys] == [None, None, None]


def test_backfill_over_the_limit_is_400_naming_start_and_end(api):
    job_id = create(api, runAt=None, cron="* * * * *")
    response = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-10-31T00:00:00Z", "end": "2026-11-01T00:00:00Z"}
    )
    assert errors_of(response) == {"start", "end"}
    assert "1000" in response.body["message"]
    assert api.get(f"/v1/jobs/{job_id}/runs", query="limit=100").body["items"][-1]["trigger"] == "schedule"


def test_backfill_of_exactly_the_limit_is_accepted(api):
    job_id = create(api, runAt=None, cron="* * * * *")
    # 1000 minutes, 00:00 to 16:39; the occurrence at end (16:40) is not counted.
    response = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T16:40:00Z"}
    )
    assert response.status == 201, response
    assert len(response.body["created"]) == 1000
    assert response.body["created"][-1] == key_of(job_id, "2026-11-01T16:39:00Z")


BAD_BACKFILL = [
    ({"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T09:00:00Z"}, "end"),
    ({"start": "2026-11-01T05:00:00Z", "end": "2026-11-01T05:00:00Z"}, "start"),
    ({"start": "2026-11-01T06:00:00Z", "end": "2026-11-01T05:00:00Z"}, "start"),
    ({"start": "yesterday", "end": "2026-11-01T05:00:00Z"}, "start"),
    ({"start": "2026-11-01T00:00:00", "end": "2026-11-01T05:00:00Z"}, "start"),
    ({"start": "2026-11-01T00:00:00Z"}, "end"),
    ({"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T05:00:00Z", "step": 1}, "step"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BACKFILL)
def test_bad_backfill_is_400_naming_the_field(api, body, field):
    job_id = hourly(api)
    response = api.post(f"/v1/jobs/{job_id}/backfill", body)
    assert field in errors_of(response), response
    assert scheduled_fors(api, job_id) == [NOW]


def test_backfill_of_paused_job_is_409(api):
    job_id = hourly(api)
    api.post(f"/v1/jobs/{job_id}/pause")
    response = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T02:00:00Z"}
    )
    assert response.status == 409 and response.body["state"] == "PAUSED"


def test_backfill_of_other_tenants_job_is_404(api, other_api):
    job_id = hourly(api)
    window = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T02:00:00Z"}
    assert other_api.post(f"/v1/jobs/{job_id}/backfill", window).status == 404
    assert scheduled_fors(api, job_id) == [NOW]


# --- dead letters and redrive ---


def test_dead_run_is_listed_for_its_tenant_only(api, other_api, worker):
    job_id = create(api, type="bad")
    key = key_of(job_id)
    assert deliver(worker, key).outcome is AttemptOutcome.DEAD
    listed = api.get("/v1/dead-letters")
    assert listed.status == 200
    assert [(r["runKey"], r["state"], r["lastErrorClass"]) for r in listed.body["items"]] == [
        (key, "DEAD", "HTTP400")
    ]
    assert other_api.get("/v1/dead-letters").body == {"items": [], "nextCursor": None}


def test_dead_letters_paginate_newest_first(api, clock, worker):
    jobs = []
    for i in range(3):
        job_id = hourly(api, type="bad", name=f"n{i}")
        clock.advance(1)
        key = api.post(f"/v1/jobs/{job_id}/trigger").body["runKey"]
        assert deliver(worker, key).outcome is AttemptOutcome.DEAD
        jobs.append(job_id)
    seen, cursor = [], None
    while True:
        page = api.get("/v1/dead-letters", query="limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert page.status == 200, page
        seen += [r["jobId"] for r in page.body["items"]]
        cursor = page.body["nextCursor"]
        if not cursor:
            break
    assert seen == list(reversed(jobs))


def test_redrive_reopens_the_dead_run_under_the_same_key(api, container, worker, calls):
    job_id = create(api, type="bad")
    key = key_of(job_id)
    assert deliver(worker, key).outcome is AttemptOutcome.DEAD

    response = api.post(f"/v1/runs/{quote(key, safe='')}/redrive", {"reason": "payload fixed"})
    assert response.status == 200, response
    run = response.body
    assert run["runKey"] == key and run["state"] == "PENDING"
    assert run["attempt"] == 0 and run["redrives"] == 1 and run["finishedAt"] is None
    last = run_of(api, key)["transitions"][-1]
    assert (last["from"], last["to"], last["actor"], last["reason"]) == (
        "DEAD",
        "PENDING",
        "api:tenant-a",
        "redrive: payload fixed",
    )
    assert api.get("/v1/dead-letters").body["items"] == []

    # The worker runs it again, this time successfully.
    assert deliver(worker, key).outcome is AttemptOutcome.SUCCEEDED
    done = run_of(api, key)
    assert done["state"] == "SUCCEEDED" and done["result"] == "fixed" and done["attempt"] == 1
    assert done["fence"] == 2 and calls[key] == 2
    assert [a["outcome"] for a in done["attempts"]] == ["dead", "succeeded"]


def test_redrive_without_a_body_records_plain_redrive(api, worker):
    key = key_of(create(api, type="bad"))
    deliver(worker, key)
    assert api.post(f"/v1/runs/{key}/redrive").status == 200
    assert run_of(api, key)["transitions"][-1]["reason"] == "redrive"


def test_redrive_of_a_run_that_is_not_dead_is_409(api):
    key = key_of(create(api))
    response = api.post(f"/v1/runs/{key}/redrive", {})
    assert response.status == 409 and response.body["state"] == "PENDING"


def test_redrive_reason_is_bounded(api, worker):
    key = key_of(create(api, type="bad"))
    deliver(worker, key)
    assert errors_of(api.post(f"/v1/runs/{key}/redrive", {"reason": "x" * 501})) == {"reason"}
    assert errors_of(api.post(f"/v1/runs/{key}/redrive", {"why": "x"})) == {"why"}
    assert run_of(api, key)["state"] == "DEAD"


def test_a_redrive_with_a_payload_runs_it_with_that_payload_and_says_so(api, container, worker, seen):
    job_id = create(api, type="rows", payload={"rows": -1})
    key = key_of(job_id)
    assert deliver(worker, key).outcome is AttemptOutcome.DEAD

    response = api.post(f"/v1/runs/{key}/redrive", {"reason": "rows fixed", "payload": {"rows": 3}})
    assert response.status == 200, response
    detail = run_of(api, key)
    assert detail["payload"] == {"rows": 3}
    assert detail["transitions"][-1]["reason"] == "redrive: payload replaced: 10 bytes; rows fixed"
    assert api.get(f"/v1/jobs/{job_id}").body["payload"] == {"rows": -1}  # the job is left as it was
    assert deliver(worker, key).outcome is AttemptOutcome.SUCCEEDED
    assert seen == [{"rows": -1}, {"rows": 3}]


def test_a_redrive_with_payload_null_sets_null_and_without_one_keeps_it(api, worker):
    first = key_of(create(api, type="rows", name="a", payload={"rows": -1}))
    second = key_of(create(api, type="rows", name="b", payload={"rows": -1}))
    deliver(worker, first), deliver(worker, second)
    assert api.post(f"/v1/runs/{first}/redrive", {"payload": None}).status == 200
    assert api.post(f"/v1/runs/{second}/redrive", {"reason": "again"}).status == 200
    assert run_of(api, first)["payload"] is None
    assert run_of(api, first)["transitions"][-1]["reason"] == "redrive: payload replaced: 4 bytes"
    assert run_of(api, second)["payload"] == {"rows": -1}


def test_a_redrive_fix_is_checked_as_a_job_write_and_refused_whole(api, worker):
    key = key_of(create(api, type="bad"))
    deliver(worker, key)
    big = {"blob": "x" * (64 * 1024)}
    assert errors_of(api.post(f"/v1/runs/{key}/redrive", {"payload": big})) == {"payload"}
    # A handler's run has no target to replace.
    target = {"kind": "http", "url": "https://hooks.example.com/run"}
    response = api.post(f"/v1/runs/{key}/redrive", {"target": target})
    assert response.status == 400 and response.body["errors"][0]["field"] == "target"
    assert "no target to replace" in response.body["errors"][0]["rule"]
    bad_url = {"target": {"kind": "http", "url": "ftp://x"}}
    assert errors_of(api.post(f"/v1/runs/{key}/redrive", bad_url)) == {"target.http.url"}
    assert run_of(api, key)["state"] == "DEAD" and run_of(api, key)["redrives"] == 0


def test_redrive_of_other_tenants_run_is_404(api, other_api, worker):
    key = key_of(create(api, type="bad"))
    deliver(worker, key)
    assert other_api.post(f"/v1/runs/{key}/redrive").status == 404
    assert run_of(api, key)["state"] == "DEAD"


# --- cancel a run ---


def test_cancel_an_open_run(api, container):
    job_id = create(api)
    key = key_of(job_id)
    response = api.post(f"/v1/runs/{quote(key, safe='')}/cancel")
    assert response.status == 200, response
    assert response.body["state"] == "CANCELLED" and response.body["reason"] == "cancelled by caller"
    assert run_of(api, key)["transitions"][-1]["actor"] == "api:tenant-a"
    assert container.definitions.counters(job_id)[0]["cancelled"] == 1
    again = api.post(f"/v1/runs/{key}/cancel")
    assert again.status == 409 and again.body["state"] == "CANCELLED"


def test_cancelled_lease_rejects_its_holders_completion(api):
    key = key_of(create(api))
    (lease,) = claim(api)
    assert api.post(f"/v1/runs/{key}/cancel").status == 200
    response = api.post(f"/v1/leases/{key}/complete", {"fence": lease["fence"], "outcome": "succeeded"})
    assert response.status == 409 and response.body["code"] == "stale_fence"
    assert run_of(api, key)["state"] == "CANCELLED"


def test_cancel_of_other_tenants_run_is_404(api, other_api):
    key = key_of(create(api))
    assert other_api.post(f"/v1/runs/{key}/cancel").status == 404
    assert run_of(api, key)["state"] == "PENDING"


# --- leases for external workers ---


def test_claim_returns_only_the_tenants_due_targetless_runs_of_the_asked_types(api, other_api):
    mine = key_of(create(api))
    theirs = key_of(create(other_api))
    create(api, type="other")
    create(api, target={"kind": "http", "url": "https://example.com/hook"})
    create(api, runAt="2026-11-02T08:01:00Z")  # not due yet

    leases = claim(api, max=10, leaseSeconds=120)
    assert [lease["runKey"] for lease in leases] == [mine]
    lease = leases[0]
    assert lease["type"] == "ext" and lease["attempt"] == 1 and lease["fence"] == 1
    assert lease["scheduledFor"] == NOW and lease["leaseExpiresAt"] == "2026-11-02T08:02:00Z"
    run = run_of(api, mine)
    assert run["state"] == "LEASED" and run["transitions"][-1]["actor"] == "lease:ext-1"

    assert claim(api, max=10) == []  # already leased
    assert [lease["runKey"] for lease in claim(other_api, max=10)] == [theirs]


def test_claim_stops_at_max_and_spans_types(api):
    for i in range(3):
        create(api, name=f"a{i}", runAt=f"2026-11-02T07:59:5{i}Z")
    create(api, type="other")
    assert len(claim(api, types=("ext", "other"), max=2)) == 2
    assert len(claim(api, types=("ext", "other"), max=10)) == 2


def test_claim_cancels_runs_of_a_paused_job(api):
    job_id = create(api, runAt=None, cron="0 8 * * *")  # first run at 08:00, now
    api.post(f"/v1/jobs/{job_id}/pause")
    assert claim(api) == []
    run = run_of(api, key_of(job_id))
    # Held, its attempt given back, for resume to decide under missedRuns.
    assert (run["state"], run["blockedBy"], run["attempt"]) == ("PENDING", "job-paused", 0)
    assert claim(api) == []


def test_heartbeat_extends_the_lease(api, clock):
    key = key_of(create(api))
    assert len(claim(api, leaseSeconds=30)) == 1
    clock.advance(20)
    response = api.post(f"/v1/leases/{quote(key, safe='')}/heartbeat", {"fence": 1, "leaseSeconds": 60})
    assert response.status == 200, response
    assert response.body == {"runKey": key, "fence": 1, "leaseExpiresAt": "2026-11-02T08:01:20Z"}
    assert run_of(api, key)["leaseExpiresAt"] == "2026-11-02T08:01:20Z"

    stale = api.post(f"/v1/leases/{key}/heartbeat", {"fence": 2})
    assert stale.status == 409 and stale.body["code"] == "stale_fence" and stale.body["currentFence"] == 1


def test_complete_succeeded(api, container):
    job_id = create(api)
    key = key_of(job_id)
    (lease,) = claim(api)
    response = api.post(
        f"/v1/leases/{key}/complete", {"fence": lease["fence"], "outcome": "succeeded", "result": {"rows": 3}}
    )
    assert response.status == 200, response
    assert response.body["state"] == "SUCCEEDED" and response.body["result"] == {"rows": 3}
    run = run_of(api, key)
    assert run["transitions"][-1]["actor"] == "lease:ext-1"
    assert run["attempts"] == [
        {
            "attempt": 1,
            "fence": 1,
            "startedAt": NOW,
            "endedAt": NOW,
            "outcome": "succeeded",
            "errorClass": None,
        }
    ]
    assert container.definitions.counters(job_id)[0]["succeeded"] == 1
    again = api.post(f"/v1/leases/{key}/complete", {"fence": 1, "outcome": "succeeded"})
    assert again.status == 409 and again.body["code"] == "stale_fence"


def test_completion_with_a_stale_fence_is_409_and_changes_nothing(api, clock, container):
    key = key_of(create(api))
    (first,) = claim(api, leaseSeconds=10)
    # The first worker goes quiet: its lease expires, the reconciler reopens the run, another claims it.
    clock.advance(10 + 31)
    container.reconciler.reconcile_all()
    second = api.post("/v1/leases", {"types": ["ext"], "workerId": "ext-2"}).body["leases"]
    assert [(lease["runKey"], lease["fence"]) for lease in second] == [(key, 2)]
    before = run_of(api, key)

    late = api.post(f"/v1/leases/{key}/complete", {"fence": first["fence"], "outcome": "succeeded"})
    assert late.status == 409, late
    assert late.body["code"] == "stale_fence" and late.body["currentFence"] == 2
    assert api.post(f"/v1/leases/{key}/heartbeat", {"fence": 1}).status == 409
    assert run_of(api, key) == before

    done = api.post(f"/v1/leases/{key}/complete", {"fence": 2, "outcome": "succeeded"})
    assert done.status == 200 and done.body["state"] == "SUCCEEDED"
    assert run_of(api, key)["transitions"][-1]["actor"] == "lease:ext-2"


def test_complete_failed_retryable_waits_to_retry(api, clock):
    key = key_of(create(api))
    claim(api)
    response = api.post(
        f"/v1/leases/{key}/complete",
        {"fence": 1, "outcome": "failed", "error": {"class": "Timeout", "message": "took too long"}},
    )
    assert response.status == 200, response
    run = response.body
    assert run["state"] == "RETRY_WAIT" and run["lastErrorClass"] == "Timeout"
    assert run["dueAt"] > NOW
    # Due again later, then claimable with the next fence.
    assert claim(api) == []
    clock.set(T0 + timedelta(minutes=10))
    assert [(lease["attempt"], lease["fence"]) for lease in claim(api)] == [(2, 2)]


def test_complete_failed_permanent_is_dead(api):
    key = key_of(create(api))
    claim(api)
    response = api.post(
        f"/v1/leases/{key}/complete",
        {
            "fence": 1,
            "outcome": "failed",
            "error": {"class": "BadInput", "message": "no", "retryable": False},
        },
    )
    assert response.status == 200 and response.body["state"] == "DEAD"
    assert response.body["lastErrorMessage"] == "no"
    assert [r["runKey"] for r in api.get("/v1/dead-letters").body["items"]] == [key]


def test_at_most_once_run_is_not_handed_out_again_after_a_failed_attempt(api, clock):
    key = key_of(create(api, delivery="at-most-once"))
    claim(api)
    failed = api.post(f"/v1/leases/{key}/complete", {**FAILED, "error": {"class": "Oops", "message": "m"}})
    # The effect may have started: at-most-once never tries it again, so no retry wait at all.
    assert failed.status == 200 and failed.body["state"] == "DEAD"
    assert failed.body["lastErrorClass"] == "Oops" and "at-most-once" in failed.body["lastErrorMessage"]
    clock.set(T0 + timedelta(minutes=10))
    assert claim(api) == []


BAD_CLAIMS = [
    ({"types": [], "workerId": "w"}, "types"),
    ({"types": ["a"] * 11, "workerId": "w"}, "types"),
    ({"types": ["has space"], "workerId": "w"}, "types.0"),
    ({"types": ["ext"]}, "workerId"),
    ({"types": ["ext"], "workerId": "w" * 129}, "workerId"),
    ({"types": ["ext"], "workerId": "w", "max": 0}, "max"),
    ({"types": ["ext"], "workerId": "w", "max": 11}, "max"),
    ({"types": ["ext"], "workerId": "w", "leaseSeconds": 9}, "leaseSeconds"),
    ({"types": ["ext"], "workerId": "w", "leaseSeconds": 901}, "leaseSeconds"),
    ({"types": ["ext"], "workerId": "w", "colour": "blue"}, "colour"),
    ({"types": "ext", "workerId": "w"}, "types"),
]


@pytest.mark.parametrize(("body", "field"), BAD_CLAIMS)
def test_bad_claim_is_400_naming_the_field(api, body, field):
    key = key_of(create(api))
    assert field in errors_of(api.post("/v1/leases", body))
    assert run_of(api, key)["state"] == "PENDING"


BAD_COMPLETIONS = [
    ({"outcome": "succeeded"}, "fence"),
    ({"fence": "one", "outcome": "succeeded"}, "fence"),
    ({"fence": 1, "outcome": "maybe"}, "outcome"),
    ({"fence": 1}, "outcome"),
    ({**FAILED, "error": {"message": "m"}}, "error.class"),
    ({**FAILED, "error": {"class": "X", "message": "m", "retryable": "sometimes"}}, "error.retryable"),
    ({"fence": 1, "outcome": "succeeded", "error": {"class": "X", "message": "m"}}, "error"),
]


@pytest.mark.parametrize(("body", "field"), BAD_COMPLETIONS)
def test_bad_completion_is_400_naming_the_field(api, body, field):
    key = key_of(create(api))
    claim(api)
    assert field in errors_of(api.post(f"/v1/leases/{key}/complete", body))
    assert run_of(api, key)["state"] == "LEASED"


@pytest.mark.parametrize(
    ("body", "field"), [({}, "fence"), ({"fence": 1, "leaseSeconds": 1000}, "leaseSeconds")]
)
def test_bad_heartbeat_is_400_naming_the_field(api, body, field):
    key = key_of(create(api))
    claim(api)
    assert field in errors_of(api.post(f"/v1/leases/{key}/heartbeat", body))


def test_lease_calls_on_a_run_never_claimed_are_409(api):
    key = key_of(create(api))
    response = api.post(f"/v1/leases/{key}/complete", {"fence": 0, "outcome": "succeeded"})
    assert response.status == 409 and response.body["code"] == "stale_fence"
    assert api.post(f"/v1/leases/{key}/heartbeat", {"fence": 0}).status == 409
    assert run_of(api, key)["state"] == "PENDING"


# --- job summary ---


def test_job_summary(api, clock):
    job_id = hourly(api)
    api.post(f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-02T00:00:00Z", "end": "2026-11-02T07:00:00Z"})
    (lease,) = claim(api, max=1)
    api.post(f"/v1/leases/{lease['runKey']}/complete", {"fence": lease["fence"], "outcome": "succeeded"})
    response = api.get(f"/v1/jobs/{job_id}/summary")
    assert response.status == 200, response
    body = response.body
    assert body["jobId"] == job_id
    assert body["nextFireTimes"] == [f"2026-11-02T{h:02d}:00:00Z" for h in range(8, 13)]
    assert [r["scheduledFor"] for r in body["lastRuns"]] == [
        f"2026-11-02T0{h}:00:00Z" for h in (8, 6, 5, 4, 3)
    ]
    assert body["counters"] == {
        "missed": 0,
        "overlapSkipped": 0,
        "excluded": 0,
        "succeeded": 1,
        "dead": 0,
        "cancelled": 0,
    }


# --- tenant isolation and documents ---


def test_every_run_route_is_404_for_another_tenant(api, other_api):
    job_id = hourly(api, type="cron")
    key = key_of(create(api))
    (lease,) = claim(api)
    window = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T01:00:00Z"}
    attempts = [
        other_api.get(f"/v1/jobs/{job_id}/runs"),
        other_api.get(f"/v1/jobs/{job_id}/summary"),
        other_api.post(f"/v1/jobs/{job_id}/trigger"),
        other_api.post(f"/v1/jobs/{job_id}/backfill", window),
        other_api.get(f"/v1/runs/{key}"),
        other_api.post(f"/v1/runs/{key}/redrive"),
        other_api.post(f"/v1/runs/{key}/cancel"),
        other_api.post(f"/v1/leases/{key}/heartbeat", {"fence": lease["fence"]}),
        other_api.post(f"/v1/leases/{key}/complete", {"fence": lease["fence"], "outcome": "succeeded"}),
    ]
    assert [r.status for r in attempts] == [404] * len(attempts)
    assert other_api.post("/v1/leases", {"types": ["ext"], "workerId": "x"}).body["leases"] == []
    assert run_of(api, key)["state"] == "LEASED" and run_of(api, key)["fence"] == lease["fence"]
    assert scheduled_fors(api, job_id) == [NOW]


def test_unauthenticated_caller_is_401(container):
    from tests.helpers import ApiClient

    anonymous = ApiClient(None)
    assert anonymous.get("/v1/dead-letters").status == 401
    assert anonymous.post("/v1/leases", {"types": ["ext"], "workerId": "w"}).status == 401


def test_openapi_document_lists_the_run_routes(api):
    paths = api.get("/openapi.json").body["paths"]
    assert {
        "/v1/jobs/{job_id}/runs",
        "/v1/jobs/{job_id}/summary",
        "/v1/jobs/{job_id}/trigger",
        "/v1/jobs/{job_id}/backfill",
        "/v1/runs/{run_key}",
        "/v1/runs/{run_key}/redrive",
        "/v1/runs/{run_key}/cancel",
        "/v1/dead-letters",
        "/v1/leases",
        "/v1/leases/{run_key}/heartbeat",
        "/v1/leases/{run_key}/complete",
    } <= set(paths)


# --- what the user sees: why a run waits, and which error is its own ---


def test_a_run_no_handler_runs_says_it_waits_for_an_external_worker(api):
    job_id = create(api, type="report.build")
    expected = "waiting for an external worker (no handler for type report.build, no target)"
    assert run_of(api, key_of(job_id))["waitingFor"] == expected
    (item,) = api.get(f"/v1/jobs/{job_id}/runs").body["items"]
    assert item["waitingFor"] == expected


def test_a_run_of_a_paused_job_says_job_paused(api):
    job_id = hourly(api, type="report.build")
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    assert run_of(api, key_of(job_id))["waitingFor"] == "job paused"


def test_a_leased_run_and_a_finished_one_wait_for_nothing(api):
    key = key_of(create(api))
    (lease,) = claim(api)
    assert run_of(api, key)["waitingFor"] is None
    api.post(f"/v1/leases/{key}/complete", {"fence": lease["fence"], "outcome": "succeeded"})
    assert run_of(api, key)["waitingFor"] is None


def test_a_run_succeeded_after_a_redrive_shows_no_error(api, worker):
    job_id = create(api, type="bad")
    key = key_of(job_id)
    assert deliver(worker, key).outcome is AttemptOutcome.DEAD
    assert run_of(api, key)["lastErrorClass"] == "HTTP400"
    assert api.post(f"/v1/runs/{quote(key, safe='')}/redrive", {}).status == 200
    assert deliver(worker, key).outcome is AttemptOutcome.SUCCEEDED

    done = run_of(api, key)
    assert done["state"] == "SUCCEEDED"
    assert (done["lastErrorClass"], done["lastErrorMessage"]) == (None, None)
    # The failure stays where it happened: in the attempts and the transitions.
    assert [a["errorClass"] for a in done["attempts"]] == ["HTTP400", None]
    assert any(t["errorClass"] == "HTTP400" for t in done["transitions"])
    (item,) = api.get(f"/v1/jobs/{job_id}/runs").body["items"]
    assert item["lastErrorClass"] is None


def test_a_second_complete_says_the_lease_already_ended(api):
    key = key_of(create(api))
    (lease,) = claim(api)
    assert (
        api.post(f"/v1/leases/{key}/complete", {"fence": lease["fence"], "outcome": "succeeded"}).status
        == 200
    )
    again = api.post(f"/v1/leases/{key}/complete", {"fence": lease["fence"], "outcome": "succeeded"})
    assert again.status == 409 and again.body["code"] == "stale_fence"
    assert again.body["message"] == f"the lease under fence 1 has already ended: run {key} is SUCCEEDED"
    assert "no longer holds" not in again.body["message"]


def test_a_single_attempt_run_is_not_said_to_have_exhausted_retries(api, worker):
    key = key_of(create(api, type="flaky", maxAttempts=1))
    assert deliver(worker, key).outcome is AttemptOutcome.DEAD
    dead = run_of(api, key)
    assert dead["lastErrorMessage"] == "downstream 503; not retried (maxAttempts is 1)"


def test_a_queued_run_of_a_tenant_at_its_limit_says_so(api, container, monkeypatch):
    from jobsched.targets import registry

    # A type this process runs itself (so not one for external workers).
    monkeypatch.setitem(registry._handlers, "inhouse", lambda payload, invocation: None)
    container.tenant_slots.limit = 1
    create(api, runAt="2026-11-02T07:59:00Z")
    (held,) = claim(api)  # the tenant's one slot
    key = key_of(create(api, type="inhouse"))
    container.outbox.publish([container.runs.get_by_key(key)])
    assert run_of(api, key)["state"] == "QUEUED"
    assert run_of(api, key)["waitingFor"] == "tenant at its concurrency limit (1 of 1 leased)"

    api.post(f"/v1/leases/{held['runKey']}/complete", {"fence": held["fence"], "outcome": "succeeded"})
    assert run_of(api, key)["waitingFor"] == "waiting for a worker"


def test_a_lease_whose_claim_landed_after_its_end_is_given_back_not_handed_out(
    api, container, clock, monkeypatch
):
    """A claimer frozen past its lease between the claim and the hand-out: the lease may have
    lost its tenant slot meanwhile (store.tenant_slots), so no external effect may start
    under it. The attempt is given back, not counted."""
    key = key_of(create(api))
    attempts = container.run_service._attempts
    real = attempts.check_job

    def frozen(leased, *, actor):
        clock.advance(61)
        return real(leased, actor=actor)

    monkeypatch.setattr(attempts, "check_job", frozen)
    assert claim(api, leaseSeconds=60) == []
    run = run_of(api, key)
    assert run["state"] != "LEASED"
    assert [(a["attempt"], a["outcome"]) for a in run["attempts"]] == [(1, "held")]
    clock.advance(30)  # its give-back's wait: the next claim is attempt 1 again, and handed out
    monkeypatch.setattr(attempts, "check_job", real)
    (lease,) = claim(api)
    assert (lease["runKey"], lease["attempt"]) == (key, 1)


def test_a_run_buffered_behind_its_running_predecessor_names_it(api, container, clock):
    job_id = create(api, runAt=None, cron="* * * * *", overlap="buffer-one")
    (first,) = claim(api)  # 08:00 is running
    clock.advance(60)
    container.sweeper.sweep()
    second = key_of(job_id, "2026-11-02T08:01:00Z")
    assert run_of(api, second)["waitingFor"] == f"buffered behind {first['runKey']}"


def test_an_attempt_held_by_its_jobs_pause_reads_held_not_running(api, worker, clock):
    """The worker claims the run, finds the job paused and gives the attempt back: that claim
    ended (`held`, with its end time) and was not counted, so the next claim is attempt 1 too."""
    job_id = create(api, type="ok", runAt=None, every=60)
    key = key_of(job_id, "2026-11-02T08:01:00Z")  # made ahead at creation
    clock.advance(10)
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 200
    clock.advance(50)
    assert deliver(worker, key).outcome is AttemptOutcome.HELD
    clock.advance(10)
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 200
    assert deliver(worker, key).outcome is AttemptOutcome.SUCCEEDED
    attempts = run_of(api, key)["attempts"]
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "held"), (1, "succeeded")], attempts
    assert all(a["endedAt"] for a in attempts)


# --- cancelling a job cancels its runs that have not started ---


def test_cancelling_a_job_cancels_its_unstarted_runs_at_once(api, container, clock):
    # Every 10 s, of a type no handler runs: external workers lease its runs. Its runs are
    # made at creation up to the API's horizon (08:00:00 to 08:02:00).
    job_id = create(api, runAt=None, cron="*/10 * * * * *")
    leased = key_of(job_id)
    (lease,) = claim(api)  # 08:00:00, mid-effect in an external worker
    clock.advance(10)
    queued = key_of(job_id, "2026-11-02T08:00:10Z")
    container.outbox.publish([container.runs.get_by_key(queued)])
    assert run_of(api, queued)["state"] == "QUEUED"
    assert run_of(api, queued)["waitingFor"].startswith("waiting for an external worker")
    pending = key_of(job_id, "2026-11-02T08:01:00Z")
    assert run_of(api, pending)["state"] == "PENDING"

    assert api.delete(f"/v1/jobs/{job_id}").status == 200

    for key in (queued, pending):
        run = run_of(api, key)
        assert (run["state"], run["reason"], run["waitingFor"]) == ("CANCELLED", "job cancelled", None)
        assert run["transitions"][-1]["actor"] == "api:tenant-a"
    ours = api.get(f"/v1/jobs/{job_id}/runs", query="limit=100&view=all").body["items"]
    across = api.get("/v1/runs", query="limit=100").body["items"]  # the due ones
    for listed, count in ((ours, 13), (across, 2)):
        states = {item["runKey"]: item["state"] for item in listed if item["jobId"] == job_id}
        assert len(states) == count
        assert states.pop(leased) == "LEASED"
        assert set(states.values()) == {"CANCELLED"}
    # The leased run is its holder's: not overwritten, its fence unchanged.
    run = run_of(api, leased)
    assert (run["state"], run["fence"]) == ("LEASED", lease["fence"])
    assert container.definitions.counters(job_id)[0]["cancelled"] == 12


def test_cancelling_a_job_pages_through_its_runs(api, container, monkeypatch):
    from jobsched.services import runs as run_service

    monkeypatch.setattr(run_service, "CANCEL_PAGE", 3)
    job_id = create(api, runAt=None, cron="*/10 * * * * *")
    assert api.delete(f"/v1/jobs/{job_id}").status == 200
    items = api.get(f"/v1/jobs/{job_id}/runs", query="limit=100&view=all").body["items"]
    assert len(items) == 13 and {item["state"] for item in items} == {"CANCELLED"}


def test_cancelling_a_job_stops_at_its_page_bound_and_leaves_the_rest_to_the_claim(
    api, container, monkeypatch
):
    """The cancel answers an API request: it reads at most CANCEL_PAGES pages. The runs past
    them stay open, to be cancelled at their claim's check of the job."""
    from jobsched.services import runs as run_service

    monkeypatch.setattr(run_service, "CANCEL_PAGE", 3)
    monkeypatch.setattr(run_service, "CANCEL_PAGES", 2)
    job_id = create(api, runAt=None, cron="*/10 * * * * *")
    assert api.delete(f"/v1/jobs/{job_id}").status == 200
    items = api.get(f"/v1/jobs/{job_id}/runs", query="limit=100&view=all").body["items"]
    states = [item["state"] for item in items]
    assert len(states) == 13 and states.count("CANCELLED") == 6
