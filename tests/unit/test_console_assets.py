"""The run console's files: exactly the listed ones are served, with their content types and
the headers that confine the page (CSP, nosniff, no referrer, no caching of the page); no
path reaches another file; the page has no inline script or style and its scripts never
turn data into markup. Local mode serves them without a key; the API still wants one."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
from jobsched_console.assets import CONTENT_SECURITY_POLICY, FILES, STATIC_DIR, console_response
from jobsched_local.glue import HttpFront

EXPECTED_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def test_the_listed_files_are_exactly_the_files_shipped() -> None:
    shipped = {p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*") if p.is_file()}
    assert shipped == set(FILES)


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_file_is_served_with_its_type_and_the_security_headers(name: str) -> None:
    answer = console_response("GET", f"/console/{name}")
    assert answer is not None and answer.status == 200
    assert answer.body == (STATIC_DIR / name).read_bytes()
    headers = answer.headers
    assert headers["Content-Type"] == FILES[name]
    assert headers["Content-Security-Policy"] == EXPECTED_CSP == CONTENT_SECURITY_POLICY
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    expected_type = {"js": "text/javascript", "css": "text/css", "html": "text/html", "svg": "image/svg+xml"}
    assert headers["Content-Type"].startswith(expected_type[name.rsplit(".", 1)[1]])
    assert headers["Cache-Control"] == ("no-store" if name.endswith(".html") else "no-cache")


def test_the_console_root_is_the_page_and_the_bare_path_redirects_to_it() -> None:
    page = console_response("GET", "/console/")
    assert page is not None and page.status == 200 and page.headers["Cache-Control"] == "no-store"
    assert page.body == (STATIC_DIR / "index.html").read_bytes()
    bare = console_response("GET", "/console")
    assert bare is not None and bare.status == 302 and bare.headers["Location"] == "/console/"


@pytest.mark.parametrize(
    "path",
    [
        "/console/../pyproject.toml",
        "/console/../../etc/passwd",
        "/console/%2e%2e/assets.py",
        "/console/pages/../app.js",  # resolves to a listed file, but is not a listed name
        "/console/./app.js",
        "/console//app.js",
        "/console/assets.py",
        "/console/__init__.py",
        "/console/static/app.js",
        "/console/pages/",
        "/console/app.js/",
        "/console/APP.JS",
        "/console/app.js%00.html",
        "/console/\\app.js",
    ],
)
def test_no_path_reaches_an_unlisted_file(path: str) -> None:
    answer = console_response("GET", path)
    assert answer is not None and answer.status == 404
    assert answer.headers["Content-Security-Policy"] == EXPECTED_CSP


@pytest.mark.parametrize("path", ["/v1/jobs", "/consoles", "/console.js", "/docs", "/"])
def test_other_paths_are_left_to_the_api(path: str) -> None:
    assert console_response("GET", path) is None


def test_only_reads_are_served() -> None:
    answer = console_response("POST", "/console/")
    assert answer is not None and answer.status == 405 and answer.headers["Allow"] == "GET, HEAD"


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        self.inline += [f"{tag} {name}" for name in names if name.startswith("on") or name == "style"]
        if tag == "style":
            self.inline.append("style element")
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._in_script = True

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append("inline script")


def test_the_page_has_no_inline_script_or_style() -> None:
    markup = _Markup()
    markup.feed((STATIC_DIR / "index.html").read_text())
    assert markup.inline == []
    assert markup.scripts == [{"type": "module", "src": "app.js"}]


# Ways a script turns a string into markup or code; the console builds nodes and text only.
MARKUP_SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|DOMParser|"
    r"createContextualFragment|srcdoc|javascript:"
)


@pytest.mark.parametrize("name", sorted(n for n in FILES if n.endswith(".js")))
def test_scripts_never_parse_data_as_markup(name: str) -> None:
    source = (STATIC_DIR / name).read_text()
    assert MARKUP_SINKS.findall(source) == []
    # Modules only, from this directory: nothing fetched from elsewhere.
    imports = re.findall(r"""^import .* from "([^"]+)";$""", source, re.M)
    assert all(path.startswith("./") or path.startswith("../") for path in imports), imports


# --- local mode's front serves the files without a key ---


@pytest.fixture
def front() -> Iterator[HttpFront]:
    def api(event: dict[str, Any]) -> dict[str, Any]:
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": "{}"}

    server = HttpFront("127.0.0.1", 0, api, lambda key: "tenant-a" if key == "key-a" else None)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_local_mode_serves_the_console_without_a_key_and_the_api_still_wants_one(front: HttpFront) -> None:
    status, headers, body = fetch(f"{front.url}/console/")
    assert status == 200 and body == (STATIC_DIR / "index.html").read_bytes()
    assert headers["Content-Security-Policy"] == EXPECTED_CSP
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    status, headers, _ = fetch(f"{front.url}/console/app.js?v=1")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    status, headers, _ = fetch(f"{front.url}/console")
    assert status == 302 and headers["Location"] == "/console/"
    assert fetch(f"{front.url}/console/../glue.py")[0] == 404
    assert fetch(f"{front.url}/v1/jobs")[0] == 401
    assert fetch(f"{front.url}/v1/jobs", {"x-api-key": "key-a"})[0] == 200


def test_local_modes_banner_names_the_console() -> None:
    from jobsched_local.config import LocalConfig
    from jobsched_local.console import startup_banner

    text = startup_banner(
        "http://127.0.0.1:18080", "http://127.0.0.1:18081", LocalConfig(), program="jobsched"
    )
    assert "  console   http://127.0.0.1:18080/console  " in text
