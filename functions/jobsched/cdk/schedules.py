"""EventBridge rules that tick the sweeper (one target per shard group) and the reconciler
(one target per shard) every minute.

One resource-policy statement per function, whatever the shard count: the rules are named
`<stack>-sweep-<n>` / `<stack>-reconcile-<n>`, and a single permission allows EventBridge
rules of this account whose name starts with that prefix. (`targets.LambdaFunction` would add
a statement per rule: 52 per function at 256 shards, against Lambda's 20 KB policy limit.)
A tick EventBridge cannot deliver goes to one dead-letter queue, which the same prefixes may
send to (one queue-policy statement per kind, for the same reason)."""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.interfaces import aws_events as events_interfaces
from constructs import Construct

from .config import Config
from .functions import TICK_MAX_EVENT_AGE, Functions
from .names import RECONCILER, SWEEPER

MAX_TARGETS_PER_RULE = 5  # EventBridge limit
EVERY_MINUTE = events.Schedule.rate(Duration.minutes(1))
MAX_RULE_NAME = 64  # EventBridge limit
# Delivery to Lambda (not the function's own failures: see functions.SCHEDULED). A missed
# tick is harmless: the next one finds the same work (no watermark).
TICK_RETRY_ATTEMPTS = 2


def shard_groups(shard_count: int, per_group: int) -> list[list[int]]:
    return [list(range(s, min(s + per_group, shard_count))) for s in range(0, shard_count, per_group)]


def rule_prefix(stack_name: str, kind: str) -> str:
    """`<stack>-<kind>-`: the name every rule of that kind starts with (room left for the number)."""
    suffix = f"-{kind}-"
    return stack_name[: MAX_RULE_NAME - len(suffix) - 3] + suffix


@jsii.implements(events.IRuleTarget)
class TickTarget:
    """A Lambda target without the per-rule permission targets.LambdaFunction adds."""

    def __init__(
        self, function: lambda_.IFunction, payload: dict[str, Any], dead_letters: sqs.IQueue
    ) -> None:
        self.function = function
        self.payload = payload
        self.dead_letters = dead_letters

    def bind(self, rule: events_interfaces.IRuleRef, id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(
            arn=self.function.function_arn,
            input=events.RuleTargetInput.from_object(self.payload),
            retry_policy=events.CfnRule.RetryPolicyProperty(
                maximum_retry_attempts=TICK_RETRY_ATTEMPTS,
                maximum_event_age_in_seconds=int(TICK_MAX_EVENT_AGE.to_seconds()),
            ),
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(arn=self.dead_letters.queue_arn),
            target_resource=self.function,
        )


class Schedules(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        functions: Functions,
        dead_letters: sqs.Queue,
        name: str,
    ) -> None:
        """`name`: the scheduler's (names.Naming), which every rule's name starts with."""
        super().__init__(scope, construct_id)
        self._name = name
        self.dead_letters = dead_letters
        sweeps = [{"shards": group} for group in shard_groups(config.shard_count, config.shards_per_sweep)]
        # The reconciler's handler takes one shard per event.
        reconciles = [{"shard": shard} for shard in range(config.shard_count)]
        self.permissions: dict[str, lambda_.CfnPermission] = {}
        self.prefixes: dict[str, str] = {}
        self.sweeper_rules = self._rules("Sweep", functions.functions[SWEEPER], sweeps)
        self.reconciler_rules = self._rules("Reconcile", functions.functions[RECONCILER], reconciles)

    def _rules(self, kind: str, function: lambda_.Function, inputs: list[dict]) -> list[events.Rule]:
        stack = Stack.of(self)
        prefix = rule_prefix(self._name, kind.lower())
        permission = lambda_.CfnPermission(
            self,
            f"{kind}RulesInvoke",
            action="lambda:InvokeFunction",
            function_name=function.function_arn,
            principal="events.amazonaws.com",
            source_account=stack.account,
            source_arn=stack.format_arn(
                service="events",
                resource="rule",
                resource_name=prefix + "*",
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            ),
        )
        self.permissions[function.node.id] = permission
        rules_arn = stack.format_arn(
            service="events",
            resource="rule",
            resource_name=prefix + "*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        self.dead_letters.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"{kind}RulesDeadLetters",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["sqs:SendMessage"],
                resources=[self.dead_letters.queue_arn],
                conditions={"ArnLike": {"aws:SourceArn": rules_arn}},
            )
        )
        self.prefixes[function.node.id] = prefix
        rules = []
        for number, start in enumerate(range(0, len(inputs), MAX_TARGETS_PER_RULE)):
            rule = events.Rule(
                self,
                f"{kind}{number}",
                rule_name=f"{prefix}{number}",
                schedule=EVERY_MINUTE,
                description=f"jobsched {kind.lower()} tick",
            )
            for payload in inputs[start : start + MAX_TARGETS_PER_RULE]:
                rule.add_target(TickTarget(function, payload, self.dead_letters))
            rule.node.add_dependency(permission)  # no tick is refused for want of it
            rules.append(rule)
        return rules
