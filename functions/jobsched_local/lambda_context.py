"""A Lambda-like invocation context for handlers called outside Lambda."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


@dataclass
class InvocationContext:
    function_name: str = "jobsched-local"
    memory_limit_in_mb: int = 512
    timeout_seconds: float = 30.0
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/jobsched-local"
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        left = self.timeout_seconds - (time.monotonic() - self._started)
        return max(0, int(left * 1000))
