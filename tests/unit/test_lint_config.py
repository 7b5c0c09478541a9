"""pre-commit runs what `make lint` runs, with the ruff pyproject.toml pins; mypy checks every
Python tree the project has."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def ruff_pin() -> str:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    (pin,) = [d for d in dev if re.match(r"ruff\b", d)]
    assert re.fullmatch(r"ruff==[0-9][0-9.]*", pin), f"ruff must be pinned exactly: {pin}"
    return pin


def lint_commands() -> list[str]:
    """The ruff commands of the Makefile's lint target, without the venv's path."""
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    return [line.strip().removeprefix("$(BIN)/") for line in target.splitlines()[1:] if "ruff" in line]


def test_pre_commit_runs_make_lints_ruff_commands_with_the_pinned_ruff() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert [hook["entry"] for hook in hooks] == lint_commands()
    assert {dep for hook in hooks for dep in hook["additional_dependencies"]} == {ruff_pin()}
    assert all(hook["pass_filenames"] is False for hook in hooks)  # the whole tree, as make lint


def test_mypy_checks_every_python_tree() -> None:
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    trees = {"functions/jobsched", "functions/jobsched_local", "functions/jobsched_cli"}
    assert {*trees, "functions/jobsched_console", "infra", "chaos", "bench", "tests"} <= set(files)
