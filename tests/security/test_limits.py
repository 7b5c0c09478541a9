"""Resource limits a tenant cannot exceed: each refusal is a 4xx naming the field, and nothing
is written. Per-tenant quotas (live jobs, request rate) answer 429 naming the limit."""

from __future__ import annotations

import pytest
from jobsched.domain.models import MAX_PAYLOAD_BYTES
from jobsched.settings import Settings

pytestmark = pytest.mark.integration

NOW = "2026-11-02T08:00:00Z"  # tests.helpers.T0


def job(**extra):
    return {"name": "n", "type": "ext", "runAt": NOW, **extra}


def field_errors(response):
    assert response.status == 400, response
    assert response.body["code"] == "invalid_request"
    return {e["field"] for e in response.body["errors"]}


def listed_jobs(api):
    return api.get("/v1/jobs", query="limit=100").body["items"]


# --- payload size ---


def test_payload_at_the_limit_is_accepted(api):
    payload = "x" * (MAX_PAYLOAD_BYTES - 2)  # a JSON string: two quotes plus the characters
    assert api.post("/v1/jobs", job(payload=payload)).status == 201


@pytest.mark.parametrize(
    "payload",
    [
        "x" * (MAX_PAYLOAD_BYTES - 1),  # one byte over once quoted
        {"rows": ["y" * 1000] * 70},
        "é" * (MAX_PAYLOAD_BYTES // 2),  # counted in UTF-8 bytes, not characters
    ],
    ids=["string", "object", "multibyte"],
)
def test_payload_over_the_limit_is_400_naming_payload(api, payload):
    response = api.post("/v1/jobs", job(payload=payload))
    assert field_errors(response) == {"payload"}
    assert str(MAX_PAYLOAD_BYTES) in response.body["message"]
    assert listed_jobs(api) == []


def test_payload_limit_holds_for_a_patch_too(api):
    created = api.post("/v1/jobs", job(cron="0 * * * *", runAt=None))
    job_id, version = created.body["jobId"], created.body["version"]
    response = api.patch(
        f"/v1/jobs/{job_id}", {"payload": "x" * MAX_PAYLOAD_BYTES}, headers={"if-match": f'"{version}"'}
    )
    assert field_errors(response) == {"payload"}
    assert api.get(f"/v1/jobs/{job_id}").body["version"] == version


# --- page size ---


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/dead-letters", "/v1/jobs/{job_id}/runs"])
@pytest.mark.parametrize("limit", ["101", "0", "-1", "1000000"])
def test_page_size_outside_1_to_100_is_400_naming_limit(api, path, limit):
    job_id = api.post("/v1/jobs", job()).body["jobId"]
    response = api.get(path.format(job_id=job_id), query=f"limit={limit}")
    assert field_errors(response) == {"limit"}


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/dead-letters", "/v1/jobs/{job_id}/runs"])
def test_page_size_of_100_is_accepted(api, path):
    job_id = api.post("/v1/jobs", job()).body["jobId"]
    assert api.get(path.format(job_id=job_id), query="limit=100").status == 200


def test_oversized_cursor_is_400_naming_cursor(api):
    response = api.get("/v1/jobs", query="cursor=" + "a" * 5000)
    assert field_errors(response) == {"cursor"}


# --- backfill range ---


def test_backfill_over_1000_occurrences_is_400_naming_start_and_end(api):
    job_id = api.post("/v1/jobs", job(cron="* * * * *", runAt=None)).body["jobId"]
    # 1001 minutes, 00:00 to 16:40 (the one at end, 16:41, is not counted): one too many.
    response = api.post(
        f"/v1/jobs/{job_id}/backfill", {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T16:41:00Z"}
    )
    assert field_errors(response) == {"start", "end"}
    runs = api.get(f"/v1/jobs/{job_id}/runs", query="limit=100").body["items"]
    assert {r["trigger"] for r in runs} == {"schedule"}  # nothing of the backfill was written


# --- other bounded inputs ---

BOUNDED = [
    (job(name="n" * 257), "name"),
    (job(type="t" * 129), "type"),
    (job(idempotencyKey="k" * 256), "idempotencyKey"),
    (job(maxAttempts=101), "maxAttempts"),
    (job(jitterSeconds=3601), "jitterSeconds"),
    (job(timeoutSeconds=43201), "timeoutSeconds"),
    (job(timeoutSeconds=841), "timeoutSeconds"),  # more than the worker can give a run
    (job(catchUpWindow=31 * 86400 + 1), "catchUpWindow"),
    (job(runAt=None, every=366 * 86400 + 1), "every"),
    (job(target={"kind": "http", "url": "https://example.com/" + "p" * 2048}), "target.http.url"),
    (
        job(
            target={
                "kind": "http",
                "url": "https://example.com/",
                "headers": {f"h{i}": "v" for i in range(33)},
            }
        ),
        "target.http.headers",
    ),
    (
        job(target={"kind": "http", "url": "https://example.com/", "headers": {"a": "v" * 4097}}),
        "target.http.headers",
    ),
    (
        job(target={"kind": "http", "url": "https://example.com/", "headers": {"h" * 129: "v"}}),
        "target.http.headers",
    ),
    (job(runAt=None, cron="0 * * * " + "1," * 511 + "1"), "cron"),
    (job(runAt=None, cron="0 * * * *", timeZone="Europe/" + "x" * 58), "timeZone"),
    (job(target={"kind": "eventbridge", "source": "s" * 257}), "target.eventbridge.source"),
    (
        job(
            target={
                "kind": "sqs",
                "queueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/q",
                "messageGroupId": "g" * 129,
            }
        ),
        "target.sqs.messageGroupId",
    ),
]


@pytest.mark.parametrize(("body", "field"), BOUNDED, ids=[f for _, f in BOUNDED])
def test_bounded_job_fields_are_400_naming_the_field(api, body, field):
    response = api.post("/v1/jobs", body)
    assert field in field_errors(response), response
    assert listed_jobs(api) == []


def test_idempotency_key_header_is_bounded(api):
    response = api.post("/v1/jobs", job(), headers={"idempotency-key": "k" * 256})
    assert field_errors(response) == {"idempotency-key"}


LEASE_BOUNDS = [
    ({"types": ["ext"], "workerId": "w", "max": 11}, "max"),
    ({"types": [f"t{i}" for i in range(11)], "workerId": "w"}, "types"),
    ({"types": ["ext"], "workerId": "w", "leaseSeconds": 901}, "leaseSeconds"),
    ({"types": ["ext"], "workerId": "w" * 129}, "workerId"),
    ({"types": ["ext"], "workerId": "w", "max": "2"}, "max"),
    ({"types": ["ext"], "workerId": "w", "leaseSeconds": 60.0}, "leaseSeconds"),
    ({"types": ["ext"], "workerId": "w", "leaseSeconds": True}, "leaseSeconds"),
]


@pytest.mark.parametrize(("body", "field"), LEASE_BOUNDS, ids=[f for _, f in LEASE_BOUNDS])
def test_lease_claims_are_bounded(api, body, field):
    job_id = api.post("/v1/jobs", job()).body["jobId"]
    assert field in field_errors(api.post("/v1/leases", body))
    assert api.get(f"/v1/runs/{job_id}@{NOW}").body["state"] == "PENDING"  # nothing was leased


# --- per-tenant quotas ---


@pytest.fixture
def limited(aws, clock):
    """Install a container whose settings override the quotas; yields a client factory."""
    from jobsched import wiring

    from tests.helpers import ApiClient

    def install(**overrides):
        settings = Settings(queue_urls=aws["urls"], dlq_urls=aws["dlq_urls"], **overrides)
        wiring.override(wiring.Container(settings, clock))
        return ApiClient("tenant-a"), ApiClient("tenant-b")

    yield install
    wiring.override(None)


def recurring(name="n"):
    return {"name": name, "type": "ext", "cron": "0 * * * *"}  # stays ACTIVE: keeps its place


def test_live_jobs_per_tenant_are_capped(limited):
    tenant_a, tenant_b = limited(max_jobs_per_tenant=3)
    ids = [tenant_a.post("/v1/jobs", recurring(f"n{i}")).body["jobId"] for i in range(3)]
    over = tenant_a.post("/v1/jobs", recurring("one too many"))
    assert over.status == 429 and over.body["code"] == "limit_exceeded", over
    assert "3" in over.body["message"]
    assert len(tenant_a.get("/v1/jobs").body["items"]) == 3  # nothing was written
    # One tenant's quota is not another's.
    assert tenant_b.post("/v1/jobs", recurring()).status == 201
    # A paused job still counts; a cancelled one frees its place.
    assert tenant_a.post(f"/v1/jobs/{ids[0]}/pause").status == 200
    assert tenant_a.post("/v1/jobs", recurring()).status == 429
    assert tenant_a.delete(f"/v1/jobs/{ids[1]}").status == 200
    assert tenant_a.post("/v1/jobs", recurring("in its place")).status == 201


def test_request_rate_is_limited_per_tenant(limited, clock):
    tenant_a, tenant_b = limited(tenant_requests_per_second=5)
    statuses = [tenant_a.get("/v1/jobs").status for _ in range(7)]  # all in one simulated second
    assert statuses == [200] * 5 + [429] * 2
    refused = tenant_a.get("/v1/jobs")
    assert refused.body["code"] == "limit_exceeded" and "5" in refused.body["message"]
    assert {k.lower(): v for k, v in refused.headers.items()}.get("retry-after") == "1"
    assert tenant_b.get("/v1/jobs").status == 200  # another tenant is not slowed down
    clock.advance(1)
    assert tenant_a.get("/v1/jobs").status == 200  # the next second starts afresh


# --- the job's byte budget ---


def test_a_job_over_its_byte_budget_is_400_naming_the_body(api):
    from jobsched.domain.models import MAX_SPEC_BYTES

    headers = {f"h{i}": "v" * 4096 for i in range(32)}  # each within its cap; 131 KB in all
    response = api.post(
        "/v1/jobs", job(target={"kind": "http", "url": "https://example.com/", "headers": headers})
    )
    assert field_errors(response) == {"body"}
    assert str(MAX_SPEC_BYTES) in response.body["message"]
    assert listed_jobs(api) == []


def test_a_job_within_its_byte_budget_is_accepted(api):
    headers = {f"h{i}": "v" * 1000 for i in range(32)}
    target = {"kind": "http", "url": "https://example.com/", "headers": headers}
    assert api.post("/v1/jobs", job(target=target, payload="x" * 60_000)).status == 201


def test_a_store_refusal_of_a_cursors_key_is_400_naming_the_cursor():
    from botocore.exceptions import ClientError
    from jobsched.domain.errors import ValidationFailed
    from jobsched.store.dynamo import translated_errors

    message = "The provided starting key is invalid"
    with pytest.raises(ValidationFailed) as raised, translated_errors():
        raise ClientError({"Error": {"Code": "ValidationException", "Message": message}}, "Query")
    assert raised.value.field == "cursor"


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("heartbeat", {"fence": "1"}, "fence"),
        ("heartbeat", {"fence": 10**19}, "fence"),
        ("complete", {"fence": 1.0, "outcome": "succeeded"}, "fence"),
        (
            "complete",
            {"fence": 1, "outcome": "failed", "error": {"class": "E", "message": "m", "retryable": 1}},
            "error",
        ),
    ],
)
def test_lease_bodies_take_strict_json_types(api, route, body, field):
    job_id = api.post("/v1/jobs", job()).body["jobId"]
    response = api.post(f"/v1/leases/{job_id}@{NOW}/{route}", body)
    assert any(f.startswith(field) for f in field_errors(response)), response
