"""CPU seconds of process trees, read from /proc (Linux): utime + stime of each live process,
plus cutime + cstime (the children it has already reaped: PostgreSQL's exited backends, a
worker's finished subprocesses). Read before and after an interval; the difference is what
the tree used in it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return text[text.rindex(")") + 2 :].split()


def parse_stat_fields(fields: list[str]) -> tuple[int, float]:
    """(parent pid, CPU seconds incl. reaped children) from /proc/<pid>/stat's fields after
    the command name (field 3 onwards: state, ppid, ..., utime at 14, stime, cutime, cstime)."""
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / TICKS


def processes() -> dict[int, tuple[int, float]]:
    """Every live process: pid -> (parent pid, CPU seconds)."""
    out: dict[int, tuple[int, float]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is not None:
            out[int(entry.name)] = parse_stat_fields(fields)
    return out


def tree(root: int, table: dict[int, tuple[int, float]], exclude: Iterable[int] = ()) -> set[int]:
    """`root` and its descendants in `table`, without the subtrees rooted at `exclude`."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in table.items():
        children.setdefault(ppid, []).append(pid)
    skip = set(exclude)
    found: set[int] = set()
    stack = [root] if root in table and root not in skip else []
    while stack:
        pid = stack.pop()
        found.add(pid)
        stack.extend(c for c in children.get(pid, []) if c not in skip and c not in found)
    return found


def cpu_seconds(groups: dict[str, tuple[int, tuple[int, ...]]]) -> dict[str, float]:
    """For each named group (root pid, excluded subtree roots): the CPU seconds its live tree
    has used so far."""
    table = processes()
    return {
        name: sum(table[pid][1] for pid in tree(root, table, exclude))
        for name, (root, exclude) in groups.items()
    }


def children_of(pid: int) -> list[int]:
    return [p for p, (ppid, _cpu) in processes().items() if ppid == pid]
