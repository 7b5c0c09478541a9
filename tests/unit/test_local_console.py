"""Local mode's console: no output meant for Lambda, no tracebacks for clients that hang up,
a start-up summary with every key, and a run table that shows every tenant's runs in order."""

from __future__ import annotations

import io
import logging
import sys
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from aws_lambda_powertools.metrics import Metrics, MetricUnit, single_metric
from jobsched.domain import lifecycle
from jobsched.domain.runs import Run, RunState, Transition
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


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """`quiet_console` sets up the process's logging for a terminal (the root logger's
    handler and level, jobsched's logger, warnings captured): put it all back, so no later
    test of this process sees it."""
    from jobsched.observability import logger as powertools_logger

    root = logging.getLogger()
    jobsched_log = logging.getLogger(powertools_logger.name)
    json_handler = powertools_logger.registered_handler
    saved = (
        list(root.handlers),
        root.level,
        list(jobsched_log.handlers),
        jobsched_log.level,
        jobsched_log.propagate,
        getattr(json_handler, "stream", None),
    )
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        jobsched_log.handlers[:] = saved[2]
        jobsched_log.setLevel(saved[3])
        jobsched_log.propagate = saved[4]
        if saved[5] is not None and isinstance(json_handler, logging.StreamHandler):
            json_handler.setStream(saved[5])


def test_quiet_console_drops_powertools_metric_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], logging_restored: None
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


class Names:
    """The jobs' names as the definitions table holds them, counting the reads."""

    def __init__(self, names: dict[str, str]) -> None:
        self.jobs = {job_id: (1, name) for job_id, name in names.items()}
        self.reads: list[list[str]] = []

    def __call__(self, job_ids: Any) -> dict[str, tuple[int, str]]:
        self.reads.append(sorted(job_ids))
        return {job_id: self.jobs[job_id] for job_id in job_ids if job_id in self.jobs}

    def rename(self, job_id: str, name: str) -> None:
        version, _ = self.jobs[job_id]
        self.jobs[job_id] = (version + 1, name)  # a PATCH bumps the version


def table(clock: Clock) -> tuple[RunTable, io.StringIO]:
    out = io.StringIO()
    names = Names({"j_a": "tenant a's job", "j_b": "tenant b's job"})
    return RunTable(None, "arn", names, out=out, now=clock), out


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


def moved(before: Run, target: RunState, seconds: int, *, attempt: int | None = None) -> Run:
    """`before` after one more transition, `seconds` after T0, recorded in its history."""
    at = T0 + timedelta(seconds=seconds)
    attempt = before.attempt if attempt is None else attempt
    entry = Transition(
        at=at, actor="test", source=before.state, target=target, fence=before.fence, attempt=attempt
    )
    return before.model_copy(
        update={
            "state": target,
            "attempt": attempt,
            "updated_at": at,
            "history": [*before.history, entry],
            "lease_expires_at": at + timedelta(seconds=60) if target is RunState.LEASED else None,
        }
    )


def with_history() -> tuple[Run, Run]:
    """A run made at T0, due at once, and the same run after QUEUED, LEASED and SUCCEEDED."""
    made = run("dev", "j_a", RunState.PENDING, due=T0, at=T0).model_copy(
        update={"history": [Transition(at=T0, actor="sweeper", target=RunState.PENDING, fence=0, attempt=0)]}
    )
    done = moved(moved(moved(made, RunState.QUEUED, 1), RunState.LEASED, 2, attempt=1), RunState.SUCCEEDED, 3)
    return made, done


def states_shown(out: io.StringIO) -> list[tuple[str, str, str]]:
    return [(line[:8], line.split()[-2], line.split()[-1]) for line in out.getvalue().splitlines()[1:]]


def test_changes_merged_into_one_record_are_each_shown_in_order_once() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(seconds=5)
    runs, out = table(clock)
    made, done = with_history()
    runs.observe(record(made))
    runs.observe(record(done, made))  # QUEUED, LEASED and SUCCEEDED read as one image pair
    runs.observe(record(done, made))  # the same record read again
    runs.observe(record(done, done.model_copy(update={"rev": 9})))  # a write with no transition
    assert states_shown(out) == [
        ("09:00:00", "PENDING", "0"),
        ("09:00:01", "QUEUED", "0"),
        ("09:00:02", "LEASED", "1"),
        ("09:00:03", "SUCCEEDED", "1"),
    ]


def test_a_run_first_seen_mid_history_shows_what_followed_its_old_image() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(seconds=5)
    runs, out = table(clock)
    made, done = with_history()
    queued = moved(made, RunState.QUEUED, 1)
    runs.observe(record(done, queued))  # the table started after the run was queued
    runs.observe(record(done, made))  # an older pair of the same run: nothing new
    assert states_shown(out) == [("09:00:02", "LEASED", "1"), ("09:00:03", "SUCCEEDED", "1")]


def test_transitions_dropped_for_the_byte_budget_keep_their_numbering() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(seconds=5)
    runs, out = table(clock)
    made, done = with_history()
    leased = moved(moved(made, RunState.QUEUED, 1), RunState.LEASED, 2, attempt=1)
    runs.observe(record(leased))
    # QUEUED left out of the stored history: LEASED is still sequence 2, SUCCEEDED 3.
    trimmed = done.model_copy(update={"history": [done.history[0], *done.history[2:]], "history_dropped": 1})
    runs.observe(record(trimmed, leased))
    assert states_shown(out) == [
        ("09:00:00", "PENDING", "0"),
        ("09:00:01", "QUEUED", "0"),
        ("09:00:02", "LEASED", "1"),
        ("09:00:03", "SUCCEEDED", "1"),
    ]


# --- job names: one read per poll, not one per job ---


def streamed(runs: RunTable, records: list[dict[str, Any]]) -> None:
    """What the next poll reads from the stream."""
    runs._read = lambda: records  # type: ignore[method-assign]


def burst_table(clock: Clock, jobs: int) -> tuple[RunTable, io.StringIO, Names]:
    out = io.StringIO()
    names = Names({f"j_{n}": f"report {n}" for n in range(jobs)})
    return RunTable(None, "arn", names, out=out, now=clock), out, names


def test_a_burst_of_runs_due_at_once_reads_the_names_of_its_jobs_once() -> None:
    clock = Clock()
    runs, out, names = burst_table(clock, jobs=40)
    due = T0 + timedelta(minutes=1)
    ahead = [
        run("dev", f"j_{n % 40}", RunState.QUEUED, due=due + timedelta(seconds=n // 40), at=T0)
        for n in range(200)  # 200 runs of 40 jobs, queued ahead of their due instant
    ]
    streamed(runs, [record(r) for r in ahead])
    runs.poll()
    assert out.getvalue() == ""
    assert len(names.reads) <= 1  # read ahead with the records, or not at all yet
    clock.now = due + timedelta(seconds=10)
    streamed(runs, [])
    runs.poll()
    lines = out.getvalue().splitlines()[1:]
    assert len(lines) == 200
    assert len(names.reads) == 1  # one read for the 40 jobs, not one a job (or a run)
    assert names.reads[0] == sorted(f"j_{n}" for n in range(40))
    assert all(f"report {n % 40} " in line for n, line in zip(range(200), lines, strict=True))
    # Their next changes are shown with the names kept: no read at all.
    streamed(
        runs, [record(r.model_copy(update={"state": RunState.SUCCEEDED, "attempt": 1}), r) for r in ahead]
    )
    runs.poll()
    assert len(names.reads) == 1
    assert len(out.getvalue().splitlines()) == 1 + 400


def test_the_changes_a_poll_reads_cost_one_read_of_names() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(minutes=1)
    runs, out, names = burst_table(clock, jobs=25)
    streamed(runs, [record(run("dev", f"j_{n % 25}", RunState.SUCCEEDED, due=T0, at=T0)) for n in range(100)])
    runs.poll()
    assert len(names.reads) == 1
    assert len(out.getvalue().splitlines()) == 1 + 100


def test_a_renamed_job_is_shown_by_its_new_name_from_its_next_run_on() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(minutes=5)
    runs, out, names = burst_table(clock, jobs=1)
    first = run("dev", "j_0", RunState.SUCCEEDED, due=T0, at=T0)
    streamed(runs, [record(first)])
    runs.poll()
    names.rename("j_0", "renamed report")
    second = run("dev", "j_0", RunState.SUCCEEDED, due=T0 + timedelta(minutes=1), at=T0).model_copy(
        update={"definition_version": 2}  # made from the job as renamed
    )
    streamed(runs, [record(second)])
    runs.poll()
    # A job created after the table started is read when its first run shows up.
    names.jobs["j_new"] = (1, "created later")
    streamed(runs, [record(run("dev", "j_new", RunState.SUCCEEDED, due=T0, at=T0))])
    runs.poll()
    lines = out.getvalue().splitlines()[1:]
    assert ["report 0" in lines[0], "renamed report" in lines[1], "created later" in lines[2]] == [True] * 3
    assert names.reads == [["j_0"], ["j_0"], ["j_new"]]


def test_a_deleted_jobs_runs_show_its_id_and_are_not_read_again() -> None:
    clock = Clock()
    clock.now = T0 + timedelta(minutes=5)
    runs, out, names = burst_table(clock, jobs=0)
    streamed(runs, [record(run("dev", "j_gone", RunState.CANCELLED, due=T0, at=T0))])
    runs.poll()
    runs.poll()
    streamed(runs, [record(run("dev", "j_gone", RunState.CANCELLED, due=T0 + timedelta(minutes=1), at=T0))])
    runs.poll()
    assert names.reads == [["j_gone"]]
    assert all(" j_gone " in line for line in out.getvalue().splitlines()[1:])


def test_the_names_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobsched_local import console

    monkeypatch.setattr(console, "NAMES_KEPT", 10)
    clock = Clock()
    clock.now = T0 + timedelta(minutes=5)
    runs, out, names = burst_table(clock, jobs=30)
    streamed(runs, [record(run("dev", f"j_{n}", RunState.SUCCEEDED, due=T0, at=T0)) for n in range(30)])
    runs.poll()  # more jobs in one poll than are kept: all shown by name, from one read
    assert len(runs._names) == 30 and len(names.reads) == 1
    names.jobs["j_new"] = (1, "created later")
    later = T0 + timedelta(minutes=1)
    streamed(
        runs,
        [record(run("dev", job_id, RunState.SUCCEEDED, due=later, at=later)) for job_id in ("j_0", "j_new")],
    )
    runs.poll()
    assert len(runs._names) == 10  # the least recently shown dropped
    assert {"j_0", "j_new"} <= set(runs._names)
    assert names.reads[1:] == [["j_new"]]
    assert [
        "report 0 " in out.getvalue().splitlines()[-2],
        "created later" in out.getvalue().splitlines()[-1],
    ] == [
        True,
        True,
    ]


# --- whose runs: --follow ---


def followed(clock: Clock, follow: str, tour_jobs: set[str]) -> tuple[RunTable, io.StringIO]:
    out = io.StringIO()
    names = Names({"j_a": "cron-10s", "j_b": "mine"})
    return RunTable(None, "arn", names, out=out, now=clock, follow=follow, tour_jobs=tour_jobs), out


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
