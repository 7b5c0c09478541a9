"""Every marked example in README.md and docs/ runs as written against local mode.

A marked example is a ```console block right after a `<!-- run -->` comment. Each line that
starts with `$ ` is a command (a trailing backslash continues it on the next line); the lines
after it, up to the next command, are the output it must print. The commands of one file run
in order in bash, as a reader would type them in one terminal: a variable a command sets
(`JOB=$(...)`) is there for the next. Every command must exit 0 within its time limit.

Output is compared after normalising what differs from run to run: job ids, manual-run
suffixes, instants and clock times, UUIDs, signing secrets, and runs of spaces (column widths
follow the values). A line `...` stands for any number of lines. A command shown with no
output is run and its output not compared. After a change of what the CLI prints,
`UPDATE_DOC_EXAMPLES=1 pytest tests/integration/test_doc_examples.py` writes the new outputs
into the pages (read the diff before committing it).

Local mode here is what `make run` starts, without the demo jobs: the default settings and
API key on free ports, and `jobsched` is this checkout's CLI; `JOBSCHED_URL` points at it, as
the pages tell a reader to set it when the port is not 8080."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from infra import ROOT

pytestmark = pytest.mark.timeout(600)

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKED_BLOCK = re.compile(r"^<!-- run -->\n```console\n(.*?)^```", re.S | re.M)
COMMAND_SECONDS = 60
# UPDATE_DOC_EXAMPLES=1: write what each command printed into the page instead of comparing
# (after a change of the CLI's output); an output shown with `...` is left as written.
UPDATE = os.environ.get("UPDATE_DOC_EXAMPLES") == "1"

_NORMALISE = [
    (re.compile(r"\bj_[0-9a-z]{16}\b"), "j_ID"),
    (re.compile(r"~m[0-9a-z]{11}\b"), "~mID"),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b"), "INSTANT"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "HH:MM:SS"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "UUID"),
    (re.compile(r"whsec_[A-Za-z0-9+/=]+"), "whsec_SECRET"),
    (re.compile(r"[ \t]+"), " "),
]


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)
    line: int = 0  # where the command is written, for failure messages


def steps(text: str) -> list[Step]:
    """The commands of every marked block of a page, in order, each with its shown output."""
    found: list[Step] = []
    for block in MARKED_BLOCK.finditer(text):
        first_line = text[: block.start(1)].count("\n") + 1
        lines = block.group(1).splitlines()
        index = 0
        while index < len(lines):
            line = lines[index]
            if line.startswith("$ "):
                command, start = line[2:], index
                while command.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    command = command + "\n" + lines[index]  # bash reads the continuation
                found.append(Step(command, line=first_line + start))
            else:
                assert found, f"output before any command at line {first_line + index}"
                found[-1].expected.append(line)
            index += 1
    return found


def normalise(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        for pattern, replacement in _NORMALISE:
            line = pattern.sub(replacement, line)
        out.append(line.strip())
    while out and not out[-1]:
        out.pop()
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """`expected` equals `actual`, a `...` line standing for any number of lines."""
    chunks = [r"(?:.*\n)*?" if line == "..." else re.escape(line) + "\n" for line in normalise(expected)]
    pattern = "".join(chunks)
    return re.fullmatch(pattern, "".join(line + "\n" for line in normalise(actual))) is not None


@pytest.fixture(scope="module")
def local_mode() -> Iterator[Any]:
    """Local mode with the defaults `make run` uses (the dev key, a 60 s sweep), on free ports."""
    from jobsched_local.config import LocalConfig
    from jobsched_local.runtime import LocalRuntime

    runtime = LocalRuntime(LocalConfig(port=0, moto_port=0)).start()
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture(scope="module")
def shell_environment(local_mode: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PATH with this checkout's `jobsched` first, JOBSCHED_URL at local mode, no AWS variables."""
    bin_dir = tmp_path_factory.mktemp("bin")
    cli = bin_dir / "jobsched"
    cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m jobsched_cli "$@"\n')
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    environment = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path_factory.mktemp("home")),
        "PYTHONPATH": f"{ROOT / 'functions'}:{ROOT}",
        "JOBSCHED_URL": str(local_mode.api_url),
        "LANG": "C.UTF-8",
        "TZ": "UTC",
    }
    return environment


def run_page(page: Path, environment: dict[str, str], workdir: Path) -> int:
    """Run a page's marked commands in order; return how many ran. Fails on the first mismatch."""
    state = dict(environment)
    env_file = workdir / "env"
    ran = 0
    text = page.read_text(encoding="utf-8")
    for step in steps(text):
        script = f"set -a\n{step.command}\nstatus=$?\nenv -0 > {env_file}\nexit $status\n"
        where = f"{page.relative_to(ROOT)}:{step.line}: $ {step.command}"
        try:
            done = subprocess.run(
                ["bash", "-c", script],
                env=state,
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=COMMAND_SECONDS,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{where}\ndid not finish within {COMMAND_SECONDS} s")
        assert done.returncode == 0, f"{where}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
        state = dict(entry.split("=", 1) for entry in env_file.read_text().split("\0") if "=" in entry)
        if step.expected and UPDATE and "..." not in step.expected:
            text = shown_output_replaced(text, step, done.stdout)
        elif step.expected:
            actual = done.stdout.splitlines()
            assert matches(step.expected, actual), (
                f"{where}\nshown:\n" + "\n".join(step.expected) + "\nprinted:\n" + done.stdout
            )
        ran += 1
    if UPDATE:
        page.write_text(text, encoding="utf-8")
    return ran


def shown_output_replaced(text: str, step: Step, printed: str) -> str:
    """The page with the output shown under `step` replaced by what it printed."""
    command = "$ " + step.command + "\n"
    start = text.index(command) + len(command)
    shown = "".join(line + "\n" for line in step.expected)
    assert text[start : start + len(shown)] == shown, step.command
    return text[:start] + printed.rstrip("\n") + "\n" + text[start + len(shown) :]


def test_normalising_keeps_what_matters() -> None:
    """The comparison ignores ids and times, never states or words."""
    shown = ["j_abcdefghij012345  PAUSED  version 2", "...", "20:46:14  flaky  DEAD → PENDING"]
    printed = ["j_zzzzzzzzzzzzzzzz   PAUSED   version 2", "x", "y", "01:02:03  flaky  DEAD → PENDING"]
    assert matches(shown, printed)
    assert not matches(shown, [printed[0].replace("PAUSED", "ACTIVE"), *printed[1:]])
    assert not matches(shown[:1], printed[:2])


def test_every_page_with_examples_marks_some() -> None:
    """The README's tour, the tour page and local mode's page are executed, not only read."""
    marked = {page.relative_to(ROOT).as_posix() for page in PAGES if steps(page.read_text())}
    wanted = {"README.md", "docs/getting-started/tour.md", "docs/getting-started/local-mode.md"}
    assert wanted <= marked, marked


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if MARKED_BLOCK.search(p.read_text(encoding="utf-8"))],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_marked_examples_run_as_written(
    page: Path, shell_environment: dict[str, str], tmp_path: Path
) -> None:
    assert run_page(page, shell_environment, tmp_path) > 0
