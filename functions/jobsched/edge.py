"""What the API's edge refuses before the `api` function sees a request: one limit and one
answer for the deployed stack (its web ACL, jobsched.cdk.api) and local mode's front
(jobsched_local.glue), so a client tried locally meets exactly the deployed behaviour.

Lambda refuses a synchronous event past 6 MB (a 500), below API Gateway's own 10 MB; the
body is JSON-escaped in the event (up to 6 bytes a byte), so 1,000,000 bytes is the most
that fits whatever it holds. Bodies are judged by their Content-Length."""

from __future__ import annotations

import json

MAX_BODY_BYTES = 1_000_000  # the default; the stack's apiMaxBodyBytes may lower it


def payload_too_large_body(limit: int) -> str:
    """The 413's body, in the API's error shape."""
    message = f"the request body is over {limit} bytes (Content-Length)"
    return json.dumps({"code": "payload_too_large", "message": message}, separators=(",", ":"))
