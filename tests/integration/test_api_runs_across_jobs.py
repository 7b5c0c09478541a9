"""`GET /v1/runs`: a tenant's runs across its jobs, filtered, newest first, from the
`runs_by_tenant` index on moto: every run once across pages, filters, tenant isolation and
the cursor's binding, and bad input named."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from jobsched.domain.run_listing import RUN_LANES, run_lane
from jobsched.services.attempt import AttemptOutcome

from tests.integration.test_api_runs import calls as calls
from tests.integration.test_api_runs import create, deliver, errors_of, hourly, key_of
from tests.integration.test_api_runs import seen as seen
from tests.integration.test_api_runs import worker as worker

pytestmark = pytest.mark.integration


def listed(api, query=""):
    """Every run `GET /v1/runs?<query>` lists, following cursors, and the pages' sizes."""
    keys, sizes, cursor = [], [], None
    while True:
        page = api.get("/v1/runs", query=query + (f"&cursor={cursor}" if cursor else ""))
        assert page.status == 200, page
        keys += [item["runKey"] for item in page.body["items"]]
        sizes.append(len(page.body["items"]))
        cursor = page.body["nextCursor"]
        if not cursor:
            return keys, sizes


def test_every_run_of_every_job_is_listed_once_newest_first_across_pages(api, clock):
    jobs = [hourly(api, name=f"n{i}") for i in range(8)]
    assert len({run_lane("tenant-a", job_id) for job_id in jobs}) > 1  # the page merges lanes
    for job_id in jobs:
        clock.advance(1)
        assert api.post(f"/v1/jobs/{job_id}/trigger").status == 201
    expected = []
    for job_id in jobs:
        expected += [
            r["runKey"] for r in api.get(f"/v1/jobs/{job_id}/runs", query="view=all&limit=100").body["items"]
        ]
    keys, sizes = listed(api, "limit=3&until=2030-01-01T00:00:00Z")
    assert sorted(keys) == sorted(expected) and len(keys) == len(set(keys))
    page = api.get("/v1/runs", query="until=2030-01-01T00:00:00Z&limit=100").body["items"]
    orders = [(item["scheduledFor"], item["runKey"]) for item in page]
    assert orders == sorted(orders, reverse=True)
    assert max(sizes) == 3


def test_the_default_lists_runs_scheduled_by_now_and_items_need_no_detail_read(api, clock, worker):
    job_id = create(api, type="flaky", name="f")
    key = key_of(job_id)
    assert deliver(worker, key).outcome is AttemptOutcome.RETRY_SCHEDULED
    item = next(i for i in api.get("/v1/runs").body["items"] if i["runKey"] == key)
    assert (item["state"], item["attempts"], item["errorClass"]) == ("RETRY_WAIT", 1, "HTTP503")
    assert item["startedAt"] == "2026-11-02T08:00:00Z" and item["finishedAt"] is None
    ahead = create(api, runAt=None, every=10, name="ahead")
    made = [r["runKey"] for r in api.get(f"/v1/jobs/{ahead}/runs", query="view=upcoming").body["items"]]
    assert made, "a ten-second job has runs made ahead"
    due = {i["runKey"] for i in api.get("/v1/runs", query="limit=100").body["items"]}
    assert due.isdisjoint(made)
    later = api.get("/v1/runs", query="limit=100&until=2026-11-02T09:00:00Z").body["items"]
    assert set(made) <= {i["runKey"] for i in later}


def test_filters_keep_only_what_they_name(api, clock, worker):
    dead = create(api, type="bad", name="dead")
    assert deliver(worker, key_of(dead)).outcome is AttemptOutcome.DEAD
    ok = create(api, type="ok", name="ok")
    assert deliver(worker, key_of(ok)).outcome is AttemptOutcome.SUCCEEDED
    other = hourly(api, type="ext", name="other")
    clock.advance(5)
    manual = api.post(f"/v1/jobs/{other}/trigger").body["runKey"]

    assert listed(api, "state=DEAD")[0] == [key_of(dead)]
    assert set(listed(api, "state=DEAD,SUCCEEDED")[0]) == {key_of(dead), key_of(ok)}
    assert listed(api, "errorClass=HTTP400")[0] == [key_of(dead)]
    assert listed(api, "type=ok")[0] == [key_of(ok)]
    assert listed(api, "trigger=manual")[0] == [manual]
    assert listed(api, f"jobId={other}")[0] == [manual, key_of(other)]
    finished, _ = listed(api, "timeField=finished&since=2026-11-02T08:00:00Z")
    assert set(finished) == {key_of(dead), key_of(ok)}
    assert listed(api, "timeField=finished&until=2026-11-02T08:00:00Z")[0] == []
    assert listed(api, "since=2026-11-02T08:00:01Z")[0] == [manual]
    assert set(listed(api, "until=2026-11-02T08:00:01Z")[0]) == {key_of(dead), key_of(ok), key_of(other)}


def test_a_filter_that_keeps_few_runs_still_pages_to_every_match(api, clock, worker):
    dead = [create(api, type="bad", name=f"d{i}") for i in range(3)]
    for job_id in dead:
        assert deliver(worker, key_of(job_id)).outcome is AttemptOutcome.DEAD
    for i in range(12):
        assert (
            deliver(worker, key_of(create(api, type="ok", name=f"ok{i}"))).outcome is AttemptOutcome.SUCCEEDED
        )
    keys, _ = listed(api, "state=DEAD&limit=1")
    assert sorted(keys) == sorted(key_of(job_id) for job_id in dead)


def test_another_tenant_sees_none_and_cannot_use_the_cursor(api, other_api, clock):
    for i in range(RUN_LANES + 1):
        hourly(api, name=f"n{i}")
    mine = api.get("/v1/runs", query="limit=2")
    assert mine.status == 200 and mine.body["nextCursor"]
    assert other_api.get("/v1/runs").body == {"items": [], "nextCursor": None}
    stolen = other_api.get("/v1/runs", query=f"limit=2&cursor={mine.body['nextCursor']}")
    assert errors_of(stolen) == {"cursor"}
    other_job = hourly(other_api, name="theirs")
    assert api.get("/v1/runs", query=f"jobId={other_job}").status == 404


def test_a_cursor_is_bound_to_its_filters(api, clock):
    for i in range(RUN_LANES + 1):
        hourly(api, name=f"n{i}")
    cursor = api.get("/v1/runs", query="limit=2").body["nextCursor"]
    assert errors_of(api.get("/v1/runs", query=f"limit=2&state=DEAD&cursor={cursor}")) == {"cursor"}
    assert errors_of(api.get("/v1/runs", query="cursor=bm90LWEtY3Vyc29y")) == {"cursor"}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=BOGUS", "state"),
        ("state=DEAD,", "state"),
        ("since=yesterday", "since"),
        ("until=2026-13-01T00:00:00Z", "until"),
        ("since=2026-11-02T09:00:00Z&until=2026-11-02T08:00:00Z", "until"),
        ("trigger=cron", "trigger"),
        ("timeField=created", "timeField"),
        ("jobId=" + quote("j_A!"), "jobId"),
        ("limit=0", "limit"),
    ],
)
def test_bad_filters_are_a_400_naming_the_field(api, query, field):
    assert field in errors_of(api.get("/v1/runs", query=query))


@pytest.fixture
def ranges_checked(container, monkeypatch):
    """Queries refused as real DynamoDB refuses them (moto answers): a BETWEEN whose low end
    is above its high end is a ValidationException."""
    real_query = container.runs.client.query

    def as_dynamodb_would(**request):
        values = request.get("ExpressionAttributeValues", {})
        if " BETWEEN " in request["KeyConditionExpression"]:
            assert values[":a"]["S"] <= values[":b"]["S"], "ValidationException: lower bound above upper"
        return real_query(**request)

    monkeypatch.setattr(container.runs.client, "query", as_dynamodb_would)


def test_a_range_that_starts_after_now_is_empty_not_an_error(api, ranges_checked):
    """Without `until` the listing ends at now: a `since` after it leaves nothing to read, a
    key range DynamoDB would refuse (BETWEEN with its low end above its high)."""
    job_id = create(api, runAt=None, every=10, name="ahead")
    for query in ("since=2026-11-02T09:00:00Z", f"since=2026-11-02T09:00:00Z&jobId={job_id}"):
        answer = api.get("/v1/runs", query=query)
        assert answer.status == 200 and answer.body == {"items": [], "nextCursor": None}, answer


def forged(tenant, run_filter, before):
    """A cursor as the listing mints one, around a `before` of the caller's choosing."""
    import hashlib

    from jobsched.store.dynamo import encode_cursor, to_item

    scope = hashlib.sha256(run_filter.digest().encode()).hexdigest()[:16]
    return encode_cursor(to_item({"tenant": tenant, "before": before, "filter": scope}), tenant)


@pytest.mark.parametrize(
    "before",
    ["#x", "!", "2026-11-02T07:30:00Z#nojob", "2026-11-02T07:30:00Z#{job}@2026-11-01T00:00:00Z", "é" * 1000],
)
def test_a_forged_cursor_is_a_400_never_a_bad_range(api, ranges_checked, before):
    from jobsched.domain.run_listing import RunFilter

    job_id = hourly(api, name="n")
    before = before.format(job=job_id)
    for run_filter, query in ((RunFilter(), ""), (RunFilter(job_id=job_id), f"jobId={job_id}&")):
        answer = api.get("/v1/runs", query=f"{query}cursor={forged('tenant-a', run_filter, before)}")
        assert answer.status in (200, 400), answer
        if answer.status == 400:
            assert answer.body["errors"][0]["field"] == "cursor"


def test_a_finished_range_lists_a_run_that_ended_before_its_instant(api, clock):
    job_id = create(api, runAt=None, every=60, name="ahead")
    made = api.get(f"/v1/jobs/{job_id}/runs", query="view=upcoming").body["items"][0]["runKey"]
    assert api.post(f"/v1/runs/{quote(made, safe='')}/cancel").status == 200
    query = "timeField=finished&state=CANCELLED&since=2026-11-02T07:59:00Z&until=2026-11-02T08:00:01Z"
    assert listed(api, query)[0] == [made]
    assert listed(api, "timeField=finished&state=CANCELLED")[0] == [made]


def test_an_index_still_being_filled_after_an_upgrade_is_a_503_to_retry(api, container, monkeypatch):
    """DynamoDB refuses a query of an index it is still filling from the table (it was just
    added) with a ValidationException: the listing answers 503 with a Retry-After, not 500."""
    from botocore.exceptions import ClientError
    from jobsched.store.schema import TENANT_RUNS_INDEX

    client = container.runs.client
    query = client.query

    def backfilling(**params):
        if params.get("IndexName") == TENANT_RUNS_INDEX:
            message = f"Cannot read from backfilling global secondary index: {TENANT_RUNS_INDEX}"
            raise ClientError({"Error": {"Code": "ValidationException", "Message": message}}, "Query")
        return query(**params)

    monkeypatch.setattr(client, "query", backfilling)
    answer = api.get("/v1/runs")
    assert answer.status == 503 and answer.body["code"] == "unavailable", answer
    assert "still being built" in answer.body["message"]
    assert answer.headers["Retry-After"] == "60"
    monkeypatch.setattr(client, "query", query)
    assert api.get("/v1/runs").status == 200
