"""What a chaos run is judged on. The inputs are independent of the code under test where
possible: the effect ledger (what the targets did, with start and end), the Runs table stream
(every write, with old and new image), the schedule math over the window, the harness's own
record of when each pause, resume and cancel was acknowledged, and the deadline of every
invocation the harness made (its fake Lambda context's, in true time).

Every must-be-0 figure counts run keys (or occurrences) and means, exactly:

- `lost`: an occurrence of an ACTIVE job in the window, or of an answered backfill's range,
  with neither a run nor a SKIPPED record covering it, or a manual run a trigger answered
  with that is missing; `phantom_runs`: a scheduled run that is no occurrence of its
  schedule, a backfilled one outside every backfill asked for, or more manual runs of a job
  than triggers asked for.
- `duplicate_effects`: a run whose target acted more than once, except one repeat per
  invocation that died between a successful effect and the completion that records it (or
  was frozen there past its deadline), made after that invocation's deadline less twice the
  clock skew (the dead claim's clock and the repeat's). Nothing else is excused.
- `missing_effects`: a run that became SUCCEEDED although no target ever acted for it.
- `dead_untried`: a run that became DEAD in an attempt series with no claim in its history
  and no target call: the only reasons a run may die untried are `MaxAge` and `Unclaimed`,
  and only once that series is really `retry.maxAgeSeconds` old. A permanent error is an
  attempt (a call); `AtMostOnce`, `RetriesExhausted` and `LeaseExpired` follow claims.
- `stale_fence_writes`: a holder's write under a fence that is not the latest claim's, a
  fence going back, or a history rewritten (checked on every stream record and at the end).
- `attempts_over_policy`: more target calls in one attempt series than the policy allows
  (one under `at-most-once`), a claim past `maxAttempts`, or a call after a recorded
  permanent error.
- `effects_after_pause`: a target call that started after a pause or cancel of its job was
  acknowledged (and not undone).
- `overlap_violations`: a run of a `skip` or `buffer-one` job whose target call started
  while an earlier run of the same job was executing: between that run's first call and
  the end of its last (a run waiting for its retry is still open, docs/concepts/policies.md). Only
  each run's first attempt series counts (a redrive is a new decision).
- `missed_run_violations`: an occurrence inside an acknowledged pause (more than the skew
  from either end) that was neither run nor recorded SKIPPED as the job's `missedRuns`
  says: `skip` runs none; `run-once` runs only the latest one inside the catch-up window;
  `catch-up` runs each one inside it; every other one is SKIPPED. One SKIPPED by the overlap
  policy is excused when that came after the resume (a chosen occurrence still obeys it as
  it starts), and a violation when it came while the job was paused. A run that died
  without acting, every claim of it made deep in the pause (PAUSE_EDGE from either end),
  is a violation whatever the policy: such a claim read its job paused and spends nothing.
  An occurrence SKIPPED as missed (`paused`) that its job's own record of its resumes puts
  in no pause (it fell while the job was active: at or after a resume's whole second, or
  between pauses) is a violation however near the resume it fell; only one before the
  earliest pause of a full record (MAX_MISSED_WINDOWS) cannot be judged.
- `tenant_limit_exceeded`: a target call that started while the tenant already had its
  `TENANT_CONCURRENCY` calls under way (Lambda worker and lease API together).
- `early_effects`: a target call that started before its occurrence (`scheduledFor`) less
  EARLY_ALLOWANCE.
- `effects_past_deadline`: a target call still under way after the deadline of the
  invocation making it (the harness's Lambda context, true time), or, at the end, never
  ended with that deadline passed: the in-progress record promises no attempt's effect
  runs past it, and a later attempt starts once it has passed. Judged on the calls that
  take simulated time (the harness's slow effects); every other call starts and ends at
  one instant of its invocation.
- the restart goal (not a count): of the runs the reconciler repaired because they should
  have started (a lost publish, a dead worker), the 99th percentile of the seconds from when
  each should have to its next claim, call or end is at most RESTART_GOAL_SECONDS; restarts
  its tenant's own limit, its job's overlap or its job's pause held back are counted apart,
  not timed.
- `fixes_ignored`: a target call after a redrive that fixed the run's payload (or after a
  later plain redrive of it) that did not receive that payload: the fix must reach every
  later attempt, whichever target kind makes it.
- `events_lost`: a transition the Runs stream carried (a run's sequence 0 up to the latest
  its stream showed) with no run event the bus accepted for it (id `<runKey>#<sequence>`);
  `events_conflicting`: one id the bus accepted twice with different contents. The same
  event accepted again (a retried or redelivered batch) is allowed and counted
  (`events_repeated`): consumers dedupe on the id.
- `notices_lost`: a `run.dead`, `run.skipped` or `run.late` event the bus accepted for a job
  whose `notify` names that kind, with no notification queued for it (id
  `<event id>#n<index>`, one per notification naming the kind); `notices_conflicting`: one
  notification id queued twice with different contents, carrying another event than the
  bus's, or queued for no event its job asked to be told of (queued again unchanged is
  allowed: `notices_repeated`).
- `late_untold`: a run of a job that asks to be told of late runs (not a backfilled one)
  that became late (not claimed by its first due instant, the occurrence plus its start
  jitter, plus the shortest `lateSeconds`) with no
  `jobsched.run.late` event the bus accepted (id `<runKey>#late`), once it was claimed
  after that instant or noted late; or one neither claimed nor ended LATE_NOTICE_BOUND
  after it became late and not noted late (a recorded touch, reason `late`) by then, unless
  its job was paused when it became late or was paused or cancelled within that bound; or
  one noted late before it was late, or after its first claim. A late note's event is
  `#late` instead of `#<sequence>` (events_lost takes it for that transition only).
- `unbounded_open`: a run neither terminal, nor waiting for a retry due within its cap, nor
  held while its job is paused, when the run stops; `oversize_items`: a write refused at
  DynamoDB's 400 KB item limit."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobsched.domain.jitter import start_jitter_seconds
from jobsched.domain.lifecycle import HELD_FOR_RESUME
from jobsched.domain.models import (
    MAX_MISSED_WINDOWS,
    DeliveryGuarantee,
    Job,
    JobState,
    Misfire,
    Overlap,
    ScheduleKind,
    late_seconds,
)
from jobsched.domain.notifications import NOTIFIED_TYPES
from jobsched.domain.runs import (
    LATE_REASON,
    OPEN_STATES,
    PAUSED_HOLD,
    TERMINAL_STATES,
    Run,
    RunState,
    Transition,
    Trigger,
)
from jobsched.domain.schedule import fires_between, fires_in
from jobsched.store.runs import RunStore

from .ledger import PERMANENT, Call, Ledger

ONE_SECOND = timedelta(seconds=1)
CLOCK_SKEW = timedelta(seconds=3)  # the most a component's clock is off true time (harness)
RESTART_GOAL_SECONDS = 90.0  # a stranded run starts again within this of when it should have (p99)
# A worker waits out a message up to 2 s early by its own clock (worker.CLOCK_SKEW); the
# harness does not simulate waits, so a call may start that much before its due instant by
# the worker's clock, which is itself up to CLOCK_SKEW off.
EARLY_ALLOWANCE = CLOCK_SKEW + timedelta(seconds=2)
# A claim this far inside its job's pause read the job paused at its check (docs/concepts/
# policies.md): it begins nothing and spends no attempt. Nearer an edge, it may have begun.
PAUSE_EDGE = timedelta(seconds=10)
# A late run is noted by the reconciler's pass over its shard (every 30 s in the harness, as
# the deployed rule and its second tick): six passes, so a few passes lost to throttling are
# not a finding, and both clocks' skew.
LATE_NOTICE_BOUND = timedelta(seconds=180) + 2 * CLOCK_SKEW
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
    "missing_effects",
    "dead_untried",
    "overlap_violations",
    "missed_run_violations",
    "tenant_limit_exceeded",
    "early_effects",
    "effects_past_deadline",
    "fixes_ignored",
    "events_lost",
    "events_conflicting",
    "notices_lost",
    "notices_conflicting",
    "late_untold",
    "fold_counts_off",
)
# What AWS does that moto does not, injected (see faults.DynamoFaults, harness): each its own
# figure, so a run shows that the fault really happened.
FAULT_FIGURES = (
    "stale_due_reads",
    "stale_open_reads",
    "stale_claimable_reads",
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
    "slow_effects",
    "slow_effects_ended_at_deadline",
    "outbox_died",
    "reconciler_ticks_lost",  # a shard's pass refused (throttled past its pauses): its runs wait a tick
    "reconciler_runs_unrepaired",  # overdue runs a pass could not read or repair: they wait a tick
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
class Backfill:
    """One backfill the harness asked for: its window [start, end) and, once answered, the runs it made."""

    start: datetime
    end: datetime
    acknowledged: bool = False
    created: list[str] = field(default_factory=list)


@dataclass
class TrackedJob:
    job_id: str
    tenant: str
    acks: list[Ack] = field(default_factory=list)
    triggers: int = 0  # manual runs asked for (answered or not: an error may follow a write)
    manual_keys: list[str] = field(default_factory=list)  # the manual runs answered
    backfills: list[Backfill] = field(default_factory=list)

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
    missing_effects: int = 0
    dead_untried: int = 0
    overlap_violations: int = 0
    missed_run_violations: int = 0
    tenant_limit_exceeded: int = 0
    early_effects: int = 0
    effects_past_deadline: int = 0
    fixes_ignored: int = 0
    events_lost: int = 0
    events_conflicting: int = 0
    events_published: int = 0  # distinct ids the bus accepted
    events_repeated: int = 0  # accepted again with the same id and content (allowed)
    notices_lost: int = 0
    notices_conflicting: int = 0
    late_untold: int = 0
    # Jobs whose folds' count of their successes is not the number of succeeded runs they own.
    fold_counts_off: int = 0
    notices_queued: int = 0  # distinct notification ids queued
    notices_repeated: int = 0  # queued again with the same id and content (allowed)
    max_item_bytes: int = 0  # the largest item written (Runs and Definitions)
    faults: dict[str, int] = field(default_factory=dict)  # FAULT_FIGURES
    duplicates_suppressed: int = 0
    stale_fences_rejected: int = 0
    repairs: int = 0
    repair_latency_p99: float = 0.0
    # Of the runs that should have started and needed the reconciler (a lost publish, a dead
    # worker): seconds from when each should have started to its next start or end, at the
    # 99th percentile, against RESTART_GOAL_SECONDS (a failure above it).
    restart_latency_p99: float = 0.0
    restarts: int = 0
    # Of those, how many took longer than RESTART_GOAL_SECONDS: the goal is on the p99, so a
    # few may (the self-test's figure for a defect that strands only a few runs).
    restarts_over_goal: int = 0
    # Not timed: held back on purpose (the tenant's own limit, or a buffer-one run waiting
    # for the run before it to end).
    restarts_held_back: int = 0
    slowest_restarts: list[tuple[str, float]] = field(default_factory=list)  # run key, seconds
    # An effect repeated after an invocation died between it and its completion, and after
    # that invocation's deadline: at-least-once, allowed (and counted so it shows).
    effects_repeated_after_deadline: int = 0
    violations: list[Violation] = field(default_factory=list)

    def failed(self) -> bool:
        return any(getattr(self, name) for name in MUST_BE_ZERO) or self.restart_over_goal

    @property
    def restart_over_goal(self) -> bool:
        return self.restart_latency_p99 > RESTART_GOAL_SECONDS

    @property
    def restart_goal_missed(self) -> int:
        """1 when the restart latency's p99 is over its goal (the selftest's figure for it)."""
        return int(self.restart_over_goal)

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
            f" restarts={self.restarts} restarts_held_back={self.restarts_held_back}"
            f" restart_latency_p99={self.restart_latency_p99:.0f}s"
            f" (goal {RESTART_GOAL_SECONDS:.0f}s) restarts_over_goal={self.restarts_over_goal}"
            f" oversize_items={self.oversize_items} max_item_bytes={self.max_item_bytes}"
            f" missing_effects={self.missing_effects} dead_untried={self.dead_untried}"
            f" overlap_violations={self.overlap_violations}"
            f" missed_run_violations={self.missed_run_violations}"
            f" tenant_limit_exceeded={self.tenant_limit_exceeded} early_effects={self.early_effects}"
            f" effects_past_deadline={self.effects_past_deadline} fixes_ignored={self.fixes_ignored}"
            f" events_lost={self.events_lost} events_conflicting={self.events_conflicting}"
            f" events_published={self.events_published} events_repeated={self.events_repeated}"
            f" notices_lost={self.notices_lost} notices_conflicting={self.notices_conflicting}"
            f" late_untold={self.late_untold} fold_counts_off={self.fold_counts_off}"
            f" notices_queued={self.notices_queued}"
            f" notices_repeated={self.notices_repeated}"
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
    # Job id -> the successes its folds own as a fold read them at the end (domain.run_counts).
    fold_counts: dict[str, int] = field(default_factory=dict)
    # Run key -> attempt series -> the payload the redrive that opened it fixed (harness.fixes).
    fixes: dict[str, dict[int, Any]] = field(default_factory=dict)
    bus_events: list[dict[str, Any]] = field(default_factory=list)  # accepted by the bus, in order
    notices: list[dict[str, Any]] = field(default_factory=list)  # queued notifications, in order
    # Run key -> the invocation deadline (true time, the harness's Lambda context) of each
    # attempt that died after a successful effect, before its completion.
    unrecorded: dict[str, list[datetime | None]] = field(default_factory=dict)
    tenant_limit: int = 0  # TENANT_CONCURRENCY (0: no limit)
    # Run key -> (when it should have moved on, when the reconciler repaired it), per repair
    # of a run that should have started (RepairReport.stranded).
    stranded: dict[str, list[tuple[datetime, datetime]]] = field(default_factory=dict)
    is_external: Callable[[str], bool] = lambda run_key: False  # leased through the API, by run key
    # Run key -> when a worker held the run back on purpose (true time): its claim found the
    # tenant at its limit, or it was buffered behind the job's running run.
    held_back: dict[str, list[datetime]] = field(default_factory=dict)


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
    _check_fixes(evidence, figures)
    _check_events(evidence, figures)
    _check_notices(evidence, figures)
    told_late = {e["subject"] for e in evidence.bus_events if e["id"] == f"{e['subject']}#late"}
    _check_overlap(evidence, by_job, figures)
    _check_missed(evidence, by_job, figures)
    _check_tenant_limit(evidence, figures)
    _check_fold_counts(evidence, by_job, figures)
    for run in evidence.runs:
        _check_outcome(run, evidence, figures)
        for problem in _holder_violations(_checkable(run), None, 0):
            flag(Violation("stale_fence_writes", run.run_key, problem))
        _check_attempts(run, figures)
        _check_late(run, evidence, figures, told_late)
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
    restarts, held_back = _restart_latencies(evidence, runs)
    figures.restarts = len(restarts)
    figures.restarts_held_back = len(held_back)
    figures.restart_latency_p99 = percentile([seconds for _, seconds in restarts], 0.99)
    figures.restarts_over_goal = sum(1 for _, seconds in restarts if seconds > RESTART_GOAL_SECONDS)
    figures.slowest_restarts = sorted(restarts, key=lambda r: -r[1])[:10]
    return figures


def _check_fold_counts(evidence: Evidence, by_job: dict[str, list[Run]], figures: Figures) -> None:
    """Each job's folds count exactly its succeeded runs a fold owns: made ahead by its
    schedule and never redriven (the rule restated here, not imported: domain.run_counts)."""
    for job_id, counted in evidence.fold_counts.items():
        owned = sum(
            1
            for run in by_job.get(job_id, [])
            if run.state is RunState.SUCCEEDED and not run.counted_at_end and run.redrives == 0
        )
        if counted != owned:
            figures.violations.append(
                Violation("fold_counts_off", job_id, f"folds count {counted} successes, the job has {owned}")
            )


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
        backfilled = {
            instant
            for backfill in tracked.backfills
            for instant in fires_in(schedule, backfill.start, backfill.end, 10_000)
        }
        manual = [run for run in mine if run.trigger is Trigger.MANUAL]
        for run in mine:
            if run.trigger is Trigger.MANUAL:
                continue
            if run.scheduled_for in expected or (
                run.trigger is Trigger.BACKFILL and run.scheduled_for in backfilled
            ):
                continue
            figures.phantom_runs += 1
            figures.violations.append(
                Violation("phantom_runs", run.run_key, "not an occurrence of the job's schedule")
            )
        # Manual runs: each one answered exists, and none beyond the calls made.
        for key in set(tracked.manual_keys) - {run.run_key for run in manual}:
            figures.lost += 1
            figures.violations.append(
                Violation("lost", key, "the trigger answered with this run; it is missing")
            )
        if len(manual) > tracked.triggers:
            figures.phantom_runs += 1
            figures.violations.append(
                Violation(
                    "phantom_runs", job_id, f"{len(manual)} manual runs for {tracked.triggers} triggers"
                )
            )
        # An answered backfill: every occurrence in its range has a run (made by it or before).
        for backfill in tracked.backfills:
            if not backfill.acknowledged:
                continue
            for instant in fires_in(schedule, backfill.start, backfill.end, 10_000):
                figures.due += 1
                if instant in at_instant or any(lo <= instant <= hi for lo, hi in ranges):
                    continue
                figures.lost += 1
                figures.violations.append(
                    Violation("lost", f"{job_id}@{instant:%Y-%m-%dT%H:%M:%SZ}", "backfilled, but no run")
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
        excuse = next((d for d in unused if repeat.at >= d - 2 * CLOCK_SKEW), None)
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
        known = runs.get(run_key)
        for call in calls:
            ended = call.end_at if call.finished else evidence.end
            if call.deadline is not None and ended is not None and ended > call.deadline:
                flag(
                    Violation(
                        "effects_past_deadline",
                        run_key,
                        f"call of attempt {call.attempt} ran to {ended:%H:%M:%S}"
                        f"{'' if call.finished else ' (still running)'}, its invocation's deadline"
                        f" {call.deadline:%H:%M:%S}",
                    )
                )
            due = known.scheduled_for if known is not None else None
            if due is not None and call.at < due - EARLY_ALLOWANCE:
                flag(
                    Violation(
                        "early_effects",
                        run_key,
                        f"call of attempt {call.attempt} started {call.at:%H:%M:%S}, due {due:%H:%M:%S}",
                    )
                )
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


def _check_events(evidence: Evidence, figures: Figures) -> None:
    """`events_lost` and `events_conflicting` (see the module); counts the rest."""
    flag = figures.violations.append
    accepted: dict[str, dict[str, Any]] = {}
    for event in evidence.bus_events:
        first = accepted.setdefault(event["id"], event)
        if first is event:
            continue
        if first != event:
            flag(
                Violation(
                    "events_conflicting", event["subject"], f"{event['id']}: accepted with two contents"
                )
            )
        else:
            figures.events_repeated += 1
    figures.events_published = len(accepted)
    # A note of lateness is published as `<runKey>#late` (once per run), for its transition.
    late = {(e["subject"], e["data"]["sequence"]) for key, e in accepted.items() if key.endswith("#late")}
    for run_key, run in evidence.audit.latest.items():
        notes = _late_note_sequences(run)
        missing = [
            n
            for n in range(_transitions(run))
            if not (f"{run_key}#{n}" in accepted or (n in notes and (run_key, n) in late))
        ]
        if missing:
            flag(Violation("events_lost", run_key, f"no event for transitions {missing[:10]}"))


def _check_notices(evidence: Evidence, figures: Figures) -> None:
    """`notices_lost` and `notices_conflicting` (see the module); counts the rest."""
    flag = figures.violations.append
    queued: dict[str, dict[str, Any]] = {}
    for notice in evidence.notices:
        first = queued.setdefault(notice["id"], notice)
        if first is notice:
            continue
        if first != notice:
            run_key = notice["event"]["subject"]
            flag(Violation("notices_conflicting", run_key, f"{notice['id']}: two contents"))
        else:
            figures.notices_repeated += 1
    figures.notices_queued = len(queued)
    events: dict[str, dict[str, Any]] = {}
    for event in evidence.bus_events:
        events.setdefault(event["id"], event)
    expected: set[str] = set()
    for event_id, event in events.items():
        kind = NOTIFIED_TYPES.get(event["type"])
        job = evidence.stored_jobs.get(event["data"]["jobId"])
        if kind is None or job is None:
            continue
        run_key = event["data"]["runKey"]
        for index, notification in enumerate(job.spec.notify):
            if kind not in notification.on:
                continue
            expected.add(f"{event_id}#n{index}")
            told = queued.get(f"{event_id}#n{index}")
            if told is None:
                flag(Violation("notices_lost", run_key, f"no notification {index} for {event_id}"))
            elif told["event"] != event or told["index"] != index:
                flag(Violation("notices_conflicting", run_key, f"{told['id']}: not the bus's event"))
    for notice_id, notice in queued.items():
        if notice_id not in expected:  # queued for no notified event its job asked for
            flag(Violation("notices_conflicting", notice["event"]["subject"], f"{notice_id}: not asked for"))


def _check_late(run: Run, evidence: Evidence, figures: Figures, told_late: set[str]) -> None:
    """`late_untold` (see the module), judged on the run's history as its last image holds it
    (a run whose compaction dropped entries is not judged). `told_late`: the runs with a
    `#late` event on the bus."""
    job = evidence.stored_jobs.get(run.job_id)
    late = late_seconds(job.spec.notify) if job is not None else None
    if late is None or run.trigger is Trigger.BACKFILL or run.history_dropped:
        return
    if run.history[0].target in TERMINAL_STATES:
        return  # made ended (a SKIPPED record): never watched
    # From the run's first due instant (its occurrence plus its start jitter): a retry moves
    # `due_at`, never when the run became late.
    jitter = (
        start_jitter_seconds(run.run_key, run.policies.jitter_seconds)
        if run.trigger is Trigger.SCHEDULE
        else 0
    )
    late_at = run.scheduled_for + timedelta(seconds=jitter + late)
    claim = next((e.at for e in run.history if e.fence >= 1), None)
    ended = next((e.at for e in run.history if e.target in TERMINAL_STATES), None)
    moved = min((t for t in (claim, ended) if t is not None), default=evidence.end)
    notes = [e.at for e in run.history if e.source is e.target and e.reason == LATE_REASON]
    flag = figures.violations.append
    for noted in notes:
        if noted < late_at - 2 * CLOCK_SKEW:
            flag(Violation("late_untold", run.run_key, f"noted late at {noted}, before {late_at}"))
        if claim is not None and noted > claim + 2 * CLOCK_SKEW:
            flag(Violation("late_untold", run.run_key, f"noted late at {noted}, after its claim at {claim}"))
    if (notes or (claim is not None and claim > late_at)) and run.run_key not in told_late:
        flag(Violation("late_untold", run.run_key, f"late at {late_at}: no run.late event"))
    if moved <= late_at + LATE_NOTICE_BOUND or any(n <= late_at + LATE_NOTICE_BOUND for n in notes):
        return
    tracked = evidence.jobs.get(run.job_id)
    bound = late_at + LATE_NOTICE_BOUND
    if tracked is not None and (
        not tracked.active_at(late_at)
        or any(a.kind != "resume" and late_at <= a.at <= bound for a in tracked.acks)
    ):
        return  # paused or cancelled while it was to be noted (a held run is not watched)
    flag(Violation("late_untold", run.run_key, f"late at {late_at}, unclaimed until {moved}, not noted"))


def _late_note_sequences(run: Run) -> set[int]:
    """The sequences whose one event is `<runKey>#late`: the late notes the history holds,
    and every sequence its compaction dropped (not known here; either id is taken)."""
    notes = {
        index if index == 0 else index + run.history_dropped
        for index, entry in enumerate(run.history)
        if entry.source is entry.target and entry.reason == LATE_REASON
    }
    return notes | set(range(1, 1 + run.history_dropped))


def _transitions(run: Run) -> int:
    """How many transitions the run has had: those its history holds and those its byte
    budget dropped (counted by the checker itself, not by the code under test)."""
    return len(run.history) + run.history_dropped


def _check_fixes(evidence: Evidence, figures: Figures) -> None:
    """`fixes_ignored`: each call of an attempt series at or after a fixed redrive carries
    the latest such fix's payload."""
    for run_key, fixed in evidence.fixes.items():
        calls = evidence.ledger.calls.get(run_key, [])
        for index, series in enumerate(_series(calls, evidence.redrives.get(run_key, []))):
            opened = [i for i in fixed if i <= index]
            if not opened:
                continue
            expected = fixed[max(opened)]
            for call in series:
                if call.payload != expected:
                    figures.violations.append(
                        Violation(
                            "fixes_ignored",
                            run_key,
                            f"{call.source} call of attempt {call.attempt} received {call.payload!r},"
                            f" the redrive fixed it to {expected!r}",
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


def _restart_latencies(evidence: Evidence, runs: dict[str, Run]) -> tuple[list[tuple[str, float]], list[str]]:
    """For each repair of a run that should have started: seconds from when it should have
    (RepairReport.stranded) to what shows next after the repair: a target call (the
    ledger), a claim, the run's end (a death, a skip, a cancel), or for an external worker's
    run its offer in the claimable index (recorded times plus the clock skew); the end of the
    simulation if none came. A restart held back on purpose in between (a claim refused at
    TENANT_CONCURRENCY, a buffer-one run deferred behind the job's running run, a run held
    for its job's resume) is not timed: listed second."""
    latencies: list[tuple[str, float]] = []
    held_back: list[str] = []
    for run_key, repairs in evidence.stranded.items():
        run = runs.get(run_key)
        calls = [call.at for call in evidence.ledger.calls.get(run_key, [])]  # true time
        # A claim is a start (its effect may still have to wait for an earlier attempt's
        # record, or crash before it); for an external worker's run, being offered again in
        # the claimable index is (when a worker leases it is the tenant's own doing). Written
        # by the components' own clocks, up to CLOCK_SKEW off true time.
        moved = {*TERMINAL_STATES, RunState.LEASED}
        if evidence.is_external(run_key):
            moved.add(RunState.QUEUED)
        ends = [e.at + CLOCK_SKEW for e in (run.history if run else []) if e.target in moved]
        # Held for its job's resume (a claim made in the pause whose worker died began
        # nothing): the resume decides when, or whether, it starts again.
        paused_holds = [e.at for e in (run.history if run else []) if _held_by_pause(e)]
        for since, repaired_at in repairs:
            # A call in the repair's second came before it (the reconciler ticks last).
            after = [at for at in calls if at > repaired_at] + [at for at in ends if at >= repaired_at]
            restarted = min(after) if after else evidence.end
            held = [*evidence.held_back.get(run_key, []), *paused_holds]
            if any(since - CLOCK_SKEW <= at <= restarted for at in held):
                held_back.append(run_key)  # its tenant's limit, its job's overlap or pause held it
                continue
            latencies.append((run_key, max(0.0, (restarted - since).total_seconds())))
    return latencies, held_back


# --- the new figures: outcomes, overlap, missed runs, the tenant limit ---

UNTRIED_REASONS = ("MaxAge", "Unclaimed")  # may die with no attempt, once really that old


def _check_outcome(run: Run, evidence: Evidence, figures: Figures) -> None:
    """`missing_effects` and `dead_untried` for one run (see the module docstring)."""
    flag = figures.violations.append
    calls = evidence.ledger.calls.get(run.run_key, [])
    if any(e.target is RunState.SUCCEEDED for e in run.history) and not any(c.acted for c in calls):
        flag(Violation("missing_effects", run.run_key, f"SUCCEEDED with {len(calls)} calls, none acted"))
    redrives = evidence.redrives.get(run.run_key, [])
    call_series = _series(calls, redrives)
    max_age = run.policies.retry.max_age_seconds
    for index, history in enumerate(_history_series(run)):
        deaths = [e for e in history if e.target is RunState.DEAD]
        if not deaths:
            continue
        claimed = any(e.target is RunState.LEASED for e in history)
        if index == 0 and run.history_dropped and run.attempt > 0:
            claimed = True  # compaction dropped the early entries: the attempt counter says
        called = index < len(call_series) and bool(call_series[index])
        if claimed or called:
            continue
        death = deaths[0]
        began = history[0].at if index > 0 else run.scheduled_for
        age = (death.at - began).total_seconds()
        if (
            death.error_class in UNTRIED_REASONS
            and max_age is not None
            and age >= max_age - 2 * CLOCK_SKEW.total_seconds()
        ):
            continue
        flag(
            Violation(
                "dead_untried",
                run.run_key,
                f"DEAD ({death.error_class}, {death.actor}, {death.at:%H:%M:%S}) with no claim and no call",
            )
        )


def _span(calls: list[Call], redrives: list[int]) -> tuple[int, float, str] | None:
    """The run's first attempt series as (first call's start, last call's end, the calls'
    times) in sequencer order; a call still under way ends at infinity."""
    first = [c for c in calls if not redrives or c.seq < redrives[0]]
    if not first:
        return None
    first.sort(key=lambda c: c.seq)
    end = max(float(c.end_seq) if c.finished else math.inf for c in first)
    times = ", ".join(
        f"{c.source} {c.at:%H:%M:%S}-{c.end_at:%H:%M:%S}" if c.end_at else f"{c.source} {c.at:%H:%M:%S}-"
        for c in first
    )
    return first[0].seq, end, times


def _check_overlap(evidence: Evidence, by_job: dict[str, list[Run]], figures: Figures) -> None:
    """No call of a `skip`/`buffer-one` run starts while an earlier run of its job executes."""
    for job_id, runs in by_job.items():
        # Scheduled runs among themselves; manual runs are outside the policy, and the runs of
        # one backfill run one after another (docs/concepts/policies.md).
        _check_overlap_of([run for run in runs if run.trigger is Trigger.SCHEDULE], evidence, figures)
        tracked = evidence.jobs.get(job_id)
        for backfill in tracked.backfills if tracked else []:
            made = set(backfill.created)
            _check_overlap_of([run for run in runs if run.run_key in made], evidence, figures)


def _check_overlap_of(mine: list[Run], evidence: Evidence, figures: Figures) -> None:
    """Each run judged by its own policy (a PATCH changes it for the runs made after)."""
    spans = []
    for run in mine:
        calls = evidence.ledger.calls.get(run.run_key, [])
        span = _span(calls, evidence.redrives.get(run.run_key, []))
        if span is not None:
            spans.append((span[0], span[1], span[2], run))
    spans.sort(key=lambda s: s[0])
    for index, (start, _, times, run) in enumerate(spans):
        policy = run.policies.overlap
        if policy not in (Overlap.SKIP, Overlap.BUFFER_ONE):
            continue
        for other_start, other_end, other_times, other in spans[:index]:
            if other_start < start < other_end:
                figures.violations.append(
                    Violation(
                        "overlap_violations",
                        run.run_key,
                        f"{policy.value}: its call ({times}) started while {other.run_key}"
                        f" ({other.state.value}) was executing (calls {other_times})",
                    )
                )
                break


def _held_by_pause(entry: Transition) -> bool:
    """Whether a history entry holds its run for its job's resume (PENDING, `job paused`)."""
    return entry.target is RunState.PENDING and entry.reason == HELD_FOR_RESUME


def _died_untried_in_pause(run: Run, calls: list[Call], paused: datetime, resumed: datetime) -> bool:
    """Whether `run` died having acted nowhere, every claim of its first series made deep in
    the pause [paused, resumed) (PAUSE_EDGE from either end, plus the skew): each of those
    read its job paused before any effect, so none may spend an attempt, and the resume's
    `missedRuns` decides the occurrence. `MaxAge` and `Unclaimed` deaths are dead_untried's."""
    if run.state is not RunState.DEAD or any(call.acted for call in calls):
        return False
    first = _history_series(run)[0]
    deaths = [e for e in first if e.target is RunState.DEAD]
    if not deaths or deaths[0].error_class in UNTRIED_REASONS:
        return False
    claims = [e.at for e in first if e.target is RunState.LEASED]
    low, high = paused + PAUSE_EDGE + CLOCK_SKEW, resumed - PAUSE_EDGE - CLOCK_SKEW
    return bool(claims) and all(low <= at <= high for at in claims)


def _pause_windows(tracked: TrackedJob) -> list[tuple[datetime, datetime]]:
    """(paused, resumed) true times of each acknowledged pause that a resume ended."""
    windows: list[tuple[datetime, datetime]] = []
    paused: datetime | None = None
    for ack in sorted(tracked.acks, key=lambda a: a.seq):
        if ack.kind == "pause" and paused is None:
            paused = ack.at
        elif ack.kind == "resume" and paused is not None:
            windows.append((paused, ack.at))
            paused = None
        elif ack.kind == "cancel":
            break
    return windows


def _missed_by_record(job: Job, run: Run) -> bool:
    """Whether the job's own record of its resumes (`missed_windows`: what each decided, the
    latest MAX_MISSED_WINDOWS of them) may count the run's occurrence missed: it fell inside
    one, paused_at <= t < resumed_at (whole seconds: one in the resume's own second did not),
    or the record cannot say (none kept, or before the earliest of a full list)."""
    windows, instant = job.missed_windows, run.scheduled_for
    if not windows or (len(windows) >= MAX_MISSED_WINDOWS and instant < windows[0].paused_at):
        return True
    return any(w.paused_at <= instant < w.resumed_at for w in windows)


def _check_missed(evidence: Evidence, by_job: dict[str, list[Run]], figures: Figures) -> None:
    """Each occurrence inside a pause is run or recorded SKIPPED as `missedRuns` says, and
    none SKIPPED as missed that its job's record puts outside every pause."""
    margin = CLOCK_SKEW + ONE_SECOND
    for job_id, tracked in evidence.jobs.items():
        job = evidence.stored_jobs.get(job_id)
        if job is None:
            continue
        mine = [r for r in by_job.get(job_id, []) if r.trigger.value == "schedule"]
        for skipped in (r for r in mine if r.state is RunState.SKIPPED and r.reason == "paused"):
            if not _missed_by_record(job, skipped):
                figures.violations.append(
                    Violation(
                        "missed_run_violations",
                        skipped.run_key,
                        "SKIPPED as missed (paused) although it fell in none of its job's recorded"
                        " pauses: its job was active at its instant",
                    )
                )
        at_instant = {run.scheduled_for: run for run in mine}
        ranges = [(r.scheduled_for, r.skipped_through) for r in mine if r.skipped_through is not None]
        policies = job.spec.policies
        for paused, resumed in _pause_windows(tracked):
            edge = resumed - timedelta(seconds=policies.catch_up_window_seconds)
            inside = fires_between(job.spec.schedule, paused + margin, resumed - margin, 100_000)
            if not inside:
                continue
            near_end = fires_between(job.spec.schedule, resumed - margin, resumed + margin, 10)

            window = f"{policies.misfire.value}, paused {paused:%H:%M:%S}-{resumed:%H:%M:%S}"

            def flag(instant: datetime, detail: str, window: str = window, job_id: str = job_id) -> None:
                key = f"{job_id}@{instant:%Y-%m-%dT%H:%M:%SZ}"
                figures.violations.append(Violation("missed_run_violations", key, f"{detail} ({window})"))

            ran: dict[datetime, bool] = {}
            for instant in inside:
                run = at_instant.get(instant)
                if run is not None and run.state is RunState.SKIPPED and run.reason == "overlap":
                    skipped_at = next(e.at for e in reversed(run.history) if e.target is RunState.SKIPPED)
                    if skipped_at < resumed - CLOCK_SKEW:
                        flag(instant, "SKIPPED by the overlap policy while its job was paused")
                    # After the resume: a chosen occurrence still obeys the overlap policy when it
                    # starts (overlap_violations judges that), so it may be skipped.
                    continue
                if run is not None and _died_untried_in_pause(
                    run, evidence.ledger.calls.get(run.run_key, []), paused, resumed
                ):
                    flag(instant, "DEAD untried: its every claim was made deep in the pause")
                elif run is not None and run.state is not RunState.SKIPPED:
                    ran[instant] = True
                elif run is not None or any(lo <= instant <= hi for lo, hi in ranges):
                    ran[instant] = False
                else:
                    flag(instant, "neither run nor recorded SKIPPED")
            latest_inside = max(inside)
            for instant, did in ran.items():
                in_window = instant >= edge + margin
                before_window = instant < edge - margin
                if policies.misfire is Misfire.SKIP:
                    should: bool | None = False
                elif policies.misfire is Misfire.CATCH_UP:
                    should = True if in_window else (False if before_window else None)
                elif instant != latest_inside:
                    should = False if (in_window or before_window) else None
                elif near_end:
                    # The one to run is this or the one at the resume, by the API's own clock.
                    should = None
                else:
                    should = True if in_window else (False if before_window else None)
                if should is not None and did != should:
                    flag(instant, "ran" if did else "SKIPPED instead of run")


def _check_tenant_limit(evidence: Evidence, figures: Figures) -> None:
    """No call starts while its tenant already has `tenant_limit` calls under way."""
    limit = evidence.tenant_limit
    if limit <= 0:
        return
    by_tenant: dict[str, list[Call]] = defaultdict(list)
    for call in evidence.ledger.all_calls():
        by_tenant[call.tenant].append(call)
    for tenant, calls in by_tenant.items():
        events: list[tuple[float, int, Call]] = []
        for call in calls:
            events.append((float(call.seq), 1, call))
            events.append((float(call.end_seq) if call.finished else math.inf, -1, call))
        events.sort(key=lambda e: (e[0], e[1]))
        live = 0
        for _, delta, call in events:
            live += delta
            if delta > 0 and live > limit:
                figures.violations.append(
                    Violation(
                        "tenant_limit_exceeded",
                        call.run_key,
                        f"tenant {tenant}: call started at {call.at:%H:%M:%S} as call {live} under way"
                        f" (limit {limit})",
                    )
                )
