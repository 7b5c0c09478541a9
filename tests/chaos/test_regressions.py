"""Failure windows the chaos harness found, replayed deterministically on moto so each fix
stays in place."""

from __future__ import annotations

from collections import Counter

import pytest
from jobsched.domain.runs import RunState
from jobsched.services.worker import Received
from jobsched.targets import HandlerRegistry

from tests.helpers import make_worker

pytestmark = pytest.mark.integration

NOW = "2026-11-02T08:00:00Z"  # tests.helpers.T0


@pytest.fixture
def calls():
    return Counter()


def counting_worker(container, calls, name):
    registry = HandlerRegistry()

    @registry.register("ok")
    def ok(payload, invocation):
        calls[invocation.run_key] += 1
        return "done"

    return make_worker(container, registry, name)


def test_an_expired_lease_is_not_reclaimed_beyond_max_attempts(api, container, clock, calls, monkeypatch):
    job = api.post("/v1/jobs", {"name": "n", "type": "ok", "runAt": NOW, "maxAttempts": 1})
    job_id = job.body["jobId"]
    key = f"{job_id}@{NOW}"
    delivery = Received(key, job_id, NOW, "default")

    # Attempt 1 of 1: the worker claims, then dies before the effect (its message stays).
    first = counting_worker(container, calls, "w1")
    real_get = container.definitions.get
    monkeypatch.setattr(container.definitions, "get", lambda job_id: (_ for _ in ()).throw(ConnectionError()))
    with pytest.raises(ConnectionError):
        first.process(delivery)
    monkeypatch.setattr(container.definitions, "get", real_get)
    assert container.runs.get_by_key(key).attempt == 1

    # The lease expires; before the reconciler's next pass (lease + 30 s grace) a duplicate or
    # redelivered message reaches another worker.
    clock.advance(61)
    counting_worker(container, calls, "w2").process(delivery)

    run = container.runs.get_by_key(key)
    claims = [t.attempt for t in run.history if t.target is RunState.LEASED]
    assert max(claims) <= 1, f"claimed for attempts {claims} with maxAttempts 1"
    assert calls[key] == 0
    assert run.state is RunState.DEAD
