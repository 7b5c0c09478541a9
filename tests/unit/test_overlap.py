"""The overlap verdict: which earlier run holds an occurrence back, and until when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from jobsched.domain.effects import RECORD_GRACE
from jobsched.domain.models import HttpTarget, Overlap
from jobsched.domain.overlap import OverlapVerdict, effect_may_run, overlap_verdict
from jobsched.domain.runs import Run, RunState

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def run(state: RunState, **fields) -> Run:
    return Run(
        run_key="j_o@2026-12-01T12:00:00Z",
        job_id="j_o",
        tenant="t",
        job_type="x",
        scheduled_for=T0,
        due_at=T0,
        state=state,
        definition_version=1,
        target=HttpTarget(kind="http", url="https://hooks.example.com/"),
        created_at=T0,
        updated_at=T0,
        **fields,
    )


@pytest.mark.parametrize(
    ("state", "skip", "buffer"),
    [
        (RunState.PENDING, OverlapVerdict.SKIP, OverlapVerdict.SKIP),
        (RunState.QUEUED, OverlapVerdict.SKIP, OverlapVerdict.SKIP),
        (RunState.LEASED, OverlapVerdict.SKIP, OverlapVerdict.BUFFER),
        (RunState.RETRY_WAIT, OverlapVerdict.SKIP, OverlapVerdict.BUFFER),
        (RunState.SUCCEEDED, OverlapVerdict.RUN, OverlapVerdict.RUN),
        (RunState.DEAD, OverlapVerdict.RUN, OverlapVerdict.RUN),
        (RunState.CANCELLED, OverlapVerdict.RUN, OverlapVerdict.RUN),
    ],
)
def test_the_verdict_for_each_state_of_the_earlier_run(state, skip, buffer):
    earlier = run(state)
    assert overlap_verdict(Overlap.SKIP, earlier, T0) is skip
    assert overlap_verdict(Overlap.BUFFER_ONE, earlier, T0) is buffer
    assert overlap_verdict(Overlap.ALLOW, earlier, T0) is OverlapVerdict.RUN


@pytest.mark.parametrize("state", [RunState.DEAD, RunState.CANCELLED])
def test_an_ended_run_whose_effect_may_still_run_holds_the_next_until_its_record_ends(state):
    until = T0 + timedelta(seconds=300)
    earlier = run(state, fence=2, effect_fence=2, effect_until=until)
    end = until + RECORD_GRACE
    for now, executing in ((T0, True), (end - timedelta(seconds=1), True), (end, False)):
        assert effect_may_run(earlier, now) is executing
        assert overlap_verdict(Overlap.SKIP, earlier, now) is (
            OverlapVerdict.SKIP if executing else OverlapVerdict.RUN
        )
        expected = OverlapVerdict.BUFFER if executing else OverlapVerdict.RUN
        assert overlap_verdict(Overlap.BUFFER_ONE, earlier, now) is expected


def test_a_saved_result_means_the_effect_has_ended():
    earlier = run(
        RunState.DEAD, fence=2, effect_fence=2, effect_until=T0 + timedelta(seconds=300), result_saved_at=T0
    )
    assert not effect_may_run(earlier, T0)
    assert overlap_verdict(Overlap.SKIP, earlier, T0) is OverlapVerdict.RUN
