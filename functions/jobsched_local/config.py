"""Local mode configuration: API keys mapped to tenants, ports and tick intervals, and the
runtime settings the functions get (jobsched.settings.Settings, whose defaults apply unless
local mode needs its own: fewer shards, the demo's handlers, a loopback allow-list).

The default configuration carries one development key; a JSON file given with --config
replaces any of these fields."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jobsched.domain.grants import GrantsDocument
from jobsched.settings import Settings
from jobsched.targets.authority import partition_of
from pydantic import ValidationError

from .keys import DEV_KEY, DEV_TENANT
from .loopback import host_name, is_loopback

MOTO_ACCOUNT = "123456789012"  # where bare target names resolve: moto's default account
# Local mode has no IAM (moto's STS assumes any role): any role may be named, and each is
# still assumed with the tenant's ExternalId, as in the stack.
LOCAL_ASSUMABLE_ROLES = ("arn:*:iam::*:role/*",)


def _runtime_default(name: str) -> Any:
    return Settings.model_fields[name].get_default(call_default_factory=True)


# LocalConfig field -> Settings field, for the settings local mode passes to the functions.
RUNTIME_FIELDS = {
    "shard_count": "shard_count",
    "horizon_seconds": "horizon_seconds",
    "sweep_ahead_seconds": "sweep_ahead_seconds",
    "lease_seconds": "lease_seconds",
    "tenant_concurrency": "tenant_concurrency",
    "handler_modules": "handler_modules",
    "allow_destinations": "http_allow_destinations",
    "run_events": "run_events",
}


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
    horizon_seconds: int = _runtime_default("horizon_seconds")  # how far ahead the sweeper makes runs
    # How far ahead a due job's runs are made; None: the horizon. Local mode makes fewer runs
    # ahead than the stack (300 s): moto's queues slow down as they fill.
    sweep_ahead_seconds: int | None = None
    sweep_seconds: float = 60.0  # the EventBridge rule rate for the sweeper
    # The stack reconciles each shard twice a minute (the rule, and its second tick half a
    # minute later through a delaying queue); here one tick every 30 s does the same.
    reconcile_seconds: float = 30.0
    ttl_seconds: float = 30.0  # how often expired items are deleted (DynamoDB TTL)
    stream_poll_seconds: float = 0.2
    queue_poll_seconds: float = 0.2
    queue_idle_seconds: float = 0.2  # after an empty receive, the next one waits this long
    stream_batch_size: int = 100
    queue_batch_size: int = 10
    lease_seconds: int = _runtime_default("lease_seconds")
    tenant_concurrency: int = _runtime_default("tenant_concurrency")
    # Which run and job events go to the bus (none | failures | all): every one, locally, so
    # `jobsched events tail` shows a run's whole path.
    run_events: str = "all"
    handler_modules: list[str] = field(default_factory=lambda: ["jobsched.demo_handlers"])
    # Where handler_modules are looked for before the installed packages: directories,
    # relative to the directory local mode is started from (--handlers-path adds more).
    handlers_path: list[str] = field(default_factory=lambda: ["."])
    allow_destinations: list[str] = field(default_factory=lambda: ["127.0.0.1/32", "::1/128", "localhost"])
    # Tenant id -> ARN patterns (* wildcards) it may target without a role of its own, or whose
    # secrets its HTTP headers may reference, and -> EventBridge sources beyond its own
    # jobsched.<digest>; nothing granted by default.
    tenant_targets: dict[str, list[str]] = field(default_factory=dict)
    tenant_event_sources: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not is_loopback(host_name(self.host)):
            # The moto server has no authentication: every tenant's data, to anyone who reaches it.
            raise ValueError(f"host: {self.host!r} is not a loopback address (127.0.0.1, ::1 or localhost)")

    @classmethod
    def load(cls, path: str | Path | None) -> LocalConfig:
        if path is None:
            return cls()
        data: dict[str, Any] = json.loads(Path(path).read_text())
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
        config = cls(**data)
        config.runtime_settings()  # refused here, naming the setting, rather than at start
        return config

    def runtime_settings(self, **resources: Any) -> Settings:
        """The functions' settings: this config's runtime fields (and `resources`: queue URLs,
        the moto endpoint), the model's defaults for the rest."""
        values = {field: getattr(self, name) for name, field in RUNTIME_FIELDS.items()}
        if values["sweep_ahead_seconds"] is None:
            values["sweep_ahead_seconds"] = self.horizon_seconds
        try:
            values["target_grants"] = self.target_grants()
        except ValidationError as exc:
            rules = "; ".join(str(e["msg"]) for e in exc.errors())
            raise ValueError(
                f"invalid local settings: tenant_targets/tenant_event_sources: {rules}"
            ) from None
        try:
            return Settings(**values, **resources)
        except ValidationError as exc:
            local_name = {field: name for name, field in RUNTIME_FIELDS.items()}
            problems = [
                f"{local_name.get(str(e['loc'][0]), e['loc'][0]) if e['loc'] else 'config'}: {e['msg']}"
                for e in exc.errors()
            ]
            raise ValueError("invalid local settings: " + "; ".join(problems)) from None

    def target_grants(self) -> GrantsDocument:
        """The grants the functions get: these maps, in moto's account and this region."""
        home = {"partition": partition_of(self.region), "region": self.region, "account": MOTO_ACCOUNT}
        return GrantsDocument.from_maps(
            self.tenant_targets, self.tenant_event_sources, LOCAL_ASSUMABLE_ROLES, home
        )

    def tenant_for(self, api_key: str | None) -> str | None:
        return self.api_keys.get(api_key or "")

    @property
    def first_key(self) -> str:
        return next(iter(self.api_keys))
