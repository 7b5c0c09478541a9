"""Jitter derived from the run key: same key, same answer; spread evenly across keys."""

from __future__ import annotations

import math
import string
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.jitter import retry_delay_seconds, start_jitter_seconds

KEY = "job-1@2026-01-01T00:00:00Z"
# A fixed alphabet avoids building Hypothesis' unicode tables (seconds of start-up).
keys = st.text(alphabet=string.printable + "éß€日本😀", max_size=80)


def test_golden_values_stay_stable() -> None:
    # Runs in flight across a deploy must keep their delays: pin the derivation.
    assert start_jitter_seconds(KEY, 60) == 53
    assert start_jitter_seconds(KEY, 3600) == 2635
    assert retry_delay_seconds(KEY, 0, 2.0, 300.0) == pytest.approx(1.388098473804066, rel=1e-12)
    assert retry_delay_seconds(KEY, 5, 2.0, 300.0) == pytest.approx(29.326206347779323, rel=1e-12)


@settings(max_examples=150, deadline=None)
@given(keys, st.integers(0, 3600))
def test_start_jitter_deterministic_and_in_range(run_key: str, max_seconds: int) -> None:
    value = start_jitter_seconds(run_key, max_seconds)
    assert value == start_jitter_seconds(run_key, max_seconds)
    assert isinstance(value, int)
    assert 0 <= value <= max_seconds


def test_start_jitter_zero_and_negative() -> None:
    assert start_jitter_seconds(KEY, 0) == 0
    with pytest.raises(ValueError):
        start_jitter_seconds(KEY, -1)


def test_start_jitter_is_roughly_uniform() -> None:
    buckets = Counter(start_jitter_seconds(f"job-{i}@2026-01-01T00:00:00Z", 9) for i in range(20_000))
    assert set(buckets) == set(range(10))  # both ends reachable
    # Expected 2000 per bucket, standard deviation about 42: 10% is a very loose bound.
    assert all(1800 <= n <= 2200 for n in buckets.values()), buckets


@settings(max_examples=150, deadline=None)
@given(
    keys,
    st.integers(0, 10_000),
    st.floats(0.001, 3600, allow_nan=False),
    st.floats(0.001, 86400, allow_nan=False),
)
def test_retry_delay_deterministic_and_bounded(run_key: str, attempt: int, base: float, cap: float) -> None:
    value = retry_delay_seconds(run_key, attempt, base, cap)
    assert value == retry_delay_seconds(run_key, attempt, base, cap)
    bound = cap if attempt > 64 else min(cap, base * 2**attempt)
    assert 0.0 <= value <= bound
    assert math.isfinite(value)


def test_retry_delay_depends_on_attempt() -> None:
    values = {retry_delay_seconds(KEY, attempt, 1000.0, 1000.0) for attempt in range(20)}
    assert len(values) == 20  # bound is the cap for all, so only the hash varies


def test_retry_delay_bound_grows_then_caps() -> None:
    run_keys = [f"job-{i}@2026-01-01T00:00:00Z" for i in range(2000)]
    for attempt, bound in [(0, 2.0), (1, 4.0), (3, 16.0), (6, 128.0), (7, 256.0), (8, 300.0), (40, 300.0)]:
        delays = [retry_delay_seconds(k, attempt, 2.0, 300.0) for k in run_keys]
        assert max(delays) <= bound
        # Full jitter spreads over the whole range: near both ends and a mean near half.
        assert max(delays) > 0.99 * bound
        assert min(delays) < 0.01 * bound
        assert abs(sum(delays) / len(delays) - bound / 2) < 0.05 * bound


def test_retry_delay_huge_attempt_does_not_overflow() -> None:
    for attempt in (1023, 1024, 1025, 10**6, 10**100):
        value = retry_delay_seconds(KEY, attempt, 2.0, 300.0)
        assert 0.0 <= value <= 300.0
    # A tiny base still reaches the cap eventually.
    assert 0.0 <= retry_delay_seconds(KEY, 2000, 1e-300, 300.0) <= 300.0


def test_retry_delay_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        retry_delay_seconds(KEY, -1, 2.0, 300.0)
    with pytest.raises(ValueError):
        retry_delay_seconds(KEY, 0, -2.0, 300.0)
    assert retry_delay_seconds(KEY, 3, 2.0, 0.0) == 0.0
