"""Local mode's console: no output meant for Lambda, no tracebacks for clients that hang up,
a start-up summary with every key, and a run table that shows every tenant's runs in order."""

from __future__ import annotations

import io
import logging
import sys
import warnings
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from aws_lambda_powertools.metrics import Metrics, MetricUnit, single_metric
from jobsched.domain import lifecycle
from jobsched.domain.runs import Run, RunState
from jobsched.store.runs import RunStore
from jobsched_local.background import BackgroundServer
from jobsched_local.config import LocalConfig
from jobsched_local.console import (
    DETAIL_WIDTH,
    EmfFilter,
    RunTable,
    detail_of,
    quiet_console,
    startup_banner,
)

# --- clients that hang up ---


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")])
def test_a_client_that_went_away_is_no_traceback(
    error: OSError, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    server = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    try:
        BackgroundServer(server, "test")
        try:
            raise error
        except OSError:
            server.handle_error(server.socket, ("127.0.0.1", 50000))
    finally:
        server.server_close()
    assert capsys.readouterr().err == ""
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_any_other_request_error_is_logged_with_its_traceback(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    server = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    try:
        BackgroundServer(server, "test")
        try:
            raise ValueError("bad handler")
        except ValueError:
            server.handle_error(server.socket, ("127.0.0.1", 50000))
    finally:
        server.server_close()
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.exc_info is not None and record.exc_info[0] is ValueError


# --- nothing meant for Lambda ---


def test_emf_documents_are_dropped_and_everything_else_passes() -> None:
    sink = io.StringIO()
    out = EmfFilter(sink)
    print('{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]},"A":[1.0]}', file=out)
    print("09:00:01  dev  nightly", file=out)
    print('{"level":"ERROR","message":"kept"}', file=out)
    assert sink.getvalue() == '09:00:01  dev  nightly\n{"level":"ERROR","message":"kept"}\n'


def test_quiet_console_drops_powertools_metric_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # restored after the test
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_console()
        # single_metric prints its document even with POWERTOOLS_METRICS_DISABLED.
        with single_metric(name="RepairsMade", unit=MetricUnit.Count, value=1, namespace="jobsched"):
            pass
        metrics = Metrics(namespace="jobsched", service="jobsched")

        @metrics.log_metrics
        def handler(event: dict[str, Any], context: Any) -> None:
            return None  # an invocation with nothing to count

        handler({}, None)
        print("a line for the person at the terminal")
    assert capsys.readouterr().out == "a line for the person at the terminal\n"
    assert [str(w.message) for w in caught if "metrics" in str(w.message)] == []


# --- the start-up lines ---


def test_banner_lists_every_key_and_how_to_reach_the_api() -> None:
    config = LocalConfig(api_keys={"key-acme": "acme", "key-globex": "globex"})
    text = startup_banner("http://127.0.0.1:18080", "http://127.0.0.1:18081", config, program="jobsched")
    assert "http://127.0.0.1:18080/docs" in text
    assert "key-acme    tenant acme" in text and "key-globex  tenant globex" in text
    # Neither the default endpoint nor the dev key would reach this API: both are spelled out.
    assert "JOBSCHED_URL=http://127.0.0.1:18080 JOBSCHED_KEY=key-acme jobsched jobs list" in text


def test_banner_cli_line_is_bare_with_the_defaults() -> None:
    text = startup_banner("http://127.0.0.1:8080", "http://127.0.0.1:5055", LocalConfig(), program="jobsched")
    assert "  CLI       jobsched jobs list" in text
    assert "jobsched-dev-key  tenant dev" in text


# --- the run table ---

T0 = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
STORE = RunStore(None, "jobsched-runs", 4)


def run(tenant: str, job_id: str, state: RunState, *, due: datetime, at: datetime, attempt: int = 0) -> Run:
    return Run.model_validate(
        {
            "run_key": f"{job_id}@{due:%Y-%m-%dT%H:%M:%SZ}",
            "job_id": job_id,
            "tenant": tenant,
            "job_type": "demo.hello",
            "scheduled_for": due,
            "due_at": due,
            "state": state,
            "attempt": attempt,
            "definition_version": 1,
            "created_at": T0,
            "updated_at": at,
        }
    )


def record(new: Run, old: Run | None = None) -> dict[str, Any]:
    images = {"NewImage": STORE.to_item(new)}
    if old is not None:
        images["OldImage"] = STORE.to_item(old)
    return {"eventName": "MODIFY" if old else "INSERT", "dynamodb": images}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def table(clock: Clock) -> tuple[RunTable, io.StringIO]:
    out = io.StringIO()
    names = {"j_a": "tenant a's job", "j_b": "tenant b's job"}
    return RunTable(None, "arn", names.get, out=out, now=clock), out


def test_every_tenants_runs_are_shown_as_they_change_state() -> None:
    clock = Clock()
    runs, out = table(clock)
    a = run("tenant-a", "j_a", RunState.PENDING, due=T0, at=T0)
    b = run("tenant-b", "j_b", RunState.PENDING, due=T0, at=T0)
    runs.observe(record(a))
    runs.observe(record(b))
    leased = a.model_copy(
        update={
            "state": RunState.LEASED,
            "attempt": 1,
            "updated_at": T0 + timedelta(seconds=1),
            "lease_expires_at": T0 + timedelta(seconds=61),
        }
    )
    runs.observe(record(leased, a))
    renewed = leased.model_copy(update={"rev": 5})  # a write that changes nothing visible
    runs.observe(record(renewed, leased))
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:3] == ["time", "tenant", "job"]
    assert [line.split()[1] for line in lines[1:]] == ["tenant-a", "tenant-b", "tenant-a"]
    assert ["tenant a's job" in lines[1], "tenant b's job" in lines[2]] == [True, True]
    assert [line.split()[-2:] for line in lines[1:]] == [["PENDING", "0"], ["PENDING", "0"], ["LEASED", "1"]]


def test_runs_made_ahead_appear_when_due_in_time_order() -> None:
    clock = Clock()
    runs, out = table(clock)
    later = run("tenant-a", "j_a", RunState.PENDING, due=T0 + timedelta(minutes=2), at=T0)
    queued = later.model_copy(update={"state": RunState.QUEUED, "updated_at": T0 + timedelta(minutes=1)})
    runs.observe(record(later))
    clock.now = T0 + timedelta(minutes=1)
    runs.observe(record(queued, later))
    runs.release_due()
    assert out.getvalue() == ""  # nothing to say before it is due
    now_due = run("tenant-b", "j_b", RunState.SUCCEEDED, due=clock.now, at=clock.now, attempt=1)
    runs.observe(record(now_due))
    clock.now = T0 + timedelta(minutes=2)
    runs.release_due()
    lines = out.getvalue().splitlines()[1:]
    assert [(line[:8], line.split()[1], line.split()[-2]) for line in lines] == [
        ("09:01:00", "tenant-b", "SUCCEEDED"),
        ("09:02:00", "tenant-a", "QUEUED"),
    ]


def test_expiry_and_transition_items_are_not_runs() -> None:
    clock = Clock()
    runs, out = table(clock)
    a = run("tenant-a", "j_a", RunState.SUCCEEDED, due=T0, at=T0)
    runs.observe({"eventName": "REMOVE", "dynamodb": {"OldImage": STORE.to_item(a)}})
    runs.observe(
        {"eventName": "INSERT", "dynamodb": {"NewImage": {"job_id": {"S": "j_a"}, "sk": {"S": "T#x#1"}}}}
    )
    assert out.getvalue() == ""


def test_a_run_held_until_due_is_shown_before_what_followed_it() -> None:
    clock = Clock()
    runs, out = table(clock)
    ahead = run("tenant-a", "j_a", RunState.QUEUED, due=T0 + timedelta(seconds=30), at=T0)
    runs.observe(record(ahead))
    clock.now = T0 + timedelta(seconds=31)
    leased = ahead.model_copy(
        update={
            "state": RunState.LEASED,
            "attempt": 1,
            "updated_at": clock.now,
            "lease_expires_at": clock.now + timedelta(seconds=60),
        }
    )
    runs.observe(record(leased, ahead))
    lines = out.getvalue().splitlines()[1:]
    assert [(line[:8], line.split()[-2]) for line in lines] == [
        ("09:00:30", "QUEUED"),
        ("09:00:31", "LEASED"),
    ]


# --- whose runs: --follow ---


def followed(clock: Clock, follow: str, tour_jobs: set[str]) -> tuple[RunTable, io.StringIO]:
    out = io.StringIO()
    names = {"j_a": "cron-10s", "j_b": "mine"}
    return RunTable(None, "arn", names.get, out=out, now=clock, follow=follow, tour_jobs=tour_jobs), out


def three_runs_each(runs: RunTable) -> None:
    for seconds in (0, 10, 20):
        due = T0 + timedelta(seconds=seconds)
        runs.observe(record(run("dev", "j_a", RunState.SUCCEEDED, due=due, at=due, attempt=1)))
        runs.observe(record(run("dev", "j_b", RunState.SUCCEEDED, due=due, at=due, attempt=1)))


def test_mine_shows_a_tour_jobs_first_run_then_says_the_rest_are_hidden() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(minutes=1)
    runs, out = followed(clock, "mine", {"j_a"})
    three_runs_each(runs)
    lines = out.getvalue().splitlines()[1:]
    tour = [line for line in lines if "cron-10s" in line]
    assert len([line for line in tour if "SUCCEEDED" in line]) == 1
    assert [line.strip() for line in tour if "SUCCEEDED" not in line] == [
        "cron-10s: its later runs are not shown (jobsched local --follow all shows them)"
    ]
    assert len([line for line in lines if " mine " in line]) == 3  # the user's own job: every run


def test_all_shows_every_run() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(minutes=1)
    runs, out = followed(clock, "all", {"j_a"})
    three_runs_each(runs)
    assert len(out.getvalue().splitlines()) == 1 + 6


# --- the detail column ---


def test_a_long_result_is_cut_between_members_never_inside_a_timestamp() -> None:
    result = {
        "ok": True,
        "startedAt": "2026-11-02T09:00:00.123456Z",
        "finishedAt": "2026-11-02T09:00:01.654321Z",
        "rows": 1200,
    }
    done = run("dev", "j_a", RunState.SUCCEEDED, due=T0, at=T0, attempt=1).model_copy(
        update={"result": result}
    )
    detail = detail_of(done)
    assert len(detail) <= DETAIL_WIDTH
    assert detail == '{"ok":true,"startedAt":"2026-11-02T09:00:00.123456Z",…}'


def test_a_repair_is_labelled_with_the_reconciler() -> None:
    queued = run("dev", "j_a", RunState.QUEUED, due=T0, at=T0)
    requeued = lifecycle.requeue(queued, now=T0 + timedelta(minutes=5), actor="reconciler")
    assert detail_of(requeued) == "requeued by reconciler"
    republished = lifecycle.touch(queued, now=T0, actor="reconciler", reason="republish")
    assert detail_of(republished) == "republished by reconciler"


def test_a_succeeded_run_shows_no_earlier_error() -> None:
    failed = run("dev", "j_a", RunState.RETRY_WAIT, due=T0, at=T0, attempt=1).model_copy(
        update={"last_error_class": "DemoFlaky", "last_error_message": "boom"}
    )
    assert detail_of(failed) == "DemoFlaky"
    succeeded = failed.model_copy(update={"state": RunState.SUCCEEDED, "attempt": 2})
    assert detail_of(succeeded) == ""


def test_a_first_member_too_long_to_fit_is_cut_at_a_word_never_inside_its_run_key() -> None:
    result = {"greeting": "hello from j_4m9q2x7c0rk1vd5t@2026-12-01T00:20:05Z", "payload": None}
    done = run("dev", "j_a", RunState.SUCCEEDED, due=T0, at=T0, attempt=1).model_copy(
        update={"result": result}
    )
    assert detail_of(done) == '{"greeting":"hello from …",…}'
