"""boto3 clients, built once per process with the retry mode the scheduler relies on."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config

from .settings import settings

# Standard mode retries throttling with backoff; what still fails surfaces as a domain error.
_CONFIG = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=3, read_timeout=10)


@cache
def client(service: str) -> Any:
    return boto3.client(service, config=_CONFIG, endpoint_url=settings().endpoint_url)  # type: ignore[call-overload]
