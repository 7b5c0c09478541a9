"""jobsched as an AWS CDK construct (aws-cdk-lib v2):

    from jobsched.cdk import JobScheduler

    alarm_email = self.node.try_get_context("alarmEmail")  # None: synth warns, no one is e-mailed
    scheduler = JobScheduler(self, "Scheduler", shard_count=16, alarm_email=alarm_email)
    scheduler.grant_invoke_api(role)

Deploy-time code: it needs aws-cdk-lib and constructs, and is left out of the functions' code
asset (names.DEPLOY_ONLY). The repository's own app (infra/app.py) adds the same construct to
its stack. docs/library/cdk.md has the rest.

The names are loaded on first use: `jobsched.cdk.names` and the like import without starting
the CDK's runtime (jsii)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Config, ConfigError, JobSchedulerProps
    from .scheduler import JobScheduler, Naming

_EXPORTS = {
    "Config": "config",
    "ConfigError": "config",
    "JobSchedulerProps": "config",
    "JobScheduler": "scheduler",
    "Naming": "scheduler",
}
__all__ = ["Config", "ConfigError", "JobScheduler", "JobSchedulerProps", "Naming"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
