"""The `jobsched` CLI and its API client, without the local runtime: parsing, formatting,
signing, and the HTTP exchange against a stub server."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jobsched_cli as cli
import pytest
from jobsched.api_models.views import RunDetailView
from jobsched.client import (
    ApiError,
    BulkDeadLettersView,
    Client,
    ClientError,
    JobView,
    RedirectRefused,
    RunList,
    RunSummaryView,
    RunView,
    SigningUnavailable,
)
from jobsched.client.http import is_loopback, quote_segment
from jobsched_cli import (
    RunFollower,
    UsageError,
    build_parser,
    commands,
    duration_seconds,
    entry,
    format_api_error,
    format_fields,
    format_table,
    job_body,
    main,
    parse_assignments,
    parse_every,
    parse_instant,
    parse_json_arg,
    tail_line,
)

from tests.helpers import StubApi

# --- --set and the other argument parsers ---


def test_set_values_are_json_when_they_parse_else_strings() -> None:
    body = parse_assignments(
        ["maxRuns=3", "pauseOnFailure=true", "endAt=null", "name=nightly report", "tags=[1,2]", "code=007"]
    )
    assert body == {
        "maxRuns": 3,
        "pauseOnFailure": True,
        "endAt": None,
        "name": "nightly report",
        "tags": [1, 2],
        "code": "007",
    }


def test_set_dotted_keys_nest_and_value_may_contain_equals() -> None:
    body = parse_assignments(["retry.baseSeconds=1", "retry.capSeconds=2.5", "target.url=http://x/?a=b"])
    assert body == {"retry": {"baseSeconds": 1, "capSeconds": 2.5}, "target": {"url": "http://x/?a=b"}}


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        (["novalue"], "expected key=value"),
        (["=1"], "expected key=value"),
        (["retry..x=1"], "empty name"),
        (["retry=1", "retry.baseSeconds=2"], "already set to a value"),
        (["retry.baseSeconds=2", "retry=1"], "already has nested fields"),
    ],
)
def test_set_rejects_malformed_items(items: list[str], problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        parse_assignments(items)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("1h30m", 5400), ("2d", 172800), ("PT15M", None), ("", None)],
)
def test_durations(text: str, seconds: int | None) -> None:
    assert duration_seconds(text) == seconds


def test_every_sends_seconds_or_passes_iso_through() -> None:
    assert parse_every("15m") == 900
    assert parse_every("PT15M") == "PT15M"


def test_instants_absolute_and_relative() -> None:
    now = datetime(2026, 11, 2, 8, 0, 0, 500000, tzinfo=UTC)
    assert parse_instant("2026-12-01T09:00:00Z", now) == "2026-12-01T09:00:00Z"
    assert parse_instant("now", now) == "2026-11-02T08:00:00Z"
    assert parse_instant("+90s", now) == "2026-11-02T08:01:30Z"
    assert parse_instant("-1h", now) == "2026-11-02T07:00:00Z"
    with pytest.raises(UsageError, match=r"\+DURATION"):
        parse_instant("+soon", now)


def test_json_arguments_inline_or_from_a_file(tmp_path: Any) -> None:
    assert parse_json_arg("--payload", '{"a": 1}') == {"a": 1}
    path = tmp_path / "payload.json"
    path.write_text('{"from": "file"}')
    assert parse_json_arg("--payload", f"@{path}") == {"from": "file"}
    with pytest.raises(UsageError, match="--payload: not valid JSON"):
        parse_json_arg("--payload", "{nope")
    with pytest.raises(UsageError, match="cannot read"):
        parse_json_arg("--target", f"@{tmp_path / 'missing.json'}")


# --- the parser ---


def test_create_builds_the_body_from_options_then_set() -> None:
    args = build_parser().parse_args(
        [
            "jobs",
            "create",
            "--name",
            "n",
            "--type",
            "t.x",
            "--cron",
            "15 30 9 * * MON-FRI",
            "--tz",
            "America/New_York",
            "--payload",
            '{"k": "v"}',
            "--target",
            '{"kind": "http", "url": "https://example.com/hook"}',
            "--max-attempts",
            "5",
            "--priority",
            "high",
            "--idempotency-key",
            "key-1",
            "--set",
            "retry.baseSeconds=1",
            "--set",
            "target.method=PUT",
        ]
    )
    assert args.idempotency_key == "key-1"
    assert job_body(args) == {
        "name": "n",
        "type": "t.x",
        "cron": "15 30 9 * * MON-FRI",
        "timeZone": "America/New_York",
        "maxAttempts": 5,
        "priority": "high",
        "payload": {"k": "v"},
        "target": {"kind": "http", "url": "https://example.com/hook", "method": "PUT"},
        "retry": {"baseSeconds": 1},
    }


def test_at_and_every_shorthands_reach_the_body() -> None:
    parser = build_parser()
    every = job_body(parser.parse_args(["jobs", "create", "--name", "n", "--type", "t", "--every", "2s"]))
    assert every["every"] == 2
    at = job_body(parser.parse_args(["jobs", "create", "--name", "n", "--type", "t", "--at", "+1m"]))
    assert at["runAt"].endswith("Z") and len(at["runAt"]) == 20


def test_connection_options_go_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["--endpoint", "http://h:1", "--api-key", "k", "--json", "jobs", "get", "j_1"])
    after = parser.parse_args(["jobs", "get", "j_1", "--endpoint", "http://h:1", "--api-key", "k", "--json"])
    for args in (before, after):
        assert (args.endpoint, args.api_key, args.json, args.job_id) == ("http://h:1", "k", True, "j_1")
    neither = parser.parse_args(["jobs", "get", "j_1"])
    assert (neither.endpoint, neither.api_key, neither.json, neither.sigv4) == (None, None, False, False)


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "create", "--name", "n", "--type", "t"],  # no schedule
        ["jobs", "create", "--name", "n", "--type", "t", "--cron", "* * * * *", "--every", "5"],
        ["jobs", "list", "--state", "sleeping"],
        ["jobs", "frobnicate"],
        [],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_tz_without_cron_and_empty_update_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    endpoint = ["--endpoint", "http://127.0.0.1:1"]
    assert (
        main([*endpoint, "jobs", "create", "--name", "n", "--type", "t", "--every", "5", "--tz", "UTC"]) == 2
    )
    assert "--tz: only applies with --cron" in capsys.readouterr().err
    assert main([*endpoint, "jobs", "update", "j_1"]) == 2
    assert "nothing to change" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "jobs" in capsys.readouterr().out


def test_state_filter_is_case_insensitive() -> None:
    assert build_parser().parse_args(["jobs", "list", "--state", "paused"]).state == "PAUSED"


def test_local_imports_serve_lazily_and_returns_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    fake = types.ModuleType("jobsched_local.serve")

    def serve(**kwargs: Any) -> int:
        calls.append(kwargs)
        return 7

    fake.serve = serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jobsched_local.serve", fake)
    assert main(["local", "--port", "9000", "--moto-port", "9001", "--config", "c.json", "--demo"]) == 7
    assert calls == [
        {
            "port": 9000,
            "moto_port": 9001,
            "config_path": "c.json",
            "demo": True,
            "follow": "mine",
            "handlers_path": None,
            "verbose": False,
        }
    ]
    assert main(["local"]) == 7
    assert calls[-1] == {
        "port": None,
        "moto_port": None,
        "config_path": None,
        "demo": False,
        "follow": "mine",
        "handlers_path": None,
        "verbose": False,
    }
    assert main(["local", "--verbose"]) == 7
    assert calls[-1]["verbose"] is True
    assert main(["local", "--follow", "all"]) == 7
    assert calls[-1]["follow"] == "all"
    assert main(["local", "--handlers-path", "src", "--handlers-path", "lib"]) == 7
    assert calls[-1]["handlers_path"] == ["src", "lib"]


# --- defaults for endpoint and key ---


def context(monkeypatch: pytest.MonkeyPatch, argv: list[str], **env: str) -> cli.Context:
    for name in ("JOBSCHED_URL", "JOBSCHED_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return cli.Context(build_parser().parse_args([*argv, "jobs", "list"]))


def test_defaults_to_local_mode_with_its_dev_key(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context(monkeypatch, [])
    assert ctx.client.endpoint == "http://127.0.0.1:8080"
    assert ctx.client.api_key == "jobsched-dev-key"


def test_environment_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context(monkeypatch, [], JOBSCHED_URL="https://api.example.com/v1/", JOBSCHED_KEY="env-key")
    assert (ctx.client.endpoint, ctx.client.api_key) == ("https://api.example.com/v1", "env-key")
    ctx = context(monkeypatch, ["--api-key", "flag-key"], JOBSCHED_KEY="env-key")
    assert ctx.client.api_key == "flag-key"


def test_dev_key_is_never_sent_off_loopback_or_with_sigv4(monkeypatch: pytest.MonkeyPatch) -> None:
    assert context(monkeypatch, ["--endpoint", "https://api.example.com"]).client.api_key is None
    assert context(monkeypatch, ["--sigv4", "--region", "eu-west-1"]).client.api_key is None


@pytest.mark.parametrize(
    ("endpoint", "loopback"),
    [
        ("http://127.0.0.1:8080", True),
        ("http://127.1.2.3", True),
        ("http://localhost:8080", True),
        ("http://[::1]:8080", True),
        ("https://abc.execute-api.eu-west-1.amazonaws.com/prod", False),
        ("http://10.0.0.1", False),
    ],
)
def test_loopback_detection(endpoint: str, loopback: bool) -> None:
    assert is_loopback(endpoint) is loopback


# --- output ---


def test_table_pads_columns_and_right_aligns_numbers() -> None:
    text = format_table(
        ["RUN KEY", "STATE", "ATTEMPT", "ERROR"],
        [("j_1@2026-11-02T09:00:00Z", "SUCCEEDED", 1, None), ("j_1@x", "DEAD", 12, "Timeout")],
    )
    assert text.splitlines() == [
        "RUN KEY                   STATE      ATTEMPT  ERROR",
        "j_1@2026-11-02T09:00:00Z  SUCCEEDED        1  -",
        "j_1@x                     DEAD            12  Timeout",
    ]


def test_table_without_rows_is_its_header_and_cells_render_json() -> None:
    assert format_table(["A", "B"], []) == "A  B"
    assert format_table(["X", "Y"], [({"k": [1]}, True)]).splitlines()[1] == '{"k":[1]}  true'


def test_fields_are_aligned() -> None:
    assert format_fields([("jobId", "j_1"), ("nextRunAt", None), ("", "x")]).splitlines() == [
        "jobId      j_1",
        "nextRunAt  -",
        "           x",
    ]


def test_api_error_lists_fields_and_details() -> None:
    error = ApiError(
        400,
        {
            "code": "invalid_request",
            "message": "cron: bad; timeZone: unknown",
            "errors": [{"field": "cron", "rule": "bad"}, {"field": "timeZone", "rule": "unknown"}],
        },
    )
    # Each rule once: the message joins them, so it is not printed beside them.
    assert format_api_error(error).splitlines() == [
        "error: 400 invalid_request",
        "  cron: bad",
        "  timeZone: unknown",
    ]
    single = ApiError(
        400,
        {
            "code": "invalid_request",
            "message": "runAt: is in the past",
            "errors": [{"field": "runAt", "rule": "is in the past"}],
        },
    )
    assert format_api_error(single).splitlines() == ["error: 400 invalid_request: runAt: is in the past"]
    stale = ApiError(412, {"code": "version_mismatch", "message": "stale", "currentVersion": 4})
    assert format_api_error(stale).splitlines() == [
        "error: 412 version_mismatch: stale",
        "  currentVersion: 4",
    ]


def test_api_error_from_a_gateway_or_plain_body() -> None:
    gateway = ApiError(403, {"message": "Missing Authentication Token"})
    assert (gateway.code, gateway.message) == ("forbidden", "Missing Authentication Token")
    plain = ApiError(502, "Bad Gateway from proxy")
    assert str(plain) == "502 bad_gateway: Bad Gateway from proxy"
    empty = ApiError(500, None)
    assert str(empty) == "500 internal_server_error: Internal Server Error"


# --- SigV4 ---


@pytest.fixture
def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)


class Signed:
    """A request as the CLI's client would send it (`Connection.prepare`), headers by any case."""

    def __init__(self, client: Client, method: str, path: str, body: Any = None, **query: Any) -> None:
        prepared = client.connection.prepare(method, path, body, query=query)
        self.full_url, self.data = prepared.url, prepared.data
        self.headers = {name.lower(): value for name, value in prepared.headers.items()}

    def get_header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@pytest.mark.usefixtures("fake_aws_credentials")
def test_sigv4_signs_for_execute_api_in_the_endpoints_region() -> None:
    client = Client("https://abc123.execute-api.eu-west-1.amazonaws.com/prod", sigv4=True)
    run_key = "j_7hq2m4x9c0d1e5fr@2026-11-02T09:00:00Z"
    request = Signed(client, "POST", f"/v1/runs/{quote_segment(run_key)}/redrive", {"reason": "r"})
    authorization = request.get_header("Authorization")
    assert authorization is not None and authorization.startswith("AWS4-HMAC-SHA256 ")
    assert "Credential=AKIDEXAMPLE/" in authorization
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"host", "x-amz-date", "x-amz-security-token"} <= set(signed)
    assert request.get_header("X-amz-security-token") == "session-token"
    assert request.get_header("X-amz-date")
    assert request.full_url.endswith("/prod/v1/runs/j_7hq2m4x9c0d1e5fr%402026-11-02T09%3A00%3A00Z/redrive")
    assert json.loads(request.data or b"") == {"reason": "r"}


@pytest.mark.usefixtures("fake_aws_credentials")
def test_sigv4_region_flag_and_api_key_are_signed_too() -> None:
    client = Client("https://api.example.com", sigv4=True, region="ap-south-1", api_key="usage-plan-key")
    request = Signed(client, "GET", "/v1/jobs", state="ACTIVE", cursor=None)
    authorization = request.get_header("Authorization") or ""
    assert "/ap-south-1/execute-api/aws4_request" in authorization
    assert "x-api-key" in authorization.split("SignedHeaders=")[1]
    assert request.full_url == "https://api.example.com/v1/jobs?state=ACTIVE"


def test_sigv4_without_credentials_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    client = Client("https://abc.execute-api.us-east-1.amazonaws.com/prod", sigv4=True)
    with pytest.raises(SigningUnavailable, match="credentials"):
        Signed(client, "GET", "/v1/jobs")
    assert main(["--endpoint", client.endpoint, "--sigv4", "jobs", "list"]) == 2


def without_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a client installed without the `sigv4` extra: importing botocore fails."""
    for name in [n for n in sys.modules if n == "botocore" or n.startswith("botocore.")] + ["botocore"]:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.usefixtures("fake_aws_credentials")
def test_sigv4_without_botocore_names_the_extra_that_installs_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without_botocore(monkeypatch)
    for endpoint in ("https://abc.execute-api.us-east-1.amazonaws.com/prod", "https://api.example.com"):
        client = Client(endpoint, sigv4=True)  # the region: from the host, else botocore's
        with pytest.raises(SigningUnavailable, match=r"botocore: pip install 'jobsched\[sigv4\]'"):
            Signed(client, "GET", "/v1/jobs")
        capsys.readouterr()
        assert main(["--endpoint", endpoint, "--sigv4", "jobs", "list"]) == 2
        assert "pip install 'jobsched[sigv4]'" in capsys.readouterr().err
    client = Client("https://api.example.com", api_key="k")  # without SigV4, botocore is not needed
    assert Signed(client, "GET", "/v1/jobs").get_header("x-api-key") == "k"


# --- the HTTP exchange, against a stub API ---


@pytest.fixture
def stub() -> Iterator[StubApi]:
    api = StubApi()
    yield api
    api.close()


# Answers as the API sends them: every member, checked against the server's own views.


def job_answer(**fields: Any) -> dict[str, Any]:
    """A job as the API answers it; `fields` (the API's spelling) over a cron job's defaults."""
    job = {
        "name": "nightly",
        "type": "report.build",
        "target": None,
        "payload": None,
        "runAt": None,
        "cron": "0 9 * * *",
        "timeZone": "UTC",
        "every": None,
        "startAt": None,
        "endAt": None,
        "maxRuns": None,
        "priority": "default",
        "missedRuns": "skip",
        "catchUpWindow": 3600,
        "overlap": "skip",
        "dst": {"gap": "shift", "fold": "first"},
        "maxAttempts": 3,
        "retry": {"baseSeconds": 2.0, "capSeconds": 300.0, "maxAgeSeconds": None},
        "delivery": "at-least-once",
        "jitterSeconds": 0,
        "timeoutSeconds": 30,
        "pauseOnFailure": False,
        "notify": [],
        "jobId": "j_abc",
        "version": 1,
        "state": "ACTIVE",
        "nextRunAt": None,
        "runsCreated": 0,
        "createdAt": "2026-11-02T08:00:00Z",
        "updatedAt": "2026-11-02T08:00:00Z",
        "nextFireTimes": None,
        **fields,
    }
    return JobView.model_validate(job).model_dump(mode="json", by_alias=True)


def run_answer(run_key: str, **fields: Any) -> dict[str, Any]:
    """A run as the API answers it (RunView); with `attempts` and `transitions`, a run's
    detail (RunDetailView, `GET /v1/runs/{key}`)."""
    job_id, scheduled = run_key.split("@", 1)
    scheduled = fields.get("scheduledFor", scheduled)
    run = {
        "runKey": run_key,
        "jobId": job_id,
        "state": "PENDING",
        "trigger": "schedule",
        "scheduledFor": scheduled,
        "dueAt": scheduled,
        "attempt": 0,
        "fence": 0,
        "redrives": 0,
        "definitionVersion": 1,
        "priority": "default",
        "reason": None,
        "lastErrorClass": None,
        "lastErrorMessage": None,
        "result": None,
        "createdAt": scheduled,
        "updatedAt": scheduled,
        "finishedAt": None,
        "leaseExpiresAt": None,
        "skippedThrough": None,
        "skippedCount": None,
        "blockedBy": None,
        "waitingFor": None,
        **fields,
    }
    view = RunDetailView if "transitions" in run else RunView
    if view is RunDetailView:
        run = {"target": None, "payload": None, "attempts": [], "historyDropped": 0, **run}
    return view.model_validate(run).model_dump(mode="json", by_alias=True)


def transition(
    at: str, source: str | None, target: str, fence: int, attempt: int, **more: Any
) -> dict[str, Any]:
    """One entry of a run's history, as `GET /v1/runs/{key}` shows it."""
    return {
        "at": at,
        "actor": more.pop("actor", "x"),
        "from": source,
        "to": target,
        "fence": fence,
        "attempt": attempt,
        "errorClass": more.pop("errorClass", None),
        "errorMessage": None,
        "reason": None,
        "traceId": None,
        "traceUrl": None,
        **more,
    }


def bulk_answer(
    request_id: str, run_keys: list[str], next_cursor: str | None, *, dry_run: bool = False
) -> dict[str, Any]:
    """The outcome of `POST /v1/dead-letters/{redrive,cancel}`."""
    outcome = {
        "requestId": request_id,
        "dryRun": dry_run,
        "count": len(run_keys),
        "runKeys": run_keys,
        "refused": [],
        "nextCursor": next_cursor,
    }
    return BulkDeadLettersView.model_validate(outcome).model_dump(mode="json", by_alias=True)


JOB = job_answer(timeZone="Europe/London", version=3, nextRunAt="2026-11-03T09:00:00Z")


def test_create_sends_json_and_the_key(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    # The key was used before with this body: the answer is the job it made (200, no secret).
    stub.routes[("POST", "/v1/jobs")] = (200, JOB, {"ETag": '"3"'})
    argv = ["--endpoint", stub.url, "jobs", "create", "--name", "nightly", "--type", "report.build"]
    code = main([*argv, "--cron", "0 9 * * *", "--idempotency-key", "k-1", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out) == JOB
    sent = stub.requests[-1]
    assert sent["body"] == {"name": "nightly", "type": "report.build", "cron": "0 9 * * *"}
    assert sent["headers"]["x-api-key"] == "jobsched-dev-key"  # loopback: the dev key
    assert sent["headers"]["idempotency-key"] == "k-1"
    assert sent["headers"]["content-type"] == "application/json"


def test_create_many_sends_the_file_in_batches_with_keys_per_line(
    stub: StubApi, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    lines = [json.dumps({"name": f"n{i}", "type": "t", "cron": "0 9 * * *"}) for i in range(102)]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join([*lines[:50], "", *lines[50:]]) + "\n")
    problem = {
        "code": "invalid_request",
        "message": "cron: bad",
        "errors": [{"field": "cron", "rule": "bad"}],
    }

    def answer() -> Any:
        jobs = stub.requests[-1]["body"]["jobs"]
        items = [
            {"index": i, "status": 201, "job": {**JOB, "name": job["name"], "signingSecret": "whsec_x"}}
            if job["name"] != "n101"
            else {"index": i, "status": 400, "error": problem}
            for i, job in enumerate(jobs)
        ]
        refused = sum(1 for item in items if item["status"] == 400)
        body = {"items": items, "created": len(items) - refused, "replayed": 0, "refused": refused}
        return 200, body, {}

    stub.routes[("POST", "/v1/jobs/batch")] = answer
    code = main(["--endpoint", stub.url, "jobs", "create-many", str(path), "--idempotency-key", "imp"])
    assert code == 1  # one job was refused
    sent = [r["body"]["jobs"] for r in stub.requests]
    assert [len(jobs) for jobs in sent] == [100, 2]
    assert sent[1][1] == {"idempotencyKey": "imp#101", "name": "n101", "type": "t", "cron": "0 9 * * *"}
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "0: created j_abc n0"
    assert out[101] == "101: refused 400 invalid_request: cron: bad"
    assert out[-1] == "101 created, 0 replayed, 1 refused"


def test_api_error_exits_1_with_the_fields_on_stderr(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = {
        "code": "invalid_request",
        "message": "cron: '0 25 * * *' is not a valid cron expression",
        "errors": [{"field": "cron", "rule": "'0 25 * * *' is not a valid cron expression"}],
    }
    stub.routes[("POST", "/v1/jobs")] = (400, problem, {})
    code = main(
        ["--endpoint", stub.url, "jobs", "create", "--name", "n", "--type", "t", "--cron", "0 25 * * *"]
    )
    assert code == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "error: 400 invalid_request: cron: '0 25 * * *' is not a valid cron expression",
    ]


def test_a_body_the_client_refuses_is_reported_as_the_api_would_and_not_sent(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--endpoint", stub.url, "jobs", "create", "--name", "n", "--type", "t", "--cron", "0 9 * * *"]
    assert main([*argv, "--set", "maxAttempts=three", "--set", "tags=[1]"]) == 1
    assert stub.requests == []
    assert capsys.readouterr().err.splitlines() == [
        "error: 400 invalid_request",
        "  maxAttempts: Input should be a valid integer",
        "  tags: is not a known field",
    ]


def test_update_without_if_match_uses_the_current_version(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.routes[("GET", "/v1/jobs/j_abc")] = (200, JOB, {})
    stub.routes[("PATCH", "/v1/jobs/j_abc")] = (200, {**JOB, "name": "renamed", "version": 4}, {})
    assert main(["--endpoint", stub.url, "jobs", "update", "j_abc", "--set", "name=renamed"]) == 0
    captured = capsys.readouterr()
    assert "using the current version 3" in captured.err
    assert "renamed" in captured.out
    patch = stub.requests[-1]
    assert patch["method"] == "PATCH" and patch["body"] == {"name": "renamed"}
    assert patch["headers"]["if-match"] == '"3"'
    assert patch["headers"]["content-type"] == "application/merge-patch+json"


def test_update_with_if_match_sends_it_without_a_read(stub: StubApi) -> None:
    stub.routes[("PATCH", "/v1/jobs/j_abc")] = (200, JOB, {})
    assert (
        main(["--endpoint", stub.url, "jobs", "update", "j_abc", "--if-match", "7", "--set", "endAt=null"])
        == 0
    )
    assert [r["method"] for r in stub.requests] == ["PATCH"]
    assert stub.requests[0]["headers"]["if-match"] == '"7"' and stub.requests[0]["body"] == {"endAt": None}


def test_list_follows_cursors_with_all(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    pages = iter(
        [
            {"items": [JOB], "nextCursor": "c1"},
            {
                "items": [{**JOB, "jobId": "j_def", "cron": None, "timeZone": None, "every": 900}],
                "nextCursor": None,
            },
        ]
    )

    class Paged(dict[tuple[str, str], Any]):
        def get(self, key: Any, default: Any = None) -> Any:
            return (200, next(pages), {}) if key == ("GET", "/v1/jobs") else default

    stub.routes = Paged()
    assert main(["--endpoint", stub.url, "jobs", "list", "--all", "--state", "active"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["JOB", "ID", "NAME", "TYPE", "SCHEDULE", "STATE", "NEXT", "RUN"]
    assert "cron 0 9 * * * (Europe/London)" in lines[1] and "every 15m" in lines[2]
    assert [r["path"] for r in stub.requests] == ["/v1/jobs?state=ACTIVE", "/v1/jobs?state=ACTIVE&cursor=c1"]


def test_a_union_schedule_is_listed_spec_by_spec(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    specs = [
        {"cron": "0 9 * * MON-FRI", "timeZone": "Europe/London", "every": None},
        {"cron": None, "timeZone": None, "every": 5400},
    ]
    union = {**JOB, "cron": None, "timeZone": None, "specs": specs}
    stub.routes[("GET", "/v1/jobs")] = (200, {"items": [union], "nextCursor": None}, {})
    assert main(["--endpoint", stub.url, "jobs", "list"]) == 0
    assert "cron 0 9 * * MON-FRI (Europe/London) | every 1h30m" in capsys.readouterr().out


def test_schedules_preview_sends_the_schedule_and_shows_why(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = {
        "fireTimes": [
            {"at": "2026-11-02T09:00:00Z", "fires": True, "reason": None, "specs": [0]},
            {
                "at": "2026-11-04T09:00:00Z",
                "fires": False,
                "reason": "excluded by exclude.0 (dates)",
                "specs": [0],
            },
        ]
    }
    stub.routes[("POST", "/v1/schedules/preview")] = (200, answer, {})
    argv = ["--endpoint", stub.url, "schedules", "preview", "--tz", "Europe/London", "--count", "2"]
    argv += ["--set", 'specs=[{"cron": "0 9 * * MON-FRI"}]', "--set", "dst.fold=both"]
    assert main(argv) == 0
    assert stub.requests[-1]["body"] == {
        "timeZone": "Europe/London",
        "count": 2,
        "specs": [{"cron": "0 9 * * MON-FRI"}],
        "dst": {"fold": "both"},
    }
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["AT", "SPECS", "WHY"]
    assert out[1].split() == ["2026-11-02T09:00:00Z", "fires", "0"]
    assert out[2].split()[:3] == ["2026-11-04T09:00:00Z", "excluded", "0"]
    assert out[2].endswith("excluded by exclude.0 (dates)")


def test_jobs_get_shows_the_upcoming_fire_times_and_why(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "excluded by exclude.0 (calendar us-holidays, its days in Europe/London)"
    lines = [
        {"at": "2026-11-25T09:00:00Z", "fires": True, "reason": None, "specs": None},
        {"at": "2026-11-26T09:00:00Z", "fires": False, "reason": reason, "specs": None},
    ]
    job = {**JOB, "nextFireTimes": ["2026-11-25T09:00:00Z"], "upcomingFireTimes": lines}
    stub.routes[("GET", "/v1/jobs/j_abc")] = (200, job, {})
    assert main(["--endpoint", stub.url, "jobs", "get", "j_abc"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "upcomingFireTimes" not in "\n".join(out)  # not dumped among the fields
    at = out.index("upcoming fire times:")
    assert out[at + 1].split() == ["AT", "SPECS", "WHY"]
    assert out[at + 2].split() == ["2026-11-25T09:00:00Z", "fires", "-"]
    assert out[at + 3].split()[:2] == ["2026-11-26T09:00:00Z", "excluded"]
    assert out[at + 3].endswith(reason)
    stub.routes[("GET", "/v1/jobs/j_abc")] = (200, {**JOB, "upcomingFireTimes": []}, {})
    assert main(["--endpoint", stub.url, "jobs", "get", "j_abc"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "upcoming fire times: none"


CALENDAR = {
    "name": "us-holidays",
    "entryCount": 3,
    "version": 2,
    "createdAt": "2026-11-01T00:00:00Z",
    "updatedAt": "2026-11-02T00:00:00Z",
    "usedBy": 1,
    "entries": [
        {"date": "2026-11-26", "startDate": None, "endDate": None, "start": None, "end": None},
        {"date": None, "startDate": "2026-12-24", "endDate": "2026-12-26", "start": None, "end": None},
        {
            "date": None,
            "startDate": None,
            "endDate": None,
            "start": "2027-01-01T00:00:00Z",
            "end": "2027-01-01T12:00:00Z",
        },
    ],
}


def test_calendars_put_sends_each_entry_and_shows_the_calendar(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.routes[("PUT", "/v1/calendars/us-holidays")] = (200, CALENDAR, {})
    entries = '[{"start": "2027-01-01T00:00:00Z", "end": "2027-01-01T12:00:00Z"}]'
    argv = ["--endpoint", stub.url, "calendars", "put", "us-holidays", "--entries", entries]
    argv += ["--date", "2026-11-26", "--dates", "2026-12-24..2026-12-26"]
    assert main(argv) == 0
    assert stub.requests[-1]["body"] == {
        "entries": [
            {"start": "2027-01-01T00:00:00Z", "end": "2027-01-01T12:00:00Z"},
            {"date": "2026-11-26"},
            {"startDate": "2026-12-24", "endDate": "2026-12-26"},
        ]
    }
    out = capsys.readouterr().out
    assert "usedBy" in out and "2026-12-24..2026-12-26" in out
    assert "2027-01-01T00:00:00Z until 2027-01-01T12:00:00Z" in out


def test_calendars_get_list_and_delete(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes[("GET", "/v1/calendars/us-holidays")] = (200, CALENDAR, {})
    stub.routes[("GET", "/v1/calendars")] = (
        200,
        {"items": [{k: v for k, v in CALENDAR.items() if k not in ("usedBy", "entries")}]},
        {},
    )
    stub.routes[("DELETE", "/v1/calendars/us-holidays")] = (200, CALENDAR, {})
    assert main(["--endpoint", stub.url, "calendars", "get", "us-holidays"]) == 0
    assert "2026-11-26" in capsys.readouterr().out
    assert main(["--endpoint", stub.url, "calendars", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "ENTRIES", "VERSION", "UPDATED"]
    assert out[1].split() == ["us-holidays", "3", "2", "2026-11-02T00:00:00Z"]
    assert main(["--endpoint", stub.url, "calendars", "delete", "us-holidays"]) == 0
    assert capsys.readouterr().out.strip() == "deleted us-holidays  version 2"


def test_calendars_put_refuses_a_malformed_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calendars", "put", "c", "--dates", "2026-12-24"]) == 2
    assert "--dates '2026-12-24': expected FIRST..LAST" in capsys.readouterr().err


def test_one_page_mentions_the_next_cursor(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes[("GET", "/v1/jobs")] = (200, {"items": [JOB], "nextCursor": "abc"}, {})
    assert main(["--endpoint", stub.url, "jobs", "list", "--limit", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "(more: --all, or --cursor abc)"
    assert stub.requests[-1]["path"] == "/v1/jobs?limit=1"


@pytest.mark.parametrize(("argv", "query"), [([], "view=history"), (["--view", "upcoming"], "view=upcoming")])
def test_runs_list_asks_for_history_unless_told(
    stub: StubApi, capsys: pytest.CaptureFixture[str], argv: list[str], query: str
) -> None:
    stub.routes[("GET", "/v1/jobs/j_abc/runs")] = (200, {"items": [], "nextCursor": None}, {})
    assert main(["--endpoint", stub.url, "runs", "list", "j_abc", *argv]) == 0
    assert stub.requests[-1]["path"] == f"/v1/jobs/j_abc/runs?{query}"


def test_runs_list_says_why_a_run_was_skipped(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    overlap = run_answer("j_abc@2026-11-02T09:00:00Z", state="SKIPPED", reason="overlap")
    paused = run_answer("j_abc@2026-11-02T08:00:00Z", state="SKIPPED", reason="paused", skippedCount=3)
    stub.routes[("GET", "/v1/jobs/j_abc/runs")] = (200, {"items": [overlap, paused], "nextCursor": None}, {})
    assert main(["--endpoint", stub.url, "runs", "list", "j_abc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "skipped: an earlier run was still open (overlap)" in lines[1]
    assert "skipped: missed while its job was paused (3 occurrences)" in lines[2]
    # Across jobs too, from the listing's own fields.
    summary = {
        key: overlap[key] for key in ("runKey", "jobId", "state", "trigger", "priority", "scheduledFor")
    }
    summary |= {"jobType": "t", "dueAt": overlap["dueAt"], "attempts": 0, "redrives": 0}
    summary |= {"reason": "expired", "skippedCount": 2, "updatedAt": overlap["updatedAt"]}
    stub.routes[("GET", "/v1/runs")] = (200, {"items": [summary], "nextCursor": None}, {})
    assert main(["--endpoint", stub.url, "runs", "list", "--state", "SKIPPED"]) == 0
    out = capsys.readouterr().out
    assert "skipped: older than the catch-up window (2 occurrences)" in out


def test_runs_get_shows_the_transitions_table(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    run_key = "j_abc@2026-11-02T09:00:00Z"
    run = run_answer(
        run_key,
        state="SUCCEEDED",
        attempt=1,
        fence=1,
        transitions=[
            transition("2026-11-02T08:59:00Z", None, "PENDING", 0, 0, actor="sweeper"),
            transition("2026-11-02T09:00:01Z", "LEASED", "SUCCEEDED", 1, 1, actor="worker:w"),
        ],
    )
    stub.routes[("GET", "/v1/runs/j_abc%402026-11-02T09%3A00%3A00Z")] = (200, run, {})
    assert main(["--endpoint", stub.url, "runs", "get", run_key]) == 0
    out = capsys.readouterr().out
    fields, table = out.split("\n\ntransitions:\n")
    # Names padded to the widest a run's answer has (definitionVersion).
    assert fields.splitlines()[0] == f"runKey             {run_key}"
    assert table.splitlines() == [
        "AT                    ACTOR     FROM    TO         FENCE  ATTEMPT  ERROR  DETAIL",
        "2026-11-02T08:59:00Z  sweeper   -       PENDING        0        0  -      -",
        "2026-11-02T09:00:01Z  worker:w  LEASED  SUCCEEDED      1        1  -      -",
    ]
    # A run whose definition is stored nowhere any more says so beside its null target.
    stub.routes[("GET", "/v1/runs/j_abc%402026-11-02T09%3A00%3A00Z")] = (
        200,
        {**run, "definitionAvailable": False},
        {},
    )
    assert main(["--endpoint", stub.url, "runs", "get", run_key]) == 0
    lines = capsys.readouterr().out.split("\n\ntransitions:\n")[0].splitlines()
    assert "definitionAvailable  false" in lines and "target               -" in lines


def test_job_actions_and_redrive(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    stub.routes[("POST", "/v1/jobs/j_abc/pause")] = (200, {**JOB, "state": "PAUSED", "version": 4}, {})
    stub.routes[("DELETE", "/v1/jobs/j_abc")] = (200, {**JOB, "state": "CANCELLED", "version": 5}, {})
    key = "j_abc@2026-11-02T09:00:00Z"
    stub.routes[("POST", "/v1/runs/j_abc%402026-11-02T09%3A00%3A00Z/redrive")] = (
        200,
        run_answer(key, state="PENDING", redrives=1),
        {},
    )
    assert main(["--endpoint", stub.url, "jobs", "pause", "j_abc", "--if-match", "3"]) == 0
    assert main(["--endpoint", stub.url, "jobs", "cancel", "j_abc"]) == 0
    assert main(["--endpoint", stub.url, "dlq", "redrive", key, "--reason", "fixed"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "j_abc  PAUSED  version 4",
        "j_abc  CANCELLED  version 5",
        f"redriven {key}  PENDING  redrives 1",
    ]
    assert stub.requests[0]["headers"]["if-match"] == '"3"'
    assert "if-match" not in stub.requests[1]["headers"]
    assert stub.requests[2]["body"] == {"reason": "fixed"}


def test_jobs_archive_and_the_archived_listing(stub: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    archived = {**JOB, "state": "CANCELLED", "version": 5, "archivedAt": "2026-11-03T00:00:00Z"}
    stub.routes[("POST", "/v1/jobs/j_abc/archive")] = (200, archived, {})
    stub.routes[("GET", "/v1/jobs")] = (200, {"items": [archived], "nextCursor": None}, {})
    assert main(["--endpoint", stub.url, "jobs", "archive", "j_abc", "--if-match", "5"]) == 0
    assert main(["--endpoint", stub.url, "jobs", "list", "--archived"]) == 0
    assert main(["--endpoint", stub.url, "jobs", "list"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "j_abc  CANCELLED  version 5"
    assert [(r["method"], r["path"]) for r in stub.requests] == [
        ("POST", "/v1/jobs/j_abc/archive"),
        ("GET", "/v1/jobs?archived=true"),
        ("GET", "/v1/jobs"),
    ]
    assert stub.requests[0]["headers"]["if-match"] == '"5"'


def test_an_answer_not_of_the_documented_shape_exits_1_with_one_line(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    """A success whose body the client cannot read (UnexpectedResponse): one line naming what
    is wrong, as for any other error, and no traceback."""
    stub.routes[("GET", "/v1/jobs/j_abc")] = (200, {**JOB, "version": "four", "name": None}, {})
    assert main(["--endpoint", stub.url, "jobs", "get", "j_abc"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "error: 200: the answer is not the documented shape: name: Input should be a valid string;"
        " version: Input should be a valid integer, unable to parse string as an integer"
    ]


def test_unreachable_endpoint_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--endpoint", "http://127.0.0.1:1", "jobs", "list"]) == 1
    assert capsys.readouterr().err.startswith("error: cannot reach http://127.0.0.1:1")


@pytest.fixture
def elsewhere() -> Iterator[StubApi]:
    """Another host (127.0.0.2, loopback too) that records what reaches it."""
    api = StubApi("127.0.0.2")
    yield api
    api.close()


@pytest.mark.parametrize(
    "command",
    [
        ["jobs", "list"],
        ["jobs", "create", "--name", "n", "--type", "t", "--cron", "0 9 * * *"],
        ["docs", "--json"],
    ],
)
def test_a_redirect_to_another_host_exits_1_and_the_key_stays_here(
    stub: StubApi, elsewhere: StubApi, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    for route in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/openapi.json")):
        stub.routes[route] = (302, {}, {"Location": f"{elsewhere.url}{route[1]}"})
        elsewhere.routes[route] = (200, {"items": [], "nextCursor": None}, {})
    code = main(["--endpoint", stub.url, "--api-key", "tenant-secret", *command])
    assert [sent["headers"].get("x-api-key") for sent in elsewhere.requests] == []
    assert [sent["headers"]["x-api-key"] for sent in stub.requests] == ["tenant-secret"]
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: 302 redirect_refused: a redirect to another origin ({elsewhere.url})")
    assert f"location: {elsewhere.url}/" in err


def test_the_local_tour_keeps_its_key_on_a_redirect_elsewhere(stub: StubApi, elsewhere: StubApi) -> None:
    from jobsched_local.demo import Demo

    stub.routes[("GET", "/v1/jobs")] = (307, {}, {"Location": f"{elsewhere.url}/v1/jobs"})
    tour = Demo(stub.url, "tenant-secret")
    try:
        with pytest.raises(ClientError) as raised:
            tour.call("GET", "/v1/jobs")
    finally:
        tour.receiver.stop()
    assert [sent["headers"].get("x-api-key") for sent in elsewhere.requests] == []
    assert isinstance(raised.value, RedirectRefused) and raised.value.origin == elsewhere.url


# --- tail ---


class FakeRuns:
    """The slice of the Client the follower uses, over runs the test moves by hand."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}

    def add(self, key: str, scheduled: str, *moves: tuple[str, str | None, str, int, str | None]) -> None:
        self.runs[key] = run_answer(key, scheduledFor=scheduled, transitions=[])
        self.move(key, *moves)

    def move(self, key: str, *moves: tuple[str, str | None, str, int, str | None]) -> None:
        run = self.runs[key]
        for at, source, target, attempt, error in moves:
            run["transitions"].append(transition(at, source, target, attempt, attempt, errorClass=error))
            run.update(state=target, attempt=attempt, fence=attempt, updatedAt=at)

    def get_job(self, job_id: str) -> JobView:
        return JobView.model_validate(job_answer(jobId=job_id, name="nightly"))

    def list_runs(self, job_id: str, **kw: Any) -> RunList:
        items = sorted(self.runs.values(), key=lambda r: r["scheduledFor"], reverse=True)
        detail_only = {
            "target",
            "payload",
            "definitionAvailable",
            "attempts",
            "transitions",
            "historyDropped",
        }
        shown = [{k: v for k, v in r.items() if k not in detail_only} for r in items]
        return RunList.model_validate({"items": shown, "nextCursor": None})

    def get_run(self, key: str) -> RunDetailView:
        return RunDetailView.model_validate(self.runs[key])


def test_follower_reports_only_transitions_after_it_started() -> None:
    fake = FakeRuns()
    now = datetime(2026, 11, 2, 9, 0, 10, tzinfo=UTC)
    fake.add("j_a@09:00:00", "2026-11-02T09:00:00Z", ("2026-11-02T08:59:00Z", None, "PENDING", 0, None),
             ("2026-11-02T08:59:01Z", "PENDING", "QUEUED", 0, None))  # fmt: skip
    fake.add("j_a@09:00:30", "2026-11-02T09:00:30Z", ("2026-11-02T08:59:30Z", None, "PENDING", 0, None))
    follower = RunFollower(fake, ["j_a"], lookback=300, now=lambda: now)  # type: ignore[arg-type]
    assert follower.poll() == []  # the baseline

    fake.move("j_a@09:00:00", ("2026-11-02T09:00:11Z", "QUEUED", "LEASED", 1, None),
              ("2026-11-02T09:00:12Z", "LEASED", "RETRY_WAIT", 1, "Timeout"))  # fmt: skip
    events = follower.poll()
    assert [(e["from"], e["to"], e["attempt"], e["errorClass"]) for e in events] == [
        ("QUEUED", "LEASED", 1, None),
        ("LEASED", "RETRY_WAIT", 1, "Timeout"),
    ]
    assert events[0]["jobName"] == "nightly"
    assert follower.poll() == []  # nothing new

    # The run scheduled ahead stays quiet until due, then shows what happens from then on
    # (its creation at 08:59:30 is no news at 09:00:31).
    now = datetime(2026, 11, 2, 9, 0, 31, tzinfo=UTC)
    fake.move("j_a@09:00:30", ("2026-11-02T09:00:31Z", "PENDING", "LEASED", 1, None))
    events = follower.poll()
    assert [(e["runKey"], e["from"], e["to"]) for e in events] == [("j_a@09:00:30", "PENDING", "LEASED")]


def test_follower_keeps_polling_open_runs_older_than_the_lookback() -> None:
    fake = FakeRuns()
    now = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
    fake.add("j_a@08:59:00", "2026-11-02T08:59:00Z", ("2026-11-02T08:59:00Z", None, "PENDING", 0, None))
    follower = RunFollower(fake, ["j_a"], lookback=120, now=lambda: now)  # type: ignore[arg-type]
    follower.poll()
    now = datetime(2026, 11, 2, 9, 5, 0, tzinfo=UTC)  # the run is now older than the lookback
    fake.move("j_a@08:59:00", ("2026-11-02T09:04:59Z", "PENDING", "DEAD", 0, "Undeliverable"))
    assert [e["to"] for e in follower.poll()] == ["DEAD"]
    assert follower.tracked == {}


def test_tail_line() -> None:
    event = {
        "at": "2026-11-02T09:00:12Z",
        "jobName": "nightly",
        "runKey": "j_a@2026-11-02T09:00:00Z",
        "from": "LEASED",
        "to": "RETRY_WAIT",
        "attempt": 1,
        "errorClass": "Timeout",
    }
    assert tail_line(event) == (
        "09:00:12  nightly                   j_a@2026-11-02T09:00:00Z      LEASED → RETRY_WAIT  "
        "attempt 1  Timeout"
    )
    created = tail_line({**event, "from": None, "to": "PENDING", "attempt": 0, "errorClass": None})
    assert created.endswith("         - → PENDING     attempt 0")


def test_docs_saves_the_swagger_page_fetched_with_the_callers_credentials(
    stub: StubApi, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    stub.routes[("GET", "/docs")] = (200, "<html>swagger</html>", {})
    stub.routes[("GET", "/openapi.json")] = (200, {"openapi": "3.1.0", "paths": {}}, {})
    page = tmp_path / "docs.html"
    assert main(["--endpoint", stub.url, "docs", "--output", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == "<html>swagger</html>"
    assert stub.requests[-1]["headers"]["x-api-key"] == "jobsched-dev-key"
    assert str(page) in capsys.readouterr().out
    assert main(["--endpoint", stub.url, "docs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"openapi": "3.1.0", "paths": {}}


# --- negative durations, and tail's timing ---


@pytest.mark.parametrize("option", ["--start", "--end"])
def test_backfill_takes_negative_durations_as_the_help_offers(option: str) -> None:
    argv = ["jobs", "backfill", "j_1", "--start", "-2h", "--end", "now"]
    if option == "--end":
        argv = ["jobs", "backfill", "j_1", "--start", "-2h", "--end", "-30m"]
    args = build_parser().parse_args(cli.attach_negative_values(argv))
    assert args.start == "-2h"
    assert args.end == ("-30m" if option == "--end" else "now")


def test_backfill_with_negative_durations_reaches_the_api(stub: StubApi) -> None:
    stub.routes[("POST", "/v1/jobs/j_1/backfill")] = (200, {"created": [], "existing": []}, {})
    assert main(["--endpoint", stub.url, "jobs", "backfill", "j_1", "--start", "-2h", "--end", "-1h"]) == 0
    body = stub.requests[-1]["body"]
    start = datetime.fromisoformat(body["start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(body["end"].replace("Z", "+00:00"))
    assert (end - start).total_seconds() == 3600


def test_negative_values_are_glued_only_to_instant_options() -> None:
    assert cli.attach_negative_values(["jobs", "backfill", "j", "--start", "-1d"]) == [
        "jobs",
        "backfill",
        "j",
        "--start=-1d",
    ]
    # An option that follows is still an option; other options keep their own values.
    assert cli.attach_negative_values(["--start", "--json"]) == ["--start", "--json"]
    assert cli.attach_negative_values(["--limit", "-5"]) == ["--limit", "-5"]
    assert cli.attach_negative_values(["--", "--start", "-1h"]) == ["--", "--start", "-1h"]


def test_relative_instants_in_the_past() -> None:
    now = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
    assert parse_instant("-2h", now) == "2026-11-02T07:00:00Z"
    with pytest.raises(UsageError, match="-DURATION"):
        parse_instant("-soon", now)


def test_a_run_coming_due_shows_what_happens_from_then_not_its_earlier_bookkeeping() -> None:
    fake = FakeRuns()
    now = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
    follower = RunFollower(fake, ["j_a"], lookback=300, now=lambda: now)  # type: ignore[arg-type]
    assert follower.poll() == []
    # Materialised two minutes ahead, queued a minute ahead: nothing to say yet.
    fake.add("j_a@09:02:00", "2026-11-02T09:02:00Z", ("2026-11-02T09:00:00Z", None, "PENDING", 0, None),
             ("2026-11-02T09:01:00Z", "PENDING", "QUEUED", 0, None))  # fmt: skip
    fake.add("j_a@09:01:30", "2026-11-02T09:01:30Z", ("2026-11-02T09:01:30Z", None, "PENDING", 0, None))
    now = datetime(2026, 11, 2, 9, 1, 31, tzinfo=UTC)
    fake.move("j_a@09:01:30", ("2026-11-02T09:01:31Z", "PENDING", "LEASED", 1, None))
    printed = [(e["runKey"], e["at"], e["to"]) for e in follower.poll()]
    assert printed == [
        ("j_a@09:01:30", "2026-11-02T09:01:30Z", "PENDING"),
        ("j_a@09:01:30", "2026-11-02T09:01:31Z", "LEASED"),
    ]
    now = datetime(2026, 11, 2, 9, 2, 1, tzinfo=UTC)
    fake.move("j_a@09:02:00", ("2026-11-02T09:02:01Z", "QUEUED", "LEASED", 1, None))
    events = follower.poll()
    assert [(e["at"], e["from"], e["to"]) for e in events] == [("2026-11-02T09:02:01Z", "QUEUED", "LEASED")]
    # Never a line older than one already printed.
    assert events[0]["at"] >= printed[-1][1]


def test_tail_count_counts_lines_about_runs_that_are_due(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeRuns()
    clock = [datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)]
    for minute in range(1, 6):  # five runs made ahead, each PENDING then QUEUED before it is due
        fake.add(f"j_a@09:0{minute}:00", f"2026-11-02T09:0{minute}:00Z",
                 ("2026-11-02T08:59:00Z", None, "PENDING", 0, None),
                 ("2026-11-02T08:59:30Z", "PENDING", "QUEUED", 0, None))  # fmt: skip
    script = iter(range(1, 6))

    def sleep(seconds: float) -> None:  # each poll interval: the next run comes due and succeeds
        minute = next(script)
        clock[0] = datetime(2026, 11, 2, 9, minute, 1, tzinfo=UTC)
        fake.move(f"j_a@09:0{minute}:00", (f"2026-11-02T09:0{minute}:01Z", "QUEUED", "LEASED", 1, None),
                  (f"2026-11-02T09:0{minute}:01Z", "LEASED", "SUCCEEDED", 1, None))  # fmt: skip

    monkeypatch.setattr(commands.time, "sleep", sleep)
    monkeypatch.setattr(commands, "Client", lambda *a, **kw: fake)
    monkeypatch.setattr(commands, "utc_now", lambda: clock[0])
    assert main(["tail", "j_a", "--count", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert ["→ LEASED" in line or "→ SUCCEEDED" in line for line in lines] == [True] * 4
    assert [line[:8] for line in lines] == ["09:01:01", "09:01:01", "09:02:01", "09:02:01"]


def test_tail_lookback_first_shows_the_runs_of_that_window_finished_or_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeRuns()
    fake.add("j_a@08:10:00", "2026-11-02T08:10:00Z", ("2026-11-02T08:10:00Z", None, "PENDING", 0, None),
             ("2026-11-02T08:10:01Z", "PENDING", "LEASED", 1, None),
             ("2026-11-02T08:10:02Z", "LEASED", "SUCCEEDED", 1, None))  # fmt: skip
    fake.add("j_a@07:00:00", "2026-11-02T07:00:00Z", ("2026-11-02T07:00:00Z", None, "PENDING", 0, None),
             ("2026-11-02T07:00:01Z", "PENDING", "SUCCEEDED", 1, None))  # fmt: skip
    monkeypatch.setattr(commands, "Client", lambda *a, **kw: fake)
    monkeypatch.setattr(commands, "utc_now", lambda: datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC))
    monkeypatch.setattr(commands.time, "sleep", _interrupt)
    assert main(["tail", "j_a", "--lookback", "3600", "--count", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line[:8] for line in lines] == ["08:10:00", "08:10:01", "08:10:02"]
    assert "→ SUCCEEDED" in lines[-1]


def test_tail_without_lookback_starts_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRuns()
    fake.add("j_a@08:59:00", "2026-11-02T08:59:00Z", ("2026-11-02T08:59:00Z", None, "PENDING", 0, None),
             ("2026-11-02T08:59:01Z", "PENDING", "SUCCEEDED", 1, None))  # fmt: skip
    now = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
    follower = RunFollower(fake, ["j_a"], lookback=300, now=lambda: now)  # type: ignore[arg-type]
    assert follower.poll() == []


def _interrupt(seconds: float) -> None:
    raise KeyboardInterrupt  # Ctrl-C at the first wait: tail stops and exits 0


def test_output_into_a_closed_pipe_is_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def closed(ctx: Any, args: Any) -> int:  # `jobsched jobs list | head -1` on a long listing
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli.args, "cmd_jobs_list", closed)
    monkeypatch.setattr(entry.os, "dup2", lambda *a: None)
    assert main(["jobs", "list"]) == 0


def test_doctor_hands_its_arguments_to_the_preflight(monkeypatch):
    """`jobsched doctor ...` is the deploy preflight (infra.doctor), every option passed on."""
    from jobsched_cli.entry import main as cli_main

    import infra.doctor

    seen: list[list[str]] = []

    def preflight(argv):
        seen.append(argv)
        return 1

    monkeypatch.setattr(infra.doctor, "main", preflight)
    assert cli_main(["doctor", "-c", "shardCount=64", "--region", "eu-west-1"]) == 1
    assert seen == [["-c", "shardCount=64", "--region", "eu-west-1"]]


def test_runs_get_shows_the_attempts_and_why_it_waits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_answer(
        "j_a@2026-11-02T09:00:00Z",
        state="RETRY_WAIT",
        attempt=1,
        fence=1,
        lastErrorClass="HTTP503",
        waitingFor="waiting for its retry at 2026-11-02T09:00:04Z",
        attempts=[
            {
                "attempt": 1,
                "fence": 1,
                "startedAt": "2026-11-02T09:00:00Z",
                "endedAt": "2026-11-02T09:00:01Z",
                "outcome": "failed",
                "errorClass": "HTTP503",
            }
        ],
        transitions=[
            transition("2026-11-02T08:59:00Z", None, "PENDING", 0, 0),
            transition("2026-11-02T09:00:00Z", "QUEUED", "LEASED", 1, 1),
            transition("2026-11-02T09:00:01Z", "LEASED", "RETRY_WAIT", 1, 1, errorClass="HTTP503"),
        ],
    )
    ctx = context(monkeypatch, [])
    monkeypatch.setattr(ctx.client, "get_run", lambda key: RunDetailView.model_validate(run))
    args = build_parser().parse_args(["runs", "get", run["runKey"]])
    assert commands.cmd_runs_get(ctx, args) == 0
    out = capsys.readouterr().out
    assert "waitingFor         waiting for its retry at 2026-11-02T09:00:04Z" in out
    attempts = out.split("attempts:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert attempts[0].split() == ["ATTEMPT", "FENCE", "STARTED", "ENDED", "OUTCOME", "ERROR"]
    assert attempts[1].split() == [
        "1",
        "1",
        "2026-11-02T09:00:00Z",
        "2026-11-02T09:00:01Z",
        "failed",
        "HTTP503",
    ]


@pytest.mark.parametrize(
    ("argv", "query"),
    [
        (["--state", "DEAD", "--since", "1h"], "state=DEAD&since=2026-11-02T07%3A00%3A00Z"),
        (["--error", "HTTP503", "--since", "-30m"], "errorClass=HTTP503&since=2026-11-02T07%3A30%3A00Z"),
        (["j_abc", "--state", "DEAD"], "state=DEAD&jobId=j_abc"),
        (["--time-field", "finished", "--until", "now"], "timeField=finished&until=2026-11-02T08%3A00%3A00Z"),
        ([], ""),
    ],
)
def test_runs_list_with_filters_or_no_job_lists_across_jobs(
    stub: StubApi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    query: str,
) -> None:
    import jobsched_cli.commands as commands
    import jobsched_cli.values as values

    real = values.parse_instant
    monkeypatch.setattr(
        commands,
        "parse_instant",
        lambda text, now=None: real(text, now or datetime(2026, 11, 2, 8, tzinfo=UTC)),
    )
    monkeypatch.setattr(
        values,
        "parse_instant",
        lambda text, now=None: real(text, now or datetime(2026, 11, 2, 8, tzinfo=UTC)),
    )
    item = RunSummaryView.model_validate(
        {
            "runKey": "j_abc@2026-11-02T07:10:00Z",
            "jobId": "j_abc",
            "jobType": "report.build",
            "state": "DEAD",
            "trigger": "schedule",
            "priority": "default",
            "scheduledFor": "2026-11-02T07:10:00Z",
            "dueAt": "2026-11-02T07:10:00Z",
            "attempts": 3,
            "redrives": 0,
            "startedAt": "2026-11-02T07:10:00Z",
            "finishedAt": "2026-11-02T07:12:00Z",
            "errorClass": "HTTP503",
            "reason": None,
            "skippedCount": None,
            "updatedAt": "2026-11-02T07:12:00Z",
        }
    ).model_dump(mode="json", by_alias=True)
    stub.routes[("GET", "/v1/runs")] = (200, {"items": [item], "nextCursor": None}, {})
    assert main(["--endpoint", stub.url, "runs", "list", *argv]) == 0
    assert stub.requests[-1]["path"] == "/v1/runs" + (f"?{query}" if query else "")
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split() == ["RUN", "KEY", "STATE", "TRIGGER", "ATTEMPTS", "STARTED", "FINISHED", "ERROR"]
    assert row.split()[-1] == "HTTP503"


def test_runs_list_view_does_not_combine_with_filters(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--endpoint", stub.url, "runs", "list", "j_abc", "--view", "all", "--state", "DEAD"]) == 2
    assert "--view" in capsys.readouterr().err


def test_dead_letters_redrive_with_filters_sends_every_page_as_one_request_each(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    pages = iter(
        [
            bulk_answer("bulk_1", ["j_a@2026-11-02T07:10:00Z"], "c1"),
            bulk_answer("bulk_2", ["j_b@2026-11-02T07:20:00Z"], None),
        ]
    )
    stub.routes[("POST", "/v1/dead-letters/redrive")] = lambda: (200, next(pages), {})
    argv = ["--endpoint", stub.url, "dead-letters", "redrive", "--error", "HTTP503", "--since", "-1h"]
    assert main(argv) == 0
    bodies = [r["body"] for r in stub.requests]
    assert [b.get("cursor") for b in bodies] == [None, "c1"]
    assert bodies[0]["errorClass"] == "HTTP503" and bodies[0]["dryRun"] is False and "since" in bodies[0]
    assert capsys.readouterr().out.splitlines()[0] == "redriven: 2"


def test_dead_letters_dry_run_asks_once_and_changes_nothing(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = bulk_answer("bulk_1", ["j_a@2026-11-02T07:10:00Z"], "c1", dry_run=True)
    stub.routes[("POST", "/v1/dead-letters/cancel")] = (200, outcome, {})
    assert main(["--endpoint", stub.url, "dlq", "cancel", "--job", "j_a", "--dry-run"]) == 0
    assert len(stub.requests) == 1 and stub.requests[0]["body"]["dryRun"] is True
    assert capsys.readouterr().out.splitlines()[0] == "would be cancelled: 1"


def test_dead_letters_cancel_needs_a_run_key_or_a_filter(
    stub: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--endpoint", stub.url, "dead-letters", "cancel"]) == 2
    assert "RUNKEY" in capsys.readouterr().err


def test_a_redrive_sends_its_fix_for_one_run_and_for_one_jobs_dead_letters(
    stub: StubApi, tmp_path: Path
) -> None:
    key = "j_abc@2026-11-02T09:00:00Z"
    stub.routes[("POST", "/v1/runs/j_abc%402026-11-02T09%3A00%3A00Z/redrive")] = (
        200,
        run_answer(key, state="PENDING", redrives=1),
        {},
    )
    stub.routes[("POST", "/v1/dead-letters/redrive")] = (200, bulk_answer("bulk_1", [key], None), {})
    target = tmp_path / "target.json"
    target.write_text('{"kind": "eventbridge", "eventBusName": "a-bus"}')
    argv = ["--endpoint", stub.url, "dlq", "redrive"]
    assert main([*argv, key, "--payload", "null", "--target", f"@{target}", "--reason", "moved"]) == 0
    assert main([*argv, "--job", "j_abc", "--payload", '{"rows": 7}']) == 0
    one, bulk = (r["body"] for r in stub.requests)
    bus = {"kind": "eventbridge", "eventBusName": "a-bus"}
    assert one == {"reason": "moved", "payload": None, "target": bus}
    assert bulk["jobId"] == "j_abc" and bulk["payload"] == {"rows": 7} and "target" not in bulk
    assert main([*argv, key, "--payload", "{not json"]) == 2


# --- events tail ---


def test_events_tail_on_a_deployed_stack_says_to_subscribe_to_the_bus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = cli.Context(build_parser().parse_args(["--endpoint", "https://api.example.com", "events", "tail"]))

    def not_here(after: int, *, limit: int = 100) -> dict[str, Any]:
        raise ApiError(404, {"code": "not_found", "message": "no route"})

    monkeypatch.setattr(ctx.client, "local_events", not_here)
    args = build_parser().parse_args(["events", "tail"])
    with pytest.raises(UsageError, match="read from its bus"):
        commands.cmd_events_tail(ctx, args)


def test_events_tail_prints_the_types_asked_for_from_the_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = cli.Context(build_parser().parse_args(["events", "tail"]))
    events = [
        {
            "type": "jobsched.job.created",
            "time": "2026-12-03T10:00:00Z",
            "subject": "j_a",
            "data": {"name": "n", "version": 1, "state": "ACTIVE", "actor": "api:t"},
        },
        {
            "type": "jobsched.run.dead",
            "time": "2026-12-03T10:00:05Z",
            "subject": "j_a@2026-12-03T10:00:00Z",
            "data": {
                "from": "LEASED",
                "state": "DEAD",
                "attempt": 1,
                "actor": "worker:w",
                "errorClass": "HTTP400",
            },
        },
    ]
    pages = iter([{"items": events, "cursor": 2}, {"items": [], "cursor": 2}])
    monkeypatch.setattr(ctx.client, "local_events", lambda after, limit=100: next(pages))
    args = build_parser().parse_args(["events", "tail", "--from-start", "--type", "run.dead", "--count", "1"])
    assert commands.cmd_events_tail(ctx, args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "run.dead" in out[0] and "LEASED → DEAD" in out[0] and "HTTP400" in out[0]
