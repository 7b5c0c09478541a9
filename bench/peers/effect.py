"""The peers' job function: POST the job's id to the receiver (one new connection a call, as
a job function would make its own request)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit


def post(url: str, job_id: str) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request(
            "POST", parts.path, body=json.dumps({"id": job_id}), headers={"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        response.read()
        if response.status >= 300:
            raise RuntimeError(f"receiver answered {response.status}")
        return response.status
    finally:
        conn.close()
