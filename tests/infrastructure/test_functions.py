"""Functions: one code asset (local mode and the CLI left out) whose handler strings import,
the layer built for the same runtime and architecture, and every environment variable the code
reads, pointing at the right resources."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobsched.cdk.config import UNRESERVED_MINIMUM, Config, ConfigError
from jobsched.cdk.names import (
    API,
    DEPLOY_ONLY,
    EVENT_BUS_ID,
    EVENTS_FAILURE_QUEUE_ID,
    FUNCTIONS,
    FUNCTIONS_DIR,
    NOTIFICATIONS_DLQ_ID,
    NOTIFICATIONS_QUEUE_ID,
    OUTBOX_FAILURE_QUEUE_ID,
    PYTHON_VERSION,
    RECONCILER,
    RUNTIME_PACKAGE,
    SECOND_TICK_QUEUE_ID,
    SWEEPER,
    TICK_FAILURE_QUEUE_ID,
    code_asset_packages,
    dlq_logical_id,
    queue_logical_id,
    table_logical_id,
)
from jobsched.settings import Settings, environment_names
from jobsched.store.schema import ALL_TABLES, DEFINITIONS, QUEUES, RUNS

from tests.infrastructure.synth import dependency_cycle, render

# Read only in local mode, where the functions talk to a moto server.
# The grants document itself: local mode and tests only (the stack sets the parameter's name).
LOCAL_ONLY = {"JOBSCHED_AWS_ENDPOINT_URL", "TARGET_GRANTS"}
# Set by the Lambda runtime itself.
RUNTIME_PROVIDED = {"AWS_LAMBDA_FUNCTION_NAME"}


def functions_by_handler(synth) -> dict[str, str]:
    return {
        props["Properties"]["Handler"]: logical_id
        for logical_id, props in synth.of_type("AWS::Lambda::Function").items()
    }


def test_one_function_per_handler(synth):
    assert set(functions_by_handler(synth)) == {f.handler for f in FUNCTIONS}


@pytest.mark.parametrize("spec", FUNCTIONS, ids=[f.name for f in FUNCTIONS])
def test_runtime_architecture_layer_tracing_and_limits(synth, spec):
    logical_id = functions_by_handler(synth)[spec.handler]
    props = synth.props(logical_id)
    assert props["Runtime"] == f"python{PYTHON_VERSION}"
    assert props["Architectures"] == ["arm64"]
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["MemorySize"] == spec.memory_mb
    assert props["Timeout"] == spec.timeout_seconds
    (layer,) = props["Layers"]
    layer_props = synth.props(layer["Ref"])
    assert layer_props["CompatibleRuntimes"] == [props["Runtime"]]
    assert layer_props["CompatibleArchitectures"] == props["Architectures"]
    # Its own log group with a retention, and a role with no managed policies.
    group = synth.resources[props["LoggingConfig"]["LogGroup"]["Ref"]]
    assert group["Type"] == "AWS::Logs::LogGroup" and group["Properties"]["RetentionInDays"] > 0
    assert "ManagedPolicyArns" not in synth.props(props["Role"]["Fn::GetAtt"][0])


def test_functions_do_not_share_roles_or_log_groups(synth):
    functions = synth.of_type("AWS::Lambda::Function").values()
    roles = {f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions}
    groups = {f["Properties"]["LoggingConfig"]["LogGroup"]["Ref"] for f in functions}
    assert len(roles) == len(groups) == len(FUNCTIONS)


def test_every_function_shares_one_code_asset(synth):
    keys = {p["Properties"]["Code"]["S3Key"] for p in synth.of_type("AWS::Lambda::Function").values()}
    assert len(keys) == 1


def test_code_asset_is_the_runtime_package_alone(synth):
    asset = synth.asset_dir(next(iter(synth.of_type("AWS::Lambda::Function"))))
    assert sorted(p.name for p in asset.iterdir()) == [RUNTIME_PACKAGE]
    files = {p.relative_to(asset).as_posix() for p in asset.rglob("*") if p.is_file()}
    assert "jobsched/handlers/api/app.py" in files and "jobsched/store/schema.py" in files
    # Bytecode only for the runtime's Python, next to its source (test_layer checks it).
    tag = "cpython-" + PYTHON_VERSION.replace(".", "")
    for cached in [f for f in files if "__pycache__" in f or f.endswith(".pyc")]:
        folder, name = cached.rsplit("/", 1)
        assert folder.endswith("/__pycache__") and name.endswith(f".{tag}.pyc"), cached
        assert f"{folder.removesuffix('/__pycache__')}/{name.split('.')[0]}.py" in files, cached
    # Every module of the package ships but the construct that deploys it (DEPLOY_ONLY).
    source = FUNCTIONS_DIR / RUNTIME_PACKAGE
    shipped = {f for f in files if f.endswith(".py")}
    left_out = {source / name for name in DEPLOY_ONLY}
    expected = {
        p.relative_to(FUNCTIONS_DIR).as_posix()
        for p in source.rglob("*.py")
        if not any(p.is_relative_to(d) for d in left_out)
    }
    assert shipped == expected
    assert {"cdk"} == DEPLOY_ONLY and not any(f.startswith("jobsched/cdk/") for f in files)


def test_every_handler_string_imports_from_the_asset(synth):
    """Imports each handler in a fresh interpreter that sees the asset, not the source tree."""
    asset = synth.asset_dir(next(iter(synth.of_type("AWS::Lambda::Function"))))
    handlers = sorted(functions_by_handler(synth))
    script = (
        "import importlib, sys\n"
        "sys.path[:] = [p for p in sys.path if not p.rstrip('/').endswith('/functions')]\n"
        f"asset = {str(asset)!r}\n"
        f"for handler in {handlers!r}:\n"
        "    module_name, name = handler.rsplit('.', 1)\n"
        "    module = importlib.import_module(module_name)\n"
        "    assert module.__file__.startswith(asset), (handler, module.__file__)\n"
        "    assert callable(getattr(module, name)), handler\n"
        "leaked = [m for m in sys.modules if m.startswith(('jobsched_', 'chaos'))]\n"
        "assert not leaked, leaked\n"
        f"print('ok', {len(handlers)})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(asset), "POWERTOOLS_TRACE_DISABLED": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=asset, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"ok {len(handlers)}"


def variables_the_code_reads(asset: Path) -> set[str]:
    names = set(environment_names())  # the settings model declares what it reads
    # Anything else in the asset that reads the environment by a literal name.
    for path in asset.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = ast.unparse(node.func)
                if func in ("os.getenv", "os.environ.get", "environ.get", "getenv"):
                    names.add(str(node.args[0].value))
            elif (
                isinstance(node, ast.Subscript)
                and ast.unparse(node.value) in ("os.environ", "environ")
                and isinstance(node.slice, ast.Constant)
            ):
                names.add(str(node.slice.value))
    return names - LOCAL_ONLY - RUNTIME_PROVIDED


def test_every_variable_the_code_reads_is_set_on_every_function(synth):
    asset = synth.asset_dir(next(iter(synth.of_type("AWS::Lambda::Function"))))
    needed = variables_the_code_reads(asset)
    assert {"SHARD_COUNT", "HORIZON_SECONDS", "RETENTION_DAYS"} <= needed  # the recorder works
    for logical_id, function in synth.of_type("AWS::Lambda::Function").items():
        env = function["Properties"]["Environment"]["Variables"]
        assert not needed - set(env), (logical_id, sorted(needed - set(env)))
        assert not LOCAL_ONLY & set(env), logical_id


def test_variables_point_at_the_right_resources(synth, config):
    for function in synth.of_type("AWS::Lambda::Function").values():
        env = function["Properties"]["Environment"]["Variables"]
        for spec in ALL_TABLES:
            assert env[spec.env_var] == {"Ref": table_logical_id(spec)}
        for queue in QUEUES:
            assert env[queue.env_var] == {"Ref": queue_logical_id(queue.key)}
            assert env[queue.dlq_env_var] == {"Ref": dlq_logical_id(queue.key)}
        assert env["SHARD_COUNT"] == str(config.shard_count)
        # The stack's own, so no other scheduler's alarms read its figures (test_monitoring).
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "jobsched/Jobsched"
        assert env["POWERTOOLS_SERVICE_NAME"] == "Jobsched"


def _with_refs(settings_env: dict[str, str]) -> dict[str, object]:
    """Placeholder resource names `ref:LogicalId` as the template writes them, a list of them
    (`ref:A,ref:B`) joined."""

    def written(value: str) -> object:
        if not value.startswith("ref:"):
            return value
        refs = [{"Ref": part.removeprefix("ref:")} for part in value.split(",")]
        if len(refs) == 1:
            return refs[0]
        return {"Fn::Join": ["", [item for ref in refs for item in (",", ref)][1:]]}

    return {k: written(v) for k, v in settings_env.items()}


def _refs(value: object) -> set[str]:
    """The logical id of every `{"Ref": ...}` inside a template value."""
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            return {str(value["Ref"])}
        return {ref for inner in value.values() for ref in _refs(inner)}
    if isinstance(value, list):
        return {ref for inner in value for ref in _refs(inner)}
    return set()


def test_every_queue_of_the_stack_is_named_in_every_functions_settings(synth):
    """No tenant target may name a queue of the scheduler's (Settings.own_names): the
    functions' settings name every queue the stack makes, the failure and dead-letter queues
    of every path included, which a scheduler inside another stack does not name `<name>-…`."""
    queues = set(synth.of_type("AWS::SQS::Queue"))
    assert len(queues) == 2 * len(QUEUES) + 6  # the run queues, their DLQs and six of the others
    for logical_id, function in synth.of_type("AWS::Lambda::Function").items():
        named = _refs(function["Properties"]["Environment"]["Variables"])
        assert not queues - named, (logical_id, sorted(queues - named))


def test_every_function_and_topic_of_the_stack_is_listed_as_its_own_in_the_grants(synth):
    """No tenant target may name a function or topic of the scheduler's (OwnNames), whatever
    CloudFormation names them: the grants parameter lists each by ARN (`ownResources`), and
    that makes no cycle (the functions' policies name the parameter by its literal ARN)."""
    (parameter,) = synth.of_type("AWS::SSM::Parameter").values()
    document = json.loads(render(parameter["Properties"]["Value"]))
    functions = {f"<{logical_id}.Arn>" for logical_id in synth.of_type("AWS::Lambda::Function")}
    topics = {f"<{logical_id}>" for logical_id in synth.of_type("AWS::SNS::Topic")}
    assert len(functions) == len(FUNCTIONS) and len(topics) == 1
    assert sorted(document["ownResources"]) == sorted(functions | topics)
    assert dependency_cycle(synth.template) == []


@pytest.mark.parametrize(
    "context",
    [
        {},
        {
            "shardCount": 64,
            "fairQueues": "false",
            "horizonSeconds": 300,
            "httpAllowDestinations": "10.0.0.0/8,intranet",
            "leaseSeconds": 120,
        },
    ],
    ids=["defaults", "overridden"],
)
def test_each_functions_environment_is_the_settings_models_serialisation(synth, tmp_path, context):
    """Nothing hand-listed: the template's variables are Settings.lambda_environment() of the
    infra config (resources as references) plus Powertools' own, on every function."""
    from jobsched.cdk.functions import POWERTOOLS_ENVIRONMENT
    from jobsched.cdk.grants import parameter_name as grants_parameter_name

    from tests.infrastructure.synth import synthesize

    built = synthesize(tmp_path, context, checks=False) if context else synth
    config = built.stack.config
    namespace, service = config.metric_names(built.stack.stack_name)
    settings = config.runtime_settings(
        definitions_table="ref:" + table_logical_id(DEFINITIONS),
        runs_table="ref:" + table_logical_id(RUNS),
        queue_urls={q.key: "ref:" + queue_logical_id(q.key) for q in QUEUES},
        dlq_urls={q.key: "ref:" + dlq_logical_id(q.key) for q in QUEUES},
        target_grants_parameter=grants_parameter_name(built.stack.stack_name),
        event_bus_name="ref:" + EVENT_BUS_ID,
        event_source_name=built.stack.stack_name,
        notifications_queue_url="ref:" + NOTIFICATIONS_QUEUE_ID,
        second_tick_queue_url="ref:" + SECOND_TICK_QUEUE_ID,
        own_queue_urls=tuple(
            "ref:" + logical_id
            for logical_id in (
                OUTBOX_FAILURE_QUEUE_ID,
                EVENTS_FAILURE_QUEUE_ID,
                NOTIFICATIONS_DLQ_ID,
                TICK_FAILURE_QUEUE_ID,
            )
        ),
        events_failures_queue_url="ref:" + EVENTS_FAILURE_QUEUE_ID,
        metrics_namespace=namespace,
        service_name=service,
    )
    expected = {**_with_refs(settings.lambda_environment()), **POWERTOOLS_ENVIRONMENT}
    functions = built.of_type("AWS::Lambda::Function")
    assert len(functions) == len(FUNCTIONS)
    for logical_id, function in functions.items():
        assert function["Properties"]["Environment"]["Variables"] == expected, logical_id
    # And what the functions parse back is that config.
    plain = {k: v for k, v in expected.items() if isinstance(v, str)}
    parsed = Settings.from_env(plain)
    assert parsed.shard_count == config.shard_count and parsed.fair_queues == config.fair_queues
    assert parsed.horizon_seconds == config.horizon_seconds
    assert parsed.http_allow_destinations == config.http_allow_destinations
    # The grants are not in the environment (4 KB in all): the functions read the parameter.
    assert "TARGET_GRANTS" not in plain
    assert parsed.target_grants_parameter == grants_parameter_name(built.stack.stack_name)


def function_of(synth, name: str) -> str:
    spec = next(f for f in FUNCTIONS if f.name == name)
    return functions_by_handler(synth)[spec.handler]


def test_lambdas_recursion_guard_stays_on_for_every_function(synth):
    """No function re-sends its own trigger (the worker defers by visibility or through the
    outbox's stream), so Lambda's guard may stop any worker -> SQS -> worker loop, and the
    worker-recursion-dropped alarm can fire."""
    for spec in FUNCTIONS:
        assert synth.props(function_of(synth, spec.name))["RecursiveLoop"] == "Terminate", spec.name


def test_scheduled_functions_neither_retry_nor_keep_old_ticks(synth):
    configs = {
        c["Properties"]["FunctionName"]["Ref"]: c["Properties"]
        for c in synth.of_type("AWS::Lambda::EventInvokeConfig").values()
    }
    assert set(configs) == {function_of(synth, SWEEPER), function_of(synth, RECONCILER)}
    for props in configs.values():
        assert props["MaximumRetryAttempts"] == 0
        assert 60 <= props["MaximumEventAgeInSeconds"] <= 120  # the next tick carries the same work
        assert props["Qualifier"] == "$LATEST"


@pytest.mark.parametrize(("which", "quota"), [("variant", 1000), ("largest", 1500)])
def test_with_the_accounts_quota_the_ticks_reserve_what_runs_at_once(request, which, quota):
    """The sweeper's tick; the reconciler's rule tick and its second tick half a minute later,
    whose passes (up to 50 s) overlap: two a shard at once. Each with a quarter more."""
    synth = request.getfixturevalue(which)
    config = synth.stack.config
    assert config.account_concurrency == quota
    ticks = config.tick_invocations()
    at_once = {SWEEPER: ticks[SWEEPER], RECONCILER: 2 * config.shard_count}
    reserved = {}
    for spec in FUNCTIONS:
        value = synth.props(function_of(synth, spec.name)).get("ReservedConcurrentExecutions")
        if spec.name in (SWEEPER, RECONCILER):
            assert at_once[spec.name] < value <= 2 * at_once[spec.name], spec.name
            reserved[spec.name] = value
        elif spec.name == API:
            assert value == (config.api_reserved_concurrency or None)  # asked for by name, or none
            reserved[spec.name] = value or 0
        else:
            assert value is None, spec.name  # ceilings (the worker mappings) instead
    # Every shard's second tick may run at once beside its rule tick, within the reservation.
    (second_ticks,) = [
        m["Properties"]
        for m in synth.of_type("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": function_of(synth, RECONCILER)}
    ]
    assert ticks[RECONCILER] + second_ticks["ScalingConfig"]["MaximumConcurrency"] <= reserved[RECONCILER]
    ceilings = sum(config.worker_concurrency.values())
    assert sum(reserved.values()) + ceilings + UNRESERVED_MINIMUM <= quota


def test_the_api_is_capped_only_when_asked(synth, variant):
    """A cap is a reservation: none by default (a new account refuses any), the setting's
    value when given."""
    assert "ReservedConcurrentExecutions" not in synth.props(function_of(synth, API))
    assert variant.props(function_of(variant, API))["ReservedConcurrentExecutions"] == 50


def import_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`import jobsched.settings` in a fresh interpreter with exactly `env` (plus PATH)."""
    functions = Path(__file__).resolve().parents[2] / "functions"
    return subprocess.run(
        [sys.executable, "-c", "import jobsched.settings as s; print(s.settings().runs_table)"],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(functions), **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_in_lambda_a_missing_variable_fails_the_import_and_is_named(synth):
    from jobsched.settings import REQUIRED_IN_LAMBDA

    function = next(iter(synth.of_type("AWS::Lambda::Function").values()))
    template_env = {
        k: v if isinstance(v, str) else f"from-template-{k.lower()}"
        for k, v in function["Properties"]["Environment"]["Variables"].items()
    }
    assert set(REQUIRED_IN_LAMBDA) <= set(template_env)  # the stack sets every one of them
    lambda_env = {"AWS_LAMBDA_FUNCTION_NAME": "jobsched-worker"}

    ok = import_settings({**template_env, **lambda_env})
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.strip() == "from-template-runs_table"

    missing = {k: v for k, v in template_env.items() if k != "RUNS_TABLE"}
    failed = import_settings({**missing, **lambda_env})
    assert failed.returncode != 0
    assert "MissingSettings" in failed.stderr and "RUNS_TABLE" in failed.stderr
    assert "SHARD_COUNT" not in failed.stderr.splitlines()[-1]  # only what is missing


def test_outside_lambda_missing_variables_fall_back_to_local_names():
    result = import_settings({})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "jobsched-runs"


def test_handler_modules_ship_their_package_and_nothing_local():
    assert code_asset_packages(("jobsched.demo_handlers",)) == (RUNTIME_PACKAGE,)
    from jobsched.cdk.layer_asset import code_files

    shipped = {p.relative_to(FUNCTIONS_DIR).parts[0] for p in code_files(("jobsched",))}
    assert shipped == {"jobsched"}  # never jobsched_local, whatever sits next to it
    with pytest.raises(ConfigError, match="handlerModules: jobsched_local runs on the user's machine"):
        Config(handler_modules=("jobsched_local.demo",))
    with pytest.raises(ConfigError, match="handlerModules: no package or module 'nosuch'"):
        Config(handler_modules=("nosuch.handlers",))


def test_the_app_s_handler_code_directory_ships_beside_the_scheduler(tmp_path: Path, monkeypatch) -> None:
    from jobsched.cdk import layer_asset
    from jobsched.cdk.layer_asset import asset_files, build_code, code_asset_hash

    monkeypatch.setattr(layer_asset, "CODE_BUILD_DIR", tmp_path / "build")
    app = tmp_path / "app"
    (app / "handlers" / "myjobs").mkdir(parents=True)
    (app / "handlers" / "myjobs" / "__init__.py").write_text("")
    (app / "handlers" / "myjobs" / "handlers.py").write_text("import jobsched\n")
    (app / "handlers" / "jobsched").mkdir()  # never shadows the scheduler's own package
    (app / "handlers" / "jobsched" / "__init__.py").write_text("raise ImportError('shadow')\n")
    monkeypatch.chdir(app)

    with pytest.raises(ConfigError, match="handlerModules: no package or module 'myjobs' in"):
        Config(handler_modules=("myjobs.handlers",))
    with pytest.raises(ConfigError, match="handlerCode: 'nosuch' is not a directory"):
        Config(handler_modules=("myjobs.handlers",), handler_code="nosuch")
    config = Config(handler_modules=("jobsched.demo_handlers", "myjobs.handlers"), handler_code="handlers")
    packages = code_asset_packages(config.handler_modules, config.handler_code)
    assert packages == (RUNTIME_PACKAGE, "myjobs")
    shipped = {str(path): source for source, path in asset_files(packages, "handlers")}
    assert shipped["myjobs/handlers.py"] == app / "handlers" / "myjobs" / "handlers.py"
    assert shipped["jobsched/__init__.py"] == FUNCTIONS_DIR / "jobsched" / "__init__.py"
    assert not any(path.startswith("jobsched/cdk/") for path in shipped)
    before = code_asset_hash(packages, handler_code="handlers")
    (app / "handlers" / "myjobs" / "handlers.py").write_text("import jobsched  # changed\n")
    assert code_asset_hash(packages, handler_code="handlers") != before  # a change redeploys
    built = build_code(packages, handler_code="handlers")
    assert (built / "myjobs" / "handlers.py").read_text() == "import jobsched  # changed\n"
    assert (built / "jobsched" / "demo_handlers.py").is_file()
