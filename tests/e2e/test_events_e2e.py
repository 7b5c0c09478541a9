"""Run and job events through local mode's bus: what a tenant's job and its runs publish,
read back with `GET /local/events` (what `jobsched events tail` reads), each event valid
against the published JSON Schema, ids unique, one tenant never seeing another's; and a
job's notification of its dead run delivered, signed, to the tenant's webhook."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jsonschema
import pytest
from jobsched.domain.events import CloudEvent
from jobsched_cli.client import ApiClient
from standardwebhooks.webhooks import Webhook

from .helpers import finish, instant, run_cli, unique, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]
SCHEMA = CloudEvent.model_json_schema(by_alias=True)


def events_of(client: ApiClient, subject_prefix: str) -> list[dict[str, Any]]:
    """Every event the bus holds for the caller whose subject starts with `subject_prefix`."""
    found: list[dict[str, Any]] = []
    cursor = 0
    while True:
        page = client.local_events(cursor)
        found.extend(e for e in page["items"] if str(e["subject"]).startswith(subject_prefix))
        if int(page["cursor"]) == cursor:
            return found
        cursor = int(page["cursor"])


def test_a_runs_whole_path_and_its_jobs_changes_are_published(client_a: ApiClient, client_b: ApiClient):
    job = client_a.create_job({"name": unique("events"), "type": "demo.hello", "runAt": instant(1)})
    job_id = job["jobId"]
    try:

        def run_done() -> list[dict[str, Any]]:
            seen = events_of(client_a, job_id)
            return seen if any(e["type"] == "jobsched.run.succeeded" for e in seen) else []

        seen = wait_for(run_done, what="the run's succeeded event", timeout=30)
    finally:
        finish(client_a, job_id)
    types = [e["type"] for e in seen]
    assert "jobsched.job.created" in types  # its own stream: no order against the run's events
    run_types = [e["type"] for e in seen if e["type"].startswith("jobsched.run.")]
    assert run_types[:1] == ["jobsched.run.created"] and run_types[-1] == "jobsched.run.succeeded"
    assert "jobsched.run.started" in run_types
    for event in seen:
        jsonschema.validate(event, SCHEMA)
        assert event["tenant"] == "tenant-a" and event["source"].endswith("/tenant-a")
    run_events = [e for e in seen if e["type"].startswith("jobsched.run.")]
    assert [e["data"]["sequence"] for e in run_events] == list(range(len(run_events)))
    assert len({e["id"] for e in seen}) == len(seen)
    assert events_of(client_b, job_id) == []  # another tenant never sees them


def test_a_dead_run_and_a_pause_carry_the_actor_and_the_error(client_a: ApiClient):
    job = client_a.create_job(
        {
            "name": unique("events-dead"),
            "type": "demo.webhook",
            "runAt": instant(1),
            # Nothing listens on the discard port: refused, retryable, and one attempt only.
            "target": {"kind": "http", "url": "http://127.0.0.1:9/hook"},
            "maxAttempts": 1,
        }
    )
    job_id = job["jobId"]

    def dead() -> list[dict[str, Any]]:
        return [e for e in events_of(client_a, job_id) if e["type"] == "jobsched.run.dead"]

    (event,) = wait_for(dead, what="the run's dead event", timeout=30)
    assert event["data"]["errorClass"] and event["data"]["actor"].startswith("worker:")
    assert event["data"]["from"] == "LEASED" and event["data"]["attempt"] == 1
    jsonschema.validate(event, SCHEMA)


def test_the_cli_tails_the_callers_events(client_a: ApiClient, api_url: str):
    job = client_a.create_job(
        {
            "name": unique("events-cli"),
            "type": "demo.hello",
            "every": 3600,
        }
    )
    try:
        client_a.pause(job["jobId"])
        wait_for(
            lambda: [e for e in events_of(client_a, job["jobId"]) if e["type"] == "jobsched.job.paused"],
            what="the paused event",
        )
        done = run_cli(
            api_url,
            ["--api-key", "key-a"],
            "events",
            "tail",
            "--from-start",
            "--type",
            "job.paused",
            "--count",
            "1",
        )
    finally:
        finish(client_a, job["jobId"])
    assert done.code == 0, done.err
    assert "job.paused" in done.out and "api:tenant-a" in done.out


def test_a_dead_run_is_told_to_the_jobs_webhook_signed_and_once(client_a: ApiClient):
    received: list[tuple[dict[str, str], bytes]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(
                (dict(self.headers.items()), self.rfile.read(int(self.headers["Content-Length"])))
            )
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_address[1]}/alerts"
    job = client_a.create_job(
        {
            "name": unique("notify-dead"),
            "type": "demo.webhook",
            "runAt": instant(1),
            "target": {"kind": "http", "url": "http://127.0.0.1:9/hook"},  # refused: it dies
            "maxAttempts": 1,
            "notify": [{"on": ["dead"], "target": {"kind": "http", "url": hook}}],
        }
    )
    try:
        ((headers, body),) = wait_for(lambda: list(received), what="the dead run's notification", timeout=40)
    finally:
        server.shutdown()
        server.server_close()
    event = json.loads(body)
    assert event["type"] == "jobsched.run.dead" and event["data"]["jobId"] == job["jobId"]
    jsonschema.validate(event, SCHEMA)
    assert headers["Idempotency-Key"] == f"{event['id']}#n0"
    sent_at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC)
    assert headers["webhook-signature"] == Webhook(job["signingSecret"]).sign(
        headers["webhook-id"], sent_at, body.decode()
    )
    # Local mode's event store reads the bus through a queue of its own: it may trail the
    # notifier.
    (published,) = wait_for(
        lambda: [e for e in events_of(client_a, job["jobId"]) if e["type"] == "jobsched.run.dead"],
        what="the bus's run.dead event",
        timeout=30,
    )
    assert published == event  # the bus's event, as delivered
