"""Builds API Gateway REST proxy events (the shape the `api` handler receives in AWS)."""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl


def rest_event(
    method: str,
    path: str,
    *,
    body: str | bytes | None = None,
    headers: dict[str, str] | None = None,
    query: str = "",
    tenant: str | None = None,
    source_ip: str = "127.0.0.1",
    stage: str = "v1",
    stage_in_path: bool = True,
) -> dict[str, Any]:
    """A REST (v1 payload) proxy event. `tenant` lands where an authorizer puts its context.
    `stage_in_path`: the request context's path starts with the stage, as on the
    execute-api URL; behind a custom domain (or local mode's front) it does not."""
    headers = dict(headers or {})
    pairs = parse_qsl(query, keep_blank_values=True)
    multi: dict[str, list[str]] = {}
    for key, value in pairs:
        multi.setdefault(key, []).append(value)
    is_binary = False
    text: str | None
    if isinstance(body, bytes):
        try:
            text = body.decode()
        except UnicodeDecodeError:
            text, is_binary = base64.b64encode(body).decode(), True
    else:
        text = body
    now = time.time()
    return {
        "resource": path,
        "path": path,
        "httpMethod": method.upper(),
        "headers": headers or None,
        "multiValueHeaders": {k: [v] for k, v in headers.items()} or None,
        "queryStringParameters": {k: v[-1] for k, v in multi.items()} or None,
        "multiValueQueryStringParameters": multi or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "resourcePath": path,
            "httpMethod": method.upper(),
            "path": f"/{stage}{path}" if stage_in_path else path,
            "protocol": "HTTP/1.1",
            "stage": stage,
            "requestId": str(uuid.uuid4()),
            "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "requestTimeEpoch": int(now * 1000),
            "identity": {"sourceIp": source_ip, "userAgent": headers.get("user-agent", "")},
            "authorizer": {"tenantId": tenant, "principalId": tenant} if tenant else None,
        },
        "body": text,
        "isBase64Encoded": is_binary,
    }
