"""The definition a run runs with: its own target and payload, or its job's as of the version
it references (domain.runs.Run.definition_since)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from ..domain.errors import DefinitionMissing
from ..domain.models import MAX_RETRY_AGE_SECONDS, Job, Target
from ..domain.runs import Run
from ..store.definitions import DefinitionStore

# Snapshots kept per process: (job id, version) -> (target, payload). A definition of one
# version never changes, so a copy read once stays right; this bounds the memory it takes.
_CACHE_LIMIT = 1024

# A superseded definition is kept this much longer than a finished run: the longest a run
# made before the change can stay open after it when its `retry.maxAgeSeconds` is set (at
# most MAX_RETRY_AGE_SECONDS), plus a day for the runs made ahead, jitter and the last
# attempt's timeout.
SUPERSEDED_MARGIN = timedelta(seconds=MAX_RETRY_AGE_SECONDS) + timedelta(days=1)


def superseded_definition_expiry(superseded_at: datetime, run_retention: timedelta) -> datetime:
    """When the snapshot of a definition an update replaced at `superseded_at` expires (the
    table's TTL deletes it after that; DefinitionStore.save_definition), for runs kept
    `run_retention` after they finish (RunStore.retention): `superseded_at + run_retention
    + SUPERSEDED_MARGIN`.

    A run made from it that ends within SUPERSEDED_MARGIN of the change (every run with a
    `maxAgeSeconds`, unless a pause holds it or a redrive reopens it) runs with it and is
    deleted before it, so its detail shows it to the end. Only a run still open later (its
    job paused, or no `maxAgeSeconds`), and a DEAD run (kept until redriven or discarded)
    read or redriven later, find it gone: `resolve` raises DefinitionMissing for them (an
    attempt ends the run DEAD `DefinitionMissing`; a redrive must replace both its target
    and payload; its detail says the definition is no longer available)."""
    return superseded_at + run_retention + SUPERSEDED_MARGIN


def ended_job_expiry(ended_at: datetime, run_retention: timedelta) -> datetime:
    """When the item of a job that ended at `ended_at` (cancelled then, or completed with its
    last run made for then or later) expires, for runs kept `run_retention` after they
    finish: `ended_at + run_retention + SUPERSEDED_MARGIN`, the rule of a superseded
    definition (superseded_definition_expiry) for the same reason. Its runs' definition is
    the job's own, so it is kept while they may read it; a run still open or DEAD after that
    finds the job gone (DefinitionMissing, as for a superseded definition). Nothing about the
    job outlives that: its counters and signing secrets expire with it
    (DefinitionStore.save)."""
    return superseded_definition_expiry(ended_at, run_retention)


class DefinitionResolver:
    """Resolves the target and payload of runs that reference their job's definition; the one
    place every reader of those values (the worker's effect, the lease API, the run views, a
    redrive's fix) goes through."""

    def __init__(self, store: DefinitionStore) -> None:
        self._store = store
        self._snapshots: dict[tuple[str, int], tuple[Target | None, Any]] = {}

    def resolve(self, run: Run, job: Job | None = None) -> tuple[Target | None, Any]:
        """(target, payload) that `run` runs with.

        - A run with its own definition (`definition_since` None: made before jobs had one,
          or fixed by a redrive): its own `target` and `payload`, nothing read.
        - Otherwise the job's definition from version `run.definition_since`: the job's own
          when its `definition_since` is that version (`job`, the job as the caller just read
          it, strongly consistent; read here when not given), nothing else read.
        - A job stored without `definition_since` (rewritten by an earlier release during a
          deploy) still at the run's `definition_version`: its own (unchanged since).
        - Else the snapshot the update that replaced it stored (DefinitionStore.
          save_definition) by `since`, or by the run's `definition_version` (kept when a job
          whose `since` was unknown changed its definition), read consistently once per
          process.

        The job is read before the snapshot: an update stores the snapshot before it writes
        the job, so a job found past that version means the snapshot is there to read.
        Raises DefinitionMissing when neither holds it (the job is gone, or the snapshot
        expired, superseded_definition_expiry, or was lost): the run must not run with an
        unresolved definition. Raises StorageUnavailable when a read is refused."""
        since = run.definition_since
        if since is None:
            return run.target, run.payload
        if job is None:
            job = self._store.get(run.job_id)
        if job is not None and job.definition_since == since:
            return job.spec.target, job.spec.payload
        if job is not None and job.definition_since is None and job.version == run.definition_version:
            # Rewritten by an earlier release, which drops the attribute, but not changed
            # since the run was made from it: every change makes a new version.
            return job.spec.target, job.spec.payload
        for version in dict.fromkeys((since, run.definition_version)):
            # By `since`; or by the run's own version, where a change of a job whose `since`
            # was unknown kept the definition it replaced (services.jobs).
            found = self._snapshot(run.job_id, version)
            if found is not None:
                return found
        raise DefinitionMissing(
            f"the definition of job {run.job_id} from version {since}, which run"
            f" {run.run_key} was made from, is stored neither with the job nor as a snapshot"
        )

    def _snapshot(self, job_id: str, version: int) -> tuple[Target | None, Any] | None:
        """The kept definition, from this process's cache or read; each caller gets a payload
        of its own (a handler that changes its payload in place changes no later run's)."""
        key = (job_id, version)
        found = self._snapshots.get(key)
        if found is None:
            found = self._store.definition(job_id, version)
            if found is None:
                return None
            if len(self._snapshots) >= _CACHE_LIMIT:
                self._snapshots.clear()
            self._snapshots[key] = found
        target, payload = found
        return target, copy.deepcopy(payload)

    def resolved(self, run: Run, job: Job | None = None) -> Run:
        """`run` holding the target and payload it runs with in memory (`resolve`); the
        store still writes it referencing its job's definition. Raises as `resolve`."""
        if run.definition_since is None:
            return run
        return run.with_definition(*self.resolve(run, job))
