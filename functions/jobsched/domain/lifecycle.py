"""Every change a run can go through, as pure functions: run in, run out.

Each transition is a row of domain.transitions (`@transition`): where it starts, where it
may end, who may write it. Services read a run, call one of these, and hand both to the
store, which writes the new run only if the stored one is still in the state (and, for a
lease holder's row, under the fence) the transition started from. Nothing else writes a run,
so the rules below are the whole of them:

- `attempt_refusal` is the one answer to "may another attempt start?" (attempts, max age,
  at-most-once); the worker, the lease API, the completion and the reconciler all ask it.
- Every transition appends one history entry (`advance`), and every run that leaves here fits
  its byte budget (domain.budget): error text, results and history are bounded in bytes, so no
  run can grow towards DynamoDB's 400 KB item limit however often it is retried or redriven.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .budget import (
    MAX_ERROR_CLASS_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_REASON_BYTES,
    clip_bytes,
    fit,
    storable_result,
)
from .instants import format_instant
from .jitter import retry_delay_seconds
from .models import DeliveryGuarantee
from .runs import CLAIMABLE_STATES, PAUSED_HOLD, TERMINAL_STATES, Run, RunState, Transition, Trigger
from .transitions import TransitionRefused, can_move, transition


@dataclass(frozen=True)
class Refusal:
    """Why no further attempt may start: recorded as the run's error when it goes DEAD."""

    error_class: str
    message: str


# --- the state machine ---


def advance(
    run: Run,
    to_state: RunState,
    /,
    *,
    now: datetime,
    actor: str,
    error_class: str | None = None,
    error_message: str | None = None,
    reason: str | None = None,
    **changes: Any,
) -> Run:
    """Move `run` to `to_state`, recording who, why and under which fence; refuses a move the
    state machine does not have. Same-state moves (a touch) are recorded the same way."""
    if to_state is not run.state and not can_move(run.state, to_state):
        raise TransitionRefused(
            f"run {run.run_key}: {run.state.value} → {to_state.value} is not a transition"
        )
    error_class = clip_bytes(error_class, MAX_ERROR_CLASS_BYTES)
    error_message = clip_bytes(error_message, MAX_ERROR_MESSAGE_BYTES)
    reason = clip_bytes(reason, MAX_REASON_BYTES)
    entry = Transition(
        at=now,
        actor=clip_bytes(actor, MAX_REASON_BYTES) or "unknown",
        source=run.state,
        target=to_state,
        fence=changes.get("fence", run.fence),
        attempt=changes.get("attempt", run.attempt),
        error_class=error_class,
        error_message=error_message,
        reason=reason,
    )
    updates: dict[str, Any] = {
        **changes,
        "state": to_state,
        "updated_at": now,
        "history": [*run.history, entry],
    }
    if error_class is not None:
        updates["last_error_class"] = error_class
        updates["last_error_message"] = error_message
    if reason is not None and to_state in TERMINAL_STATES:
        updates["reason"] = reason  # the run's own `reason` says why it ended; history keeps the rest
    if to_state in TERMINAL_STATES:
        updates.setdefault("finished_at", now)
        updates["lease_owner"] = None
        updates["lease_expires_at"] = None
        updates["blocked_by"] = None  # nothing to wait for once it has ended
    if "result" in updates:
        updates["result"] = storable_result(updates["result"])
    return fit(run.model_copy(update=updates))


# --- may another attempt start? ---


def series_started_at(run: Run) -> datetime:
    """Where a run's age counts from: its first claim in the current attempt series, else when
    it became available — due, or created if later (a backfill of a past occurrence). A redrive
    clears the first claim and is due at once, so a redriven run starts a new age."""
    return run.first_attempt_at or max(run.due_at, run.created_at)


def attempt_refusal(run: Run, at: datetime) -> Refusal | None:
    """None when another attempt of `run` may start at `at`; otherwise why not.

    The one rule for the worker, the lease API, the completion and the reconciler:
    - at-most-once: once an attempt may have started the effect, none may start again;
    - attempts: at most `retry.maxAttempts` in the series;
    - age: none starts more than `retry.maxAgeSeconds` after the series began."""
    retry = run.policies.retry
    if run.policies.delivery is DeliveryGuarantee.AT_MOST_ONCE and run.effect_started_at is not None:
        return Refusal("AtMostOnce", "an earlier attempt started the effect and did not finish")
    if run.attempt >= retry.max_attempts:
        return Refusal("RetriesExhausted", f"all {retry.max_attempts} attempts were used")
    if retry.max_age_seconds is not None and at - series_started_at(run) >= timedelta(
        seconds=retry.max_age_seconds
    ):
        return Refusal("MaxAge", f"no attempt may start {retry.max_age_seconds} s after the first")
    return None


def claimable(run: Run, now: datetime) -> bool:
    """Whether a worker may take the run now: waiting for a worker, or its lease has expired."""
    if run.blocked_by:
        return False
    if run.state in CLAIMABLE_STATES:
        return True
    return run.state is RunState.LEASED and not run.lease_live(now)


# --- transitions ---


@transition("claim")
def claim(
    run: Run, *, now: datetime, owner: str, actor: str, lease_seconds: float, token: str | None = None
) -> Run:
    """A worker takes the run: a new fence, the next attempt, a lease until now + lease_seconds.

    `token` (random, one per claim) makes the claim's item its own: two claimers with the same
    owner claiming from the same read in the same second would otherwise write identical
    items, and the store would take the loser's refusal for a replay of its own write.

    The claim leaves the effect's idempotency record alone: an earlier attempt's in-progress
    record or saved result stays on the run for `effects.effect_verdict` to judge, and the
    attempt writes its own record (`record_in_progress`) only when it may start the effect."""
    if not claimable(run, now):
        raise TransitionRefused(f"run {run.run_key} is {run.state.value} and cannot be claimed now")
    expired = run.state is RunState.LEASED
    return advance(
        run,
        RunState.LEASED,
        now=now,
        actor=actor,
        fence=run.fence + 1,
        attempt=run.attempt + 1,
        lease_owner=owner,
        claim_token=token,
        lease_expires_at=now + timedelta(seconds=lease_seconds),
        first_attempt_at=run.first_attempt_at or now,
        error_class="LeaseExpired" if expired else None,
        reason="previous lease expired" if expired else None,
        deferred_until=None,
    )


@transition("record_in_progress")
def record_in_progress(run: Run, *, now: datetime, until: datetime) -> Run:
    """The lease holder is about to start the effect: its in-progress record (its fence, and
    `until`, its invocation's deadline) replaces any earlier one, which must have expired
    (`effects.effect_verdict` said START). An at-most-once run is marked started in the same
    write. No transition: the lease holder's own note."""
    updates: dict[str, Any] = {"effect_fence": run.fence, "effect_until": until, "updated_at": now}
    if run.policies.delivery is DeliveryGuarantee.AT_MOST_ONCE:
        updates["effect_started_at"] = now
    return run.model_copy(update=updates)


@transition("effect_started")
def effect_started(run: Run, *, now: datetime) -> Run:
    """At-most-once: mark the run before its effect (no transition: the lease holder's own note)."""
    return run.model_copy(update={"effect_started_at": now, "updated_at": now})


def can_save_result(run: Run) -> bool:
    """Open, or DEAD: a redrive reopens a dead run, and replays a result saved on it."""
    return run.is_open or run.state is RunState.DEAD


@transition("save_result")
def save_result(run: Run, *, now: datetime, result: Any) -> Run:
    """The effect finished but its completion cannot record it: the result is kept on the run
    (the completed idempotency record), so the next attempt, or a redrive, replays it. No
    transition: the lease holder's note, or, for an attempt that lost its lease while
    executing, a note on the run as stored (store.run_idempotency decides when that is
    allowed)."""
    # Completed supersedes in progress: the attempt is no longer executing the effect.
    return run.model_copy(
        update={
            "saved_result": storable_result(result),
            "result_saved_at": now,
            "effect_fence": None,
            "effect_until": None,
            "updated_at": now,
        }
    )


def _given_back(run: Run) -> dict[str, Any]:
    """The attempt a claim had just begun, given back before its effect: not counted, the
    lease let go, the holder's in-progress record cleared."""
    return {
        "attempt": max(0, run.attempt - 1),
        "lease_owner": None,
        "lease_expires_at": None,
        **_effect_released(run),
    }


def _effect_released(run: Run) -> dict[str, Any]:
    """The lease holder's in-progress record cleared: its attempt is not executing the effect
    (it never started it, or the effect raised). Another attempt's record is left alone."""
    if run.effect_fence is not None and run.effect_fence == run.fence:
        return {"effect_fence": None, "effect_until": None}
    return {}


@transition("heartbeat")
def heartbeat(run: Run, *, until: datetime) -> Run:
    """The lease holder extends its lease (no history entry: the lease is not a state change)."""
    return run.model_copy(update={"lease_expires_at": until})


@transition("succeed")
def succeed(run: Run, *, now: datetime, actor: str, result: Any) -> Run:
    # Finished: the idempotency records have served their purpose (the run itself answers).
    return advance(
        run,
        RunState.SUCCEEDED,
        now=now,
        actor=actor,
        result=result,
        effect_fence=None,
        effect_until=None,
        saved_result=None,
        result_saved_at=None,
    )


@transition("fail")
def fail(
    run: Run,
    *,
    now: datetime,
    actor: str,
    error_class: str,
    message: str,
    retryable: bool,
    effect_running: bool = False,
) -> Run:
    """The attempt failed: RETRY_WAIT with full-jitter backoff while `attempt_refusal` allows
    the next attempt at its due time; DEAD otherwise (and at once for a permanent error).

    The attempt's in-progress record is released, unless `effect_running` (the effect timed
    out and may still be executing: its record lasts to the invocation's deadline)."""
    released = {} if effect_running else _effect_released(run)
    if retryable:
        retry = run.policies.retry
        delay = retry_delay_seconds(
            run.run_key, max(0, run.attempt - 1), retry.base_seconds, retry.cap_seconds
        )
        next_at = now + timedelta(seconds=max(1, round(delay)))
        refusal = attempt_refusal(run, next_at)
        if refusal is None:
            return _retry_wait(
                run, now=now, actor=actor, error_class=error_class, message=message, due=next_at, **released
            )
        message = _not_retried(run, refusal, message)
    return dead(run, now=now, actor=actor, error_class=error_class, message=message, **released)


def _not_retried(run: Run, refusal: Refusal, message: str) -> str:
    """The message of a retryable failure that gets no further attempt, saying why."""
    if refusal.error_class == "AtMostOnce":
        return f"{message}; not retried: {refusal.message} (at-most-once)"
    if refusal.error_class == "RetriesExhausted":
        attempts = run.policies.retry.max_attempts
        if attempts == 1:
            return f"{message}; not retried (maxAttempts is 1)"
        return f"retries exhausted ({attempts} attempts): {message}"
    return f"{message}; not retried: {refusal.message}"


@transition("in_progress_elsewhere")
def in_progress_elsewhere(run: Run, *, now: datetime, actor: str, until: datetime) -> Run:
    """An earlier attempt's in-progress record excludes this one until `until` (its deadline
    plus the clock-skew grace, `effects.effect_verdict`): that attempt may still be executing
    the effect, so this one does not start it. RETRY_WAIT until then, and the attempt given
    back (none was made)."""
    message = (
        f"an earlier attempt (fence {run.effect_fence}) may be executing the effect"
        f" until {format_instant(run.effect_until or until)}"
    )
    return _retry_wait(
        run,
        now=now,
        actor=actor,
        error_class="InProgress",
        message=message,
        due=max(until, now + timedelta(seconds=1)),
        attempt=max(0, run.attempt - 1),
    )


class PausedClaim(StrEnum):
    """What its job's pause says of a run whose lease ran out (services.missed.paused_claim)."""

    NONE = "none"  # nothing: the lease's expiry counts as an attempt
    SKIP = "skip"  # the job's resume decided this occurrence of its pause does not run
    HOLD = "hold"  # claimed inside the job's pause, still standing: it began no effect
    RELEASE = "release"  # claimed inside a pause since resumed, whose decision lets it run


@transition("lease_expired")
def lease_expired(run: Run, *, now: datetime, actor: str, paused: PausedClaim = PausedClaim.NONE) -> Run:
    """The holder died (its lease is past): RETRY_WAIT due now if another attempt may start,
    else DEAD. For a run the pause decides (`pause_decides`), `paused` may say otherwise: HOLD
    (its claim was made in its job's standing pause, so its worker died before writing the
    hold its check would have: it began nothing) holds it for the resume, the attempt given
    back; RELEASE (claimed in a pause since resumed, whose decision lets it run) gives the
    attempt back and leaves it waiting, due now; SKIP (the resume decided this occurrence
    does not run) with no attempt left makes it SKIPPED as missed, as its next claim would
    have (`missed`), not DEAD."""
    if run.lease_live(now):
        raise TransitionRefused(f"run {run.run_key}: the lease is still live")
    until = format_instant(run.lease_expires_at) if run.lease_expires_at else "unknown"
    message = f"lease held by {run.lease_owner or 'unknown'} expired at {until}"
    began_nothing = {
        "error_class": "LeaseExpired",
        "error_message": f"{message}; claimed while its job was paused, it began nothing",
    }
    if paused is PausedClaim.HOLD and pause_decides(run):
        return _held_for_resume(run, now=now, actor=actor, **began_nothing)
    if paused is PausedClaim.RELEASE and pause_decides(run):
        return advance(
            run, RunState.RETRY_WAIT, now=now, actor=actor, due_at=now, **began_nothing, **_given_back(run)
        )
    refusal = attempt_refusal(run, now)
    if refusal is None:
        return _retry_wait(run, now=now, actor=actor, error_class="LeaseExpired", message=message, due=now)
    if paused is PausedClaim.SKIP and pause_decides(run):
        return _skipped_as_missed(run, now=now, actor=actor)
    # At-most-once names itself: the effect may have run, which is why it is never tried again.
    error_class = "AtMostOnce" if refusal.error_class == "AtMostOnce" else "LeaseExpired"
    return dead(run, now=now, actor=actor, error_class=error_class, message=f"{message}; {refusal.message}")


def _retry_wait(
    run: Run, *, now: datetime, actor: str, error_class: str, message: str, due: datetime, **changes: Any
) -> Run:
    return advance(
        run,
        RunState.RETRY_WAIT,
        now=now,
        actor=actor,
        error_class=error_class,
        error_message=message,
        due_at=due,
        lease_owner=None,
        lease_expires_at=None,
        **changes,
    )


def dead(run: Run, *, now: datetime, actor: str, error_class: str, message: str, **changes: Any) -> Run:
    return advance(
        run, RunState.DEAD, now=now, actor=actor, error_class=error_class, error_message=message, **changes
    )


@transition("refused")
def refused(run: Run, refusal: Refusal, *, now: datetime, actor: str) -> Run:
    """DEAD because `attempt_refusal` said no further attempt may start."""
    return dead(run, now=now, actor=actor, error_class=refusal.error_class, message=refusal.message)


@transition("cancel")
def cancel(run: Run, *, now: datetime, actor: str, reason: str) -> Run:
    return advance(run, RunState.CANCELLED, now=now, actor=actor, reason=reason)


@transition("skip")
def skip(run: Run, *, now: datetime, actor: str, reason: str, overlapped_by: str | None = None) -> Run:
    """Never executed: overlap (behind the open run `overlapped_by`), or missed while its job
    was paused."""
    changes = {"overlapped_by": overlapped_by} if overlapped_by else {}
    return advance(run, RunState.SKIPPED, now=now, actor=actor, reason=reason, **changes)


@transition("defer")
def defer(run: Run, *, now: datetime, actor: str, until: datetime, reason: str) -> Run:
    """A worker hands a run it may not start yet back to the outbox, to be published again at
    `until` (its message is acknowledged: no worker sends a message for it, so no
    worker -> SQS -> worker chain grows): PENDING, whatever it was waiting as. `due_at` stays:
    start lag still counts from it."""
    return advance(
        run, RunState.PENDING, now=now, actor=actor, reason=f"deferred: {reason}", deferred_until=until
    )


@transition("queued")
def queued(run: Run, *, now: datetime, actor: str) -> Run:
    """On its queue (or, for external workers, available to lease)."""
    return advance(run, RunState.QUEUED, now=now, actor=actor)


@transition("hold")
def hold(run: Run, *, now: datetime, actor: str) -> Run:
    """Its job was found paused before the effect: back to PENDING, held (`blocked_by`
    PAUSED_HOLD: not published, not claimable) until resume decides it under `missedRuns`.
    The attempt it had just begun is given back: no effect was started."""
    return _held_for_resume(run, now=now, actor=actor)


HELD_FOR_RESUME = "job paused"  # the reason recorded by a hold for its job's resume


def _held_for_resume(run: Run, *, now: datetime, actor: str, **recorded: Any) -> Run:
    """PENDING, held by its job's pause (`blocked_by` PAUSED_HOLD), the attempt given back."""
    return advance(
        run,
        RunState.PENDING,
        now=now,
        actor=actor,
        reason=HELD_FOR_RESUME,
        blocked_by=PAUSED_HOLD,
        **_given_back(run),
        **recorded,
    )


def pause_decides(run: Run) -> bool:
    """Whether a job's resume decides (`missedRuns`) this run, should it have fallen in the
    pause: a scheduled run in its first series (never redriven) none of whose attempts may
    have begun its effect (`effect_may_have_begun`), whichever attempt this is. An attempt
    claimed while the pause stood was held, or died before the check that would have held
    it (a claim whose worker then crashed counts as an attempt), so it started nothing and
    the resume's decision stands for the next one. One claimed in the pause's first second
    may have read the job before the pause landed and begun its effect: its run's retries
    are the retry policy's, as for a run that started before the pause. A redrive is an
    operator's explicit choice to run it."""
    return run.trigger is Trigger.SCHEDULE and run.redrives == 0 and not effect_may_have_begun(run)


# How an attempt ends from LEASED without having begun an effect of its own: its lease ran
# out (a worker that died after beginning it leaves its in-progress record on the run), or
# another attempt's in-progress record made it wait.
_ENDED_BEFORE_ITS_EFFECT = frozenset({"LeaseExpired", "InProgress"})


def effect_may_have_begun(run: Run) -> bool:
    """Whether an attempt of the run's current series may have begun its effect: an
    in-progress record or a saved result is on the run, it was marked started (at-most-once),
    or an attempt ended from LEASED with its effect's failure (any error but the lease
    running out or another attempt's record). Assumed when the history lost entries."""
    if run.effect_fence is not None or run.result_saved_at is not None or run.effect_started_at is not None:
        return True
    if run.history_dropped:
        return True
    return any(
        entry.source is RunState.LEASED
        and entry.target in (RunState.RETRY_WAIT, RunState.DEAD)
        and entry.error_class not in _ENDED_BEFORE_ITS_EFFECT
        for entry in run.history
    )


@transition("missed")
def missed(run: Run, *, now: datetime, actor: str) -> Run:
    """Claimed after its job's resume decided, under `missedRuns`, that this occurrence (it
    fell while the job was paused) does not run: SKIPPED as missed, no effect started. The
    attempt it had just begun is given back."""
    return _skipped_as_missed(run, now=now, actor=actor)


@transition("overlapped")
def overlapped(run: Run, *, now: datetime, actor: str, overlapped_by: str) -> Run:
    """Claimed, then judged again under its claim: the open earlier run `overlapped_by` skips
    it (`overlap`). The attempt it had just begun is given back, no effect started."""
    return advance(
        run,
        RunState.SKIPPED,
        now=now,
        actor=actor,
        reason="overlap",
        overlapped_by=overlapped_by,
        **_given_back(run),
    )


@transition("buffered")
def buffered(run: Run, *, now: datetime, actor: str, until: datetime) -> Run:
    """Claimed, then judged again under its claim: `buffer-one` behind its job's running run.
    The attempt is given back (no effect started) and the run published again at `until`,
    when it is judged once more."""
    return advance(
        run,
        RunState.PENDING,
        now=now,
        actor=actor,
        reason="deferred: buffered",
        deferred_until=until,
        **_given_back(run),
    )


GIVEN_BACK = "deferred: store unavailable"


@transition("give_back")
def give_back(run: Run, *, now: datetime, actor: str, until: datetime) -> Run:
    """Claimed, but what must be written or read before its effect (its job check, its
    overlap policy, the at-most-once start mark, the in-progress record) was refused by the
    store: the attempt is given back, not counted (no effect started, nothing handed out),
    and the run published again at `until`, when it is admitted and checked once more. A
    start mark or an in-progress record of this attempt that landed although its write
    raised is cleared with it: the effect never began. Left LEASED instead, the lease's
    expiry would count the attempt and could end the run DEAD with nothing tried."""
    return advance(
        run,
        RunState.PENDING,
        now=now,
        actor=actor,
        reason=GIVEN_BACK,
        deferred_until=until,
        effect_started_at=None,
        **_given_back(run),
    )


def times_given_back(run: Run) -> int:
    """How many attempts of the run were given back (`give_back`), as its history still
    shows them (a history past its byte budget may show fewer)."""
    return sum(1 for entry in run.history if entry.reason == GIVEN_BACK)


def _skipped_as_missed(run: Run, *, now: datetime, actor: str, **changes: Any) -> Run:
    """SKIPPED (`paused`): the resume's decision; the attempt begun is given back, its
    effect's records released (none of it started)."""
    return advance(
        run,
        RunState.SKIPPED,
        now=now,
        actor=actor,
        reason="paused",
        **_given_back(run),
        **changes,
    )


@transition("requeue")
def requeue(run: Run, *, now: datetime, actor: str, reason: str = "requeue") -> Run:
    """QUEUED but its message is gone (the reconciler found it lost; the outbox's send
    failed after its mark: `reason` says which): back to PENDING so the outbox publishes it
    again."""
    return advance(run, RunState.PENDING, now=now, actor=actor, reason=reason)


def effect_may_have_run(run: Run) -> bool:
    """An at-most-once run one of whose attempts may have started its effect: reopening it
    would start the effect again."""
    return run.policies.delivery is DeliveryGuarantee.AT_MOST_ONCE and (
        run.effect_started_at is not None or run.last_error_class == "AtMostOnce"
    )


@transition("discard")
def discard(run: Run, *, now: datetime, actor: str, reason: str) -> Run:
    """A DEAD run dismissed: CANCELLED, out of the dead letters (its history keeps why)."""
    return advance(run, RunState.CANCELLED, now=now, actor=actor, reason=reason)


@transition("redrive")
def redrive(
    run: Run, *, now: datetime, actor: str, reason: str | None, fixes: Mapping[str, Any] | None = None
) -> Run:
    """Reopen a DEAD run under the same key with a new attempt series and a new age.

    `fixes`: the run's `target` and/or `payload` replaced for the new series (the caller
    names what changed in `reason`); any other field is refused (ValueError)."""
    fixes = dict(fixes or {})
    unknown = set(fixes) - {"target", "payload"}
    if unknown:
        raise ValueError(f"a redrive can replace only target and payload, not {sorted(unknown)}")
    return advance(
        run,
        RunState.PENDING,
        now=now,
        actor=actor,
        reason=f"redrive: {reason}" if reason else "redrive",
        attempt=0,
        redrives=run.redrives + 1,
        due_at=now,
        first_attempt_at=None,
        effect_started_at=None,
        finished_at=None,
        lease_owner=None,
        lease_expires_at=None,
        **fixes,
        # The idempotency records stay: a saved result is replayed (one effect per run,
        # across redrives), and a live in-progress record still excludes a new attempt.
    )


@transition("touch")
def touch(run: Run, *, now: datetime, actor: str, reason: str, **changes: Any) -> Run:
    """A recorded write that keeps the state: makes the stream show the run again (republish),
    releases a chained run (`blocked_by=None`), or moves its repair deadline on."""
    return advance(run, run.state, now=now, actor=actor, reason=reason, **changes)


@transition("note")
def note(run: Run, *, now: datetime, actor: str, reason: str, **changes: Any) -> Run:
    """An unrecorded write that keeps the state (unblocking a chained run, a deferral's repair-deadline
    move): bookkeeping that a history entry per occurrence would only bloat."""
    return run.model_copy(update={**changes, "updated_at": now})
