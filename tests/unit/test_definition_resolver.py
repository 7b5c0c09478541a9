"""The resolver's snapshot cache hands each caller a payload of its own: a Python handler that
changes its payload in place must not change what a later run of that version gets."""

from __future__ import annotations

from datetime import UTC, datetime

from jobsched.domain.models import Job, JobSpec, Schedule, ScheduleKind
from jobsched.domain.runs import make_run
from jobsched.services.definitions import DefinitionResolver

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


class KeptDefinitions:
    """The two reads the resolver makes: the job, and a kept definition."""

    def __init__(self, job: Job, kept: dict) -> None:
        self.job, self.kept, self.reads = job, kept, 0

    def get(self, job_id: str) -> Job:
        return self.job

    def definition(self, job_id: str, version: int):
        self.reads += 1
        return None, self.kept


def test_a_cached_payload_is_a_copy_for_each_run():
    spec = JobSpec(
        name="n", type="t", payload={"rows": [1]}, schedule=Schedule(kind=ScheduleKind.RATE, every_seconds=60)
    )
    made = Job(job_id="j_a", tenant="t", spec=spec, created_at=T0, updated_at=T0, definition_since=1)
    run = make_run(made, T0, now=T0, actor="sweeper").with_definition(None, None)
    changed = made.model_copy(update={"version": 2, "definition_since": 2})
    store = KeptDefinitions(changed, {"rows": [1]})
    resolver = DefinitionResolver(store)  # type: ignore[arg-type]
    _, first = resolver.resolve(run)
    first["rows"].append(2)  # a handler changing its payload in place
    _, second = resolver.resolve(run)
    assert second == {"rows": [1]} and store.reads == 1  # cached, and not the changed one
