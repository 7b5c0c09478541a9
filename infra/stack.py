"""The jobsched stack: the JobScheduler construct (jobsched.cdk) with the examples, and the
stack's outputs.

The construct's id is "Default", which CDK leaves out of logical ids: every resource keeps
the logical id it had when this stack built the constructs itself, so no deployment sees a
resource replaced (tests/infrastructure/test_cdk.py holds the ids to the released ones)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from aws_cdk import CfnOutput, Fn, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from jobsched.cdk.config import Config
from jobsched.cdk.layer_asset import layer_code
from jobsched.cdk.names import (
    API_ROLES,
    NOTIFIER,
    OUTPUT_ALARM_SUBSCRIBER,
    OUTPUT_ALARM_TOPIC,
    OUTPUT_API_ID,
    OUTPUT_API_URL,
    OUTPUT_CREATE_SCHEDULE_SM,
    OUTPUT_DASHBOARD,
    OUTPUT_DEAD_LETTER_ALARMS,
    OUTPUT_EVENT_ARCHIVE,
    OUTPUT_EVENT_BUS,
    OUTPUT_NOTIFIER_FUNCTION_ROLE,
    OUTPUT_RUN_TARGET_SM,
    OUTPUT_WORKER_FUNCTION_ROLE,
    WORKER,
    output_policy,
    output_table,
)
from jobsched.cdk.scheduler import APP_ID, JobScheduler
from jobsched.store.schema import ALL_TABLES


class JobschedStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        layer_code_factory: Callable[[], lambda_.Code] = layer_code,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
        self.scheduler = JobScheduler(
            self, APP_ID, config, examples=True, layer_code_factory=layer_code_factory
        )
        scheduler = self.scheduler
        self.storage = scheduler.storage
        self.queues = scheduler.queues
        self.events = scheduler.events
        self.functions = scheduler.functions
        self.event_sources = scheduler.event_sources
        self.schedules = scheduler.schedules
        self.api = scheduler.api
        self.monitoring = scheduler.monitoring
        assert scheduler.examples is not None and scheduler.example_tenant is not None
        self.examples = scheduler.examples
        self.example_tenant = scheduler.example_tenant
        self.grants = scheduler.grants
        self._outputs()

    def _outputs(self) -> None:
        CfnOutput(self, OUTPUT_API_URL, value=self.api.url, description="base URL (append v1/jobs)")
        CfnOutput(self, OUTPUT_API_ID, value=self.api.rest_api.rest_api_id)
        CfnOutput(self, OUTPUT_ALARM_TOPIC, value=self.monitoring.topic.topic_arn)
        # Printed by every deploy: an alarm that reaches no one is no alarm (synth warns too).
        missing = self.config.missing_subscriber()
        CfnOutput(
            self,
            OUTPUT_ALARM_SUBSCRIBER,
            value=self.config.alarm_email
            or ("subscribed outside the stack" if missing is None else f"NONE: {missing}"),
            description="who the alarms reach (alarmEmail)",
        )
        # The end-to-end check of the alarm path (make e2e-aws) sets one of these to ALARM.
        dead_letter_alarms = [
            cast(cw.Alarm, self.monitoring.node.find_child(f"{name}-depth")).alarm_name
            for name in self.queues.all_dead_letter_queues()
        ]
        CfnOutput(
            self,
            OUTPUT_DEAD_LETTER_ALARMS,
            value=Fn.join(",", dead_letter_alarms),
            description="the dead-letter queues' depth alarms, comma-separated",
        )
        CfnOutput(self, OUTPUT_DASHBOARD, value=self.monitoring.dashboard.dashboard_name)
        CfnOutput(self, OUTPUT_CREATE_SCHEDULE_SM, value=self.examples.create_schedule.state_machine_arn)
        CfnOutput(self, OUTPUT_RUN_TARGET_SM, value=self.examples.run_target.state_machine_arn)
        CfnOutput(
            self,
            OUTPUT_WORKER_FUNCTION_ROLE,
            value=self.functions.roles[WORKER].role_arn,
            description="a principal a tenant's role trusts, with sts:ExternalId = its tenant's",
        )
        CfnOutput(
            self,
            OUTPUT_NOTIFIER_FUNCTION_ROLE,
            value=self.functions.roles[NOTIFIER].role_arn,
            description="the other principal a tenant's role trusts: it delivers notifications",
        )
        CfnOutput(
            self,
            OUTPUT_EVENT_BUS,
            value=self.events.bus.event_bus_name,
            description=f"run and job events (runEvents: {self.config.run_events}); add rules to subscribe",
        )
        CfnOutput(self, OUTPUT_EVENT_ARCHIVE, value=self.events.archive.archive_name)
        for role in API_ROLES:
            CfnOutput(self, output_policy(role), value=self.api.policies[role].managed_policy_arn)
        for spec in ALL_TABLES:
            CfnOutput(
                self,
                output_table(spec),
                value=self.storage.table(spec).table_name,
                description="kept by cdk destroy (retainData); docs/operate/teardown.md",
            )
