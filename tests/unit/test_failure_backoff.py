"""The backoff a failed worker record's message gets, and the arithmetic that bounds how long a
record that keeps failing takes to reach its DLQ (functions/jobsched/cdk/dead_letters.py)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobsched.cdk.dead_letters import (
    DEAD_LETTER_WITHIN_SECONDS,
    check_dead_letter_arithmetic,
    seconds_to_dead_letter,
)
from jobsched.services.worker import FAILURE_BACKOFF_CAP_SECONDS, failure_backoff_seconds
from jobsched.store.schema import QUEUES


@given(st.text(min_size=1, max_size=80), st.integers(min_value=1, max_value=10_000))
def test_each_wait_is_in_the_upper_half_of_its_bound(message_id, receive_count):
    bound = min(FAILURE_BACKOFF_CAP_SECONDS, 10 * 2 ** min(receive_count - 1, 30))
    assert bound / 2 <= failure_backoff_seconds(message_id, receive_count) <= bound


def test_waits_grow_with_the_receive_count_and_stop_at_the_cap():
    firsts = [failure_backoff_seconds("m", n) for n in (1, 2, 3)]
    assert 5 <= firsts[0] <= 10 and 10 <= firsts[1] <= 20 and 20 <= firsts[2] <= 40
    assert max(failure_backoff_seconds(f"m{i}", 10) for i in range(200)) <= FAILURE_BACKOFF_CAP_SECONDS


def test_messages_that_failed_together_come_back_spread_out():
    assert len({failure_backoff_seconds(f"m{i}", 4) for i in range(50)}) > 10


def test_a_receive_count_below_one_is_refused():
    with pytest.raises(ValueError, match="receive_count"):
        failure_backoff_seconds("m", 0)


@pytest.mark.parametrize("spec", QUEUES, ids=[q.key for q in QUEUES])
def test_every_queue_dead_letters_a_failing_record_within_15_minutes(spec):
    assert seconds_to_dead_letter(spec) <= DEAD_LETTER_WITHIN_SECONDS
    check_dead_letter_arithmetic(spec)


def test_a_queue_whose_receives_cannot_fit_15_minutes_is_refused():
    spec = dataclasses.replace(QUEUES[0], failure_receives=20)
    with pytest.raises(ValueError, match="before the DLQ"):
        check_dead_letter_arithmetic(spec)
