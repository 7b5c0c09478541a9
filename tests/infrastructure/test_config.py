"""Context: values from cdk.json or `-c key=value` are parsed and checked before anything is built."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from jobsched.cdk.config import CONTEXT_KEYS, Config, ConfigError, target_service

from infra.app import CDK_JSON


class Node:
    def __init__(self, **context):
        self.context = context

    def try_get_context(self, key):
        return self.context.get(key)


def recommended_feature_flags() -> dict:
    """The flags `cdk init` would write for the installed aws-cdk-lib (shipped in its jsii bundle)."""
    import aws_cdk

    (bundle,) = (Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    with tarfile.open(bundle) as archive:
        member = archive.extractfile("package/recommended-feature-flags.json")
        assert member is not None
        return dict(json.load(member))


def test_cdk_json_sets_only_known_keys_and_is_valid():
    context = json.loads(CDK_JSON.read_text())["context"]
    assert {k for k in context if not k.startswith("@aws-cdk")} <= set(CONTEXT_KEYS)
    config = Config.from_context(Node(**context))  # type: ignore[arg-type]
    assert config.shard_count == context["shardCount"]


def test_cli_strings_are_coerced():
    config = Config.from_context(
        Node(  # type: ignore[arg-type]
            shardCount="32",
            fairQueues="false",
            tenantTargets=json.dumps(
                {
                    "acme": ["arn:aws:sqs:eu-west-1:123456789012:a"],
                    "beta": [
                        "arn:aws:lambda:eu-west-1:123456789012:function:b",
                        "arn:aws:sqs:eu-west-1:123456789012:a",
                    ],
                }
            ),
            assumableRoles="arn:aws:iam::*:role/jobsched-target-*",
            workerConcurrency='{"low": 8}',
            alarmEmail="ops@example.com",
        )
    )
    assert config.shard_count == 32 and config.fair_queues is False
    assert config.targets_for("sqs") == ["arn:aws:sqs:eu-west-1:123456789012:a"]
    assert config.targets_for("lambda") == ["arn:aws:lambda:eu-west-1:123456789012:function:b"]
    assert config.tenant_targets["acme"] == ("arn:aws:sqs:eu-west-1:123456789012:a",)
    assert config.assumable_roles == ("arn:aws:iam::*:role/jobsched-target-*",)
    assert config.worker_concurrency == {"high": 50, "default": 100, "low": 8}  # a partial map merges


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"horizonSeconds": "30"}, "horizonSeconds"),
        ({"shardCount": "0"}, "shardCount"),
        ({"shardsPerSweep": "99"}, "shardsPerSweep"),
        ({"workerConcurrency": '{"low": 1}'}, "workerConcurrency.low"),
        ({"workerBatchSize": '{"high": 11}'}, "workerBatchSize.high"),
        ({"targetArns": "arn:aws:sqs:eu-west-1:123456789012:a"}, "targetArns is replaced by tenantTargets"),
        ({"tenantTargets": '{"acme": ["arn:aws:s3:::bucket"]}'}, "tenantTargets: .*is not a lambda, sqs"),
        ({"tenantTargets": '{"acme": "arn:aws:sqs:eu-west-1:123456789012:a"}'}, "must be a list"),
        ({"tenantTargets": json.dumps({"x" * 257: []})}, "tenantTargets: .*printable"),
        ({"tenantEventSources": '{"acme": ["has space"]}'}, "tenantEventSources"),
        ({"assumableRoles": "arn:aws:sqs:eu-west-1:123456789012:a"}, "assumableRoles: .*IAM role"),
        (
            {
                "tenantTargets": json.dumps(
                    {
                        f"t{i}": [f"arn:aws:sqs:eu-west-1:123456789012:q{i}" for i in range(9)]
                        for i in range(20)
                    }
                )
            },
            "grants parameter holds 8192",
        ),
        ({"alarmEmail": "nobody"}, "alarmEmail"),
        ({"alarmEmail": "ops @example.com"}, "alarmEmail must be an e-mail address"),
        ({"shardCount": "many"}, "shardCount"),
        ({"sweepAheadSeconds": "60"}, "sweepAheadSeconds"),
        ({"billingMode": "reserved"}, "billingMode"),
        ({"provisionedCapacity": '{"minWrite": 500, "maxWrite": 100}'}, "minWrite <= maxWrite"),
        ({"provisionedCapacity": '{"targetUtilization": 99}'}, "targetUtilization"),
        ({"accountConcurrency": "500", "shardCount": "256"}, "accountConcurrency 500 cannot hold"),
        ({"accountConcurrency": "-1"}, "accountConcurrency"),
        (
            {"workerMinPollers": '{"default": 1}', "workerMaxPollers": '{"default": 10}'},
            "workerMinPollers.default",
        ),
        ({"workerMaxPollers": '{"default": 10}'}, "workerMinPollers.default"),
        (
            {"workerMinPollers": '{"default": 201}', "workerMaxPollers": '{"default": 300}'},
            "workerMinPollers.default",
        ),
        ({"workerMinPollers": '{"high": 20}', "workerMaxPollers": '{"high": 10}'}, "workerMaxPollers.high"),
        ({"workerMinPollers": '{"low": 2}', "workerMaxPollers": '{"low": 2001}'}, "workerMaxPollers.low"),
        ({"workerReservedConcurrency": "-5"}, "workerReservedConcurrency"),
        # The stage's rate is shared: two tenants at their 50/s limit would fill 100/s.
        ({"apiRateLimit": "100", "apiBurstLimit": "200"}, "apiRateLimit 100 is shared by every tenant"),
        ({"apiTenantsAtLimit": "2"}, "apiTenantsAtLimit must be >= 3"),
        ({"tenantRequestsPerSecond": "100"}, "need 1000; raise apiRateLimit"),
        ({"apiBurstLimit": "100"}, "apiBurstLimit must be >= apiRateLimit"),
        ({"apiMaxBodyBytes": "6000000"}, "apiMaxBodyBytes must be 0"),
        # 100 pollers drive up to 1,000 invocations: more than AWS's usual quota can hold.
        (
            {
                "workerMinPollers": '{"default": 2}',
                "workerMaxPollers": '{"default": 100}',
                "accountConcurrency": "1000",
            },
            "accountConcurrency 1000",
        ),
        ({"apiReservedConcurrency": "-1"}, "apiReservedConcurrency"),
        ({"apiReservedConcurrency": "700", "accountConcurrency": "1000"}, r"api 700\).*needs 1095"),
    ],
)
def test_bad_values_are_refused_by_name(context, message):
    with pytest.raises(ConfigError, match=message):
        Config.from_context(Node(**context))  # type: ignore[arg-type]


@pytest.mark.parametrize("empty", ["", "   ", "\t"])
def test_an_empty_alarm_email_is_a_missing_one_warned_about_not_refused(empty):
    for config in (Config(alarm_email=empty), Config.from_context(Node(alarmEmail=empty))):  # type: ignore[arg-type]
        assert config.alarm_email is None
        assert (config.missing_subscriber() or "").startswith("alarmEmail is empty")


def test_provisioned_pollers_replace_the_queues_ceiling_and_are_off_by_default():
    assert all(Config().provisioned_pollers(q) is None for q in ("high", "default", "low"))
    config = Config.from_context(
        Node(  # type: ignore[arg-type]
            workerMinPollers='{"default": 30}', workerMaxPollers='{"default": 400}', accountConcurrency="5000"
        )
    )
    assert config.provisioned_pollers("default") == (30, 400)
    assert config.worker_ceilings() == {"high": 50, "default": 4000, "low": 25}  # 10 invocations a poller


def test_a_reservation_that_cannot_fit_names_the_quota_and_how_to_raise_it():
    with pytest.raises(ConfigError) as refused:
        Config.from_context(Node(accountConcurrency="300"))  # type: ignore[arg-type]
    message = str(refused.value)
    # 40 reserved for the sweeper, 80 for the reconciler, 175 worker ceilings, 100 unreserved.
    assert "sweeper 40, reconciler 80" in message
    assert "needs 395" in message and "'Concurrent executions' (L-B99A9384" in message
    assert "request-service-quota-increase --service-code lambda --quota-code L-B99A9384" in message
    assert "--desired-value 395" in message and "jobsched doctor" in message


def test_the_workers_reservation_counts_against_the_account_once():
    # 40 + 80 for the sweeper and reconciler, 3,000 for the worker, whose ceilings (4,075)
    # are covered by it up to 3,000: 4,295 with the 100 Lambda keeps unreserved.
    context = {
        "workerMinPollers": '{"default": 30}',
        "workerMaxPollers": '{"default": 400}',
        "workerReservedConcurrency": "3000",
    }
    config = Config.from_context(Node(**context, accountConcurrency="4295"))  # type: ignore[arg-type]
    assert config.reserved_concurrency()["worker"] == 3000
    with pytest.raises(ConfigError, match="accountConcurrency 4294 cannot hold"):
        Config.from_context(Node(**context, accountConcurrency="4294"))  # type: ignore[arg-type]


def test_by_default_nothing_is_reserved_so_a_new_account_takes_the_stack():
    """A new account's quota is 10 and Lambda keeps 100 unreserved: it refuses any reservation.
    cdk.json reserves nothing and assumes no quota; given one, the ticks reserve what runs at
    once: the reconciler's two ticks a shard a minute overlap (64 at 32 shards, 80 reserved)."""
    context = json.loads(CDK_JSON.read_text())["context"]
    config = Config.from_context(Node(**context))  # type: ignore[arg-type]
    assert config.account_concurrency == 0 and config.reserved_concurrency() == {}
    assert Config().reserved_concurrency() == {}
    sized = Config.from_context(Node(**{**context, "accountConcurrency": "1000"}))  # type: ignore[arg-type]
    assert sized.peak_concurrency() == {"sweeper": 32, "reconciler": 64}
    assert sized.reserved_concurrency() == {"sweeper": 40, "reconciler": 80}
    # Asked for by name, a reservation is kept without the quota (the preflight checks it).
    capped = Config.from_context(Node(**{**context, "apiReservedConcurrency": "20"}))  # type: ignore[arg-type]
    assert capped.reserved_concurrency() == {"api": 20}


def test_nothing_is_granted_by_default():
    config = Config.from_context(Node(**json.loads(CDK_JSON.read_text())["context"]))  # type: ignore[arg-type]
    assert config.tenant_targets == {} and config.assumable_roles == () and config.tenant_event_sources == {}
    assert all(config.targets_for(service) == [] for service in ("lambda", "sqs", "events", "states"))


def test_target_service_names_each_grantable_service():
    assert (
        target_service("arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:stateMachine:x")
        == "states"
    )
    assert target_service("arn:aws:s3:::bucket") is None


def test_cdk_json_pins_the_recommended_feature_flags_of_the_installed_cdk():
    """Without them a synth takes each flag's legacy default, and an upgrade of aws-cdk-lib can
    change the template silently; pinned, a new flag is a visible change to cdk.json."""
    context = json.loads(CDK_JSON.read_text())["context"]
    flags = recommended_feature_flags()
    assert len(flags) > 50
    assert {k: context.get(k) for k in flags} == flags


def test_runtime_defaults_are_the_settings_models_so_they_cannot_drift():
    """shardCount was 16 in the runtime and 32 in the stack; sweepAheadSeconds None and 300."""
    from jobsched.cdk.config import METRIC_NAME_FIELDS, RUNTIME_FIELDS
    from jobsched.settings import Settings

    config, settings = Config(), Settings()
    assert {name: getattr(config, name) for name in RUNTIME_FIELDS} == {
        name: getattr(settings, name) for name in RUNTIME_FIELDS
    }
    # Every setting the functions read from plain values is a context key (the rest are resources).
    plain = {"definitions_table", "runs_table", "queue_urls", "dlq_urls", "endpoint_url"}
    plain |= {"notifications_queue_url", "second_tick_queue_url", "own_queue_urls"}
    plain |= {"events_failures_queue_url"}
    # The grants: a resource (the SSM parameter) in the stack, the document in local mode.
    plain |= {"target_grants_parameter", "target_grants"}
    # The event bus (a resource) and the stack's name its events' source carries.
    plain |= {"event_bus_name", "event_source_name"}
    # Set by Lambda itself in every function (a reserved name: no stack may set it).
    plain |= {"aws_region"}
    # botocore's check of the stores' requests: off in the stack, on in the test suite only.
    plain |= {"validate_store_requests"}
    # The metric names: context keys too, whose default is the scheduler's own name.
    plain |= set(METRIC_NAME_FIELDS)
    assert set(Settings.model_fields) - plain == set(RUNTIME_FIELDS)
    # The shipped cdk.json shows those defaults.
    context = json.loads(CDK_JSON.read_text())["context"]
    for name in RUNTIME_FIELDS:
        key = "".join(p if i == 0 else p.title() for i, p in enumerate(name.split("_")))
        if key in context:
            shipped = context[key]
            assert (tuple(shipped) if isinstance(shipped, list) else shipped) == getattr(settings, name), key


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            {"leaseSeconds": "5"},
            r"leaseSeconds \(LEASE_SECONDS\): Input should be greater than or equal to 10",
        ),
        ({"horizonSeconds": "600"}, r"sweepAheadSeconds \(SWEEP_AHEAD_SECONDS\): must be at least"),
        ({"retentionDays": "0"}, r"retentionDays \(RETENTION_DAYS\)"),
    ],
)
def test_runtime_rules_come_from_the_settings_model_and_name_the_context_key(context, message):
    with pytest.raises(ConfigError, match=message):
        Config.from_context(Node(**context))  # type: ignore[arg-type]


def test_the_default_body_limit_is_the_one_local_mode_enforces():
    from jobsched.edge import MAX_BODY_BYTES

    assert Config().api_max_body_bytes == MAX_BODY_BYTES
