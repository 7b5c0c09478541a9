"""Where the end-to-end suite runs: local mode (the default, part of `make test`) or a deployed
stack (`make e2e-aws`). The tests are the same; a target gives them a client, the CLI's
connection options and wait bounds that fit it.

    JOBSCHED_E2E_TARGET    local (default) or aws
    JOBSCHED_E2E_ENDPOINT  aws: the stack's ApiUrl output
    JOBSCHED_E2E_STACK     aws: the stack's name, for its outputs (default Jobsched)
    JOBSCHED_E2E_TIMEOUT   seconds any one wait may take (local 20, aws 180)
    JOBSCHED_E2E_FAIL_SECONDS  how long demo.flaky fails after its run's time (local 8, aws 30)
AWS credentials come from the standard chain (environment, profile, role); the region from
the endpoint's host, else AWS_REGION or the profile."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from jobsched_cli.client import ApiClient

from .helpers import wait_for

T = TypeVar("T")

LOCAL, AWS = "local", "aws"
DEFAULT_STACK = "Jobsched"
LOCAL_KEY = "key-a"
# A deployed stack makes runs beyond the first one at the sweeper's every-minute tick
# (functions/jobsched/cdk/schedules.py); a wait may span two ticks, a publish and an execution.
AWS_TIMEOUT = 180
LOCAL_TIMEOUT = 20
SETUP_HINT = (
    "make e2e-aws needs JOBSCHED_E2E_ENDPOINT (the stack's ApiUrl output) and AWS credentials "
    "from the standard chain (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or a role); "
    "the stack must be deployed with -c handlerModules=jobsched.demo_handlers (see docs/operate/deploy.md, "
    "Prove the deployment)"
)


@dataclass
class Target:
    name: str
    endpoint: str
    timeout: float  # the bound of any one wait
    interval: float  # between polls: a deployed API counts every request against the tenant
    fail_seconds: int  # demo.flaky's failure window (failForSeconds)
    tenant: str  # whom the API takes the caller for (the actor of its writes is api:<tenant>)
    region: str | None = None
    stack: str = DEFAULT_STACK
    runtime: Any = None  # local mode's LocalRuntime

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL

    def client(self) -> ApiClient:
        if self.is_local:
            return ApiClient(self.endpoint, api_key=LOCAL_KEY)
        return ApiClient(self.endpoint, sigv4=True, region=self.region)

    def wait(self, probe: Callable[[], T], *, what: str, timeout: float | None = None) -> T:
        """A bounded poll with this target's bound and pace; the failure names both."""
        return wait_for(
            probe,
            what=f"{what} ({self.name}; JOBSCHED_E2E_TIMEOUT sets the bound)",
            timeout=self.timeout if timeout is None else timeout,
            interval=self.interval,
        )

    def cli_auth(self) -> list[str]:
        """The CLI's connection options for this target (the same auth as client())."""
        if self.is_local:
            return ["--api-key", LOCAL_KEY]
        return ["--sigv4", "--region", str(self.region)]


def chosen() -> str:
    name = os.environ.get("JOBSCHED_E2E_TARGET", LOCAL).strip().lower() or LOCAL
    if name not in (LOCAL, AWS):
        raise ValueError(f"JOBSCHED_E2E_TARGET must be '{LOCAL}' or '{AWS}', not {name!r}")
    return name


def _seconds(variable: str, default: int) -> int:
    raw = os.environ.get(variable)
    if not raw:
        return default
    value = int(raw)
    if value <= 0:
        raise ValueError(f"{variable} must be a positive number of seconds, not {raw!r}")
    return value


def local_target(runtime: Any) -> Target:
    return Target(
        name=LOCAL,
        endpoint=str(runtime.api_url),
        timeout=_seconds("JOBSCHED_E2E_TIMEOUT", LOCAL_TIMEOUT),
        interval=0.2,
        fail_seconds=_seconds("JOBSCHED_E2E_FAIL_SECONDS", 8),
        tenant=runtime.config.api_keys[LOCAL_KEY],
        region=runtime.config.region,
        runtime=runtime,
    )


def aws_target() -> tuple[Target | None, str]:
    """The deployed stack's target, or None and why it cannot be used."""
    endpoint = os.environ.get("JOBSCHED_E2E_ENDPOINT", "").strip()
    if not endpoint:
        return None, f"JOBSCHED_E2E_ENDPOINT is not set: {SETUP_HINT}"
    import botocore.session

    if botocore.session.Session().get_credentials() is None:
        return None, f"no AWS credentials found: {SETUP_HINT}"
    client = ApiClient(endpoint, sigv4=True)
    try:
        region = client.region
    except Exception as exc:  # SigningUnavailable: no region in the host or the configuration
        return None, f"{exc}: {SETUP_HINT}"
    # Present but unusable credentials (expired, wrong account) fail here, loudly.
    import boto3
    from jobsched.handlers.api import principal_tenant

    caller = boto3.client("sts", region_name=region).get_caller_identity()["Arn"]
    return (
        Target(
            name=AWS,
            endpoint=client.endpoint,
            timeout=_seconds("JOBSCHED_E2E_TIMEOUT", AWS_TIMEOUT),
            interval=2.0,
            fail_seconds=_seconds("JOBSCHED_E2E_FAIL_SECONDS", 30),
            tenant=principal_tenant(caller),
            region=region,
            stack=os.environ.get("JOBSCHED_E2E_STACK", "").strip() or DEFAULT_STACK,
        ),
        "",
    )
