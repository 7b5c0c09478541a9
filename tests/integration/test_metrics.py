"""Every metric goes through the one port (jobsched.domain.metrics), and a pass of the sweeper,
outbox, worker and reconciler emits exactly the names, units and dimensions the stack's alarms
and dashboard read (functions/jobsched/cdk/monitoring.py). The names are the deployed contract: this table is
what they were before the port, so renaming one breaks this test, not an alarm in silence."""

from __future__ import annotations

import pytest
from jobsched.domain.metrics import RecordedMetrics, Unit
from jobsched.handlers import reconciler as reconciler_handler
from jobsched.handlers import sweeper as sweeper_handler
from jobsched.handlers import worker as worker_handler
from jobsched.services.outbox import Outbox, priority_router
from jobsched_local.lambda_context import InvocationContext

from tests.helpers import make_worker
from tests.integration.test_worker import Ledger, one_run, sqs_record
from tests.integration.test_worker import registry as registry  # the fixture

pytestmark = pytest.mark.integration

COUNT, SECONDS = Unit.COUNT, Unit.SECONDS
SWEEP = {
    ("JobsSwept", COUNT, ()),
    ("RunsMaterialised", COUNT, ()),
    ("OccurrencesSkipped", COUNT, ()),
    ("OccurrenceConflicts", COUNT, ()),
    ("SweepFailures", COUNT, ()),
    ("ShardCountBelowInUse", COUNT, ()),  # 0 unless shardCount was lowered: for its alarm
}
PUBLISH = {("RunsPublished", COUNT, ()), ("SchedulePublishLag", SECONDS, ())}
WORK = {
    ("StartLag", SECONDS, ("priority",)),
    ("RunDuration", SECONDS, ("priority",)),
    ("QueueDwell", SECONDS, ("priority",)),
    ("RunsSucceeded", COUNT, ()),
    ("RetriesScheduled", COUNT, ()),
    ("DuplicatesSuppressed", COUNT, ()),
}
REPAIR = {
    ("RepairsMade", COUNT, ("kind",)),
    ("RepairLatency", SECONDS, ()),
    ("RepairLag", SECONDS, ()),
    ("RunsPublished", COUNT, ()),  # the repair sends the run it repaired, as the outbox does
}


@pytest.fixture
def ledger():
    return Ledger()


def context(name: str) -> InvocationContext:
    return InvocationContext(function_name=f"jobsched-{name}", timeout_seconds=300)


def test_a_pass_of_every_function_emits_the_metrics_the_alarms_read(container, clock, registry):
    recorded: RecordedMetrics = container.metrics
    container.__dict__["worker"] = make_worker(container, registry)

    # Sweeper (through its handler).
    _, ok = one_run(container, clock, name="ok")
    _, failing = one_run(container, clock, job_type="down", name="down", maxAttempts=3)
    sweeper_handler.handler({}, context("sweeper"))
    assert recorded.shapes() == SWEEP
    assert recorded.values("SweepFailures") == [0.0]  # zeros too: a quiet sweep is a data point

    # Outbox: both runs are published, two seconds late.
    recorded.clear()
    clock.advance(2)
    # (The test registry is not the process-wide one the default router asks.)
    outbox = Outbox(container.runs, container.queues, clock, priority_router(lambda _: True), recorded)
    assert outbox.publish([ok, failing]) == []
    assert recorded.shapes() == PUBLISH
    assert recorded.total("RunsPublished") == 2 and recorded.values("SchedulePublishLag") == [2.0, 2.0]

    # Worker (through its handler): one succeeds, one is retried, a duplicate delivery is dropped.
    recorded.clear()
    records = [sqs_record(ok, "m1"), sqs_record(failing, "m2")]
    worker_handler.handler({"Records": records}, context("worker"))
    worker_handler.handler({"Records": [sqs_record(ok, "m3")]}, context("worker"))  # redelivered
    assert recorded.shapes() == WORK
    assert sorted(recorded.values("StartLag", priority="default")) == [2.0, 2.0]
    assert recorded.total("RunsSucceeded") == recorded.total("RetriesScheduled") == 1

    # Reconciler (through its handler): the retry's message is lost; the run is republished.
    recorded.clear()
    clock.advance(3600)
    reconciler_handler.handler({}, context("reconciler"))
    assert recorded.shapes() == REPAIR
    assert sum(recorded.total("RepairsMade", kind=k) for k in ("republish", "requeue")) >= 1
