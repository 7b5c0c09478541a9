"""The outbox's stream filter: which Runs-table records reach the `outbox` Lambda."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobsched.domain.runs import Run, RunState, created
from jobsched.handlers.outbox import FILTER_PATTERNS, matches_filter
from jobsched.store.runs import RunStore

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STORE = RunStore(None, "jobsched-runs", 4)


def run(state: RunState = RunState.PENDING, **fields: Any) -> Run:
    if state is RunState.LEASED:
        fields.setdefault("lease_expires_at", T0 + timedelta(seconds=60))
    return created(
        Run(
            run_key="j_f1@2026-11-02T08:00:00Z",
            job_id="j_f1",
            tenant="tenant-a",
            job_type="report.build",
            scheduled_for=T0,
            due_at=T0,
            state=state,
            definition_version=1,
            created_at=T0,
            updated_at=T0,
            **fields,
        ),
        actor="sweeper",
    )


def record(
    event_name: str, new_image: dict[str, Any] | None, old_image: dict[str, Any] | None = None
) -> dict:
    dynamodb: dict[str, Any] = {
        "Keys": {"job_id": {"S": "j_f1"}, "sk": {"S": "R#2026-11-02T08:00:00Z"}},
        "SequenceNumber": "1",
        "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
        "ApproximateCreationDateTime": 1793606400,
    }
    if new_image is not None:
        dynamodb["NewImage"] = new_image
    if old_image is not None:
        dynamodb["OldImage"] = old_image
    return {
        "eventID": "e1",
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": dynamodb,
    }


TRANSITION_ITEM = {
    "job_id": {"S": "j_f1"},
    "sk": {"S": "T#2026-11-02T08:00:00Z#0001"},
    "state": {"S": "PENDING"},
}

CASES = [
    ("insert pending", record("INSERT", STORE.to_item(run())), True),
    ("insert retry wait", record("INSERT", STORE.to_item(run(RunState.RETRY_WAIT))), True),
    ("modify to pending", record("MODIFY", STORE.to_item(run()), STORE.to_item(run(RunState.QUEUED))), True),
    ("modify queued", record("MODIFY", STORE.to_item(run(RunState.QUEUED)), STORE.to_item(run())), False),
    ("modify leased", record("MODIFY", STORE.to_item(run(RunState.LEASED)), STORE.to_item(run())), False),
    ("remove", record("REMOVE", None, STORE.to_item(run())), False),
    ("transition item", record("INSERT", TRANSITION_ITEM), False),
    ("blocked", record("INSERT", STORE.to_item(run(blocked_by="j_f1@2026-11-02T07:00:00Z"))), False),
    ("succeeded", record("MODIFY", STORE.to_item(run(RunState.SUCCEEDED)), STORE.to_item(run())), False),
]


@pytest.mark.parametrize(("name", "sample", "expected"), CASES, ids=[c[0] for c in CASES])
def test_matches_filter(name, sample, expected):
    assert matches_filter(sample) is expected


@pytest.mark.parametrize(("name", "sample", "expected"), CASES, ids=[c[0] for c in CASES])
def test_patterns_agree_with_an_independent_event_pattern_engine(name, sample, expected):
    """moto's EventBridge pattern matcher, fed the same patterns, decides every sample the same way."""
    from moto.events.models import EventPattern, EventPatternParser

    engines = [
        EventPattern(json.dumps(p), EventPatternParser(json.dumps(p)).parse()) for p in FILTER_PATTERNS
    ]
    assert any(engine.matches_event(sample) for engine in engines) is expected


def test_patterns_are_valid_filter_criteria():
    for pattern in FILTER_PATTERNS:
        text = json.dumps(pattern)
        assert len(text) <= 4096  # the FilterCriteria pattern limit
        # Lambda filters DynamoDB records only on the dynamodb key and record metadata.
        assert set(pattern) <= {"eventName", "dynamodb"}
