"""After `cdk destroy`: the retained tables are named exactly (this stack's, never another
stack's whose name starts the same), and `python -m infra.tables adopt` imports them into the
stack with `cdk import` before it is deployed again. Without an AWS account this proves what
happens before CloudFormation: which tables are found (moto), the refusals, and the resource
mapping and command `cdk import` is given."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

import pytest

from infra import tables
from infra.tables import Refused, plan_adoption, stack_tables
from tests.infrastructure.deployed import STACK, deploy, moto_account

pytestmark = pytest.mark.integration

STAGING = "Jobsched-staging"


@pytest.fixture
def account(monkeypatch):
    with moto_account(monkeypatch) as client:
        yield client


def destroyed(client, template: dict, stack_name: str = STACK) -> dict[str, str]:
    """Deploy then destroy a stack of the template's tables (Retain): the names left behind."""
    names = deploy(client, template, stack_name, parameters=False)
    assert stack_tables(client, stack_name) == names
    client("cloudformation").delete_stack(StackName=stack_name)
    assert stack_tables(client, stack_name) is None
    return {logical_id: names[logical_id] for logical_id in ("DefinitionsTable", "RunsTable")}


def test_the_outputs_name_the_tables_the_teardown_keeps(synth):
    outputs = synth.template["Outputs"]
    assert outputs["DefinitionsTableName"]["Value"] == {"Ref": "DefinitionsTable"}
    assert outputs["RunsTableName"]["Value"] == {"Ref": "RunsTable"}


def test_the_retained_tables_of_this_stack_are_adopted_and_no_other_stacks(synth, account):
    """A Jobsched-staging stack's names start with Jobsched- too: a prefix would take them."""
    staging = destroyed(account, synth.template, STAGING)
    kept = destroyed(account, synth.template)
    assert all(name.startswith(f"{STACK}-") for name in staging.values())
    adoption = plan_adoption(account, STACK, synth.template)
    assert adoption.tables == kept
    assert adoption.mapping() == {
        "DefinitionsTable": {"TableName": kept["DefinitionsTable"]},
        "RunsTable": {"TableName": kept["RunsTable"]},
    }
    assert plan_adoption(account, STAGING, synth.template).tables == staging


def test_adopt_writes_the_mapping_and_runs_cdk_import_with_the_deploys_context(synth, account, tmp_path):
    kept = destroyed(account, synth.template)
    ran: list[list[str]] = []

    def run(command: Sequence[str]) -> int:
        ran.append(list(command))
        return 0

    mapping = tmp_path / "mapping.json"
    argv = ["adopt", "-c", "alarmEmail=ops@example.com", "--mapping", str(mapping)]
    assert tables.main(argv, client=account, run=run) == 0
    assert json.loads(mapping.read_text()) == {
        logical_id: {"TableName": name} for logical_id, name in kept.items()
    }
    (command,) = ran
    assert command[: command.index("import")] in ([str(tables.CDK)], ["npx", "cdk"])  # the pinned CLI
    assert command[command.index("import") :] == [
        "import",
        STACK,
        "--resource-mapping",
        str(mapping),
        "-c",
        "alarmEmail=ops@example.com",
    ]


def test_a_stack_that_exists_is_refused(synth, account):
    """After a redeploy the stack has new, empty tables: importing beside them is no way back."""
    deploy(account, synth.template)
    with pytest.raises(Refused, match=f"stack {STACK} exists .*before any deploy after `cdk destroy`"):
        plan_adoption(account, STACK, synth.template)


def test_two_retained_generations_are_refused_until_one_is_named(synth, account):
    first = destroyed(account, synth.template)
    second = destroyed(account, synth.template)
    with pytest.raises(Refused) as refused:
        plan_adoption(account, STACK, synth.template)
    message = str(refused.value)
    assert message.startswith(f"DefinitionsTable: 2 retained tables of stack {STACK}")
    assert first["DefinitionsTable"] in message and second["DefinitionsTable"] in message
    assert "--table DefinitionsTable=<name>" in message
    named = {"DefinitionsTable": first["DefinitionsTable"], "RunsTable": first["RunsTable"]}
    assert plan_adoption(account, STACK, synth.template, named).tables == first


@pytest.mark.parametrize(
    ("named", "message"),
    [
        ({"DefinitionsTable": "Jobsched-DefinitionsTable-GONE"}, "DefinitionsTable: no table Jobsched-Defin"),
        ({"JobsTable": "x"}, "JobsTable: no such table in the template"),
    ],
)
def test_a_table_that_is_not_there_is_refused(synth, account, named, message):
    destroyed(account, synth.template)
    with pytest.raises(Refused, match=message):
        plan_adoption(account, STACK, synth.template, named)


def test_a_table_unlike_the_templates_is_refused(synth, account):
    """Import takes the template's word for the table and never makes it so: an index missing
    from the table would stay missing."""
    older = copy.deepcopy(synth.template)
    runs = older["Resources"]["RunsTable"]["Properties"]
    runs["GlobalSecondaryIndexes"] = [i for i in runs["GlobalSecondaryIndexes"] if i["IndexName"] != "open"]
    destroyed(account, older)
    with pytest.raises(
        Refused, match=r"RunsTable: table Jobsched-RunsTable-\w+ differs from the template \(globalIndexes"
    ):
        plan_adoption(account, STACK, synth.template)


def test_a_table_of_a_live_stack_is_refused(synth, account):
    """Named by hand, a table another stack still holds (CloudFormation's stack-id tag)."""
    staging = deploy(account, synth.template, STAGING, parameters=False)
    destroyed(account, synth.template)
    (stack,) = account("cloudformation").describe_stacks(StackName=STAGING)["Stacks"]
    dynamodb = account("dynamodb")
    for name in (staging["DefinitionsTable"],):
        arn = dynamodb.describe_table(TableName=name)["Table"]["TableArn"]
        dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": tables.STACK_ID_TAG, "Value": stack["StackId"]}])
    with pytest.raises(
        Refused, match=f"DefinitionsTable: table {staging['DefinitionsTable']} belongs to stack {STAGING}"
    ):
        plan_adoption(account, STACK, synth.template, {"DefinitionsTable": staging["DefinitionsTable"]})


def test_a_refusal_imports_nothing_and_exits_1(synth, account, capsys):
    deploy(account, synth.template)
    ran: list[Sequence[str]] = []

    def run(command: Sequence[str]) -> int:
        ran.append(command)
        return 0

    assert tables.main(["adopt"], client=account, run=run) == 1
    assert ran == [] and "adopt: refused: stack Jobsched exists" in capsys.readouterr().err


def test_list_names_the_deployed_stacks_tables_exactly(synth, account, capsys):
    names = deploy(account, synth.template, parameters=False)
    deploy(account, synth.template, STAGING, parameters=False)
    assert tables.main(["list"], client=account) == 0
    assert capsys.readouterr().out.splitlines() == [f"{k}\t{v}" for k, v in sorted(names.items())]
