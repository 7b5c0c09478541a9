"""The simulated world: moto tables, stream and queues, the real services, and the loop that
moves them one simulated second at a time while faults are injected. See the package
docstring for the design."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import os
import random
import re
import sys
import threading
import traceback
import warnings
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from jobsched.domain.errors import (
    ConcurrentUpdate,
    ExecutionError,
    JobschedError,
    StorageUnavailable,
    TenantAtLimit,
)
from jobsched.domain.events import RunEventsLevel
from jobsched.domain.instants import ManualClock
from jobsched.domain.metrics import RecordedMetrics
from jobsched.domain.models import Job, JobState, Priority, RunFix, ScheduleKind
from jobsched.domain.runs import Run, RunState
from jobsched.services.attempt import AttemptOutcome, AttemptResult
from jobsched.services.completion import Completer
from jobsched.services.events import EventPublisher
from jobsched.services.job_counts import JobCounts
from jobsched.services.jobs import JobService
from jobsched.services.materialize import Materializer
from jobsched.services.missed import MissedRuns
from jobsched.services.notifications import NotificationQueue
from jobsched.services.outbox import EXTERNAL as EXTERNAL_ROUTE
from jobsched.services.outbox import Outbox, priority_router
from jobsched.services.reconciler import KINDS, Reconciler
from jobsched.services.record_delivery import RecordDelivery, SetAsideQueue
from jobsched.services.runs import RunService
from jobsched.services.sweeper import Sweeper
from jobsched.services.worker import Received
from jobsched.settings import Settings
from jobsched.store.definitions import DefinitionStore
from jobsched.store.queues import RunQueues
from jobsched.store.runs import RunStore
from jobsched.store.schema import ALL_TABLES, DEFINITIONS, QUEUES, RUNS
from jobsched.store.tenant_slots import SlotHolder, TenantSlots

from .bus import ChaosBus, ChaosNoticeQueue
from .checker import (
    CLOCK_SKEW,
    FAULT_FIGURES,
    Ack,
    Backfill,
    Evidence,
    Figures,
    StreamAudit,
    TrackedJob,
    check,
)
from .faults import (
    ChaosDefinitionStore,
    ChaosRunStore,
    DiesBeforeSend,
    DynamoFaults,
    EndsWithInvocation,
    FlakyClient,
    Freeze,
    InvocationDied,
    InvocationEnded,
    LoopCutoff,
    LoopingQueueClient,
    MessageTrail,
    SimulatedCrash,
    SimulatedLambdaContext,
    SkewedClock,
    Throttle,
    UnrecordedEffectCrash,
    sqs_on_clock,
)
from .invocation import DELIVERING, ChaosServices, ChaosWorker, acknowledged, sqs_event
from .ledger import EXTERNAL, FIXED, FLAKY, LEASE, OK, Call, Ledger, Sequencer, SlowEffect, chaos_registry
from .receiver import ALLOW, Receiver
from .scenario import HOG_TENANT, HOG_TYPE, TENANTS, Mix, Plan, hog_jobs, plan

REGION = "us-east-1"
HORIZON = timedelta(seconds=120)  # the deployed sweep horizon (Settings.horizon_seconds)
DDB_THROTTLED = "ProvisionedThroughputExceededException"
SQS_THROTTLED = "ThrottlingException"
RUN_KEY = re.compile(r"j_[0-9a-z]+@[0-9T:Z~a-z-]+")  # a run key in a violation's detail
STREAM_LANES = 2  # concurrent outbox batches (shards x parallelization): one item's records stay in one
STREAM_RETRIES = 3  # then the batch goes to the failure destination; the reconciler repairs its runs
CREATE_PATIENCE_SECONDS = 60  # a job the API still refuses this long after its planned time fails the run
HOG_WORKER = "hog-worker"
COUNTER_READS = 0.1  # the share of control ticks on which a tenant reads one job's counters
HOG_MESSAGE = "\U0001f4a5" * 4000  # the longest error message the lease API accepts, 4 bytes a character
HOG_CLASS = "E" * 128
HOG_RESULT = {"blob": "\U0001f4a5" * 100_000}
FLEET_LEASE_SECONDS = 30
FLEET_WORK_SECONDS = (1, 8)  # how long the external fleet works on one lease
FLEET_FAILURE = 0.2  # share of its attempts that fail (retryable)


@dataclass(frozen=True)
class FaultRates:
    crash_before_effect: float = 0.03  # per delivery
    crash_after_effect: float = 0.03  # per delivery: once the effect is recorded
    crash_before_completion: float = 0.01  # per delivery: a success dies before it is recorded
    freeze_worker: float = 0.01  # per delivery: held past its lease, resumes later
    # Per delivery: frozen between its tenant slot's put and its claim's write, resuming
    # within its lease (`claim_thaw_seconds`), so the claim lands live after a pause.
    freeze_claim: float = 0.005
    max_frozen: int = 25
    # Per delivery of a chaos.ok/chaos.flaky run: its effect takes simulated time (past its
    # timeout, past its invocation's deadline, where Lambda ends it), on a thread of its own.
    slow_effect: float = 0.01
    max_slow: int = 12  # at once
    publish_failure: float = 0.04  # per SendMessageBatch of the outbox
    outbox_died: float = 0.02  # per outbox batch: dies after its marks, before its sends
    # Per outbox batch on its last try (the stream gives it up after): dies as `outbox_died`
    # does. Only a batch whose records failed on every earlier try gets there.
    outbox_died_last_try: float = 0.0
    lost_stream_batch: float = 0.03  # per second: the outbox never sees that second's records
    duplicate_delivery: float = 0.04  # per delivery: handed to a second worker at once
    late_duplicate: float = 0.03  # per delivery: a copy arrives up to two minutes later
    interleaved_sweep: float = 0.05  # per sweep: a second sweeper runs inside the first
    ddb_throttle: float = 0.004  # per DynamoDB call of any component
    sqs_throttle: float = 0.004  # per SQS call of any component
    control: float = 0.012  # per second: a pause, resume or cancel through the API
    redrive: float = 0.01  # per second: an audited redrive of a dead run
    patch: float = 0.01  # per second: a PATCH of a job's payload, priority and retry policy
    trigger: float = 0.01  # per second: a manual run of a job (POST .../trigger)
    backfill: float = 0.004  # per second: a backfill of a job's past, before it was created
    # What moto never shows (see faults.DynamoFaults, faults.LoopCutoff):
    stale_index_read: float = 0.1  # per query of the due/open/claimable/tenant index
    write_timeout: float = 0.01  # per conditional write: applied, then a timeout or the SDK's replay
    hot_key_burst: float = 0.004  # per second: one job or tenant throttled for 5-20 s
    killed_invocation: float = 0.02  # per worker batch: killed at its timeout part-way through
    throttled_invocation: float = 0.02  # per worker batch: throttled, the batch back on the queue
    stream_redelivery: float = 0.03  # per outbox batch: redelivered whole although it succeeded
    stream_lane_lag: float = 0.1  # per second and stream lane: its records wait, others go on
    bus_refusal: float = 0.02  # per PutEvents entry of the events consumer: InternalFailure

    @classmethod
    def none(cls) -> FaultRates:
        return cls(**{f.name: 0 for f in dataclasses.fields(cls)})


NO_FAULTS = FaultRates.none()


@dataclass
class ChaosConfig:
    seed: int
    runs: int = 1000
    window_seconds: int | None = None  # default: 900 s, or 420 s below 400 runs
    settle_limit_seconds: int = 2700
    shard_count: int = 4
    workers: int = 3
    # The stack reconciles each shard twice a minute: the rule's tick, and its second tick
    # 30 s later through a delaying queue (jobsched.cdk.schedules).
    reconcile_every: int = 30
    sweep_every: int = 10  # the deployed rule sweeps every 60 s with a 120 s horizon
    faults: FaultRates = field(default_factory=FaultRates)
    mutant: str | None = None  # a mutant of the pipeline (chaos.mutants), to prove the checker fails
    thaw_seconds: tuple[int, int] = (100, 400)  # how long a frozen worker stays frozen
    claim_thaw_seconds: tuple[int, int] = (2, 45)  # how long a claim stays frozen
    slow_effect_seconds: tuple[int, int] = (2, 400)  # how long a slow effect takes
    # Each acknowledged pause is resumed this many seconds later (None: only at random).
    resume_after: tuple[int, int] | None = None
    cancel_share: float = 0.2  # of the random changes to an unpaused job, how many cancel it
    mix: Mix = field(default_factory=Mix)
    # TENANT_CONCURRENCY, for the Lambda worker and the lease API together (0: off). Small, so
    # the external fleet's leases fill it and the worker's claims meet it.
    tenant_concurrency: int = 4
    # Each worker invocation's Lambda timeout, drawn per invocation (seconds): its context's
    # remaining time runs on the simulated clock, and its claims' deadlines are judged by it.
    invocation_seconds: tuple[int, ...] = (60, 300, 900)
    loop_limit: int = 16  # Lambda's recursive-loop cut-off (hops SQS -> Lambda -> same SQS)
    hog: bool = True  # a tenant driving its runs as large as the lease API allows
    verbose: bool = False

    def window(self) -> int:
        if self.window_seconds is not None:
            return self.window_seconds
        return 900 if self.runs >= 400 else 420


@dataclass
class Report:
    figures: Figures
    faults: Counter[str]
    outcomes: Counter[str]
    unexpected: list[str]
    simulated_seconds: int
    settled: bool
    explanations: dict[str, list[str]] = field(default_factory=dict)  # violating run key -> story

    @property
    def failed(self) -> bool:
        """A must-be-0 figure above 0, a world that did not settle, or an unexpected error (one
        of them a webhook the receiver could not verify)."""
        return self.figures.failed() or not self.settled or bool(self.unexpected)


class ObservedSlots(TenantSlots):
    """A worker's tenant slots that tell the harness of each claim refused at the limit, and
    of each look (the worker's read of the slots before a waiting run's) that found them all
    held: the run waits on purpose either way."""

    def __init__(self, runs: RunStore, limit: int, refused: Callable[[str], None]) -> None:
        super().__init__(runs, limit)
        self._refused = refused

    def claim(
        self,
        run: Run,
        change: Callable[[Run], Run],
        *,
        now: datetime,
        holders: list[SlotHolder] | None = None,
    ) -> Run:
        try:
            return super().claim(run, change, now=now, holders=holders)
        except TenantAtLimit:
            self._refused(run.run_key)
            raise

    def at_limit(self, holders: list[SlotHolder], *, now: datetime) -> bool:
        full = super().at_limit(holders, now=now)
        if full:  # the worker's look defers the record's run without a claim
            self._refused(getattr(DELIVERING, "run_key", ""))
        return full


@dataclass
class FleetLease:
    """One lease the external fleet holds: its call in the ledger, and when its work ends."""

    run: Run
    call: Call
    until: datetime
    succeed: bool
    tries: int = 0


@dataclass
class Slow:
    """One invocation whose effect takes simulated time, running on a thread of its own."""

    thread: threading.Thread
    effect: SlowEffect
    run_key: str
    url: str
    event: dict[str, Any]
    box: dict[str, Any]


@dataclass
class Frozen:
    thread: threading.Thread
    freeze: Freeze
    done: threading.Event
    box: dict[str, Any]
    since: datetime
    thaw_after: int
    deadline: datetime  # its invocation's


class World:
    def __init__(self, config: ChaosConfig, clock: ManualClock, out: Callable[[str], None]) -> None:
        import boto3

        self.config = config
        self.out = out
        master = random.Random(config.seed)
        self.rng = random.Random(master.random())  # fault decisions
        self.control_rng = random.Random(master.random())
        # A tenant reading its jobs' counters now and then (each read folds: domain.run_counts);
        # a generator of its own, so the other draws of a seed stay as they were.
        self.counts_rng = random.Random(f"{config.seed}-counts")
        handler_rng = random.Random(master.random())
        self.clock = clock  # true time; moto's SQS reads it too
        self.sequencer = Sequencer()
        self.ledger = Ledger(self.sequencer, self.clock.now)
        # The `chaos.http` jobs' downstream (stopped by `close`).
        self.receiver = Receiver(self.ledger, self.clock.now, config.seed)
        self.receiver.start()
        self.plan: Plan = plan(
            random.Random(master.random()),
            config.runs,
            config.window(),
            config.seed,
            config.mix,
            http_url=self.receiver.url,
        )
        if config.hog:
            self.plan.jobs.extend(hog_jobs(random.Random(master.random()), self.plan.end, config.window()))
        self.rates = config.faults
        clock.set(self.plan.start)
        self.registry = chaos_registry(self.ledger, handler_rng)
        self.metrics = RecordedMetrics()  # the worker's and completers' (the figures count them)
        self.faults: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self.repairs = 0
        # Run key -> (when it should have moved on, when the reconciler repaired it), per repair.
        self.stranded: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
        # Run key -> when a worker held it back on purpose (true time): its claim found its
        # tenant at TENANT_CONCURRENCY, or it was buffered behind its job's running run.
        self.held_back: dict[str, list[datetime]] = defaultdict(list)
        self.audit = StreamAudit()
        self.tracked: dict[str, TrackedJob] = {}
        self.redrives: dict[str, list[int]] = {}
        # Run key -> attempt series (1: after its first redrive) -> the payload a redrive with
        # a fix gave that series: every call of it, and of the series after, must carry it.
        self.fixes: dict[str, dict[int, Any]] = defaultdict(dict)
        # Run key -> the deadline of each invocation that died between its effect and its
        # completion (UnrecordedEffectCrash), by the dying worker's clock.
        self.unrecorded: dict[str, list[datetime | None]] = defaultdict(list)
        self.frozen: list[Frozen] = []
        self.slow: list[Slow] = []
        self.slow_effects: list[SlowEffect] = []  # every one made, to end what still runs at the end
        self.job_types: dict[str, str] = {}  # job id -> its type, as created
        # Batches a throttled invocation left with the poller: (retry at, queue URL, messages).
        self.throttled: list[tuple[datetime, str, list[dict[str, Any]]]] = []
        self.frozen_count = 0
        self.invocations = 0
        # A batch's records run on threads of their own: what they report goes under this lock.
        self.lock = threading.RLock()
        self.message_ids: dict[str, str] = {}  # receipt handle -> message id, while in an invocation
        self.injecting = True
        self.unanswered: list[tuple[TrackedJob, str]] = []  # changes the API kept failing: asked again
        self.fleet: list[FleetLease] = []  # leases the external fleet is working on
        self.resumes: list[tuple[datetime, TrackedJob]] = []  # resumes due (resume_after)

        # Tenant slots are claimed in transactions: moto's own backs each one up by copying
        # every table it names, which grows with the run; local mode's snapshot of the named
        # items is the same rollback at a fixed cost.
        from jobsched_local.moto_transactions import install

        install()
        self.ddb: Any = boto3.client("dynamodb", region_name=REGION)
        # Every component's SQS calls pass through the trail, beneath the fault wrappers.
        self.trail = MessageTrail(boto3.client("sqs", region_name=REGION), self.clock.now)
        self.sqs: Any = self.trail
        self.streams: Any = boto3.client("dynamodbstreams", region_name=REGION)
        for spec in ALL_TABLES:
            self.ddb.create_table(**spec.create_table_request())
        self.urls, self.dlq_urls = _create_queues(self.sqs)
        stream_arn = self.ddb.describe_table(TableName=RUNS.default_name)["Table"]["LatestStreamArn"]
        self.stream_arn = stream_arn
        shard = self.streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"][0]
        self.iterator: str = self.streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        self.peek = MotoPeek(REGION)

        self.ddb_throttle = Throttle(self.rng, self.rates.ddb_throttle)
        self.sqs_throttle = Throttle(self.rng, self.rates.sqs_throttle)
        self.publish_throttle = Throttle(
            self.rng, self.rates.sqs_throttle, {"send_message_batch": self.rates.publish_failure}
        )
        self.throttles = [self.ddb_throttle, self.sqs_throttle, self.publish_throttle]
        self.dynamo = DynamoFaults(self.ddb, clock, self.rng, self.rates)
        self.loop = LoopCutoff(config.loop_limit)
        self.lanes: list[list[tuple[int, dict[str, Any]]]] = [[] for _ in range(STREAM_LANES)]

        shards = config.shard_count
        api_clock = self._skewed()
        api_defs = DefinitionStore(self._ddb(), DEFINITIONS.default_name, shards)
        # Which target-less runs wait for external workers, as production wires it (the
        # router's registry): the claimable index and the repair deadlines depend on it.
        self.route = priority_router(lambda job_type: self.registry.get(job_type) is not None)
        self.is_external = lambda run: self.route(run) == EXTERNAL_ROUTE
        api_runs = RunStore(self._ddb(), RUNS.default_name, shards, is_external=self.is_external)
        api_materializer = Materializer(api_defs, api_runs, api_clock, horizon=HORIZON)
        api_queues = self._queues(self.sqs_throttle)
        # One tenant limit for the Lambda worker and the lease API: the same slots, released
        # by the completer that ends each claim (as jobsched.wiring builds them).
        self.tenant_slots = TenantSlots(api_runs, config.tenant_concurrency)
        api_completer = Completer(
            api_defs, api_runs, api_queues, api_clock, self.metrics, slots=self.tenant_slots
        )
        api_missed = MissedRuns(api_defs, api_runs, api_completer, api_clock)
        # As the API's container wires it (jobsched.wiring): the resume decides which of the
        # pause's occurrences run and writes that decision with itself (`missed_windows`), and
        # a cancel cancels the job's unstarted runs.
        self.run_service = RunService(api_defs, api_runs, api_completer, api_clock)
        self.jobs = JobService(
            api_defs,
            api_clock,
            materialize=api_materializer.materialize,
            on_resume=api_missed.on_resume,
            runs=api_runs,
            plan_missed=api_missed.window,
            on_cancel=lambda job: self.run_service.cancel_unstarted(job, f"api:{job.tenant}"),
        )

        self.sweepers: list[tuple[Sweeper, ChaosDefinitionStore, Materializer]] = []
        for _ in range(2):
            skewed = self._skewed()
            defs = ChaosDefinitionStore(self._ddb(), DEFINITIONS.default_name, shards)
            runs = RunStore(self._ddb(), RUNS.default_name, shards, is_external=self.is_external)
            materializer = Materializer(defs, runs, skewed, horizon=HORIZON)
            self.sweepers.append((Sweeper(defs, materializer, skewed), defs, materializer))
        self.sweepers[0][1].before_save = self._sweeper_race

        self.outbox_sqs = DiesBeforeSend(self.sqs)
        self.outbox = Outbox(
            RunStore(self._ddb(), RUNS.default_name, shards, is_external=self.is_external),
            RunQueues(
                FlakyClient(self.outbox_sqs, self.publish_throttle, SQS_THROTTLED),
                self.urls,
                self.dlq_urls,
                fair=True,
            ),
            self._skewed(),
            self.route,
        )
        reconciler_clock = self._skewed()
        reconciler_runs = RunStore(self._ddb(), RUNS.default_name, shards, is_external=self.is_external)
        reconciler_defs = DefinitionStore(self._ddb(), DEFINITIONS.default_name, shards)
        completer = Completer(
            reconciler_defs,
            reconciler_runs,
            self._queues(self.sqs_throttle),
            reconciler_clock,
            self.metrics,
            slots=TenantSlots(
                reconciler_runs, config.tenant_concurrency
            ),  # a lease it expires frees its slot
        )
        missed_runs = MissedRuns(reconciler_defs, reconciler_runs, completer, reconciler_clock)
        self.reconciler = Reconciler(
            reconciler_runs,
            reconciler_clock,
            shard_count=shards,
            on_dead=completer.after,
            is_external=self.is_external,
            settle_held=missed_runs.settle_held,
            paused_claim=missed_runs.paused_claim,
            # As wiring.Container.reconciler: the repair sends what it repaired (its own
            # outbox, with the reconciler's clock; its sends are throttled like the outbox's).
            publish=Outbox(
                reconciler_runs,
                self._queues(self.publish_throttle),
                reconciler_clock,
                self.route,
                actor="reconciler",
            ).publish,
        )
        self.workers = [self._worker(f"w{i}") for i in range(config.workers)]
        # What the worker handler reads from its container (installed by `run_chaos`).
        self.services = ChaosServices(self._queues(self.sqs_throttle), self._skewed(), self.metrics)
        # The events consumer: the production handler over the same Runs stream records, its
        # own lanes and retries, publishing to the chaos bus. Its draws come from a generator
        # of its own, so the rest of a seed's world is the same with it or without it.
        self.events_rng = random.Random(f"events-{config.seed}")
        self.bus = ChaosBus(self.events_rng, self.rates.bus_refusal)
        self.services.settings = Settings(run_events=RunEventsLevel.ALL, event_source_name="chaos")
        self.services.event_publisher = EventPublisher(
            self.bus, "chaos-events", self.metrics, sleep=lambda seconds: None, rng=self.events_rng
        )
        self.notices = ChaosNoticeQueue(self.events_rng, self.rates.bus_refusal)
        self.services.notification_queue = NotificationQueue(
            self.notices, "chaos-notifications", self.metrics, sleep=lambda seconds: None, rng=self.events_rng
        )
        # No events failures queue: a record is never set aside, so every transition the
        # stream carried must reach the bus (the checker's `lost` events), however long the
        # chaos bus refuses it.
        self.services.record_delivery = RecordDelivery(
            self.services.event_publisher,
            self.services.notification_queue,
            SetAsideQueue(None, None, "chaos-events", "chaos-notifications", self.metrics),
        )
        self.event_lanes: list[list[tuple[int, dict[str, Any]]]] = [[] for _ in range(STREAM_LANES)]
        self.final_jobs: dict[str, Job] = {}

    def close(self) -> None:
        self.receiver.stop()

    # --- construction helpers ---

    def _skewed(self) -> SkewedClock:
        bound = int(CLOCK_SKEW.total_seconds())
        return SkewedClock(self.clock, self.rng.randint(-bound, bound))

    def _ddb(self, ended: threading.Event | None = None) -> Any:
        """A component's DynamoDB client; with `ended`, one invocation's (see EndsWithInvocation)."""
        client = self.dynamo.client(self.ddb_throttle, DDB_THROTTLED)
        return client if ended is None else EndsWithInvocation(client, ended)

    def _queues(
        self, throttle: Throttle, *, looping: bool = False, ended: threading.Event | None = None
    ) -> RunQueues:
        sqs: Any = LoopingQueueClient(self.sqs, self.loop) if looping else self.sqs
        if ended is not None:
            sqs = EndsWithInvocation(sqs, ended)
        return RunQueues(FlakyClient(sqs, throttle, SQS_THROTTLED), self.urls, self.dlq_urls, fair=True)

    def _worker(
        self, name: str, *, registry: Any = None, ended: threading.Event | None = None
    ) -> ChaosWorker:
        """A worker as `wiring.Container.worker` builds it: the production TargetRunner with
        the HttpTargetClient, its destination policy (the receiver allowed, as an operator's
        HTTP_ALLOW_DESTINATIONS would) and the Standard Webhooks signer reading each job's
        secrets; Python handlers from the chaos registry (or `registry`). No secret headers in
        chaos. With `ended`, the worker of one invocation that Lambda may end at its deadline:
        from then on, none of its calls reaches DynamoDB or SQS."""
        from jobsched.targets import DestinationPolicy, HttpTargetClient, TargetRunner
        from jobsched.targets.signing import DeliverySigner

        shards = self.config.shard_count
        definitions = ChaosDefinitionStore(self._ddb(ended), DEFINITIONS.default_name, shards)
        clock = self._skewed()
        http = HttpTargetClient(
            DestinationPolicy([ALLOW]), signer=DeliverySigner(definitions.signing_secrets, clock)
        )
        runs = ChaosRunStore(self._ddb(ended), RUNS.default_name, shards, is_external=self.is_external)
        return ChaosWorker(
            definitions,
            runs,
            self._queues(self.sqs_throttle, looping=True, ended=ended),
            TargetRunner(lambda service: None, registry=registry or self.registry, http=http),
            clock,
            worker_id=name,
            lease_seconds=60,
            tenant_concurrency=self.config.tenant_concurrency,
            metrics=self.metrics,
            tenant_slots=ObservedSlots(runs, self.config.tenant_concurrency, self._held_back),
            watch=self._watch,
        )

    def _held_back(self, run_key: str) -> None:
        with self.lock:
            self.held_back[run_key].append(self.clock.now())

    # --- the loop ---

    def run(self) -> Report:
        config = self.config
        window = self.plan.window_seconds
        creations = sorted(self.plan.jobs, key=lambda j: j.create_at)
        second = 0
        settled = False
        self.out(
            f"chaos: seed={config.seed} start={self.plan.start:%Y-%m-%dT%H:%M:%SZ}"
            f" dst_zone={self.plan.transition_zone} window={window}s jobs={len(self.plan.jobs)}"
            f" planned_occurrences={sum(j.expected for j in self.plan.jobs)}"
            + (f" mutant={config.mutant}" if config.mutant else "")
        )
        while True:
            if second == window:
                self._stop_injecting()
            if (
                second >= window
                and second % 15 == 0
                and not self.audit.open_runs()
                and not self.frozen
                and not self.slow
                and not self.fleet
                and not self.throttled
            ):
                settled = True
                break
            if second >= window + config.settle_limit_seconds:
                break
            while creations and creations[0].create_at <= second:
                if not self._create(creations[0], late=second - creations[0].create_at):
                    break  # refused all this second (a throttled hot tenant): tried again the next
                creations.pop(0)
            if self.injecting:
                self._control()
                self.dynamo.tick([*sorted(self.tracked), *TENANTS, HOG_TENANT])
            self._hog_work()
            self._fleet_work()
            self._thaw_due()
            self._slow_due()
            if second % config.sweep_every == 0:
                self._sweep()
            self._stream()
            self._events()
            self._deliver()
            if second % config.reconcile_every == 0:
                self._reconcile()
            second += 1
            self.clock.advance(1)
            if config.verbose and second % 300 == 0:
                self.out(f"  t+{second}s open={len(self.audit.open_runs())} outcomes={dict(self.outcomes)}")
        self._stream()
        self._drain_events()
        for problem in self.receiver.rejected:
            self._unexpected("receiver", f"a delivery that does not verify: {problem}")
        for status, count in self.receiver.answers.items():
            self.faults[f"webhooks_answered_{status}"] += count
        figures, explanations = self._check()
        # Judged: end the effects still running (an invocation that returned without waiting
        # for its effect), so that no thread outlives the run and the process can exit.
        for effect in self.slow_effects:
            effect.ended.set()
        return Report(figures, self.faults, self.outcomes, self.unexpected, second, settled, explanations)

    def _stop_injecting(self) -> None:
        self.injecting = False
        self.bus.injecting = False
        self.notices.injecting = False
        self.rates = NO_FAULTS
        self.dynamo.rates = NO_FAULTS
        self.dynamo.enabled = False
        for throttle in self.throttles:
            throttle.enabled = False
        for tracked, kind in self.unanswered:
            self._lifecycle(tracked, kind)
        self.unanswered = []
        for frozen in list(self.frozen):
            self._thaw(frozen)
        # Users resume what they paused: runs held while paused are decided (missedRuns) and
        # must then settle like any other.
        for tracked in self.tracked.values():
            if tracked.acks and tracked.acks[-1].kind == "pause":
                for _ in range(5):
                    before = len(tracked.acks)
                    self._lifecycle(tracked, "resume")
                    if len(tracked.acks) > before:
                        break

    # --- API: creation and lifecycle changes ---

    def _create(self, planned: Any, *, late: int = 0) -> bool:
        """False when every try this simulated second was refused: a client backs off and tries
        again later (a hot-key burst throttles its tenant for up to 20 s)."""
        for _ in range(20):  # a client retries a 503 until the job is accepted
            try:
                # With an idempotency key, as a careful client: a retry after a timeout whose
                # create did land answers with that job instead of making a second one.
                created = self.jobs.create(planned.tenant, planned.spec, idempotency_key=planned.spec.name)
            except JobschedError:
                continue
            job = created.job
            self.tracked[job.job_id] = TrackedJob(job.job_id, job.tenant)
            self.job_types[job.job_id] = job.spec.type
            if job.spec.target is not None:
                self._trust(job, created.signing_secret)
            return True
        if late > CREATE_PATIENCE_SECONDS:
            raise RuntimeError("the API kept failing to create a job")
        return False

    def _trust(self, job: Job, secret: str | None) -> None:
        """Configure the receiver with the job's signing secret, as its owner would from the
        create answer. A replayed create (a retry after a timeout that landed) shows none: the
        owner rotates, and the new secret signs from then on (the old one beside it)."""
        for _ in range(20):
            if secret is not None:
                self.receiver.trust(job.job_id, secret)
                return
            try:
                secret = self.jobs.rotate_signing_secret(job.tenant, job.job_id).current
            except JobschedError:
                continue
        raise RuntimeError(f"the API kept failing to rotate the signing secret of {job.job_id}")

    def _control(self) -> None:
        rng = self.control_rng
        now = self.clock.now()
        for due in [r for r in self.resumes if r[0] <= now]:
            self.resumes.remove(due)
            if due[1].acks and due[1].acks[-1].kind == "pause":
                self._lifecycle(due[1], "resume")
        waiting, self.unanswered = self.unanswered, []
        for tracked, kind in waiting:
            self._lifecycle(tracked, kind)
        if waiting:
            return
        if self.tracked and rng.random() < self.rates.control:
            tracked = self.tracked[rng.choice(sorted(self.tracked))]
            paused = bool(tracked.acks) and tracked.acks[-1].kind == "pause"
            cancelled = any(a.kind == "cancel" for a in tracked.acks)
            if not cancelled and not any(t is tracked for t, _ in self.unanswered):
                if paused:
                    kind = "resume" if rng.random() < 0.7 else "cancel"
                else:
                    kind = "pause" if rng.random() < 1 - self.config.cancel_share else "cancel"
                self._lifecycle(tracked, kind)
        if self.tracked and self.counts_rng.random() < COUNTER_READS:
            tracked = self.tracked[self.counts_rng.choice(sorted(self.tracked))]
            with contextlib.suppress(JobschedError):  # a 503 (throttled): it reads again later
                self.run_service.summary(tracked.tenant, tracked.job_id)
        if self.tracked and rng.random() < self.rates.patch:
            self._patch(self.tracked[rng.choice(sorted(self.tracked))])
        if self.tracked and rng.random() < self.rates.trigger:
            self._trigger(self.tracked[rng.choice(sorted(self.tracked))])
        if self.tracked and rng.random() < self.rates.backfill:
            self._backfill(self.tracked[rng.choice(sorted(self.tracked))])
        if rng.random() < self.rates.redrive:
            dead = sorted(k for k, r in self.audit.latest.items() if r.state is RunState.DEAD)
            if dead:
                run = self.audit.latest[rng.choice(dead)]
                run = self._observed(run.run_key) or run
                # Half the redrives fix the payload first (a BAD job's fixed run acts).
                fix = None
                if rng.random() < 0.5:
                    fix = RunFix(payload={FIXED: self.sequencer.next()}, replaces_payload=True)
                try:
                    self.run_service.redrive(run.tenant, run.run_key, "api:chaos", "chaos redrive", fix=fix)
                except JobschedError:
                    # Refused, or answered with an error after it landed (a timeout after the
                    # write): the observer looks, so the checker splits the attempt series right.
                    if not self._redrive_landed(run):
                        return
                series = self.redrives.setdefault(run.run_key, [])
                series.append(self.sequencer.next())
                self.faults["redrive"] += 1
                if fix is not None:
                    self.fixes[run.run_key][len(series)] = fix.payload
                    self.faults["redrive_fixes"] += 1

    def _patch(self, tracked: TrackedJob) -> None:
        """PATCH the job's payload, priority and retry policy (If-Match on the version read).
        Runs already made keep the definition they were made with (docs/concepts/jobs.md, PATCH): each run
        is judged by its own policies."""
        rng = self.control_rng
        try:
            job = self.jobs.get(tracked.tenant, tracked.job_id)
            policies = job.spec.policies
            retry = policies.retry.model_copy(
                update={"max_attempts": rng.randint(*self.config.mix.max_attempts)}
            )
            spec = job.spec.model_copy(
                update={
                    "payload": {"n": job.spec.name, "patched": job.version},
                    "priority": rng.choice(list(Priority)),
                    "policies": policies.model_copy(update={"retry": retry}),
                }
            )
            self.jobs.update(tracked.tenant, tracked.job_id, job.version, lambda current: spec)
        except JobschedError:
            return  # refused (a completed job, a stale version, a 503): the client gives up
        self.faults["patch"] += 1

    def _trigger(self, tracked: TrackedJob) -> None:
        """A manual run now. Counted before the call: an error may follow a run that landed."""
        tracked.triggers += 1
        try:
            run = self.run_service.trigger(tracked.tenant, tracked.job_id, "api:chaos")
        except JobschedError:
            return
        tracked.manual_keys.append(run.run_key)
        self.faults["trigger"] += 1

    def _backfill(self, tracked: TrackedJob) -> None:
        """Backfill a stretch of the job's past before it was created (so the runs are new),
        up to five minutes of it."""
        job = self._stored_job(tracked.job_id)
        if job is None or job.spec.schedule.kind is ScheduleKind.ONCE:
            return
        rng = self.control_rng
        end = job.created_at - timedelta(seconds=rng.randint(1, 60))
        start = end - timedelta(seconds=rng.randint(10, 300))
        backfill = Backfill(start, end)
        tracked.backfills.append(backfill)
        try:
            result = self.run_service.backfill(tracked.tenant, tracked.job_id, start, end, "api:chaos")
        except JobschedError:
            return  # refused, or failed part-way: what it made is still checked
        backfill.acknowledged = True
        backfill.created = list(result.created)
        self.faults["backfill"] += 1
        self.faults["backfill_runs"] += len(result.created)

    def _stored_job(self, job_id: str) -> Job | None:
        return DefinitionStore(self.ddb, DEFINITIONS.default_name, self.config.shard_count).get(job_id)

    def _observed(self, run_key: str) -> Run | None:
        return RunStore(self.ddb, RUNS.default_name, self.config.shard_count).get_by_key(run_key)

    def _redrive_landed(self, before: Run) -> bool:
        current = self._observed(before.run_key)
        redrives = [e for e in (current.history if current else []) if e.actor == "api:chaos"]
        return len(redrives) > sum(1 for e in before.history if e.actor == "api:chaos")

    def _lifecycle(self, tracked: TrackedJob, kind: str) -> None:
        action = {"pause": self.jobs.pause, "resume": self.jobs.resume, "cancel": self.jobs.cancel}[kind]
        for _ in range(5):
            try:
                job = action(tracked.tenant, tracked.job_id)
                break
            except (StorageUnavailable, ConcurrentUpdate):
                # A 503 or a lost race: the change may have landed (a timeout after the write);
                # the client repeats the call, which is idempotent, until it is answered.
                continue
            except JobschedError:
                return  # 409 for a completed job: not acknowledged
        else:
            if not self.injecting:
                raise RuntimeError(f"the API kept failing to {kind} a job")
            self.unanswered.append((tracked, kind))  # a hot key: the client asks again next second
            return
        if kind == "pause" and job.state is not JobState.PAUSED:
            return
        tracked.acks.append(Ack(kind, self.sequencer.next(), self.clock.now()))
        self.faults[kind] += 1
        if kind == "pause" and self.config.resume_after is not None:
            later = self.clock.now() + timedelta(seconds=self.control_rng.randint(*self.config.resume_after))
            self.resumes.append((later, tracked))

    # --- sweeper ---

    def _sweep(self) -> None:
        first, second = self.sweepers
        if self.rng.random() < self.rates.interleaved_sweep:
            # Two sweepers at once: A reads its due jobs, B sweeps everything, A materialises
            # the jobs as it read them (stale revs, runs already there).
            self.faults["interleaved_sweep"] += 1
            _, defs, materializer = first
            until = self.clock.now() + HORIZON
            stale: list[Job] = []
            for shard in range(self.config.shard_count):
                try:
                    stale += defs.due_jobs(shard, until, limit=100).jobs
                except JobschedError:
                    continue
            self._guarded(second[0].sweep)
            for job in stale:
                self._guarded(functools.partial(materializer.materialize, job))
            return
        self._guarded(self.rng.choice(self.sweepers)[0].sweep)

    def _sweeper_race(self, job: Job) -> None:
        """Just before sweeper A advances a job, sweeper B materialises the same job."""
        if not self.injecting or self.rng.random() >= self.rates.interleaved_sweep:
            return
        self.faults["sweeper_race"] += 1
        _, defs, materializer = self.sweepers[1]
        try:
            current = defs.get(job.job_id)
            if current is not None:
                materializer.materialize(current)
        except JobschedError:
            pass

    def _guarded(self, step: Callable[[], Any]) -> None:
        try:
            step()
        except JobschedError:
            pass  # throttled after retries: the next tick tries again
        except Exception:
            self._unexpected("sweeper")

    # --- stream → outbox ---

    def _stream(self) -> None:
        from jobsched.handlers.events import matches_filter as events_filter
        from jobsched.handlers.outbox import matches_filter
        from jobsched_local.glue import lambda_stream_record

        fresh: list[dict[str, Any]] = []
        while self.peek.stream_has_records():
            response = self.streams.get_records(ShardIterator=self.iterator, Limit=1000)
            self.iterator = response.get("NextShardIterator") or self.iterator
            records = response.get("Records", [])
            for raw in records:
                record = lambda_stream_record(raw, self.stream_arn, REGION)
                self.audit.observe(record)
                if events_filter(record, RunEventsLevel.ALL, RUNS):
                    self.event_lanes[_lane(record)].append((0, record))
                if matches_filter(record):
                    fresh.append(record)
            if len(records) < 1000:
                break
            self.peek.forget_stream()
        if fresh and self.rng.random() < self.rates.lost_stream_batch:
            self.faults["lost_stream_batch"] += 1
            self.faults["lost_stream_records"] += len(fresh)
            fresh = []
        # Records reach the outbox in lanes (stream shards, and batches of one shard processed
        # side by side): one item's records stay in order in one lane, but a lane that lags lets
        # the others' newer records through first.
        for record in fresh:
            self.lanes[_lane(record)].append((0, record))
        order = list(range(STREAM_LANES))
        if self.injecting:
            self.rng.shuffle(order)
        for lane in order:
            batch = self.lanes[lane]
            if not batch:
                continue
            others_waiting = any(self.lanes[other] for other in order if other != lane)
            if others_waiting and self.rng.random() < self.rates.stream_lane_lag:
                self.faults["stream_lane_lagged"] += 1
                continue
            self.lanes[lane] = []
            self._outbox_batch(lane, batch)

    def _outbox_batch(self, lane: int, batch: list[tuple[int, dict[str, Any]]]) -> None:
        """One outbox invocation for one lane's batch, retried whole as Lambda retries it."""
        from jobsched.handlers.outbox import runs_of

        runs, _ = runs_of([record for _, record in batch])
        tries = max(t for t, _ in batch) + 1  # this one included
        last_try = tries > STREAM_RETRIES
        # No draw when a fault is off: a world without it keeps the fault sequence it had.
        self.outbox_sqs.armed = (
            self.rates.outbox_died > 0 and self.rng.random() < self.rates.outbox_died
        ) or (
            last_try
            and self.rates.outbox_died_last_try > 0
            and self.rng.random() < self.rates.outbox_died_last_try
        )
        try:
            failed = set(self.outbox.publish_records([runs[s] for s in sorted(runs)]))
        except InvocationDied:
            self.faults["outbox_died"] += 1  # Lambda retries the whole batch
            failed = {run.run_key for run in runs.values()}
        except Exception:
            self._unexpected("outbox")
            failed = {run.run_key for run in runs.values()}
        finally:
            self.outbox_sqs.armed = False
        if failed:
            self.faults["publish_failed_runs"] += len(failed)
        # A partial failure, or an invocation that timed out after it published: Lambda sends
        # the batch again whole, the records that succeeded with the ones that failed.
        again = bool(failed) or self.rng.random() < self.rates.stream_redelivery
        if not again or last_try:
            return  # done, or given up (the failure destination): the reconciler repairs
        self.faults["stream_batches_redelivered"] += 1
        self.lanes[lane] = [(tries, record) for _, record in batch] + self.lanes[lane]

    # --- stream → events consumer → bus ---

    def _events(self) -> None:
        """One events invocation per lane with records waiting (up to 100, as the mapping's
        batch): the production handler; Lambda retries from the first record it reports, and
        now and then redelivers a batch that succeeded (its invocation timed out after)."""
        from jobsched.handlers.events import handler

        rng = self.events_rng
        for lane, waiting in enumerate(self.event_lanes):
            if not waiting:
                continue
            if self.injecting and rng.random() < self.rates.stream_lane_lag:
                continue
            batch, rest = waiting[:100], waiting[100:]
            event = {"Records": [record for _, record in batch]}
            try:
                context = SimulatedLambdaContext(
                    self.clock, self.clock.now() + timedelta(seconds=60), "events"
                )
                answer = handler(event, context)
                failures = {f["itemIdentifier"] for f in answer.get("batchItemFailures", [])}
            except Exception:
                # Every record failed (the batch processor raises) or the handler broke.
                failures = {record["dynamodb"]["SequenceNumber"] for _, record in batch}
            first = next(
                (n for n, (_, r) in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failures), None
            )
            if first is None and self.injecting and rng.random() < self.rates.stream_redelivery:
                first = 0
                self.faults["event_batches_redelivered"] += 1
            retried = [(tries + 1, record) for tries, record in batch[first:]] if first is not None else []
            self.event_lanes[lane] = retried + rest

    def _drain_events(self) -> None:
        """After the run: every record the consumer still holds is published (no faults now)."""
        for _ in range(10_000):
            if not any(self.event_lanes):
                return
            self._events()
        self._unexpected("events consumer", "records still unpublished after draining")

    # --- SQS → worker ---

    def _deliver(self) -> None:
        now = self.clock.now()
        due = [t for t in self.throttled if t[0] <= now]
        self.throttled = [t for t in self.throttled if t[0] > now]
        for _, url, messages in due:
            self._invoke(url, messages)  # the poller's retry: the messages stayed in flight
        for spec in QUEUES:
            url = self.urls[spec.key]
            for _ in range(100):
                if not self.peek.queue_has_visible(spec.default_name):
                    break
                messages = self.sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
                ).get("Messages", [])
                if not messages:
                    break
                self._invoke(url, messages)

    def _invoke(self, url: str, messages: list[dict[str, Any]]) -> None:
        """One worker invocation for one batch, as Lambda's SQS event source makes it: the
        production handler runs the batch's records at once, and the messages it does not
        list in `batchItemFailures` are deleted. Faults are armed per record beforehand."""
        rates = self.rates
        roll = self.rng.random()
        if roll < rates.throttled_invocation:
            # Throttled: nothing runs; the poller keeps the batch in flight and invokes it
            # again after a backoff (AWS retries a throttled batch until its visibility timeout).
            self.faults["throttled_invocations"] += 1
            retry_at = self.clock.now() + timedelta(seconds=self.rng.randint(1, 20))
            self.throttled.append((retry_at, url, messages))
            return
        killed = roll < rates.throttled_invocation + rates.killed_invocation
        cut = self.rng.randrange(len(messages)) if killed else len(messages)
        if killed:
            # Killed at its timeout part-way: the records done by then were never acknowledged
            # (no batch response), the one at the cut dies where it was, the ones behind it die
            # before their effect; the whole batch comes back once the handler's hold (the
            # lease plus 5 s) or a heartbeat's runs out.
            self.faults["killed_invocations"] += 1
        worker = self.rng.choice(self.workers)
        context = self._context(killed=killed)
        batch: list[dict[str, Any]] = []
        armed: list[tuple[Any, str]] = []
        for index, message in enumerate(messages):
            delivery = self._received(message)
            roll = self.rng.random()
            if not killed and roll < rates.freeze_worker and self.frozen_count < rates.max_frozen:
                self._freeze(delivery, url, message)  # its own invocation, on its own thread
                continue
            roll -= rates.freeze_worker
            if not killed and 0 <= roll < rates.freeze_claim and self.frozen_count < rates.max_frozen:
                self._freeze(delivery, url, message, at_claim=True)
                continue
            roll -= rates.freeze_claim
            if not killed and 0 <= roll < rates.slow_effect and self._may_be_slow(delivery):
                self._slow_effect(delivery, url, message)  # its own invocation, on its own thread
                continue
            roll -= rates.slow_effect
            batch.append(message)
            point = self._crash_point(worker, delivery, roll, at_cut=index == cut, behind=index > cut)
            if point is not None:
                point[0].arm(point[1])
                armed.append(point)
        if not batch:
            return
        event = sqs_event(url, batch)
        # At-least-once delivery: copies of some messages handed to a second invocation on
        # another worker at the same time (its copies were never in the queue: nothing of it
        # is deleted; a visibility it sets is the message's, as a real duplicate's would be).
        copies = [m for m in batch if self.rng.random() < rates.duplicate_delivery]
        twin: threading.Thread | None = None
        if copies and not killed:
            self.faults["duplicate_delivery"] += len(copies)
            twin_worker, twin_context = self.rng.choice(self.workers), self._context()
            twin = threading.Thread(
                target=self._run_handler,
                args=(twin_worker, sqs_event(url, copies), twin_context),
                name=f"twin-{twin_context.aws_request_id}",
            )
            twin.start()
        try:
            response = self._run_handler(worker, event, context)
        finally:
            if twin is not None:
                twin.join()
            for points, key in armed:
                points.disarm(key)  # a point its record never reached
        if killed:
            return
        self._acknowledge(url, event, response)
        for message in batch:
            if self.rng.random() < rates.late_duplicate:
                self.faults["late_duplicate"] += 1
                self.sqs.send_message(
                    QueueUrl=url, MessageBody=message["Body"], DelaySeconds=self.rng.randint(1, 120)
                )

    def _crash_point(
        self, worker: ChaosWorker, delivery: Received, roll: float, *, at_cut: bool, behind: bool
    ) -> tuple[Any, str] | None:
        """Where (the crash points and the key) this record's worker dies, if it does."""
        runs, defs = worker._runs, worker._definitions
        assert isinstance(runs, ChaosRunStore) and isinstance(defs, ChaosDefinitionStore)
        rates = self.rates
        if behind:
            return defs.crash_reading, delivery.job_id
        if at_cut:
            where = self.rng.random()
            if where < 1 / 3:
                return defs.crash_reading, delivery.job_id
            if where < 2 / 3:
                return runs.crash_unrecorded, delivery.run_key
            return runs.crash_finishing, delivery.run_key
        if roll < 0:
            return None  # a frozen record's share of the roll
        if roll < rates.crash_before_effect:
            return defs.crash_reading, delivery.job_id
        if roll < rates.crash_before_effect + rates.crash_after_effect:
            return runs.crash_finishing, delivery.run_key
        if roll < rates.crash_before_effect + rates.crash_after_effect + rates.crash_before_completion:
            return runs.crash_unrecorded, delivery.run_key
        return None

    def _received(self, message: dict[str, Any]) -> Received:
        from jobsched.store.queues import RunMessage

        body = RunMessage.from_json(message["Body"])
        return Received(body.run_key, body.job_id, body.scheduled_for, "default")

    def _run_handler(
        self, worker: ChaosWorker, event: dict[str, Any], context: SimulatedLambdaContext
    ) -> Any:
        """The worker Lambda's handler on `event`, with `worker` as its container's worker.
        Its answer (None when it raised: Lambda then deletes nothing)."""
        from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
        from jobsched.handlers.worker import handler

        with self.lock:
            for record in event["Records"]:
                self.message_ids[record["receiptHandle"]] = record["messageId"]
        try:
            with self.services.serving(worker):
                return handler(event, context)
        except BatchProcessingError:
            return None  # every record failed: the processor raises, as Lambda's function errors
        except Exception:
            self._unexpected("worker handler")
            return None
        finally:
            with self.lock:
                for record in event["Records"]:
                    self.message_ids.pop(record["receiptHandle"], None)

    def _acknowledge(self, url: str, event: dict[str, Any], response: Any) -> None:
        if response is None:
            return
        done = acknowledged(event, response)
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(done)],
            )

    def _context(self, *, killed: bool = False) -> SimulatedLambdaContext:
        """A new invocation's context: its deadline is drawn from the configured timeouts; one
        killed at its timeout part-way has seconds left."""
        self.invocations += 1
        seconds = self.rng.randint(6, 30) if killed else self.rng.choice(self.config.invocation_seconds)
        deadline = self.clock.now() + timedelta(seconds=seconds)
        return SimulatedLambdaContext(self.clock, deadline, f"inv{self.invocations}")

    def _watch(
        self, worker: ChaosWorker, delivery: Received, attempt: Callable[[], AttemptResult]
    ) -> AttemptResult:
        """One record's attempt, on its thread of the batch: counted by its outcome, or by what
        it raised (then raised on to the batch processor, which reports the record failed).
        A death between a successful effect and its completion is recorded with the
        invocation's own deadline."""
        context = worker.context
        with self.lock:
            message_id = self.message_ids.get(delivery.receipt_handle or "", "")
        try:
            with self.loop.invocation(message_id):
                result = attempt()
        except InvocationEnded:
            with self.lock:
                self.outcomes["ended_at_deadline"] += 1
            raise
        except UnrecordedEffectCrash as exc:
            with self.lock:
                self.faults["crash_before_completion"] += 1
                # Judged by the invocation's own deadline, not by what its claim recorded.
                self.unrecorded[exc.run_key].append(context.deadline if context else None)
            raise
        except SimulatedCrash as exc:
            with self.lock:
                self.faults["crash_before_effect" if "before" in str(exc) else "crash_after_effect"] += 1
            raise
        except (JobschedError, ExecutionError) as exc:
            with self.lock:
                self.outcomes[f"error:{type(exc).__name__}"] += 1
            raise
        except Exception:
            self._unexpected("worker")
            raise
        with self.lock:
            self.outcomes[result.outcome.value] += 1
        if result.outcome is AttemptOutcome.DEFERRED and result.error_class == "buffered":
            self._held_back(delivery.run_key)  # waits on purpose for the job's running run
        return result

    def _freeze(
        self, delivery: Received, url: str, message: dict[str, Any], *, at_claim: bool = False
    ) -> None:
        """A worker that stops (GC pause, lost CPU) between its effect and its completion, or
        (`at_claim`) between its tenant slot's put and its claim's write: the record's own
        one-record invocation of the handler, on a thread of its own."""
        self.frozen_count += 1
        worker = self._worker(f"frozen{self.frozen_count}")
        runs = worker._runs
        assert isinstance(runs, ChaosRunStore)
        freeze = Freeze(delivery.run_key, at_claim=at_claim)
        runs.freeze = freeze
        done = threading.Event()
        box: dict[str, Any] = {}
        context = self._context()
        event = sqs_event(url, [message])

        def invoke() -> None:
            try:
                box["response"] = self._run_handler(worker, event, context)
            finally:
                done.set()

        thread = threading.Thread(target=invoke, name=f"frozen-{self.frozen_count}", daemon=True)
        thread.start()
        while not (freeze.reached.wait(0.005) or done.is_set()):
            pass
        if freeze.reached.is_set():
            self.faults["frozen_claim" if at_claim else "frozen_worker"] += 1
            thaw_after = self.rng.randint(
                *(self.config.claim_thaw_seconds if at_claim else self.config.thaw_seconds)
            )
            self.frozen.append(
                Frozen(thread, freeze, done, box, self.clock.now(), thaw_after, context.deadline)
            )
            return
        thread.join()
        runs.freeze = None
        self._acknowledge(url, event, box.get("response"))

    def _may_be_slow(self, delivery: Received) -> bool:
        job = self.job_types.get(delivery.job_id)
        return job in (OK, FLAKY) and len(self.slow) < self.rates.max_slow

    def _slow_effect(self, delivery: Received, url: str, message: dict[str, Any]) -> None:
        """The record's own one-record invocation, on a thread of its own, whose effect takes
        simulated time: maybe past its timeout (the attempt stops waiting, the effect goes
        on), maybe past the invocation's deadline (where `_slow_due` ends it)."""
        ended = threading.Event()
        context = self._context()
        effect = SlowEffect(
            SkewedClock(self.clock, 0),
            self.rng.uniform(*self.config.slow_effect_seconds),
            context.deadline,
            ended,
        )
        registry = chaos_registry(self.ledger, random.Random(self.rng.random()), slow=effect)
        worker = self._worker(f"slow{self.invocations}", registry=registry, ended=ended)
        event = sqs_event(url, [message])
        box: dict[str, Any] = {}

        def invoke() -> None:
            box["response"] = self._run_handler(worker, event, context)

        thread = threading.Thread(target=invoke, name=f"slow-{self.invocations}", daemon=True)
        self.faults["slow_effects"] += 1
        self.slow_effects.append(effect)
        self.slow.append(Slow(thread, effect, delivery.run_key, url, event, box))
        thread.start()
        # Until its call begins or its invocation ends without one (the run was not due,
        # taken, paused...): what it writes first lands in this simulated second.
        while not (effect.started.wait(0.005) or not thread.is_alive()):
            pass

    def _slow_due(self) -> None:
        """Acknowledge what finished slow invocations answered; end those still running at
        their deadline, as Lambda does (every thread of the invocation stops there, and none
        of its calls after that reaches anything). An effect ended mid-way may have acted
        without its completion: one repeat after the deadline is allowed, as for any death
        between an effect and its completion."""
        now = self.clock.now()
        for slow in list(self.slow):
            if not slow.thread.is_alive():
                self.slow.remove(slow)
                self._acknowledge(slow.url, slow.event, slow.box.get("response"))
                continue
            if now < slow.effect.deadline:
                continue
            slow.effect.ended.set()
            slow.thread.join(timeout=60)
            if slow.thread.is_alive():
                raise RuntimeError(f"an ended invocation did not stop ({slow.run_key})")
            self.slow.remove(slow)
            self.faults["slow_effects_ended_at_deadline"] += 1
            if slow.effect.call is not None:
                with self.lock:
                    self.unrecorded[slow.run_key].append(slow.effect.deadline)

    def _thaw_due(self) -> None:
        now = self.clock.now()
        for frozen in list(self.frozen):
            if now - frozen.since >= timedelta(seconds=frozen.thaw_after):
                self._thaw(frozen)

    def _thaw(self, frozen: Frozen) -> None:
        self.frozen.remove(frozen)
        if frozen.freeze.state is RunState.SUCCEEDED and self.clock.now() >= frozen.deadline:
            # Still frozen at its invocation's deadline, after its effect: Lambda ended it there
            # (what resumes later is a thread of a dead invocation), one allowed repeat.
            self.unrecorded[frozen.freeze.run_key].append(frozen.deadline)
        frozen.freeze.thaw.set()
        frozen.thread.join(timeout=60)
        if frozen.thread.is_alive():
            raise RuntimeError(f"a thawed worker did not finish ({frozen.freeze.run_key})")
        # Its message was redelivered long ago; the stale receipt handle is not deleted.

    # --- a tenant growing its runs as fast as the API allows ---

    def _hog_work(self) -> None:
        """The hog's external worker, once a simulated second: lease what is due, heartbeat,
        and fail each attempt with the longest error the API accepts (succeed with an
        oversized result once the window is over, so its runs settle); now and then it walks
        away from a lease, which the reconciler expires."""
        if not self.config.hog or self.clock.now().second % 2:
            return  # it polls every other second
        service = self.run_service
        try:
            leased = service.claim(HOG_TENANT, [HOG_TYPE], 10, 30, HOG_WORKER)
        except JobschedError:
            return
        for run in leased:
            self.faults["hog_attempts"] += 1
            call = self.ledger.begin(
                run.run_key, run.job_type, run.attempt, run.tenant, LEASE, payload=run.payload
            )
            if self.injecting and self.rng.random() < 0.05:
                self.ledger.end(call, acted=False)  # walked away: nothing done
                continue
            self.ledger.end(call, acted=not self.injecting)
            try:
                service.heartbeat(HOG_TENANT, run.run_key, run.fence, 30)
                if self.injecting:
                    service.complete(
                        HOG_TENANT,
                        run.run_key,
                        run.fence,
                        "failed",
                        error_class=HOG_CLASS,
                        error_message=HOG_MESSAGE,
                        retryable=True,
                    )
                else:
                    service.complete(HOG_TENANT, run.run_key, run.fence, "succeeded", result=HOG_RESULT)
            except JobschedError:
                self.faults["hog_refused"] += 1

    # --- the external fleet: lease API workers for the other tenants' external jobs ---

    def _fleet_work(self) -> None:
        """Once a simulated second: finish the leases whose work is done (complete under the
        fence, asking again next second while the API is unavailable), then lease what is due
        for each tenant. Each lease's work is a call in the ledger from the lease to its end."""
        service = self.run_service
        now = self.clock.now()
        for lease in [f for f in self.fleet if f.until <= now]:
            if lease.tries == 0:
                lease.call = self.ledger.end(lease.call, acted=lease.succeed)
            lease.tries += 1
            run = lease.run
            try:
                if lease.succeed:
                    service.complete(run.tenant, run.run_key, run.fence, "succeeded", result={"by": "fleet"})
                else:
                    service.complete(
                        run.tenant,
                        run.run_key,
                        run.fence,
                        "failed",
                        error_class="Upstream503",
                        error_message="external work failed (injected)",
                        retryable=True,
                    )
            except (StorageUnavailable, ConcurrentUpdate):
                if lease.tries < 10:
                    continue  # asked again next second, well inside the lease
                self.faults["fleet_gave_up"] += 1
                if lease.succeed and run.lease_expires_at is not None:
                    # Its effect is done and its completion never landed: the next holder,
                    # after this lease, acts again (the lease API's documented repeat).
                    self.unrecorded[run.run_key].append(run.lease_expires_at)
            except JobschedError:
                self.faults["fleet_refused"] += 1
            self.fleet.remove(lease)
        for tenant in self._fleet_tenants(now):
            try:
                leased = service.claim(tenant, [EXTERNAL], 3, FLEET_LEASE_SECONDS, f"fleet-{tenant}")
            except JobschedError:
                continue
            for run in leased:
                self.faults["fleet_leases"] += 1
                call = self.ledger.begin(
                    run.run_key, run.job_type, run.attempt, run.tenant, LEASE, payload=run.payload
                )
                work = self.rng.randint(*FLEET_WORK_SECONDS)
                succeed = self.rng.random() >= FLEET_FAILURE
                self.fleet.append(FleetLease(run, call, now + timedelta(seconds=work), succeed))

    def _fleet_tenants(self, now: datetime) -> list[str]:
        """Tenants with an external run the stream showed waiting and due: the fleet polls only
        those (an empty lease call costs index queries that moto answers slowly)."""
        waiting = {
            run.tenant
            for run in self.audit.latest.values()
            if run.job_type == EXTERNAL
            and run.due_at <= now + timedelta(seconds=3)
            and (
                run.state in (RunState.PENDING, RunState.RETRY_WAIT, RunState.QUEUED)
                or (run.state is RunState.LEASED and not run.lease_live(now))
            )
        }
        return sorted(waiting)

    # --- reconciler ---

    def _reconcile(self) -> None:
        """One tick (the rule's, or the second tick of the minute): one reconciler invocation
        per shard, as the stack invokes them, so a shard whose pass fails (throttled after
        retries) loses only its own tick."""
        for shard in range(self.config.shard_count):
            try:
                report = self.reconciler.reconcile_shard(shard)
            except JobschedError:
                self.faults["reconciler_ticks_lost"] += 1
                continue
            except Exception:
                self._unexpected("reconciler")
                continue
            self.repairs += sum(report.count(kind) for kind in KINDS)
            self.faults["reconciler_runs_unrepaired"] += report.failed
            # Overdue runs a pass left for the next tick (past a job's, tenant's or shard's share).
            self.faults["reconciler_capped"] += report.capped
            for run_key, since in report.stranded:
                self.stranded[run_key].append((since, self.clock.now()))

    def _unexpected(self, where: str, text: str | None = None) -> None:
        text = f"{where} at {self.clock.now():%H:%M:%S}: {text or traceback.format_exc(limit=6)}"
        with self.lock:
            self.outcomes[f"unexpected:{where}"] += 1
            if len(self.unexpected) < 20:
                self.unexpected.append(text)

    # --- the verdict ---

    def _check(self) -> tuple[Figures, dict[str, list[str]]]:
        runs: list[Run] = []
        for page in self.ddb.get_paginator("scan").paginate(
            TableName=RUNS.default_name,
            FilterExpression="begins_with(sk, :r)",
            ExpressionAttributeValues={":r": {"S": "R#"}},
        ):
            runs += [RunStore.from_item(item) for item in page.get("Items", [])]
        by_key = {run.run_key: run for run in runs}
        defs = DefinitionStore(self.ddb, DEFINITIONS.default_name, self.config.shard_count)
        stored = {job_id: job for job_id in self.tracked if (job := defs.get(job_id)) is not None}
        # Each job's successes as its folds count them, read as the API reads them (a fold).
        counts = JobCounts(defs, RunStore(self.ddb, RUNS.default_name, self.config.shard_count), self.clock)
        fold_counts = {job_id: counts.fold(job)[1].counted for job_id, job in stored.items()}
        figures = check(
            Evidence(
                seed=self.config.seed,
                window_end=self.plan.end,
                end=self.clock.now(),
                jobs=self.tracked,
                stored_jobs=stored,
                fold_counts=fold_counts,
                runs=runs,
                ledger=self.ledger,
                audit=self.audit,
                redrives=self.redrives,
                fixes=dict(self.fixes),
                bus_events=list(self.bus.accepted),
                notices=list(self.notices.accepted),
                unrecorded=dict(self.unrecorded),
                tenant_limit=self.config.tenant_concurrency,
                duplicates_suppressed=int(self.metrics.total("DuplicatesSuppressed")),
                stale_fences_rejected=int(self.metrics.total("StaleFencesRejected")),
                repairs=self.repairs,
                stranded=dict(self.stranded),
                held_back=dict(self.held_back),
                is_external=lambda run_key: bool(run_key in by_key and self.is_external(by_key[run_key])),
                oversize=self.dynamo.oversize,
                max_item_bytes=self.dynamo.max_item_bytes,
                faults=self._fault_figures(),
            )
        )
        explanations: dict[str, list[str]] = {}
        for violation in figures.violations:
            # The run it is about, and any other run its detail names (the one it overlapped).
            for key in [violation.run_key, *RUN_KEY.findall(violation.detail)]:
                if key in explanations or len(explanations) >= 8:
                    continue
                explanations[key] = self._story(by_key.get(key), key)
        if figures.restart_over_goal:
            for key, _ in figures.slowest_restarts[:5]:
                if key not in explanations:
                    repairs = [
                        f"should have moved {a:%H:%M:%S}, repaired {b:%H:%M:%S}"
                        for a, b in self.stranded[key]
                    ]
                    explanations[key] = repairs + self._story(by_key.get(key), key)
        return figures, explanations

    def _fault_figures(self) -> dict[str, int]:
        counts = Counter(self.dynamo.counts) + Counter(self.faults)
        counts["loop_drops"] = len(self.loop.dropped)
        return {name: counts[name] for name in FAULT_FIGURES}

    def _story(self, run: Run | None, run_key: str) -> list[str]:
        """The run's transitions and handler calls, for a failure report."""
        lines: list[str] = []
        if run is not None:
            policy = run.policies
            lines.append(
                f"type={run.job_type} maxAttempts={policy.retry.max_attempts}"
                f" delivery={policy.delivery.value} overlap={policy.overlap.value} state={run.state.value}"
            )
            for entry in run.history:
                lines.append(
                    f"{entry.at:%H:%M:%S} {entry.actor:<14} {entry.source.value if entry.source else '-':>10}"
                    f" -> {entry.target.value:<10} fence={entry.fence} attempt={entry.attempt}"
                    f" {entry.error_class or ''} {entry.reason or ''}".rstrip()
                )
        for call in self.ledger.calls.get(run_key, []):
            lines.append(
                f"{call.at:%H:%M:%S} handler call seq={call.seq} attempt={call.attempt} acted={call.acted}"
            )
        lines.extend(self.trail.lines.get(run_key, []))
        job_id = run_key.partition("@")[0]
        for ack in self.tracked[job_id].acks if job_id in self.tracked else []:
            lines.append(f"{ack.at:%H:%M:%S} job {ack.kind} acknowledged seq={ack.seq}")
        return lines


class MotoPeek:
    """Looks inside moto (not the system under test) to skip calls that would come back empty:
    a receive while no message is visible, a stream read while no record was added. Without
    the internals it says "maybe" and the harness simply makes the call."""

    def __init__(self, region: str) -> None:
        self._region = region
        self._stream_seen = -1

    def _sqs(self) -> Any:
        try:
            from moto.core import DEFAULT_ACCOUNT_ID
            from moto.sqs.models import sqs_backends

            return sqs_backends[DEFAULT_ACCOUNT_ID][self._region]
        except Exception:
            return None

    def queue_has_visible(self, name: str) -> bool:
        backend = self._sqs()
        try:
            messages = backend.queues[name]._messages
            return any(m.visible and not m.delayed for m in messages)
        except Exception:
            return True

    def forget_stream(self) -> None:
        self._stream_seen = -1

    def stream_has_records(self) -> bool:
        try:
            from moto.core import DEFAULT_ACCOUNT_ID
            from moto.dynamodb.models import dynamodb_backends

            table: Any = dynamodb_backends[DEFAULT_ACCOUNT_ID][self._region].get_table(RUNS.default_name)
            count = len(table.stream_shard.items)
        except Exception:
            return True
        if count == self._stream_seen:
            return False
        self._stream_seen = count
        return True


def _lane(record: dict[str, Any]) -> int:
    keys = record.get("dynamodb", {}).get("Keys") or record.get("dynamodb", {}).get("NewImage", {})
    job_id = str(keys.get("job_id", {}).get("S", ""))
    return zlib.crc32(job_id.encode()) % STREAM_LANES


def _create_queues(sqs: Any) -> tuple[dict[str, str], dict[str, str]]:
    from jobsched_local.moto_backend import create_queues

    urls, dlq_urls, _ = create_queues(sqs)
    return urls, dlq_urls


ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    # In-process moto streams need this with botocore 1.44 (see FIELD-NOTES).
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    # As the stack sets them for its functions (tests/conftest.py likewise); the worker
    # handler's metrics go to the harness's RecordedMetrics, none are printed.
    "POWERTOOLS_SERVICE_NAME": "jobsched",
    "POWERTOOLS_METRICS_NAMESPACE": "jobsched",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_DEV": "0",
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
}


@contextlib.contextmanager
def simulated_aws(clock: ManualClock) -> Iterator[None]:
    """moto in-process with fake credentials; SQS time follows `clock`."""
    from moto import mock_aws
    from moto.moto_api._internal import mock_random

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, ENVIRONMENT))
        stack.enter_context(mock_aws())
        stack.enter_context(sqs_on_clock(clock))
        mock_random.seed(0)
        yield


def run_chaos(config: ChaosConfig, out: Callable[[str], None] | None = None) -> Report:
    """Run one seeded chaos simulation and judge it."""
    stdout = sys.stdout
    emit = out or (lambda line: print(line, file=stdout, flush=True))
    from .mutants import BY_NAME, applied

    if config.mutant is not None and config.mutant not in BY_NAME:
        raise ValueError(f"mutant must be one of {sorted(BY_NAME)}")
    quiet = logging.getLogger("jobsched")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    ids = random.Random(f"job-ids-{config.seed}")
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

    def job_id() -> str:
        # Job ids from the seed, so a seed replays the same run keys and shard layout.
        return "j_" + "".join(ids.choice(alphabet) for _ in range(16))

    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    try:
        with (
            simulated_aws(clock),
            mock.patch("jobsched.services.jobs.new_job_id", job_id),
            warnings.catch_warnings(),
            # The services print EMF metrics to stdout; the figures are the output here.
            contextlib.redirect_stdout(io.StringIO()) as swallowed,
            applied(config.mutant) if config.mutant else contextlib.nullcontext(),
        ):
            # No Lambda context: in-progress idempotency records carry no expiry here.
            warnings.filterwarnings("ignore", message="Couldn't determine the remaining time left")
            world = World(config, clock, emit)
            try:
                with world.services.installed():
                    return world.run()
            finally:
                world.close()
                swallowed.truncate(0)
    finally:
        quiet.setLevel(level)


__all__ = ["ChaosConfig", "FaultRates", "Report", "run_chaos"]
