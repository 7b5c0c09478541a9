"""The docs' Operate pages cover bootstrap, deploy, outputs, SigV4 calls from the CLI and from Step
Functions, alarm subscriptions and teardown; the deploy page ends with proving the deployment (make
e2e-aws), and the pages name every output and context key."""

from __future__ import annotations

import json
import re

import pytest
from jobsched.cdk.config import CONTEXT_KEYS

from infra import ROOT

OPERATE = ROOT / "docs" / "operate"
PAGES = ["configure", "preflight", "deploy", "limits", "alarms", "upgrade", "teardown"]


def page(name: str) -> str:
    """One Operate page's text, below its title."""
    return (OPERATE / f"{name}.md").read_text().split("\n", 1)[1]


@pytest.fixture(scope="module")
def doc() -> str:
    """Every Operate page, in the site's order."""
    return "\n".join(page(name) for name in PAGES)


def section(name: str, heading: str | None) -> str:
    """A `## heading` section of a page, or the whole page when heading is None."""
    text = page(name)
    if heading is None:
        return text
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/operate/{name}.md: no '## {heading}' section"
    return match.group(1)


@pytest.mark.parametrize(
    ("name", "heading", "must_mention"),
    [
        ("deploy", "Bootstrap", ["cdk bootstrap"]),
        ("deploy", "Deploy", ["cdk deploy", "--outputs-file"]),
        ("deploy", "Outputs", ["ApiUrl"]),
        ("deploy", "Calling the API (SigV4)", ["--aws-sigv4", "awscurl", "attach-role-policy"]),
        ("deploy", "Calling the API from Step Functions", ["arn:aws:states:::apigateway:invoke", "IAM_ROLE"]),
        ("alarms", None, ["aws sns subscribe", "alarmEmail"]),
        ("teardown", None, ["cdk destroy", "retainData"]),
        (
            "deploy",
            "Prove the deployment",
            ["make e2e-aws", "JOBSCHED_E2E_ENDPOINT", "handlerModules=jobsched.demo_handlers"],
        ),
    ],
)
def test_sections(name, heading, must_mention):
    text = section(name, heading)
    for wanted in must_mention:
        assert wanted in text, (name, heading, wanted)


def test_every_output_and_context_key_is_documented(doc, synth):
    for output in synth.template["Outputs"]:
        assert f"`{output}`" in doc, output
    for key in CONTEXT_KEYS:
        assert f"`{key}`" in doc, key


def as_regex(pattern: str) -> str:
    """`<queue>-dlq-depth` → a regex where each <placeholder> is a name."""
    return "".join(r"[\w-]+" if p.startswith("<") else re.escape(p) for p in re.split(r"(<\w+>)", pattern))


def test_every_alarm_is_explained(synth):
    table = section("alarms", None)
    patterns = [as_regex(p) for p in re.findall(r"^\| `([^`]+)`", table, re.M)]
    patterns += [as_regex(p) for p in re.findall(r"^\| `[^`]+`, `([^`]+)`", table, re.M)]
    for alarm in synth.of_type("AWS::CloudWatch::Alarm").values():
        name = alarm["Properties"]["AlarmName"].removeprefix(f"{synth.stack.stack_name}-")
        assert any(re.fullmatch(p, name) for p in patterns), name


def test_json_examples_parse(doc):
    for block in re.findall(r"```json\n(.*?)```", doc, re.S):
        json.loads("{" + block.strip() + "}" if not block.strip().startswith("{") else block)


def test_deploy_page_ends_with_proving_the_deployment():
    assert re.findall(r"^## (.+)$", page("deploy"), re.M)[-1] == "Prove the deployment"


def test_the_teardown_deletes_this_stacks_tables_only_and_says_how_to_get_them_back():
    """A name prefix takes a Jobsched-staging stack's tables too; a redeploy alone makes new,
    empty tables beside the retained ones."""
    text = page("teardown")
    assert "starts_with" not in text and "begins_with" not in text
    assert "list-stack-resources --stack-name" in text and "`DefinitionsTableName`" in text
    assert "make adopt-tables" in text and "cdk import" in text
    assert "infra.tables adopt" in text and "infra.tables list" in text
