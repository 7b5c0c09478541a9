"""No example a reader runs from the docs carries a fixed instant.

An instant written into a command (`"runAt": "2026-11-02T09:00:00Z"`, `since=...`, a
backfill's window) is right on the day it was written and wrong, or refused, some day after:
a `runAt` in the past, an `endAt` that has passed. So a command computes it from now
(`$(date -u -d '+1 hour' +%FT%TZ)`), and an instant that must stay as written says why on its
line with `# fixed instant: <why>`. The check needs no clock: a fixed instant is refused
whatever its date, so it cannot pass today and fail next year.

Runnable is what a reader pastes into a shell: ```sh, ```bash and ```shell blocks, and the
`$ ` command lines (with their continuations) of ```console blocks. An instant inside a run
key (`j_...@2026-11-02T07:00:00Z`) names a run, not a time, and is not one."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
# The changelog records what happened on dates; it holds no examples to run.
PAGES = sorted(page for page in DOCS.rglob("*.md") if page.name != "changelog.md")

_BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_SHELL = {"sh", "bash", "shell"}
_INSTANT = re.compile(r"(?<![@\w])\d{4}-\d\d-\d\d(?:T\d\d:\d\d(?::\d\d)?)?")
_MARK = re.compile(r"#\s*fixed instant:\s*\S")


def runnable_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, text) of each line of the page a reader would run."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in _BLOCK.finditer(text):
        language, body = block.group(1), block.group(2)
        first = text[: block.start(2)].count("\n") + 1
        continued = False
        for offset, line in enumerate(body.splitlines()):
            if language in _SHELL:
                found.append((first + offset, line))
            elif language == "console" and (line.startswith("$ ") or continued):
                found.append((first + offset, line))
                continued = line.rstrip().endswith("\\")
    return found


def fixed_instants(page: Path, root: Path = DOCS) -> list[str]:
    """`page:line: text` (page relative to `root`) for each runnable line holding an instant
    without its mark."""
    return [
        f"{page.relative_to(root)}:{number}: {line.strip()}"
        for number, line in runnable_lines(page)
        if _INSTANT.search(line) and not _MARK.search(line)
    ]


def test_runnable_examples_compute_their_instants():
    found = [where for page in PAGES for where in fixed_instants(page)]
    assert not found, "fixed instants in runnable examples (compute them from now):\n" + "\n".join(found)


def test_the_check_finds_what_it_must(tmp_path: Path):
    """Instants in commands are found; output, run keys and marked lines are not."""
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\n"
        'curl -d \'{"runAt": "2026-11-02T09:00:00Z"}\'\n'
        'curl -d \'{"runKeys": ["j_gone@2026-11-02T07:00:00Z"]}\'\n'
        'curl -d \'{"runAt": "2026-11-02T09:00:00Z"}\'  # fixed instant: the schema\'s example\n'
        "```\n\n"
        "```console\n"
        "$ jobsched jobs backfill J \\\n"
        "    --start 2026-11-01\n"
        "2026-11-01T00:00:00Z  queued\n"
        "```\n\n"
        "```json\n"
        '{"runAt": "2026-11-02T09:00:00Z"}\n'
        "```\n",
        encoding="utf-8",
    )
    found = [where.split(": ", 1)[0] for where in fixed_instants(page, tmp_path)]
    assert found == ["page.md:2", "page.md:9"]
