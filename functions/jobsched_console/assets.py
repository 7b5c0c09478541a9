"""Serving the console's files: a fixed list of names, each with its content type, and the
headers that keep the page to its own scripts and styles.

Only names in `FILES` are ever read, so no request path can reach another file."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

CONSOLE_PATH = "/console"
STATIC_DIR = Path(__file__).parent / "static"

HTML = "text/html; charset=utf-8"
JS = "text/javascript; charset=utf-8"
CSS = "text/css; charset=utf-8"
SVG = "image/svg+xml"

# URL name (under /console/) → content type. The page is index.html; the rest are its parts.
FILES: dict[str, str] = {
    "index.html": HTML,
    "console.css": CSS,
    "favicon.svg": SVG,
    "app.js": JS,
    "api.js": JS,
    "dom.js": JS,
    "format.js": JS,
    "timeline.js": JS,
    "pages/common.js": JS,
    "pages/jobs.js": JS,
    "pages/job.js": JS,
    "pages/run.js": JS,
    "pages/dead.js": JS,
    "pages/runs.js": JS,
}

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@dataclass(frozen=True)
class StaticResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def is_console_path(path: str) -> bool:
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


@cache
def _read(name: str) -> bytes:
    return (STATIC_DIR / name).read_bytes()


def console_response(method: str, path: str) -> StaticResponse | None:
    """The answer for a request path under /console, or None for any other path (the API's).
    `path` is the path alone, without the query string."""
    if not is_console_path(path):
        return None
    if method not in ("GET", "HEAD"):
        return _text(405, "method not allowed", {"Allow": "GET, HEAD"})
    if path == CONSOLE_PATH:
        # Relative module URLs resolve against the directory: /console → /console/.
        return StaticResponse(302, b"", {**SECURITY_HEADERS, "Location": CONSOLE_PATH + "/"})
    name = path[len(CONSOLE_PATH) + 1 :] or "index.html"
    content_type = FILES.get(name)
    if content_type is None:
        return _text(404, "not found")
    body = _read(name)
    headers = {
        **SECURITY_HEADERS,
        "Content-Type": content_type,
        # The page is never cached (it is where a new version starts); its parts are checked
        # with the server on every load, so a new version never mixes with an old one.
        "Cache-Control": "no-store" if content_type == HTML else "no-cache",
    }
    return StaticResponse(200, b"" if method == "HEAD" else body, headers)


def _text(status: int, text: str, extra: dict[str, str] | None = None) -> StaticResponse:
    headers = {
        **SECURITY_HEADERS,
        "Content-Type": "text/plain; charset=utf-8",
        "Cache-Control": "no-store",
        **(extra or {}),
    }
    return StaticResponse(status, text.encode(), headers)
