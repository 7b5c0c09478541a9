"""examples/platform: a team's own CDK app with the scheduler as a construct, and its
external worker. Synthesized here with this checkout's package, and from the built wheel in a
clean virtualenv, as a team installs it."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import venv
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from jobsched.cdk.names import FUNCTIONS

from tests.helpers import HOME, ApiClient, installed_with, wheel_requires_dist
from tests.infrastructure.synth import SKIP_BUNDLING, dependency_cycle, render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "platform"
CONSTRAINTS = ROOT / "layers" / "requirements.txt"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"platform_example_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resources(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def check_template(template: dict[str, Any]) -> None:
    """What the example's stack must hold: the scheduler's tables, queues, functions and API,
    the team's function, and the team's role allowed to call the API."""
    assert len(resources(template, "AWS::DynamoDB::Table")) == 2  # definitions, runs
    assert resources(template, "AWS::SQS::Queue")
    assert resources(template, "AWS::ApiGateway::RestApi")
    functions = resources(template, "AWS::Lambda::Function")
    assert any(k.startswith("NightlyReport") for k in functions), sorted(functions)
    invoke = [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "execute-api:Invoke"
    ]
    assert invoke, "the billing role may call the scheduler's API"
    assert "SchedulerUrl" in template["Outputs"]
    # The team's own handler module is imported by every scheduler function.
    scheduler = [f for k, f in functions.items() if not k.startswith("NightlyReport")]
    assert scheduler and all(
        f["Properties"]["Environment"]["Variables"]["HANDLER_MODULES"] == "billing_jobs.handlers"
        for f in scheduler
    ), scheduler


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The example app synthesized: its output directory and the Platform stack's template."""
    import aws_cdk as cdk

    outdir = tmp_path_factory.mktemp("platform")
    app = cdk.App(context=SKIP_BUNDLING, outdir=str(outdir))
    stack = load("app").Platform(app, "Platform", alarm_email="ops@example.com")
    app.synth()
    return outdir, json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())


def test_the_example_app_synthesizes(example):
    outdir, template = example
    check_template(template)
    assert dependency_cycle(template) == []
    # ... and ships in the functions' code asset beside the scheduler's package.
    shipped = [p.parent.parent for p in outdir.glob("asset.*/billing_jobs/handlers.py")]
    assert shipped and all((asset / "jobsched" / "worker.py").is_file() for asset in shipped), shipped


def test_the_example_requirements_take_jobsched_from_the_repository():
    """`pip install -r requirements.txt`, the README's first step, run from the example's
    directory: jobsched is not on the package registry, so its requirement is a path to this
    repository (with the `cdk` extra the app needs), never the bare name pip would look up."""
    lines = [
        line.split("#", 1)[0].strip() for line in (EXAMPLE / "requirements.txt").read_text().splitlines()
    ]
    requirements = [line for line in lines if line and not line.startswith("-")]
    local = []
    for requirement in requirements:
        found = re.fullmatch(r"(?P<path>[./][^\[]*)(?:\[(?P<extras>[^]]*)\])?", requirement)
        if found is None:  # a name pip looks up on the registry
            name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
            assert name.lower().replace("_", "-") != "jobsched", f"{requirement!r} is not on the registry"
            continue
        assert (EXAMPLE / found["path"]).resolve() == ROOT, requirement
        local.append({e.strip() for e in (found["extras"] or "").split(",") if e.strip()})
    assert local == [{"cdk"}], requirements


def cloudformation_name(logical_id: str, limit: int) -> str:
    """The name CloudFormation gives a resource of the Platform stack that has none:
    `<stack>-<logical id>-<12 characters>`, the first two cut to fit `limit`."""
    suffix = hashlib.sha256(logical_id.encode()).hexdigest()[:12].upper()
    return f"Platform-{logical_id}"[: limit - 13] + "-" + suffix


def deployed_grants(template: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The grants parameter's name and document as the deploy resolves them (the home
    tests.helpers.HOME), and the ARN each function and topic of the stack gets, by logical id."""
    account, region = HOME["account"], HOME["region"]
    arns = {
        **{
            f"<{logical_id}.Arn>": f"arn:aws:lambda:{region}:{account}:function:"
            + cloudformation_name(logical_id, 64)
            for logical_id in resources(template, "AWS::Lambda::Function")
        },
        **{
            f"<{logical_id}>": f"arn:aws:sns:{region}:{account}:" + cloudformation_name(logical_id, 256)
            for logical_id in resources(template, "AWS::SNS::Topic")
        },
    }
    (parameter,) = resources(template, "AWS::SSM::Parameter").values()
    text = render(parameter["Properties"]["Value"])
    for placeholder, value in {
        **arns,
        "<AWS::Partition>": HOME["partition"],
        "<AWS::Region>": region,
        "<AWS::AccountId>": account,
    }.items():
        text = text.replace(placeholder, value)
    text = re.sub(r"<([A-Za-z0-9]+)>", lambda m: cloudformation_name(m.group(1), 64), text)  # a role's name
    by_logical_id = {key.strip("<>").removesuffix(".Arn"): arn for key, arn in arns.items()}
    return parameter["Properties"]["Name"], json.loads(text), by_logical_id


def test_the_embedded_schedulers_functions_and_topic_are_no_tenants_target(example, container):
    """The scheduler sits in the team's stack as construct "Scheduler": its name is
    `Platform-Scheduler`, but CloudFormation names its functions and topic from their logical
    ids (`Platform-SchedulerFunctions…-<suffix>`), which `<name>-` does not cover. The deploy
    writes their ARNs into the grants parameter: under a grant of every `Platform-*` function
    and topic, each function is refused as a job's target by name and by ARN (qualified or
    not), the topic as a notification's, while the team's own function and a topic of the
    tenant's stay granted."""
    from jobsched import wiring
    from jobsched.domain.metrics import RecordedMetrics

    name, document, arns = deployed_grants(example[1])
    account, region = HOME["account"], HOME["region"]
    broad = (
        f"arn:aws:lambda:{region}:{account}:function:Platform-*",
        f"arn:aws:sns:{region}:{account}:Platform-*",
    )
    document["tenants"].append({"tenant": "tenant-a", "targets": list(broad)})
    boto3.client("ssm").put_parameter(Name=name, Value=json.dumps(document), Type="String")
    settings = container.settings.model_copy(update={"target_grants_parameter": name})
    wiring.override(wiring.Container(settings, container.clock, RecordedMetrics()))
    api = ApiClient("tenant-a")

    def answer(**body: Any) -> tuple[int, str | None]:
        found = api.post("/v1/jobs", {"name": "n", "type": "t", "every": "PT1H", **body})
        if found.status != 403:
            return found.status, None
        assert found.body["code"] == "target_not_granted", found
        return found.status, found.body["errors"][0]["field"]

    team = {logical_id for logical_id in arns if logical_id.startswith("NightlyReport")}
    own = sorted(set(arns) - team)
    assert len(own) == len(FUNCTIONS) + 1, own  # every function of the scheduler's, and its topic
    for logical_id in own:
        arn = arns[logical_id]
        if ":lambda:" in arn:
            function = arn.rsplit(":", 1)[-1]
            assert not function.startswith("Platform-Scheduler-"), function  # what the prefix missed
            for spelled in (arn, function, f"{arn}:$LATEST", f"{function}:live"):
                target = {"kind": "lambda", "functionArn": spelled}
                assert answer(target=target) == (403, "target.functionArn"), spelled
        else:  # a notification's target only: runs have none on SNS
            notify = [{"on": ["dead"], "target": {"kind": "sns", "topicArn": arn}}]
            assert answer(notify=notify) == (403, "notify.0.target.topicArn"), arn
    (nightly,) = team
    assert answer(target={"kind": "lambda", "functionArn": arns[nightly]}) == (201, None)
    mine = {"kind": "sns", "topicArn": f"arn:aws:sns:{region}:{account}:Platform-TeamAlerts"}
    assert answer(notify=[{"on": ["dead"], "target": mine}]) == (201, None)


def test_the_example_app_subscribes_no_made_up_address_and_warns_without_one(tmp_path):
    """An address nobody reads confirms nothing and looks subscribed: without alarmEmail the
    example subscribes no one, and synth warns, as the repository's app does."""
    import aws_cdk as cdk

    assert not json.loads((EXAMPLE / "cdk.json").read_text())["context"].get("alarmEmail")
    load("app").main(cdk.App(context=SKIP_BUNDLING, outdir=str(tmp_path)))
    template = json.loads((tmp_path / "Platform.template.json").read_text())
    assert not resources(template, "AWS::SNS::Subscription")
    metadata = json.loads((tmp_path / "Platform.metadata.json").read_text())
    warnings = [
        str(e["data"]) for entries in metadata.values() for e in entries if e["type"] == "aws:cdk:warning"
    ]
    assert any("alarm_email is empty" in w for w in warnings), warnings


def test_the_example_workers_writes_are_fenced():
    """A write under an older fence of the same run than the stored one changes nothing: the
    attempt that lost its lease to a later claim cannot overwrite it. Another run's fence is
    never compared: each run's first claim is fence 1."""
    worker = load("worker")
    invoices = worker.Invoices()
    first, second = "j_1@2026-11-02T08:00:00Z", "j_1@2026-11-02T08:01:00Z"
    assert invoices.mark_sent("inv-1", first, 2)
    assert not invoices.mark_sent("inv-1", first, 1)  # an earlier claim, lease lost
    assert not invoices.mark_sent("inv-1", first, 2)  # the same attempt again
    assert invoices.fence_of("inv-1", first) == 2
    assert invoices.mark_sent("inv-1", first, 3)  # a later claim
    assert invoices.fence_of("inv-1", first) == 3
    assert invoices.mark_sent("inv-1", second, 1)  # the job's next run: its own fences
    assert invoices.fence_of("inv-1", second) == 1
    assert invoices.fence_of("inv-1", first) == 3


def run_example_worker(worker_module: ModuleType, invoices: Any, *, after: list[Any]) -> list[Any]:
    """The example's worker over the real API in process, until it has completed one run per
    entry of `after` (each called after its completion, to move the world on), or 10 s pass.
    Returns what each completion answered."""
    from jobsched.client import Client

    from tests.integration.test_client import ENDPOINT, HandlerTransport

    handler = HandlerTransport(tenant="tenant-a")
    one_at_a_time = threading.Lock()  # one invocation at a time, as one Lambda environment serves

    def transport(method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> Any:
        with one_at_a_time:
            return handler(method, url, headers, body)

    worker = worker_module.build(Client(ENDPOINT, transport=transport), invoices)
    original = worker.client.complete
    answers: list[Any] = []

    def complete_then_move_on(*args: Any, **kwargs: Any) -> Any:
        answer = original(*args, **kwargs)
        answers.append(answer)
        after[len(answers) - 1]()
        if len(answers) == len(after):
            worker.stop()
        return answer

    worker.client.complete = complete_then_move_on
    deadline = threading.Timer(10, worker.stop)  # a run never reported would hold it forever
    deadline.start()
    try:
        worker.run(install_signals=False)
    finally:
        deadline.cancel()
    return answers


def test_the_example_worker_runs_its_handler_under_the_fence(api: Any, clock: Any):
    """The worker leases an `invoice.send` run through the real API, writes the invoice under
    the lease's fence and completes the run with its result."""
    worker_module = load("worker")
    created = api.post(
        "/v1/jobs",
        {
            "name": "invoice",
            "type": "invoice.send",
            "runAt": clock.now().isoformat(),
            "payload": {"invoiceId": "inv-9"},
        },
    )
    assert created.status == 201, created.body
    invoices = worker_module.Invoices()
    run_example_worker(worker_module, invoices, after=[lambda: None])
    (run,) = api.get(f"/v1/jobs/{created.body['jobId']}/runs").body["items"]
    assert run["state"] == "SUCCEEDED", run
    assert invoices.fence_of("inv-9", run["runKey"]) == 1


def test_the_example_worker_reports_every_run_of_a_recurring_job(api: Any, clock: Any):
    """Fences are per run: each run's first claim is fence 1. Two runs of one job due every minute for
    the same invoice, leased one after the other, are both written and both reported, and
    neither is taken for an attempt that lost its lease to the other."""
    worker_module = load("worker")
    created = api.post(
        "/v1/jobs",
        {"name": "invoice", "type": "invoice.send", "every": "PT1M", "payload": {"invoiceId": "inv-9"}},
    )
    assert created.status == 201, created.body
    invoices = worker_module.Invoices()
    answers = run_example_worker(worker_module, invoices, after=[lambda: clock.advance(60), lambda: None])
    assert [(a.fence, a.state) for a in answers] == [(1, "SUCCEEDED")] * 2, answers
    runs = api.get(f"/v1/jobs/{created.body['jobId']}/runs").body["items"]
    assert [r["state"] for r in runs] == ["SUCCEEDED"] * 2, runs
    assert len({r["runKey"] for r in runs}) == 2
    assert all(invoices.fence_of("inv-9", r["runKey"]) == 1 for r in runs)


@pytest.mark.timeout(900)
def test_the_example_app_synthesizes_from_the_built_wheel_in_a_clean_virtualenv(tmp_path: Path):
    """As a team installs it: the wheel `make package` builds, with the `cdk` extra, into a
    virtualenv that has nothing else; the example app synthesizes there."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("jobsched-*.whl")
    # What `pip install jobsched[client]` would bring: an HTTP client's dependencies only.
    requires_dist = wheel_requires_dist(wheel)
    assert not installed_with(requires_dist, "client") & {"boto3", "botocore", "aws-lambda-powertools"}
    assert installed_with(requires_dist, "cdk") >= {"boto3", "aws-lambda-powertools", "aws-cdk-lib"}
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    constraints = tmp_path / "constraints.txt"
    # The runtime's pins (extras left out: pip refuses them in a constraint), as `make` does.
    constraints.write_text(re.sub(r"\[[^]]*\]", "", CONSTRAINTS.read_text()))
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"{wheel}[cdk]", "-c", str(constraints)],
        check=True,
        capture_output=True,
        # Not the caller's PYTHONPATH: a checkout on it (its `jobsched.egg-info`) would pass for
        # the package already installed, and pip would install only its dependencies.
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
    )
    out = tmp_path / "cdk.out"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        "CDK_OUTDIR": str(out),
        "CDK_CONTEXT_JSON": json.dumps({**SKIP_BUNDLING, "alarmEmail": "ops@example.com"}),
    }
    synth = subprocess.run(
        [str(python), "app.py"], cwd=EXAMPLE, env=env, capture_output=True, text=True, check=False
    )
    assert synth.returncode == 0, synth.stderr[-3000:]
    found = subprocess.run(
        [str(python), "-c", "import jobsched, jobsched.client, jobsched.worker; print(jobsched.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    ).stdout
    assert str(env_dir) in found, f"imported from the checkout, not the wheel: {found}"
    check_template(json.loads((out / "Platform.template.json").read_text()))
