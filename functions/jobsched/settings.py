"""Runtime settings, read from the environment once at cold start.

Only handlers and wiring read this; the domain and services receive plain values."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from .store.schema import DEFINITIONS, IDEMPOTENCY, RUNS


@dataclass(frozen=True)
class Settings:
    definitions_table: str = DEFINITIONS.default_name
    runs_table: str = RUNS.default_name
    idempotency_table: str = IDEMPOTENCY.default_name
    shard_count: int = 16
    horizon_seconds: int = 120
    max_jobs_per_tenant: int = 10_000
    max_page_size: int = 100
    endpoint_url: str | None = None  # set in local mode (moto server)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ) if env is None else env
        return cls(
            definitions_table=env.get(DEFINITIONS.env_var, DEFINITIONS.default_name),
            runs_table=env.get(RUNS.env_var, RUNS.default_name),
            idempotency_table=env.get(IDEMPOTENCY.env_var, IDEMPOTENCY.default_name),
            shard_count=int(env.get("SHARD_COUNT", "16")),
            horizon_seconds=int(env.get("HORIZON_SECONDS", "120")),
            max_jobs_per_tenant=int(env.get("MAX_JOBS_PER_TENANT", "10000")),
            endpoint_url=env.get("JOBSCHED_AWS_ENDPOINT_URL") or None,
        )


@lru_cache(maxsize=1)
def settings() -> Settings:
    return Settings.from_env()
