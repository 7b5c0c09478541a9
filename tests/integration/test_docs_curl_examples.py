"""Every curl example of the docs' pages, run in order through the real `api` handler.

The pages are read in the order of EXAMPLE_PAGES: the API's examples first, so the first
create gives `$JOB`. The marked examples of the README and the
tour run against local mode itself (test_doc_examples.py); these run in process, on a clock
of their own, so they can show a whole lease and a backfill in a few seconds.

Each command in a ```sh block that calls curl is parsed (method, path, query, headers,
body) and sent with the `api` fixture's client. `VAR=$(curl ... | jq -r .field)` stores
the field for later `$VAR` references (the first create gives `$JOB`). A command must
answer 2xx unless its line ends with a marker such as `# → 409`, which names the status
it must answer instead. The clock moves one second after each request, as it would
between commands typed one after another.

Nothing is granted to the examples' tenant, as in local mode, so an example answers here as
it does against `make run`. A block whose first line is `# Needs AWS: <why>` holds examples
that need what only an operator gives (an AWS target granted to the tenant): each must answer
`403` without the grants, and answers as shown once EXAMPLE_GRANTS are given."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobsched.domain.instants import ManualClock

from tests.helpers import ApiClient, grant

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLE_PAGES = [
    DOCS / name
    for name in (
        "concepts/jobs.md",
        "concepts/schedules.md",
        "concepts/runs.md",
        "concepts/policies.md",
        "concepts/targets.md",
        "concepts/external-workers.md",
        "getting-started/local-mode.md",
        "reference/cli.md",
        "getting-started/console.md",
        "operate/configure.md",
        "operate/preflight.md",
        "operate/deploy.md",
        "operate/alarms.md",
        "operate/upgrade.md",
        "operate/teardown.md",
        "design/security.md",
    )
]

_SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
_EXPECTED = re.compile(r"#\s*(?:→|->)\s*(\d{3})\s*$")
_CAPTURE = re.compile(r"^(\w+)=\$\((.*)\)$", re.S)
_JQ_FIELD = re.compile(r"^((?:\.\w+(?:\[\d+\])?)+)$")
_JQ_STEP = re.compile(r"\.(\w+)(?:\[(\d+)\])?")
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_BASE = "$JOBSCHED_URL"
_NEEDS_AWS = re.compile(r"\A#\s*Needs AWS:\s*\S")
# `$(date -u -d '+1 hour' +%FT%TZ)` or `$(date -u -d 'yesterday 05:00' +%FT%TZ)` in a body or
# a URL: an instant relative to now, as GNU date prints it; here relative to the test's clock.
_RELATIVE_DATE = re.compile(
    r"\$\(date -u -d '(?:([+-]\d+) (second|minute|hour|day)s?|yesterday (\d\d):(\d\d))' \+%FT%TZ\)"
)
_NO_ARG_FLAGS = {"-s", "-S", "-sS", "-i", "-si", "-sSi", "--silent", "--show-error", "--include"}
_DATA_FLAGS = {"-d", "--data", "--data-raw"}


@dataclass
class Example:
    text: str  # the command as written, for failure messages
    method: str
    target: str  # URL after $JOBSCHED_URL, variables not yet substituted
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    expected: int | None = None  # from a trailing `# → NNN`
    capture: tuple[str, str] | None = None  # (variable, response field)
    needs_aws: bool = False  # its block starts with `# Needs AWS: <why>`


def commands(block: str) -> list[str]:
    """Logical commands of a shell block: backslash continuations joined, quotes kept whole."""
    found, pending = [], ""
    for line in block.splitlines():
        pending += line + "\n"
        if line.rstrip().endswith("\\"):
            continue
        text = pending.replace("\\\n", " ").strip()
        try:
            shlex.split(text, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        if text and not text.startswith("#"):
            found.append(text)
        pending = ""
    assert not pending.strip(), f"unterminated command in the docs: {pending!r}"
    return found


def parse(text: str) -> Example | None:
    """The request a curl command makes, or None for a command that is not curl or that
    targets a deployed stack rather than `$JOBSCHED_URL` (the deploy section's examples)."""
    if "curl" in text and _BASE not in text:
        return None
    marker = _EXPECTED.search(text)
    expected = int(marker.group(1)) if marker else None
    command = text[: marker.start()].rstrip() if marker else text
    capture_var = None
    captured = _CAPTURE.match(command)
    if captured:
        capture_var, command = captured.group(1), captured.group(2)
    words = shlex.split(command, comments=True)
    stages: list[list[str]] = [[]]
    for word in words:
        if word == "|":
            stages.append([])
        else:
            stages[-1].append(word)
    if not stages[0] or stages[0][0] != "curl":
        return None
    capture = None
    if capture_var:
        jq = stages[1] if len(stages) > 1 else []
        path = _JQ_FIELD.match(jq[-1]) if jq[:2] == ["jq", "-r"] else None
        assert path, f"capture must pipe to `jq -r .field`: {text}"
        capture = (capture_var, path.group(1))

    method, url, headers, body = None, None, {}, None
    args = iter(stages[0][1:])
    for arg in args:
        if arg in ("-X", "--request"):
            method = next(args).upper()
        elif arg in ("-H", "--header"):
            name, _, value = next(args).partition(":")
            headers[name.strip()] = value.strip()
        elif arg in _DATA_FLAGS:
            body = next(args)
        elif arg in _NO_ARG_FLAGS:
            continue
        elif arg.startswith("-"):
            raise AssertionError(f"curl option {arg} is not understood by this test: {text}")
        else:
            assert url is None, f"two URLs in one command: {text}"
            url = arg
    assert url and url.startswith(_BASE), f"the URL must start with {_BASE}: {text}"
    method = method or ("POST" if body is not None else "GET")
    return Example(text, method, url[len(_BASE) :], headers, body, expected, capture)


def readme_examples() -> list[Example]:
    found = []
    text = "\n".join(page.read_text(encoding="utf-8") for page in EXAMPLE_PAGES)
    for block in _SH_BLOCK.findall(text):
        needs_aws = _NEEDS_AWS.match(block) is not None
        for text in commands(block):
            example = parse(text)
            if example is not None:
                example.needs_aws = needs_aws
                found.append(example)
    return found


def substitute(text: str, variables: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "JOBSCHED_KEY":
            return "local-example-key"
        assert name in variables, f"${name} is used before a command sets it"
        return variables[name]

    return _VARIABLE.sub(value, text)


def relative_dates(text: str, now: datetime) -> str:
    """Each `$(date -u -d '+N unit' +%FT%TZ)` replaced by that instant after `now`, and each
    `$(date -u -d 'yesterday HH:MM' +%FT%TZ)` by that time of the day before `now`'s (UTC)."""

    def instant(match: re.Match[str]) -> str:
        amount, unit, hour, minute = match.groups()
        if unit is not None:
            moved = now + timedelta(**{unit + "s": int(amount)})
        else:
            day = now.astimezone(UTC) - timedelta(days=1)
            moved = day.replace(hour=int(hour), minute=int(minute), second=0, microsecond=0)
        return moved.strftime("%Y-%m-%dT%H:%M:%SZ")

    return _RELATIVE_DATE.sub(instant, text)


def test_docs_have_an_example_for_every_route():
    """Every route of the OpenAPI document, with its path parameters as the examples' variables."""
    from jobsched.handlers.api import app

    placeholders = {"{job_id}": "$JOB", "{run_key}": "$RUN", "{name}": "us-holidays"}
    wanted = set()
    paths = app.get_openapi_schema().paths
    assert paths is not None
    for path, methods in paths.items():
        for name, value in placeholders.items():
            path = path.replace(name, value)
        for method in ("get", "post", "patch", "delete", "put"):
            if getattr(methods, method, None) is not None:
                wanted.add((method.upper(), path))
    wanted |= {("GET", "/openapi.json")}
    shapes = set()
    for example in readme_examples():
        target = example.target.split("?")[0]
        for variable in ("$RUNJOB", "$EXTJOB"):
            target = target.replace(variable, "$JOB")
        for variable in ("$LEASE",):
            target = target.replace(variable, "$RUN")
        shapes.add((example.method, target))
    missing = wanted - shapes
    assert not missing, f"routes without an example in the docs: {sorted(missing)}"


# What the examples marked `# Needs AWS` assume the operator granted their tenant
# (docs/concepts/targets.md).
EXAMPLE_GRANTS = {"tenant-a": ["arn:aws:lambda:eu-west-1:123456789012:function:remind"]}


def test_docs_curl_examples_run_in_order(api: ApiClient, clock: ManualClock, container: Any):
    grant(container, {})  # nothing granted, as in local mode (bare names resolve in its account)
    examples = readme_examples()
    assert any(e.capture == ("JOB", ".jobId") for e in examples), "no `JOB=$(curl ... | jq -r .jobId)`"
    variables: dict[str, str] = {}
    for example in examples:
        target = relative_dates(example.target, clock.now())
        path, _, query = substitute(target, variables).partition("?")
        headers = {name: substitute(value, variables) for name, value in example.headers.items()}
        # Bodies are single-quoted in the docs: the shell expands only what a body closes its
        # quote around, `"'"$JOB"'"` (a variable set by an earlier command) and `$(date ...)`.
        body = relative_dates(example.body, clock.now()) if example.body is not None else None
        if body is not None:
            body = _VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), body)
        if example.needs_aws:
            response = api.request(example.method, path, headers=headers, raw_body=body, query=query)
            needless = f"marked `# Needs AWS` but needs no grant:\n{example.text}\n→ {response}"
            assert response.status == 403, needless
            grant(container, EXAMPLE_GRANTS)
        response = api.request(example.method, path, headers=headers, raw_body=body, query=query)
        if example.needs_aws:
            grant(container, {})
        if example.expected is not None:
            assert response.status == example.expected, f"{example.text}\n→ {response}"
        else:
            assert 200 <= response.status < 300, f"{example.text}\n→ {response}"
        if example.capture:
            name, key = example.capture
            value: Any = response.body
            for field, index in _JQ_STEP.findall(key):
                value = value.get(field) if isinstance(value, dict) else None
                if index and isinstance(value, list):
                    value = value[int(index)] if int(index) < len(value) else None
            assert isinstance(value, str) and value, f"{example.text}\n→ no {key} in {response}"
            variables[name] = value
        clock.advance(1)


_PATHS_EXAMPLE = re.compile(r"jq '\.paths \| keys'.*?^```\n+```json\n(.*?)^```", re.S | re.M)


def test_docs_list_every_route_the_api_serves():
    """The page's `jq '.paths | keys'` answer is the OpenAPI document's paths, every one."""
    from jobsched.handlers.api import app

    page = DOCS / "concepts/jobs.md"
    shown = _PATHS_EXAMPLE.search(page.read_text(encoding="utf-8"))
    assert shown, f"{page.name}: no ```json answer after `jq '.paths | keys'`"
    paths = app.get_openapi_schema().paths
    assert paths is not None
    listed = json.loads(shown.group(1))
    assert listed == sorted(paths), f"{page.name}: the routes listed differ from the API's"
