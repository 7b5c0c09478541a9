"""Runs stream → outbox, the priority queues → worker, and the delayed second ticks → reconciler.

Declared with the L1 mapping so every setting is explicit and the role holds exactly the
polling permissions listed in jobsched.cdk.permissions (the L2 sources add their own grants)."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobsched.domain.events import RunEventsLevel
from jobsched.handlers.events import filter_patterns as event_filter_patterns
from jobsched.handlers.outbox import FILTER_PATTERNS
from jobsched.store.schema import DEFINITIONS, RUNS

from .config import Config
from .functions import Functions
from .names import (
    EVENTS,
    NOTIFIER,
    NOTIFIER_BATCH_SIZE,
    NOTIFIER_CONCURRENCY,
    OUTBOX,
    QUEUE_KEYS,
    RECONCILER,
    WORKER,
)
from .queues import Queues
from .storage import Storage

REPORT_FAILURES = ["ReportBatchItemFailures"]

# The outbox publishes a whole batch with SendMessageBatch calls of ten.
OUTBOX_BATCH_SIZE = 100
OUTBOX_PARALLELIZATION = 4
OUTBOX_RETRIES = 5  # then the batch goes to the failure queue; the reconciler republishes its runs
OUTBOX_MAX_RECORD_AGE = 3600
# Events: a record the bus or the notifications queue refuses is retried from it (so a run's
# events keep their order) until it is five minutes old; the function then sets it aside on
# the events failures queue and goes on (services.record_delivery), so it holds the records
# behind it, other tenants' notifications among them, no longer. The mapping's own bounds
# are for an invocation that fails as a whole (a bad deploy, a crash): retried, bisected,
# for up to six hours, then the batch is named in the events failures queue.
EVENTS_BATCH_SIZE = 100
EVENTS_BATCH_WINDOW = 1  # seconds: events are not on any run's path; fuller batches, fewer calls
EVENTS_PARALLELIZATION = 2
EVENTS_MAX_RECORD_AGE = 6 * 3600
EVENTS_RETRIES = 10_000  # Lambda's most; with bisection the record age ends it first, or near it


def filter_criteria(patterns: list[dict[str, Any]]) -> lambda_.CfnEventSourceMapping.FilterCriteriaProperty:
    """A stream mapping's filters: the handler's own patterns, each as Lambda reads it."""
    return lambda_.CfnEventSourceMapping.FilterCriteriaProperty(
        filters=[
            lambda_.CfnEventSourceMapping.FilterProperty(pattern=json.dumps(p, sort_keys=True))
            for p in patterns
        ]
    )


def on_failure(queue: sqs.IQueue) -> lambda_.CfnEventSourceMapping.DestinationConfigProperty:
    """Where a stream mapping names the batches it gave up on."""
    return lambda_.CfnEventSourceMapping.DestinationConfigProperty(
        on_failure=lambda_.CfnEventSourceMapping.OnFailureProperty(destination=queue.queue_arn)
    )


class EventSources(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        storage: Storage,
        queues: Queues,
        functions: Functions,
    ) -> None:
        super().__init__(scope, construct_id)
        outbox = functions.functions[OUTBOX]
        stream_arn = storage.table(RUNS).table_stream_arn
        assert stream_arn is not None
        self.outbox_mapping = lambda_.CfnEventSourceMapping(
            self,
            "RunsStreamToOutbox",
            function_name=outbox.function_name,
            event_source_arn=stream_arn,
            starting_position="TRIM_HORIZON",  # a run written before the mapping is ready is still published
            batch_size=OUTBOX_BATCH_SIZE,
            maximum_batching_window_in_seconds=0,  # runs may be due within seconds
            # Batches per stream shard at once (records of one item stay in order): one batch
            # at a time publishes fewer runs per second than one hot partition can write.
            parallelization_factor=OUTBOX_PARALLELIZATION,
            bisect_batch_on_function_error=True,
            maximum_retry_attempts=OUTBOX_RETRIES,
            maximum_record_age_in_seconds=OUTBOX_MAX_RECORD_AGE,
            function_response_types=REPORT_FAILURES,
            filter_criteria=filter_criteria(FILTER_PATTERNS),
            destination_config=on_failure(queues.outbox_failures),
        )
        # The mapping is validated against the role when it is created.
        self.outbox_mapping.node.add_dependency(functions.roles[OUTBOX])

        self.events_mappings: dict[str, lambda_.CfnEventSourceMapping] = {}
        level = RunEventsLevel(config.run_events)
        # Both mappings at every level, the level in their filters only: a filter changes in
        # place, so switching runEvents off and on again never makes a mapping anew (one would
        # start at TRIM_HORIZON and publish up to 24 hours of old changes). At `none` the Runs
        # mapping passes the runs of jobs that asked for notifications, the Definitions one
        # no record at all.
        for spec in (RUNS, DEFINITIONS):
            patterns = event_filter_patterns(level, spec)
            arn = storage.table(spec).table_stream_arn
            assert arn is not None, f"{spec.logical_id} has no stream"
            mapping = lambda_.CfnEventSourceMapping(
                self,
                f"{spec.logical_id}StreamToEvents",
                function_name=functions.functions[EVENTS].function_name,
                event_source_arn=arn,
                # Made with the table at the first deploy: a change written before it is ready
                # is still published. Never made again by a setting (above).
                starting_position="TRIM_HORIZON",
                batch_size=EVENTS_BATCH_SIZE,
                maximum_batching_window_in_seconds=EVENTS_BATCH_WINDOW,
                parallelization_factor=EVENTS_PARALLELIZATION,  # records of one item stay in order
                bisect_batch_on_function_error=True,
                maximum_retry_attempts=EVENTS_RETRIES,
                maximum_record_age_in_seconds=EVENTS_MAX_RECORD_AGE,
                function_response_types=REPORT_FAILURES,
                filter_criteria=filter_criteria(patterns),
                destination_config=on_failure(queues.events_failures),
            )
            mapping.node.add_dependency(functions.roles[EVENTS])
            self.events_mappings[spec.logical_id] = mapping

        # One delivery per record; a failed one is reported alone and comes back after the
        # queue's visibility timeout (jobsched.cdk.queues), at most NOTIFIER_CONCURRENCY at once.
        self.notifier_mapping = lambda_.CfnEventSourceMapping(
            self,
            "NotificationsQueueToNotifier",
            function_name=functions.functions[NOTIFIER].function_name,
            event_source_arn=queues.notifications.queue_arn,
            batch_size=NOTIFIER_BATCH_SIZE,
            maximum_batching_window_in_seconds=0,
            function_response_types=REPORT_FAILURES,
            scaling_config=lambda_.CfnEventSourceMapping.ScalingConfigProperty(
                maximum_concurrency=NOTIFIER_CONCURRENCY
            ),
        )
        self.notifier_mapping.node.add_dependency(functions.roles[NOTIFIER])

        # The reconciler's second tick each minute: one shard a record, so each shard's pass
        # is its own invocation (as the rules invoke the first), as many at once as the
        # pollers scale to (they start at a few and grow; the 120 s retention waits for them).
        self.second_tick_mapping = lambda_.CfnEventSourceMapping(
            self,
            "SecondTicksToReconciler",
            function_name=functions.functions[RECONCILER].function_name,
            event_source_arn=queues.second_ticks.queue_arn,
            batch_size=1,
            maximum_batching_window_in_seconds=0,
            function_response_types=REPORT_FAILURES,
            scaling_config=lambda_.CfnEventSourceMapping.ScalingConfigProperty(
                maximum_concurrency=min(1000, max(2, config.shard_count))  # AWS's range
            ),
        )
        self.second_tick_mapping.node.add_dependency(functions.roles[RECONCILER])

        worker = functions.functions[WORKER]
        self.worker_mappings: dict[str, lambda_.CfnEventSourceMapping] = {}
        for key in QUEUE_KEYS:
            # Each queue has its own ceiling: a flood of high priority cannot take the
            # concurrency low priority needs, so low is never starved. In provisioned mode
            # (exclusive with MaximumConcurrency) the maximum pollers are that ceiling.
            pollers = config.provisioned_pollers(key)
            mapping = lambda_.CfnEventSourceMapping(
                self,
                f"{key.capitalize()}QueueToWorker",
                function_name=worker.function_name,
                event_source_arn=queues.queues[key].queue_arn,
                batch_size=config.worker_batch_size[key],
                maximum_batching_window_in_seconds=config.worker_batch_window_seconds[key],
                function_response_types=REPORT_FAILURES,
                scaling_config=None
                if pollers
                else lambda_.CfnEventSourceMapping.ScalingConfigProperty(
                    maximum_concurrency=config.worker_concurrency[key]
                ),
                provisioned_poller_config=lambda_.CfnEventSourceMapping.ProvisionedPollerConfigProperty(
                    minimum_pollers=pollers[0], maximum_pollers=pollers[1]
                )
                if pollers
                else None,
            )
            mapping.node.add_dependency(functions.roles[WORKER])
            self.worker_mappings[key] = mapping
