"""The grants' pure matching (jobsched.domain.grants), how a target becomes the ARNs a grant
must cover (jobsched.targets.authority), and the STS fields and credential cache of a
tenant's role (jobsched.targets.roles)."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError, ReadTimeoutError
from hypothesis import given
from hypothesis import strategies as st
from jobsched.domain.errors import AmbiguousError, PermanentError, RetryableError
from jobsched.domain.grants import Grants, GrantsDocument, OwnNames, own_event_source, tenant_digest
from jobsched.domain.instants import ManualClock
from jobsched.domain.models import EventBridgeTarget, LambdaTarget, SnsTarget, SqsTarget, StepFunctionsTarget
from jobsched.targets import AssumedRoles, external_id, session_identity
from jobsched.targets.authority import TargetAuthority, queue_arn
from pydantic import ValidationError

from tests.helpers import HOME, T0

ACCOUNT = HOME["account"]


def grants(
    targets: dict[str, list[str]], sources: dict[str, list[str]] | None = None, roles: tuple[str, ...] = ()
) -> Grants:
    return Grants(GrantsDocument.from_maps(targets, sources, roles, HOME))


# --- matching ---


def test_nothing_is_granted_by_default():
    assert not Grants().allows("tenant-a", "arn:aws:sqs:us-east-1:123456789012:q")
    assert not Grants().may_assume("arn:aws:iam::123456789012:role/r")


@pytest.mark.parametrize(
    ("pattern", "arn", "allowed"),
    [
        ("arn:aws:sqs:us-east-1:123456789012:acme-*", "arn:aws:sqs:us-east-1:123456789012:acme-in", True),
        ("arn:aws:sqs:us-east-1:123456789012:acme-*", "arn:aws:sqs:us-east-1:123456789012:ACME-in", False),
        ("arn:aws:sqs:us-east-1:123456789012:acme-*", "arn:aws:sqs:us-east-1:123456789012:acm", False),
        ("arn:aws:sqs:us-east-1:123456789012:acme", "arn:aws:sqs:us-east-1:123456789012:acme-in", False),
        ("arn:aws:sqs:us-east-1:123456789012:acme", "xarn:aws:sqs:us-east-1:123456789012:acme", False),
        ("arn:aws:sqs:*:123456789012:acme", "arn:aws:sqs:eu-west-1:123456789012:acme", True),
        # * spans : and / as in IAM: an unqualified grant does not cover a qualifier unless it ends in *
        (
            "arn:aws:lambda:us-east-1:123456789012:function:f",
            "arn:aws:lambda:us-east-1:123456789012:function:f:prod",
            False,
        ),
        (
            "arn:aws:lambda:us-east-1:123456789012:function:f*",
            "arn:aws:lambda:us-east-1:123456789012:function:f:prod",
            True,
        ),
        (
            "arn:aws:sqs:us-east-1:123456789012:a.b",
            "arn:aws:sqs:us-east-1:123456789012:aXb",
            False,
        ),  # . is literal
        (
            "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:q",
            "arn:aws:sqs:us-east-1:123456789012:q",
            True,
        ),
        (
            "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:q",
            "arn:aws:sqs:eu-west-1:123456789012:q",
            False,
        ),
    ],
)
def test_patterns_match_the_whole_arn(pattern, arn, allowed):
    assert grants({"t": [pattern]}).allows("t", arn) is allowed


def test_a_grant_is_for_exactly_its_tenant():
    found = grants({"acme": ["arn:aws:sqs:*:*:*"]})
    assert found.allows("acme", "arn:aws:sqs:us-east-1:123456789012:q")
    for other in ("acme ", "Acme", "acm", "acme/x", "123456789012/role/acme"):
        assert not found.allows(other, "arn:aws:sqs:us-east-1:123456789012:q"), other


def test_a_tenant_listed_twice_gets_the_union():
    document = GrantsDocument.model_validate(
        {
            "tenants": [
                {"tenant": "t", "targets": ["arn:aws:sqs:*:*:a"]},
                {"tenant": "t", "targets": ["arn:aws:sqs:*:*:b"]},
            ]
        }
    )
    assert Grants(document).allows("t", "arn:aws:sqs:x:1:a") and Grants(document).allows(
        "t", "arn:aws:sqs:x:1:b"
    )


@pytest.mark.parametrize(
    "pattern",
    [
        "arn:aws:s3:::bucket",  # not a target service
        "arn:aws:*:us-east-1:123456789012:x",  # a wildcard service
        "arn:aws:sqs:us-east-1:123456789012:has space",
        "arn:aws:sqs:us-east-1:123456789012:",
        "sqs:us-east-1:123456789012:q",
        "arn:aws:sqs:us-east-1:1234:q",
        "arn:aws:sqs:us-east-1:123456789012:" + "q" * 2048,
    ],
)
def test_bad_patterns_are_refused(pattern):
    with pytest.raises(ValidationError, match="ARN pattern"):
        GrantsDocument.from_maps({"t": [pattern]}, home=HOME)


SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:acme/hook-AbCdEf"
PARAMETER = "arn:aws:ssm:us-east-1:123456789012:parameter/acme/api-key"


def test_secrets_and_parameters_are_granted_like_targets():
    """One document grants the AWS targets and the secrets a tenant's headers reference."""
    granted = grants(
        {
            "acme": [
                "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:acme/*",
                "arn:aws:ssm:*:*:parameter/acme/*",
                "arn:aws:sqs:us-east-1:123456789012:acme-*",
            ]
        }
    )
    assert granted.allows("acme", SECRET) and granted.allows("acme", PARAMETER)
    assert granted.allows("acme", "arn:aws:sqs:us-east-1:123456789012:acme-in")
    assert not granted.allows("other", SECRET)
    assert not granted.allows("acme", SECRET.replace("acme/", "other/"))
    assert not granted.allows("acme", SECRET.replace("us-east-1", "eu-west-1"))  # the home's region


def test_a_secret_reference_is_authorised_by_the_grants():
    from jobsched.domain.grants import TargetNotGranted
    from jobsched.domain.models import HttpTarget
    from jobsched.targets.authority import secret_refusal

    granted = grants({"acme": ["arn:aws:secretsmanager:*:*:secret:acme/*"]})
    assert secret_refusal(granted, "acme", SECRET, "f") is None
    refused = secret_refusal(granted, "other", SECRET, "target.http.headers.X.valueFrom")
    assert refused is not None and refused.field == "target.http.headers.X.valueFrom"
    assert refused.to_error().status == 403 and refused.to_error().code == "target_not_granted"
    target = HttpTarget(
        kind="http", url="https://example.com", headers={"X-Api-Key": {"valueFrom": PARAMETER}}
    )
    # An HTTP target's references pass the one check every write of a target passes.
    with pytest.raises(TargetNotGranted, match=r"target\.http\.headers\.X-Api-Key\.valueFrom"):
        TargetAuthority(lambda: granted).check_write("acme", target)
    assert TargetAuthority(lambda: grants({"acme": [PARAMETER]})).refusal("acme", target) is None


def test_placeholders_need_a_home_and_tenants_must_be_printable():
    with pytest.raises(ValidationError, match="placeholder"):
        GrantsDocument.from_maps({"t": ["arn:aws:sqs:${AWS::Region}:123456789012:q"]})
    with pytest.raises(ValidationError, match="printable"):
        GrantsDocument.from_maps({"t\n": ["arn:aws:sqs:us-east-1:123456789012:q"]})
    with pytest.raises(ValidationError, match="printable"):
        GrantsDocument.from_maps({"x" * 257: []})


def test_sources_are_the_tenants_own_or_granted():
    found = grants({}, {"acme": ["com.acme.*"]})
    own = own_event_source("acme")
    assert own == "jobsched." + tenant_digest("acme") and len(own) == 41
    assert found.allows_source("acme", own) and found.allows_source("acme", own + ".billing")
    assert not found.allows_source("acme", own + "x")
    assert not found.allows_source("acme", own_event_source("other"))
    assert found.allows_source("acme", "com.acme.orders") and not found.allows_source(
        "other", "com.acme.orders"
    )


@given(st.text(min_size=1, max_size=256), st.text(min_size=1, max_size=256))
def test_no_tenants_own_source_covers_another_tenants(a, b):
    if a != b:
        assert not Grants().allows_source(a, own_event_source(b))


# --- targets -> ARNs ---


def authority(targets: dict[str, list[str]], **kw: Any) -> TargetAuthority:
    found = grants(targets, **kw)
    return TargetAuthority(lambda: found)


@pytest.mark.parametrize(
    ("name", "qualifier", "arns"),
    [
        ("remind", None, ["arn:aws:lambda:us-east-1:123456789012:function:remind"]),
        ("remind:live", None, ["arn:aws:lambda:us-east-1:123456789012:function:remind:live"]),
        ("remind", "7", ["arn:aws:lambda:us-east-1:123456789012:function:remind:7"]),
        ("999999999999:function:remind", None, ["arn:aws:lambda:us-east-1:999999999999:function:remind"]),
        (
            "arn:aws:lambda:eu-west-1:999999999999:function:remind:live",
            "prod",
            [
                "arn:aws:lambda:eu-west-1:999999999999:function:remind:live",
                "arn:aws:lambda:eu-west-1:999999999999:function:remind:prod",
            ],
        ),
    ],
)
def test_a_function_is_judged_by_the_arn_invoke_acts_on(name, qualifier, arns):
    from jobsched.targets.authority import lambda_arns

    target = LambdaTarget(kind="lambda", function_arn=name, qualifier=qualifier)
    assert lambda_arns(target, GrantsDocument.from_maps(home=HOME).home) == arns
    # Every ARN must be granted: one of two qualifiers is not enough.
    if len(arns) == 2:
        assert authority({"t": [arns[0]]}).refusal("t", target) is not None
        assert authority({"t": arns}).refusal("t", target) is None


def test_an_account_in_a_partial_name_is_not_the_deployments():
    """`999999999999:function:remind` is another account's function, not ours of that name."""
    target = LambdaTarget(kind="lambda", function_arn="999999999999:function:remind")
    assert (
        authority({"t": [f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:remind"]}).refusal("t", target)
        is not None
    )


@pytest.mark.parametrize(
    ("url", "arn"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/q", "arn:aws:sqs:eu-west-1:123456789012:q"),
        (
            "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q",
            "arn:aws-cn:sqs:cn-north-1:123456789012:q",
        ),
        (
            "https://sqs.us-gov-west-1.amazonaws.com/123456789012/q",
            "arn:aws-us-gov:sqs:us-gov-west-1:123456789012:q",
        ),
        (
            "https://eu-west-1.queue.amazonaws.com/123456789012/q.fifo",
            "arn:aws:sqs:eu-west-1:123456789012:q.fifo",
        ),
        ("https://queue.amazonaws.com/123456789012/q", "arn:aws:sqs:us-east-1:123456789012:q"),
        ("https://sqs-fips.us-east-2.amazonaws.com/123456789012/q", "arn:aws:sqs:us-east-2:123456789012:q"),
    ],
)
def test_a_queue_url_names_its_arn(url, arn):
    assert queue_arn(url) == arn


def test_bare_names_need_the_deployments_home():
    found = Grants(GrantsDocument.from_maps({"t": ["arn:aws:lambda:*:*:function:*"]}))  # no home
    refusal = TargetAuthority(lambda: found).refusal("t", LambdaTarget(kind="lambda", function_arn="remind"))
    assert refusal is not None and refusal.field == "target.functionArn" and "full ARN" in refusal.rule


def test_each_kind_names_its_field():
    nothing = authority({})
    cases = [
        (LambdaTarget(kind="lambda", function_arn="f"), "target.functionArn"),
        (
            SqsTarget(kind="sqs", queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/q"),
            "target.queueUrl",
        ),
        (EventBridgeTarget(kind="eventbridge"), "target.eventBusName"),
        (
            StepFunctionsTarget(
                kind="stepfunctions", state_machine_arn=f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:m"
            ),
            "target.stateMachineArn",
        ),
        (
            SqsTarget(kind="sqs", queue_url="https://x", role_arn="arn:aws:iam::123456789012:role/r"),
            "target.roleArn",
        ),
    ]
    for target, field in cases:
        found = nothing.refusal("t", target)
        assert found is not None and found.field == field, target
        assert found.to_error().status == 403 and found.to_error().code == "target_not_granted"
        assert found.to_failure().error_class == "TargetNotGranted" and not found.to_failure().retryable


def test_the_default_bus_needs_its_grant_and_the_source_its_own():
    bus = f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/default"
    assert authority({"t": [bus]}).refusal("t", EventBridgeTarget(kind="eventbridge")) is None
    found = authority({"t": [bus]}).refusal("t", EventBridgeTarget(kind="eventbridge", source="jobsched"))
    assert found is not None and found.field == "target.source" and own_event_source("t") in found.rule


# --- the scheduler's own bus, queues and source: no grant reaches them ---

OWN_BUS = "Jobsched-EventBus-1A2B3C"  # as the settings name it (EVENT_BUS_NAME)
OWN_QUEUE = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/Jobsched-HighQueue-4D5E6F"
EVERYTHING = ["arn:aws:events:*:*:event-bus/*", "arn:aws:sqs:*:*:*"]


def owning(own: OwnNames, targets: list[str], sources: tuple[str, ...] = ()) -> TargetAuthority:
    """tenant `t` granted `targets` and `sources`, by a scheduler whose own names are `own`."""
    document = GrantsDocument.from_maps({"t": targets}, {"t": sources}, home=HOME)
    found = Grants(document, own)
    return TargetAuthority(lambda: found)


def bus(name: str, **fields: Any) -> EventBridgeTarget:
    return EventBridgeTarget(
        kind="eventbridge", event_bus_name=name, detail_type="jobsched.run.dead", **fields
    )


@pytest.mark.parametrize(
    "name",
    [
        OWN_BUS,
        f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/{OWN_BUS}",
        f"arn:aws:events:eu-west-1:{ACCOUNT}:event-bus/{OWN_BUS}",  # its name in another region
        OWN_BUS.lower(),  # no spelling of the name reaches it
    ],
)
def test_the_schedulers_own_bus_is_refused_whatever_the_grants_say(name):
    found = owning(OwnNames(buses=(OWN_BUS,)), EVERYTHING).refusal("t", bus(name))
    assert found is not None and found.field == "target.eventBusName", found
    assert "scheduler's own event bus" in found.rule
    assert found.to_error().status == 403 and found.to_error().code == "target_not_granted"
    assert found.to_failure().error_class == "TargetNotGranted" and not found.to_failure().retryable


@pytest.mark.parametrize("setting", [OWN_BUS, f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/{OWN_BUS}"])
def test_only_the_own_bus_is_refused_however_the_settings_name_it(setting):
    own = OwnNames(buses=(setting,))
    for name in (OWN_BUS, f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/{OWN_BUS}"):
        assert owning(own, EVERYTHING).refusal("t", bus(name)) is not None, name
    for name in ("tenant-bus", f"{OWN_BUS}-2", f"arn:aws:events:us-east-1:111111111111:event-bus/{OWN_BUS}"):
        assert owning(own, EVERYTHING).refusal("t", bus(name)) is None, name
    # The grants still decide the rest: the own names add refusals, never a grant.
    assert owning(own, []).refusal("t", bus("tenant-bus")) is not None


@pytest.mark.parametrize("url", [OWN_QUEUE, OWN_QUEUE.replace("us-east-1", "eu-west-1")])
def test_the_schedulers_own_queues_are_refused_whatever_their_names(url):
    """By the exact URLs the settings give, not only the `<stack>-` prefix: a second scheduler
    in a stack (Naming) names its queues `<stack>-<prefix>…`, local mode `jobsched-…`."""
    own = OwnNames("Other", queues=(OWN_QUEUE,))
    found = owning(own, EVERYTHING).refusal("t", SqsTarget(kind="sqs", queue_url=url))
    assert found is not None and found.field == "target.queueUrl" and "own queues" in found.rule
    theirs = OWN_QUEUE.replace(ACCOUNT, "111111111111")
    assert owning(own, EVERYTHING).refusal("t", SqsTarget(kind="sqs", queue_url=theirs)) is None


# A scheduler inside another stack (construct "Scheduler" of stack "Platform"): its name is
# `Platform-Scheduler`, CloudFormation's names for its functions and topic are not `<name>-…`.
OWN_FUNCTION = (
    f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:Platform-SchedulerFunctionsSweeperFunc-AbCdEf123456"
)
OWN_TOPIC = f"arn:aws:sns:us-east-1:{ACCOUNT}:Platform-SchedulerMonitoringAlarmsA4E5B772-AbCdEf123456"
PLATFORM = [f"arn:aws:lambda:*:{ACCOUNT}:function:Platform-*", f"arn:aws:sns:*:{ACCOUNT}:Platform-*"]


def listing_its_own(targets: list[str]) -> TargetAuthority:
    """tenant `t` granted `targets`, by the grants document the embedded scheduler's stack
    writes: its own functions and topic listed beside the grants (`ownResources`)."""
    document = GrantsDocument.model_validate(
        {
            "home": HOME,
            "tenants": [{"tenant": "t", "targets": targets}],
            "ownResources": [OWN_FUNCTION, OWN_TOPIC],
        }
    )
    found = Grants(document, OwnNames.beside("/Platform-Scheduler/target-grants"))
    return TargetAuthority(lambda: found)


@pytest.mark.parametrize(
    "name",
    [
        OWN_FUNCTION,
        OWN_FUNCTION.rsplit(":", 1)[-1],  # by bare name
        OWN_FUNCTION + ":$LATEST",
        OWN_FUNCTION.rsplit(":", 1)[-1] + ":live",  # bare name and alias
        f"{ACCOUNT}:function:" + OWN_FUNCTION.rsplit(":", 1)[-1],  # partial ARN
        OWN_FUNCTION.replace("Platform-Scheduler", "platform-scheduler"),  # no spelling reaches it
    ],
)
def test_the_schedulers_own_functions_are_refused_by_the_arns_its_grants_list(name):
    found = listing_its_own(PLATFORM).refusal("t", LambdaTarget(kind="lambda", function_arn=name))
    assert found is not None and found.field == "target.functionArn", (name, found)
    assert "scheduler's own functions" in found.rule
    # Qualified by the target's own field too.
    target = LambdaTarget(kind="lambda", function_arn=OWN_FUNCTION, qualifier="1")
    assert listing_its_own(PLATFORM).refusal("t", target) is not None


def test_the_listed_topic_is_refused_and_nothing_else_the_grants_reach():
    found = listing_its_own(PLATFORM).refusal("t", SnsTarget(kind="sns", topic_arn=OWN_TOPIC))
    assert found is not None and found.field == "target.topicArn" and "own topics" in found.rule, found
    # The team's function and topic, the same names in another account, and a name that only
    # starts like the scheduler's own, are not the scheduler's.
    theirs = [*PLATFORM, "arn:aws:lambda:*:111111111111:function:*", "arn:aws:sns:*:111111111111:*"]
    for target in (
        LambdaTarget(kind="lambda", function_arn="Platform-NightlyReport-9Z8Y7X"),
        LambdaTarget(kind="lambda", function_arn=OWN_FUNCTION.replace(ACCOUNT, "111111111111")),
        LambdaTarget(kind="lambda", function_arn=OWN_FUNCTION + "2"),
        SnsTarget(kind="sns", topic_arn=OWN_TOPIC.replace(ACCOUNT, "111111111111")),
        SnsTarget(kind="sns", topic_arn=f"arn:aws:sns:us-east-1:{ACCOUNT}:Platform-TeamAlerts"),
    ):
        assert listing_its_own(theirs).refusal("t", target) is None, target


@pytest.mark.parametrize(
    "arn",
    [
        f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:Platform-*",
        f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:Sweeper:live",
        f"arn:aws:sqs:us-east-1:{ACCOUNT}:Platform-Queue",
        "arn:aws:lambda:${AWS::Region}:${AWS::AccountId}:function:Sweeper",
    ],
)
def test_the_listed_own_resources_are_resolved_function_and_topic_arns(arn):
    with pytest.raises(ValidationError, match=r"ownResources|own_resources"):
        GrantsDocument.model_validate({"home": HOME, "ownResources": [arn]})


@pytest.mark.parametrize("source", ["jobsched/Jobsched/tenant-b", "jobsched/x"])
def test_no_grant_reaches_the_schedulers_own_source(source):
    found = owning(OwnNames(), EVERYTHING, ("*",)).refusal("t", bus("tenant-bus", source=source))
    assert found is not None and found.field == "target.source", found
    assert "scheduler's own events" in found.rule and own_event_source("t") in found.rule
    granted = owning(OwnNames(), EVERYTHING, ("*",))
    assert granted.refusal("t", bus("tenant-bus", source="jobsched.orders")) is None
    assert granted.refusal("t", bus("tenant-bus")) is None  # the tenant's own, jobsched.<digest>


# --- the STS fields ---

STS_EXTERNAL_ID = re.compile(r"[\w+=,.@:/-]{2,1224}", re.ASCII)
STS_NAME = re.compile(r"[\w+=,.@-]{2,64}", re.ASCII)


@given(st.text(min_size=1, max_size=256).filter(str.isprintable))
def test_every_tenant_id_makes_valid_sts_fields(tenant):
    assert STS_EXTERNAL_ID.fullmatch(external_id(tenant))
    assert STS_NAME.fullmatch(session_identity(tenant))


@given(st.text(min_size=1, max_size=256), st.text(min_size=1, max_size=256))
def test_two_tenants_never_share_an_external_id(a, b):
    if a != b:
        assert external_id(a) != external_id(b)


@pytest.mark.parametrize(
    ("tenant", "expected"),
    [
        ("tenant-a", "tenant-a"),
        ("123456789012/role/ci", "123456789012/role/ci"),  # IAM principals' tenants fit as they are
        ("a", "sha256:" + __import__("hashlib").sha256(b"a").hexdigest()),  # too short for STS
        ("acme corp", "sha256:" + __import__("hashlib").sha256(b"acme corp").hexdigest()),
        ("x" * 256, "x" * 256),
    ],
)
def test_the_external_id_is_the_tenant_where_it_fits(tenant, expected):
    assert external_id(tenant) == expected


def test_a_tenant_named_like_a_digest_does_not_get_that_digest():
    victim = "acme corp"
    impostor = external_id(victim)  # a tenant that chose this id as its name
    assert external_id(impostor) != external_id(victim)


# --- the credential cache ---


class FakeSts:
    def __init__(self, clock: ManualClock, fail: Exception | None = None, delay: float = 0.0) -> None:
        self.clock, self.fail, self.delay = clock, fail, delay
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def assume_role(self, **params: Any) -> dict[str, Any]:
        with self._lock:
            self.calls.append(params)
            n = len(self.calls)
        time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{n}",
                "SecretAccessKey": "s",
                "SessionToken": "t",
                "Expiration": self.clock.now() + timedelta(seconds=params["DurationSeconds"]),
            }
        }


def test_credentials_are_cached_per_role_and_tenant_until_near_expiry():
    clock = ManualClock(T0)
    sts = FakeSts(clock)
    roles = AssumedRoles(lambda: sts, clock)
    first = roles.credentials("arn:aws:iam::1:role/r", "a")
    assert roles.credentials("arn:aws:iam::1:role/r", "a") == first
    assert roles.credentials("arn:aws:iam::1:role/r", "b") != first  # another tenant, another session
    assert roles.credentials("arn:aws:iam::1:role/other", "a") != first
    assert [c["ExternalId"] for c in sts.calls] == [external_id("a"), external_id("b"), external_id("a")]
    clock.advance(3600 - 5 * 60 - 1)
    assert roles.credentials("arn:aws:iam::1:role/r", "a") == first  # still more than 5 minutes left
    clock.advance(2)
    assert roles.credentials("arn:aws:iam::1:role/r", "a") != first  # renewed before it expires
    assert len(sts.calls) == 4


def test_concurrent_runs_of_one_tenant_wait_for_one_assume():
    clock = ManualClock(T0)
    sts = FakeSts(clock, delay=0.2)
    roles = AssumedRoles(lambda: sts, clock)
    got: list[Any] = []
    threads = [
        threading.Thread(target=lambda: got.append(roles.credentials("arn:aws:iam::1:role/r", "a")))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sts.calls) == 1 and len(set(got)) == 1 and len(got) == 8


def test_the_assume_request_carries_the_tenants_fields():
    clock = ManualClock(T0)
    sts = FakeSts(clock)
    AssumedRoles(lambda: sts, clock).credentials("arn:aws:iam::1:role/r", "acme corp")
    (call,) = sts.calls
    assert call == {
        "RoleArn": "arn:aws:iam::1:role/r",
        "RoleSessionName": session_identity("acme corp"),
        "ExternalId": external_id("acme corp"),
        "SourceIdentity": session_identity("acme corp"),
        "DurationSeconds": 3600,
    }


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "m"},
            "ResponseMetadata": {
                "HTTPStatusCode": status,
                "RequestId": "r",
                "HostId": "h",
                "HTTPHeaders": {},
                "RetryAttempts": 0,
            },
        },
        "AssumeRole",
    )


@pytest.mark.parametrize(
    ("error", "kind", "error_class"),
    [
        (_client_error("AccessDenied", 403), PermanentError, "AssumeRoleDenied"),
        (_client_error("ValidationError", 400), PermanentError, "AssumeRoleInvalid"),
        (_client_error("RegionDisabledException", 403), PermanentError, "AssumeRoleInvalid"),
        (_client_error("Throttling", 400), RetryableError, "AssumeRoleUnavailable"),
        (_client_error("ServiceUnavailable", 503), RetryableError, "AssumeRoleUnavailable"),
        (_client_error("ExpiredToken", 400), RetryableError, "AssumeRoleUnavailable"),  # our own credentials
        (ReadTimeoutError(endpoint_url="https://sts"), RetryableError, "AssumeRoleUnavailable"),
        (ParamValidationError(report="bad"), PermanentError, "AssumeRoleInvalid"),
    ],
)
def test_a_failed_assume_is_classed_and_never_ambiguous(error, kind, error_class):
    clock = ManualClock(T0)
    roles = AssumedRoles(lambda: FakeSts(clock, fail=error), clock)
    with pytest.raises(kind) as caught:
        roles.credentials("arn:aws:iam::1:role/r", "a")
    assert caught.value.error_class == error_class
    assert not isinstance(caught.value, AmbiguousError)  # nothing reached the target
