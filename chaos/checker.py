"""What a chaos run is judged on. The inputs are independent of the code under test where
possible: the effect ledger (what handlers did), the Runs table stream (every write, with
old and new image), the schedule math over the window, and the harness's own record of
when each pause, resume and cancel was acknowledged."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobsched.domain.models import DeliveryGuarantee, Job, JobState, ScheduleKind
from jobsched.domain.runs import OPEN_STATES, PAUSED_HOLD, TERMINAL_STATES, Run, RunState, Transition
from jobsched.domain.schedule import fires_between
from jobsched.store.runs import RunStore

from .ledger import PERMANENT, Call, Ledger

ONE_SECOND = timedelta(seconds=1)
CLOCK_SKEW = timedelta(seconds=3)  # the most a component's clock is off true time (harness)
HOLDERS = ("worker:", "lease:")  # actors that write under a lease they claimed
MUST_BE_ZERO = (
    "lost",
    "phantom_runs",
    "duplicate_effects",
    "stale_fence_writes",
    "attempts_over_policy",
    "effects_after_pause",
    "unbounded_open",
    "oversize_items",
)
# What AWS does that moto does not, injected (see faults.DynamoFaults, harness): each its own
# figure, so a run shows that the fault really happened.
FAULT_FIGURES = (
    "stale_due_reads",
    "stale_open_reads",
    "stale_claimable_reads",
    "stale_tenant_reads",
    "write_timeouts_raised",
    "write_timeouts_replayed",
    "killed_invocations",
    "throttled_invocations",
    "stream_batches_redelivered",
    "stream_lane_lagged",
    "loop_drops",
    "hot_key_bursts",
    "hot_key_throttles",
    "hog_attempts",
)


AFTER = {"pause": JobState.PAUSED, "resume": JobState.ACTIVE, "cancel": JobState.CANCELLED}


@dataclass(frozen=True)
class Violation:
    figure: str
    run_key: str
    detail: str


@dataclass(frozen=True)
class Ack:
    """A job change the API acknowledged: `seq` orders it against handler calls."""

    kind: str  # pause | resume | cancel
    seq: int
    at: datetime


def _holder_violations(
    history: list[Transition], holder: tuple[int, str] | None, last_fence: int
) -> list[str]:
    """Every write a worker makes from LEASED must carry the fence of the latest claim. Another
    worker may end an expired lease under that fence (as the reconciler does), never succeed it."""
    problems: list[str] = []
    for entry in history:
        if entry.fence < last_fence:
            problems.append(f"fence went back from {last_fence} to {entry.fence} ({entry.actor})")
        last_fence = max(last_fence, entry.fence)
        if entry.target is RunState.LEASED:
            holder = (entry.fence, entry.actor)
            continue
        if entry.source is RunState.LEASED and entry.actor.startswith(HOLDERS):
            if holder is None or entry.fence != holder[0]:
                problems.append(
                    f"{entry.actor} wrote {entry.target.value} with fence {entry.fence}"
                    f" while {holder[1] if holder else 'nobody'} held fence {holder[0] if holder else '-'}"
                )
            elif entry.actor != holder[1] and entry.target is RunState.SUCCEEDED:
                problems.append(f"{entry.actor} completed a run leased to {holder[1]} (fence {entry.fence})")
        if entry.source is RunState.LEASED:
            holder = None
    return problems


def _checkable(run: Run) -> list[Transition]:
    """The history the final fence check can follow. Where compaction left a gap, the holder
    before it is unknown: follow from the first claim after the gap (the stream audit saw every
    write, the dropped entries included, as it happened)."""
    if not run.history_dropped:
        return run.history
    for index, entry in enumerate(run.history[1:], start=1):
        if entry.target is RunState.LEASED:
            return run.history[index:]
    return []


def _holder_of(run: Run) -> tuple[int, str] | None:
    for entry in reversed(run.history):
        if entry.target is RunState.LEASED:
            return (entry.fence, entry.actor) if run.state is RunState.LEASED else None
    return None


class StreamAudit:
    """Watches every write to the Runs table through its stream (old and new image)."""

    def __init__(self) -> None:
        self.latest: dict[str, Run] = {}
        self.violations: list[Violation] = []
        self.records = 0

    def observe(self, record: dict[str, Any]) -> None:
        dynamodb = record.get("dynamodb") or {}
        new_image = dynamodb.get("NewImage")
        if not new_image or not str(new_image.get("sk", {}).get("S", "")).startswith("R#"):
            return
        self.records += 1
        new = RunStore.from_item(new_image)
        old_image = dynamodb.get("OldImage")
        old: Run | None = None
        if old_image:
            cached = self.latest.get(new.run_key)
            old_rev = int(old_image.get("rev", {}).get("N", "-1"))
            old = cached if cached is not None and cached.rev == old_rev else RunStore.from_item(old_image)
        self.latest[new.run_key] = new
        if old is None:
            return
        if new.fence < old.fence:
            self._flag(new, f"fence went back from {old.fence} to {new.fence}")
        # Compaction (lifecycle.fit) drops the oldest entries after the creation and counts
        # them; everything else the old image held must still be there, in order.
        dropped = new.history_dropped - old.history_dropped
        if dropped < 0:
            self._flag(new, f"dropped-history count went back (rev {old.rev} -> {new.rev})")
            return
        kept = [*old.history[:1], *old.history[1 + dropped :]] if dropped else old.history
        if new.history[: len(kept)] != kept:
            self._flag(new, f"history rewritten (rev {old.rev} -> {new.rev})")
            return
        added = new.history[len(kept) :]
        for problem in _holder_violations(added, _holder_of(old), old.fence):
            self._flag(new, problem)

    def _flag(self, run: Run, detail: str) -> None:
        self.violations.append(Violation("stale_fence_writes", run.run_key, detail))

    def open_runs(self) -> list[Run]:
        return [run for run in self.latest.values() if run.state in OPEN_STATES]


@dataclass
class TrackedJob:
    job_id: str
    tenant: str
    acks: list[Ack] = field(default_factory=list)

    def active_at(self, instant: datetime) -> bool:
        state = JobState.ACTIVE
        for ack in sorted(self.acks, key=lambda a: a.seq):
            if ack.at > instant:
                break
            state = AFTER[ack.kind]
        return state is JobState.ACTIVE

    def stopped_at_seq(self, seq: int) -> bool:
        """Whether a pause or cancel had been acknowledged, and not undone, before `seq`."""
        stopped = False
        for ack in sorted(self.acks, key=lambda a: a.seq):
            if ack.seq > seq:
                break
            stopped = ack.kind != "resume"
        return stopped


@dataclass
class Figures:
    seed: int
    due: int = 0
    runs: int = 0
    skipped_records: int = 0
    terminal: int = 0
    lost: int = 0
    phantom_runs: int = 0
    duplicate_effects: int = 0
    stale_fence_writes: int = 0
    attempts_over_policy: int = 0
    effects_after_pause: int = 0
    unbounded_open: int = 0
    oversize_items: int = 0  # writes refused at DynamoDB's 400 KB item limit
    max_item_bytes: int = 0  # the largest item written (Runs and Definitions)
    faults: dict[str, int] = field(default_factory=dict)  # FAULT_FIGURES
    duplicates_suppressed: int = 0
    stale_fences_rejected: int = 0
    repairs: int = 0
    repair_latency_p99: float = 0.0
    # An effect repeated after an invocation died between it and its completion, and after
    # that invocation's deadline: at-least-once, allowed (and counted so it shows).
    effects_repeated_after_deadline: int = 0
    violations: list[Violation] = field(default_factory=list)

    def failed(self) -> bool:
        return any(getattr(self, name) for name in MUST_BE_ZERO)

    def line(self) -> str:
        return (
            f"seed={self.seed} due={self.due} runs={self.runs} terminal={self.terminal}"
            f" skipped_records={self.skipped_records} lost={self.lost} phantom_runs={self.phantom_runs}"
            f" duplicate_effects={self.duplicate_effects} stale_fence_writes={self.stale_fence_writes}"
            f" attempts_over_policy={self.attempts_over_policy}"
            f" effects_after_pause={self.effects_after_pause}"
            f" unbounded_open={self.unbounded_open} duplicates_suppressed={self.duplicates_suppressed}"
            f" stale_fences_rejected={self.stale_fences_rejected} repairs={self.repairs}"
            f" effects_repeated_after_deadline={self.effects_repeated_after_deadline}"
            f" repair_latency_p99={self.repair_latency_p99:.0f}s"
            f" oversize_items={self.oversize_items} max_item_bytes={self.max_item_bytes}"
            + "".join(f" {name}={self.faults.get(name, 0)}" for name in FAULT_FIGURES)
        )


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


@dataclass
class Evidence:
    """Everything the checker reads at the end of a run."""

    seed: int
    window_end: datetime
    end: datetime  # true time when the run stopped
    jobs: dict[str, TrackedJob]
    stored_jobs: dict[str, Job]
    runs: list[Run]
    ledger: Ledger
    audit: StreamAudit
    redrives: dict[str, list[int]]  # run key -> seq of each acknowledged redrive
    duplicates_suppressed: int
    stale_fences_rejected: int
    repairs: int
    oversize: list[str] = field(default_factory=list)  # writes refused at the item size limit
    max_item_bytes: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    # Run key -> the invocation deadline of each attempt that died after a successful effect,
    # before its completion (by that worker's clock, within CLOCK_SKEW of true time).
    unrecorded: dict[str, list[datetime | None]] = field(default_factory=dict)


def check(evidence: Evidence) -> Figures:
    figures = Figures(seed=evidence.seed)
    flag = figures.violations.append
    runs = {run.run_key: run for run in evidence.runs}
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in evidence.runs:
        by_job[run.job_id].append(run)
    figures.runs = sum(1 for r in evidence.runs if r.skipped_through is None and r.reason != "overlap")
    figures.skipped_records = sum(1 for r in evidence.runs if r.state is RunState.SKIPPED)
    figures.terminal = sum(1 for r in evidence.runs if r.state in TERMINAL_STATES)

    _check_coverage(evidence, by_job, figures)
    _check_effects(evidence, runs, figures)
    for run in evidence.runs:
        for problem in _holder_violations(_checkable(run), None, 0):
            flag(Violation("stale_fence_writes", run.run_key, problem))
        _check_attempts(run, figures)
        _check_bounded(run, evidence.end, figures, evidence.stored_jobs.get(run.job_id))
    for violation in evidence.audit.violations:
        flag(violation)
    for refused in evidence.oversize:
        flag(Violation("oversize_items", refused, "refused: larger than DynamoDB's 400 KB item limit"))

    for name in MUST_BE_ZERO:
        if name not in ("lost", "phantom_runs"):
            setattr(figures, name, len({v.run_key for v in figures.violations if v.figure == name}))
    figures.duplicates_suppressed = evidence.duplicates_suppressed
    figures.stale_fences_rejected = evidence.stale_fences_rejected
    figures.repairs = evidence.repairs
    figures.max_item_bytes = evidence.max_item_bytes
    figures.faults = dict(evidence.faults)
    figures.repair_latency_p99 = percentile(_repair_latencies(evidence.runs), 0.99)
    return figures


def _check_coverage(evidence: Evidence, by_job: dict[str, list[Run]], figures: Figures) -> None:
    """Every due occurrence of an ACTIVE job has a run or a SKIPPED record covering it, and
    every run is an occurrence of its schedule."""
    for job_id, tracked in evidence.jobs.items():
        job = evidence.stored_jobs.get(job_id)
        if job is None:
            figures.lost += 1
            figures.violations.append(Violation("lost", job_id, "accepted job is missing"))
            continue
        schedule = job.spec.schedule
        after = job.created_at - ONE_SECOND
        if schedule.kind is ScheduleKind.ONCE and schedule.at is not None:
            after = min(after, schedule.at - ONE_SECOND)
        occurrences = fires_between(schedule, after, evidence.window_end, 1_000_000)
        mine = by_job.get(job_id, [])
        at_instant = {run.scheduled_for: run for run in mine}
        ranges = [(run.scheduled_for, run.skipped_through) for run in mine if run.skipped_through is not None]
        for instant in occurrences:
            if not tracked.active_at(instant):
                continue
            figures.due += 1
            if instant in at_instant or any(lo <= instant <= hi for lo, hi in ranges):
                continue
            figures.lost += 1
            figures.violations.append(Violation("lost", f"{job_id}@{instant:%Y-%m-%dT%H:%M:%SZ}", "no run"))
        expected = set(occurrences)
        for run in mine:
            if run.scheduled_for not in expected:
                figures.phantom_runs += 1
                figures.violations.append(
                    Violation("phantom_runs", run.run_key, "not an occurrence of the job's schedule")
                )


def _series(calls: list[Call], redrives: list[int]) -> list[list[Call]]:
    """Split a run's handler calls into attempt series at each redrive."""
    series: list[list[Call]] = [[] for _ in range(len(redrives) + 1)]
    for call in calls:
        series[sum(1 for seq in redrives if seq < call.seq)].append(call)
    return series


def _repeated_before_deadline(calls: list[Call], deadlines: list[datetime | None]) -> str | None:
    """Why a run's effects break once-per-run, or None. Every effect after the first must come
    after the deadline of an invocation that died between an earlier effect and its
    completion (each such death excuses one repeat): before it, that invocation could still
    have been running, and its in-progress record was there to stop the repeat."""
    acted = sorted((call for call in calls if call.acted), key=lambda call: call.seq)
    unused = sorted(d for d in deadlines if d is not None)
    for repeat in acted[1:]:
        excuse = next((d for d in unused if repeat.at >= d - CLOCK_SKEW), None)
        if excuse is None:
            return f"{len(acted)} effects; the one at {repeat.at:%H:%M:%S} is excused by no dead invocation"
        unused.remove(excuse)
    return None


def _check_effects(evidence: Evidence, runs: dict[str, Run], figures: Figures) -> None:
    flag = figures.violations.append
    for run_key, calls in evidence.ledger.calls.items():
        early = _repeated_before_deadline(calls, evidence.unrecorded.get(run_key, []))
        if early:
            flag(Violation("duplicate_effects", run_key, early))
        else:
            figures.effects_repeated_after_deadline += max(0, sum(1 for call in calls if call.acted) - 1)
        job_id = run_key.partition("@")[0]
        tracked = evidence.jobs.get(job_id)
        if tracked is not None:
            for call in calls:
                if tracked.stopped_at_seq(call.seq):
                    flag(
                        Violation(
                            "effects_after_pause",
                            run_key,
                            f"handler started at {call.at:%H:%M:%S} after a pause/cancel was acknowledged",
                        )
                    )
        run = runs.get(run_key)
        if run is None:
            continue
        limit = run.policies.retry.max_attempts
        if run.policies.delivery is DeliveryGuarantee.AT_MOST_ONCE:
            limit = 1  # the effect is marked started before the call: never a second call
        recorded = _history_series(run)
        for index, series in enumerate(_series(calls, evidence.redrives.get(run_key, []))):
            if len(series) > limit:
                flag(
                    Violation(
                        "attempts_over_policy",
                        run_key,
                        f"{len(series)} handler calls in one attempt series (limit {limit})",
                    )
                )
            # A permanent error, once recorded, ends the series: no call may follow it.
            history = recorded[index] if index < len(recorded) else []
            permanent = [
                e.attempt for e in history if e.target is RunState.DEAD and e.error_class == PERMANENT
            ]
            if permanent and any(call.attempt > min(permanent) for call in series):
                flag(
                    Violation(
                        "attempts_over_policy", run_key, "called again after a recorded permanent error"
                    )
                )


def _history_series(run: Run) -> list[list[Transition]]:
    """A run's transitions split into attempt series at each redrive (DEAD -> PENDING)."""
    series: list[list[Transition]] = [[]]
    for entry in run.history:
        if entry.source is RunState.DEAD and entry.target is RunState.PENDING:
            series.append([])
        series[-1].append(entry)
    return series


def _check_attempts(run: Run, figures: Figures) -> None:
    limit = run.policies.retry.max_attempts
    for entry in run.history:
        if entry.target is RunState.LEASED and entry.attempt > limit:
            figures.violations.append(
                Violation(
                    "attempts_over_policy",
                    run.run_key,
                    f"claimed for attempt {entry.attempt} of {limit} by {entry.actor} at {entry.at:%H:%M:%S}",
                )
            )
            return


def _check_bounded(run: Run, end: datetime, figures: Figures, job: Job | None) -> None:
    """Invariant 3: terminal, or waiting for a retry that is due within its policy's cap, or
    held while its job is still paused (resume decides it; once resumed or cancelled it must
    have been decided)."""
    if run.state in TERMINAL_STATES:
        return
    if run.blocked_by == PAUSED_HOLD and job is not None and job.state is JobState.PAUSED:
        return
    cap = timedelta(seconds=run.policies.retry.cap_seconds) + timedelta(seconds=60)
    if run.state is RunState.RETRY_WAIT and run.due_at <= end + cap:
        return
    figures.violations.append(
        Violation(
            "unbounded_open", run.run_key, f"left {run.state.value} (updated {run.updated_at:%H:%M:%S})"
        )
    )


def _repair_latencies(runs: list[Run]) -> list[float]:
    """Seconds a run sat stranded (since its last change) before the reconciler moved it on."""
    latencies: list[float] = []
    for run in runs:
        for previous, entry in zip(run.history, run.history[1:], strict=False):
            if entry.actor == "reconciler":
                latencies.append((entry.at - previous.at).total_seconds())
    return latencies
