"""The README's deploy section covers bootstrap, deploy, outputs, SigV4 calls from the CLI and from Step
Functions, alarm subscriptions and teardown, ends with proving the deployment (make e2e-aws), and names every
output and context key."""

from __future__ import annotations

import json
import re

import pytest

from infra.config import CONTEXT_KEYS
from infra.names import ROOT

README = ROOT / "README.md"


@pytest.fixture(scope="module")
def doc() -> str:
    text = README.read_text()
    match = re.search(r"^## Deploy to AWS\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "the README has no '## Deploy to AWS' section"
    return match.group(1)


@pytest.mark.parametrize(
    ("section", "must_mention"),
    [
        ("Bootstrap", ["cdk bootstrap"]),
        ("Deploy", ["cdk deploy", "--outputs-file"]),
        ("Outputs", ["ApiUrl"]),
        ("Calling the API (SigV4)", ["--aws-sigv4", "awscurl", "attach-role-policy"]),
        ("Calling the API from Step Functions", ["arn:aws:states:::apigateway:invoke", "IAM_ROLE"]),
        ("Alarms", ["aws sns subscribe", "alarmEmail"]),
        ("Tearing down", ["cdk destroy", "retainData"]),
        (
            "Prove the deployment",
            ["make e2e-aws", "JOBSCHED_E2E_ENDPOINT", "handlerModules=jobsched.demo_handlers"],
        ),
    ],
)
def test_sections(doc, section, must_mention):
    match = re.search(rf"^### {re.escape(section)}\n(.*?)(?=^### |\Z)", doc, re.M | re.S)
    assert match, f"no '### {section}' section"
    for text in must_mention:
        assert text in match.group(1), (section, text)


def test_every_output_and_context_key_is_documented(doc, synth):
    for output in synth.template["Outputs"]:
        assert f"`{output}`" in doc, output
    for key in CONTEXT_KEYS:
        assert f"`{key}`" in doc, key


def as_regex(pattern: str) -> str:
    """`<queue>-dlq-depth` → a regex where each <placeholder> is a name."""
    return "".join(r"[\w-]+" if p.startswith("<") else re.escape(p) for p in re.split(r"(<\w+>)", pattern))


def test_every_alarm_is_explained(doc, synth):
    (table,) = re.findall(r"^### Alarms\n(.*?)(?=^### |\Z)", doc, re.M | re.S)
    patterns = [as_regex(p) for p in re.findall(r"^\| `([^`]+)`", table, re.M)]
    patterns += [as_regex(p) for p in re.findall(r"^\| `[^`]+`, `([^`]+)`", table, re.M)]
    for alarm in synth.of_type("AWS::CloudWatch::Alarm").values():
        name = alarm["Properties"]["AlarmName"].removeprefix(f"{synth.stack.stack_name}-")
        assert any(re.fullmatch(p, name) for p in patterns), name


def test_json_examples_parse(doc):
    for block in re.findall(r"```json\n(.*?)```", doc, re.S):
        json.loads("{" + block.strip() + "}" if not block.strip().startswith("{") else block)


def test_deploy_section_ends_with_proving_the_deployment(doc):
    assert re.findall(r"^### (.+)$", doc, re.M)[-1] == "Prove the deployment"
