"""The reconciler: repairs open runs that nothing has moved on by their repair deadline.

It reads only the sparse `open` index (runs past their deadline), never the table. Every
repair is a conditional write on the rev it read, so a run that moved on since the read,
or that another reconciler repaired first, is skipped rather than repaired twice."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from ..domain import lifecycle
from ..domain.errors import StorageUnavailable
from ..domain.instants import Clock
from ..domain.metrics import NO_METRICS, Metrics, Unit
from ..domain.repair import repair_deadline, stranded_since
from ..domain.runs import LATE_REASON, PAUSED_HOLD, TERMINAL_STATES, Run, RunState
from ..observability import logger
from ..store.ports import RunStorePort
from ..store.runs import RunChanged, key_sk
from .sweeper import round_robin, shards_above

ACTOR = "reconciler"
_T = TypeVar("_T")

# Repair kinds (the `kind` dimension of RepairsMade).
REPUBLISH = "republish"
REQUEUE = "requeue"
MAX_REQUEUES = 3
LEASE_EXPIRED_KIND = "lease_expired"
UNBLOCKED = "unblocked"
KINDS = (REPUBLISH, REQUEUE, LEASE_EXPIRED_KIND, UNBLOCKED)
DEFERRED = "deferred"  # not a repair: a blocked run whose blocker is still open
# Jobs whose tenant a reconciler remembers (a job id and a tenant id: ~5 MB at most).
MAX_KNOWN_JOBS = 50_000
# A read of the pass the store refused after the SDK's own retries (StorageUnavailable) is
# tried again this many times in the same invocation, after these pauses: a lost read costs
# its shard a whole pass (half a minute's delay for every overdue run in it), a pause seconds.
READ_PAUSES_SECONDS = (0.5, 2.0)
# All the pauses of one shard's pass together (reads and sends) stay within this share of
# the reconciler's 50 s budget: past it a refusal is not waited out (its tick is lost).
MAX_PAUSES_PER_PASS_SECONDS = 5.0
# What the store refused in a pass (a batch read still refused after READ_PAUSES_SECONDS, a
# repair's write or read refused or timed out) is tried once more at the end of the pass, one
# job's keys a read, so that one hot partition holds back no other job's runs in its batch.
# Past this many of those reads refused too, the store refuses more than one partition: the
# rest waits for the next tick.
MAX_REFUSED_RETRY_READS = 2


@dataclass
class RepairReport:
    shards: list[int] = field(default_factory=list)
    examined: int = 0
    republish: int = 0
    requeue: int = 0
    lease_expired: int = 0
    unblocked: int = 0
    dead: int = 0  # of lease_expired: no attempts (or age) left
    deferred: int = 0  # still blocked by an open run: only its deadline moved
    stale: int = 0  # moved on since the index read; left alone
    moved: int = 0  # open but not overdue yet: its index entry moved to its deadline
    failed: int = 0  # a repair raised: logged, counted (RepairsFailed), the shard went on
    late: int = 0  # noted late: not claimed `lateSeconds` after it was due (not a repair)
    capped: int = 0  # overdue, left for the next tick: past its job's, tenant's or shard's share
    repaired: list[str] = field(default_factory=list)
    failed_keys: list[str] = field(default_factory=list)
    # Overdue runs whose items do not parse: left out, logged and counted by the store
    # (UnreadableRuns); their index entries stay, so every pass meets them again.
    unreadable: list[str] = field(default_factory=list)
    # Of the repaired runs that should have started (a lost publish or message, a dead
    # worker): each one's key and when it should have moved on (domain.repair.stranded_since).
    stranded: list[tuple[str, datetime]] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return int(getattr(self, kind))

    def add(self, other: RepairReport) -> None:
        self.shards += other.shards
        for name in ("examined", *KINDS, "dead", DEFERRED, "stale", "moved", "failed", "capped", "late"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.repaired += other.repaired
        self.failed_keys += other.failed_keys
        self.unreadable += other.unreadable
        self.stranded += other.stranded

    def as_dict(self) -> dict[str, Any]:
        return {
            "shards": list(self.shards),
            "examined": self.examined,
            "repairs": {kind: self.count(kind) for kind in KINDS},
            "dead": self.dead,
            "deferred": self.deferred,
            "stale": self.stale,
            "moved": self.moved,
            "failed": self.failed,
            "capped": self.capped,
            "late": self.late,
            "repaired": list(self.repaired),
            "failedKeys": list(self.failed_keys),
            "unreadable": list(self.unreadable),
        }


@dataclass
class _Refused:
    """What the store refused in one pass (StorageUnavailable), to try once more: the keys
    whose batch read it refused and of the runs whose repair it refused; of the latter, each
    run as the pass first read it (by run key)."""

    keys: list[dict[str, Any]] = field(default_factory=list)
    first_reads: dict[str, Run] = field(default_factory=dict)


class Reconciler:
    """Repairs a shard's overdue runs each tick, with a bounded share for each job and tenant.

    A tick reads the keys of the shard's overdue entries (the keys-only index: about 100 bytes
    an entry, up to `max_keys_per_shard`), then reads and repairs the runs behind them taking
    tenants in turn, and within a tenant its jobs in turn: at most `max_per_job` runs of one
    job and `max_per_tenant` of one tenant a tick, `max_per_shard` in all. What a job or tenant
    has beyond its share waits for the next tick at the cost of its keys only, so a tenant
    with thousands of overdue runs in a shard pushes no other tenant's repair back. A job's
    tenant is learnt from its first run read (and kept: it never changes); until then the
    job is a tenant of its own.

    A read or repair the store refuses (throttled after the SDK's retries, a timeout) costs
    its run no tick: the pass tries it once more at its end (MAX_REFUSED_RETRY_READS), within
    the shares the run was taken under; only what is refused again waits for the next tick
    (counted `failed`).

    An overdue run whose item does not parse is passed over and the rest of its batch is
    repaired: it is named in the report's `unreadable` (the store logs it with its run key and
    counts it, UnreadableRuns, which is alarmed). Failing the batch instead would leave every
    other run in it unrepaired, tick after tick, and repairing it needs what it holds; leaving
    it loses nothing a later pass could not do, as its index entry stays overdue and every
    pass meets it again until it is readable (a roll forward, a fix by hand)."""

    def __init__(
        self,
        runs: RunStorePort,
        clock: Clock,
        *,
        shard_count: int,
        batch_limit: int = 100,
        max_per_shard: int = 2000,
        max_per_job: int = 100,
        max_per_tenant: int = 500,
        max_keys_per_shard: int = 10_000,
        key_page: int = 1000,
        on_dead: Callable[[Run], None] | None = None,
        is_external: Callable[[Run], bool] | None = None,
        settle_held: Callable[[Run], Run | None] | None = None,
        paused_claim: Callable[[Run], lifecycle.PausedClaim] | None = None,
        metrics: Metrics = NO_METRICS,
        recorded_shard_count: Callable[[], int | None] | None = None,
        publish: Callable[[list[Run]], Collection[str]] | None = None,
    ) -> None:
        self._runs = runs
        self._metrics = metrics
        self._clock = clock
        self.shard_count = shard_count
        self.batch_limit = batch_limit
        self.max_per_shard = max_per_shard  # bounds one invocation; the rest waits for the next tick
        self.max_per_job = max_per_job
        self.max_per_tenant = max_per_tenant
        self.max_keys_per_shard = max_keys_per_shard
        self.key_page = key_page
        self._on_dead = on_dead  # what follows a death: job counters, DLQ copy, pause-on-failure
        # Decides a run held for a paused job once the job is no longer paused (None: still held).
        self._settle_held = settle_held
        # Whether a run is an occurrence its job's resume decided not to run (services.missed):
        # a lease that expired on its last attempt, claimed in the pause, ends SKIPPED then.
        self._paused_claim = paused_claim or (lambda run: lifecycle.PausedClaim.NONE)
        # Runs for external workers wait in the claimable index, not on a queue: waiting long
        # is not a lost message, and only the retry policy's max age ends the wait.
        self._is_external = is_external or (lambda run: False)
        self._tenants: OrderedDict[str, str] = OrderedDict()  # job id -> tenant, most recent last
        # The highest shard count the definitions table records (None: not known), read at
        # most once a minute: open runs written under a higher shardCount keep their shard.
        self._recorded_shard_count = recorded_shard_count or (lambda: None)
        self._in_use: tuple[datetime, int] | None = None
        self._paused = 0.0  # seconds paused in the current shard's pass (MAX_PAUSES_PER_PASS_SECONDS)
        # The outbox's publish (services.outbox.Outbox.publish: marks each run QUEUED, sends
        # it, returns the keys not sent). A repaired run that is publishable is sent by the
        # repair itself, not only by its write's stream record: a stream shard held up by a
        # failing batch, or a lost batch, must not hold up the repair that exists for them.
        # None: the stream record alone publishes it.
        self._publish = publish

    def reconcile_all(self) -> RepairReport:
        report = RepairReport()
        for shard in range(self.shard_count):
            report.add(self.reconcile_shard(shard))
        return report

    def reconcile_shard(self, shard: int) -> RepairReport:
        """Repair `shard`'s overdue runs, and those of the old shards that fold onto it when
        shardCount was lowered below the highest count in use (its runs written before keep
        their shard until they are next written), so no open run is left unrepaired."""
        report = RepairReport()
        self._paused = 0.0
        for each in [shard, *shards_above([shard], self.shard_count, self._shard_count_in_use())]:
            report.add(self._reconcile_one(shard=each))
        return report

    def _shard_count_in_use(self) -> int:
        """The highest shard count in use (at least this reconciler's), re-read every minute;
        when the record cannot be read, the last value read, else this reconciler's own."""
        now = self._clock.now()
        if self._in_use is not None and now - self._in_use[0] < timedelta(minutes=1):
            return self._in_use[1]
        try:
            recorded = self._recorded_shard_count()
        except Exception:
            logger.exception("reading the shard count in use failed")
            return self._in_use[1] if self._in_use is not None else self.shard_count
        in_use = max(self.shard_count, recorded or 0)
        self._in_use = (now, in_use)
        return in_use

    def _reconcile_one(self, *, shard: int) -> RepairReport:
        now = self._clock.now()
        report = RepairReport(shards=[shard])
        taken: Counter[str] = Counter()  # keys chosen this tick, per tenant (or job, until known)
        applied: Counter[str] = Counter()  # runs looked at this tick, per tenant
        batch: list[dict[str, Any]] = []
        refused = _Refused()  # what the store refused: tried once more at the end of the pass
        for key in self._in_turn(self._overdue_keys(shard, now), report):
            if report.examined + len(batch) >= self.max_per_shard:
                report.capped += 1
                continue
            lane = self._lane(key)
            if taken[lane] >= self.max_per_tenant:
                report.capped += 1
                continue
            taken[lane] += 1
            batch.append(key)
            if len(batch) >= self.batch_limit:
                self._repair_batch(batch, now, report, taken, applied, refused)
                batch = []
        if batch:
            self._repair_batch(batch, now, report, taken, applied, refused)
        if refused.keys:
            self._retry_refused(refused, now, report, taken, applied)
        self._emit(report)
        return report

    def _retry_refused(
        self,
        refused: _Refused,
        now: datetime,
        report: RepairReport,
        taken: Counter[str],
        applied: Counter[str],
    ) -> None:
        """Read and repair once more what the store refused in this pass, after a pause if the
        pass's budget allows one: each job's keys in one read (the job's oldest first, jobs in
        the order first refused), until MAX_REFUSED_RETRY_READS of those reads are refused
        too; what is refused again, or left, is counted `failed` and waits for the next tick."""
        self._may_pause(READ_PAUSES_SECONDS[0])
        by_job: dict[str, list[dict[str, Any]]] = {}
        for key in refused.keys:
            by_job.setdefault(_job_of(key), []).append(key)
        reads_refused = 0
        for keys in by_job.values():
            if reads_refused >= MAX_REFUSED_RETRY_READS:
                report.failed += len(keys)
                continue
            if not self._repair_batch(keys, now, report, taken, applied, None, refused.first_reads):
                reads_refused += 1

    def _overdue_keys(self, shard: int, now: datetime) -> list[dict[str, Any]]:
        """The shard's overdue keys, at most `max_keys_per_shard`. Raises StorageUnavailable
        when a page is still refused after READ_PAUSES_SECONDS (the shard's tick is lost)."""
        keys: list[dict[str, Any]] = []
        cursor: dict[str, Any] | None = None
        while len(keys) < self.max_keys_per_shard:
            limit = min(self.key_page, self.max_keys_per_shard - len(keys))
            page, cursor = self._read(
                partial(self._runs.overdue_keys, shard, now, limit=limit, cursor=cursor)
            )
            keys += page
            if cursor is None:
                break
        return keys

    def _read(self, read: Callable[[], _T]) -> _T:
        """`read()`, tried again after each of READ_PAUSES_SECONDS while the store refuses it
        as unavailable; the last refusal is raised."""
        for pause in READ_PAUSES_SECONDS:
            try:
                return read()
            except StorageUnavailable:
                if not self._may_pause(pause):
                    raise
                self._metrics.add("ReconcilerReadsRetried")
        return read()

    def _may_pause(self, seconds: float) -> bool:
        """Pause `seconds` if the pass's pauses stay within MAX_PAUSES_PER_PASS_SECONDS."""
        if self._paused + seconds > MAX_PAUSES_PER_PASS_SECONDS:
            return False
        self._paused += seconds
        self._clock.sleep(seconds)
        return True

    def _in_turn(self, keys: list[dict[str, Any]], report: RepairReport) -> Iterator[dict[str, Any]]:
        """The keys, at most `max_per_job` of each job, tenants in turn and within a tenant
        its jobs in turn (each job's oldest first)."""
        shares: dict[str, list[dict[str, Any]]] = {}
        for key in keys:
            share = shares.setdefault(_job_of(key), [])
            if len(share) < self.max_per_job:
                share.append(key)
            else:
                report.capped += 1
        by_tenant: dict[str, list[dict[str, Any]]] = {}
        for job_id, share in shares.items():
            by_tenant.setdefault(self._tenants.get(job_id, job_id), []).extend(share)
        lanes = [list(round_robin(share, key=_job_of)) for share in by_tenant.values()]
        return round_robin((key for lane in lanes for key in lane), key=self._lane)

    def _lane(self, key: dict[str, Any]) -> str:
        job_id = _job_of(key)
        return self._tenants.get(job_id, job_id)

    def _repair_batch(
        self,
        keys: list[dict[str, Any]],
        now: datetime,
        report: RepairReport,
        taken: Counter[str],
        applied: Counter[str],
        refused: _Refused | None,
        first_reads: dict[str, Run] | None = None,
    ) -> bool:
        """Read and repair one batch; False when its read was refused. `taken` counts the keys
        chosen per lane (tenant, or job while its tenant is unknown), `applied` the runs looked
        at per tenant. With `refused`, the read waits out refusals (READ_PAUSES_SECONDS) and
        what the store still refuses (StorageUnavailable: the read, or a run's repair) is added
        to it; without (the pass's second try), the read is made once and what is refused is
        counted `failed`. `first_reads`: the runs of this pass's refused repairs as first read,
        already counted (examined, `applied`)."""
        first_reads = first_reads or {}
        try:
            # The pass's first try of a batch waits out refusals (READ_PAUSES_SECONDS); its
            # second reads once.
            read = (
                self._runs.read_keys(keys)
                if refused is None
                else self._read(lambda: self._runs.read_keys(keys))
            )
        except StorageUnavailable:
            if refused is not None:
                refused.keys += keys
            else:
                logger.exception("reading overdue runs failed again", extra={"count": len(keys)})
                report.failed += len(keys)
            return False
        except Exception:
            logger.exception("reading overdue runs failed", extra={"count": len(keys)})
            report.failed += len(keys)
            return False
        report.unreadable += read.unreadable
        publishable: list[Run] = []
        for run in read.items:
            if run.job_id not in self._tenants:
                # Learnt now: from here on the job's keys count against its tenant.
                self._remember(run.job_id, run.tenant)
                taken[run.tenant] += taken.pop(run.job_id, 0)
            first = first_reads.get(run.run_key)
            if first is None:
                if applied[run.tenant] >= self.max_per_tenant:
                    report.capped += 1  # read before its tenant was known; repaired next tick
                    continue
                applied[run.tenant] += 1
                report.examined += 1
            try:
                saved = self._apply(run, now, report, judged=_judged_from(first, run, now))
            except StorageUnavailable:
                if refused is None:
                    logger.exception(
                        "repair failed again", extra={"run_key": run.run_key, "tenant": run.tenant}
                    )
                    report.failed += 1
                    report.failed_keys.append(run.run_key)
                else:
                    refused.keys.append({"job_id": {"S": run.job_id}, "sk": {"S": key_sk(run.run_key)}})
                    refused.first_reads[run.run_key] = run
                continue
            except Exception:
                # One run must never stop the repairs of the others in its shard (another
                # tenant's, often): record it, count it (RepairsFailed alarms) and go on.
                logger.exception("repair failed", extra={"run_key": run.run_key, "tenant": run.tenant})
                report.failed += 1
                report.failed_keys.append(run.run_key)
                continue
            if saved is not None and _publishable(saved):
                publishable.append(saved)
        self._send(publishable)
        return True

    def _send(self, runs: list[Run]) -> None:
        """Publish the repaired runs now (see `publish`), and those whose send failed once
        more after a pause within the pass's budget (read back: the failed publish put them
        back to PENDING), so that one refused send does not cost a run a whole tick. Best effort: a
        run still not sent is published by its write's stream record, or repaired again at
        the next tick."""
        if self._publish is None or not runs:
            return
        for pause in (READ_PAUSES_SECONDS[0], None):
            try:
                unsent = set(self._publish(runs))
            except Exception:
                logger.exception("publishing repaired runs failed", extra={"count": len(runs)})
                return
            if not unsent or pause is None or not self._may_pause(pause):
                return
            self._metrics.add("RepairSendsRetried", len(unsent))
            try:
                again = [self._runs.get_by_key(key) for key in sorted(unsent)]
            except Exception:
                logger.exception("reading runs whose publish failed", extra={"count": len(unsent)})
                return
            runs = [run for run in again if run is not None and _publishable(run)]
            if not runs:
                return

    def _remember(self, job_id: str, tenant: str) -> None:
        self._tenants[job_id] = tenant
        self._tenants.move_to_end(job_id)
        while len(self._tenants) > MAX_KNOWN_JOBS:
            self._tenants.popitem(last=False)

    def repair(self, run: Run, now: datetime | None = None) -> str | None:
        """Repair one run as read; returns the kind of repair made, or None if none was needed or possible."""
        report = RepairReport()
        saved = self._apply(run, now or self._clock.now(), report)
        if saved is not None and _publishable(saved):
            self._send([saved])
        self._emit(report)
        return next((kind for kind in KINDS if report.count(kind)), None)

    # --- one run ---

    def _apply(
        self, run: Run, now: datetime, report: RepairReport, *, judged: Run | None = None
    ) -> Run | None:
        """Repair `run` if it is overdue, counted in `report`: the run as the repair wrote it,
        or None when none was made. A run that has become late is noted so first (a recorded
        touch, reason `late`: the events consumer tells its notifications), once. This pass
        judges the repair from the run as it was read (or from `judged`, an earlier read of
        it that only this pass's note has changed since); the note is a write, so a later pass
        counts the run's repair deadline from it (a lost message is requeued that much later).
        Raises what the store raises (StorageUnavailable: refused, the repair maybe not made)."""
        read = run if judged is None else judged
        if run.late_unnoticed(now):
            try:
                run = self._runs.commit(
                    run,
                    lambda r: lifecycle.touch(
                        r, now=now, actor=ACTOR, reason=LATE_REASON, late_noticed_at=now
                    ),
                )
            except RunChanged:
                report.stale += 1
                return None
            report.late += 1
            self._metrics.add("RunsLate", 1, Unit.COUNT)
        deadline = repair_deadline(read, self._runs.timings, waits_for_lease=self._runs.waits_for_lease(read))
        if deadline is None:
            return None  # closed since the index was read
        if deadline > now:
            # Looked at early (the entry's check time is the usual finish, not the deadline):
            # move the entry to the deadline so it is not read again every tick, or to the
            # instant the run becomes late, if that comes first.
            watch = run.late_watch
            report.moved += int(
                self._runs.move_check(run, deadline if watch is None else min(deadline, watch))
            )
            return None
        try:
            kind, saved = self._repair(run, now)
        except RunChanged:
            report.stale += 1
            return None
        if kind is None:
            return None
        if kind == DEFERRED:
            report.deferred += 1
            return None
        setattr(report, kind, report.count(kind) + 1)
        report.repaired.append(run.run_key)
        if saved is not None and saved.state is RunState.DEAD:
            report.dead += 1
            self._dead(saved)
        self._metrics.add("RepairLatency", (now - deadline).total_seconds(), Unit.SECONDS)
        since = stranded_since(read) if kind in (REPUBLISH, REQUEUE, LEASE_EXPIRED_KIND) else None
        if since is not None and not (run.state is RunState.QUEUED and self._is_external(run)):
            # From when it should have moved on to this repair (the grace and the tick's wait).
            report.stranded.append((run.run_key, since))
            self._metrics.add("RepairLag", max(0.0, (now - since).total_seconds()), Unit.SECONDS)
        logger.info("run repaired", extra={"run_key": run.run_key, "kind": kind, "state": run.state.value})
        return saved

    def _repair(self, run: Run, now: datetime) -> tuple[str | None, Run | None]:
        """The kind of repair made (None: none applies) and the run as written."""
        commit = self._runs.commit
        if run.state in (RunState.PENDING, RunState.RETRY_WAIT):
            if run.blocked_by:
                return self._check_blocker(run, now)
            # A new write of the same state makes the stream emit a record the outbox acts on.
            return REPUBLISH, commit(
                run, lambda r: lifecycle.touch(r, now=now, actor=ACTOR, reason="republish")
            )
        if run.state is RunState.QUEUED and self._is_external(run):
            # Waiting in the claimable index is not a lost message: only the age rule ends it
            # (counted from when it became due, or from its redrive: a redrive starts a new age).
            refusal = lifecycle.attempt_refusal(run, now)
            if refusal is not None:
                unclaimed = lifecycle.Refusal(
                    "Unclaimed", f"no external worker claimed it: {refusal.message}"
                )
                return LEASE_EXPIRED_KIND, commit(
                    run, lambda r: lifecycle.refused(r, unclaimed, now=now, actor=ACTOR)
                )
            return DEFERRED, self._runs.replace(lifecycle.note(run, now=now, actor=ACTOR, reason="waiting"))
        if run.state is RunState.QUEUED:
            if _requeues_since_claim(run) >= MAX_REQUEUES:
                # Published again and again, never claimed: something is wrong with the run
                # itself (its message keeps failing before the claim). Dead, so people look.
                undeliverable = lifecycle.Refusal(
                    "Undeliverable", f"requeued {MAX_REQUEUES} times without ever being claimed"
                )
                return LEASE_EXPIRED_KIND, commit(
                    run, lambda r: lifecycle.refused(r, undeliverable, now=now, actor=ACTOR)
                )
            # The message was lost or dead-lettered before any claim: publish it again.
            return REQUEUE, commit(run, lambda r: lifecycle.requeue(r, now=now, actor=ACTOR))
        if run.state is RunState.LEASED:
            # Overdue means the lease expired (plus grace) as read. Not a holder write: a
            # heartbeat since the read bumped the rev, so this write fails and the run is skipped.
            paused = self._paused_claim(run)
            return LEASE_EXPIRED_KIND, commit(
                run, lambda r: lifecycle.lease_expired(r, now=now, actor=ACTOR, paused=paused)
            )
        return None, None

    def _check_blocker(self, run: Run, now: datetime) -> tuple[str, Run]:
        assert run.blocked_by is not None
        if run.blocked_by == PAUSED_HOLD:
            return self._check_hold(run, now)
        blocker = self._runs.get_by_key(run.blocked_by)
        if blocker is None or blocker.state in TERMINAL_STATES:
            return UNBLOCKED, self._runs.commit(
                run, lambda r: lifecycle.touch(r, now=now, actor=ACTOR, reason="unblocked", blocked_by=None)
            )
        # Still waiting: move its deadline so it does not crowd the overdue list every minute.
        return DEFERRED, self._runs.replace(lifecycle.note(run, now=now, actor=ACTOR, reason="blocked"))

    def _check_hold(self, run: Run, now: datetime) -> tuple[str, Run]:
        """A run held while its job was paused: still paused, look again later; otherwise the
        resume (or cancel) that should have decided it did not get to it: decide it now."""
        if self._settle_held is not None:
            decided = self._settle_held(run)
            if decided is not None:
                return UNBLOCKED, decided
        return DEFERRED, self._runs.replace(lifecycle.note(run, now=now, actor=ACTOR, reason="held"))

    def _emit(self, report: RepairReport) -> None:
        for kind in KINDS:
            made = report.count(kind)
            if made:  # per kind: the repairs alarm adds the kinds up, the dashboard shows each
                self._metrics.add("RepairsMade", made, dimensions={"kind": kind})
        if report.failed:
            self._metrics.add("RepairsFailed", report.failed)

    def _dead(self, run: Run) -> None:
        if self._on_dead is None:
            return
        try:
            self._on_dead(run)
        except Exception as exc:  # the run is DEAD either way; the copy only feeds the alarm
            logger.warning(
                "dead run not copied to the DLQ", extra={"run_key": run.run_key, "error": str(exc)}
            )


def _publishable(run: Run) -> bool:
    """Waiting for a publish: PENDING or RETRY_WAIT and not blocked behind another run or a
    pause (services.outbox publishes what is due within the SQS delay limit)."""
    return run.state in (RunState.PENDING, RunState.RETRY_WAIT) and run.blocked_by is None


def _requeues_since_claim(run: Run) -> int:
    count = 0
    for entry in reversed(run.history):
        if entry.target is RunState.LEASED or entry.source is RunState.DEAD:
            break  # a claim, or a redrive, starts the count again
        if entry.reason == "requeue":
            count += 1
    return count


def _judged_from(first: Run | None, again: Run, now: datetime) -> Run | None:
    """The read a repair tried again is judged from: its first read when the only write
    since is this pass's late note (which would otherwise move its repair deadline on), else
    None (the run as read again)."""
    if (
        first is not None
        and again.rev == first.rev + 1
        and first.late_unnoticed(now)
        and again.late_noticed_at == now
    ):
        return first
    return None


def _job_of(key: dict[str, Any]) -> str:
    return str(key["job_id"]["S"])
