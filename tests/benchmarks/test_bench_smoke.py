"""Each benchmark runs end to end at a tiny size and produces the keys the report reads.

No performance figure is asserted here: `make bench` reports them (bench/report.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `bench` lives at the repository root, beside functions/


# What a report needs of the machine it ran on; a smoke run's is made up.
SMOKE_ENVIRONMENT = {
    "cpus": 2,
    "python": "3",
    "load_before": (0.0, 0.0, 0.0),
    "load_after": (0.0, 0.0, 0.0),
    "mode": "smoke",
    "seconds": 0.0,
    "finished_at": "now",
}


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    # The benchmarks configure the process like a Lambda or local mode would.
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    from jobsched import aws, settings, wiring

    wiring.override(None)
    aws.client.cache_clear()
    settings.settings.cache_clear()


@pytest.fixture(scope="module")
def cost_result() -> dict:
    from bench import cost

    return cost.run(
        dense=(10, 1), sparse=(2, 1), one_time_jobs=3, idle_minutes=1, shards=2, hourly_jobs=3, retried_jobs=2
    )


def test_units_follow_the_published_rules() -> None:
    from bench import units

    item = {"pk": {"S": "abc"}, "n": {"N": "123.45"}, "m": {"M": {"a": {"BOOL": True}}}}
    assert units.item_size(item) == (2 + 3) + (1 + 4) + (1 + 3 + 1 + 1 + 1)
    assert units.write_units(1024) == 1 and units.write_units(1025) == 2
    assert units.read_units(5000, consistent=False) == 1.0
    assert units.sqs_requests(64 * 1024 + 1) == 2


@pytest.mark.e2e
def test_lag_smoke() -> None:
    from bench import lag

    result = lag.run(bursts=(2,), stream_runs=0, lead=3.0)
    scenario = result["scenarios"]["burst_2"]
    assert scenario["lag"]["n"] == 2
    assert set(scenario["share_of_lag"]) == {"not_visible", "moto", "ours", "idle"}
    assert "worker" in result["aws_calls"]


@pytest.mark.integration
def test_cost_smoke(cost_result: dict) -> None:
    dense = cost_result["scenarios"][0]
    assert dense["runs"] > 0
    assert {"sweep", "outbox", "worker"} <= set(dense["stages"])
    assert {"write_units", "sqs_requests", "usd"} <= set(dense["per_run"])
    assert dense["transitions"] and dense["what_ifs"]
    assert cost_result["fixed"]["total_usd_per_month"] >= 0


def test_the_webhook_payload_is_the_size_asked() -> None:
    from jobsched.domain.models import payload_size

    from bench import cost

    assert payload_size(cost.webhook_payload()) == cost.PAYLOAD_BYTES == 1024
    assert payload_size(cost.webhook_payload(300)) == 300


@pytest.mark.integration
def test_cost_scenarios_with_an_http_target_deliver_it(cost_result: dict) -> None:
    """The realistic scenarios run their http target for real (one request per attempt, to the
    loopback receiver through the production client) and reference the target and the 1 KB
    payload from their job, so a run's item stays about the size of one without them; the
    hourly one advances its job once per run."""
    from bench import cost

    by_key = {s["key"]: s for s in cost_result["scenarios"]}
    assert list(by_key) == [
        "recurring_10",
        "recurring_1",
        "one_time",
        "minutely_http",
        "hourly_http",
        "one_time_http",
        "one_time_http_3_retries",
    ]
    bare = {"minutely_http": "recurring_10", "hourly_http": "recurring_10", "one_time_http": "one_time"}
    for key, without in bare.items():
        s = by_key[key]
        assert s["runs"] > 0 and s["attempts_per_run"] == 1, key
        assert s["stages"]["worker"]["requests"]["http:POST"] == 1, key
        bare_item = by_key[without]["per_run"]["finished_item_bytes_max"]
        # Neither the payload (cost.PAYLOAD_BYTES) nor the target is in the item: the
        # reference (`def`, the target's kind) and the delivery's result are.
        assert s["per_run"]["finished_item_bytes_p50"] < bare_item + cost.PAYLOAD_BYTES // 4, key
        assert s["per_run"]["max_item_bytes"] >= s["per_run"]["finished_item_bytes_max"], key
        assert set(s["goals_met"]) == {"write_units", "write_units_stretch", "usd", "usd_stretch", "item"}
    advances = {t["write"]: t["per_run"] for t in by_key["hourly_http"]["transitions"]}
    assert advances["job: advance / save"] == 1
    retried = by_key["one_time_http_3_retries"]
    assert retried["runs"] == 2 and retried["attempts_per_run"] == 4
    assert retried["stages"]["worker"]["requests"]["http:POST"] == 4
    assert retried["per_run"]["max_item_bytes"] > by_key["one_time_http"]["per_run"]["max_item_bytes"]
    assert retried["goals_met"] == {"item_bounded": True}


@pytest.mark.integration
def test_amplification_smoke() -> None:
    from bench import amplification

    row = amplification.measure(60, due=6, shards=4)
    assert row["due"] == 6 and "amplification" in row and row["queries"] >= 4


@pytest.mark.integration
def test_backlog_smoke() -> None:
    from bench import backlog, report

    result = backlog.run((0, 2), on_time=6, budget=30.0)
    calm, busy = result["rows"]
    assert calm["backlog_swept"] == 0 and busy["backlog_swept"] == 2
    assert busy["on_time_swept"] == 6 and busy["backlog_records_written"] > 0
    assert set(result["plan_cpu_seconds"]) == {"catch-up", "run-once"}
    assert "## 3b." in "\n".join(report._backlog_md(result))


@pytest.mark.integration
def test_hotpath_smoke() -> None:
    from bench import hotpath

    result = hotpath.run(rounds=1, jobs=3, minutes=1)
    assert set(result["stages"]) == {"sweep", "outbox", "worker"}
    assert all("us_per_run_median" in s for s in result["stages"].values())


@pytest.mark.integration
def test_capacity_and_report(cost_result: dict, tmp_path: Path) -> None:
    from bench import capacity, report

    result = capacity.run(cost_result, None)
    assert {r["shards"] for r in result["rows"]} == {16, 32, 64, 256}  # the issue's three and the default
    assert all(r["binding"] in r["limits_runs_per_minute"] for r in result["rows"])
    results = {
        "environment": SMOKE_ENVIRONMENT,
        "cost": cost_result,
        "capacity": result,
    }
    markdown = report.markdown(results, None)
    assert "## 2. Cost per run" in markdown
    assert "### Per run against the goals" in markdown
    assert "### Where every write unit goes (minutely, http target + 1 KB payload, per run)" in markdown
    assert "### Top-of-hour burst, runs made ahead" in report.markdown(results, None)
    assert result["top_of_hour"][0]["settings"]["label"] == "stack defaults"
    assert "## Performance" in report.readme_section(results)
    assert report.terminal(results)


def test_mirrored_stack_settings_match_infra() -> None:
    """bench.harness mirrors infra's event source settings instead of importing jobsched.cdk.config."""
    from jobsched.cdk.config import Config
    from jobsched.cdk.event_sources import OUTBOX_BATCH_SIZE, OUTBOX_PARALLELIZATION

    from bench import harness

    config = Config()
    assert config.worker_batch_size == harness.WORKER_BATCH_SIZE
    assert config.worker_concurrency == harness.WORKER_CONCURRENCY
    assert config.shards_per_sweep == harness.SHARDS_PER_SWEEP
    assert harness.OUTBOX_BATCH_SIZE == OUTBOX_BATCH_SIZE
    assert harness.OUTBOX_PARALLELIZATION == OUTBOX_PARALLELIZATION
    assert config.horizon_seconds == harness.HORIZON_SECONDS
    assert config.shard_count == harness.SHARD_COUNT
    assert config.sweep_ahead_seconds == harness.SWEEP_AHEAD_SECONDS


def test_local_mode_burst_of_200_has_the_issues_five_second_goal() -> None:
    from bench.report import lag_goal_seconds

    assert lag_goal_seconds({"scenario": "burst of 200 due in one second", "runs": 200}) == 5.0
    assert lag_goal_seconds({"scenario": "burst of 50 due in one second", "runs": 50}) == 1.0
    assert lag_goal_seconds({"scenario": "steady stream: 1 run due per second for 60 s", "runs": 60}) == 1.0


@pytest.mark.integration
def test_bulk_redrive_smoke() -> None:
    """Small, but through the whole path: every run redriven once, each audited, with units billed."""
    from bench import bulk, report

    result = bulk.run(dead=120)  # more than one page of 100
    assert result["api_requests"] == 3 and result["dry_run_count"] == 100
    assert result["redriven"] == result["runs_with_one_audited_entry"] == 120
    assert result["write_units"] > 0 and "dead_by_tenant" in result["gsi_write_units_by_index"]
    results = {
        "environment": SMOKE_ENVIRONMENT,
        "bulk": result,
    }
    assert "## 6. Bulk redrive of dead letters" in report.markdown(results, None)
    assert "bulk redrive of 120" in report.terminal(results)


def test_events_smoke() -> None:
    """Each level publishes what its contract says for each kind of run, and a level that
    publishes more costs more."""
    from jobsched.cdk.event_sources import EVENTS_BATCH_SIZE

    from bench import events, report

    assert events.EVENTS_BATCH_SIZE == EVENTS_BATCH_SIZE
    result = events.run(runs_per_kind=5)
    levels = result["levels"]
    per_run = {level: {k: v["events_per_run"] for k, v in kinds.items()} for level, kinds in levels.items()}
    assert per_run["none"] == {"succeeded": 0, "dead": 0, "retried": 0}
    assert per_run["failures"] == {"succeeded": 0, "dead": 1, "retried": 0}
    # created, queued, started, then succeeded or dead; a retried run two more of each and retrying.
    assert per_run["all"] == {"succeeded": 4, "dead": 4, "retried": 10}
    dead = {level: kinds["dead"]["usd_per_million_runs"] for level, kinds in levels.items()}
    assert dead["none"] == 0 < dead["failures"] < dead["all"]
    assert "## 7. Run events, by `runEvents` level" in report.markdown(
        {"environment": SMOKE_ENVIRONMENT, "events": result}, None
    )


@pytest.mark.integration
def test_profile_smoke() -> None:
    """Every function's CPU lands in buckets that add up to it, and the report renders them."""
    from bench import profile, report

    result = profile.run(jobs=2, minutes=1, top=5)
    assert result["runs"] > 0
    assert set(result["functions"]) == set(profile.FUNCTIONS)
    for name, figures in result["functions"].items():
        assert figures["cpu_ms"] > 0, name
        assert abs(sum(g["ms"] for g in figures["groups"].values()) - figures["cpu_ms"]) < 1e-6
        assert 0 < len(figures["top"]) <= 5
    assert result["functions"]["worker"]["groups"]["moto"]["ms"] > 0
    results = {"environment": SMOKE_ENVIRONMENT, "profile": result}
    assert "## 8. Where the CPU goes" in report.markdown(results, None)
    assert "Lambda CPU ms per run, profiled" in report.terminal(results)


def test_cli_start_smoke() -> None:
    """Both commands start and are timed, and the report renders them."""
    from bench import cli, report

    result = cli.run(repeats=1)
    assert set(result["commands"]) == set(cli.COMMANDS)
    for figures in result["commands"].values():
        assert figures["wall_ms_median"] > 0 and figures["cpu_ms_median"] > 0
    results = {"environment": SMOKE_ENVIRONMENT, "cli": result}
    assert "## 9. The `jobsched` command's start" in report.markdown(results, None)


def test_local_start_smoke() -> None:
    """Local mode starts, answers, stops on Ctrl-C, and the report renders the figures."""
    from bench import local_start, report

    result = local_start.run(repeats=1)
    assert 0 < result["answer_s_median"] == result["answer_s_max"]
    assert result["stop_s_median"] > 0
    results = {"environment": SMOKE_ENVIRONMENT, "local_start": result}
    assert "## 10. Local mode's start (`make run`)" in report.markdown(results, None)
