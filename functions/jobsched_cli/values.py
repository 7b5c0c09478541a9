"""Values typed on the command line: --set assignments, JSON, durations, instants."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad command-line input found after argparse (exit code 2)."""


# --- parsing helpers ---


def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, booleans, null, objects), else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """`key=value` pairs into a body; dotted keys (`retry.baseSeconds=1`) nest."""
    body: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected key=value")
        parts = key.split(".")
        if any(not p for p in parts):
            raise UsageError(f"--set {item!r}: empty name in {key!r}")
        node = body
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(f"--set {item!r}: {'.'.join(parts[: depth + 1])} is already set to a value")
            node = child
        if isinstance(node.get(parts[-1]), dict):
            raise UsageError(f"--set {item!r}: {key} already has nested fields")
        node[parts[-1]] = parse_value(raw)
    return body


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def parse_json_arg(option: str, text: str) -> Any:
    """A JSON document, or `@file` (`@-` for stdin) holding one."""
    source = text
    if text.startswith("@"):
        name = text[1:]
        try:
            source = sys.stdin.read() if name == "-" else Path(name).read_text()
        except OSError as exc:
            raise UsageError(f"{option}: cannot read {name}: {exc.strerror or exc}") from None
    try:
        return json.loads(source)
    except ValueError as exc:
        raise UsageError(f"{option}: not valid JSON ({exc})") from None


_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int | None:
    """`90`, `90s`, `15m`, `1h30m`, `2d` as seconds; None when it is none of these."""
    value = text.strip().lower()
    if value.isdigit():
        return int(value)
    if value and _DURATION.sub("", value) == "":
        return sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(value))
    return None


def parse_every(text: str) -> int | str:
    """Seconds or a shorthand become a number; anything else (ISO 8601 `PT15M`) goes as is,
    so the server's rule decides."""
    seconds = duration_seconds(text)
    return seconds if seconds is not None else text


def parse_instant(text: str, now: datetime | None = None) -> str:
    """RFC 3339 as is; `now`, `+DURATION` or `-DURATION` relative to now (`+30s`, `-2h`), in UTC."""
    value = text.strip()
    current = (now or datetime.now(UTC)).replace(microsecond=0)
    if value == "now":
        return current.strftime("%Y-%m-%dT%H:%M:%SZ")
    if value.startswith(("+", "-")):
        seconds = duration_seconds(value[1:])
        if seconds is None:
            raise UsageError(
                f"{text!r}: expected an instant, now, +DURATION or -DURATION such as +30s or -2h"
            )
        sign = 1 if value[0] == "+" else -1
        return (current + timedelta(seconds=sign * seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def parse_since(text: str, now: datetime | None = None) -> str:
    """`parse_instant`, and a bare DURATION meaning that long ago (`--since 1h`)."""
    seconds = duration_seconds(text)
    return parse_instant(f"-{text.strip()}" if seconds is not None else text, now)


# argparse reads `-2h` as an option (only plain negative numbers pass as values), so
# `--start -2h` would stop with "expected one argument": such a value is glued to its option.
INSTANT_OPTIONS = frozenset({"--start", "--end", "--at", "--since", "--until"})
_NEGATIVE_DURATION = re.compile(r"-\d[\dsmhd]*", re.IGNORECASE)


def attach_negative_values(argv: Sequence[str]) -> list[str]:
    """`--start -2h` → `--start=-2h` for the options that take an instant; nothing after `--`."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--":
            return out + list(argv[index:])
        following = argv[index + 1] if index + 1 < len(argv) else None
        if token in INSTANT_OPTIONS and following is not None and _NEGATIVE_DURATION.fullmatch(following):
            out.append(f"{token}={following}")
            index += 2
            continue
        out.append(token)
        index += 1
    return out


# --- output ---
