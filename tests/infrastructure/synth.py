"""Synthesising the stack for the infrastructure tests: the template and its assets, and
rendering values for assertions. The fixtures in conftest.py build on these."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SKIP_BUNDLING: dict[str, list[str]] = {"aws:cdk:bundling-stacks": []}
# The tests subscribe no one, and say so (without it, synth warns: Config.missing_subscriber).
BASE_CONTEXT = {**SKIP_BUNDLING, "alarmsWithoutSubscriber": True}


@dataclass
class Synth:
    outdir: Path
    stack: Any  # infra.stack.JobschedStack
    template: dict[str, Any]
    error: str | None  # the cdk-nag gate's failure, if any
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template["Resources"]

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == kind}

    def props(self, logical_id: str) -> dict[str, Any]:
        return self.resources[logical_id].get("Properties", {})

    def logical_id(self, construct: Any) -> str:
        """The template logical id of a construct (or of its default child)."""
        from aws_cdk import CfnElement, Stack

        element = construct if isinstance(construct, CfnElement) else construct.node.default_child
        return str(Stack.of(element).resolve(element.logical_id))

    def asset_dir(self, logical_id: str) -> Path:
        """The staged asset directory of a Lambda function's code."""
        key = self.props(logical_id)["Code"]["S3Key"]
        return self.outdir / f"asset.{key.removesuffix('.zip')}"


def synthesize(outdir: Path, context: dict[str, Any] | None = None, *, checks: bool = True) -> Synth:
    from infra.app import build_app

    app, stack = build_app({**BASE_CONTEXT, **(context or {})}, outdir=str(outdir), checks=checks)
    error = None
    try:
        app.synth()
    except RuntimeError as exc:  # cdk-nag findings; the template is written before validation
        error = str(exc)
    template = json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())
    report_path = outdir / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return Synth(outdir, stack, template, error, report)


def function_environment(synth: Synth) -> dict[str, str]:
    """The plain-valued variables the template sets on the functions (the same on each)."""
    found = []
    for function in synth.of_type("AWS::Lambda::Function").values():
        variables = function["Properties"]["Environment"]["Variables"]
        found.append({k: v for k, v in variables.items() if isinstance(v, str)})
    assert all(env == found[0] for env in found), "functions differ in their environment"
    return found[0]


def render(value: Any) -> str:
    """A template value as text: Ref X → <X>, GetAtt X.Y → <X.Y>, Join and Sub flattened."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{'.'.join(arg)}>"
        if fn == "Fn::Join":
            separator, parts = arg
            return separator.join(render(p) for p in parts)
        if fn == "Fn::Sub" and isinstance(arg, str):
            return arg.replace("${", "<").replace("}", ">")
    raise ValueError(f"cannot render {value!r}")


def _references(value: Any) -> set[str]:
    """The logical ids a template value refers to (Ref, GetAtt, Sub's ${X} and ${X.Y})."""
    if isinstance(value, list):
        return {ref for inner in value for ref in _references(inner)}
    if not isinstance(value, dict):
        return set()
    if set(value) == {"Ref"}:
        return {str(value["Ref"])}
    if set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        return {str(target[0] if isinstance(target, list) else target.split(".")[0])}
    if set(value) == {"Fn::Sub"}:
        text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
        named = {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text)}
        return named | _references(value["Fn::Sub"][1:] if isinstance(value["Fn::Sub"], list) else [])
    return {ref for inner in value.values() for ref in _references(inner)}


def dependency_cycle(template: dict[str, Any]) -> list[str]:
    """A cycle among the template's resources (each one's references and DependsOn), as the
    logical ids along it, or [] when CloudFormation can order them."""
    resources = template["Resources"]
    edges: dict[str, set[str]] = {}
    for logical_id, resource in resources.items():
        depends = resource.get("DependsOn", [])
        named = {depends} if isinstance(depends, str) else set(depends)
        named |= _references({k: v for k, v in resource.items() if k != "DependsOn"})
        edges[logical_id] = {n for n in named if n in resources}
    done: set[str] = set()
    for start in resources:
        if start in done:
            continue
        path, on_path = [start], {start}
        stack: list[tuple[str, list[str]]] = [(start, sorted(edges[start]))]
        while stack:
            node, pending = stack[-1]
            if not pending:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            nxt = pending.pop()
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append((nxt, sorted(edges[nxt])))
    return []
