"""Local mode configuration: API keys mapped to tenants, ports and tick intervals.

The default configuration carries one development key; a JSON file given with --config
replaces any of these fields."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

DEV_KEY = "jobsched-dev-key"
DEV_TENANT = "dev"


@dataclass
class LocalConfig:
    api_keys: dict[str, str] = field(default_factory=lambda: {DEV_KEY: DEV_TENANT})
    host: str = "127.0.0.1"
    port: int = 8080
    moto_port: int = 5055
    # moto in a process of its own (own interpreter lock); false: on a thread of this one.
    moto_process: bool = True
    region: str = "us-east-1"
    shard_count: int = 4
    horizon_seconds: int = 120  # how far ahead the sweeper makes runs
    sweep_ahead_seconds: int | None = None  # how far ahead a sweep makes a due job's runs (None: horizon)
    sweep_seconds: float = 60.0  # the EventBridge rule rate for the sweeper
    reconcile_seconds: float = 60.0
    ttl_seconds: float = 30.0  # how often expired items are deleted (DynamoDB TTL)
    stream_poll_seconds: float = 0.2
    queue_poll_seconds: float = 0.2
    queue_idle_seconds: float = 0.2  # after an empty receive, the next one waits this long
    stream_batch_size: int = 100
    queue_batch_size: int = 10
    lease_seconds: int = 60
    tenant_concurrency: int = 50
    handler_modules: list[str] = field(default_factory=lambda: ["jobsched.demo_handlers"])
    allow_destinations: list[str] = field(default_factory=lambda: ["127.0.0.1/32", "::1/128", "localhost"])

    @classmethod
    def load(cls, path: str | Path | None) -> LocalConfig:
        if path is None:
            return cls()
        data: dict[str, Any] = json.loads(Path(path).read_text())
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)

    def tenant_for(self, api_key: str | None) -> str | None:
        return self.api_keys.get(api_key or "")

    @property
    def first_key(self) -> str:
        return next(iter(self.api_keys))
