"""`POST /v1/jobs/batch` through the real `api` handler on moto: each job answered as a single
create of it would be (created, replayed or refused with the same error body), the tenant's
job limit exact, idempotency per job, the batch's size bounded; and what a create writes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from jobsched.api_models.requests import MAX_BATCH_JOBS
from jobsched.settings import Settings

from tests.helpers import T0, ApiClient

pytestmark = pytest.mark.integration

CRON_JOB = {"name": "nightly report", "type": "report.build", "cron": "0 9 * * *", "payload": {"n": 1}}
SOON = (T0 + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")  # inside the 120 s horizon


def recurring(name: str = "n") -> dict[str, Any]:
    return {"name": name, "type": "ext", "cron": "0 * * * *"}  # stays ACTIVE: keeps its place


def once_soon(name: str = "soon") -> dict[str, Any]:
    return {"name": name, "type": "ext", "runAt": SOON}  # completes as it is created


def batch(api: ApiClient, jobs: list[dict[str, Any]], **kw: Any) -> Any:
    response = api.post("/v1/jobs/batch", {"jobs": jobs}, **kw)
    assert response.status == 200, response
    assert [item["index"] for item in response.body["items"]] == list(range(len(jobs)))
    return response.body


def statuses(body: Any) -> list[int]:
    return [item["status"] for item in body["items"]]


def listed(api: ApiClient) -> list[dict[str, Any]]:
    return api.get("/v1/jobs", query="limit=100").body["items"]


@contextmanager
def dynamodb_calls(container: Any) -> Iterator[Counter[str]]:
    """The DynamoDB operations the code sends while the block runs, counted by name."""
    client = container.definitions._db
    seen: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        seen[model.name] += 1

    client.meta.events.register("before-call.dynamodb", count)
    try:
        yield seen
    finally:
        client.meta.events.unregister("before-call.dynamodb", count)


# --- many jobs, few writes ---


def test_a_batch_creates_every_job_each_with_its_secret(api, container):
    jobs = [{**CRON_JOB, "name": f"job {i}"} for i in range(MAX_BATCH_JOBS)]
    with dynamodb_calls(container) as calls:
        body = batch(api, jobs)
    assert statuses(body) == [201] * MAX_BATCH_JOBS
    assert (body["created"], body["replayed"], body["refused"]) == (MAX_BATCH_JOBS, 0, 0)
    shown = [item["job"] for item in body["items"]]
    assert [job["name"] for job in shown] == [f"job {i}" for i in range(MAX_BATCH_JOBS)]
    assert all(job["signingSecret"].startswith("whsec_") for job in shown)
    assert all(job["state"] == "ACTIVE" and job["nextRunAt"] == "2026-11-02T09:00:00Z" for job in shown)
    ids = {job["jobId"] for job in shown}
    assert len(ids) == MAX_BATCH_JOBS
    assert {job["jobId"] for job in listed(api)} == ids
    # Jobs share transactions of up to 100 items: 2 each (the job, its secrets) and the live
    # counter. Besides: the request rate's counter, and the shard count (read, then recorded).
    assert calls == Counter({"TransactWriteItems": 3, "UpdateItem": 2, "GetItem": 1}), calls


def test_a_job_due_inside_the_horizon_is_written_with_its_first_run(api, container):
    assert api.post("/v1/jobs", CRON_JOB).status == 201  # the first create records the shard count
    with dynamodb_calls(container) as calls:
        response = api.post("/v1/jobs", once_soon())
    assert response.status == 201, response
    # The answer is the job as created, as before; the store holds it advanced past its run.
    assert response.body["state"] == "ACTIVE" and response.body["nextRunAt"] == SOON
    job_id = response.body["jobId"]
    assert api.get(f"/v1/jobs/{job_id}").body["state"] == "COMPLETED"
    runs = api.get(f"/v1/jobs/{job_id}/runs", query="view=upcoming").body["items"]
    assert [(r["scheduledFor"], r["state"]) for r in runs] == [(SOON, "PENDING")]
    # The request rate's counter, then one transaction: job, secrets, run, live counter.
    assert calls == Counter({"UpdateItem": 1, "TransactWriteItems": 1}), calls


def test_a_short_rate_gets_its_runs_after_the_write(api):
    response = api.post("/v1/jobs", {"name": "fast", "type": "ext", "every": 5})
    assert response.status == 201, response
    runs = api.get(f"/v1/jobs/{response.body['jobId']}/runs", query="view=upcoming&limit=100").body["items"]
    assert len(runs) == 24  # every 5 s from 5 s after its creation up to the 120 s horizon


def test_a_batchs_short_rates_get_their_runs_from_the_sweeper_not_the_request(api, container):
    assert api.post("/v1/jobs", CRON_JOB).status == 201  # the first create records the shard count
    jobs = [{"name": f"fast {i}", "type": "ext", "every": 1} for i in range(20)]
    with dynamodb_calls(container) as calls:
        body = batch(api, jobs)
    assert statuses(body) == [201] * 20
    # Written with no runs (more than 8 each inside the horizon): no PutItem per run.
    assert calls == Counter({"UpdateItem": 1, "TransactWriteItems": 1}), calls
    job_id = body["items"][0]["job"]["jobId"]
    assert api.get(f"/v1/jobs/{job_id}/runs", query="view=upcoming").body["items"] == []
    assert api.get(f"/v1/jobs/{job_id}").body["nextRunAt"] is not None  # due: the sweeper's


def test_transactions_are_cut_by_their_bytes_not_their_characters(api, container):
    # 64 KB of two-byte characters a payload (half as many characters), 7 first runs each
    # (every 20 s inside the 120 s horizon), the job and its runs each holding it.
    payload = {"text": "Ж" * 32_000}
    jobs = [{"name": f"wide {i}", "type": "ext", "every": 20, "payload": payload} for i in range(20)]
    sizes: list[int] = []
    client = container.definitions._db

    def measure(params: Any, **_: Any) -> None:
        items = params.get("TransactItems") or []
        sizes.append(sum(len(json.dumps(i, ensure_ascii=False).encode()) for i in items))

    client.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", measure)
    try:
        body = batch(api, jobs)
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.TransactWriteItems", measure)
    assert statuses(body) == [201] * 20
    assert len(sizes) > 1 and max(sizes) <= 4_000_000, sizes  # DynamoDB's 4 MB a transaction


def test_a_throttled_transaction_answers_503_and_keeps_the_earlier_ones(api, container, monkeypatch):
    from botocore.exceptions import ClientError

    client = container.definitions._db
    original = client.transact_write_items
    sent: list[int] = []

    def throttled_second(**kw: Any) -> Any:
        sent.append(1)
        if len(sent) == 2:
            reasons = [{"Code": "None"}] * (len(kw["TransactItems"]) - 1) + [{"Code": "ThrottlingError"}]
            error: Any = {
                "Error": {"Code": "TransactionCanceledException", "Message": "throttled"},
                "CancellationReasons": reasons,
            }
            raise ClientError(error, "TransactWriteItems")
        return original(**kw)

    monkeypatch.setattr(client, "transact_write_items", throttled_second)
    jobs = [{**CRON_JOB, "name": f"job {i}"} for i in range(MAX_BATCH_JOBS)]
    body = batch(api, jobs)
    codes = statuses(body)
    # The first transaction's jobs were written and are answered with their secrets; the
    # throttled one's and those after it are 503, to be sent again.
    assert codes[0] == 201 and codes[-1] == 503, codes
    assert codes == sorted(codes) and set(codes) == {201, 503}
    written = [item["job"]["jobId"] for item in body["items"] if item["status"] == 201]
    assert {job["jobId"] for job in listed(api)} == set(written)


# --- each job answered on its own ---


def test_refusals_are_per_job_with_the_error_body_of_a_single_create(api):
    jobs: list[dict[str, Any]] = [
        {**CRON_JOB, "name": "first"},
        {**CRON_JOB, "cron": "0 25 * * *"},  # a rule of the domain
        {"type": "t", "cron": "0 9 * * *"},  # a field missing
        {**CRON_JOB, "maxAttempts": "3"},  # a JSON type
        {**CRON_JOB, "target": {"kind": "lambda", "functionArn": "remind"}},  # not granted
        {**CRON_JOB, "name": "last"},
    ]
    body = batch(api, jobs)
    assert statuses(body) == [201, 400, 400, 400, 403, 201]
    assert (body["created"], body["replayed"], body["refused"]) == (2, 0, 4)
    items = body["items"]
    assert [e["field"] for e in items[1]["error"]["errors"]] == ["cron"]
    assert [e["field"] for e in items[2]["error"]["errors"]] == ["name"]
    assert [e["field"] for e in items[3]["error"]["errors"]] == ["maxAttempts"]
    assert items[4]["error"]["code"] == "target_not_granted"
    for index in (1, 2, 3, 4):
        single = api.post("/v1/jobs", jobs[index])
        assert (single.status, single.body) == (items[index]["status"], items[index]["error"])
    assert {j["name"] for j in listed(api)} == {"first", "last"}


def test_a_batch_too_large_or_empty_is_refused_whole(api):
    too_many = api.post("/v1/jobs/batch", {"jobs": [CRON_JOB] * (MAX_BATCH_JOBS + 1)})
    assert too_many.status == 400, too_many
    assert too_many.body["errors"] == [
        {"field": "jobs", "rule": f"must hold 1 to {MAX_BATCH_JOBS} jobs; got {MAX_BATCH_JOBS + 1}"}
    ]
    empty = api.post("/v1/jobs/batch", {"jobs": []})
    assert empty.status == 400 and [e["field"] for e in empty.body["errors"]] == ["jobs"], empty
    assert api.post("/v1/jobs/batch", [CRON_JOB]).status == 400  # a body of jobs, not a list
    assert listed(api) == []


# --- the tenant's job limit ---


@pytest.fixture
def limited(aws, clock):
    from jobsched import wiring

    def install(limit: int) -> Any:
        settings = Settings(queue_urls=aws["urls"], dlq_urls=aws["dlq_urls"], max_jobs_per_tenant=limit)
        built = wiring.Container(settings, clock)
        wiring.override(built)
        return ApiClient("tenant-a")

    yield install
    wiring.override(None)


def test_the_job_limit_holds_in_a_batch_as_for_creates_one_by_one(limited):
    api = limited(5)
    for i in range(2):
        assert api.post("/v1/jobs", recurring(f"single {i}")).status == 201
    body = batch(api, [recurring(f"b{i}") for i in range(5)])
    assert statuses(body) == [201, 201, 201, 429, 429]
    assert body["items"][3]["error"]["code"] == "limit_exceeded" and body["items"][3]["error"]["limit"] == 5
    assert len(listed(api)) == 5
    # A job done as it is created (its one run made) still needs the room, as a single create.
    assert api.post("/v1/jobs", once_soon()).status == 429
    assert statuses(batch(api, [once_soon()])) == [429]
    # Room for one: a one-time job takes it only while it is created, then the next fits too.
    cancelled = listed(api)[0]
    assert api.delete(f"/v1/jobs/{cancelled['jobId']}").status == 200
    body = batch(api, [once_soon("a"), recurring("b"), once_soon("c"), recurring("d")])
    assert statuses(body) == [201, 201, 429, 429]
    assert len([j for j in listed(api) if j["state"] == "ACTIVE"]) == 5


def test_the_job_limit_is_exact_across_the_transactions_of_one_batch(limited):
    api = limited(40)  # a batch of 100 is written in several transactions
    body = batch(api, [recurring(f"b{i}") for i in range(MAX_BATCH_JOBS)])
    assert statuses(body) == [201] * 40 + [429] * 60
    assert len(api.get("/v1/jobs", query="limit=100").body["items"]) == 40


# --- idempotency, per job ---


def test_a_batch_sent_again_with_its_key_replays_each_job(api):
    jobs = [{**CRON_JOB, "name": f"job {i}"} for i in range(3)]
    first = batch(api, jobs, headers={"Idempotency-Key": "import-7"})
    again = batch(api, jobs, headers={"Idempotency-Key": "import-7"})
    assert statuses(first) == [201] * 3 and statuses(again) == [200] * 3
    assert (again["created"], again["replayed"]) == (0, 3)
    assert [i["job"]["jobId"] for i in again["items"]] == [i["job"]["jobId"] for i in first["items"]]
    assert all("signingSecret" not in i["job"] for i in again["items"])
    # Job i's key is `<batch key>#<i>`: a single create with it is the same request.
    single = api.post("/v1/jobs", jobs[1], headers={"Idempotency-Key": "import-7#1"})
    assert single.status == 200 and single.body["jobId"] == first["items"][1]["job"]["jobId"]
    # Another body under a key already used: that job alone is refused.
    changed = batch(api, [jobs[0], {**jobs[1], "name": "other"}], headers={"Idempotency-Key": "import-7"})
    assert statuses(changed) == [200, 409]
    assert changed["items"][1]["error"]["code"] == "idempotency_key_reused"
    assert changed["items"][1]["error"]["jobId"] == first["items"][1]["job"]["jobId"]
    assert len(listed(api)) == 3


def test_a_jobs_own_key_is_its_key_in_a_batch_too(api):
    made = api.post("/v1/jobs", {**CRON_JOB, "idempotencyKey": "own"})
    body = batch(
        api,
        [
            {**CRON_JOB, "idempotencyKey": "own"},  # made by the single create above
            {**CRON_JOB, "name": "b", "idempotencyKey": "twice"},
            {**CRON_JOB, "name": "b", "idempotencyKey": "twice"},  # as if sent again
            {**CRON_JOB, "name": "c", "idempotencyKey": "twice"},  # another body, same key
        ],
        headers={"Idempotency-Key": "ignored-where-a-job-has-its-own"},
    )
    assert statuses(body) == [200, 201, 200, 409]
    items = body["items"]
    assert items[0]["job"]["jobId"] == made.body["jobId"]
    assert items[2]["job"]["jobId"] == items[1]["job"]["jobId"]
    assert items[3]["error"]["jobId"] == items[1]["job"]["jobId"]
    assert len(listed(api)) == 2


def test_an_expired_key_makes_a_new_job_in_a_batch(api, clock):
    first = batch(api, [CRON_JOB], headers={"Idempotency-Key": "old"})
    clock.advance(timedelta(hours=25).total_seconds())
    again = batch(api, [CRON_JOB], headers={"Idempotency-Key": "old"})
    assert statuses(again) == [201]
    assert again["items"][0]["job"]["jobId"] != first["items"][0]["job"]["jobId"]


def test_batches_racing_for_the_last_places_never_pass_the_limit(limited):
    from concurrent.futures import ThreadPoolExecutor

    from jobsched import wiring
    from jobsched.api_models.requests import JobBody
    from jobsched.services.jobs import CreateRequest, CreateResult

    from tests.helpers import SerializedClient

    api = limited(30)
    container = wiring.container()
    container.definitions._db = SerializedClient(container.definitions._db)
    requests = [CreateRequest(JobBody.model_validate(recurring(f"r{i}")).to_spec()) for i in range(25)]

    def race(_: int) -> list[Any]:
        return container.jobs.create_many("tenant-a", requests)

    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = [a for batch_answers in pool.map(race, range(3)) for a in batch_answers]
    assert sum(isinstance(a, CreateResult) for a in answers) == 30
    assert {a.code for a in answers if not isinstance(a, CreateResult)} == {"limit_exceeded"}
    assert len(api.get("/v1/jobs", query="limit=100").body["items"]) == 30
    assert container.definitions.live_jobs("tenant-a") == 30
