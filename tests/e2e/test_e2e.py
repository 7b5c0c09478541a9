"""The whole system driven only over HTTP (ApiClient) and through the CLI, against the chosen
target (local mode, or a deployed stack with `make e2e-aws`): the same tests and assertions,
only the endpoint and the auth differ.

Waits are bounded polls (the target's bound, JOBSCHED_E2E_TIMEOUT); jobs bound their own runs
(maxRuns) or are cancelled at the end, because every test shares one system (and moto slows
down with queue depth)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobsched_cli.client import ApiClient, ApiError

from .helpers import all_runs, finish, instant, run_cli, runs_in, unique
from .targets import Target

pytestmark = pytest.mark.e2e


def create(client: ApiClient, **body: Any) -> dict[str, Any]:
    return client.create_job({"name": unique(body.pop("prefix", "e2e")), "type": "demo.hello", **body})


def succeeded(client: ApiClient, job_id: str, at_least: int = 1) -> list[dict[str, Any]]:
    done = runs_in(client, job_id, "SUCCEEDED")
    return done if len(done) >= at_least else []


def effects_after(
    client: ApiClient, job_id: str, moment: str, until: str | None = None
) -> tuple[list[str], int]:
    """Invariant 6 from the outside: a run leased strictly after `moment` (the acknowledged
    pause or cancel, whole seconds), and before `until` (a resume), must be held (paused:
    back to PENDING for resume to decide) or end CANCELLED, never reach its effect. Returns
    the violations and how many runs were stopped that way."""
    violations, cancelled = [], 0
    for run in all_runs(client, job_id):
        if run["state"] in ("PENDING", "QUEUED") and run.get("blockedBy") != "job-paused":
            continue
        if run["updatedAt"] <= moment:  # every transition of it came before the moment
            continue
        transitions = client.get_run(run["runKey"])["transitions"]
        for index, entry in enumerate(transitions):
            if entry["to"] != "LEASED" or entry["at"] <= moment:
                continue
            if until is not None and entry["at"] >= until:
                continue
            following = transitions[index + 1] if index + 1 < len(transitions) else None
            if following is None:
                violations.append(f"{run['runKey']}: still LEASED (leased {entry['at']})")
            elif following["to"] == "CANCELLED" or (
                following["to"] == "PENDING" and following.get("reason") == "job paused"
            ):
                cancelled += 1
            else:
                violations.append(f"{run['runKey']}: leased {entry['at']} → {following['to']}")
    return violations, cancelled


def effect_and_runs_to_come(client: ApiClient, job_id: str, after: str = "") -> bool:
    """A run leased after `after` succeeded, and runs are queued for later: a pause or a
    cancel now has something to hold. (A deployed stack makes runs beyond the first at the
    sweeper's minute tick.)"""
    later = instant(4)
    runs = all_runs(client, job_id)
    to_come = any(r["state"] in ("PENDING", "QUEUED") and r["scheduledFor"] >= later for r in runs)
    if not to_come:
        return False
    for run in runs:
        if run["state"] == "SUCCEEDED" and run["updatedAt"] > after:
            leased = [t for t in client.get_run(run["runKey"])["transitions"] if t["to"] == "LEASED"]
            if leased and leased[-1]["at"] > after:
                return True
    return False


# --- each kind of schedule fires and succeeds ---


def test_six_field_cron_fires_every_two_seconds(target: Target, client_a: ApiClient) -> None:
    job = create(client_a, cron="*/2 * * * * *", timeZone="Europe/London", maxRuns=3)
    try:
        assert job["cron"] == "*/2 * * * * *" and job["timeZone"] == "Europe/London"
        done = target.wait(lambda: succeeded(client_a, job["jobId"]), what="a cron run to succeed")
        run = done[0]
        assert run["runKey"] == f"{job['jobId']}@{run['scheduledFor']}"
        assert int(run["scheduledFor"][17:19]) % 2 == 0  # on the cron's even seconds
        assert run["trigger"] == "schedule" and run["attempt"] == 1
        assert run["result"]["greeting"] == f"hello from {run['runKey']}"
    finally:
        finish(client_a, job["jobId"])


def test_one_time_job_runs_at_its_instant(target: Target, client_a: ApiClient) -> None:
    at = instant(3)
    job = create(client_a, runAt=at)
    assert job["nextRunAt"] == at
    done = target.wait(lambda: succeeded(client_a, job["jobId"]), what="the one-time run to succeed")
    assert [r["scheduledFor"] for r in all_runs(client_a, job["jobId"])] == [at]
    run = client_a.get_run(done[0]["runKey"])
    leased = next(t for t in run["transitions"] if t["to"] == "LEASED")
    assert leased["at"] >= at, "ran before its instant"
    assert [a["outcome"] for a in run["attempts"]] == ["succeeded"]
    final = target.wait(
        lambda: client_a.get_job(job["jobId"])["state"] == "COMPLETED", what="the one-time job to complete"
    )
    assert final


def test_rate_job_fires_every_two_seconds(target: Target, client_a: ApiClient) -> None:
    job = create(client_a, every="PT2S", maxRuns=3)
    try:
        assert job["every"] == 2
        done = target.wait(lambda: succeeded(client_a, job["jobId"], 2), what="two rate runs to succeed")
        times = sorted(r["scheduledFor"] for r in done)
        first, second = (int(t[11:13]) * 3600 + int(t[14:16]) * 60 + int(t[17:19]) for t in times[:2])
        assert (second - first) % 86400 == 2
    finally:
        finish(client_a, job["jobId"])


# --- failure: retry, dead letter, redrive ---


def test_failing_run_retries_dead_letters_and_redrive_succeeds(target: Target, client_a: ApiClient) -> None:
    # Fails every call until failForSeconds after its time (in any execution environment):
    # both attempts of the first series; the redrive, once that window is over, works.
    window = target.fail_seconds
    job = create(
        client_a,
        prefix="flaky",
        type="demo.flaky",
        runAt=instant(0),
        payload={"failForSeconds": window},
        maxAttempts=2,
        retry={"baseSeconds": 1, "capSeconds": 1},
    )

    def dead_letters() -> list[dict[str, Any]]:
        runs = all_runs(client_a, job["jobId"])
        if any(r["state"] == "SUCCEEDED" for r in runs):
            raise AssertionError(
                f"the run succeeded before it dead-lettered: its second attempt came after the "
                f"{window}s failure window; raise JOBSCHED_E2E_FAIL_SECONDS ({runs})"
            )
        return [r for r in runs if r["state"] == "DEAD"]

    dead = target.wait(dead_letters, what="the run to dead-letter")[0]
    run_key = dead["runKey"]
    assert dead["attempt"] == 2 and dead["lastErrorClass"] == "DemoFlaky"

    history = client_a.get_run(run_key)
    path = [t["to"] for t in history["transitions"] if t["to"] in ("LEASED", "RETRY_WAIT", "DEAD")]
    assert path == ["LEASED", "RETRY_WAIT", "LEASED", "DEAD"]
    assert [a["outcome"] for a in history["attempts"]] == ["failed", "dead"]
    assert all(a["errorClass"] == "DemoFlaky" for a in history["attempts"])

    letters = client_a.dead_letters(all_pages=True)["items"]
    assert run_key in {r["runKey"] for r in letters}

    scheduled = datetime.strptime(dead["scheduledFor"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    recovers_at = scheduled + timedelta(seconds=window)
    target.wait(
        lambda: datetime.now(UTC) > recovers_at,
        what="demo.flaky's failure window to close",
        timeout=window + 5,
    )
    redriven = client_a.redrive(run_key, reason="dependency is back")
    assert redriven["runKey"] == run_key and redriven["redrives"] == 1
    done = target.wait(
        lambda: client_a.get_run(run_key)["state"] == "SUCCEEDED" and client_a.get_run(run_key),
        what="the redriven run to succeed",
    )
    assert done["runKey"] == run_key
    assert done["result"] == {"failedUntil": recovers_at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert [r["runKey"] for r in all_runs(client_a, job["jobId"])] == [run_key]  # no new run
    redrive = next(t for t in done["transitions"] if t["from"] == "DEAD")
    assert "dependency is back" in redrive["reason"] and redrive["actor"] == f"api:{target.tenant}"
    assert run_key not in {r["runKey"] for r in client_a.dead_letters(all_pages=True)["items"]}


# --- pause, resume and cancel: no new effect after the acknowledgement ---


def test_pause_resume_and_cancel_stop_new_effects(target: Target, client_a: ApiClient) -> None:
    # Unbounded: with maxRuns or a near endAt every run is made at once and the job is
    # COMPLETED (no longer pausable) while its runs are still to come.
    job = create(client_a, prefix="pause", every=2)
    job_id = job["jobId"]
    try:
        target.wait(
            lambda: effect_and_runs_to_come(client_a, job_id), what="a first effect and runs queued after it"
        )
        paused = client_a.pause(job_id)
        assert paused["state"] == "PAUSED"
        moment = paused["updatedAt"]
        # Runs already queued keep coming due; each must be held instead of run.
        target.wait(
            lambda: effects_after(client_a, job_id, moment)[1] >= 1,
            what="a due run to reach the worker after the pause",
        )
        violations, _ = effects_after(client_a, job_id, moment)
        assert not violations, violations
        for run in runs_in(client_a, job_id, "SUCCEEDED"):  # every effect was leased before the pause
            leased = [t for t in client_a.get_run(run["runKey"])["transitions"] if t["to"] == "LEASED"]
            assert leased[-1]["at"] <= moment, run

        resumed = client_a.resume(job_id)
        assert resumed["state"] == "ACTIVE" and resumed["version"] > paused["version"]
        assert client_a.get_job(job_id)["state"] == "ACTIVE"
        target.wait(
            lambda: effect_and_runs_to_come(client_a, job_id, after=resumed["updatedAt"]),
            what="an effect after the resume, and runs queued after it",
        )
        violations, _ = effects_after(client_a, job_id, moment, until=resumed["updatedAt"])
        assert not violations, violations  # nothing leased while paused reached its effect

        cancelled = client_a.cancel_job(job_id)
        assert cancelled["state"] == "CANCELLED" and cancelled.get("nextRunAt") is None
        assert client_a.cancel_job(job_id)["version"] == cancelled["version"]  # idempotent
        with pytest.raises(ApiError) as conflict:
            client_a.resume(job_id)
        assert conflict.value.status == 409 and conflict.value.code == "conflict"
        # The cancel itself cancels the runs not yet started; one leased meanwhile ends
        # CANCELLED at its worker's check. Either way none reaches its effect.
        target.wait(
            lambda: runs_in(client_a, job_id, "CANCELLED") != [],
            what="the job's runs still to come to be cancelled",
        )
        violations, _ = effects_after(client_a, job_id, cancelled["updatedAt"])
        assert not violations, violations
    finally:
        finish(client_a, job_id)


# --- authentication and tenancy ---


def raw_status(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.local_only  # local mode's API keys; a deployed stack authenticates with SigV4
def test_requests_without_a_valid_key_are_401(api_url: str) -> None:
    status, body = raw_status(f"{api_url}/v1/jobs", {})
    assert status == 401 and body["code"] == "unauthenticated"
    status, body = raw_status(f"{api_url}/v1/jobs", {"x-api-key": "not-a-key"})
    assert status == 401 and body["code"] == "unauthenticated"
    status, _ = raw_status(f"{api_url}/v1/jobs", {"x-api-key": "key-a"})
    assert status == 200


@pytest.mark.local_only  # needs two tenants: local mode's two API keys
def test_other_tenants_jobs_and_runs_do_not_exist(client_a: ApiClient, client_b: ApiClient) -> None:
    job = create(client_a, prefix="private", cron="0 0 1 1 *")
    job_id = job["jobId"]
    run_key = client_a.trigger(job_id)["runKey"]
    try:
        calls = {
            "get job": lambda: client_b.get_job(job_id),
            "runs": lambda: client_b.list_runs(job_id),
            "summary": lambda: client_b.job_summary(job_id),
            "pause": lambda: client_b.pause(job_id),
            "patch": lambda: client_b.update_job(job_id, {"name": "stolen"}, if_match=1),
            "cancel": lambda: client_b.cancel_job(job_id),
            "trigger": lambda: client_b.trigger(job_id),
            "get run": lambda: client_b.get_run(run_key),
            "cancel run": lambda: client_b.cancel_run(run_key),
            "redrive": lambda: client_b.redrive(run_key),
        }
        for name, call in calls.items():
            with pytest.raises(ApiError) as missing:
                call()
            assert missing.value.status == 404, name
            assert missing.value.code == "not_found", name
        assert job_id not in {j["jobId"] for j in client_b.list_jobs(all_pages=True)["items"]}
        assert client_a.get_job(job_id)["state"] == "ACTIVE"  # untouched by tenant-b
        assert client_a.get_run(run_key)["runKey"] == run_key
    finally:
        finish(client_a, job_id)


# --- the CLI against the running system ---


def test_cli_commands_against_the_running_system(target: Target, client_a: ApiClient) -> None:
    name = unique("cli")

    def cli(*args: str) -> Any:
        return run_cli(target.endpoint, target.cli_auth(), *args)

    created = cli(
        "jobs", "create", "--name", name, "--type", "demo.hello",
        "--cron", "0 0 1 1 *", "--tz", "Europe/London",
        "--payload", '{"from": "cli"}', "--set", "retry.baseSeconds=1", "--json",
    )  # fmt: skip
    assert created.code == 0, created.err
    job = json.loads(created.out)
    assert job["name"] == name and job["cron"] == "0 0 1 1 *" and job["timeZone"] == "Europe/London"
    assert job["payload"] == {"from": "cli"} and job["retry"]["baseSeconds"] == 1
    job_id = job["jobId"]
    try:
        listed = cli("jobs", "list", "--all")
        assert listed.code == 0, listed.err
        header, *rows = listed.out.splitlines()
        assert header.split()[:3] == ["JOB", "ID", "NAME"]
        assert any(row.startswith(job_id) and name in row and "ACTIVE" in row for row in rows)

        listed_json = cli("jobs", "list", "--json", "--limit", "100")
        assert listed_json.code == 0 and job_id in {j["jobId"] for j in json.loads(listed_json.out)["items"]}

        renamed = cli("jobs", "update", job_id, "--set", f"name={name}-2")
        assert renamed.code == 0, renamed.err
        assert "using the current version 1" in renamed.err
        assert f"{name}-2" in renamed.out and client_a.get_job(job_id)["version"] == 2

        stale = cli("jobs", "update", job_id, "--if-match", "1", "--set", "name=again")
        assert stale.code == 1 and "error: 412 version_mismatch" in stale.err
        assert "currentVersion: 2" in stale.err

        triggered = cli("jobs", "trigger", job_id)
        assert triggered.code == 0, triggered.err
        run_key = triggered.out.split()[1]
        assert run_key.startswith(f"{job_id}@")
        target.wait(lambda: client_a.get_run(run_key)["state"] == "SUCCEEDED", what="the triggered run")

        runs = cli("runs", "list", job_id)
        assert runs.code == 0, runs.err
        assert runs.out.splitlines()[0].split()[:3] == ["RUN", "KEY", "STATE"]
        assert any(
            run_key in line and "SUCCEEDED" in line and "manual" in line for line in runs.out.splitlines()
        )

        detail = cli("runs", "get", run_key)
        assert detail.code == 0, detail.err
        table = detail.out.split("transitions:\n", 1)[1].splitlines()
        assert table[0].split()[:4] == ["AT", "ACTOR", "FROM", "TO"]
        assert [line.split()[3] for line in table[1:]][-1] == "SUCCEEDED"

        # Connection options work after the command as well as before it.
        fetched = run_cli(target.endpoint, [], "jobs", "get", job_id, *target.cli_auth(), "--json")
        assert fetched.code == 0 and json.loads(fetched.out)["jobId"] == job_id

        letters = cli("dlq", "list")
        assert letters.code == 0, letters.err
        assert letters.out.splitlines()[0].split()[:3] == ["RUN", "KEY", "ATTEMPT"]

        paused = cli("jobs", "pause", job_id)
        assert paused.code == 0 and paused.out.split()[:2] == [job_id, "PAUSED"]
        cancelled = cli("jobs", "cancel", job_id, "--json")
        assert cancelled.code == 0 and json.loads(cancelled.out)["state"] == "CANCELLED"
    finally:
        finish(client_a, job_id)


@pytest.mark.local_only  # needs two tenants: local mode's two API keys
def test_cli_other_tenants_job_is_404(api_url: str, client_a: ApiClient) -> None:
    job = create(client_a, prefix="cli-private", cron="0 0 1 1 *")
    try:
        foreign = run_cli(api_url, ["--api-key", "key-b"], "jobs", "get", job["jobId"])
        assert foreign.code == 1 and foreign.err.startswith("error: 404 not_found")
    finally:
        finish(client_a, job["jobId"])


def test_cli_bad_cron_is_exit_1_naming_the_field(target: Target) -> None:
    result = run_cli(
        target.endpoint,
        target.cli_auth(),
        "jobs",
        "create",
        "--name",
        unique("bad"),
        "--type",
        "demo.hello",
        "--cron",
        "0 25 * * *",
    )
    assert result.code == 1
    assert result.out == ""
    # one field's rule stays on the first line, and is not repeated below it
    assert result.err.splitlines() == [
        "error: 400 invalid_request: cron: '0 25 * * *' is not a valid cron expression"
    ]


def test_cli_usage_error_is_exit_2(target: Target) -> None:
    auth = target.cli_auth()
    missing_schedule = run_cli(target.endpoint, auth, "jobs", "create", "--name", "x", "--type", "demo.hello")
    assert missing_schedule.code == 2 and "one of the arguments" in missing_schedule.err
    bad_set = run_cli(
        target.endpoint, auth, "jobs", "create", "--name", "x", "--type", "t", "--every", "5", "--set", "x"
    )
    assert bad_set.code == 2 and "key=value" in bad_set.err


def test_cli_tail_follows_state_changes(target: Target, client_a: ApiClient) -> None:
    # Twenty seconds of runs: the tail's first poll (after the CLI has started, seconds on a
    # loaded machine) only notes where runs are, so the job must still be running then.
    job = create(client_a, prefix="tail", every=2, maxRuns=10)
    try:
        tail = run_cli(
            target.endpoint, target.cli_auth(), "tail", job["jobId"], "--interval", "0.3", "--count", "4"
        )
        assert tail.code == 0, tail.err
        lines = tail.out.splitlines()
        assert len(lines) == 4
        assert all(job["name"][:24] in line and f"{job['jobId']}@" in line and "→" in line for line in lines)
        assert any("LEASED" in line for line in lines) or any("SUCCEEDED" in line for line in lines)
    finally:
        finish(client_a, job["jobId"])
