"""`jobsched.client.apply`: a jobs file made to match the server, through the client, against
the real `api` handler on moto: the plan, dry runs, idempotence, ownership, refusals and
conflicts."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from jobsched.client import Client, Invalid, JobView
from jobsched.client.apply import (
    Action,
    Outcome,
    apply,
    execute,
    managed_name,
    parse_jobs_file,
    plan,
    read_jobs_file,
)

from tests.integration.test_client import ENDPOINT, HandlerTransport, _no_sleep

pytestmark = pytest.mark.integration

FILE = """
set = "billing"

[[jobs]]
name = "nightly-invoices"   # a comment, as a reviewer reads it
type = "invoice.batch"
cron = "0 2 * * *"
timeZone = "Europe/Paris"
maxAttempts = 5
[jobs.payload]
region = "eu"

[[jobs]]
name = "sync"
type = "ledger.sync"
every = "PT15M"

[[jobs]]
name = "old-report"
type = "report.build"
cron = "0 9 * * 1"
"""


@pytest.fixture
def wire(container: Any) -> HandlerTransport:
    return HandlerTransport()


@pytest.fixture
def client(wire: HandlerTransport) -> Client:
    return Client(ENDPOINT, transport=wire, sleep=_no_sleep)


def jobs_file(tmp_path: Path, text: str = FILE) -> Any:
    path = tmp_path / "jobs.toml"
    path.write_text(text, encoding="utf-8")
    return read_jobs_file(path)


def live(client: Client) -> dict[str, JobView]:
    return {job.name: job for job in client.iter_jobs() if job.state.value in ("ACTIVE", "PAUSED")}


def writes(wire: HandlerTransport) -> list[str]:
    return [f"{e['method']} {e['url']}" for e in wire.exchanges if e["method"] != "GET"]


def test_first_apply_creates_every_job_and_a_second_is_a_no_op(
    client: Client, wire: HandlerTransport, tmp_path
):
    spec = jobs_file(tmp_path)
    first = apply(client, spec)
    assert first.ok and [s.action for s in first.plan.steps] == [Action.CREATE] * 3
    jobs = live(client)
    assert set(jobs) == {managed_name("billing", n) for n in ("nightly-invoices", "sync", "old-report")}
    assert jobs[managed_name("billing", "nightly-invoices")].time_zone == "Europe/Paris"
    assert jobs[managed_name("billing", "sync")].every == 900

    wire.exchanges.clear()
    second = apply(client, spec)
    assert second.ok and not second.plan.writes
    assert [s.action for s in second.plan.steps] == [Action.UNCHANGED] * 3
    assert writes(wire) == []  # nothing sent but reads
    assert live(client).keys() == jobs.keys()


def test_plan_names_create_change_unchanged_and_cancel(client: Client, tmp_path):
    apply(client, jobs_file(tmp_path))
    before = live(client)
    edited = FILE.replace('cron = "0 2 * * *"', 'cron = "30 2 * * *"').split('[[jobs]]\nname = "old-report"')[
        0
    ]
    edited += '\n[[jobs]]\nname = "weekly"\ntype = "report.build"\ncron = "0 8 * * 1"\n'
    spec = jobs_file(tmp_path, edited)

    planned = plan(client, spec)
    steps = {s.name: s for s in planned.steps}
    assert {n: s.action for n, s in steps.items()} == {
        "weekly": Action.CREATE,
        "nightly-invoices": Action.CHANGE,
        "sync": Action.UNCHANGED,
        "old-report": Action.CANCEL,
    }
    nightly = before[managed_name("billing", "nightly-invoices")]
    assert steps["nightly-invoices"].version == nightly.version and steps["nightly-invoices"].patch == {
        "cron": "30 2 * * *"
    }
    assert steps["old-report"].job_id == before[managed_name("billing", "old-report")].job_id

    result = execute(client, planned)
    assert result.ok
    after = live(client)
    assert managed_name("billing", "old-report") not in after
    assert after[managed_name("billing", "nightly-invoices")].cron == "30 2 * * *"
    assert after[managed_name("billing", "nightly-invoices")].version == nightly.version + 1
    assert after[managed_name("billing", "nightly-invoices")].time_zone == "Europe/Paris"  # kept
    assert managed_name("billing", "weekly") in after
    assert not plan(client, spec).writes


def test_dry_run_writes_nothing(client: Client, wire: HandlerTransport, tmp_path):
    result = apply(client, jobs_file(tmp_path), dry_run=True)
    assert result.dry_run and result.plan.count(Action.CREATE) == 3
    assert {r.outcome for r in result.results} == {Outcome.PLANNED}
    assert writes(wire) == [] and live(client) == {}


def test_jobs_not_created_by_apply_are_never_cancelled(client: Client, tmp_path):
    by_hand = client.create_job({"name": "nightly-invoices", "type": "invoice.batch", "cron": "0 2 * * *"})
    other_set = client.create_job({"name": managed_name("payroll", "x"), "type": "p.x", "cron": "0 1 * * *"})
    apply(client, jobs_file(tmp_path))
    result = apply(client, jobs_file(tmp_path, 'set = "billing"\n'))  # the file now names nothing

    assert result.plan.count(Action.CANCEL) == 3
    assert {s.job_id for s in result.plan.steps} & {by_hand.job_id, other_set.job_id} == set()
    assert set(live(client)) == {"nightly-invoices", managed_name("payroll", "x")}


def test_an_invalid_job_refuses_the_whole_file_naming_the_job_and_field(
    client: Client, wire: HandlerTransport, tmp_path
):
    bad = FILE.replace('every = "PT15M"', 'every = "fortnightly"')
    with pytest.raises(Invalid) as refused:
        apply(client, jobs_file(tmp_path, bad))
    assert refused.value.status == 400 and refused.value.fields == ["jobs[1].every"]
    assert 'jobs[1] "sync"' in refused.value.message
    assert wire.exchanges == []  # nothing sent, not even the good jobs

    with pytest.raises(Invalid) as twice:
        parse_jobs_file({"set": "billing", "jobs": [{"name": "a", "type": "t", "cron": "0 * * * *"}] * 2})
    assert twice.value.fields == ["jobs[1].name"]
    with pytest.raises(Invalid) as no_set:
        parse_jobs_file({"jobs": [{"name": "a", "type": "t", "runAt": "soon"}]})
    assert no_set.value.fields == ["set", "jobs[0].runAt"]


def test_a_job_changed_on_the_server_since_the_plan_is_a_conflict_not_overwritten(client: Client, tmp_path):
    apply(client, jobs_file(tmp_path))
    planned = plan(client, jobs_file(tmp_path, FILE.replace('"PT15M"', '"PT5M"')))
    (step,) = [s for s in planned.steps if s.action is Action.CHANGE]
    assert step.job_id is not None
    moved = client.update_job(step.job_id, {"payload": {"by": "hand"}}, version=step.version)

    result = execute(client, planned)
    (conflict,) = [r for r in result.results if r.step is step]
    assert conflict.outcome is Outcome.CONFLICT and conflict.version == moved.version
    assert not result.ok
    kept = client.get_job(moved.job_id)
    assert kept.version == moved.version and kept.every == 900 and kept.payload == {"by": "hand"}


def test_a_create_repeated_after_a_lost_answer_finds_the_job(client: Client, tmp_path):
    spec = jobs_file(tmp_path)
    planned = plan(client, spec)
    first = execute(client, planned)
    again = execute(client, planned)  # the same plan sent again, as after a lost answer
    assert again.ok
    assert [r.job_id for r in again.results] == [r.job_id for r in first.results]
    assert len(live(client)) == 3


# --- `jobsched apply`: the same, from the command line ---


def run_cli(monkeypatch: pytest.MonkeyPatch, client: Client, *argv: str) -> int:
    from jobsched_cli import commands, main

    monkeypatch.setattr(commands, "Client", lambda *a, **kw: client)
    return main(list(argv))


def test_cli_prints_the_plan_stops_at_dry_run_then_applies_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], client: Client, wire, tmp_path
):
    path = tmp_path / "jobs.toml"
    path.write_text(FILE, encoding="utf-8")

    assert run_cli(monkeypatch, client, "apply", str(path), "--dry-run") == 0
    out = capsys.readouterr().out
    assert "plan for set 'billing'" in out and "3 create, 0 change, 0 unchanged, 0 cancel" in out
    assert "nightly-invoices" in out and "dry run: nothing written" in out and writes(wire) == []

    assert run_cli(monkeypatch, client, "apply", str(path)) == 0
    assert "applied" in capsys.readouterr().out and len(live(client)) == 3

    assert run_cli(monkeypatch, client, "apply", str(path), "--json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["ok"] and {s["action"] for s in answer["steps"]} == {"unchanged"}


def test_cli_refuses_an_invalid_file_naming_the_job_and_field(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], client: Client, wire, tmp_path
):
    path = tmp_path / "jobs.toml"
    path.write_text(FILE.replace('type = "ledger.sync"', 'type = "ledger sync!"'), encoding="utf-8")
    assert run_cli(monkeypatch, client, "apply", str(path)) == 1
    err = capsys.readouterr().err
    assert "400 invalid_request" in err and "jobs[1].type" in err and 'jobs[1] "sync"' in err
    assert wire.exchanges == []


def test_cli_a_file_it_cannot_read_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], client: Client, tmp_path
):
    assert run_cli(monkeypatch, client, "apply", str(tmp_path / "missing.toml")) == 2
    assert "missing.toml: cannot read it (No such file or directory)" in capsys.readouterr().err


def test_cli_exits_1_on_a_conflict_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], client: Client, tmp_path
):
    apply(client, jobs_file(tmp_path))
    changed = jobs_file(tmp_path, FILE.replace('"PT15M"', '"PT5M"'))
    sync = live(client)[managed_name("billing", "sync")]
    real_plan = plan

    def plan_then_moved(c: Client, spec: Any) -> Any:  # someone edits the job between plan and write
        planned = real_plan(c, spec)
        c.update_job(sync.job_id, {"payload": {"by": "hand"}}, version=sync.version)
        return planned

    from jobsched_cli import commands

    monkeypatch.setattr(commands, "plan", plan_then_moved)
    assert changed and run_cli(monkeypatch, client, "apply", str(tmp_path / "jobs.toml")) == 1
    out = capsys.readouterr().out
    assert "conflict" in out and f"changed on the server since version {sync.version}" in out


def test_the_documented_example_file_applies_and_stays_applied(client: Client, tmp_path):
    page = (Path(__file__).parents[2] / "docs/concepts/schedules-in-code.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"^```toml\n(.*?)^```", page, re.S | re.M)
    spec = jobs_file(tmp_path, example)
    assert spec.set_name == "billing" and len(spec.jobs) == 3
    assert apply(client, spec).ok
    assert not plan(client, spec).writes


def test_toml_date_times_are_instants_and_one_without_an_offset_is_refused(tmp_path):
    job = 'set = "s"\n[[jobs]]\nname = "once"\ntype = "t"\nrunAt = '
    spec = jobs_file(tmp_path, job + "2027-01-04T09:00:00Z\n")
    assert spec.jobs["once"].run_at == datetime(2027, 1, 4, 9, tzinfo=UTC)
    with pytest.raises(Invalid) as refused:
        jobs_file(tmp_path, job + "2027-01-04T09:00:00\n")
    assert refused.value.fields == ["jobs[0].runAt"]


def test_an_archived_completed_job_still_stands_for_its_name(client: Client, tmp_path):
    """A one-time job the file names, completed and then archived, is not created again."""
    once = 'set = "s"\n[[jobs]]\nname = "once"\ntype = "t"\nrunAt = 2026-11-02T08:00:30Z\n'
    assert apply(client, jobs_file(tmp_path, once)).ok
    (job,) = [j for j in client.iter_jobs() if j.name == managed_name("s", "once")]
    assert job.state.value == "COMPLETED"
    client.archive_job(job)
    again = plan(client, jobs_file(tmp_path, once))
    assert [s.action for s in again.steps] == [Action.UNCHANGED]
