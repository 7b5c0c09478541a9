"""`POST /v1/dead-letters/redrive` and `/cancel`: many dead letters in one audited request,
by filter or by run keys, dry run first, bounded and resumable, each run refused on its own
(another tenant's, not dead, at-most-once), through the real `api` handler on moto."""

from __future__ import annotations

import pytest
from jobsched.domain.runs import RunState
from jobsched.services.attempt import AttemptOutcome

from tests.integration.test_api_runs import calls as calls
from tests.integration.test_api_runs import create, deliver, errors_of, key_of, run_of
from tests.integration.test_api_runs import seen as seen
from tests.integration.test_api_runs import worker as worker

pytestmark = pytest.mark.integration


def dead_letters(api, worker, count, job_type="bad", **fields):
    keys = []
    for i in range(count):
        key = key_of(create(api, type=job_type, name=f"{job_type}{i}", **fields))
        assert deliver(worker, key).outcome is AttemptOutcome.DEAD
        keys.append(key)
    return keys


def dead_keys(api):
    return {item["runKey"] for item in api.get("/v1/dead-letters", query="limit=100").body["items"]}


def test_a_dry_run_answers_what_a_redrive_then_changes_each_with_its_own_entry(api, other_api, worker):
    mine = dead_letters(api, worker, 3)
    theirs = dead_letters(other_api, worker, 1)
    dry = api.post(
        "/v1/dead-letters/redrive", {"reason": "target fixed", "dryRun": True, "errorClass": "HTTP400"}
    )
    assert dry.status == 200, dry.body
    assert dry.body["dryRun"] is True and dry.body["count"] == 3 and set(dry.body["runKeys"]) == set(mine)
    assert dead_keys(api) == set(mine)  # nothing changed

    done = api.post("/v1/dead-letters/redrive", {"reason": "target fixed", "errorClass": "HTTP400"})
    assert done.status == 200, done.body
    assert set(done.body["runKeys"]) == set(mine) and done.body["refused"] == []
    request_id = done.body["requestId"]
    for key in mine:
        run = run_of(api, key)
        assert run["state"] == "PENDING" and run["redrives"] == 1
        last = run["transitions"][-1]
        assert (
            last["actor"] == "api:tenant-a"
            and request_id in last["reason"]
            and "target fixed" in last["reason"]
        )
    assert dead_keys(api) == set()
    assert dead_keys(other_api) == set(theirs)


def test_named_runs_are_refused_one_by_one_and_the_rest_changed(api, other_api, worker):
    (dead,) = dead_letters(api, worker, 1)
    (theirs,) = dead_letters(other_api, worker, 1)
    alive = key_of(create(api, type="ok", name="alive"))
    answer = api.post(
        "/v1/dead-letters/redrive",
        {"reason": "retry", "runKeys": [dead, theirs, alive, "not-a-key", dead]},
    )
    assert answer.status == 200, answer.body
    assert answer.body["runKeys"] == [dead]
    assert {(r["runKey"], r["code"]) for r in answer.body["refused"]} == {
        (theirs, "not_found"),
        (alive, "conflict"),
        ("not-a-key", "not_found"),
    }
    assert run_of(other_api, theirs)["state"] == "DEAD"


def test_cancel_dismisses_dead_letters_for_good(api, worker):
    keys = dead_letters(api, worker, 2)
    answer = api.post("/v1/dead-letters/cancel", {"reason": "obsolete", "runKeys": keys})
    assert answer.status == 200 and answer.body["count"] == 2, answer.body
    for key in keys:
        run = run_of(api, key)
        assert run["state"] == "CANCELLED"
        assert answer.body["requestId"] in run["transitions"][-1]["reason"]
    assert dead_keys(api) == set()
    again = api.post("/v1/dead-letters/redrive", {"reason": "oops", "runKeys": keys})
    assert again.body["count"] == 0 and {r["code"] for r in again.body["refused"]} == {"conflict"}


def test_a_filtered_request_is_bounded_and_resumes_from_its_cursor(api, worker):
    keys = dead_letters(api, worker, 5)
    changed, cursor, requests = [], None, 0
    while True:
        body = {"reason": "bulk", "limit": 2, **({"cursor": cursor} if cursor else {})}
        answer = api.post("/v1/dead-letters/cancel", body)
        assert answer.status == 200, answer.body
        assert answer.body["count"] <= 2
        changed += answer.body["runKeys"]
        requests += 1
        if not (cursor := answer.body["nextCursor"]):
            break
    assert sorted(changed) == sorted(keys) and requests >= 3


def test_an_at_most_once_run_that_may_have_acted_is_redriven_only_when_accepted(api, container, worker):
    (key,) = dead_letters(api, worker, 1, delivery="at-most-once")
    run = container.runs.get_by_key(key)
    assert run.effect_started_at is not None  # its one attempt marked the effect started
    for body in ({"runKeys": [key]}, {"errorClass": "HTTP400"}):
        refused = api.post("/v1/dead-letters/redrive", {"reason": "r", "dryRun": True, **body})
        assert refused.body["count"] == 0 and refused.body["refused"][0]["code"] == "effect_may_repeat"
    accepted = api.post(
        "/v1/dead-letters/redrive", {"reason": "r", "runKeys": [key], "acceptRepeatedEffect": True}
    )
    assert accepted.body["runKeys"] == [key]
    after = container.runs.get_by_key(key)
    assert after.state is RunState.PENDING and "accepted by the caller" in after.history[-1].reason


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "reason"),
        ({"reason": "r", "runKeys": ["j_a@2026-11-02T08:00:00Z"], "jobId": "j_abc"}, "jobId"),
        ({"reason": "r", "runKeys": ["k"], "cursor": "c"}, "cursor"),
        ({"reason": "r", "runKeys": []}, "runKeys"),
        ({"reason": "r", "runKeys": ["k"] * 101}, "runKeys"),
        ({"reason": "r", "limit": 101}, "limit"),
        ({"reason": "r", "dryRun": "yes"}, "dryRun"),
        ({"reason": "r", "since": "2026-11-02T09:00:00Z", "until": "2026-11-02T08:00:00Z"}, "until"),
        ({"reason": "r", "cursor": "bm9wZQ"}, "cursor"),
    ],
)
def test_bad_bulk_requests_are_a_400_naming_the_field(api, body, field):
    assert field in errors_of(api.post("/v1/dead-letters/redrive", body))


def test_a_redrive_of_one_jobs_dead_letters_may_carry_a_fixed_payload(api, worker, seen):
    (key,) = dead_letters(api, worker, 1, job_type="rows", payload={"rows": 0})
    job_id = key.split("@", 1)[0]
    (other,) = dead_letters(api, worker, 1, job_type="rows", payload={"rows": -1})
    fixed = {"reason": "rows fixed", "jobId": job_id, "payload": {"rows": 7}}
    dry = api.post("/v1/dead-letters/redrive", {**fixed, "dryRun": True})
    assert dry.status == 200 and dry.body["runKeys"] == [key], dry.body
    done = api.post("/v1/dead-letters/redrive", fixed)
    assert done.status == 200 and done.body["runKeys"] == [key], done.body
    assert deliver(worker, key).outcome is AttemptOutcome.SUCCEEDED
    assert seen[-1] == {"rows": 7}
    reasons = [t["reason"] or "" for t in run_of(api, key)["transitions"]]
    assert any("payload replaced: 10 bytes; rows fixed" in r for r in reasons), reasons
    assert run_of(api, other)["state"] == "DEAD"  # another job's dead letter is left alone


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("redrive", {"reason": "r", "payload": {"rows": 1}}, "payload"),
        ("redrive", {"reason": "r", "runKeys": ["j_a@2026-11-02T08:00:00Z"], "payload": 1}, "payload"),
        ("cancel", {"reason": "r", "jobId": "j_abc", "payload": 1}, "payload"),
        ("redrive", {"reason": "r", "jobId": "j_abc", "payload": "x" * 70_000}, "payload"),
        ("redrive", {"reason": "r", "jobId": "j_abc", "target": {"kind": "http", "url": "ftp://x"}}, None),
    ],
)
def test_a_fix_applies_only_to_a_redrive_of_one_job(api, path, body, field):
    found = errors_of(api.post(f"/v1/dead-letters/{path}", body))
    assert (field in found) if field else any(f.startswith("target") for f in found), found
