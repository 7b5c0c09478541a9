"""Cutting a sink's entries into requests within its count and byte limits (PutEvents,
SendMessageBatch)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def batches(
    entries: Sequence[T], size: Callable[[T], int], *, max_entries: int, max_bytes: int
) -> list[list[T]]:
    """`entries` in order, cut into requests of at most `max_entries` entries whose `size`s
    add up to at most `max_bytes`. Raises ValueError for an entry larger than a whole request
    (callers leave those out first)."""
    out: list[list[T]] = []
    current: list[T] = []
    total = 0
    for entry in entries:
        entry_size = size(entry)
        if entry_size > max_bytes:
            raise ValueError(f"an entry of {entry_size} bytes is over the request's limit of {max_bytes}")
        if current and (len(current) == max_entries or total + entry_size > max_bytes):
            out.append(current)
            current, total = [], 0
        current.append(entry)
        total += entry_size
    if current:
        out.append(current)
    return out
