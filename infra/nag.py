"""cdk-nag (AwsSolutions) as a synth-time gate: any finding without a written reason fails synth."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

MIN_REASON = 30  # characters: a reason must say why, not just "ok"


def enable(app: IConstruct) -> None:
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    if len(reason.strip()) < MIN_REASON:
        raise ValueError(f"{rule}: the reason must explain the exception ({MIN_REASON}+ characters)")
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))


def render(arn: str) -> str:
    """How cdk-nag prints an ARN written with ${AWS::...} placeholders."""
    for name in ("Partition", "Region", "AccountId", "URLSuffix"):
        arn = arn.replace("${AWS::" + name + "}", "<AWS::" + name + ">")
    return arn
