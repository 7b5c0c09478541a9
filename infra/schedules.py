"""EventBridge rules that tick the sweeper (one target per shard group) and the reconciler
(one target per shard) every minute."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from .config import Config
from .functions import Functions
from .names import RECONCILER, SWEEPER

MAX_TARGETS_PER_RULE = 5  # EventBridge limit
EVERY_MINUTE = events.Schedule.rate(Duration.minutes(1))


def shard_groups(shard_count: int, per_group: int) -> list[list[int]]:
    return [list(range(s, min(s + per_group, shard_count))) for s in range(0, shard_count, per_group)]


class Schedules(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: Config, functions: Functions) -> None:
        super().__init__(scope, construct_id)
        sweeps = [{"shards": group} for group in shard_groups(config.shard_count, config.shards_per_sweep)]
        # The reconciler's handler takes one shard per event.
        reconciles = [{"shard": shard} for shard in range(config.shard_count)]
        self.sweeper_rules = self._rules("Sweep", functions.functions[SWEEPER], sweeps)
        self.reconciler_rules = self._rules("Reconcile", functions.functions[RECONCILER], reconciles)

    def _rules(self, prefix: str, function: lambda_.IFunction, inputs: list[dict]) -> list[events.Rule]:
        rules = []
        for number, start in enumerate(range(0, len(inputs), MAX_TARGETS_PER_RULE)):
            rule = events.Rule(
                self,
                f"{prefix}{number}",
                schedule=EVERY_MINUTE,
                description=f"jobsched {prefix.lower()} tick",
            )
            for payload in inputs[start : start + MAX_TARGETS_PER_RULE]:
                rule.add_target(
                    targets.LambdaFunction(
                        function,  # type: ignore[arg-type]
                        event=events.RuleTargetInput.from_object(payload),
                        # A missed tick is harmless: the next one finds the same work (no watermark).
                        retry_attempts=2,
                        max_event_age=Duration.seconds(60),
                    )
                )
            rules.append(rule)
        return rules
