"""domain.effects: may an attempt start the effect, replay a saved result, or must it wait?
Exhaustive over the record's states, the asking fence and the instant, including clocks off
true time by up to MAX_CLOCK_SKEW and every boundary of the deadline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from jobsched.domain.effects import (
    MAX_CLOCK_SKEW,
    RECORD_GRACE,
    EffectDecision,
    effect_verdict,
    excluded_until,
    record_deadline,
)
from jobsched.domain.runs import Run, RunState

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def run(**fields) -> Run:
    base = {
        "run_key": "j_x@2026-11-02T08:00:00Z",
        "job_id": "j_x",
        "tenant": "t",
        "job_type": "ok",
        "scheduled_for": T0,
        "due_at": T0,
        "state": RunState.LEASED,
        "fence": 2,
        "definition_version": 1,
        "created_at": T0,
        "updated_at": T0,
    }
    return Run.model_validate({**base, **fields})


offsets = st.integers(min_value=-3600, max_value=3600).map(lambda s: timedelta(seconds=s))
results = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.just({}), st.just([]), st.just("")
)


@given(
    record_fence=st.one_of(st.none(), st.integers(0, 5)),
    asking=st.integers(0, 5),
    until=st.one_of(st.none(), offsets),
    saved=st.booleans(),
    result=results,
    now=offsets,
)
def test_the_verdict_follows_the_record(record_fence, asking, until, saved, result, now):
    r = run(
        effect_fence=record_fence,
        effect_until=T0 + until if until is not None else None,
        saved_result=result if saved else None,
        result_saved_at=T0 if saved else None,
    )
    verdict = effect_verdict(r, asking, T0 + now)
    if saved:
        # A saved result is replayed, whoever asks and whenever: one effect per run.
        assert verdict.decision is EffectDecision.REPLAY and verdict.result == result
        return
    live_other = (
        record_fence is not None
        and record_fence != asking
        and until is not None
        and now < until + RECORD_GRACE
    )
    if live_other:
        assert verdict.decision is EffectDecision.WAIT
        assert verdict.until == T0 + until + RECORD_GRACE
    else:
        assert verdict.decision is EffectDecision.START


def test_no_clock_within_the_skew_starts_before_the_recorded_invocation_has_ended():
    """The deadline was written by one clock and is read by another, each at most
    MAX_CLOCK_SKEW off true time (whole seconds, as runs store them): exhaustively, no START
    comes before the real end of the invocation that wrote the record."""
    bound = int(MAX_CLOCK_SKEW.total_seconds())
    true_end = T0 + timedelta(seconds=100)
    for recorder_skew in range(-bound, bound + 1):
        r = run(effect_fence=1, effect_until=true_end + timedelta(seconds=recorder_skew))
        for asker_skew in range(-bound, bound + 1):
            for true_after in range(-20, 21):
                true_now = true_end + timedelta(seconds=true_after)
                asker_now = true_now + timedelta(seconds=asker_skew)
                if effect_verdict(r, 2, asker_now).decision is EffectDecision.START:
                    assert true_now >= true_end, (recorder_skew, asker_skew, true_after)


def test_the_boundaries_of_the_grace():
    r = run(effect_fence=1, effect_until=T0)
    assert effect_verdict(r, 2, T0 + RECORD_GRACE - timedelta(seconds=1)).decision is EffectDecision.WAIT
    assert effect_verdict(r, 2, T0 + RECORD_GRACE).decision is EffectDecision.START
    assert excluded_until(r) == T0 + RECORD_GRACE
    # Its own record never excludes the attempt that wrote it (a write retried).
    assert effect_verdict(run(effect_fence=2, effect_until=T0 + timedelta(hours=1)), 2, T0).decision is (
        EffectDecision.START
    )


@given(
    micros=st.integers(0, 999_999),
    remaining=st.floats(min_value=0, max_value=900, allow_nan=False),
    lifetime=st.floats(min_value=1, max_value=86_400, allow_nan=False),
)
def test_a_recorded_deadline_is_whole_and_never_before_the_real_end(micros, remaining, lifetime):
    now = T0 + timedelta(microseconds=micros)
    deadline = record_deadline(now, remaining, lifetime)
    real_end = now + timedelta(seconds=min(remaining, lifetime))
    assert deadline.microsecond == 0
    assert real_end <= deadline < real_end + timedelta(seconds=1)
