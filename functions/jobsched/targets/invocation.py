"""What a target receives about one run, and the JSON envelope every target is sent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..domain.instants import format_instant


@dataclass(frozen=True)
class Invocation:
    run_key: str  # "<job_id>@<RFC 3339 UTC>": the idempotency key every target receives
    job_id: str
    tenant: str
    job_type: str
    scheduled_for: datetime  # aware UTC
    attempt: int  # 1-based
    payload: Any  # JSON value
    timeout_seconds: float  # remaining budget for this effect
    fence: int = 0  # the claim's fence: the worker presents it when it records the outcome
    deadline: datetime | None = (
        None  # aware UTC: when the worker stops waiting (timeout_seconds from the start)
    )

    def envelope(self) -> dict[str, Any]:
        return {
            "runKey": self.run_key,
            "jobId": self.job_id,
            "tenant": self.tenant,
            "type": self.job_type,
            "scheduledFor": format_instant(self.scheduled_for),
            "attempt": self.attempt,
            "payload": self.payload,
        }

    def envelope_json(self) -> str:
        # ASCII-only: SQS rejects some code points that JSON allows verbatim.
        return json.dumps(self.envelope(), separators=(",", ":"))
