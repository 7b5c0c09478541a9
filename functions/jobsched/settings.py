"""Runtime settings, read from the environment once at cold start.

Only handlers and wiring read this; the domain and services receive plain values.

Outside Lambda (tests, local mode) a missing variable falls back to the local default. In
Lambda a missing variable is a broken deployment, never a reason to talk to a table named
`jobsched-runs` in someone else's stack: importing this module there fails at once and
names every variable that is missing."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache

from .store.schema import DEFINITIONS, QUEUES, RUNS

IN_LAMBDA = "AWS_LAMBDA_FUNCTION_NAME"  # set by the Lambda runtime in every function

# What the stack sets on every function (infra.functions.environment) and the code cannot do
# without. HTTP_ALLOW_DESTINATIONS and HANDLER_MODULES may legitimately be empty or absent.
REQUIRED_IN_LAMBDA = (
    DEFINITIONS.env_var,
    RUNS.env_var,
    *(q.env_var for q in QUEUES),
    *(q.dlq_env_var for q in QUEUES),
    "SHARD_COUNT",
    "HORIZON_SECONDS",
    "SWEEP_AHEAD_SECONDS",
    "RETENTION_DAYS",
    "MAX_JOBS_PER_TENANT",
    "TENANT_REQUESTS_PER_SECOND",
    "FAIR_QUEUES",
    "TENANT_CONCURRENCY",
    "LEASE_SECONDS",
)


class MissingSettings(RuntimeError):
    """Running in Lambda without variables the stack always sets."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(
            "jobsched: environment variable(s) not set in this Lambda function: "
            + ", ".join(names)
            + " (the stack sets them; redeploy it rather than relying on local defaults)"
        )


@dataclass(frozen=True)
class Settings:
    definitions_table: str = DEFINITIONS.default_name
    runs_table: str = RUNS.default_name
    shard_count: int = 16
    horizon_seconds: int = 120
    sweep_ahead_seconds: int | None = None  # None: the horizon
    retention_days: int = 30
    max_jobs_per_tenant: int = 10_000  # ACTIVE or PAUSED jobs; 0 turns the quota off
    tenant_requests_per_second: int = 50  # API requests; 0 turns the limit off
    queue_urls: dict[str, str] = field(default_factory=dict)  # queue key -> URL
    dlq_urls: dict[str, str] = field(default_factory=dict)
    fair_queues: bool = True  # MessageGroupId = tenant on the standard queues
    tenant_concurrency: int = 50  # leased runs per tenant before its messages are delayed
    lease_seconds: int = 60  # renewed by the heartbeat while the effect runs
    allow_destinations: tuple[str, ...] = ()  # HTTP target allow-list (CIDRs or host names)
    handler_modules: tuple[str, ...] = ()  # modules that register Python job handlers
    endpoint_url: str | None = None  # set in local mode (moto server)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ) if env is None else env
        if env.get(IN_LAMBDA):
            missing = [name for name in REQUIRED_IN_LAMBDA if not env.get(name)]
            if missing:
                raise MissingSettings(missing)
        return cls(
            definitions_table=env.get(DEFINITIONS.env_var, DEFINITIONS.default_name),
            runs_table=env.get(RUNS.env_var, RUNS.default_name),
            shard_count=int(env.get("SHARD_COUNT", "16")),
            horizon_seconds=int(env.get("HORIZON_SECONDS", "120")),
            sweep_ahead_seconds=int(env.get("SWEEP_AHEAD_SECONDS", "300")),
            retention_days=int(env.get("RETENTION_DAYS", "30")),
            max_jobs_per_tenant=int(env.get("MAX_JOBS_PER_TENANT", "10000")),
            tenant_requests_per_second=int(env.get("TENANT_REQUESTS_PER_SECOND", "50")),
            queue_urls={q.key: env[q.env_var] for q in QUEUES if env.get(q.env_var)},
            dlq_urls={q.key: env[q.dlq_env_var] for q in QUEUES if env.get(q.dlq_env_var)},
            fair_queues=env.get("FAIR_QUEUES", "true").lower() == "true",
            tenant_concurrency=int(env.get("TENANT_CONCURRENCY", "50")),
            lease_seconds=int(env.get("LEASE_SECONDS", "60")),
            allow_destinations=_csv(env.get("HTTP_ALLOW_DESTINATIONS", "")),
            handler_modules=_csv(env.get("HANDLER_MODULES", "")),
            endpoint_url=env.get("JOBSCHED_AWS_ENDPOINT_URL") or None,
        )


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@lru_cache(maxsize=1)
def settings() -> Settings:
    return Settings.from_env()


if os.environ.get(IN_LAMBDA):
    settings()  # at import, so a misconfigured function fails its cold start, not a request
