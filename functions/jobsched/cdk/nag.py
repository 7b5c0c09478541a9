"""cdk-nag (AwsSolutions) as a synth-time gate: any finding without a written reason fails synth."""

from __future__ import annotations

from typing import Any

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


def render_value(value: Any) -> str:
    """How cdk-nag prints a resolved template value: Ref X as <X>, GetAtt X.Y as <X.Y>, a Join
    flattened, a pseudo parameter as <AWS::...>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::GetAtt":
            return f"<{'.'.join(argument)}>"
        if function == "Fn::Join":
            separator, parts = argument
            return str(separator).join(render_value(part) for part in parts)
    raise ValueError(f"cannot render {value!r} as cdk-nag does")
