"""The JobScheduler construct (jobsched.cdk) in a stack that is not ours: the docs page's
example app (docs/library/cdk.md) with a second scheduler beside the first, synthesized once
with cdk-nag's AwsSolutions checks as `make nag` applies them (jobsched.cdk.nag.enable); its
props, what it exposes, and what its grants add. The app's own stack is the same construct
with the id "Default": its logical ids are the released ones (released-logical-ids.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jobsched.cdk.names import (
    API_ROLES,
    LAYER_REQUIREMENTS,
    READER,
    ROUTES,
    WORKER,
    table_logical_id,
)
from jobsched.store.schema import DEFINITIONS, RUNS

from infra import ROOT
from tests.infrastructure.synth import SKIP_BUNDLING, Synth, render

PAGE = ROOT / "docs" / "library" / "cdk.md"
RELEASED_LOGICAL_IDS = Path(__file__).with_name("released-logical-ids.json")


def example_source() -> str:
    example = re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert example is not None, "docs/library/cdk.md has its example app"
    return example.group(1)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The page's example stack, a second scheduler (props as a JobSchedulerProps, nested in a
    construct of the app's), a reader role, and cdk-nag over all of it."""
    import aws_cdk as cdk
    from constructs import Construct
    from jobsched.cdk import JobScheduler, JobSchedulerProps, nag

    namespace: dict[str, Any] = {"__name__": "cdk_example"}
    exec(compile(example_source(), str(PAGE), "exec"), namespace)
    outdir = tmp_path_factory.mktemp("platform")
    app = cdk.App(context=SKIP_BUNDLING, outdir=str(outdir))
    stack = namespace["Platform"](app, "Platform", alarm_email="ops@example.com")
    team = Construct(stack, "Team")
    stack.second = JobScheduler(
        team, "Jobs", JobSchedulerProps(shard_count=2, alarms_without_subscriber=True, retain_data=False)
    )
    stack.readers = cdk.aws_iam.Role(stack, "Readers", assumed_by=cdk.aws_iam.AccountRootPrincipal())
    stack.second.grant_invoke_api(stack.readers, READER)
    # The example's own function is the app's business: its managed policy and runtime.
    nag.acknowledge(
        stack.nightly,
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "The example's own function, not the scheduler's: what its owner decides.",
    )
    nag.acknowledge(stack.nightly, "AwsSolutions-L1", "The example's own function, not the scheduler's.")
    nag.enable(app)
    error = None
    try:
        app.synth()
    except RuntimeError as exc:
        error = str(exc)
    template = json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())
    report_path = outdir / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return Synth(outdir, stack, template, error, report)


def policy_statements(synth: Synth, role: Any) -> list[dict[str, Any]]:
    role_id = synth.logical_id(role)
    return [
        statement
        for policy in synth.of_type("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def resources_of(statement: dict[str, Any]) -> list[str]:
    resources = statement["Resource"]
    return [render(r) for r in (resources if isinstance(resources, list) else [resources])]


# --- in a stack that is not ours ---


def test_the_example_synthesizes_with_no_unacknowledged_finding(platform):
    violations = [
        f"{v['ruleName']}: {[c['constructPath'] for c in v['violatingConstructs']]}"
        for plugin in platform.report.get("pluginReports", [])
        for v in plugin.get("violations", [])
    ]
    assert platform.error is None and violations == [], "\n".join(violations) or platform.error


def test_the_schedulers_resources_sit_beside_the_apps(platform):
    scheduler, second = platform.stack.scheduler, platform.stack.second
    assert platform.logical_id(platform.stack.nightly) in platform.of_type("AWS::Lambda::Function")
    # Fixed logical ids, made the scheduler's own: its id, or its path with a digest.
    assert scheduler.naming.prefix == "Scheduler"
    assert re.fullmatch(r"TeamJobs[0-9A-F]{8}", second.naming.prefix)
    for each in (scheduler, second):
        tables = {name: platform.logical_id(table) for name, table in each.tables.items()}
        assert tables == {
            spec.logical_id: each.naming.prefix + table_logical_id(spec) for spec in (DEFINITIONS, RUNS)
        }
        assert platform.logical_id(each.rest_api).startswith(each.naming.prefix)
    assert not {"DefinitionsTable", "RunsTable", "JobschedApi", "EventBus"} & set(platform.resources)
    assert platform.of_type("AWS::DynamoDB::Table")[tables["Runs"]]["DeletionPolicy"] == "Delete"


def test_two_schedulers_share_no_physical_name(platform):
    def names(prefix: str) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for logical_id, resource in platform.resources.items():
            if not logical_id.startswith(prefix):
                continue
            props = resource.get("Properties", {})
            for key in ("AlarmName", "Name", "ArchiveName"):
                if isinstance(props.get(key), str):
                    found.setdefault(resource["Type"], set()).add(props[key])
        return found

    first, second = (names(s.naming.prefix) for s in (platform.stack.scheduler, platform.stack.second))
    assert first["AWS::CloudWatch::Alarm"] and first["AWS::Events::Rule"] and first["AWS::SSM::Parameter"]
    for kind in first:
        assert not first[kind] & second.get(kind, set()), kind
    assert all(n.startswith("Platform-Scheduler-") for n in first["AWS::CloudWatch::Alarm"])
    assert platform.stack.scheduler.grants.name == "/Platform-Scheduler/target-grants"


def test_the_pages_example_takes_the_alarm_address_from_the_context_and_warns_without_one(tmp_path):
    """No made-up address in a copy-paste example: `-c alarmEmail=...` subscribes one, and
    without it the example builds with none and synth warns, as examples/platform/app.py."""
    import aws_cdk as cdk
    from jobsched.cdk.scheduler import NO_ALARM_SUBSCRIBER

    namespace: dict[str, Any] = {"__name__": "cdk_example"}
    exec(compile(example_source(), str(PAGE), "exec"), namespace)
    for address in ("team@example.org", None):
        context = {**SKIP_BUNDLING, **({"alarmEmail": address} if address else {})}
        app = cdk.App(context=context, outdir=str(tmp_path / str(address)))
        namespace["main"](app)
        stack: Any = app.node.find_child("Platform")
        scheduler = stack.scheduler
        assert scheduler.config.alarm_email == address
        warned = [str(e.data) for e in scheduler.node.metadata if e.type == "aws:cdk:warning"]
        assert bool(warned) == (address is None) and all(NO_ALARM_SUBSCRIBER in w for w in warned)


def test_exposed_attributes(platform):
    from aws_cdk import aws_apigateway as apigw
    from aws_cdk import aws_sns as sns

    scheduler = platform.stack.scheduler
    assert set(scheduler.tables) == {DEFINITIONS.logical_id, RUNS.logical_id}
    assert isinstance(scheduler.rest_api, apigw.RestApi) and scheduler.api.rest_api is scheduler.rest_api
    assert isinstance(scheduler.alarm_topic, sns.Topic)
    assert platform.logical_id(scheduler.alarm_topic) in platform.of_type("AWS::SNS::Topic")
    assert set(scheduler.queues.queues) == {"high", "default", "low"}
    assert scheduler.config.shard_count == 8 and scheduler.config.alarm_email == "ops@example.com"
    assert scheduler.examples is None  # the example machines are the repository app's
    assert not platform.of_type("AWS::StepFunctions::StateMachine")
    output = platform.template["Outputs"]["SchedulerUrl"]["Value"]
    assert f"<{platform.logical_id(scheduler.rest_api)}>" in render(output)


def test_grant_invoke_api_adds_every_route_or_a_roles(platform):
    scheduler, second = platform.stack.scheduler, platform.stack.second
    (caller,) = [c for c in platform.stack.node.children if c.node.id == "Caller"]
    (invoke,) = [s for s in policy_statements(platform, caller) if s["Action"] == "execute-api:Invoke"]
    api_id = platform.logical_id(scheduler.rest_api)
    granted = {r.split(f"<{api_id}>/prod/", 1)[1] for r in resources_of(invoke)}
    assert granted == {f"{r.method}{r.arn_path}" for r in ROUTES if r.role in ("reader", "writer")}
    (reads,) = [
        s for s in policy_statements(platform, platform.stack.readers) if s["Action"] == "execute-api:Invoke"
    ]
    second_id = platform.logical_id(second.rest_api)
    assert {r.split(f"<{second_id}>/prod/", 1)[1] for r in resources_of(reads)} == {
        f"{r.method}{r.arn_path}" for r in ROUTES if r.role == READER
    }


def test_grant_target_lets_the_worker_run_the_tenants_function(platform):
    scheduler = platform.stack.scheduler
    function_id = platform.logical_id(platform.stack.nightly)
    arns = [f"<{function_id}.Arn>", f"<{function_id}.Arn>:*"]
    invokes = [
        s
        for s in policy_statements(platform, scheduler.worker_role)
        if s["Action"] == "lambda:InvokeFunction"
    ]
    assert [resources_of(s) for s in invokes] == [arns]
    # Only the worker: the other functions never call a tenant's function.
    for name, role in scheduler.functions.roles.items():
        if name != WORKER:
            assert all(s["Action"] != "lambda:InvokeFunction" for s in policy_statements(platform, role))
    # And the tenant's grant, in the parameter the worker checks before each run.
    parameter = platform.props(platform.logical_id(scheduler.grants_parameter))
    document = json.loads(render(parameter["Value"]))
    billing = {p for t in document["tenants"] if t["tenant"] == "billing" for p in t["targets"]}
    queues = "arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:billing-*"
    assert billing == {queues, *arns}
    assert parameter["Tier"] == "Standard"


def test_the_functions_code_asset_leaves_the_construct_out(platform):
    function_id = platform.logical_id(platform.stack.scheduler.functions.functions["api"])
    asset = platform.asset_dir(function_id)
    assert (asset / "jobsched" / "handlers").is_dir()
    assert not (asset / "jobsched" / "cdk").exists()


# --- props ---


@pytest.fixture
def stack() -> Any:
    import aws_cdk as cdk

    return cdk.Stack(cdk.App(context=SKIP_BUNDLING), "Probe")


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"shard_count": "many"}, r"shard_count: expected an int, got 'many'"),
        ({"shard_count": 4, "shards_per_sweep": 8}, r"shards_per_sweep must be 1\.\.shard_count"),
        ({"worker_concurrency": {"high": 5000}}, r"worker_concurrency\.high must be 2\.\.1000"),
        ({"tenant_targets": {"a": "arn:aws:sqs:*:*:q"}}, r"tenant_targets: expected a mapping"),
        ({"tenant_targets": {"a": ["nope"]}}, r"tenant_targets: .*'nope' is not a lambda"),
        ({"alarm_email": "nobody"}, r"alarm_email must be an e-mail address"),
        ({"alarm_email": "ops@"}, r"alarm_email must be an e-mail address .*got 'ops@'"),
        ({"shard_cont": 3}, r"shard_cont: no such JobScheduler prop \(did you mean shard_count\?\)"),
        ({"retain_data": "yes"}, r"retain_data: expected a bool"),
    ],
)
def test_a_bad_prop_raises_naming_it(stack, props, message):
    from jobsched.cdk import ConfigError, JobScheduler

    with pytest.raises(ConfigError, match=message):
        JobScheduler(stack, "Scheduler", **{"alarm_email": "ops@example.com", **props})
    assert not stack.node.children  # refused before anything is built


def test_an_alarm_that_reaches_no_one_is_a_warning_at_synth_not_an_error(stack):
    """Someone else's app builds the scheduler without an address: it builds, and synth (and
    so every `cdk synth` and `cdk deploy`) warns, naming the props that fix it."""
    from jobsched.cdk import JobScheduler
    from jobsched.cdk.scheduler import NO_ALARM_SUBSCRIBER

    def warnings(scheduler: Any) -> list[str]:
        return [str(e.data) for e in scheduler.node.metadata if e.type == "aws:cdk:warning"]

    silent = JobScheduler(stack, "Scheduler", shard_count=4)
    (warning,) = warnings(silent)
    assert re.search(r"alarm_email is empty.*alarms_without_subscriber=True", warning), warning
    assert NO_ALARM_SUBSCRIBER in warning  # its id, to acknowledge it by
    for i, empty in enumerate(("", "  ")):  # an empty address is a missing one, not a bad one
        blank = JobScheduler(stack, f"Blank{i}", shard_count=4, alarm_email=empty)
        assert warnings(blank) == [warning] and blank.config.alarm_email is None
    assert not warnings(JobScheduler(stack, "Subscribed", shard_count=4, alarm_email="ops@example.com"))
    assert not warnings(JobScheduler(stack, "Own", shard_count=4, alarms_without_subscriber=True))


def test_props_are_given_one_way(stack):
    from jobsched.cdk import ConfigError, JobScheduler, JobSchedulerProps

    with pytest.raises(ConfigError, match="not both"):
        JobScheduler(stack, "Scheduler", JobSchedulerProps(alarm_email="a@b.c"), shard_count=4)
    props = JobSchedulerProps(alarm_email="a@b.c", worker_concurrency={"high": 10})
    assert props.worker_concurrency == {"high": 10, "default": 100, "low": 25}  # merged, as context is


def test_grant_invoke_api_refuses_an_unknown_role(platform):
    with pytest.raises(ValueError, match="no API role 'admin'"):
        platform.stack.scheduler.grant_invoke_api(platform.stack.readers, "admin")
    assert {"reader", "writer"} <= set(API_ROLES)


# --- the app's own stack ---


def test_the_apps_scheduler_keeps_the_released_logical_ids(synth):
    """The stack holds the construct as "Default", which CDK leaves out of logical ids: every
    resource the stack had before the construct existed is there, with its type (a resource
    whose logical id changes is replaced, its data lost). New resources may come; one that
    goes is a deliberate change of this file."""
    assert synth.stack.scheduler.node.id == "Default" and synth.stack.scheduler.naming.prefix == ""
    released: dict[str, str] = json.loads(RELEASED_LOGICAL_IDS.read_text())
    current = {k: v["Type"] for k, v in synth.resources.items()}
    # An API deployment's id ends in a hash of the API's methods: a new route makes a new
    # deployment, as CDK means it to (it holds no data; the stage moves to it). One is there.
    redeployed = "AWS::ApiGateway::Deployment"
    assert list(current.values()).count(redeployed) == 1
    missing = {k: t for k, t in released.items() if current.get(k) != t and t != redeployed}
    assert not missing, f"replaced or gone: {sorted(missing)[:20]}"


def test_the_layer_requirements_ship_in_the_package_as_the_checkout_has_them():
    """jobsched/cdk/layer-requirements.txt is the copy an installed wheel builds the layer from;
    layers/requirements.txt (the Makefile's constraints) is the source: copy it after a change."""
    assert LAYER_REQUIREMENTS.read_text() == (ROOT / "layers" / "requirements.txt").read_text(), (
        "cp layers/requirements.txt functions/jobsched/cdk/layer-requirements.txt"
    )


def test_the_assets_come_from_the_package_wherever_it_is_installed(monkeypatch, tmp_path):
    """The code asset is the imported `jobsched` package's directory (site-packages once
    installed), the layer's requirements ship in it, and builds are cached outside it."""
    import jobsched
    from jobsched.cdk import names

    assert Path(jobsched.__file__).resolve().parent.parent == names.FUNCTIONS_DIR
    assert LAYER_REQUIREMENTS.parent == Path(names.__file__).resolve().parent
    assert names.LAYER_BUILD_DIR == ROOT / "layers" / "build"  # in this checkout, as before
    monkeypatch.setenv(names.BUILD_DIR_ENV, str(tmp_path))
    assert names._build_dir() == tmp_path
    monkeypatch.delenv(names.BUILD_DIR_ENV)
    monkeypatch.setattr(names, "FUNCTIONS_DIR", tmp_path / "site-packages")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert names._build_dir() == tmp_path / "cache" / "jobsched" / "build"
