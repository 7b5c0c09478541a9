"""Every /v1/jobs route through the real `api` handler on moto, including its failures."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import boto3
import pytest
from jobsched.store.schema import DEFINITIONS

from tests.helpers import ANY_AWS_TARGET, grant

CRON_JOB = {
    "name": "nightly report",
    "type": "report.build",
    "cron": "0 9 * * *",
    "timeZone": "Europe/London",
    "payload": {"format": "pdf"},
}


def create(api, **overrides):
    response = api.post("/v1/jobs", {**CRON_JOB, **overrides})
    assert response.status == 201, response
    return response.body


def raw_item(job_id: str) -> dict:
    return boto3.client("dynamodb").get_item(
        TableName=DEFINITIONS.default_name, Key={"job_id": {"S": job_id}}
    )["Item"]


# --- create ---


def test_create_cron_job_returns_201_with_version_and_next_run(api):
    response = api.post("/v1/jobs", CRON_JOB)
    assert response.status == 201, response
    body = response.body
    assert body["jobId"].startswith("j_")
    assert body["version"] == 1
    assert body["state"] == "ACTIVE"
    # 2026-11-02 is GMT in London: 09:00 local is 09:00Z.
    assert body["nextRunAt"] == "2026-11-02T09:00:00Z"
    assert body["createdAt"] == body["updatedAt"] == "2026-11-02T08:00:00Z"
    assert response.headers["ETag"] == '"1"'
    assert body["missedRuns"] == "run-once" and body["overlap"] == "allow"
    assert body["dst"] == {"gap": "shift", "fold": "first"}


def test_create_one_time_job(api):
    body = create(api, cron=None, timeZone=None, runAt="2026-11-02T09:00:15+01:00")
    assert body["runAt"] == "2026-11-02T08:00:15Z"
    assert body["nextRunAt"] == "2026-11-02T08:00:15Z"


@pytest.mark.parametrize("every", ["PT15M", 900])
def test_create_rate_job_counts_from_creation(api, every):
    body = create(api, cron=None, timeZone=None, every=every)
    assert body["every"] == 900
    assert body["nextRunAt"] == "2026-11-02T08:00:00Z"


def test_rate_job_counts_from_start_at(api):
    body = create(api, cron=None, timeZone=None, every="PT1H", startAt="2026-11-03T00:00:30Z")
    assert body["nextRunAt"] == "2026-11-03T00:00:30Z"


def test_six_field_cron_with_seconds(api):
    body = create(api, cron="*/10 * * * * *", timeZone="Europe/London")
    assert body["nextRunAt"] == "2026-11-02T08:00:00Z"
    got = api.get(f"/v1/jobs/{body['jobId']}").body["nextFireTimes"]
    assert got == [f"2026-11-02T08:00:{s:02d}Z" for s in (0, 10, 20, 30, 40)]


def test_cron_defaults_to_utc(api):
    body = create(api, cron="30 10 * * *", timeZone=None)
    assert body["timeZone"] == "UTC" and body["nextRunAt"] == "2026-11-02T10:30:00Z"


def test_once_in_past_within_catch_up_window_is_accepted(api):
    body = create(api, cron=None, timeZone=None, runAt="2026-11-02T07:59:00Z", catchUpWindow="PT5M")
    assert body["runAt"] == "2026-11-02T07:59:00Z"
    # It runs at once, late: nextRunAt names only instants still to come, never a past one.
    assert body["nextRunAt"] is None
    (run,) = api.get(f"/v1/jobs/{body['jobId']}/runs").body["items"]
    assert run["scheduledFor"] == "2026-11-02T07:59:00Z" and run["state"] == "PENDING"


BAD_INPUT = [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "* * *"}, "cron"),
    ({"timeZone": "Mars/Olympus"}, "timeZone"),
    ({"cron": None, "timeZone": None, "runAt": "2026-11-01T08:00:00Z"}, "runAt"),
    ({"cron": None, "timeZone": None, "runAt": "tomorrow"}, "runAt"),
    ({"cron": None, "timeZone": None, "runAt": "2026-11-03T08:00:00"}, "runAt"),
    ({"payload": {"blob": "x" * (64 * 1024)}}, "payload"),
    ({"colour": "blue"}, "colour"),
    ({"maxRuns": "many"}, "maxRuns"),
    ({"maxRuns": 0}, "maxRuns"),
    ({"priority": "urgent"}, "priority"),
    ({"missedRuns": "sometimes"}, "missedRuns"),
    ({"runAt": "2026-11-03T08:00:00Z"}, "schedule"),
    ({"cron": None, "timeZone": None}, "schedule"),
    ({"cron": None, "timeZone": None, "every": 0}, "every"),
    ({"cron": None, "timeZone": None, "every": 1.5}, "every"),
    ({"cron": None, "every": 60}, "timeZone"),
    ({"retry": {"baseSeconds": 10, "capSeconds": 1}}, "retry.capSeconds"),
    ({"retry": {"baseSeconds": -1}}, "retry.baseSeconds"),
    ({"maxAttempts": 0}, "maxAttempts"),
    ({"catchUpWindow": -5}, "catchUpWindow"),
    ({"jitterSeconds": 99999}, "jitterSeconds"),
    ({"startAt": "2026-11-05T00:00:00Z", "endAt": "2026-11-04T00:00:00Z"}, "endAt"),
    ({"endAt": "2026-11-01T00:00:00Z"}, "endAt"),
    ({"cron": "0 0 30 2 *"}, "cron"),
    ({"type": "has spaces"}, "type"),
    ({"name": ""}, "name"),
    ({"target": {"kind": "http", "url": "ftp://example.com/x"}}, "target.http.url"),
    ({"target": {"kind": "carrier-pigeon"}}, "target.kind"),
    ({"target": {"kind": "lambda"}}, "target.lambda.functionArn"),
    ({"dst": {"gap": "sideways"}}, "dst.gap"),
    ({"delivery": "exactly-once"}, "delivery"),
]


@pytest.mark.parametrize(("change", "field"), BAD_INPUT, ids=[f for _, f in BAD_INPUT])
def test_bad_input_is_400_naming_the_field(api, change, field):
    body = {k: v for k, v in {**CRON_JOB, **change}.items() if v is not None}
    response = api.post("/v1/jobs", body)
    assert response.status == 400, response
    assert response.body["code"] == "invalid_request"
    fields = [e["field"] for e in response.body["errors"]]
    assert field in fields, response
    assert all(e["rule"] for e in response.body["errors"])


# --- JSON types are strict: nothing is coerced, each refusal names the field and the rule ---

RATE = {"cron": None, "timeZone": None, "every": 60}
DURATION_RULE = "ISO 8601 duration"
HTTP_TARGET = {"kind": "http", "url": "https://example.com/hook"}
NOT_COERCED: list[tuple[dict[str, Any], str, str]] = [
    ({**RATE, "every": True}, "every", DURATION_RULE),
    ({**RATE, "every": "30"}, "every", DURATION_RULE),
    ({**RATE, "every": "banana"}, "every", DURATION_RULE),
    ({**RATE, "every": "P1M"}, "every", DURATION_RULE),  # a month has no fixed length
    ({**RATE, "every": "-PT1M"}, "every", DURATION_RULE),
    ({**RATE, "every": [60]}, "every", DURATION_RULE),
    ({"catchUpWindow": False}, "catchUpWindow", DURATION_RULE),
    ({"catchUpWindow": "3600"}, "catchUpWindow", DURATION_RULE),
    ({"maxAttempts": "3"}, "maxAttempts", "integer"),
    ({"maxAttempts": 3.0}, "maxAttempts", "integer"),
    ({"maxAttempts": True}, "maxAttempts", "integer"),
    ({"maxRuns": "2"}, "maxRuns", "integer"),
    ({"jitterSeconds": True}, "jitterSeconds", "integer"),
    ({"timeoutSeconds": "60"}, "timeoutSeconds", "integer"),
    ({"pauseOnFailure": "false"}, "pauseOnFailure", "boolean"),
    ({"pauseOnFailure": 0}, "pauseOnFailure", "boolean"),
    ({"retry": {"baseSeconds": "2"}}, "retry.baseSeconds", "number"),
    ({"retry": {"capSeconds": True}}, "retry.capSeconds", "number"),
    ({"retry": {"maxAgeSeconds": 60.0}}, "retry.maxAgeSeconds", "integer"),
    ({"target": {**HTTP_TARGET, "timeoutSeconds": "5"}}, "target.http.timeoutSeconds", "number"),
    ({"target": {**HTTP_TARGET, "timeoutSeconds": True}}, "target.http.timeoutSeconds", "number"),
    ({"cron": None, "timeZone": None, "runAt": 1793606400}, "runAt", "RFC 3339"),
    ({"startAt": 1793606400}, "startAt", "RFC 3339"),
    ({"endAt": "2027-01-01"}, "endAt", "RFC 3339"),
    ({"name": 7}, "name", "string"),
]


@pytest.mark.parametrize(
    ("change", "field", "rule"),
    NOT_COERCED,
    ids=[f"{f}={c.get(f.split('.')[0])!r}" for c, f, _ in NOT_COERCED],
)
def test_json_types_are_not_coerced(api, change, field, rule):
    body = {k: v for k, v in {**CRON_JOB, **change}.items() if v is not None}
    response = api.post("/v1/jobs", body)
    assert response.status == 400, response
    errors = {e["field"]: e["rule"] for e in response.body["errors"]}
    assert field in errors and rule in errors[field], response
    assert api.get("/v1/jobs").body["items"] == []


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e400"])
@pytest.mark.parametrize("field", ["retry.capSeconds", "payload", "maxRuns"])
def test_nan_and_infinity_are_refused_not_stored_as_null(api, raw, field):
    body: dict[str, Any] = {"name": "n", "type": "ext", "every": 60, "retry": {"baseSeconds": 1}}
    text = json.dumps({**body, "retry": {**body["retry"], "capSeconds": 5}, "payload": 1, "maxRuns": 1})
    top, _, leaf = field.partition(".")
    old = f'"{leaf or top}": {5 if leaf else 1}'
    assert old in text
    response = api.request("POST", "/v1/jobs", raw_body=text.replace(old, f'"{leaf or top}": {raw}'))
    assert response.status == 400, response
    assert [e["field"] for e in response.body["errors"]] == [field]


@pytest.mark.parametrize("every", ["PT15M", 900, 900.0, "PT900S", "P0DT0H15M", "PT14M60.0S"])
def test_durations_take_their_two_documented_forms(api, every):
    assert create(api, cron=None, timeZone=None, every=every)["every"] == 900


@pytest.mark.parametrize(("every", "seconds"), [("P1W", 604800), ("P1DT2H", 93600), ("PT1H", 3600)])
def test_iso_durations_in_weeks_days_hours(api, every, seconds):
    assert create(api, cron=None, timeZone=None, every=every)["every"] == seconds


@pytest.mark.parametrize("zone", ["right/UTC", "posix/Europe/London", "posixrules", "localtime", "Factory"])
def test_only_iana_zone_names_are_accepted(api, zone):
    response = api.post("/v1/jobs", {**CRON_JOB, "timeZone": zone})
    assert response.status == 400, response
    assert response.body["errors"][0]["field"] == "timeZone"
    assert "IANA" in response.body["errors"][0]["rule"]


@pytest.mark.parametrize(
    "zone", ["Europe/London", "America/Argentina/Buenos_Aires", "UTC", "Etc/GMT+5", "US/Eastern"]
)
def test_iana_zone_names_and_links_are_accepted(api, zone):
    assert create(api, timeZone=zone)["timeZone"] == zone


GOOD_TARGETS = [
    {"kind": "lambda", "functionArn": "remind"},
    {"kind": "lambda", "functionArn": "remind:live"},
    {"kind": "lambda", "functionArn": "123456789012:function:remind"},
    {"kind": "lambda", "functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:remind"},
    {"kind": "lambda", "functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:remind:7"},
    {"kind": "lambda", "functionArn": "arn:aws-us-gov:lambda:us-gov-west-1:123456789012:function:f"},
    {"kind": "lambda", "functionArn": "remind", "qualifier": "$LATEST"},
    {"kind": "sqs", "queueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/inventory"},
    {"kind": "sqs", "queueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"},
    {"kind": "sqs", "queueUrl": "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q"},
    {"kind": "stepfunctions", "stateMachineArn": "arn:aws:states:eu-west-1:123456789012:stateMachine:m"},
    {"kind": "stepfunctions", "stateMachineArn": "arn:aws:states:eu-west-1:123456789012:stateMachine:m:prod"},
    {"kind": "eventbridge"},
    {"kind": "eventbridge", "eventBusName": "orders"},
    {"kind": "eventbridge", "eventBusName": "aws.partner/acme.com/1234/events"},
    {"kind": "eventbridge", "eventBusName": "arn:aws:events:eu-west-1:123456789012:event-bus/orders"},
]
BAD_TARGETS = [
    ({"kind": "lambda", "functionArn": "not an arn!"}, "target.lambda.functionArn"),
    (
        {"kind": "lambda", "functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:"},
        "target.lambda.functionArn",
    ),
    (
        {"kind": "lambda", "functionArn": "arn:aws:sqs:eu-west-1:123456789012:function:f"},
        "target.lambda.functionArn",
    ),
    ({"kind": "lambda", "functionArn": "f", "qualifier": "a b"}, "target.lambda.qualifier"),
    ({"kind": "sqs", "queueUrl": "https://example.com/123456789012/q"}, "target.sqs.queueUrl"),
    ({"kind": "sqs", "queueUrl": "sqs.eu-west-1.amazonaws.com/123456789012/q"}, "target.sqs.queueUrl"),
    ({"kind": "sqs", "queueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/"}, "target.sqs.queueUrl"),
    (
        {"kind": "stepfunctions", "stateMachineArn": "arn:aws:lambda:eu-west-1:123456789012:function:f"},
        "target.stepfunctions.stateMachineArn",
    ),
    ({"kind": "stepfunctions", "stateMachineArn": "m"}, "target.stepfunctions.stateMachineArn"),
    ({"kind": "eventbridge", "eventBusName": "a bus"}, "target.eventbridge.eventBusName"),
    (
        {"kind": "eventbridge", "eventBusName": "arn:aws:sqs:eu-west-1:123456789012:event-bus/b"},
        "target.eventbridge.eventBusName",
    ),
]


@pytest.mark.parametrize("target", GOOD_TARGETS, ids=lambda t: str(list(t.values())[-1]))
def test_target_shapes_aws_accepts_are_accepted(api, container, target):
    grant(container, {"tenant-a": ANY_AWS_TARGET})
    assert create(api, target=target)["target"]["kind"] == target["kind"]


@pytest.mark.parametrize(("target", "field"), BAD_TARGETS, ids=lambda v: str(v)[-40:])
def test_target_of_the_wrong_shape_is_refused_when_written(api, target, field):
    response = api.post("/v1/jobs", {**CRON_JOB, "target": target})
    assert response.status == 400, response
    assert [e["field"] for e in response.body["errors"]] == [field]


def test_a_patch_checks_the_target_too(api, container):
    grant(container, {"tenant-a": ANY_AWS_TARGET})
    job = create(api, target={"kind": "lambda", "functionArn": "remind"})
    response = api.patch(
        f"/v1/jobs/{job['jobId']}", {"target": {"functionArn": "no such thing!"}}, headers={"If-Match": "1"}
    )
    assert response.status == 400 and response.body["errors"][0]["field"] == "target.lambda.functionArn"


@pytest.mark.parametrize("raw", ["{not json", "[]", '"a string"', ""])
def test_malformed_body_is_400(api, raw):
    response = api.request("POST", "/v1/jobs", raw_body=raw)
    assert response.status == 400, response


def test_unauthenticated_caller_is_401(container):
    from tests.helpers import ApiClient

    response = ApiClient(None).post("/v1/jobs", CRON_JOB)
    assert response.status == 401
    assert ApiClient(None).get("/v1/jobs").status == 401


# --- idempotent create ---


def test_same_key_same_body_returns_the_original_with_200(api):
    first = api.post("/v1/jobs", {**CRON_JOB, "idempotencyKey": "k-1"})
    again = api.post("/v1/jobs", {**CRON_JOB, "idempotencyKey": "k-1"})
    assert first.status == 201 and again.status == 200
    assert again.body["jobId"] == first.body["jobId"]
    assert len(api.get("/v1/jobs").body["items"]) == 1


def test_same_key_different_body_is_409(api):
    api.post("/v1/jobs", {**CRON_JOB, "idempotencyKey": "k-2"})
    response = api.post("/v1/jobs", {**CRON_JOB, "name": "other", "idempotencyKey": "k-2"})
    assert response.status == 409
    assert response.body["code"] == "idempotency_key_reused"


def test_idempotency_key_header_is_honoured(api):
    first = api.post("/v1/jobs", CRON_JOB, headers={"Idempotency-Key": "hdr-1"})
    again = api.post("/v1/jobs", CRON_JOB, headers={"Idempotency-Key": "hdr-1"})
    assert (first.status, again.status) == (201, 200)
    assert first.body["jobId"] == again.body["jobId"]


def test_idempotency_keys_are_per_tenant(api, other_api):
    mine = api.post("/v1/jobs", {**CRON_JOB, "idempotencyKey": "shared"})
    theirs = other_api.post("/v1/jobs", {**CRON_JOB, "name": "different", "idempotencyKey": "shared"})
    assert mine.status == theirs.status == 201
    assert mine.body["jobId"] != theirs.body["jobId"]


def test_concurrent_creates_with_one_key_make_one_job(api, container):
    # Concurrent Lambda containers: each thread is its own caller of the service (the
    # resolver itself holds per-invocation state, as it does in a single-threaded Lambda).
    from jobsched.api_models.requests import JobBody

    from tests.helpers import SerializedClient

    container.definitions._db = SerializedClient(container.definitions._db)
    body = JobBody.model_validate({**CRON_JOB, "idempotencyKey": "race"})
    spec, digest = body.to_spec(), body.body_hash()

    def attempt(_):
        return container.jobs.create("tenant-a", spec, idempotency_key="race", body_hash=digest)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(attempt, range(8)))
    assert [r.created for r in results].count(True) == 1
    assert len({r.job.job_id for r in results}) == 1
    listed = api.get("/v1/jobs").body["items"]
    assert [j["jobId"] for j in listed] == [results[0].job.job_id]


def test_expired_idempotency_key_can_be_reused(api, clock):
    first = api.post("/v1/jobs", {**CRON_JOB, "idempotencyKey": "old"})
    clock.advance(timedelta(hours=25).total_seconds())
    again = api.post("/v1/jobs", {**CRON_JOB, "idempotencyKey": "old"})
    assert again.status == 201 and again.body["jobId"] != first.body["jobId"]


# --- read ---


def test_get_returns_definition_and_next_five_fire_times(api):
    job = create(api)
    response = api.get(f"/v1/jobs/{job['jobId']}")
    assert response.status == 200
    assert response.body["name"] == "nightly report"
    assert response.body["payload"] == {"format": "pdf"}
    assert response.body["nextFireTimes"] == [f"2026-11-{d:02d}T09:00:00Z" for d in range(2, 7)]


def test_next_fire_times_respect_max_runs(api):
    job = create(api, maxRuns=2)
    assert len(api.get(f"/v1/jobs/{job['jobId']}").body["nextFireTimes"]) == 2


def test_unknown_job_is_404(api):
    assert api.get("/v1/jobs/j_doesnotexist").status == 404


def test_malformed_job_id_is_404_naming_no_pattern(api):
    # No job has such an id: not found, as an unknown one, not the path's regular expression.
    response = api.get("/v1/jobs/..%2Fetc")
    assert response.status == 404
    malformed = api.get("/v1/jobs/NOT-AN-ID")
    assert malformed.status == 404 and malformed.body["message"] == "job NOT-AN-ID not found"
    assert "^j_" not in str(malformed.body)


def test_list_paginates_newest_first_with_opaque_cursor(api, clock):
    ids = []
    for i in range(5):
        ids.append(create(api, name=f"job {i}")["jobId"])
        clock.advance(1)
    seen, cursor = [], None
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = api.get("/v1/jobs", query=query)
        assert page.status == 200, page
        assert len(page.body["items"]) <= 2
        seen += [item["jobId"] for item in page.body["items"]]
        cursor = page.body.get("nextCursor")
        if not cursor:
            break
    assert seen == list(reversed(ids))


def test_list_filters_by_state(api):
    keep = create(api)["jobId"]
    paused = create(api)["jobId"]
    api.post(f"/v1/jobs/{paused}/pause")
    active = api.get("/v1/jobs", query="state=ACTIVE").body["items"]
    assert [j["jobId"] for j in active] == [keep]
    only_paused = api.get("/v1/jobs", query="state=PAUSED&limit=1").body["items"]
    assert [j["jobId"] for j in only_paused] == [paused]


def test_list_keeps_cancelled_jobs_unless_a_state_filter_leaves_them_out(api):
    cancelled = create(api)["jobId"]
    active = create(api)["jobId"]
    assert api.delete(f"/v1/jobs/{cancelled}").status == 200
    # Both listed (created in the same instant: their order is not the point).
    assert sorted(j["jobId"] for j in api.get("/v1/jobs").body["items"]) == sorted([active, cancelled])
    only = api.get("/v1/jobs", query="state=CANCELLED").body["items"]
    assert [(j["jobId"], j["state"]) for j in only] == [(cancelled, "CANCELLED")]
    assert [j["jobId"] for j in api.get("/v1/jobs", query="state=ACTIVE").body["items"]] == [active]
    refused = api.get("/v1/jobs", query="state=ARCHIVED")
    assert refused.status == 400
    (problem,) = refused.body["errors"]
    assert problem["field"] == "state"
    assert all(name in problem["rule"] for name in ("ACTIVE", "PAUSED", "CANCELLED", "COMPLETED"))


def test_a_job_listing_leaves_out_a_job_it_cannot_read_and_still_answers(api, container, clock):
    """A job item this release cannot read (a state it does not have) is left out of the
    tenant's listing, filtered or not, and counted; the other jobs are listed, one a newer
    release wrote with members this release does not know among them."""
    made = []
    for name in ("first", "bad", "newer"):
        made.append(create(api, name=name)["jobId"])
        clock.advance(1)
    first, bad, newer = made
    ddb = boto3.client("dynamodb")
    table = DEFINITIONS.default_name
    ddb.update_item(
        TableName=table,
        Key={"job_id": {"S": bad}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "ARCHIVED"}},
    )
    spec = {**json.loads(raw_item(newer)["spec"]["S"]), "added_later": {"any": "value"}}
    ddb.update_item(
        TableName=table,
        Key={"job_id": {"S": newer}},
        UpdateExpression="SET spec = :s",
        ExpressionAttributeValues={":s": {"S": json.dumps(spec)}},
    )
    container.metrics.clear()
    for query in ("", "state=ACTIVE"):
        listed = api.get("/v1/jobs", query=query)
        assert listed.status == 200, listed
        assert [j["jobId"] for j in listed.body["items"]] == [newer, first]
    # Counted where it was read (a state filter passes it over in the index already).
    assert container.metrics.values("UnreadableJobs") == [1.0]
    # Read by ids together (a batch create's replays), the others are answered as well.
    assert [j.job_id for j in container.definitions.get_many([first, bad, newer])] == [first, newer]
    assert api.get(f"/v1/jobs/{newer}").status == 200
    assert api.get(f"/v1/jobs/{bad}").status == 500  # asked for alone, it cannot be answered


QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/tenant-a-alerts"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"addedLater": 1}, "addedLater"),
        ({"retry": {"baseSeconds": 2, "addedLater": 1}}, "retry.addedLater"),
        ({"dst": {"gap": "skip", "addedLater": 1}}, "dst.addedLater"),
        (
            {"target": {"kind": "http", "url": "https://hooks.example.com/run", "addedLater": 1}},
            "target.http.addedLater",
        ),
        (
            {"notify": [{"on": ["dead"], "target": {"kind": "sqs", "queueUrl": QUEUE_URL}, "addedLater": 1}]},
            "notify.0.addedLater",
        ),
    ],
)
def test_a_request_with_a_member_the_api_does_not_know_is_still_refused(api, change, field):
    """Stored items are read tolerantly (a newer release's members ignored); requests are not:
    an unknown member anywhere in a body is a 400 naming it, and nothing is written."""
    response = api.post("/v1/jobs", {**CRON_JOB, **change})
    assert response.status == 400, response
    errors = {e["field"]: e["rule"] for e in response.body["errors"]}
    assert "is not a known field" in errors.get(field, ""), errors
    assert api.get("/v1/jobs").body["items"] == []


TOPIC = "arn:aws:sns:us-east-1:123456789012:alerts"


@pytest.mark.parametrize(
    ("change", "field", "rule"),
    [
        (
            {"target": {"kind": "sns", "topicArn": TOPIC, "zzz": 1}},
            "target.kind",
            "must be one of lambda, http, sqs, eventbridge, stepfunctions; got sns",
        ),
        ({"target": {"topicArn": TOPIC, "zzz": 1}}, "target.kind", "is required"),
        (
            {"notify": [{"on": ["dead"], "target": {"kind": "lambda", "functionArn": "f", "zzz": 1}}]},
            "notify.0.target.kind",
            "must be one of sns, sqs, eventbridge, http; got lambda",
        ),
        (
            {"notify": [{"on": ["dead"], "target": {"kind": "x" * 5000}}]},
            "notify.0.target.kind",
            f"must be one of sns, sqs, eventbridge, http; got {'x' * 64}",
        ),
    ],
)
def test_a_target_of_a_kind_the_field_does_not_take_is_refused_naming_its_kind(api, change, field, rule):
    """A target's members are checked against its kind: one the field does not take (an SNS
    topic as a run's target) or none is the error, named at `kind`, not at the target."""
    response = api.post("/v1/jobs", {**CRON_JOB, **change})
    assert response.status == 400, response
    assert response.body["errors"] == [{"field": field, "rule": rule}]


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=x", "state=SLEEPING", "cursor=garbage!!"])
def test_list_rejects_bad_query(api, query):
    response = api.get("/v1/jobs", query=query)
    assert response.status == 400, response
    assert response.body["errors"][0]["field"] in ("limit", "state", "cursor")


def test_cursor_of_another_tenant_is_rejected(api, other_api):
    for _ in range(3):
        create(api)
    cursor = api.get("/v1/jobs", query="limit=1").body["nextCursor"]
    response = other_api.get("/v1/jobs", query=f"cursor={cursor}")
    assert response.status == 400 and response.body["errors"][0]["field"] == "cursor"


# --- update ---


def test_patch_requires_if_match(api):
    job = create(api)
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"name": "renamed"})
    assert response.status == 428


def test_patch_with_stale_version_is_412(api):
    job = create(api)
    api.patch(f"/v1/jobs/{job['jobId']}", {"name": "v2"}, headers={"If-Match": '"1"'})
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"name": "v3"}, headers={"If-Match": '"1"'})
    assert response.status == 412
    assert response.body["currentVersion"] == 2


def test_patch_schedule_bumps_version_and_recomputes_next_run(api, clock):
    job = create(api)
    clock.advance(60)
    response = api.patch(
        f"/v1/jobs/{job['jobId']}",
        {"cron": "15 12 * * *", "timeZone": "America/New_York"},
        headers={"If-Match": '"1"'},
    )
    assert response.status == 200, response
    assert response.body["version"] == 2
    assert response.headers["ETag"] == '"2"'
    # 12:15 EST (UTC-5) on 2026-11-02.
    assert response.body["nextRunAt"] == "2026-11-02T17:15:00Z"
    assert response.body["updatedAt"] == "2026-11-02T08:01:00Z"


def test_patch_switches_schedule_kind(api):
    job = create(api)
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"every": "PT30S"}, headers={"If-Match": "1"})
    assert response.status == 200, response
    assert response.body["cron"] is None and response.body["timeZone"] is None
    assert response.body["every"] == 30 and response.body["nextRunAt"] == "2026-11-02T08:00:00Z"


def test_patch_of_payload_keeps_next_run(api):
    job = create(api)
    response = api.patch(
        f"/v1/jobs/{job['jobId']}", {"payload": {"format": "csv"}}, headers={"If-Match": "1"}
    )
    assert response.status == 200
    assert response.body["payload"] == {"format": "csv"}
    assert response.body["nextRunAt"] == job["nextRunAt"]


def test_patch_null_clears_an_optional_field(api):
    job = create(api, maxRuns=3)
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"maxRuns": None}, headers={"If-Match": "1"})
    assert response.status == 200 and response.body["maxRuns"] is None


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"cron": "nope"}, "cron"),
        ({"colour": "red"}, "colour"),
        ({"idempotencyKey": "x"}, "idempotencyKey"),
        ({"retry": {"capSeconds": 0.5}}, "retry.capSeconds"),
        ({"priority": 3}, "priority"),
    ],
)
def test_invalid_patch_is_400_and_changes_nothing(api, patch, field):
    job = create(api)
    response = api.patch(f"/v1/jobs/{job['jobId']}", patch, headers={"If-Match": "1"})
    assert response.status == 400, response
    assert field in [e["field"] for e in response.body["errors"]]
    assert api.get(f"/v1/jobs/{job['jobId']}").body["version"] == 1


def test_patch_bad_if_match_is_400(api):
    job = create(api)
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"name": "x"}, headers={"If-Match": "latest"})
    assert response.status == 400 and response.body["errors"][0]["field"] == "If-Match"


def test_patch_of_cancelled_job_is_409(api):
    job = create(api)
    api.delete(f"/v1/jobs/{job['jobId']}")
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"name": "x"}, headers={"If-Match": "2"})
    assert response.status == 409


# --- lifecycle ---


def test_pause_and_resume_move_the_job_out_of_and_into_the_due_index(api):
    job_id = create(api)["jobId"]
    assert "due_shard" in raw_item(job_id)
    paused = api.post(f"/v1/jobs/{job_id}/pause")
    assert paused.status == 200 and paused.body["state"] == "PAUSED" and paused.body["version"] == 2
    assert "due_shard" not in raw_item(job_id)
    assert api.post(f"/v1/jobs/{job_id}/pause").body["version"] == 2  # idempotent
    resumed = api.post(f"/v1/jobs/{job_id}/resume")
    assert resumed.status == 200 and resumed.body["state"] == "ACTIVE" and resumed.body["version"] == 3
    assert raw_item(job_id)["due_shard"]["N"]
    assert resumed.body["nextRunAt"] == "2026-11-02T09:00:00Z"


def test_resume_of_active_job_is_a_no_op(api):
    job_id = create(api)["jobId"]
    response = api.post(f"/v1/jobs/{job_id}/resume")
    assert response.status == 200 and response.body["version"] == 1


def test_pause_with_stale_if_match_is_412(api):
    job_id = create(api)["jobId"]
    assert api.post(f"/v1/jobs/{job_id}/pause", headers={"If-Match": "7"}).status == 412


def test_cancel_removes_from_due_index_and_is_idempotent(api):
    job_id = create(api)["jobId"]
    first = api.delete(f"/v1/jobs/{job_id}")
    assert first.status == 200 and first.body["state"] == "CANCELLED"
    assert first.body["nextRunAt"] is None
    assert "due_shard" not in raw_item(job_id)
    again = api.delete(f"/v1/jobs/{job_id}")
    assert again.status == 200 and again.body["version"] == first.body["version"]
    assert api.post(f"/v1/jobs/{job_id}/pause").status == 409
    assert api.post(f"/v1/jobs/{job_id}/resume").status == 409


def test_cancel_of_a_completed_job_cancels_the_run_it_made_ahead(api, container):
    job = api.post("/v1/jobs", {"name": "once", "type": "report.build", "runAt": "2026-11-02T08:01:00Z"}).body
    container.sweeper.sweep()
    # Its one occurrence is made: nothing more to schedule.
    assert api.get(f"/v1/jobs/{job['jobId']}").body["state"] == "COMPLETED"
    cancelled = api.delete(f"/v1/jobs/{job['jobId']}")
    assert cancelled.status == 200 and cancelled.body["state"] == "CANCELLED"
    (run,) = container.runs.list_for_job(job["jobId"], limit=10, cursor=None).items
    assert run.state.value == "CANCELLED"


# --- tenant isolation: another tenant's job is a 404 on every route ---


def test_other_tenant_gets_404_everywhere(api, other_api):
    job_id = create(api)["jobId"]
    assert other_api.get(f"/v1/jobs/{job_id}").status == 404
    assert other_api.patch(f"/v1/jobs/{job_id}", {"name": "x"}, headers={"If-Match": "1"}).status == 404
    assert other_api.delete(f"/v1/jobs/{job_id}").status == 404
    assert other_api.post(f"/v1/jobs/{job_id}/pause").status == 404
    assert other_api.post(f"/v1/jobs/{job_id}/resume").status == 404
    api.delete(f"/v1/jobs/{job_id}")
    assert other_api.post(f"/v1/jobs/{job_id}/archive").status == 404
    assert api.get(f"/v1/jobs/{job_id}").body["archivedAt"] is None
    assert other_api.get("/v1/jobs").body["items"] == []
    assert other_api.get("/v1/jobs", query="archived=true").body["items"] == []
    assert api.get(f"/v1/jobs/{job_id}").body["version"] == 2  # cancelled by its tenant only


# --- documents and unknown routes ---


def test_openapi_document_lists_every_route(api):
    response = api.get("/openapi.json")
    assert response.status == 200
    paths = response.body["paths"]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/pause", "/v1/jobs/{job_id}/resume"} <= set(
        paths
    )
    assert {"post", "get"} <= set(paths["/v1/jobs"])
    assert {"get", "patch", "delete"} <= set(paths["/v1/jobs/{job_id}"])


def test_swagger_ui_is_served(api):
    response = api.get("/docs")
    assert response.status == 200
    assert "swagger" in str(response.body).lower()


def test_unknown_route_is_404_json(api):
    response = api.get("/v1/nothing")
    assert response.status == 404 and response.body["code"] == "not_found"


def test_patch_accepts_merge_patch_media_type(api):
    job = create(api)
    response = api.patch(
        f"/v1/jobs/{job['jobId']}",
        {"name": "renamed"},
        headers={"If-Match": "1", "content-type": "application/merge-patch+json"},
    )
    assert response.status == 200 and response.body["name"] == "renamed"


def test_patch_merges_nested_objects_and_null_removes(api):
    job = create(api, dst={"gap": "skip", "fold": "last"})
    response = api.patch(f"/v1/jobs/{job['jobId']}", {"dst": {"fold": None}}, headers={"If-Match": "1"})
    assert response.status == 200, response
    assert response.body["dst"] == {"gap": "skip", "fold": "first"}  # fold back to its default


def test_patch_to_another_target_kind_replaces_the_target(api, container):
    grant(container, {"tenant-a": ANY_AWS_TARGET})
    job = create(api, target={"kind": "http", "url": "https://example.com/hook"})
    arn = "arn:aws:lambda:eu-west-1:123456789012:function:f"
    response = api.patch(
        f"/v1/jobs/{job['jobId']}",
        {"target": {"kind": "lambda", "functionArn": arn}},
        headers={"If-Match": "1"},
    )
    assert response.status == 200, response
    assert response.body["target"]["kind"] == "lambda" and response.body["target"]["functionArn"] == arn


def test_malformed_json_names_the_body(api):
    response = api.request("POST", "/v1/jobs", raw_body='{"name": "x",')
    assert response.status == 400 and response.body["errors"][0]["field"] == "body"


def test_next_fire_times_count_materialised_runs_once(api):
    job = create(api, cron="30 0 9 * * *", timeZone="Europe/Berlin", maxRuns=3)
    body = api.get(f"/v1/jobs/{job['jobId']}").body
    assert body["runsCreated"] == 1
    assert body["nextFireTimes"] == [f"2026-11-0{d}T08:00:30Z" for d in (2, 3, 4)]


def test_openapi_document_is_titled(api):
    info = api.get("/openapi.json").body["info"]
    assert info["title"] == "jobsched" and info["version"] == "1"


def test_a_job_id_that_cannot_exist_is_404_not_a_pattern(api):
    for path in ("/v1/jobs/nope", "/v1/jobs/nope/runs", "/v1/jobs/nope/summary"):
        response = api.get(path)
        assert response.status == 404, (path, response)
        assert response.body["code"] == "not_found"
        assert response.body["message"] == "job nope not found"


# --- an ended job's expiry, and archiving it ---


def _expiry(ended_at) -> str:
    """ended_at + retentionDays (30) + the superseded-definition margin (MAX_RETRY_AGE + 1 day)."""
    from jobsched.domain.instants import format_instant
    from jobsched.domain.models import MAX_RETRY_AGE_SECONDS

    return format_instant(ended_at + timedelta(days=31, seconds=MAX_RETRY_AGE_SECONDS))


def _epoch(instant: str) -> str:
    from jobsched.domain.instants import parse_instant

    return str(int(parse_instant(instant).timestamp()))


def test_a_live_job_has_no_expiry_and_a_cancelled_one_expires_after_its_runs(api, clock):
    """Cancelled at T, the job item (and its counters and signing secrets with it) is deleted
    by the table's TTL at T + retentionDays + the margin a superseded definition keeps."""
    job_id = create(api)["jobId"]
    assert api.get(f"/v1/jobs/{job_id}").body["expiresAt"] is None
    assert "expires_at" not in raw_item(job_id)
    clock.advance(3600)
    cancelled = api.delete(f"/v1/jobs/{job_id}").body
    assert cancelled["expiresAt"] == _expiry(clock.now())
    epoch = _epoch(cancelled["expiresAt"])
    assert raw_item(job_id)["expires_at"] == {"N": epoch}
    assert raw_item(f"signing#{job_id}")["expires_at"] == {"N": epoch}
    assert raw_item(f"stats#{job_id}")["expires_at"] == {"N": epoch}
    clock.advance(60)
    assert api.delete(f"/v1/jobs/{job_id}").body["expiresAt"] == cancelled["expiresAt"]  # unchanged
    assert api.get(f"/v1/jobs/{job_id}/summary").status == 200  # counters still read


def test_a_job_completed_by_its_last_run_expires_after_that_run(api, clock):
    run_at = clock.now() + timedelta(seconds=30)
    job = create(api, cron=None, timeZone=None, runAt=run_at.isoformat())
    shown = api.get(f"/v1/jobs/{job['jobId']}").body
    assert shown["state"] == "COMPLETED"
    assert shown["expiresAt"] == _expiry(run_at)
    assert raw_item(job["jobId"])["expires_at"] == {"N": _epoch(shown["expiresAt"])}


def test_archive_refuses_a_live_job_naming_the_rule(api):
    job_id = create(api)["jobId"]
    for live in ("ACTIVE", "PAUSED"):
        if live == "PAUSED":
            api.post(f"/v1/jobs/{job_id}/pause")
        refused = api.post(f"/v1/jobs/{job_id}/archive")
        assert refused.status == 409, refused
        assert refused.body["code"] == "conflict"
        assert f"is {live}" in refused.body["message"]
        assert "only an ended job (CANCELLED or COMPLETED) can be archived" in refused.body["message"]
    assert api.get(f"/v1/jobs/{job_id}").body["archivedAt"] is None
    assert api.get("/v1/jobs").body["items"][0]["jobId"] == job_id


def test_an_archived_job_leaves_the_default_listing_and_stays_readable(api, clock):
    archived, cancelled, active = (create(api, name=n)["jobId"] for n in ("a", "c", "x"))
    for job_id in (archived, cancelled):
        api.delete(f"/v1/jobs/{job_id}")
    clock.advance(10)
    first = api.post(f"/v1/jobs/{archived}/archive")
    assert first.status == 200, first
    assert first.body["archivedAt"] == "2026-11-02T08:00:10Z"
    assert first.body["version"] == 2 and first.headers["ETag"] == '"2"'  # no new version
    assert first.body["state"] == "CANCELLED"
    clock.advance(10)
    again = api.post(f"/v1/jobs/{archived}/archive", headers={"If-Match": '"2"'})
    assert again.status == 200 and again.body["archivedAt"] == first.body["archivedAt"]  # idempotent
    assert again.body["expiresAt"] == first.body["expiresAt"]  # the cancel's, kept

    def listed(query: str = "") -> list[str]:
        return sorted(j["jobId"] for j in api.get("/v1/jobs", query=query).body["items"])

    assert listed() == sorted([cancelled, active])
    assert listed("state=CANCELLED") == [cancelled]
    assert listed("archived=false") == sorted([cancelled, active])
    assert listed("archived=true") == [archived]
    assert listed("archived=true&state=CANCELLED") == [archived]
    assert listed("archived=true&state=ACTIVE") == []
    assert api.get(f"/v1/jobs/{archived}").status == 200
    refused = api.get("/v1/jobs", query="archived=yes")
    assert refused.status == 400
    (problem,) = refused.body["errors"]
    assert problem["field"] == "archived"


def test_archive_of_a_job_cancelled_without_an_expiry_gives_it_one(api, clock):
    """A job cancelled before jobs had `expires_at` is given one when archived, from then."""
    job_id = create(api)["jobId"]
    api.delete(f"/v1/jobs/{job_id}")
    boto3.client("dynamodb").update_item(
        TableName=DEFINITIONS.default_name,
        Key={"job_id": {"S": job_id}},
        UpdateExpression="REMOVE expires_at",
    )
    assert api.get(f"/v1/jobs/{job_id}").body["expiresAt"] is None
    clock.advance(3600)
    archived = api.post(f"/v1/jobs/{job_id}/archive").body
    assert archived["expiresAt"] == _expiry(clock.now())
    assert raw_item(job_id)["expires_at"] == {"N": _epoch(archived["expiresAt"])}


def test_archive_checks_if_match(api):
    job_id = create(api)["jobId"]
    api.delete(f"/v1/jobs/{job_id}")
    stale = api.post(f"/v1/jobs/{job_id}/archive", headers={"If-Match": '"1"'})
    assert stale.status == 412
    assert api.get(f"/v1/jobs/{job_id}").body["archivedAt"] is None


def test_a_schedule_whose_next_occurrence_is_past_the_last_instant_reads_back(api):
    # 9999-12-31T23:00 at UTC-12 is 10000-01-01T11:00Z: no such instant, so no occurrence.
    job = create(api, cron="0 23 31 12 *", timeZone="Etc/GMT+12", startAt="9998-12-31T12:00:00Z")
    assert job["nextRunAt"] == "9999-01-01T11:00:00Z"
    read = api.get(f"/v1/jobs/{job['jobId']}")
    assert read.status == 200, read
    assert read.body["nextFireTimes"] == ["9999-01-01T11:00:00Z"]
    preview = api.post(
        "/v1/schedules/preview",
        {"cron": "0 23 31 12 *", "timeZone": "Etc/GMT+12", "after": "9998-06-01T00:00:00Z", "count": 5},
    )
    assert preview.status == 200, preview
    assert [line["at"] for line in preview.body["fireTimes"]] == ["9999-01-01T11:00:00Z"]
