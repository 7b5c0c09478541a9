"""Alarms (every DLQ's depth and its new dead letters, oldest message per queue, stream
iterator age, handler errors and throttles, dropped, failed and missing ticks, recursion,
failed worker records, a worker that cannot start, account concurrency near its quota, sweep
and reconcile duration, sweep failures, reconciler repairs, unreadable job and run items and
stream records, API 5xx and latency, DynamoDB throttling) to one SNS topic, and a dashboard
of lag, throughput, retries and dead letters."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched.services.reconciler import KINDS as REPAIR_KINDS
from jobsched.store.definitions import UNREADABLE_METRIC as UNREADABLE_JOBS
from jobsched.store.runs import UNREADABLE_METRIC as UNREADABLE_RUNS
from jobsched.store.schema import ALL_TABLES, TableSpec

from .api import Api
from .config import Config
from .functions import SCHEDULED, Functions
from .names import (
    EVENTS,
    FUNCTIONS,
    FUNCTIONS_BY_NAME,
    OUTBOX,
    QUEUE_KEYS,
    RECONCILER,
    SWEEPER,
    WORKER,
)
from .queues import Queues
from .schedules import Schedules
from .storage import Storage

FIVE_MINUTES = Duration.minutes(5)
SWEEP_BUDGET_SHARE = 0.8  # of the sweeper's (and the reconciler's) timeout
# One 5xx is already an `api-errors` alarm when the function failed; this one also counts
# the gateway's own (integration timeouts), and a handful in 5 minutes is worth a look.
API_5XX_THRESHOLD = 5
# p99 over 5 minutes, 3 periods in a row: requests are a few DynamoDB calls (tens of ms),
# a cold start ~1-2 s; 5 s for 15 minutes is not a cold start.
API_LATENCY_P99_MS = 5000
API_STAGE_BUSY_SHARE = 0.8  # of the stage's requests per second, every minute for 5 minutes
# Throttled requests are retried by the SDK (standard mode, 5 attempts); a few in 5 minutes
# at a burst are absorbed, 10 or more mean callers are slowed or failing.
TABLE_THROTTLE_THRESHOLD = 10
ONE_MINUTE = Duration.minutes(1)
# Missing ticks: fewer than this share of a scheduled function's expected invocations in 5
# minutes (EventBridge fires within its minute, so a window may hold one tick more or less).
TICKS_EXPECTED_SHARE = 0.6
# Account concurrency: the account's ConcurrentExecutions at this share of accountConcurrency.
ACCOUNT_CONCURRENCY_SHARE = 0.9
# An alarm's metric math reads at most 10 metrics (a hard limit): 10 rules' FailedInvocations.
RULES_PER_ALARM = 10


@dataclass(frozen=True)
class AppMetrics:
    """The scheduler's own Powertools (EMF) metrics: its namespace, and the service dimension
    Powertools adds to each whenever POWERTOOLS_SERVICE_NAME is set, as it is on every
    function (a metric read without it would be another metric, and its widget would stay
    empty). Both are the scheduler's (Config.metric_names), as its functions emit them."""

    namespace: str
    service: str

    def metric(
        self, name: str, statistic: str = "Sum", period: Duration = ONE_MINUTE, **dimensions: str
    ) -> cw.Metric:
        return cw.Metric(
            namespace=self.namespace,
            metric_name=name,
            dimensions_map={"service": self.service, **dimensions},
            statistic=statistic,
            period=period,
        )

    def by_priority(self, name: str, statistic: str) -> list[cw.IMetric]:
        """The worker's timings, emitted per priority."""
        return [
            cw.Metric(
                namespace=self.namespace,
                metric_name=name,
                dimensions_map={"priority": key, "service": self.service},
                statistic=statistic,
                period=ONE_MINUTE,
                label=f"{name} {key}",
            )
            for key in QUEUE_KEYS
        ]


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        queues: Queues,
        functions: Functions,
        storage: Storage,
        api: Api,
        schedules: Schedules,
        name: str,
    ) -> None:
        """`name`: the scheduler's (names.Naming), which every alarm's name starts with, and
        which its metrics' namespace and service are made of (Config.metric_names)."""
        super().__init__(scope, construct_id)
        self._name = name
        self.app_metrics = app = AppMetrics(*config.metric_names(name))
        # A customer-managed key: CloudWatch cannot publish to a topic under the AWS-managed SNS key.
        self.key = kms.Key(
            self,
            "TopicKey",
            enable_key_rotation=True,
            description="jobsched alarm topic",
            removal_policy=RemovalPolicy.DESTROY,
        )
        cloudwatch = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        # SNS encrypts what CloudWatch publishes with this key, on CloudWatch's behalf. Left
        # without a condition, as AWS documents it: the key serves this topic only, and the
        # topic policy below decides whose alarms may publish.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsUseTheKey",
                principals=[cloudwatch],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, * is this key
            )
        )
        self.topic = sns.Topic(
            self, "Alarms", display_name="jobsched alarms", master_key=self.key, enforce_ssl=True
        )
        # enforce_ssl gives the topic a policy of its own, which replaces SNS's default one: with
        # only the TLS deny in it no alarm could publish ("not authorized to perform SNS:Publish"
        # in the alarm history, and no e-mail). Alarms of this account and region may.
        stack = Stack.of(self)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[cloudwatch],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="cloudwatch",
                            resource="alarm",
                            resource_name="*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    },
                },
            )
        )
        if config.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
        self._action = cw_actions.SnsAction(self.topic)
        self.alarms: list[cw.Alarm] = []

        for name, queue in queues.all_dead_letter_queues().items():
            self._alarm(
                f"{name}-depth",
                queue.metric_approximate_number_of_messages_visible(period=ONE_MINUTE, statistic="Maximum"),
                threshold=1,
                description=f"{name}: runs or stream batches were given up on; inspect and redrive",
            )
            # Depth stays in ALARM while anything is left in the queue, and notifies once: each
            # new dead letter notifies again. A message moved by a redrive policy counts in
            # no SQS "sent" metric, so a rise in depth counts too (a copy the worker sends
            # there, and a tick EventBridge gave up on, are sends).
            self._alarm(
                f"{name}-new",
                self.new_dead_letters_metric(queue),
                threshold=1,
                description=f"{name}: new dead letters arrived; inspect and redrive",
            )
        for key in QUEUE_KEYS:
            # Thresholds sit above the 900 s SQS delay the outbox may put on a message.
            self._alarm(
                f"{key}-oldest-message",
                queues.queues[key].metric_approximate_age_of_oldest_message(
                    period=ONE_MINUTE, statistic="Maximum"
                ),
                threshold=config.queue_age_alarm_seconds.get(key, 3600),
                periods=3,
                description=f"{key} queue: messages wait longer than expected; workers lag or fail",
            )
        self._alarm(
            "outbox-iterator-age",
            functions.functions[OUTBOX].metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
            threshold=config.iterator_age_alarm_seconds * 1000,
            periods=3,
            description="the outbox lags behind the Runs stream: runs are published late",
        )
        self._alarm(
            "events-iterator-age",
            functions.functions[EVENTS].metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
            threshold=config.iterator_age_alarm_seconds * 1000,
            periods=3,
            description="the events consumer lags behind the tables' streams: events are published late",
        )
        for spec in FUNCTIONS:
            function = functions.functions[spec.name]
            self._alarm(
                f"{spec.name}-errors",
                function.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
                threshold=1,
                description=f"{spec.name}: invocations failed",
            )
            self._alarm(
                f"{spec.name}-throttles",
                function.metric_throttles(period=FIVE_MINUTES, statistic="Sum"),
                threshold=1,
                description=f"{spec.name}: invocations were throttled",
            )
        # A tick Lambda gave up on (throttled past its 60 s event age, or failed: no retries).
        for name in SCHEDULED:
            self._alarm(
                f"{name}-ticks-dropped",
                functions.functions[name].metric("AsyncEventsDropped", statistic="Sum", period=FIVE_MINUTES),
                threshold=1,
                description=f"{name}: scheduled ticks were dropped; shards went unprocessed for a minute",
            )
        # Every minute each scheduled function gets ticks_per_minute invocations; far fewer
        # (or none: no data) means the ticks stopped (rules disabled, EventBridge or the
        # function failing): nothing is swept or repaired until they come back.
        for name, per_minute in config.ticks_per_minute().items():
            self._too_few(
                f"{name}-ticks-missing",
                functions.functions[name].metric_invocations(period=FIVE_MINUTES, statistic="Sum"),
                per_minute,
                f"{name}: fewer than {TICKS_EXPECTED_SHARE:.0%} of its {per_minute} ticks a "
                "minute arrived for 5 minutes; shards go unprocessed",
            )
        # The reconciler's second ticks (store.second_ticks) alone: the invocations above count
        # both, so a share of second ticks lost (not sent, expired before the poller took them,
        # or their passes failing) shows here first.
        per_minute = config.tick_invocations()[RECONCILER]
        self._too_few(
            "reconciler-second-ticks-missing",
            app.metric("SecondTickPasses", period=FIVE_MINUTES),
            per_minute,
            f"reconciler: fewer than {TICKS_EXPECTED_SHARE:.0%} of its {per_minute} second "
            "ticks a minute made their pass for 5 minutes; repairs come up to 30 s later",
        )
        # A tick EventBridge could not deliver (it also lands in the tick-failures queue).
        for kind, rules in (("sweep", schedules.sweeper_rules), ("reconcile", schedules.reconciler_rules)):
            for number, start in enumerate(range(0, len(rules), RULES_PER_ALARM)):
                self._alarm(
                    f"{kind}-rules-failed-{number}",
                    self.failed_invocations_metric(rules[start : start + RULES_PER_ALARM]),
                    threshold=1,
                    description=f"{kind} ticks: EventBridge failed to invoke the function",
                )
        # The account's concurrency near its quota: the next burst is throttled, and every
        # function without a reservation competes for what is left.
        if config.account_concurrency:
            self._alarm(
                "account-concurrency",
                cw.Metric(
                    namespace="AWS/Lambda",
                    metric_name="ConcurrentExecutions",
                    statistic="Maximum",
                    period=ONE_MINUTE,
                ),
                threshold=math.floor(config.account_concurrency * ACCOUNT_CONCURRENCY_SHARE),
                periods=3,
                description=(
                    f"the account's Lambda concurrency is above {ACCOUNT_CONCURRENCY_SHARE:.0%} of "
                    f"accountConcurrency ({config.account_concurrency}): raise the quota"
                ),
            )
        # Records the worker reported as failed (an unexpected error): each comes back only
        # after its backoff, and reaches the DLQ after its receives are spent.
        self._alarm(
            "worker-records-failed",
            app.metric("RecordFailed", period=FIVE_MINUTES),
            threshold=1,
            description="worker: records failed on an unexpected error (see the worker's logs)",
        )
        # The worker's code or services could not start (a bad deploy, a setting that does
        # not parse): every batch fails before its runs, each message comes back after the
        # entry point's 30 s hold and reaches its DLQ minutes later (handlers.worker_entry).
        self._alarm(
            "worker-cannot-start",
            app.metric("WorkerStartFailed"),
            threshold=1,
            description="worker: invocations failed before their runs started (see the worker's logs); "
            "roll back the deploy",
        )
        # shardCount lowered below the highest in use: jobs in the folded shards are still
        # swept (each sweeper also reads the old shards that fold onto its own), at a cost.
        self._alarm(
            "shard-count-below-in-use",
            app.metric("ShardCountBelowInUse", statistic="Maximum"),
            threshold=1,
            description="sweeper: shardCount is below the highest shard count in use (see Resharding)",
        )
        # No function re-sends its own trigger, but for the reconciler's second tick: a rule's
        # pass sends it once, and the pass it triggers sends nothing (two invocations a chain;
        # each rule tick starts a new trace). RecursiveLoop is Terminate: a loop Lambda stops
        # is a misconfiguration (a target pointed back at a jobsched queue) and is alarmed.
        self._alarm(
            "worker-recursion-dropped",
            functions.functions[WORKER].metric(
                "RecursiveInvocationsDropped", statistic="Sum", period=FIVE_MINUTES
            ),
            threshold=1,
            description="worker: Lambda stopped a worker -> SQS -> worker loop (RecursiveLoop Terminate)",
        )
        self._alarm(
            "reconciler-recursion-dropped",
            functions.functions[RECONCILER].metric(
                "RecursiveInvocationsDropped", statistic="Sum", period=FIVE_MINUTES
            ),
            threshold=1,
            description=(
                "reconciler: Lambda stopped a reconciler -> SQS -> reconciler loop (a second tick "
                "makes no third: something else sends to SecondTickQueue)"
            ),
        )
        # What follows a landed transition, not done (Completer.after): a dead run missing
        # from its DLQ (whose depth alarm then stays quiet), a job not paused on failure, a
        # chained run not released (the reconciler releases it), a job counter lost.
        self._alarm(
            "after-transition-failed",
            app.metric("AfterTransitionFailed", period=FIVE_MINUTES),
            threshold=1,
            description=(
                "a run's transition landed but what follows it failed: a DLQ copy, a pause on "
                "failure, a chained run's release or a job counter (the functions' logs say which)"
            ),
        )
        # A sweep has its function's timeout for every shard it handles (near it, runs are made
        # late: the capacity model's first limit); a reconcile pass cut off by its timeout
        # leaves the rest of its shard unrepaired.
        for name, label, remedy in (
            (SWEEPER, "sweeps", "raise shardCount or lower shardsPerSweep"),
            (RECONCILER, "reconcile passes", "raise shardCount"),
        ):
            self._alarm(
                f"{name}-duration",
                functions.functions[name].metric_duration(period=FIVE_MINUTES, statistic="Maximum"),
                threshold=SWEEP_BUDGET_SHARE * FUNCTIONS_BY_NAME[name].timeout_seconds * 1000,
                description=f"{label} come close to their time limit: {remedy}",
            )
        # A repair that raised: that run stays unrepaired (the rest of its shard went on).
        self._alarm(
            "repairs-failed",
            app.metric("RepairsFailed", period=FIVE_MINUTES),
            threshold=1,
            description="a run could not be repaired: see the reconciler's 'repair failed' log lines",
        )
        # A run item that no longer parses is left out of every listing (and so of repairs).
        self._alarm(
            "unreadable-runs",
            app.metric(UNREADABLE_RUNS, period=FIVE_MINUTES),
            threshold=1,
            description="a run item could not be read and was left out: see 'unreadable run item' log lines",
        )
        # A job item that no longer parses is passed over by every sweep (its shard's other jobs
        # still run): it gets no runs until it is readable, and every sweep counts it again.
        self._alarm(
            "unreadable-jobs",
            app.metric(UNREADABLE_JOBS, period=FIVE_MINUTES),
            threshold=1,
            description=(
                "a job item could not be read: it gets no runs until it is fixed (the rest of its "
                "shard runs); see 'unreadable job item' log lines"
            ),
        )
        # A shard's page of due jobs that could not be read (the rest of the shard waits for
        # the next tick), or a job whose materialisation raised (it gets no runs meanwhile).
        self._alarm(
            "sweep-failures",
            app.metric("SweepFailures", period=FIVE_MINUTES),
            threshold=1,
            description=(
                "sweeper: a shard's due jobs could not be read, or a job's runs could not be "
                "made; see 'reading due jobs failed' and 'materialisation failed' log lines"
            ),
        )
        # A stream record whose image does not parse has no events and no notifications.
        self._alarm(
            "event-records-unreadable",
            app.metric("EventRecordsUnreadable", period=FIVE_MINUTES),
            threshold=1,
            description=(
                "events: a stream record could not be read, and its events and notifications "
                "were not sent; see 'unreadable image' log lines"
            ),
        )
        stage = api.rest_api.deployment_stage
        self._alarm(
            "api-5xx",
            stage.metric_server_error(period=FIVE_MINUTES, statistic="Sum"),
            threshold=API_5XX_THRESHOLD,
            description="the API answers with server errors (function failures, timeouts)",
        )
        # The stage's rate is shared by every tenant, and a tenant over its own limit still
        # spends it (the function answers its 429 after the stage admitted the request).
        self._alarm(
            "api-stage-busy",
            stage.metric_count(period=ONE_MINUTE, statistic="Sum"),
            threshold=math.floor(config.api_rate_limit * 60 * API_STAGE_BUSY_SHARE),
            periods=5,
            description=(
                f"the API stage ran above {API_STAGE_BUSY_SHARE:.0%} of its shared "
                f"{config.api_rate_limit} requests/s for 5 minutes: tenants at their limit crowd "
                "the others (apiRateLimit, tenantRequestsPerSecond)"
            ),
        )
        self._alarm(
            "api-latency",
            stage.metric_latency(period=FIVE_MINUTES, statistic="p99"),
            threshold=API_LATENCY_P99_MS,
            periods=3,
            description="the API is slow (p99): function duration, DynamoDB throttling",
        )
        for table_spec in ALL_TABLES:
            # One alarm per kind: an alarm's expression takes at most 10 metrics, and the
            # runs table with its indexes has more than 5 sources of each kind.
            kinds: tuple[Literal["Read", "Write"], ...] = ("Read", "Write")
            for kind in kinds:
                self._alarm(
                    f"{table_spec.default_name.removeprefix('jobsched-')}-table-{kind.lower()}-throttles",
                    self.throttle_metric(storage.table(table_spec), table_spec, kind),
                    threshold=TABLE_THROTTLE_THRESHOLD,
                    description=f"{table_spec.logical_id} table: {kind.lower()}s are throttled"
                    " (capacity, hot partition)",
                )
        repairs = self.repairs_metric()
        self._alarm(
            "reconciler-repairs",
            repairs,
            threshold=config.repair_alarm_threshold,
            description="the reconciler keeps repairing runs: publishes or leases are being lost",
        )
        self.dashboard = self._dashboard(queues, functions, repairs)

    @staticmethod
    def throttle_metric(
        table: dynamodb.Table, spec: TableSpec, kind: Literal["Read", "Write"]
    ) -> cw.MathExpression:
        """`kind` throttle events of the table and of each of its indexes (an index is
        throttled on its own capacity and reports under its own dimension; an index throttled
        on writes holds back the table's writes too). At most 10 metrics: an alarm's limit."""
        parts: dict[str, cw.IMetric] = {
            "t": table.metric(f"{kind}ThrottleEvents", period=FIVE_MINUTES, statistic="Sum")
        }
        for i, index in enumerate(spec.indexes):
            parts[f"i{i}"] = cw.Metric(
                namespace="AWS/DynamoDB",
                metric_name=f"{kind}ThrottleEvents",
                dimensions_map={"TableName": table.table_name, "GlobalSecondaryIndexName": index.name},
                period=FIVE_MINUTES,
                statistic="Sum",
            )
        return cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in parts),
            using_metrics=parts,
            label=f"{spec.logical_id} {kind.lower()} throttle events",
            period=FIVE_MINUTES,
        )

    @staticmethod
    def new_dead_letters_metric(queue: sqs.Queue) -> cw.MathExpression:
        """Messages that arrived in a dead-letter queue in the minute: those sent to it, and
        any rise in its depth (a redrive policy's moves are not sends)."""
        depth = queue.metric_approximate_number_of_messages_visible(period=ONE_MINUTE, statistic="Maximum")
        sent = queue.metric_number_of_messages_sent(period=ONE_MINUTE, statistic="Sum")
        return cw.MathExpression(
            expression="FILL(sent, 0) + IF(DIFF(FILL(depth, 0)) > 0, DIFF(FILL(depth, 0)), 0)",
            using_metrics={"sent": sent, "depth": depth},
            label="new dead letters",
            period=ONE_MINUTE,
        )

    @staticmethod
    def failed_invocations_metric(rules: list[events.Rule]) -> cw.MathExpression:
        parts = {
            f"r{i}": cw.Metric(
                namespace="AWS/Events",
                metric_name="FailedInvocations",
                dimensions_map={"RuleName": rule.rule_name},
                statistic="Sum",
                period=FIVE_MINUTES,
            )
            for i, rule in enumerate(rules)
        }
        return cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in parts),
            using_metrics=parts,
            label="failed tick invocations",
            period=FIVE_MINUTES,
        )

    def repairs_metric(self) -> cw.MathExpression:
        parts = {
            f"r{i}": self.app_metrics.metric("RepairsMade", period=FIVE_MINUTES, kind=kind)
            for i, kind in enumerate(REPAIR_KINDS)
        }
        return cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in parts),
            using_metrics=parts,
            label="runs repaired",
            period=FIVE_MINUTES,
        )

    def _too_few(self, name: str, metric: cw.IMetric, per_minute: int, description: str) -> cw.Alarm:
        """An alarm on something that must happen `per_minute` times a minute: fewer than
        TICKS_EXPECTED_SHARE of them in 5 minutes, or none at all (missing data breaches)."""
        return self._alarm(
            name,
            metric,
            threshold=math.floor(per_minute * 5 * TICKS_EXPECTED_SHARE),
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
            description=description,
        )

    def _alarm(
        self,
        name: str,
        metric: cw.IMetric,
        *,
        threshold: float,
        description: str,
        periods: int = 1,
        comparison: cw.ComparisonOperator = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
    ) -> cw.Alarm:
        """An alarm that notifies the topic of ALARM and of OK. Missing data is not breaching
        unless said otherwise (an alarm on something that must keep happening)."""
        alarm = cw.Alarm(
            self,
            name,
            alarm_name=f"{self._name}-{name}",  # readable in e-mails and the console
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            comparison_operator=comparison,
            treat_missing_data=missing,
            alarm_description=f"jobsched {description}",
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms.append(alarm)
        return alarm

    def _dashboard(self, queues: Queues, functions: Functions, repairs: cw.IMetric) -> cw.Dashboard:
        dashboard = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        fn = functions.functions
        app = self.app_metrics
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Lag (s)",
                left=[
                    *app.by_priority("StartLag", "p99"),
                    *app.by_priority("QueueDwell", "p99"),
                    app.metric("SchedulePublishLag", "p99"),
                ],
                right=[
                    fn[OUTBOX].metric(
                        "IteratorAge",
                        statistic="Maximum",
                        period=ONE_MINUTE,
                        label="outbox iterator age (ms)",
                    )
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Oldest message (s)",
                left=[
                    q.metric_approximate_age_of_oldest_message(period=ONE_MINUTE, label=key)
                    for key, q in queues.queues.items()
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Throughput (runs per minute)",
                left=[
                    app.metric("RunsMaterialised"),
                    app.metric("RunsPublished"),
                    app.metric("RunsSucceeded"),
                ],
                right=[f.metric_invocations(period=ONE_MINUTE, label=name) for name, f in fn.items()],
                width=12,
            ),
            cw.GraphWidget(
                title="Retries and repairs",
                left=[
                    app.metric("RetriesScheduled"),
                    app.metric("LeasesExpired"),
                    app.metric("StaleFencesRejected"),
                    app.metric("PublishFailed"),
                    repairs,
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Dead letters",
                left=[
                    q.metric_approximate_number_of_messages_visible(period=ONE_MINUTE, label=name)
                    for name, q in queues.all_dead_letter_queues().items()
                ],
                right=[app.metric("RunsDeadLettered")],
                width=12,
            ),
            cw.GraphWidget(
                title="Errors and throttles",
                left=[f.metric_errors(period=ONE_MINUTE, label=name) for name, f in fn.items()],
                right=[f.metric_throttles(period=ONE_MINUTE, label=name) for name, f in fn.items()],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(title="Run duration (s)", left=app.by_priority("RunDuration", "p90"), width=24)
        )
        return dashboard
