"""Local mode is closed to web pages: what its two ports refuse.

A page open in the developer's browser can send requests to 127.0.0.1 (a form, a fetch, an
image), and a page on a name the attacker rebinds to 127.0.0.1 can even read the answers.
Neither the AWS CLI nor boto3 sends an `Origin` or `Sec-Fetch-*` header, and both send the
loopback address they were pointed at as `Host`; browsers send those headers and a rebound
page sends its own name. So:

- the moto port (no authentication at all: every tenant's data) refuses any request with an
  `Origin` or a `Sec-Fetch-*` header or a `Host` that is not a loopback address or
  `localhost`, and grants no CORS;
- the API port refuses what the console proxy refuses (jobsched_console.proxy): a `Host`
  other than its own address (DNS rebinding), an `Origin` other than its own, a
  `Sec-Fetch-Site` other than `same-origin` or `none` (a cross-site form or fetch). The
  console it serves at /console calls it from its own origin and keeps working."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

LOOPBACK_NAMES = ("localhost",)
# Request headers only browsers send (Fetch Metadata); the AWS SDKs and the CLI never do.
BROWSER_ONLY_HEADERS = ("origin", "sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest", "sec-fetch-user")


def host_name(host: str) -> str:
    """The name in a Host header, without its port: `[::1]:5055` -> `::1`, `a:1` -> `a`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback(name: str) -> bool:
    """Whether a host name (no port) is a loopback address literal or `localhost`."""
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def moto_refusal(headers: Mapping[str, str]) -> str | None:
    """Why the moto server refuses a request with these headers (lower-case names), or None."""
    for name in BROWSER_ONLY_HEADERS:
        if name in headers:
            return f"{name}: requests from web pages are refused (only AWS SDKs and the CLI are served)"
    if not is_loopback(host_name(headers.get("host", ""))):
        return "Host: must be a loopback address or localhost"
    return None


class LoopbackOnly:
    """WSGI middleware in front of moto's application: refuses what `moto_refusal` refuses
    with a 403 (before moto sees the request), and takes every CORS header off the answers."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = {
            key[5:].replace("_", "-").lower(): str(value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        refusal = moto_refusal(headers)
        if refusal is not None:
            body = json.dumps({"code": "forbidden", "message": refusal}).encode()
            start_response(
                "403 Forbidden",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]

        def without_cors(status: str, response_headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            kept = [(n, v) for n, v in response_headers if not n.lower().startswith("access-control-")]
            return start_response(status, kept, *exc_info)

        return self._app(environ, without_cors)


def own_hosts(port: int) -> frozenset[str]:
    """The Host values that name the API port itself."""
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"})


def api_refusal(headers: Mapping[str, str], port: int) -> tuple[int, str, str] | None:
    """(status, code, message) for a request the API port refuses (headers: lower-case
    names), or None: the console proxy's rules."""
    hosts = own_hosts(port)
    host = headers.get("host", "").strip().lower()
    if host not in hosts:
        return 421, "misdirected_request", f"Host must be 127.0.0.1:{port} or localhost:{port}"
    origin = headers.get("origin")
    if origin is not None and origin.strip().lower() not in {f"http://{h}" for h in hosts}:
        return 403, "forbidden", "Origin: requests from other origins are refused"
    if headers.get("sec-fetch-site", "same-origin").strip().lower() not in ("same-origin", "none"):
        return 403, "forbidden", "Sec-Fetch-Site: requests from other sites are refused"
    return None
