"""A run references its job's definition (target and payload) instead of copying it: the run
item stays small, and every run still runs with the definition of the version it was made
from, whatever updates, pauses and redrives come between. On moto, with a loopback HTTP
target that records what it received."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import quote

import boto3
import pytest
from jobsched.api_models.requests import JobBody
from jobsched.domain.events import RunEventsLevel
from jobsched.domain.runs import RunState, make_run
from jobsched.handlers import events as events_handler
from jobsched.services.attempt import AttemptOutcome
from jobsched.services.worker import Worker
from jobsched.store.definitions import DEFINITION_PREFIX, definition_id
from jobsched.store.runs import RunStore
from jobsched.store.schema import DEFINITIONS, RUNS
from jobsched.targets import HandlerRegistry, TargetRunner

from tests.helpers import boto3_client
from tests.integration.test_events_handler import stream_records
from tests.integration.test_once_per_run import Context
from tests.integration.test_worker import delivery
from tests.unit.test_targets_http import Receiver
from tests.unit.test_targets_http import client as http_client

pytestmark = pytest.mark.integration

# About 1 KB of JSON, as a job's payload.
PAYLOAD = {"rows": [{"id": f"row-{i:04d}", "value": "x" * 24} for i in range(22)]}
NEW_PAYLOAD = {"v": 2}
HOOK = "https://hooks.example.com/run"


@pytest.fixture
def receiver():
    hooks = Receiver()
    yield hooks
    hooks.close()


@pytest.fixture
def handled():
    return []  # the payloads the `ok` handler was called with


@pytest.fixture
def worker(container, clock, handled):
    registry = HandlerRegistry()

    @registry.register("ok")
    def ok(payload, invocation):
        handled.append(payload)
        return "ok"

    return Worker(
        container.definitions,
        container.runs,
        container.queues,
        TargetRunner(boto3_client, registry=registry, http=http_client()),
        clock,
        worker_id="w",
        metrics=container.metrics,
    ).for_invocation(Context("w", 900_000))


def every_minute(container, **fields):
    """A job firing every minute from 08:00 (T0); its creation makes the runs of 08:00-08:02."""
    body = {"name": "n", "type": "hook", "cron": "* * * * *", **fields}
    job = container.jobs.create("tenant-a", JobBody.model_validate(body).to_spec()).job
    return job, container.runs.list_for_job(job.job_id, limit=10, cursor=None, view="all").items[::-1]


def http(receiver, version, path="/ok"):
    return {
        "kind": "http",
        "url": receiver.url(f"{path}?v={version}"),
        "headers": {"X-Version": str(version)},
    }


def raw_item(run):
    item = boto3.client("dynamodb").get_item(
        TableName=RUNS.default_name,
        Key={"job_id": {"S": run.job_id}, "sk": {"S": "R#" + run.run_key.split("@", 1)[1]}},
        ConsistentRead=True,
    )["Item"]
    return item, json.loads(item["doc"]["S"])


def item_bytes(item):
    return sum(len(k.encode()) + len(str(next(iter(v.values()))).encode()) for k, v in item.items())


def received(receiver):
    """(path, X-Version header, payload) of each request the target received, in order."""
    return [(r.path, r.header("X-Version"), json.loads(r.body)["payload"]) for r in receiver.requests]


def patch(api, job_id, version, body):
    response = api.patch(f"/v1/jobs/{job_id}", body, headers={"If-Match": str(version)})
    assert response.status == 200, response
    return response.body


def run_view(api, run):
    response = api.get(f"/v1/runs/{quote(run.run_key, safe='')}")
    assert response.status == 200, response
    return response.body


def test_a_run_stores_no_copy_of_its_jobs_target_and_payload_and_delivers_them(
    container, clock, worker, receiver, api
):
    job, runs = every_minute(container, target=http(receiver, 1), payload=PAYLOAD)
    assert job.definition_since == 1
    first = runs[0]
    item, doc = raw_item(first)
    assert "target" not in doc and "payload" not in doc and doc["def"] == "http"
    assert item_bytes(item) < 1024

    result = worker.process(delivery(first))
    assert result.outcome is AttemptOutcome.SUCCEEDED, result
    assert received(receiver) == [("/ok?v=1", "1", PAYLOAD)]
    # Its writes kept it referencing the job's definition.
    item, doc = raw_item(first)
    assert "payload" not in doc and doc["def"] == "http"
    assert item_bytes(item) < 1024
    shown = run_view(api, first)
    assert shown["target"]["url"] == receiver.url("/ok?v=1") and shown["payload"] == PAYLOAD


def test_runs_made_before_an_update_run_with_their_version_and_later_runs_with_the_new(
    container, clock, worker, receiver, api
):
    job, (at_0800, at_0801, _) = every_minute(container, target=http(receiver, 1), payload=PAYLOAD)
    assert worker.process(delivery(at_0800)).outcome is AttemptOutcome.SUCCEEDED
    patch(api, job.job_id, 1, {"target": http(receiver, 2), "payload": NEW_PAYLOAD})
    updated = container.definitions.get(job.job_id)
    assert (updated.version, updated.definition_since) == (2, 2)
    # The definition the update replaced is kept for the runs made from it.
    target, payload = container.definitions.definition(job.job_id, 1)
    assert (target.url, payload) == (receiver.url("/ok?v=1"), PAYLOAD)

    clock.advance(180)  # 08:03: the sweep makes the next runs from version 2
    container.sweeper.sweep()
    made_after = container.runs.get_by_key(f"{job.job_id}@2026-11-02T08:04:00Z")
    assert (made_after.definition_since, made_after.definition_version) == (2, 2)

    clock.advance(60)
    assert worker.process(delivery(at_0801)).outcome is AttemptOutcome.SUCCEEDED
    assert worker.process(delivery(made_after)).outcome is AttemptOutcome.SUCCEEDED
    assert received(receiver) == [
        ("/ok?v=1", "1", PAYLOAD),  # 08:00, before the update
        ("/ok?v=1", "1", PAYLOAD),  # 08:01, made before the update, run after it
        ("/ok?v=2", "2", NEW_PAYLOAD),  # 08:04, made after it
    ]
    # The run views show what each ran with.
    old, new = run_view(api, at_0801), run_view(api, made_after)
    assert (old["target"]["url"], old["payload"]) == (receiver.url("/ok?v=1"), PAYLOAD)
    assert (new["target"]["url"], new["payload"]) == (receiver.url("/ok?v=2"), NEW_PAYLOAD)
    assert [j["jobId"] for j in api.get("/v1/jobs").body["items"]] == [job.job_id]


def snapshot_item(job_id, version):
    return boto3.client("dynamodb").get_item(
        TableName=DEFINITIONS.default_name,
        Key={"job_id": {"S": definition_id(job_id, version)}},
        ConsistentRead=True,
    )["Item"]


def test_a_replaced_definition_expires_after_every_run_made_from_it_can_need_it(
    container, clock, worker, receiver, api
):
    """The definition an update replaces carries the table's TTL from the update's own write:
    the runs' retention (30 days here) and 15 days more, the longest a run made before the
    update may stay open after it (maxAgeSeconds at most 14 days, and a day)."""
    job, (_, at_0801, _) = every_minute(
        container, target=http(receiver, 1), payload=PAYLOAD, retry={"maxAgeSeconds": 14 * 86400}
    )
    clock.advance(30)
    replaced_at = clock.now()
    patch(api, job.job_id, 1, {"payload": NEW_PAYLOAD})
    expires_at = int(snapshot_item(job.job_id, 1)["expires_at"]["N"])
    assert container.settings.retention_days == 30
    assert expires_at == int((replaced_at + timedelta(days=30 + 15)).timestamp())

    # A run made from it that runs as late as its maxAgeSeconds allows still finds it, and
    # is deleted before it.
    clock.advance(14 * 86400 - 120)
    assert worker.process(delivery(at_0801)).outcome is AttemptOutcome.SUCCEEDED
    assert received(receiver) == [("/ok?v=1", "1", PAYLOAD)]
    item, _ = raw_item(at_0801)
    assert int(item["expires_at"]["N"]) < expires_at

    # A later update stores the definition it replaces with its own expiry; the earlier
    # one keeps its own.
    clock.advance(3600)
    patch(api, job.job_id, 2, {"payload": {"v": 3}})
    assert int(snapshot_item(job.job_id, 2)["expires_at"]["N"]) == int(
        (clock.now() + timedelta(days=45)).timestamp()
    )
    assert int(snapshot_item(job.job_id, 1)["expires_at"]["N"]) == expires_at


def test_an_update_that_keeps_the_target_and_payload_keeps_the_definition_and_stores_no_copy(
    container, clock, worker, receiver, api, monkeypatch
):
    job, (at_0800, _, _) = every_minute(container, target=http(receiver, 1), payload=PAYLOAD)
    patch(api, job.job_id, 1, {"name": "renamed", "target": http(receiver, 1), "payload": PAYLOAD})
    clock.advance(30)
    assert api.post(f"/v1/jobs/{job.job_id}/pause", headers={"If-Match": "2"}).status == 200
    assert api.post(f"/v1/jobs/{job.job_id}/resume", headers={"If-Match": "3"}).status == 200
    resumed = container.definitions.get(job.job_id)
    assert (resumed.version, resumed.definition_since) == (4, 1)
    ddb = boto3.client("dynamodb")
    stored = ddb.scan(TableName=DEFINITIONS.default_name)["Items"]
    assert not [i for i in stored if i["job_id"]["S"].startswith(DEFINITION_PREFIX)]

    def never(*args):
        raise AssertionError("no snapshot is read for a definition the job still has")

    monkeypatch.setattr(container.definitions, "definition", never)
    clock.advance(180)
    container.sweeper.sweep()
    made_after = container.runs.get_by_key(f"{job.job_id}@2026-11-02T08:04:00Z")
    assert (made_after.definition_since, made_after.definition_version) == (1, 4)
    assert raw_item(made_after)[1]["def"] == "1:http"
    clock.advance(60)
    for run in (at_0800, made_after):
        assert worker.process(delivery(run)).outcome is AttemptOutcome.SUCCEEDED
    assert received(receiver) == [("/ok?v=1", "1", PAYLOAD)] * 2


def test_a_run_whose_definition_is_found_nowhere_dies_saying_so_and_runs_nothing(
    container, clock, worker, handled, api
):
    job, (at_0800, _, _) = every_minute(container, type="ok", target=None, payload={"v": 1})
    patch(api, job.job_id, 1, {"payload": NEW_PAYLOAD})
    boto3.client("dynamodb").delete_item(
        TableName=DEFINITIONS.default_name, Key={"job_id": {"S": definition_id(job.job_id, 1)}}
    )
    result = worker.process(delivery(at_0800))
    assert result.outcome is AttemptOutcome.DEAD and result.error_class == "DefinitionMissing"
    assert handled == []
    dead = container.runs.get_by_key(at_0800.run_key)
    assert dead.state is RunState.DEAD and dead.last_error_class == "DefinitionMissing"
    last = dead.history[-1]
    assert last.error_class == "DefinitionMissing"
    assert f"job {job.job_id} from version 1" in last.error_message
    assert container.metrics.total("DefinitionsMissing") == 1


def test_a_runs_detail_says_when_its_definition_is_no_longer_available(container, clock, receiver, api):
    job, (at_0800, _, _) = every_minute(container, target=http(receiver, 1), payload=PAYLOAD)
    assert run_view(api, at_0800)["definitionAvailable"] is True
    patch(api, job.job_id, 1, {"payload": NEW_PAYLOAD})
    boto3.client("dynamodb").delete_item(
        TableName=DEFINITIONS.default_name, Key={"job_id": {"S": definition_id(job.job_id, 1)}}
    )
    shown = run_view(api, at_0800)
    assert shown["definitionAvailable"] is False
    assert (shown["target"], shown["payload"]) == (None, None)  # not the run's: none to show
    # A run of the job's current version shows its definition; one with no target and a null
    # payload shows nulls that are its own.
    clock.advance(180)
    container.sweeper.sweep()
    current = run_view(api, container.runs.get_by_key(f"{job.job_id}@2026-11-02T08:04:00Z"))
    assert current["definitionAvailable"] is True and current["payload"] == NEW_PAYLOAD
    _, (own, _, _) = every_minute(container, type="ok", target=None, payload=None)
    shown_own = run_view(api, own)
    assert shown_own["definitionAvailable"] is True
    assert (shown_own["target"], shown_own["payload"]) == (None, None)


def test_an_external_worker_leases_each_run_with_the_payload_of_its_version(container, clock, api):
    job, (at_0800, at_0801, _) = every_minute(container, type="ext", payload=PAYLOAD)
    patch(api, job.job_id, 1, {"payload": NEW_PAYLOAD})
    clock.advance(180)
    container.sweeper.sweep()
    response = api.post("/v1/leases", {"types": ["ext"], "workerId": "ext-1", "max": 5})
    assert response.status == 200, response
    leased = {lease["runKey"]: lease["payload"] for lease in response.body["leases"]}
    assert leased[at_0800.run_key] == PAYLOAD and leased[at_0801.run_key] == PAYLOAD
    assert leased[f"{job.job_id}@2026-11-02T08:03:00Z"] == NEW_PAYLOAD


def test_a_redrive_fix_of_a_referencing_run_makes_the_definition_its_own(
    container, clock, worker, receiver, api
):
    job, (at_0800, at_0801, _) = every_minute(
        container, target=http(receiver, 1, "/status/400"), payload=PAYLOAD, maxAttempts=1
    )
    clock.advance(60)
    for run in (at_0800, at_0801):
        assert worker.process(delivery(run)).outcome is AttemptOutcome.DEAD
    patch(api, job.job_id, 1, {"target": http(receiver, 2), "payload": NEW_PAYLOAD})

    # The target fixed: the run keeps the payload it was made with (version 1's), not the job's.
    fixed = http(receiver, "fixed")
    assert api.post(f"/v1/runs/{at_0800.run_key}/redrive", {"target": fixed}).status == 200
    # The payload fixed: the run keeps version 1's target.
    assert api.post(f"/v1/runs/{at_0801.run_key}/redrive", {"payload": {"fixed": True}}).status == 200
    for run in (at_0800, at_0801):
        _, doc = raw_item(run)
        assert "def" not in doc and "target" in doc  # its own definition now, stored with it
    receiver.requests.clear()
    assert worker.process(delivery(at_0800)).outcome is AttemptOutcome.SUCCEEDED
    assert worker.process(delivery(at_0801)).outcome is AttemptOutcome.DEAD
    assert received(receiver) == [
        ("/ok?v=fixed", "fixed", PAYLOAD),
        ("/status/400?v=1", "1", {"fixed": True}),
    ]
    assert run_view(api, at_0801)["payload"] == {"fixed": True}


def test_a_run_item_that_holds_its_own_definition_still_reads_and_runs(
    container, clock, worker, receiver, api
):
    """Items written before runs referenced their job's definition carry it in their doc."""
    job, _ = every_minute(container, target=http(receiver, 1), payload=PAYLOAD)
    # A job stored before jobs had `definition_since`, and a run made from it then.
    old_job = job.model_copy(update={"definition_since": None})
    container.definitions.save(
        container.definitions.get(job.job_id).model_copy(update={"definition_since": None})
    )
    old = make_run(old_job, job.created_at + timedelta(seconds=30), now=clock.now(), actor="sweeper")
    assert container.runs.insert(old)
    _, doc = raw_item(old)
    assert doc["payload"] == PAYLOAD and doc["target"]["url"] == receiver.url("/ok?v=1") and "def" not in doc

    # Its next write gives the job a definition version; its own runs keep theirs.
    patch(api, job.job_id, 1, {"payload": NEW_PAYLOAD})
    assert container.definitions.get(job.job_id).definition_since == 2
    # Since when it had its definition was unknown: the one it replaced is kept under its
    # version, for runs made from that version that reference it (a job an earlier release
    # rewrote during a deploy); these old runs hold their own.
    kept_target, kept_payload = container.definitions.definition(job.job_id, 1)
    assert (kept_target.url, kept_payload) == (receiver.url("/ok?v=1"), PAYLOAD)
    expiry = clock.now() + timedelta(days=container.settings.retention_days + 15)
    assert int(snapshot_item(job.job_id, 1)["expires_at"]["N"]) == int(expiry.timestamp())
    clock.advance(60)
    assert worker.process(delivery(old)).outcome is AttemptOutcome.SUCCEEDED
    assert received(receiver) == [("/ok?v=1", "1", PAYLOAD)]
    assert run_view(api, old)["payload"] == PAYLOAD


def test_a_kept_definition_is_no_job_to_any_reader_of_the_definitions_table(container, api):
    job, _ = every_minute(container, type="ext", payload=PAYLOAD)
    patch(api, job.job_id, 1, {"payload": NEW_PAYLOAD})
    key = definition_id(job.job_id, 1)
    assert container.definitions.get(key) is None
    assert container.definitions.get_many([key, job.job_id]) == [container.definitions.get(job.job_id)]
    assert [j["jobId"] for j in api.get("/v1/jobs").body["items"]] == [job.job_id]
    records = stream_records(RunEventsLevel.ALL)
    assert records and not [r for r in records if r["dynamodb"]["Keys"]["job_id"]["S"] == key]
    snapshot_record = {
        "eventName": "INSERT",
        "dynamodb": {"Keys": {"job_id": {"S": key}}, "NewImage": {"job_id": {"S": key}}},
    }
    assert not events_handler.matches_filter(snapshot_record, RunEventsLevel.ALL, DEFINITIONS)
    assert events_handler.changes_of(snapshot_record, "stack", RunEventsLevel.ALL) == ([], [])
    assert container.definitions.definition(job.job_id, 1) == (None, PAYLOAD)


def test_a_run_read_back_without_its_target_still_calls_one(container, receiver, api):
    """Read back, a referencing run holds no target until resolved: whether it has one is
    told by its kind, so it is neither offered to external workers nor routed to them."""
    from jobsched.services.outbox import EXTERNAL, priority_router

    _, (at_0800, _, _) = every_minute(container, target=http(receiver, 1), payload=PAYLOAD)
    stored = container.runs.get_by_key(at_0800.run_key)
    assert stored.target is None and stored.has_target and stored.target_kind == "http"
    # A store without a router takes every target-less run for an external worker's.
    every_type_external = RunStore(None, RUNS.default_name, 4)
    assert not every_type_external.waits_for_lease(stored)
    assert "claim_key" not in every_type_external.to_item(stored)
    assert priority_router(lambda job_type: False)(stored) != EXTERNAL
    response = api.post("/v1/leases", {"types": ["hook"], "workerId": "ext-1", "max": 5})
    assert response.status == 200 and response.body["leases"] == []


def test_a_job_rewritten_without_its_definition_since_still_resolves_its_runs(
    container, clock, worker, receiver, api
):
    """During a deploy a function of the earlier release may still advance a job: it rewrites
    the item without `definition_since`. Its runs still run with their definition, and a
    later change of the job keeps the one it replaces for runs made before."""
    job, (at_0800, at_0801, _) = every_minute(container, target=http(receiver, 1), payload=PAYLOAD)
    stripped = container.definitions.get(job.job_id)
    container.definitions.save(stripped.model_copy(update={"definition_since": None}))
    assert worker.process(delivery(at_0800)).outcome is AttemptOutcome.SUCCEEDED  # unchanged since
    patch(api, job.job_id, 1, {"target": http(receiver, 2), "payload": NEW_PAYLOAD})
    assert container.definitions.get(job.job_id).definition_since == 2
    clock.advance(60)
    assert worker.process(delivery(at_0801)).outcome is AttemptOutcome.SUCCEEDED  # its version's
    assert received(receiver) == [("/ok?v=1", "1", PAYLOAD), ("/ok?v=1", "1", PAYLOAD)]


def test_a_kept_definition_and_signing_secrets_a_newer_release_wrote_still_read(container, api):
    """A job's other items, as a newer release writes them (members this release does not
    know in the stored definition, its target and each signing secret), read as they were."""
    job_id = api.post(
        "/v1/jobs",
        {
            "name": "n",
            "type": "ext",
            "every": 60,
            "payload": PAYLOAD,
            "target": {"kind": "http", "url": HOOK},
        },
    ).body["jobId"]
    definitions = container.definitions
    target = container.jobs.get("tenant-a", job_id).spec.target
    expires = container.clock.now() + timedelta(days=45)
    definitions.save_definition(job_id, 1, target, PAYLOAD, expires_at=expires)
    before = (definitions.definition(job_id, 1), definitions.signing_secrets(job_id))
    ddb = boto3.client("dynamodb")
    key = {"job_id": {"S": definition_id(job_id, 1)}}
    stored = json.loads(ddb.get_item(TableName=DEFINITIONS.default_name, Key=key)["Item"]["definition"]["S"])
    stored["added_later"] = 1
    stored["target"]["added_later"] = 2
    ddb.update_item(
        TableName=DEFINITIONS.default_name,
        Key=key,
        UpdateExpression="SET #d = :d",
        ExpressionAttributeNames={"#d": "definition"},
        ExpressionAttributeValues={":d": {"S": json.dumps(stored)}},
    )
    key = {"job_id": {"S": "signing#" + job_id}}
    secrets = json.loads(ddb.get_item(TableName=DEFINITIONS.default_name, Key=key)["Item"]["secrets"]["S"])
    ddb.update_item(
        TableName=DEFINITIONS.default_name,
        Key=key,
        UpdateExpression="SET secrets = :s",
        ExpressionAttributeValues={":s": {"S": json.dumps([{**s, "added_later": 3} for s in secrets])}},
    )

    assert (definitions.definition(job_id, 1), definitions.signing_secrets(job_id)) == before
