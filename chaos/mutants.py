"""Mutants of the pipeline: each breaks one promise by patching ONE dotted name, and the
checker must catch it on its figure. `make chaos-selftest` runs them (chaos.selftest); a
mutant the checker survives fails the build.

Every patch target is one dotted attribute in the MUTANTS table below, with what it breaks:
when the pipeline is rewritten, re-point the target (and keep the replacement's meaning).
A replacement is built from the original attribute, so a mutant breaks only some runs (a
hash of the run key picks them) and the rest of the world runs as usual."""

from __future__ import annotations

import contextlib
import pkgutil
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from unittest import mock

Replacement = Callable[[Any], Any]  # the original attribute -> what replaces it


def _some(run_key: str, one_in: int = 3) -> bool:
    """A fixed share of the runs, picked by their key (the same runs every time)."""
    return zlib.crc32(run_key.encode()) % one_in == 0


def _success_without_effect(original: Any) -> Any:
    def run(self: Any, target: Any, invocation: Any) -> Any:
        if _some(invocation.run_key):
            return {"acted": invocation.run_key}  # the handler is never called
        return original(self, target, invocation)

    return run


def _dead_without_attempt(original: Any) -> Any:
    from jobsched.domain.lifecycle import Refusal

    def attempt_refusal(run: Any, at: Any) -> Any:
        if run.attempt == 0 and _some(run.run_key):
            return Refusal("RetriesExhausted", "mutant: refused before any attempt")
        return original(run, at)

    return attempt_refusal


def _overlap_ignored(original: Any) -> Any:
    from jobsched.domain.overlap import OverlapVerdict

    def overlap_verdict(policy: Any, earlier: Any, now: Any) -> Any:
        return OverlapVerdict.RUN  # never skipped, never buffered

    return overlap_verdict


def _overlap_walk_gives_up(original: Any) -> Any:
    def latest_ran_before(self: Any, run: Any, *, page_size: int = 100, max_pages: int = 40) -> Any:
        # One record a page, one page: a walk that meets a pause's SKIPPED occurrence first
        # stops there and answers "no earlier run" as if it had reached the job's start.
        earlier, _ = original(self, run, page_size=1, max_pages=1)
        return earlier, True

    return latest_ran_before


def _deadline_recorded_early(original: Any) -> Any:
    def record_deadline(precise_now: Any, remaining_seconds: float, lifetime_seconds: float) -> Any:
        return precise_now + timedelta(seconds=1)  # the record ends a second after it is written

    return record_deadline


def _fold_counts_completions_runs(original: Any) -> Any:
    from jobsched.domain.runs import RunState

    def succeeded(run: Any) -> int:
        return 1 if run.state is RunState.SUCCEEDED else 0  # a redriven run's success too

    return succeeded


def _missed_occurrence_dropped(original: Any) -> Any:
    def chosen(policy: Any, missed: Any, window_edge: Any) -> set[Any]:
        picked = original(policy, missed, window_edge)
        return set() if len(picked) == 1 else picked  # run-once's one run is dropped

    return chosen


def _stale_fence_accepted(original: Any) -> Any:
    from .faults import FINISHING

    def put(self: Any, new: Any, read: Any, *, holder: bool) -> Any:
        if not holder or new.state not in FINISHING:
            return original(self, new, read, holder=holder)
        current = self.get_by_key(new.run_key)
        if current is None or current.fence == read.fence:
            return original(self, new, read, holder=holder)
        # A holder's ending lands on whatever is there now, whatever its fence.
        blind = new.model_copy(update={"history": [*current.history, new.history[-1]]})
        return original(self, blind, current, holder=False)

    return put


def _tenant_limit_ignored(original: Any) -> Any:
    def claim(self: Any, read: Any, change: Any, *, now: Any, holders: Any = None) -> Any:
        return self._runs.commit(read, change)  # claimed without taking a slot

    return claim


def _result_save_dropped(original: Any) -> Any:
    def save(self: Any, current: Any, result: Any) -> bool:
        return True  # says it saved, saved nothing

    return save


def _webhook_sent_twice(original: Any) -> Any:
    from jobsched.domain.errors import ExecutionError

    def send(self: Any, target: Any, invocation: Any) -> Any:
        if _some(invocation.run_key):
            with contextlib.suppress(ExecutionError):
                original(self, target, invocation)  # a first request whose answer is dropped
        return original(self, target, invocation)

    return send


def _redrive_fix_not_written(original: Any) -> Any:
    def fields(self: Any) -> dict[str, Any]:
        # The history names the fix; the run keeps its old payload.
        return {name: value for name, value in original(self).items() if name != "payload"}

    return fields


def _refused_event_dropped(original: Any) -> Any:
    def send(self: Any, request: Any, report: Any) -> Any:
        self._put(request, report)  # one call; what the bus refused is never sent again
        return None

    return send


def _refused_notice_dropped(original: Any) -> Any:
    def _send(self: Any, batch: Any) -> Any:
        self._attempts = 1  # one call; what the queue refused is never sent again
        original(self, batch)
        return []  # and taken for queued

    return _send


def _late_never_noted(original: Any) -> Any:
    def late_unnoticed(self: Any, now: Any) -> bool:
        return False if _some(self.run_key, 2) else bool(original(self, now))

    return late_unnoticed


def _event_sequence_ignores_dropped(original: Any) -> Any:
    def sequence_of(run: Any, index: int) -> int:
        return index  # the entries the history budget dropped no longer counted

    return sequence_of


def _event_time_of_publishing(original: Any) -> Any:
    import itertools
    from datetime import timedelta

    published = itertools.count()

    def run_event(stack: str, run: Any, entry: Any, sequence: int, event_type: Any) -> Any:
        event = original(stack, run, entry, sequence, event_type)
        # When it was published, not when the transition happened: a redelivery differs.
        return event.model_copy(update={"time": entry.at + timedelta(seconds=next(published))})

    return run_event


def _no_idempotency(original: Any) -> Any:
    def record_of(key: str, run: Any, *, fence: int, now: Any) -> Any:
        return None  # no in-progress record or saved result is ever found on the run

    return record_of


def _repairs_late(original: Any) -> Any:
    def timings(**overrides: Any) -> Any:
        # The reconciler waits four minutes past a run's due instant or lease expiry.
        return original(
            **{"publish_grace": timedelta(minutes=4), "lease_grace": timedelta(minutes=4), **overrides}
        )

    return timings


def _held_run_not_judged(original: Any) -> Any:
    from jobsched.domain.overlap import Overlap

    def applies(run: Any, *, claimed: bool = False) -> bool:
        # Judged only while its fence is 0: an occurrence claimed in its job's pause and held
        # (its attempt given back, its fence kept) is released at the resume unjudged, and
        # never judged under a claim (whose fence is above 0).
        judged = run.policies.overlap is not Overlap.ALLOW and run.previous_run_key is not None
        return judged and run.fence == 0

    return applies


def _outbox_retry_not_sent(original: Any) -> Any:
    def marked_from(image: Any, current: Any, actor: str) -> bool:
        return False  # a retried record finds its run marked: taken for sent

    return marked_from


def _put_back_record_failed(original: Any) -> Any:
    def publish_records(self: Any, runs: list[Any]) -> list[str]:
        return list(self.publish_detailed(runs).failed)  # put-back runs fail their records too

    return publish_records


def _running_effect_frees_its_slot(original: Any) -> Any:
    def effect_open(run: Any, fence: int, now: Any) -> bool:
        return False  # a release frees the slot of an effect still running

    return effect_open


def _unlanded_claim_taken_over(original: Any) -> Any:
    def worth_checking(self: Any, cutoff: Any) -> bool:
        return True  # every holder is judged at once, a claim not landed yet among them

    return worth_checking


def _slot_taken_from_live_holder(original: Any) -> Any:
    def holder_over(self: Any, tenant: str, holder: Any, now: Any) -> bool:
        return True  # a slot whose hint has passed is taken without reading its holder's run

    return holder_over


def _effect_outlives_invocation(original: Any) -> Any:
    def outlast(self: Any, future: Any, time_left: Any) -> None:
        return None  # returns while the effect it stopped waiting for still runs

    return outlast


def _resume_edge_left_undecided(original: Any) -> Any:
    def missed_verdict(self: Any, scheduled_for: Any) -> Any:
        # Only an occurrence inside a recorded pause is decided: one held at or just after
        # the resume's instant (its own second included) is settled alone, as a missed one.
        for window in reversed(self.missed_windows):
            verdict = window.runs(scheduled_for)
            if verdict is not None:
                return verdict
        return None

    return missed_verdict


def _paused_claim_counted(original: Any) -> Any:
    return timedelta(days=365)  # no claim is ever deep in a pause: each one spends an attempt


@dataclass(frozen=True)
class Mutant:
    name: str
    target: str  # ONE dotted attribute: re-point it when the code it names moves
    replacement: Replacement
    figure: str  # the must-be-0 figure that must catch it
    world: str  # which selftest world exercises it (chaos.selftest.WORLDS)


MUTANTS: tuple[Mutant, ...] = (
    # A SUCCEEDED run whose handler was never called: the target runner answers by itself.
    Mutant("success-without-effect", "jobsched.targets.TargetRunner.run",
           _success_without_effect, "missing_effects", "policies"),
    # A run declared DEAD before any attempt: the one refusal rule refuses a fresh run.
    Mutant("dead-without-attempt", "jobsched.domain.lifecycle.attempt_refusal",
           _dead_without_attempt, "dead_untried", "policies"),
    # `skip`/`buffer-one` not applied (by the worker or the lease API: one pipeline).
    Mutant("overlap-ignored", "jobsched.services.attempt.overlap_verdict",
           _overlap_ignored, "overlap_violations", "policies"),
    # An occurrence its job's pause held is released by the resume without `skip`/`buffer-one`.
    Mutant("held-run-not-judged", "jobsched.services.attempt.applies",
           _held_run_not_judged, "overlap_violations", "paused-overlap"),
    # The overlap walk stops at the first SKIPPED record of a pause and reports no earlier
    # run: the next occurrence runs beside a live one behind the pause's skips.
    Mutant("overlap-walk-gives-up", "jobsched.store.runs.RunStore.latest_ran_before",
           _overlap_walk_gives_up, "overlap_violations", "pause-skips"),
    # The in-progress record ends a second after it is written, not at the deadline.
    Mutant("deadline-recorded-early", "jobsched.services.attempt.record_deadline",
           _deadline_recorded_early, "duplicate_effects", "deaths"),
    # Resume under `run-once` runs none of the made-ahead runs of the pause.
    Mutant("missed-occurrence-dropped", "jobsched.services.missed.chosen",
           _missed_occurrence_dropped, "missed_run_violations", "pauses"),
    # A claim made deep in its job's pause whose worker died spends its attempt: a run with
    # none left dies instead of being decided by the resume.
    Mutant("paused-claim-counted", "jobsched.services.missed.PAUSE_CLAIM_MARGIN",
           _paused_claim_counted, "missed_run_violations", "paused-claims"),
    # A run held as its job resumed, of an occurrence at or after the resume's instant (the
    # job was active then), is SKIPPED as missed under `run-once` and `skip`: it never runs.
    Mutant("resume-edge-left-undecided", "jobsched.domain.models.Job.missed_verdict",
           _resume_edge_left_undecided, "missed_run_violations", "pauses"),
    # A holder's final write lands although another attempt's claim superseded its fence.
    Mutant("stale-fence-accepted", "jobsched.store.runs.RunStore._put",
           _stale_fence_accepted, "stale_fence_writes", "deaths"),
    # A claim takes no tenant slot: the limit holds nobody back.
    Mutant("tenant-limit-ignored", "jobsched.store.tenant_slots.TenantSlots.claim",
           _tenant_limit_ignored, "tenant_limit_exceeded", "limits"),
    # A lost-lease worker's result is not saved on the run: the holder acts again.
    Mutant("result-save-dropped", "jobsched.store.run_idempotency.RunIdempotency.save",
           _result_save_dropped, "duplicate_effects", "deaths"),
    # The effect's records are never found: a second claim acts at once, nothing replays.
    Mutant("no-idempotency", "jobsched.store.run_idempotency.record_of",
           _no_idempotency, "duplicate_effects", "deaths"),
    # Stranded runs (a lost publish, a dead worker) repaired minutes late: the restart goal.
    Mutant("repairs-late", "jobsched.store.runs.RepairTimings",
           _repairs_late, "restart_goal_missed", "repairs"),
    # An attempt that stopped waiting for its effect returns while the effect still runs:
    # on Lambda the thread is frozen with the environment and goes on in a later invocation.
    Mutant("effect-outlives-invocation", "jobsched.services.attempt.Attempts._outlast",
           _effect_outlives_invocation, "effects_past_deadline", "slow-effects"),
    # An attempt that stopped waiting for its effect frees its tenant slot: another run of
    # the tenant starts beside the effect still running.
    Mutant("running-effect-frees-slot", "jobsched.store.tenant_slots._effect_open",
           _running_effect_frees_its_slot, "tenant_limit_exceeded", "slow-effects"),
    # A slot is judged before its hint has passed: a claim not landed yet loses its slot,
    # and lands after, live, beside the run that took it.
    Mutant("unlanded-claim-taken-over", "jobsched.store.tenant_slots.SlotHolder.worth_checking",
           _unlanded_claim_taken_over, "tenant_limit_exceeded", "torn-claims"),
    # A slot whose hint has passed is taken without reading its holder's run: a renewed
    # lease, or an effect still running past its attempt, loses its slot to another run.
    Mutant("slot-taken-from-live-holder", "jobsched.store.tenant_slots.TenantSlots._holder_over",
           _slot_taken_from_live_holder, "tenant_limit_exceeded", "renewed-leases"),
    # A batch retried after its outbox died between marks and sends leaves its runs QUEUED
    # without a message: they wait for the 15-minute requeue (the restart goal).
    Mutant("outbox-retry-not-sent", "jobsched.services.outbox._marked_from",
           _outbox_retry_not_sent, "restart_goal_missed", "repairs"),
    # A send refused and put back to PENDING fails its stream record all the same: refused
    # sends spend the batch's retries, the batch is given up, and runs its last, dying try
    # left marked and unsent wait for the 15-minute requeue.
    Mutant("put-back-record-failed", "jobsched.services.outbox.Outbox.publish_records",
           _put_back_record_failed, "restarts_over_goal", "refused-sends"),
    # A redrive with a fixed payload records the fix in the history but leaves the run's
    # payload as it was: the next attempts repeat the broken call.
    Mutant("redrive-fix-not-written", "jobsched.domain.models.RunFix.fields",
           _redrive_fix_not_written, "fixes_ignored", "redrives"),
    # The events consumer takes an entry the bus refused for sent: its event is never published.
    Mutant("refused-event-dropped", "jobsched.services.events.EventPublisher._send",
           _refused_event_dropped, "events_lost", "events"),
    # A run's transitions numbered in its stored history only: once the byte budget drops old
    # entries, a new transition takes a number already published, and is taken for it.
    Mutant("event-sequence-ignores-dropped", "jobsched.domain.events.sequence_of",
           _event_sequence_ignores_dropped, "events_lost", "events"),
    # An event stamped when it is published: the same id comes again with other contents.
    Mutant("event-time-of-publishing", "jobsched.domain.events._run_event",
           _event_time_of_publishing, "events_conflicting", "events"),
    # The events consumer takes a notification the queue refused for queued: it is never sent.
    Mutant("refused-notice-dropped", "jobsched.services.notifications.NotificationQueue._send",
           _refused_notice_dropped, "notices_lost", "late"),
    # The reconciler never finds some runs late: their tenant is never told.
    Mutant("late-never-noted", "jobsched.domain.runs.Run.late_unnoticed",
           _late_never_noted, "late_untold", "late"),
    # A fold counts every success, those its completions count too (redriven, manual and
    # backfill runs): the job's count holds them twice.
    Mutant("fold-counts-completions-runs", "jobsched.domain.run_counts._succeeded",
           _fold_counts_completions_runs, "fold_counts_off", "redrives"),
    # The worker's HTTP client sends a webhook twice: the receiver sees both.
    Mutant("webhook-sent-twice", "jobsched.targets.http.HttpTargetClient.send",
           _webhook_sent_twice, "duplicate_effects", "webhooks"),
)  # fmt: skip

BY_NAME = {mutant.name: mutant for mutant in MUTANTS}


@contextlib.contextmanager
def applied(name: str) -> Iterator[Mutant]:
    """Patch the named mutant's one target for the duration."""
    mutant = BY_NAME[name]
    original = pkgutil.resolve_name(mutant.target)
    with mock.patch(mutant.target, mutant.replacement(original)):
        yield mutant
