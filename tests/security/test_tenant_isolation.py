"""Invariant 8: a tenant can neither see nor change another tenant's jobs or runs.

Tenant A owns a dead run (driven there by a real worker), a leased run, and an active job.
Tenant B calls every route against them: each answers 404 (never 403, which would confirm the
resource exists), lists come back without A's items, and afterwards A's state is unchanged."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from jobsched.domain.errors import PermanentError
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Received
from jobsched.targets import HandlerRegistry

from tests.helpers import make_worker

pytestmark = pytest.mark.integration

NOW = "2026-11-02T08:00:00Z"  # tests.helpers.T0
WINDOW = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T01:00:00Z"}


@pytest.fixture
def worker(container):
    registry = HandlerRegistry()

    @registry.register("bad")
    def bad(payload, invocation):
        raise PermanentError("payload rejected", error_class="HTTP400")

    return make_worker(container, registry)


@pytest.fixture
def owned(api, worker):
    """Tenant A's resources: an active cron job whose first run is DEAD (its schedule
    referencing A's calendar `hols`), and a leased run."""
    calendar = api.put("/v1/calendars/hols", {"entries": [{"date": "2026-12-25"}]})
    assert calendar.status == 201, calendar
    job = api.post(
        "/v1/jobs", {"name": "a", "type": "bad", "cron": "0 * * * *", "exclude": [{"calendar": "hols"}]}
    )
    assert job.status == 201, job
    job_id = job.body["jobId"]
    dead_key = f"{job_id}@{NOW}"
    outcome = worker.process(Received(dead_key, job_id, NOW, "default")).outcome
    assert outcome is AttemptOutcome.DEAD

    ext = api.post("/v1/jobs", {"name": "e", "type": "ext", "runAt": NOW})
    assert ext.status == 201, ext
    lease_key = f"{ext.body['jobId']}@{NOW}"
    leases = api.post("/v1/leases", {"types": ["ext"], "workerId": "a-worker"}).body["leases"]
    assert [lease["runKey"] for lease in leases] == [lease_key]
    return {
        "job_id": job_id,
        "version": job.body["version"],
        "dead_key": dead_key,
        "lease_key": lease_key,
        "fence": leases[0]["fence"],
    }


def attempts(owned):
    """(route template, call) for every route that names a resource. The templates must cover
    the OpenAPI document (checked below), so a new route cannot skip this test."""
    job, dead, lease = owned["job_id"], quote(owned["dead_key"], safe=""), quote(owned["lease_key"], safe="")
    if_match = {"if-match": f'"{owned["version"]}"'}
    fence = owned["fence"]
    return [
        ("GET /v1/jobs/{job_id}", lambda b: b.get(f"/v1/jobs/{job}")),
        ("PATCH /v1/jobs/{job_id}", lambda b: b.patch(f"/v1/jobs/{job}", {"name": "x"}, headers=if_match)),
        ("DELETE /v1/jobs/{job_id}", lambda b: b.delete(f"/v1/jobs/{job}")),
        ("POST /v1/jobs/{job_id}/pause", lambda b: b.post(f"/v1/jobs/{job}/pause")),
        ("POST /v1/jobs/{job_id}/resume", lambda b: b.post(f"/v1/jobs/{job}/resume")),
        ("GET /v1/jobs/{job_id}/runs", lambda b: b.get(f"/v1/jobs/{job}/runs")),
        ("GET /v1/jobs/{job_id}/summary", lambda b: b.get(f"/v1/jobs/{job}/summary")),
        ("POST /v1/jobs/{job_id}/trigger", lambda b: b.post(f"/v1/jobs/{job}/trigger")),
        ("POST /v1/jobs/{job_id}/backfill", lambda b: b.post(f"/v1/jobs/{job}/backfill", WINDOW)),
        ("POST /v1/jobs/{job_id}/signing-secret", lambda b: b.post(f"/v1/jobs/{job}/signing-secret")),
        ("POST /v1/jobs/{job_id}/archive", lambda b: b.post(f"/v1/jobs/{job}/archive")),
        ("GET /v1/calendars/{name}", lambda b: b.get("/v1/calendars/hols")),
        ("DELETE /v1/calendars/{name}", lambda b: b.delete("/v1/calendars/hols")),
        ("GET /v1/runs/{run_key}", lambda b: b.get(f"/v1/runs/{dead}")),
        ("POST /v1/runs/{run_key}/redrive", lambda b: b.post(f"/v1/runs/{dead}/redrive", {"reason": "x"})),
        ("POST /v1/runs/{run_key}/cancel", lambda b: b.post(f"/v1/runs/{lease}/cancel")),
        (
            "POST /v1/leases/{run_key}/heartbeat",
            lambda b: b.post(f"/v1/leases/{lease}/heartbeat", {"fence": fence}),
        ),
        (
            "POST /v1/leases/{run_key}/complete",
            lambda b: b.post(f"/v1/leases/{lease}/complete", {"fence": fence, "outcome": "succeeded"}),
        ),
    ]


def test_every_route_naming_another_tenants_resource_is_404(api, other_api, owned):
    for route, call in attempts(owned):
        response = call(other_api)
        assert response.status == 404, f"{route}: {response}"
        # Nothing beyond "not found": no state, fence or version of the resource leaks.
        assert set(response.body) == {"code", "message"} and response.body["code"] == "not_found", route

    job = api.get(f"/v1/jobs/{owned['job_id']}")
    assert job.body["state"] == "ACTIVE" and job.body["version"] == owned["version"]
    assert job.body["name"] == "a"
    dead = api.get(f"/v1/runs/{quote(owned['dead_key'], safe='')}").body
    assert dead["state"] == "DEAD" and dead["redrives"] == 0
    leased = api.get(f"/v1/runs/{quote(owned['lease_key'], safe='')}").body
    assert leased["state"] == "LEASED" and leased["fence"] == owned["fence"]
    runs = api.get(f"/v1/jobs/{owned['job_id']}/runs").body["items"]
    assert [r["scheduledFor"] for r in runs] == [NOW]  # no trigger, no backfill landed
    calendar = api.get("/v1/calendars/hols").body
    assert calendar["version"] == 1 and calendar["usedBy"] == 1


# Routes with a resource that another tenant's call does not answer 404: a PUT of a calendar
# names the caller's own (created, never another tenant's), tested here.
PER_TENANT_NAMES = {"PUT /v1/calendars/{name}"}


def test_a_calendar_name_is_the_callers_own(api, other_api, owned):
    """Tenant B's PUT of A's calendar name creates B's own; A's is unchanged, and B's job
    referencing the name sees B's entries only."""
    response = other_api.put("/v1/calendars/hols", {"entries": []})
    assert response.status == 201 and response.body["version"] == 1 and response.body["usedBy"] == 0
    assert api.get("/v1/calendars/hols").body["entryCount"] == 1
    job = other_api.post(
        "/v1/jobs", {"name": "b", "type": "ext", "cron": "0 9 * * *", "exclude": [{"calendar": "hols"}]}
    )
    assert job.status == 201, job
    christmas = {"cron": "0 9 25 12 *", "exclude": [{"calendar": "hols"}], "count": 1}
    assert other_api.post("/v1/schedules/preview", christmas).body["fireTimes"][0]["fires"] is True
    assert api.post("/v1/schedules/preview", christmas).body["fireTimes"][0]["fires"] is False
    assert api.get("/v1/calendars/hols").body["usedBy"] == 1
    assert other_api.get("/v1/calendars").body["items"][0]["entryCount"] == 0


def test_lists_never_show_another_tenants_items(api, other_api, owned):
    assert other_api.get("/v1/jobs").body == {"items": [], "nextCursor": None}
    assert other_api.get("/v1/jobs", query="state=ACTIVE").body["items"] == []
    assert other_api.get("/v1/dead-letters").body == {"items": [], "nextCursor": None}
    assert other_api.get("/v1/calendars").body == {"items": []}
    assert [r["runKey"] for r in api.get("/v1/dead-letters").body["items"]] == [owned["dead_key"]]


def test_claiming_never_hands_out_another_tenants_runs(api, other_api, owned):
    other = api.post("/v1/jobs", {"name": "e2", "type": "ext", "runAt": NOW})
    assert other.status == 201
    claimed = other_api.post("/v1/leases", {"types": ["ext", "bad"], "workerId": "b", "max": 10})
    assert claimed.status == 200 and claimed.body["leases"] == []


def test_cursors_do_not_cross_tenants(api, other_api, owned):
    api.post("/v1/jobs", {"name": "b", "type": "ext", "runAt": NOW})
    cursor = api.get("/v1/jobs", query="limit=1").body["nextCursor"]
    assert cursor
    response = other_api.get("/v1/jobs", query=f"limit=1&cursor={cursor}")
    assert response.status == 400 and response.body["errors"][0]["field"] == "cursor"
    runs_cursor = api.get(f"/v1/jobs/{owned['job_id']}/runs", query="limit=1")
    assert runs_cursor.status == 200


def test_idempotency_keys_are_per_tenant(api, other_api):
    body = {"name": "same", "type": "ext", "runAt": NOW, "idempotencyKey": "k-1"}
    first = api.post("/v1/jobs", body)
    second = other_api.post("/v1/jobs", body)
    assert first.status == second.status == 201
    assert first.body["jobId"] != second.body["jobId"]
    assert other_api.get(f"/v1/jobs/{first.body['jobId']}").status == 404


def test_the_isolation_table_covers_every_route_with_a_resource(api, owned):
    """Every documented route with a path parameter is exercised above."""
    paths = api.get("/openapi.json").body["paths"]
    documented = {f"{method.upper()} {path}" for path, ops in paths.items() for method in ops if "{" in path}
    covered = {route for route, _ in attempts(owned)} | PER_TENANT_NAMES
    assert documented == covered


# --- tenant ids from IAM principals: kind and path included, so none collide ---

PRINCIPALS = [
    ("arn:aws:iam::123456789012:user/ci", "123456789012/user/ci"),
    ("arn:aws:iam::123456789012:user/deploy/ci", "123456789012/user/deploy/ci"),
    ("arn:aws:iam::123456789012:user/a/b/c/ci", "123456789012/user/a/b/c/ci"),
    ("arn:aws:sts::123456789012:assumed-role/ci/s1", "123456789012/role/ci"),
    ("arn:aws:sts::123456789012:assumed-role/ci/another-session", "123456789012/role/ci"),
    ("arn:aws:sts::123456789012:federated-user/ci", "123456789012/federated-user/ci"),
    ("arn:aws:iam::123456789012:root", "123456789012/root"),
    ("arn:aws:iam::210987654321:user/ci", "210987654321/user/ci"),
    ("arn:aws-cn:sts::123456789012:assumed-role/ci/s1", "123456789012/role/ci"),
    ("arn:aws-us-gov:iam::123456789012:user/ci@example.com", "123456789012/user/ci@example.com"),
]


@pytest.mark.parametrize(("arn", "tenant"), PRINCIPALS)
def test_every_iam_principal_shape_has_its_own_tenant(arn, tenant):
    from jobsched.handlers.api import principal_tenant

    assert principal_tenant(arn) == tenant


def test_principals_that_once_shared_a_tenant_no_longer_do():
    from jobsched.handlers.api import principal_tenant

    once_the_same = [
        "arn:aws:iam::123456789012:user/ci",
        "arn:aws:iam::123456789012:user/deploy/ci",
        "arn:aws:sts::123456789012:assumed-role/ci/s1",
        "arn:aws:sts::123456789012:federated-user/ci",
    ]
    assert len({principal_tenant(arn) for arn in once_the_same}) == len(once_the_same)


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:role/ci",  # a role itself never signs a request
        "arn:aws:sts::123456789012:assumed-role/ci",  # no session
        "arn:aws:iam::12345:user/ci",
        "arn:aws:iam::123456789012:group/ci",
        "not an arn",
        "arn:aws:iam::123456789012:user/",
    ],
)
def test_a_principal_of_no_known_shape_is_401(container, arn):
    response = iam_request(arn, "GET", "/v1/jobs")
    assert response["statusCode"] == 401, response


def iam_request(arn: str, method: str, path: str, body: dict | None = None) -> dict:
    """An API Gateway IAM-auth request: no authorizer, the caller's ARN in the identity."""
    import json

    from jobsched.handlers import api
    from jobsched_local.apigw import rest_event
    from jobsched_local.lambda_context import InvocationContext

    event = rest_event(
        method, path, body=json.dumps(body) if body else None, headers={"content-type": "application/json"}
    )
    event["requestContext"]["identity"]["userArn"] = arn
    return api.handler(event, InvocationContext(function_name="jobsched-api"))


def test_iam_principals_with_the_same_name_see_only_their_own_jobs(container):
    import json

    user = "arn:aws:iam::123456789012:user/ci"
    role = "arn:aws:sts::123456789012:assumed-role/ci/s1"
    created = iam_request(user, "POST", "/v1/jobs", {"name": "u", "type": "ext", "cron": "0 * * * *"})
    assert created["statusCode"] == 201, created
    job_id = json.loads(created["body"])["jobId"]
    assert json.loads(iam_request(role, "GET", "/v1/jobs")["body"])["items"] == []
    assert iam_request(role, "GET", f"/v1/jobs/{job_id}")["statusCode"] == 404
    # Another session of the same role is the same tenant.
    mine = iam_request(role, "POST", "/v1/jobs", {"name": "r", "type": "ext", "cron": "0 * * * *"})
    other_session = "arn:aws:sts::123456789012:assumed-role/ci/s2"
    listed = json.loads(iam_request(other_session, "GET", "/v1/jobs")["body"])["items"]
    assert [j["jobId"] for j in listed] == [json.loads(mine["body"])["jobId"]]


@pytest.mark.parametrize("tenant", ["tenant-a", "acme/prod", "123456789012", "1234567890123/x"])
def test_an_authorizers_tenant_id_is_kept_as_it_is(container, tenant):
    from tests.helpers import ApiClient

    client = ApiClient(tenant)
    job_id = client.post("/v1/jobs", {"name": "n", "type": "ext", "cron": "0 * * * *"}).body["jobId"]
    assert container.definitions.get(job_id).tenant == tenant


@pytest.mark.parametrize("tenant", ["123456789012/role/ci", "123456789012/root", "a\nb", "t" * 257])
def test_an_authorizers_tenant_id_never_takes_the_form_of_an_iam_one(container, tenant):
    from tests.helpers import ApiClient

    response = ApiClient(tenant).get("/v1/jobs")
    assert response.status == 401, response
