"""`jobsched tail`: new run transitions found by polling the API."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from jobsched.client import ApiError, Client

from .rendering import wire

OPEN_RUN_STATES = frozenset({"PENDING", "QUEUED", "LEASED", "RETRY_WAIT"})


class RunFollower:
    """Finds new run transitions by polling: the runs of each job (newest first, down to
    `lookback` before now), and the full history of any run whose state moved.

    Runs not yet due are left alone until they are (materialised ahead by the sweeper, they
    would otherwise flood the output long before anything happens to them); once due, a run
    is reported from its scheduled time on, so its earlier bookkeeping (PENDING, QUEUED ahead
    of time) never appears late and out of order. With `history`, the first poll reports the
    transitions of the last `lookback` seconds; without, it only takes note of where runs are."""

    def __init__(
        self,
        client: Client,
        job_ids: list[str],
        lookback: float,
        now: Callable[[], datetime],
        *,
        history: bool = False,
    ):
        self.client = client
        self.fixed = list(job_ids)
        self.lookback = timedelta(seconds=lookback)
        self.now = now
        self.history = history
        self.names: dict[str, str] = {}
        self.signatures: dict[str, tuple[Any, ...]] = {}
        self.reported: dict[str, int] = {}  # run key -> transitions already reported
        self.baseline: dict[str, dict[str, Any]] = {}  # runs first seen before tail started
        self.tracked: dict[str, str] = {}  # open runs older than the lookback: run key -> job id
        self.started = False

    def _jobs(self) -> list[str]:
        if self.fixed:
            for job_id in self.fixed:
                if job_id not in self.names:
                    self.names[job_id] = self.client.get_job(job_id).name
            return self.fixed
        ids = []
        for job in self.client.iter_jobs():
            self.names[job.job_id] = job.name
            ids.append(job.job_id)
        return ids

    def _recent_runs(self, job_id: str, horizon: str, floor: str) -> Iterable[dict[str, Any]]:
        """The job's runs (in their wire form) scheduled from `floor` to `horizon`, newest first."""
        cursor = None
        while True:
            page = self.client.list_runs(job_id, limit=100, cursor=cursor)
            for run in map(wire, page.items):
                if run["scheduledFor"] < floor:
                    return
                if run["scheduledFor"] <= horizon:
                    yield run
            cursor = page.next_cursor
            if not cursor:
                return

    def poll(self) -> list[dict[str, Any]]:
        """One round; returns the new transitions, oldest first, as tail events."""
        now = self.now()
        horizon = _iso(now)
        floor = _iso(now - self.lookback)
        seen: dict[str, dict[str, Any]] = {}
        for job_id in self._jobs():
            for run in self._recent_runs(job_id, horizon, floor):
                seen[run["runKey"]] = run
        for run_key in [k for k in self.tracked if k not in seen]:
            try:
                seen[run_key] = wire(self.client.get_run(run_key))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                del self.tracked[run_key]  # expired (TTL) or its job is gone
        events: list[dict[str, Any]] = []
        for run_key, run in seen.items():
            signature = (run.get("state"), run.get("attempt"), run.get("redrives"), run.get("updatedAt"))
            if self.signatures.get(run_key) == signature:
                continue
            self.signatures[run_key] = signature
            if run.get("state") in OPEN_RUN_STATES:
                self.tracked[run_key] = run["jobId"]
            else:
                self.tracked.pop(run_key, None)
            if not self.started and not self.history:
                self.baseline[run_key] = run
                continue
            events += self._new_transitions(run_key, run, since=floor if not self.started else None)
        self.started = True
        events.sort(key=lambda e: (e["at"] or "", e["runKey"]))
        return events

    def _new_transitions(
        self, run_key: str, run: dict[str, Any], since: str | None = None
    ) -> list[dict[str, Any]]:
        detail = run if "transitions" in run else wire(self.client.get_run(run_key))
        transitions = detail.get("transitions") or []
        if run_key in self.reported:
            start = self.reported[run_key]
        elif run_key in self.baseline:
            start = _after_baseline(transitions, self.baseline.pop(run_key))
        else:
            # First seen now that it is due: what happened before it was (or before the
            # history window) is no news.
            floor = max(since or "", str(run.get("scheduledFor") or ""))
            start = next(
                (i for i, t in enumerate(transitions) if (t.get("at") or "") >= floor), len(transitions)
            )
        self.reported[run_key] = len(transitions)
        job_id = detail.get("jobId") or run.get("jobId")
        return [
            {
                "at": t.get("at"),
                "jobId": job_id,
                "jobName": self.names.get(job_id or "", job_id),
                "runKey": run_key,
                "from": t.get("from"),
                "to": t.get("to"),
                "attempt": t.get("attempt"),
                "errorClass": t.get("errorClass"),
                "actor": t.get("actor"),
            }
            for t in transitions[start:]
        ]


def _after_baseline(transitions: list[dict[str, Any]], seen: dict[str, Any]) -> int:
    """Index of the first transition after the state the run was in when tail started."""
    for index in range(len(transitions) - 1, -1, -1):
        t = transitions[index]
        same = t.get("to") == seen.get("state") and t.get("attempt") == seen.get("attempt")
        if same and (t.get("at") or "") <= (seen.get("updatedAt") or ""):
            return index + 1
    return sum(1 for t in transitions if (t.get("at") or "") <= (seen.get("updatedAt") or ""))


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
