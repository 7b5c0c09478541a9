"""The job mix of one chaos run, drawn from the seed: schedules, zones, policies, tenants.

Every simulated window opens ten minutes before a DST transition in one of the zones (the
seed picks which, in turn), so cron jobs bound to the local hours around it cross a gap or a
repeated hour mid-run."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from jobsched.domain.cron import zone
from jobsched.domain.models import (
    MAX_PAYLOAD_BYTES,
    DeliveryGuarantee,
    DstFold,
    DstGap,
    DstPolicy,
    HttpTarget,
    JobSpec,
    Misfire,
    Notification,
    NotifyOn,
    Overlap,
    Policies,
    Priority,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    SqsTarget,
)
from jobsched.domain.schedule import fires_between

from .ledger import BAD, DOWN, EXTERNAL, FLAKY, HTTP, OK

ZONES = ("Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC")
TENANTS = ("acme", "globex", "initech", "umbrella")

# (window start, zone whose clocks change ten minutes later)
TRANSITIONS = (
    (datetime(2026, 10, 25, 0, 50, tzinfo=UTC), "Europe/London"),  # 02:00 BST -> 01:00 GMT
    (datetime(2026, 11, 1, 5, 50, tzinfo=UTC), "America/New_York"),  # 02:00 EDT -> 01:00 EST
    (datetime(2026, 10, 3, 15, 20, tzinfo=UTC), "Australia/Lord_Howe"),  # 02:00 -> 02:30 (gap)
    (datetime(2026, 4, 4, 14, 50, tzinfo=UTC), "Australia/Lord_Howe"),  # 02:00 -> 01:30 (fold)
    (datetime(2026, 3, 29, 0, 50, tzinfo=UTC), "Europe/London"),  # 01:00 GMT -> 02:00 BST (gap)
    (datetime(2026, 3, 8, 6, 50, tzinfo=UTC), "America/New_York"),  # 02:00 EST -> 03:00 EDT (gap)
)

SECOND_CRONS = ("*/10 * * * * *", "*/15 * * * * *", "*/20 * * * * *", "5,35 * * * * *", "*/30 * * * * *")
MINUTE_CRONS = ("* * * * *", "*/2 * * * *", "*/3 * * * *")
# Where every notifying job's notifications go (queued by the events consumer, never delivered
# in chaos: the checker judges what was queued).
NOTICE_INBOX = "https://sqs.us-east-1.amazonaws.com/123456789012/chaos-notices"
LATE_SECONDS = 45
# HTTP: a webhook to the harness's receiver (chaos.receiver), about a quarter of the runs.
TYPE_WEIGHTS = ((OK, 35), (FLAKY, 30), (DOWN, 8), (BAD, 7), (EXTERNAL, 10), (HTTP, 30))


@dataclass(frozen=True)
class Mix:
    """The weights the job mix is drawn with (the defaults make the full chaos run)."""

    types: tuple[tuple[str, int], ...] = TYPE_WEIGHTS
    overlap: tuple[int, int, int] = (70, 15, 15)  # allow, skip, buffer-one
    misfire: tuple[int, int, int] = (1, 1, 1)  # skip, run-once, catch-up
    max_attempts: tuple[int, int] = (1, 5)
    base_seconds: float = 1.0  # of the retry backoff
    kinds: tuple[int, int, int] = (15, 35, 50)  # once, rate, cron
    rates: tuple[int, ...] = (7, 10, 15, 30, 45, 60, 90)  # a rate job's step, seconds
    tenants: tuple[str, ...] = TENANTS
    # In turn by the job's index, not drawn: told of dead and skipped runs, of dead and late
    # ones, of nothing (notify_of).
    notices: tuple[int, int, int] = (1, 1, 1)


@dataclass(frozen=True)
class PlannedJob:
    tenant: str
    spec: JobSpec
    create_at: int  # simulated second at which the API creates it
    expected: int  # occurrences in the window (for sizing only)


@dataclass(frozen=True)
class Plan:
    start: datetime
    transition_zone: str
    window_seconds: int
    jobs: list[PlannedJob]

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.window_seconds)


def plan(
    rng: random.Random,
    target_runs: int,
    window_seconds: int,
    transition: int,
    mix: Mix | None = None,
    *,
    http_url: str | None = None,
) -> Plan:
    """`http_url`: where the `chaos.http` jobs' webhooks go (the receiver); a mix with that
    type needs it."""
    mix = mix or Mix()
    start, dst_zone = TRANSITIONS[transition % len(TRANSITIONS)]
    end = start + timedelta(seconds=window_seconds)
    jobs: list[PlannedJob] = []
    total = 0
    # More than asked: pauses and cancels take some occurrences away.
    while total < target_runs * 1.35:
        create_at = rng.randint(0, max(1, window_seconds // 6))
        created = start + timedelta(seconds=create_at)
        spec = _spec(rng, len(jobs), created, end, dst_zone, mix, http_url)
        schedule = spec.schedule
        if schedule.kind is ScheduleKind.RATE:
            schedule = schedule.model_copy(update={"anchor": created})
        count = len(fires_between(schedule, created - timedelta(seconds=1), end, 10_000))
        if count == 0:
            continue
        jobs.append(PlannedJob(rng.choice(mix.tenants), spec, create_at, count))
        total += count
    return Plan(start, dst_zone, window_seconds, jobs)


def _spec(
    rng: random.Random,
    index: int,
    created: datetime,
    end: datetime,
    dst_zone: str,
    mix: Mix,
    http_url: str | None = None,
) -> JobSpec:
    kind = rng.choices(["once", "rate", "cron"], weights=mix.kinds)[0]
    schedule: Schedule
    if kind == "once":
        span = max(10, int((end - created).total_seconds()) - 30)
        at = created + timedelta(seconds=rng.randint(5, span))
        schedule = Schedule(kind=ScheduleKind.ONCE, at=at)
    elif kind == "rate":
        schedule = Schedule(kind=ScheduleKind.RATE, every_seconds=rng.choice(mix.rates), end_at=end)
    else:
        zone_name = rng.choice([*ZONES, dst_zone, dst_zone])
        schedule = Schedule(
            kind=ScheduleKind.CRON,
            cron=_cron(rng, zone_name, created, end),
            time_zone=zone_name,
            end_at=end,
            dst=DstPolicy(gap=rng.choice(list(DstGap)), fold=rng.choice(list(DstFold))),
        )
    job_type = rng.choices([t for t, _ in mix.types], weights=[w for _, w in mix.types])[0]
    policies = Policies(
        misfire=rng.choices([Misfire.SKIP, Misfire.RUN_ONCE, Misfire.CATCH_UP], weights=mix.misfire)[0],
        catch_up_window_seconds=rng.choice([60, 600, 3600]),
        overlap=rng.choices([Overlap.ALLOW, Overlap.SKIP, Overlap.BUFFER_ONE], weights=mix.overlap)[0],
        retry=RetryPolicy(
            max_attempts=rng.randint(*mix.max_attempts),
            base_seconds=mix.base_seconds,
            cap_seconds=float(rng.choice([4, 10, 20])),
        ),
        delivery=DeliveryGuarantee.AT_MOST_ONCE if rng.random() < 0.15 else DeliveryGuarantee.AT_LEAST_ONCE,
        jitter_seconds=0 if rng.random() < 0.7 else rng.randint(1, 10),
    )
    target = None
    if job_type == HTTP:
        if http_url is None:
            raise ValueError("a mix with chaos.http jobs needs the receiver's URL")
        target = HttpTarget(kind="http", url=http_url, timeout_seconds=10.0)
    return JobSpec(
        name=f"chaos-{index}",
        type=job_type,
        schedule=schedule,
        priority=rng.choice(list(Priority)),
        policies=policies,
        payload={"n": index},
        target=target,
        notify=notify_of(index, mix.notices),
    )


def notify_of(index: int, shares: tuple[int, int, int]) -> list[Notification]:
    """The notifications of the job planned `index`th, by its index alone (no draw: the rest
    of a seed's world does not depend on them): in turn, `shares[0]` jobs told of dead and
    skipped runs, `shares[1]` of dead and late ones, `shares[2]` of nothing."""
    turns = [kind for kind, share in enumerate(shares) for _ in range(share)]
    kind = turns[index % len(turns)] if turns else 2
    inbox = SqsTarget(kind="sqs", queue_url=NOTICE_INBOX)
    if kind == 0:
        return [Notification(on=[NotifyOn.DEAD, NotifyOn.SKIPPED], target=inbox)]
    if kind == 1:
        return [Notification(on=[NotifyOn.DEAD, NotifyOn.LATE], late_seconds=LATE_SECONDS, target=inbox)]
    return []


def _cron(rng: random.Random, zone_name: str, created: datetime, end: datetime) -> str:
    if rng.random() < 0.5:
        return rng.choice(SECOND_CRONS + MINUTE_CRONS)
    # Bound to the local hours the window crosses, so a DST change lands inside the schedule.
    tz = zone(zone_name)
    hours = sorted({(created + timedelta(minutes=m)).astimezone(tz).hour for m in range(0, 40, 5)})
    hour_field = ",".join(str(h) for h in hours)
    if rng.random() < 0.5:
        return f"{rng.choice(['*/15', '*/20', '0,30'])} * {hour_field} * * *"
    return f"{rng.choice(['*', '*/2'])} {hour_field} * * *"


# A tenant that drives its runs as large as the API lets it: the largest payload a job may
# carry, the most attempts a policy allows, and (in the harness) an external worker that
# fails every attempt with the longest error the lease API accepts.
HOG_TENANT = "hog"
HOG_TYPE = "hog.external"  # no handler here: leased through the API from the claimable index
MAX_ATTEMPTS = 100  # RetryPolicy's upper bound
MAX_PAYLOAD_EMOJI = (MAX_PAYLOAD_BYTES - len('{"blob":""}')) // 4


def hog_jobs(rng: random.Random, end: datetime, window_seconds: int, count: int = 2) -> list[PlannedJob]:
    jobs: list[PlannedJob] = []
    for index in range(count):
        spec = JobSpec(
            name=f"hog-{index}",
            type=HOG_TYPE,
            schedule=Schedule(kind=ScheduleKind.RATE, every_seconds=rng.choice([20, 30, 45]), end_at=end),
            policies=Policies(
                retry=RetryPolicy(max_attempts=MAX_ATTEMPTS, base_seconds=1.0, cap_seconds=5.0),
                timeout_seconds=30,
            ),
            # The first carries the largest payload a job may have; every one grows by its errors.
            payload={"blob": "\U0001f600" * (MAX_PAYLOAD_EMOJI if index == 0 else 16)},
        )
        create_at = rng.randint(0, max(1, window_seconds // 10))
        jobs.append(PlannedJob(HOG_TENANT, spec, create_at, window_seconds // 20))
    return jobs
