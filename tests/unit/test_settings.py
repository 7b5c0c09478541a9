"""The runtime settings model: read from the environment, every value checked, a bad one named
by its variable and rule; and its serialisation reads back as the same settings."""

from __future__ import annotations

import json

import pytest
from jobsched.domain.grants import GrantsDocument
from jobsched.settings import (
    IN_LAMBDA,
    REQUIRED_IN_LAMBDA,
    InvalidSettings,
    MissingSettings,
    Settings,
    environment_names,
)
from jobsched.store.schema import QUEUES
from jobsched_local.config import LocalConfig


def test_defaults_are_what_the_stack_deploys():
    """The numbers the issue found disagreeing: one value each now, the deployed one."""
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.shard_count == 32
    assert settings.sweep_ahead_seconds == 300
    assert settings.horizon_seconds <= settings.sweep_ahead_seconds


def test_environment_values_are_parsed():
    env = {
        "SHARD_COUNT": "64",
        "FAIR_QUEUES": "false",
        "HTTP_ALLOW_DESTINATIONS": " 10.0.0.0/8 , intranet ,",
        "HANDLER_MODULES": "",  # the stack sets it empty: the default
        "HIGH_QUEUE_URL": "https://sqs/high",
        "LOW_DLQ_URL": "https://sqs/low-dlq",
        "UNRELATED": "ignored",
    }
    settings = Settings.from_env(env)
    assert settings.shard_count == 64 and settings.fair_queues is False
    assert settings.http_allow_destinations == ("10.0.0.0/8", "intranet")
    assert settings.handler_modules == ()
    assert settings.queue_urls == {"high": "https://sqs/high"}
    assert settings.dlq_urls == {"low": "https://sqs/low-dlq"}


def test_the_lambda_environment_reads_back_as_the_same_settings():
    settings = Settings(
        shard_count=8,
        fair_queues=False,
        http_allow_destinations=("a", "b"),
        queue_urls={q.key: f"url-{q.key}" for q in QUEUES},
        dlq_urls={q.key: f"dlq-{q.key}" for q in QUEUES},
        notifications_queue_url="url-notifications",
        second_tick_queue_url="url-second-ticks",
        events_failures_queue_url="url-events-failures",
        endpoint_url="http://127.0.0.1:5055",
        target_grants=GrantsDocument.from_maps(
            {"t": ["arn:aws:sqs:*:*:q"]}, {"t": ["com.t.*"]}, ("arn:aws:iam::*:role/r",)
        ),
    )
    env = settings.lambda_environment()
    # The grants come from one of two variables: the document (here) or the stack's parameter.
    assert set(env) == set(environment_names()) - {"TARGET_GRANTS_PARAMETER"}
    assert all(isinstance(v, str) for v in env.values())
    assert Settings.from_env(env) == settings
    in_the_stack = settings.model_copy(
        update={"target_grants": GrantsDocument(), "target_grants_parameter": "/s/g"}
    )
    env = in_the_stack.lambda_environment()
    assert "TARGET_GRANTS" not in env and Settings.from_env(env) == in_the_stack


def test_the_grants_come_from_one_place_and_break_a_rule_by_name():
    with pytest.raises(InvalidSettings, match="set TARGET_GRANTS_PARAMETER or TARGET_GRANTS, not both"):
        Settings.from_env(
            {
                "TARGET_GRANTS_PARAMETER": "/s/g",
                "TARGET_GRANTS": '{"assumableRoles": ["arn:aws:iam::*:role/r"]}',
            }
        )
    with pytest.raises(InvalidSettings, match=r"TARGET_GRANTS: .*ARN pattern"):
        Settings.from_env({"TARGET_GRANTS": '{"tenants": [{"tenant": "t", "targets": ["arn:aws:s3:::b"]}]}'})
    assert Settings.from_env({}).target_grants == GrantsDocument()  # nothing granted


@pytest.mark.parametrize(
    ("env", "variable", "rule"),
    [
        ({"SHARD_COUNT": "many"}, "SHARD_COUNT", "valid integer"),
        ({"SHARD_COUNT": "0"}, "SHARD_COUNT", "greater than or equal to 1"),
        ({"SHARD_COUNT": "257"}, "SHARD_COUNT", "less than or equal to 256"),
        ({"HORIZON_SECONDS": "0"}, "HORIZON_SECONDS", "greater than or equal to 1"),
        ({"HORIZON_SECONDS": "600"}, "SWEEP_AHEAD_SECONDS", "at least HORIZON_SECONDS (600)"),
        ({"SWEEP_AHEAD_SECONDS": "7200"}, "SWEEP_AHEAD_SECONDS", "less than or equal to 3600"),
        ({"RETENTION_DAYS": "0"}, "RETENTION_DAYS", "greater than or equal to 1"),
        ({"MAX_JOBS_PER_TENANT": "-1"}, "MAX_JOBS_PER_TENANT", "greater than or equal to 0"),
        ({"TENANT_REQUESTS_PER_SECOND": "-1"}, "TENANT_REQUESTS_PER_SECOND", "greater than or equal to 0"),
        ({"TENANT_CONCURRENCY": "1.5"}, "TENANT_CONCURRENCY", "valid integer"),
        ({"TENANT_CONCURRENCY": "1001"}, "TENANT_CONCURRENCY", "less than or equal to 1000"),
        ({"LEASE_SECONDS": "5"}, "LEASE_SECONDS", "greater than or equal to 10"),
        ({"FAIR_QUEUES": "perhaps"}, "FAIR_QUEUES", "valid boolean"),
        ({"RUNS_TABLE": "x"}, "RUNS_TABLE", "at least 3 characters"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable_and_the_rule(env, variable, rule):
    with pytest.raises(InvalidSettings) as refused:
        Settings.from_env(env)
    message = str(refused.value)
    assert f"{variable}: " in message and rule in message, message
    assert repr(next(iter(env.values()))) in message or variable == "SWEEP_AHEAD_SECONDS"


def test_every_bad_value_is_reported_at_once():
    with pytest.raises(InvalidSettings) as refused:
        Settings.from_env({"SHARD_COUNT": "0", "LEASE_SECONDS": "1"})
    assert [p.split(":")[0] for p in refused.value.problems] == ["SHARD_COUNT", "LEASE_SECONDS"]


def test_in_lambda_missing_variables_are_named_before_any_value_is_checked():
    env = {name: "x" * 3 for name in REQUIRED_IN_LAMBDA if name != "RUNS_TABLE"}
    with pytest.raises(MissingSettings) as missing:
        Settings.from_env({**env, IN_LAMBDA: "jobsched-worker"})
    assert missing.value.names == ["RUNS_TABLE"]


def test_in_lambda_a_bad_value_fails_loudly_too():
    env = Settings(
        queue_urls={q.key: "u" for q in QUEUES},
        dlq_urls={q.key: "d" for q in QUEUES},
        notifications_queue_url="n",
        second_tick_queue_url="s",
        own_queue_urls=("o",),
        events_failures_queue_url="e",
    )
    good = {**env.lambda_environment(), IN_LAMBDA: "jobsched-worker"}
    assert Settings.from_env(good).shard_count == 32
    with pytest.raises(InvalidSettings, match="SHARD_COUNT: "):
        Settings.from_env({**good, "SHARD_COUNT": "-4"})


def test_local_mode_builds_its_settings_with_the_model():
    config = LocalConfig()
    settings = config.runtime_settings()
    assert settings.shard_count == config.shard_count == 4  # local mode's own choice
    assert settings.retention_days == Settings().retention_days  # the model's default otherwise
    assert settings.http_allow_destinations == tuple(config.allow_destinations)
    # Unset, sweep-ahead follows a longer horizon; set below it, it is refused by name.
    assert LocalConfig(horizon_seconds=900).runtime_settings().sweep_ahead_seconds == 900
    assert LocalConfig().runtime_settings().sweep_ahead_seconds == LocalConfig().horizon_seconds
    with pytest.raises(ValueError, match="sweep_ahead_seconds: must be at least HORIZON_SECONDS"):
        LocalConfig(horizon_seconds=900, sweep_ahead_seconds=300).runtime_settings()


def test_local_mode_may_tick_faster_with_a_shorter_horizon():
    # The stack's sweeper runs every minute (jobsched.cdk.config requires horizonSeconds >= 60); local
    # mode's tick is its own (the e2e suite ticks every second with a 15 s horizon).
    assert LocalConfig(horizon_seconds=15, sweep_seconds=1).runtime_settings().horizon_seconds == 15


def test_local_mode_grants_come_from_its_json_config(tmp_path):
    from jobsched.domain.grants import Grants

    path = tmp_path / "local.json"
    path.write_text('{"tenant_targets": {"acme": ["arn:aws:sqs:us-east-1:123456789012:acme-*"]}}')
    grants = Grants(LocalConfig.load(path).runtime_settings().target_grants)
    assert grants.allows("acme", "arn:aws:sqs:us-east-1:123456789012:acme-in")
    assert not grants.allows("globex", "arn:aws:sqs:us-east-1:123456789012:acme-in")
    assert grants.home is not None and grants.home.account == "123456789012"  # moto's
    assert not Grants(LocalConfig().runtime_settings().target_grants).allows(
        "dev", "arn:aws:sqs:us-east-1:1:q"
    )
    path.write_text('{"tenant_targets": {"acme": ["arn:aws:s3:::bucket"]}}')
    with pytest.raises(ValueError, match="tenant_targets"):
        LocalConfig.load(path)


def test_local_mode_grants_secrets_in_the_same_tenant_targets(tmp_path):
    """One map grants a tenant its AWS targets and the secrets its HTTP headers reference."""
    from jobsched.domain.grants import Grants

    path = tmp_path / "local.json"
    patterns = [
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:acme/*",
        "arn:aws:ssm:us-east-1:123456789012:parameter/acme/*",
        "arn:aws:sqs:us-east-1:123456789012:acme-*",
    ]
    path.write_text(json.dumps({"tenant_targets": {"acme": patterns}}))
    grants = Grants(LocalConfig.load(path).runtime_settings().target_grants)
    assert grants.allows("acme", "arn:aws:secretsmanager:us-east-1:123456789012:secret:acme/hook-AbCdEf")
    assert grants.allows("acme", "arn:aws:ssm:us-east-1:123456789012:parameter/acme/api-key")
    assert grants.allows("acme", "arn:aws:sqs:us-east-1:123456789012:acme-in")
    assert not grants.allows("globex", "arn:aws:ssm:us-east-1:123456789012:parameter/acme/api-key")


def test_the_own_names_are_every_resource_the_settings_name():
    """What the functions publish to and queue on is refused to every tenant (OwnNames)."""
    base = "https://sqs.us-east-1.amazonaws.com/123456789012/Jobsched-"
    settings = Settings(
        target_grants_parameter="/Jobsched/target-grants",
        event_bus_name="JobschedEventsEventBus5A3B",
        queue_urls={q.key: f"{base}{q.key}" for q in QUEUES},
        dlq_urls={q.key: f"{base}{q.key}-dlq" for q in QUEUES},
        notifications_queue_url=f"{base}Notifications",
        second_tick_queue_url=f"{base}SecondTicks",
        events_failures_queue_url=f"{base}EventsFailures",
    )
    own = settings.own_names()
    assert own.stack == "Jobsched" and own.buses == ("JobschedEventsEventBus5A3B",)
    assert set(own.queues) == {
        *settings.queue_urls.values(),
        *settings.dlq_urls.values(),
        f"{base}Notifications",
        f"{base}SecondTicks",
        f"{base}EventsFailures",
    }


def test_local_mode_refuses_its_own_bus_and_queues_to_every_tenant():
    """As the local runtime configures the functions (moto's URLs): a grant of every bus and
    queue reaches neither the bus the events go to nor the run queues."""
    from jobsched.domain.metrics import RecordedMetrics
    from jobsched.domain.models import EventBridgeTarget, SqsTarget
    from jobsched.wiring import Container

    moto = "http://127.0.0.1:5055/123456789012/"
    config = LocalConfig(tenant_targets={"dev": ["arn:aws:events:*:*:event-bus/*", "arn:aws:sqs:*:*:*"]})
    settings = config.runtime_settings(
        queue_urls={q.key: moto + q.default_name for q in QUEUES},
        dlq_urls={q.key: moto + q.dlq_name for q in QUEUES},
        notifications_queue_url=moto + "jobsched-notifications",
    )
    authority = Container(settings, metrics=RecordedMetrics()).target_authority
    own_bus = EventBridgeTarget(kind="eventbridge", event_bus_name=settings.event_bus_name)
    found = authority.refusal("dev", own_bus)
    assert found is not None and found.field == "target.eventBusName", found
    for name in (QUEUES[0].default_name, QUEUES[0].dlq_name, "jobsched-notifications"):
        url = f"https://sqs.us-east-1.amazonaws.com/123456789012/{name}"
        found = authority.refusal("dev", SqsTarget(kind="sqs", queue_url=url))
        assert found is not None and found.field == "target.queueUrl", name
    mine = EventBridgeTarget(kind="eventbridge", event_bus_name="dev-bus")
    assert authority.refusal("dev", mine) is None
