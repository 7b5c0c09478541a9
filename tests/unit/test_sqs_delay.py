"""The outbox's SQS delay: whole seconds, so a message becomes visible at most a quarter of a
second before its run is due (the worker waits that out) and less than a second after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from jobsched.services.outbox import EARLY_VISIBILITY, sqs_delay

DUE = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


@given(ahead=st.floats(min_value=EARLY_VISIBILITY, max_value=900, allow_nan=False))
def test_visible_within_a_window_around_the_due_instant(ahead):
    now = DUE - timedelta(seconds=ahead)
    delay = sqs_delay(DUE, now)
    assert isinstance(delay, int) and delay >= 0
    visible = (now + timedelta(seconds=delay) - DUE).total_seconds()
    assert -EARLY_VISIBILITY - 1e-6 <= visible < 1 - EARLY_VISIBILITY + 1e-6


@given(late=st.floats(min_value=-EARLY_VISIBILITY, max_value=3600, allow_nan=False))
def test_due_now_or_past_is_sent_without_delay(late):
    assert sqs_delay(DUE, DUE + timedelta(seconds=late)) == 0


def test_examples():
    assert sqs_delay(DUE, DUE - timedelta(seconds=1.2)) == 1  # visible 0.2 s early
    assert sqs_delay(DUE, DUE - timedelta(seconds=1.3)) == 2  # visible 0.7 s late
    assert sqs_delay(DUE, DUE - timedelta(seconds=60)) == 60
