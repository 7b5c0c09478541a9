"""The fault-injection harness in `make test`: a small fixed-seed run must come out clean, and
every mutant of the pipeline must make the checker fail (chaos.selftest), so a clean run means
something. The checker's rules are also tried on hand-made evidence (fast)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from jobsched.domain.lifecycle import HELD_FOR_RESUME
from jobsched.domain.models import (
    MAX_MISSED_WINDOWS,
    Job,
    JobSpec,
    Misfire,
    MissedWindow,
    Notification,
    NotifyOn,
    Overlap,
    Policies,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    SqsTarget,
)
from jobsched.domain.runs import LATE_REASON, RunState, Transition, make_run

from chaos import MUST_BE_ZERO, ChaosConfig, FaultRates, run_chaos
from chaos.checker import (
    Ack,
    Evidence,
    StreamAudit,
    TrackedJob,
    _holder_violations,
    _repeated_before_deadline,
    check,
)
from chaos.ledger import LEASE, PERMANENT, Call, Ledger, Sequencer
from chaos.selftest import selftest

from .known_defects import PIPELINE_DEFECTS

pytestmark = pytest.mark.integration

T0 = datetime(2026, 10, 25, 0, 50, tzinfo=UTC)


@pytest.mark.timeout(900)
def test_small_fixed_seed_run_is_clean():
    lines: list[str] = []
    # A lost stream batch needs a second with fresh records, rare in a world this small: at
    # five times the default rate it happens in every run, as the check below requires.
    faults = replace(FaultRates(), lost_stream_batch=0.15)
    report = run_chaos(ChaosConfig(seed=8, runs=150, faults=faults), out=lines.append)
    figures = report.figures
    detail = "\n".join([figures.line(), *map(str, figures.violations[:20]), *report.unexpected])
    assert report.settled, detail
    assert not report.unexpected, detail
    for name in MUST_BE_ZERO:
        if name not in PIPELINE_DEFECTS:
            assert getattr(figures, name) == 0, f"{name}\n{detail}"
    assert figures.due >= 100 and figures.terminal >= 100
    # The faults really happened, and the system really had to defend against them.
    for fault in ("crash_after_effect", "crash_before_effect", "duplicate_delivery", "lost_stream_batch"):
        assert report.faults[fault] > 0, report.faults
    assert report.faults["fleet_leases"] > 0, report.faults
    assert figures.duplicates_suppressed > 0 and figures.repairs > 0


@pytest.mark.timeout(1200)  # about 2 CPU-minutes; longer on a loaded machine
def test_every_mutant_of_the_pipeline_is_caught():
    """`make chaos-selftest`: a mutant the checker survives fails the build."""
    lines: list[str] = []
    verdicts = selftest(out=lines.append)
    survived = [v.mutant.name for v in verdicts if not v.caught]
    assert not survived, "\n".join(lines)


# --- the checker's rules on hand-made histories (fast) ---


def _t(source, target, fence, actor, seconds=0):
    return Transition(
        at=T0 + timedelta(seconds=seconds), actor=actor, source=source, target=target, fence=fence, attempt=1
    )


def test_completion_under_a_superseded_fence_is_flagged():
    history = [
        _t(None, RunState.PENDING, 0, "sweeper"),
        _t(RunState.PENDING, RunState.LEASED, 1, "worker:a"),
        _t(RunState.LEASED, RunState.LEASED, 2, "worker:b"),
        _t(RunState.LEASED, RunState.SUCCEEDED, 1, "worker:a"),
    ]
    assert _holder_violations(history, None, 0)
    clean = [*history[:3], _t(RunState.LEASED, RunState.SUCCEEDED, 2, "worker:b")]
    assert _holder_violations(clean, None, 0) == []
    # Another worker may end an expired lease under the current fence, not succeed it.
    reaped = [*history[:3], _t(RunState.LEASED, RunState.DEAD, 2, "worker:c")]
    assert _holder_violations(reaped, None, 0) == []
    taken = [*history[:3], _t(RunState.LEASED, RunState.SUCCEEDED, 2, "worker:c")]
    assert _holder_violations(taken, None, 0)


def test_pause_window_decides_what_counts():
    job = TrackedJob("j_x", "acme", [Ack("pause", 10, T0), Ack("resume", 20, T0 + timedelta(seconds=60))])
    assert job.active_at(T0 - timedelta(seconds=1))
    assert not job.active_at(T0 + timedelta(seconds=30))
    assert job.active_at(T0 + timedelta(seconds=61))
    assert job.stopped_at_seq(15) and not job.stopped_at_seq(5) and not job.stopped_at_seq(25)


def test_stream_audit_flags_a_history_rewrite():
    from jobsched.domain.lifecycle import advance
    from jobsched.domain.models import Job, JobSpec, Schedule, ScheduleKind
    from jobsched.domain.runs import make_run
    from jobsched.store.runs import RunStore

    spec = JobSpec(name="n", type="t", schedule=Schedule(kind=ScheduleKind.ONCE, at=T0))
    job = Job(job_id="j_x", tenant="acme", spec=spec, created_at=T0, updated_at=T0)
    store = RunStore(None, "runs", 1)
    pending = make_run(job, T0, now=T0, actor="sweeper")
    lease = T0 + timedelta(seconds=60)
    a = advance(
        pending, RunState.LEASED, now=T0, actor="worker:a", fence=1, attempt=1, lease_expires_at=lease
    ).model_copy(update={"rev": 1})
    b = advance(
        a, RunState.LEASED, now=T0, actor="worker:b", fence=2, attempt=2, lease_expires_at=lease
    ).model_copy(update={"rev": 2})
    # The stale holder overwrites b with its own copy: fence goes back, b's claim vanishes.
    stale = advance(a, RunState.SUCCEEDED, now=T0, actor="worker:a").model_copy(update={"rev": 3})
    audit = StreamAudit()
    for old, new in ((None, pending), (pending, a), (a, b)):
        audit.observe(_record(store, old, new))
    assert audit.violations == []
    audit.observe(_record(store, b, stale))
    assert {v.figure for v in audit.violations} == {"stale_fence_writes"}


def _record(store, old, new):
    dynamodb = {"NewImage": store.to_item(new)}
    if old is not None:
        dynamodb["OldImage"] = store.to_item(old)
    return {"eventName": "MODIFY" if old else "INSERT", "dynamodb": dynamodb}


def _call(seq, seconds, acted=True):
    return Call("j@t", "chaos.ok", 1, seq, T0 + timedelta(seconds=seconds), acted)


def test_a_repeated_effect_is_excused_only_after_a_dead_invocations_deadline():
    deadline = T0 + timedelta(seconds=900)
    first, failed = _call(1, 10), _call(2, 20, acted=False)
    assert _repeated_before_deadline([first, failed], []) is None
    assert _repeated_before_deadline([first, _call(3, 30)], []) is not None
    assert _repeated_before_deadline([first, _call(3, 500)], [deadline]) is not None
    assert _repeated_before_deadline([first, _call(3, 900)], [deadline]) is None
    # Twice the clock skew early (the dead claim's clock and the repeat's), no more.
    assert _repeated_before_deadline([first, _call(3, 894)], [deadline]) is None
    assert _repeated_before_deadline([first, _call(3, 893)], [deadline]) is not None
    # One death excuses one repeat.
    assert _repeated_before_deadline([first, _call(3, 900), _call(4, 1000)], [deadline]) is not None


# --- the new figures on hand-made evidence ---


def _job(overlap=Overlap.ALLOW, misfire=Misfire.RUN_ONCE, every=10, max_age=None):
    spec = JobSpec(
        name="n",
        type="chaos.ok",
        schedule=Schedule(kind=ScheduleKind.RATE, every_seconds=every, anchor=T0),
        policies=Policies(
            overlap=overlap,
            misfire=misfire,
            catch_up_window_seconds=3600,
            retry=RetryPolicy(max_attempts=3, max_age_seconds=max_age),
        ),
    )
    return Job(job_id="j_x", tenant="acme", spec=spec, created_at=T0, updated_at=T0)


def _run(job, seconds, *entries):
    run = make_run(job, T0 + timedelta(seconds=seconds), now=T0, actor="sweeper")
    history = list(run.history)
    state = run.state
    for at, target, fence, attempt, error in entries:
        history.append(
            Transition(
                at=T0 + timedelta(seconds=at),
                actor="worker:w",
                source=state,
                target=target,
                fence=fence,
                attempt=attempt,
                error_class=error,
            )
        )
        state = target
    return run.model_copy(update={"history": history, "state": state})


def _evidence(runs, ledger, job, acks=(), limit=0):
    tracked = TrackedJob(job.job_id, job.tenant, list(acks))
    return Evidence(
        seed=0,
        window_end=T0,
        end=T0 + timedelta(hours=1),
        jobs={job.job_id: tracked},
        stored_jobs={job.job_id: job},
        runs=runs,
        ledger=ledger,
        audit=StreamAudit(),
        redrives={},
        duplicates_suppressed=0,
        stale_fences_rejected=0,
        repairs=0,
        tenant_limit=limit,
    )


class _Clock:
    def __init__(self):
        self.at = T0

    def __call__(self):
        return self.at


def _ledger():
    clock = _Clock()
    return Ledger(Sequencer(), clock), clock


def test_a_success_without_an_effect_and_a_death_without_an_attempt_are_flagged():
    job = _job()
    ledger, clock = _ledger()
    succeeded = _run(job, 0, (1, RunState.LEASED, 1, 1, None), (1, RunState.SUCCEEDED, 1, 1, None))
    untried = _run(job, 10, (11, RunState.DEAD, 0, 0, "RetriesExhausted"))
    tried = _run(job, 20, (21, RunState.LEASED, 1, 1, None), (21, RunState.DEAD, 1, 1, "HTTP400"))
    figures = check(_evidence([succeeded, untried, tried], ledger, job))
    assert figures.missing_effects == 1 and figures.dead_untried == 1, figures.violations
    clock.at = T0 + timedelta(seconds=1)
    ledger.end(ledger.begin(succeeded.run_key, "chaos.ok", 1, "acme"), acted=True)
    figures = check(_evidence([succeeded, untried, tried], ledger, job))
    assert figures.missing_effects == 0 and figures.dead_untried == 1


def test_an_untried_death_is_excused_only_for_an_age_it_really_has():
    job = _job(max_age=60)
    ledger, _ = _ledger()
    young = _run(job, 0, (30, RunState.DEAD, 0, 0, "MaxAge"))
    old = _run(job, 10, (75, RunState.DEAD, 0, 0, "MaxAge"))
    figures = check(_evidence([young, old], ledger, job))
    assert [v.run_key for v in figures.violations if v.figure == "dead_untried"] == [young.run_key]


def test_overlapping_calls_of_a_skip_job_are_flagged_and_sequential_ones_are_not():
    job = _job(overlap=Overlap.SKIP)
    ledger, _ = _ledger()
    first, second = _run(job, 0), _run(job, 10)
    a = ledger.begin(first.run_key, "chaos.ok", 1, "acme", LEASE)
    b = ledger.begin(second.run_key, "chaos.ok", 1, "acme")
    ledger.end(b, acted=True)
    ledger.end(a, acted=True)
    assert check(_evidence([first, second], ledger, job)).overlap_violations == 1
    ledger2, _ = _ledger()
    for run in (first, second):
        ledger2.end(ledger2.begin(run.run_key, "chaos.ok", 1, "acme"), acted=True)
    assert check(_evidence([first, second], ledger2, job)).overlap_violations == 0
    # The same calls of an `allow` job are fine.
    allowed = _job(overlap=Overlap.ALLOW)
    assert check(_evidence([_run(allowed, 0), _run(allowed, 10)], ledger, allowed)).overlap_violations == 0


def test_the_tenant_limit_counts_calls_under_way_at_once():
    job = _job()
    ledger, _ = _ledger()
    runs = [_run(job, s) for s in (0, 10, 20)]
    open_calls = [ledger.begin(r.run_key, "chaos.ok", 1, "acme", LEASE) for r in runs[:2]]
    ledger.end(ledger.begin(runs[2].run_key, "chaos.ok", 1, "acme"), acted=True)
    for call in open_calls:
        ledger.end(call, acted=True)
    assert check(_evidence(runs, ledger, job, limit=2)).tenant_limit_exceeded == 1
    assert check(_evidence(runs, ledger, job, limit=3)).tenant_limit_exceeded == 0


def test_an_effect_before_its_occurrence_is_early():
    job = _job()
    ledger, clock = _ledger()
    run = _run(job, 60)
    clock.at = T0 + timedelta(seconds=56)  # within the allowance
    ledger.end(ledger.begin(run.run_key, "chaos.ok", 1, "acme"), acted=True)
    assert check(_evidence([run], ledger, job)).early_effects == 0
    clock.at = T0 + timedelta(seconds=50)
    ledger.end(ledger.begin(run.run_key, "chaos.ok", 2, "acme"), acted=False)
    assert check(_evidence([run], ledger, job)).early_effects == 1


def test_an_effect_running_past_its_invocations_deadline_is_counted():
    job = _job()
    ledger, clock = _ledger()
    ended, late, unended = (_run(job, s) for s in (0, 10, 20))
    deadline = T0 + timedelta(seconds=300)
    clock.at = T0 + timedelta(seconds=20)
    calls = [
        ledger.begin(r.run_key, "chaos.ok", 1, "acme", deadline=deadline) for r in (ended, late, unended)
    ]
    clock.at = deadline
    ledger.end(calls[0], acted=True)  # ended at the deadline, as Lambda ends it: allowed
    clock.at = deadline + timedelta(seconds=1)
    ledger.end(calls[1], acted=True)
    figures = check(_evidence([ended, late, unended], ledger, job))
    assert figures.effects_past_deadline == 2  # one ended late, one never ended (the run is over)
    assert {v.run_key for v in figures.violations if v.figure == "effects_past_deadline"} == {
        late.run_key,
        unended.run_key,
    }


def test_run_once_after_a_pause_runs_only_the_latest_missed_occurrence():
    job = _job(misfire=Misfire.RUN_ONCE)
    ledger, _ = _ledger()
    acks = [Ack("pause", 1, T0 + timedelta(seconds=5)), Ack("resume", 2, T0 + timedelta(seconds=35))]

    def runs(*states):
        made = []
        for seconds, state in zip((10, 20, 30), states, strict=True):
            run = _run(job, seconds)
            made.append(run.model_copy(update={"state": state}))
        return made

    right = runs(RunState.SKIPPED, RunState.SKIPPED, RunState.SUCCEEDED)
    assert check(_evidence(right, ledger, job, acks)).missed_run_violations == 0
    dropped = runs(RunState.SKIPPED, RunState.SKIPPED, RunState.SKIPPED)
    assert check(_evidence(dropped, ledger, job, acks)).missed_run_violations == 1
    wrong = runs(RunState.SUCCEEDED, RunState.SKIPPED, RunState.SKIPPED)
    assert check(_evidence(wrong, ledger, job, acks)).missed_run_violations == 2
    missing = right[1:]
    assert check(_evidence(missing, ledger, job, acks)).missed_run_violations == 1
    # An occurrence within the clock skew of the resume may be the one chosen, or not: the
    # latest one clearly inside may then run, or be skipped.
    near = [Ack("pause", 1, T0 + timedelta(seconds=5)), Ack("resume", 2, T0 + timedelta(seconds=41))]
    assert check(_evidence([*right, _run(job, 40)], ledger, job, near)).missed_run_violations == 0


def test_an_occurrence_skipped_as_missed_outside_its_jobs_recorded_pauses_is_a_missed_run():
    """Resumed at T0+40 s by its own record: the 40 s occurrence fell in the resume's own
    second, when the job was active again, so SKIPPED as missed (`paused`) it was lost. Only
    an occurrence before the earliest pause of a full record cannot be judged."""
    job = _job(misfire=Misfire.RUN_ONCE)
    ledger, _ = _ledger()
    acks = [Ack("pause", 1, T0 + timedelta(seconds=5)), Ack("resume", 2, T0 + timedelta(seconds=40))]

    def window(paused, resumed):
        return MissedWindow(
            paused_at=T0 + timedelta(seconds=paused),
            resumed_at=T0 + timedelta(seconds=resumed),
            policy=Misfire.RUN_ONCE,
            run_from=T0,
            chosen=T0 + timedelta(seconds=resumed - 10),
        )

    def missed(seconds):
        return _run(job, seconds).model_copy(update={"state": RunState.SKIPPED, "reason": "paused"})

    ran = _run(job, 30).model_copy(update={"state": RunState.SUCCEEDED})
    runs = [missed(10), missed(20), ran, missed(40)]

    def flagged(windows):
        recorded = job.model_copy(update={"missed_windows": windows})
        figures = check(_evidence(runs, ledger, recorded, acks))
        return [v.run_key for v in figures.violations if v.figure == "missed_run_violations"]

    assert flagged([window(5, 40)]) == ["j_x@2026-10-25T00:50:40Z"]
    assert flagged([window(5, 41)]) == []  # resumed a second later: 40 s fell in the pause
    full = [window(100 + 20 * i, 110 + 20 * i) for i in range(MAX_MISSED_WINDOWS)]
    assert flagged(full) == []  # before the earliest kept pause: a dropped one may have held it


def test_a_run_dead_untried_after_claims_made_deep_in_a_pause_is_a_missed_run():
    # Every occurrence of the pause is to run (`catch-up`); each died without acting.
    job = _job(misfire=Misfire.CATCH_UP, every=30)
    acks = [Ack("pause", 1, T0 + timedelta(seconds=25)), Ack("resume", 2, T0 + timedelta(seconds=95))]

    def judged(deep_death, ledger=None):
        # Claimed within the pause's first 10 s (plus the skew): it may have begun its effect.
        edge = _run(job, 30, (31, RunState.LEASED, 1, 1, None), (80, RunState.DEAD, 1, 1, "LeaseExpired"))
        deep = _run(job, 60, (60, RunState.LEASED, 1, 1, None), (120, RunState.DEAD, 1, 1, deep_death))
        # Claimed again after the resume: that attempt counts.
        after = _run(
            job,
            90,
            (90, RunState.LEASED, 1, 1, None),
            (96, RunState.LEASED, 2, 2, None),
            (160, RunState.DEAD, 2, 2, "LeaseExpired"),
        )
        figures = check(_evidence([edge, deep, after], ledger or _ledger()[0], job, acks))
        return [v for v in figures.violations if v.figure == "missed_run_violations"]

    flagged = judged("LeaseExpired")
    assert [v.run_key for v in flagged] == ["j_x@2026-10-25T00:51:00Z"], flagged
    assert "deep in the pause" in flagged[0].detail
    assert judged("MaxAge") == []  # an age it really has: dead_untried's to judge
    # The same death with its effect in the ledger is a run that ran.
    ledger, clock = _ledger()
    clock.at = T0 + timedelta(seconds=61)
    ledger.end(ledger.begin(_run(job, 60).run_key, "chaos.ok", 1, "acme"), acted=True)
    assert judged("LeaseExpired", ledger) == []


def test_a_restart_held_for_its_jobs_resume_is_not_timed():
    job = _job()
    ledger, _ = _ledger()
    expired = T0 + timedelta(seconds=40)
    held = _run(job, 10, (10, RunState.LEASED, 1, 1, None))
    hold = Transition(
        at=expired + timedelta(seconds=20),
        actor="reconciler",
        source=RunState.LEASED,
        target=RunState.PENDING,
        fence=1,
        attempt=0,
        reason=HELD_FOR_RESUME,
    )
    skip = Transition(
        at=expired + timedelta(seconds=300),
        actor="api:acme",
        source=RunState.PENDING,
        target=RunState.SKIPPED,
        fence=1,
        attempt=0,
        reason="paused",
    )
    unheld = _run(job, 20, (20, RunState.LEASED, 1, 1, None), (340, RunState.DEAD, 1, 1, "LeaseExpired"))
    held = held.model_copy(update={"history": [*held.history, hold, skip], "state": RunState.SKIPPED})
    evidence = _evidence([held, unheld], ledger, job)
    repaired = expired + timedelta(seconds=20)
    evidence.stranded = {held.run_key: [(expired, repaired)], unheld.run_key: [(expired, repaired)]}
    figures = check(evidence)
    assert figures.restarts == 1 and figures.restarts_held_back == 1
    assert figures.restart_latency_p99 >= 300  # the unheld one's death came 300 s late
    evidence.runs = [held]
    evidence.stranded = {held.run_key: [(expired, repaired)]}
    assert check(evidence).restart_latency_p99 == 0


def _notifying(*notifications):
    job = _job()
    return job.model_copy(update={"spec": job.spec.model_copy(update={"notify": list(notifications)})})


INBOX = SqsTarget(kind="sqs", queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/inbox")


def _bus_event(run, suffix, event_type, sequence):
    return {
        "id": f"{run.run_key}#{suffix}",
        "subject": run.run_key,
        "type": event_type,
        "data": {"runKey": run.run_key, "jobId": run.job_id, "sequence": sequence},
    }


def _late_note(run, seconds):
    note = Transition(
        at=T0 + timedelta(seconds=seconds),
        actor="reconciler",
        source=run.state,
        target=run.state,
        fence=0,
        attempt=0,
        reason=LATE_REASON,
    )
    return run.model_copy(update={"history": [*run.history, note]})


def test_a_late_run_must_be_noted_in_time_and_told_on_the_bus():
    job = _notifying(Notification(on=[NotifyOn.LATE], late_seconds=45, target=INBOX))
    ledger, _ = _ledger()
    prompt = _run(job, 0, (5, RunState.LEASED, 1, 1, None))  # claimed before it was late
    noted = _late_note(_run(job, 10), 60)
    claimed_late = _run(job, 20, (100, RunState.LEASED, 1, 1, None))  # late by 35 s, within the bound
    never = _run(job, 30)  # open and unnoted until the end, an hour on
    told = [_bus_event(noted, "late", "jobsched.run.late", 1), _bus_event(claimed_late, "late", "x", 1)]

    def untold(bus):
        evidence = _evidence([prompt, noted, claimed_late, never], ledger, job)
        evidence.bus_events = bus
        return sorted(v.run_key for v in check(evidence).violations if v.figure == "late_untold")

    assert untold(told) == [never.run_key]
    assert untold(told[:1]) == sorted([claimed_late.run_key, never.run_key])
    assert untold([]) == sorted([noted.run_key, claimed_late.run_key, never.run_key])
    # Noted before it was late: a violation even though the bus has it.
    early = _late_note(_run(job, 40), 50)
    evidence = _evidence([early], ledger, job)
    evidence.bus_events = [_bus_event(early, "late", "jobsched.run.late", 1)]
    assert [v.detail[:13] for v in check(evidence).violations if v.figure == "late_untold"] == [
        "noted late at"
    ]
    # A paused job's held runs are not watched.
    held = _evidence([never], ledger, job, acks=[Ack("pause", 1, T0 + timedelta(seconds=40))])
    assert check(held).late_untold == 0


def test_each_notified_event_needs_its_notification_with_the_same_event():
    job = _notifying(
        Notification(on=[NotifyOn.DEAD], target=INBOX),
        Notification(on=[NotifyOn.SKIPPED], target=INBOX),
        Notification(on=[NotifyOn.DEAD, NotifyOn.SKIPPED], target=INBOX),
    )
    ledger, _ = _ledger()
    run = _run(job, 0, (1, RunState.LEASED, 1, 1, None), (2, RunState.DEAD, 1, 1, PERMANENT))
    dead = _bus_event(run, 2, "jobsched.run.dead", 2)
    started = _bus_event(run, 1, "jobsched.run.started", 1)

    def notice(index, event):
        return {"id": f"{event['id']}#n{index}", "index": index, "event": event}

    def figures(notices):
        evidence = _evidence([run], ledger, job)
        evidence.bus_events, evidence.notices = [started, dead, dead], notices
        return check(evidence)

    assert figures([notice(0, dead), notice(2, dead)]).notices_lost == 0
    assert figures([notice(0, dead), notice(2, dead), notice(2, dead)]).notices_repeated == 1
    assert figures([notice(0, dead)]).notices_lost == 1  # the third notification names dead too
    other = {**dead, "time": "then"}
    assert figures([notice(0, dead), notice(2, other)]).notices_conflicting == 1
    assert figures([notice(0, dead), notice(2, dead), notice(0, other)]).notices_conflicting == 1
