"""One attempt of one run: admit -> claim -> decide -> execute -> complete.

The one pipeline for the Lambda worker (services.worker: the effect runs here, in this
process, while a heartbeat renews the lease) and for the external-worker lease API
(services.runs: the effect runs in the caller's worker, which heartbeats and completes over
HTTP). What differs is who executes; every rule before and after the effect is here once:

- admit: the run is claimable, due, allowed by its overlap policy (domain.overlap: every
  earlier run of the job that may still be executing is found, not only the previous one),
  and another attempt may start (lifecycle.attempt_refusal; DEAD otherwise);
- claim: a new fence and lease, conditional on the run as read;
- check: the job, read after the claim: a pause or cancel acknowledged before this read
  stops the run before its effect; the run's definition is resolved with it
  (services.definitions: one that cannot be found ends the run DEAD `DefinitionMissing`);
- decide: domain.effects.effect_verdict — start the effect, replay a saved result, or wait
  for an earlier attempt's invocation deadline;
- execute and complete: `execute_here` runs the effect under Powertools idempotency with its
  records on the run (store.run_idempotency), bounded by the run's timeout and the
  invocation's deadline, and never leaves the effect running when it returns; an external
  worker executes, then `complete` ends its attempt under its fence.

Guarantees: no write after the claim lands without the claim's fence; no effect starts while
another attempt's in-progress record may be live; a result the completion could not record
is saved and replayed, never acted again; an effect never outlives the invocation that
recorded its deadline."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
)

from ..domain import lifecycle
from ..domain.budget import storable_result
from ..domain.effects import EffectDecision, effect_verdict, excluded_until, record_deadline
from ..domain.errors import AmbiguousError, DefinitionMissing, ExecutionError, StorageUnavailable
from ..domain.instants import Clock
from ..domain.metrics import NO_METRICS, Metrics
from ..domain.models import DeliveryGuarantee, JobState
from ..domain.overlap import (
    OVERLAP_WALK_LIMIT,
    OverlapVerdict,
    applies,
    earlier_run_key,
    effect_may_run,
    overlap_verdict,
)
from ..domain.runs import CLAIMABLE_STATES, PAUSED_HOLD, Run, RunState
from ..observability import logger
from ..store.definitions import DefinitionStore
from ..store.run_idempotency import RunIdempotency, envelope
from ..store.runs import RunChanged, RunStore
from ..store.tenant_slots import SlotHolder
from ..targets import Invocation, TargetRunner
from ..threads import start_daemon
from .completion import Completer, Ending
from .definitions import DefinitionResolver
from .missed import paused_claim

# A message this early is waited out; earlier, it is deferred.
CLOCK_SKEW = timedelta(seconds=2)
# Of the invocation's time, kept back after the effect for the completion (retried while the
# store throttles) and for the invocation to return.
COMPLETION_RESERVE = 3.0
# Why an attempt is given back whose lease ended before its effect could start.
LEASE_ENDED_BEFORE_EFFECT = "its lease had ended before its effect"
# An attempt given back before its effect (what precedes it could not be read or written) is
# published again GIVE_BACK_SECONDS later, doubled for each earlier give-back of the run up to
# GIVE_BACK_MAX_SECONDS, so a store that keeps refusing is not met by a claim every 5 s; the
# give-back write itself is tried again after each of GIVE_BACK_RETRIES.
GIVE_BACK_SECONDS = 5
GIVE_BACK_MAX_SECONDS = 120
GIVE_BACK_RETRIES = (0.2, 1.0)


class AttemptOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # overlap policy
    # Not due yet, buffered behind a running run, tenant at its limit, or (the Lambda worker)
    # its message kept for after a lease its holder never renewed.
    DEFERRED = "deferred"
    DUPLICATE = "duplicate"  # finished or leased by another worker: nothing to do
    STALE = "stale"  # our fence was superseded before we could complete
    HELD = "held"  # its job was paused: held for resume to decide (missedRuns)


_OUTCOME_OF_STATE = {
    RunState.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    RunState.RETRY_WAIT: AttemptOutcome.RETRY_SCHEDULED,
    RunState.DEAD: AttemptOutcome.DEAD,
    RunState.CANCELLED: AttemptOutcome.CANCELLED,
    RunState.PENDING: AttemptOutcome.HELD,
    RunState.SKIPPED: AttemptOutcome.SKIPPED,
}


@dataclass
class AttemptResult:
    outcome: AttemptOutcome
    run: Run | None = None
    error_class: str | None = None
    start_lag: float | None = None  # seconds from due to claim
    duration: float | None = None  # seconds the effect took
    wait_seconds: float | None = None  # DEFERRED: how long until the run should be looked at again
    # DEFERRED: the message was left in its queue to come back (the handler must not
    # acknowledge it: it is reported as a batch item failure).
    redeliver: bool = False


def ended(ending: Ending) -> AttemptResult:
    outcome = _OUTCOME_OF_STATE[ending.state] if ending.state is not None else AttemptOutcome.STALE
    if outcome is AttemptOutcome.HELD and ending.run is not None and ending.run.blocked_by != PAUSED_HOLD:
        outcome = AttemptOutcome.DEFERRED  # given back or buffered under its claim, not held
    return AttemptResult(outcome, ending.run, error_class=ending.error_class)


class Admission(StrEnum):
    GO = "go"  # claim it
    NOTHING = "nothing"  # finished, leased by a live worker, held or chained
    NOT_DUE = "not_due"
    BUFFERED = "buffered"
    ENDED = "ended"  # skipped or dead: `ending` says how


@dataclass(frozen=True)
class Admitted:
    admission: Admission
    run: Run | None
    ending: Ending | None = None
    wait_seconds: float = 0.0


class EffectStillRunning(AmbiguousError):
    """The attempt stopped waiting for the effect at its timeout; the effect may still be
    executing (its in-progress record stays until the invocation's deadline)."""

    error_class = "Timeout"


class _Lease:
    """The attempt's view of its lease, shared with the heartbeat thread."""

    def __init__(self, run: Run) -> None:
        self._lock = threading.Lock()
        self._run = run

    @property
    def run(self) -> Run:
        with self._lock:
            return self._run

    def update(self, run: Run) -> None:
        with self._lock:
            self._run = run


class _TimeLeft:
    """The one thing Powertools' idempotency asks of a Lambda context: the time left, here the
    attempt's (whatever its caller's context is), in milliseconds, never negative."""

    def __init__(self, seconds_left: Callable[[], float]) -> None:
        self._seconds_left = seconds_left

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int(self._seconds_left() * 1000))


class Attempts:
    """The attempt pipeline over the stores. `records_lifetime` bounds an in-progress record
    (Powertools' expiry); `metrics` counts what the pipeline refuses or repeats."""

    def __init__(
        self,
        definitions: DefinitionStore,
        runs: RunStore,
        completer: Completer,
        clock: Clock,
        *,
        metrics: Metrics = NO_METRICS,
        records_lifetime: timedelta = timedelta(days=1),
    ) -> None:
        self._definitions = definitions
        self._runs = runs
        self._completer = completer
        self._clock = clock
        self._metrics = metrics
        self.records_lifetime = records_lifetime
        # The slots a claim takes are the ones its ending releases: the completer's.
        self._slots = completer.slots
        self._resolver = DefinitionResolver(definitions)

    @property
    def completer(self) -> Completer:
        return self._completer

    @property
    def resolver(self) -> DefinitionResolver:
        """The definitions of runs that reference their job's (a process-wide snapshot cache)."""
        return self._resolver

    # --- admit ---

    def admit(self, run: Run | None, now: datetime, *, actor: str) -> Admitted:
        """May an attempt of `run` (as read) be claimed now? NOTHING: nothing to do (finished,
        leased by a live worker, held, chained); NOT_DUE / BUFFERED: look again after
        `wait_seconds`; ENDED: the run was skipped by its overlap policy or is DEAD (no further
        attempt may start), `ending` says how; GO: claim it."""
        if run is None or not lifecycle.claimable(run, now):
            return Admitted(Admission.NOTHING, run)
        if run.state in CLAIMABLE_STATES and run.due_at > now + CLOCK_SKEW:
            return Admitted(Admission.NOT_DUE, run, wait_seconds=(run.due_at - now).total_seconds())
        if applies(run):
            blocker = self._earlier_open(run, now)
            verdict = overlap_verdict(run.policies.overlap, blocker, now)
            if verdict is OverlapVerdict.BUFFER:
                return Admitted(Admission.BUFFERED, run, wait_seconds=5)
            if verdict is OverlapVerdict.SKIP and not self._job_paused(run):
                assert blocker is not None
                ending = self._completer.skip(run, "overlap", actor=actor, overlapped_by=blocker.run_key)
                return Admitted(Admission.ENDED if ending.run else Admission.NOTHING, run, ending)
        refusal = lifecycle.attempt_refusal(run, now)
        if refusal is not None:
            # No further attempt may start (its worker died holding the last one, it is too
            # old, or at-most-once and an earlier attempt may have acted): dead, not claimed.
            if run.state is RunState.LEASED:
                self._metrics.add("LeasesExpired")
                # Its last attempt claimed in its job's pause started nothing: held for the
                # resume, given back, or SKIPPED as the resume decided (missed.paused_claim).
                paused = paused_claim(self._definitions, run)
                ending = self._completer.write(
                    run, lambda r: lifecycle.lease_expired(r, now=now, actor=actor, paused=paused), actor
                )
            else:
                ending = self._completer.dead(run, refusal, actor=actor)
            return Admitted(Admission.ENDED, run, ending)
        return Admitted(Admission.GO, run)

    def buffered_behind(self, run: Run, now: datetime) -> Run | None:
        """The running earlier run that buffers `run` under `overlap: buffer-one` now (what
        `admit` would answer BUFFERED for), or None: read, never written."""
        if not lifecycle.claimable(run, now) or run.due_at > now + CLOCK_SKEW or not applies(run):
            return None
        blocker = self._earlier_open(run, now)
        if overlap_verdict(run.policies.overlap, blocker, now) is OverlapVerdict.BUFFER:
            return blocker
        return None

    def _job_paused(self, run: Run) -> bool:
        """Whether the run's job is paused (read before an overlap skip): an occurrence of a
        paused job is the pause's to decide (held, then run or SKIPPED as `missedRuns` says at
        the resume), never skipped by the overlap policy meanwhile; it goes on to the claim,
        whose job check holds it."""
        job = self._definitions.get(run.job_id)
        return job is not None and job.state is JobState.PAUSED

    def _earlier_open(self, run: Run, now: datetime) -> Run | None:
        """The job's latest earlier run that was not skipped, if it is open or its effect may
        still run (domain.overlap.effect_may_run), read consistently: a run skipped behind a
        live run names it (one read); any other SKIPPED run (a pause's occurrences, one
        record each) is passed with one query for the latest that ran before it
        (RunStore.latest_ran_before), however many lie between."""
        key = earlier_run_key(run)
        for _ in range(OVERLAP_WALK_LIMIT):
            if key is None:
                return None
            earlier = self._runs.get_by_key(key)
            if earlier is not None and earlier.state is RunState.SKIPPED and earlier.overlapped_by is None:
                earlier, answered = self._runs.latest_ran_before(earlier)
                if not answered:
                    break
            if earlier is not None and earlier.state is RunState.SKIPPED:
                key = earlier.overlapped_by
                continue
            if earlier is None:
                return None
            return earlier if earlier.is_open or effect_may_run(earlier, now) else None
        logger.warning("overlap walk gave up", extra={"run_key": run.run_key, "limit": OVERLAP_WALK_LIMIT})
        self._metrics.add("OverlapWalkLimit")
        return None

    # --- claim and check ---

    def claim(self, run: Run, now: datetime, *, owner: str, actor: str, lease_seconds: float) -> Run | None:
        """The run leased to `owner` (a new fence), or None when another writer got there first.
        See `claim_or_current` for the run as stored when the claim lost."""
        return self.claim_or_current(run, now, owner=owner, actor=actor, lease_seconds=lease_seconds)[0]

    def claim_or_current(
        self,
        run: Run,
        now: datetime,
        *,
        owner: str,
        actor: str,
        lease_seconds: float,
        holders: list[SlotHolder] | None = None,
    ) -> tuple[Run | None, Run | None]:
        """(the leased run, None), or (None, the run as stored) when the claim lost to another
        write: a claim is conditioned on the run as read, and a write that changed nothing a
        claim depends on (the outbox's QUEUED mark, a repair's touch) makes it lose too; the
        caller may admit and claim the stored run again. With a tenant limit the claim takes
        one of the tenant's slots first (store.tenant_slots); `holders`, the
        tenant's slots as the caller just read them, spare the claim's first read of them
        (TenantSlots.claim says what a read that old can and cannot miss).
        Raises TenantAtLimit when the tenant's slots are all held: nothing was written."""
        if run.state is RunState.LEASED:
            self._metrics.add("LeasesExpired")

        token = secrets.token_hex(8)

        def change(r: Run) -> Run:
            return lifecycle.claim(
                r, now=now, owner=owner, actor=actor, lease_seconds=lease_seconds, token=token
            )

        try:
            if self._slots is not None and self._slots.limit > 0:
                return self._slots.claim(run, change, now=now, holders=holders), None
            return self._runs.commit(run, change), None
        except RunChanged as exc:
            return None, exc.current
        except lifecycle.TransitionRefused:
            return None, None

    def check_job(self, leased: Run, *, actor: str) -> Run | Ending:
        """Read after the claim: to go on, `leased` holding the target and payload its effect
        runs with (services.definitions, resolved with the job this check read); otherwise
        the Ending of a run cancelled (job cancelled or gone), held (job paused), SKIPPED as
        missed, stopped by its overlap policy judged again under the claim
        (`_overlap_under_claim`), DEAD `DefinitionMissing` (the definition it was made from
        is found nowhere), or given back because the check could not be made or the claim
        landed after its lease had ended (`give_back`), and no effect may start.

        Raises StorageUnavailable only when even the give-back could not be written: the run
        is then left LEASED under a lease nobody renews, and comes back at its expiry."""
        late = self._landed_late(leased, actor=actor)
        if late is not None:
            return late
        try:
            job = self._definitions.get(leased.job_id)
            stopped = self._completer.before_effect(leased, job, actor=actor)
            if stopped is not None:
                return stopped
            stopped = self._overlap_under_claim(leased, actor=actor)
            if stopped is not None:
                return stopped
            try:
                return self._resolver.resolved(leased, job)
            except DefinitionMissing as missing:
                self._metrics.add("DefinitionsMissing")
                return self._completer.fail(leased, missing, actor=actor)
        except StorageUnavailable:
            return self.give_back(leased, actor=actor)

    def _landed_late(self, leased: Run, *, actor: str) -> Ending | None:
        """The attempt given back when its lease is already over by this clock: a claim that
        landed late, or a claimer stalled after it (store.tenant_slots: its tenant slot may
        have been taken over since), under which no effect may start. None to go on."""
        if leased.lease_live(self._clock.now()):
            return None
        self._metrics.add("ClaimsLandedLate")
        return self.give_back(leased, actor=actor, why=LEASE_ENDED_BEFORE_EFFECT)

    def give_back(
        self, leased: Run, *, actor: str, why: str = "the check before its effect could not be made"
    ) -> Ending:
        """The attempt `leased` just began, given back before its effect (not counted) and the
        run published again after GIVE_BACK_SECONDS, doubled for each earlier give-back (up to
        GIVE_BACK_MAX_SECONDS): what a read or write refused by the store before the effect
        (a job read, a hold or skip write, an overlap read, the at-most-once start mark, the
        in-progress record) leaves. Left LEASED, the lease's expiry would count an attempt
        that never ran and could end the run DEAD `LeaseExpired` with nothing tried. The write
        is tried again while the store refuses it (GIVE_BACK_RETRIES); raises
        StorageUnavailable when every try was refused. Bounded as every wait is: by the run's
        `retry.maxAgeSeconds`."""
        self._metrics.add("AttemptsGivenBack")
        logger.warning(f"attempt given back: {why}", extra={"run_key": leased.run_key, "fence": leased.fence})
        now = self._clock.now()
        doubled = GIVE_BACK_SECONDS * 2 ** min(lifecycle.times_given_back(leased), 10)
        until = now + timedelta(seconds=min(GIVE_BACK_MAX_SECONDS, doubled))
        return self._completer.write(
            leased,
            lambda r: lifecycle.give_back(r, now=now, actor=actor, until=until),
            actor,
            throttle_delays=GIVE_BACK_RETRIES,
        )

    def _overlap_under_claim(self, leased: Run, *, actor: str) -> Ending | None:
        """The overlap policy judged again once the first attempt is claimed and its job read
        active. `admit` judged the run as read, and left an occurrence of a paused job to its
        pause (the claim's job check holds it): a resume landing between that admit and this
        check released the earlier run the policy waits for, and the two would start side by
        side. An open earlier run now SKIPs the run (`overlap`) or, under `buffer-one` behind
        an executing one, gives the attempt back to be published again in 5 s. None to go on."""
        if not applies(leased, claimed=True):
            return None
        now = self._clock.now()
        until = now + timedelta(seconds=5)
        # A read the store refuses raises StorageUnavailable: `check_job` gives the attempt
        # back rather than leave it LEASED, whose expiry would bring it back as a second
        # attempt, past judging.
        blocker = self._earlier_open(leased, now)
        verdict = overlap_verdict(leased.policies.overlap, blocker, now)
        if verdict is OverlapVerdict.RUN:
            return None
        assert blocker is not None
        self._metrics.add("OverlapJudgedUnderClaim")
        if verdict is OverlapVerdict.SKIP:
            return self._completer.write(
                leased,
                lambda r: lifecycle.overlapped(r, now=now, actor=actor, overlapped_by=blocker.run_key),
                actor,
            )
        return self._completer.write(
            leased, lambda r: lifecycle.buffered(r, now=now, actor=actor, until=until), actor
        )

    # --- decide, for an executor elsewhere (the lease API) ---

    def hand_out(self, leased: Run, *, actor: str) -> Run | Ending:
        """Before a lease is handed to an external worker: the run to hand out (an at-most-once
        run marked started: the effect may start as soon as it is handed out); or the Ending
        of a run completed with its saved result, or waiting for an earlier attempt's
        deadline, which is not handed out; or the Ending of the attempt given back
        (`give_back`) when its lease is already over by this clock (a claim that landed
        late) or the store refused that write. Raises RunChanged if the lease was lost."""
        late = self._landed_late(leased, actor=actor)
        if late is not None:
            return late
        now = self._clock.now()
        verdict = effect_verdict(leased, leased.fence, now)
        try:
            if verdict.decision is EffectDecision.REPLAY:
                return self._completer.succeed(leased, verdict.result, actor=actor)
            if verdict.decision is EffectDecision.WAIT:
                assert verdict.until is not None
                return self._wait_for_record(leased, actor, verdict.until)
            if leased.policies.delivery is DeliveryGuarantee.AT_MOST_ONCE:
                return self._runs.commit(leased, lambda r: lifecycle.effect_started(r, now=now))
        except StorageUnavailable:
            # Nothing was handed out: a mark that landed all the same (a timed-out write) is
            # cleared with the give-back, as no effect can have begun.
            return self.give_back(leased, actor=actor)
        return leased

    def _wait_for_record(self, leased: Run, actor: str, until: datetime) -> Ending:
        now = self._clock.now()
        self._metrics.add("EffectInProgressElsewhere")
        return self._completer.write(
            leased,
            lambda r: lifecycle.in_progress_elsewhere(r, now=now, actor=actor, until=until),
            actor,
            "InProgress",
        )

    # --- execute here (the Lambda worker) ---

    def execute_here(
        self,
        leased: Run,
        runner: TargetRunner,
        *,
        actor: str,
        time_left: Callable[[], float],
        heartbeat: Callable[[_Lease], Any] | None = None,
    ) -> AttemptResult:
        """Run the effect of the claimed run in this process and complete the attempt.
        `leased` holds the definition the effect runs with (`check_job`'s answer).

        `time_left()`: seconds left in the invocation; the in-progress record promises its end,
        and the effect gets min(its timeoutSeconds, what is left less COMPLETION_RESERVE).
        `heartbeat(lease)`: started beside the effect, returns an object with `stop()`.
        Returns when the effect has finished — never while it still runs: an effect still
        running at the invocation's end holds the invocation until it ends (see _outlast)."""
        lease = _Lease(leased)
        # The invocation's end, read once and then followed on the injected clock.
        ends = self._clock.precise() + timedelta(seconds=time_left())

        def left() -> float:
            return (ends - self._clock.precise()).total_seconds()

        deadline = record_deadline(self._clock.precise(), left(), self.records_lifetime.total_seconds())
        budget = max(1.0, min(float(leased.policies.timeout_seconds), left() - COMPLETION_RESERVE))
        invocation = Invocation(
            run_key=leased.run_key,
            job_id=leased.job_id,
            tenant=leased.tenant,
            job_type=leased.job_type,
            scheduled_for=leased.scheduled_for,
            attempt=leased.attempt,
            payload=leased.payload,
            timeout_seconds=budget,
            fence=leased.fence,
            deadline=self._clock.precise() + timedelta(seconds=budget),
        )
        records = RunIdempotency(
            self._runs,
            self._completer,
            lease,
            self._clock,
            actor=actor,
            deadline=deadline,
            time_left=lambda: left() - COMPLETION_RESERVE,
        )
        config = IdempotencyConfig(
            event_key_jmespath="runKey",
            expires_after_seconds=int(self.records_lifetime.total_seconds()),
            # The attempt's own time left: Powertools reads it for the in-progress record (and
            # warns once per process, with a UserWarning, when it has no context to ask).
            lambda_context=cast(Any, _TimeLeft(lambda: left() - COMPLETION_RESERVE)),
        )

        ran: list[bool] = []

        def effect(request: dict[str, Any]) -> dict[str, Any]:
            ran.append(True)
            # What is kept of the answer: always storable (a success whose answer cannot be
            # kept as it is stays a success; `dropped` says what was changed).
            return envelope(storable_result(runner.run(leased.target, invocation)))

        guarded = idempotent_function(
            data_keyword_argument="request", config=config, persistence_store=records
        )(effect)
        started = self._clock.now()
        beat = None
        try:
            beat = heartbeat(lease) if heartbeat is not None else None
            # A daemon thread: the invocation waits for it below (`_await`, `_outlast`), while
            # a process told to stop does not (jobsched.threads).
            future = start_daemon(lambda: guarded(request={"runKey": leased.run_key}), "effect")
            result = self._await(future, budget, lease, records, actor, left, ran)
        finally:
            if beat is not None:
                beat.stop()
        result.duration = (self._clock.now() - started).total_seconds()
        return result

    def _await(
        self,
        future: Future[Any],
        budget: float,
        lease: _Lease,
        records: RunIdempotency,
        actor: str,
        time_left: Callable[[], float],
        ran: list[bool],
    ) -> AttemptResult:
        try:
            answer = self._result(future, budget)
        except FutureTimeout:
            # Stopped waiting: the failure keeps the in-progress record (the effect may still
            # be executing); a result it returns later is saved on the run for the next attempt.
            try:
                ending = self._completer.fail(
                    lease.run,
                    EffectStillRunning(f"the effect did not finish within {budget:.0f} s"),
                    actor=actor,
                    effect_running=True,
                )
            finally:
                # Even when the failure cannot be written: never return with the effect running.
                self._outlast(future, time_left)
            return ended(ending)
        except IdempotencyAlreadyInProgressError:
            until = excluded_until(lease.run) or self._clock.now()
            return ended(self._wait_for_record(lease.run, actor, until))
        except ExecutionError:
            # The effect raised: `_delete_record` wrote the attempt's failure.
            assert records.written is not None
            return ended(records.written.ending)
        except IdempotencyPersistenceLayerError as exc:
            cause = exc.__cause__
            if isinstance(cause, RunChanged):
                current = cause.current
                if (
                    current is not None
                    and current.state is RunState.LEASED
                    and current.fence == lease.run.fence
                ):
                    # Still ours, but its lease ran out before the effect: given back, uncounted.
                    return ended(self.give_back(current, actor=actor, why=LEASE_ENDED_BEFORE_EFFECT))
                # The lease was lost before the effect started: no effect, nothing to write.
                self._metrics.add("StaleFencesRejected")
                return AttemptResult(AttemptOutcome.STALE, current)
            if isinstance(cause, StorageUnavailable) and not ran:
                # The in-progress record was refused: the effect never started. Given back
                # rather than left LEASED (its expiry would count an attempt never made).
                return ended(self.give_back(lease.run, actor=actor))
            # The store failed around the effect (its in-progress or completed record): the
            # record is retried by redelivery; a completed effect whose completion could not
            # be written is repeated only after this invocation's deadline.
            logger.warning(
                "idempotency record not written", extra={"run_key": lease.run.run_key, "error": str(exc)}
            )
            raise (cause if isinstance(cause, Exception) else exc) from None
        if records.written is None:
            if ran:
                # Powertools idempotency is disabled (POWERTOOLS_IDEMPOTENCY_DISABLED): the
                # effect ran without its records; its completion still records it.
                logger.error("idempotency is disabled: the effect ran without its records")
            else:
                # Replayed: the run holds an earlier attempt's saved result; no effect ran.
                self._metrics.add("EffectResultsReplayed")
            ending = self._completer.succeed(lease.run, answer.get("result"), actor=actor)
            return ended(ending)
        if records.written.saved:
            self._metrics.add("StaleFencesRejected")
        return ended(records.written.ending)

    def _outlast(self, future: Future[Any], time_left: Callable[[], float]) -> None:
        """Wait for an effect this attempt stopped waiting for, until the invocation's end.
        Returning while it runs would let Lambda freeze its thread with the environment and
        resume it in a later invocation, past the deadline its record promises; so an effect
        still running at the end holds the invocation until Lambda ends it (a timeout resets
        the execution environment, and the thread with it)."""
        try:
            self._result(future, time_left() - COMPLETION_RESERVE)
            return
        except FutureTimeout:
            pass
        except Exception:
            return  # it raised after the failure was written: nothing left running
        logger.error("effect still running at the invocation's end: holding the invocation until it ends")
        self._metrics.add("EffectsOutlastingInvocation")
        try:
            self._result(future, max(0.0, time_left()) + 5)
        except Exception:  # Lambda ends the invocation first; elsewhere there is nothing better to do
            logger.error("effect outlived its invocation's deadline")

    def _result(self, future: Future[Any], seconds: float) -> Any:
        """The effect's answer once it finishes within `seconds` on the injected clock (what
        it raised, raised). Raises FutureTimeout when it is still running then."""
        finished = threading.Event()
        future.add_done_callback(lambda _: finished.set())
        if not self._clock.wait(finished, seconds):
            raise FutureTimeout()
        return future.result()

    # --- complete, for an executor elsewhere (the lease API) ---

    def complete_success(self, held: Run, result: Any, *, actor: str) -> Ending:
        return self._completer.succeed(held, storable_result(result), actor=actor)

    def complete_failure(self, held: Run, error: ExecutionError, *, actor: str) -> Ending:
        return self._completer.fail(held, error, actor=actor)
