"""The top-of-hour burst model's arithmetic against hand-computed cases (bench/capacity.py)."""

from __future__ import annotations

import pytest

from bench.capacity import (
    HOURS_PER_MONTH,
    BurstSettings,
    PollerPrice,
    invocation_seconds,
    lambda_environments,
    materialise,
    store_runs_per_second,
    top_of_hour,
)

# 40 ms waiting on calls and 10 ms of CPU per run; 10 ms of sweeper time per run made.
INPUTS = {
    "worker_wait_seconds_per_run": 0.04,
    "worker_cpu_seconds_per_run": 0.01,
    "sweep_seconds_per_run": 0.01,
    "worker_write_units_per_run": {"runs": 2.0, "gsi:open": 1.0},
}
PER_INVOCATION = 10 / 0.14  # runs/s of one busy invocation of ten records
STEADY = 100_000 / 60
# SQS provisioned mode: one poller an EPU, at least two pollers, per second with a one-minute minimum.
SQS_EPU = PollerPrice(0.00925, pollers_per_epu=1, minimum_billed_seconds=60, minimum_pollers=2)


def test_a_batch_waits_side_by_side_and_adds_up_its_cpu():
    assert invocation_seconds(INPUTS, 10) == pytest.approx(0.04 + 10 * 0.01)
    # At 1,769 MB the function has a whole vCPU: the CPU measured at 1,024 MB shrinks by 1769/1024.
    assert invocation_seconds(INPUTS, 10, 1769) == pytest.approx(0.04 + 10 * 0.01 * 1024 / 1769)


def test_the_store_binds_on_its_tightest_table_or_partition():
    # runs: 40,000 / 2 = 20,000; open index: quota 40,000 / 1, partitions 32 x 1,000 / 1 = 32,000.
    assert store_runs_per_second(INPUTS, BurstSettings("x", shards=32)) == (20_000, "runs: on-demand quota")
    assert store_runs_per_second(INPUTS, BurstSettings("x", shards=8, table_wru_per_s=10**6)) == (
        8_000,
        "gsi:open: partition per shard",
    )


def test_the_sweepers_make_what_their_ticks_before_the_hour_spare():
    # 32 invocations x 50 s / 10 ms = 160,000 runs a tick, 100,000 of them the steady load:
    # two ticks within a 120 s horizon make 120,000 of the burst; the rest come late.
    made = materialise(INPUTS, BurstSettings("x", shards=32, horizon_seconds=120), 1_000_000, 100_000)
    assert made["ticks_before"] == 2
    assert made["spare_runs_per_tick"] == pytest.approx(60_000)
    assert made["made_before"] == pytest.approx(120_000)
    assert made["made_late"] == pytest.approx(880_000)
    assert made["tick_seconds_at_burst"] == pytest.approx(50)  # the tick runs out of time
    early = materialise(INPUTS, BurstSettings("x", shards=32, horizon_seconds=3600), 1_000_000, 100_000)
    assert early["made_late"] == 0


def test_lambda_adds_a_thousand_environments_every_ten_seconds():
    assert lambda_environments(23, 0, 0.0) == 1023
    assert lambda_environments(23, 0, 9.99) == 1023
    assert lambda_environments(23, 0, 10.0) == 2023
    assert lambda_environments(23, 2000, 5.0) == 3000


def test_a_burst_bound_by_dynamodb_drains_at_its_rate_less_the_steady_load():
    settings = BurstSettings(
        "x", shards=64, horizon_seconds=3600, min_pollers=30, max_pollers=400, account_concurrency=5000
    )
    result = top_of_hour(INPUTS, settings, poller_price=SQS_EPU)
    # 990,000 runs at 20,000 - 1,666.7 runs/s.
    t = result["p99_dispatch_seconds"]
    assert t == pytest.approx(990_000 / (20_000 - STEADY), abs=0.1)
    assert result["binding"] == "DynamoDB (runs: on-demand quota)"
    assert result["concurrency_at_start"] == 300  # 30 pollers x 10 invocations
    assert not result["meets_goal"]
    # The pollers grow 1,000 invocations a minute from 300 while the burst lasts.
    assert result["peak_pollers"] == pytest.approx((300 + 1000 / 60 * t) / 10, abs=1)
    # 30 EPUs all month; the burst's extra EPUs for a minute (it lasts 54 s, less than the minimum) each hour.
    extra = result["peak_pollers"] - 30
    assert result["epu_hours_per_month"] == pytest.approx(
        30 * HOURS_PER_MONTH + extra * 60 / 3600 * HOURS_PER_MONTH
    )
    assert result["provisioned_usd_per_month"] == pytest.approx(result["epu_hours_per_month"] * 0.00925)


def test_a_burst_longer_than_a_minute_bills_its_extra_pollers_for_its_length():
    settings = BurstSettings(
        "x",
        shards=64,
        horizon_seconds=3600,
        min_pollers=30,
        max_pollers=400,
        account_concurrency=5000,
        table_wru_per_s=20_000,
    )
    result = top_of_hour(INPUTS, settings, poller_price=SQS_EPU)
    t = result["p99_dispatch_seconds"]
    assert t == pytest.approx(990_000 / (10_000 - STEADY), abs=0.1)  # ~119 s
    extra = result["peak_pollers"] - 30
    assert extra > 0
    assert result["epu_hours_per_month"] == pytest.approx(
        30 * HOURS_PER_MONTH + extra * t / 3600 * HOURS_PER_MONTH,
        rel=1e-4,  # t is reported to 0.1 s
    )


def test_pollers_are_billed_in_whole_event_poller_units():
    # Ten pollers an EPU (the Kafka granularity): 30 minimum pollers are 3 EPUs, the peak rounds up.
    settings = BurstSettings(
        "x", shards=64, horizon_seconds=3600, min_pollers=30, max_pollers=400, account_concurrency=5000
    )
    grouped = top_of_hour(
        INPUTS, settings, poller_price=PollerPrice(0.185, pollers_per_epu=10, minimum_pollers=1)
    )
    peak_epus = -(-grouped["peak_pollers"] // 10)
    assert grouped["epu_hours_per_month"] == pytest.approx(
        3 * HOURS_PER_MONTH + (peak_epus - 3) * 60 / 3600 * HOURS_PER_MONTH
    )


def test_an_sqs_mapping_bills_at_least_two_pollers_and_standard_mode_none():
    assert [SQS_EPU.epus(n) for n in (0, 1, 2, 30)] == [0, 2, 2, 30]
    assert [PollerPrice(pollers_per_epu=10, minimum_pollers=1).epus(n) for n in (0, 1, 10, 11)] == [
        0,
        1,
        1,
        2,
    ]
    one = BurstSettings(
        "x", shards=64, horizon_seconds=3600, min_pollers=1, max_pollers=2, account_concurrency=5000
    )
    result = top_of_hour(INPUTS, one, poller_price=SQS_EPU)
    assert result["epu_hours_per_month"] == pytest.approx(2 * HOURS_PER_MONTH)


def test_a_burst_bound_by_lambda_scaling_follows_its_ten_second_steps():
    settings = BurstSettings(
        "x",
        shards=256,
        horizon_seconds=3600,
        min_pollers=200,
        max_pollers=400,
        account_concurrency=5000,
        table_wru_per_s=10**7,
    )
    result = top_of_hour(INPUTS, settings)
    # 0-10 s: 1,023.3 environments (warm 23.3 + 1,000); after: 2,000 + 16.7/s pollers, 2,023.3 environments.
    warm = STEADY / PER_INVOCATION
    first = (warm + 1000) * PER_INVOCATION - STEADY
    second = min(2000 + 1000 / 60 * 10, warm + 2000) * PER_INVOCATION - STEADY
    expected = 10 + (990_000 - 10 * first) / second
    assert result["p99_dispatch_seconds"] == pytest.approx(expected, abs=0.15)
    assert result["binding"] == "worker concurrency"


def test_the_stack_defaults_are_bound_by_runs_made_after_the_hour():
    result = top_of_hour(INPUTS, BurstSettings("x"))
    assert result["binding"] == "runs made after :00 (sweeper)"
    assert result["provisioned_usd_per_month"] == 0
    # 880,000 made late at 60,000 a minute: the 99th percentile comes ~14 minutes after :00.
    assert result["p99_dispatch_seconds"] == pytest.approx((990_000 - 120_000) / (60_000 / 60), abs=1)


def test_the_first_burst_on_new_tables_is_held_to_their_warm_throughput():
    pytest.importorskip("aws_cdk")  # it reads the stack config (the 3.13 lane has no CDK)
    from jobsched.cdk.config import WARM_THROUGHPUT_BASE

    from bench.capacity import _BURST_1M, BURST_1M_CONTEXT, first_burst_store_runs_per_second

    # runs: 2 write units a run; a new table takes 4,000 at once, warm to its quota it takes 40,000.
    cold = BurstSettings("x", shards=32)
    assert cold.warm_wru_per_s == WARM_THROUGHPUT_BASE["write"]
    assert first_burst_store_runs_per_second(INPUTS, cold) == (2_000, "runs: warm throughput")
    assert first_burst_store_runs_per_second(INPUTS, _BURST_1M) == store_runs_per_second(INPUTS, _BURST_1M)
    # The preset's context sets what the model assumes, and the stack takes it.
    warm = BURST_1M_CONTEXT["warmThroughput"]
    assert isinstance(warm, dict)
    assert warm["write"] == warm["indexWrite"] == _BURST_1M.warm_wru_per_s
    import aws_cdk as cdk
    from jobsched.cdk.config import Config

    from infra.app import file_context

    config = Config.from_context(cdk.App(context={**file_context(), **BURST_1M_CONTEXT}).node)
    assert config.warm_throughput["write"] == config.warm_throughput["indexWrite"] == 40000
    assert (config.shard_count, config.horizon_seconds) == (_BURST_1M.shards, _BURST_1M.horizon_seconds)
