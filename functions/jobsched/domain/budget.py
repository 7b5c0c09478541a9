"""The byte budget of a run: what may be stored on one, and how it is cut to fit.

A run is rewritten whole by every transition and must stay far below DynamoDB's 400 KB item
limit however often it is retried or redriven, and whatever a target answers. Everything
here is pure and total: a value that cannot be stored as it is comes back as something that
can, with a note of what was dropped. Nothing here raises on a caller's data, because a
successful effect whose answer cannot be kept is still a success (raising would repeat it).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runs import Run

MAX_ERROR_CLASS_BYTES = 128
MAX_ERROR_MESSAGE_BYTES = 1024
MAX_REASON_BYTES = 512
MAX_RESULT_BYTES = 4096
RESULT_PREVIEW_BYTES = 1024
# History kept in the run: its creation and the latest entries; the rest is counted.
MAX_HISTORY = 50
# The run's stored document (payload <= 64 KiB, target, history, result) stays under this;
# DynamoDB's item limit is 400 KB. Past it, history is cut down to its first and last entries.
MAX_RUN_BYTES = 200_000
# Below this many entries a run cannot reach MAX_RUN_BYTES (the job is at most 100 KiB, an
# entry at most ~2.5 KB, a result 4 KB), so the usual 4-transition run is never measured.
SMALL_HISTORY = 10
# Deeper than this, a result is not walked (Python's own recursion limit is ~1,000 frames).
MAX_RESULT_DEPTH = 64
_MARKER = "…"


def clip_bytes(text: str | None, limit: int) -> str | None:
    """`text` cut to at most `limit` bytes of UTF-8 (never inside a character), marked with
    "…" when cut. A lone surrogate becomes "?": the result is always encodable."""
    if text is None:
        return None
    encoded = text.encode("utf-8", "replace")  # a lone surrogate becomes "?"
    if len(encoded) <= limit:
        return encoded.decode("utf-8")
    cut = encoded[: limit - len(_MARKER.encode())].decode("utf-8", "ignore")
    return cut + _MARKER


def _clean_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (DynamoDB stores UTF-8 only)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class _Unstorable(Exception):
    """A part of a value JSON cannot hold as it is (too deep)."""


def _plain(value: Any, depth: int, notes: set[str]) -> Any:
    """`value` as plain JSON data: strings cleaned, keys made strings, tuples made lists,
    non-finite floats and over-long integers made strings, anything else its `str`."""
    if depth > MAX_RESULT_DEPTH:
        raise _Unstorable(f"nested deeper than {MAX_RESULT_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) < 10**300:
            return value
        notes.add("an integer too long for JSON numbers was kept as text")
        return f"<integer of {value.bit_length()} bits>"
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        notes.add("a non-finite number was kept as text")
        return str(value)
    if isinstance(value, str):
        cleaned = _clean_text(value)
        if cleaned is not value:
            notes.add("invalid UTF-16 (a lone surrogate) was replaced")
        return cleaned
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = key if isinstance(key, str) else json.dumps(_plain(key, depth + 1, notes))
            if not isinstance(key, str):
                notes.add("a non-string key was kept as its JSON text")
            name = _clean_text(name)
            if name in out:
                notes.add(f"keys that became the same text were kept once: {clip_bytes(name, 64)}")
            out[name] = _plain(item, depth + 1, notes)
        return out
    if isinstance(value, list | tuple):
        return [_plain(item, depth + 1, notes) for item in value]
    notes.add(f"a {type(value).__name__} was kept as its text")
    try:
        return _clean_text(str(value))
    except Exception:  # a __str__ that raises says nothing worth keeping
        return f"<{type(value).__name__}>"


def storable_result(value: Any) -> Any:
    """`value` as it is stored on a run: JSON data of at most MAX_RESULT_BYTES.

    Never raises. Plain JSON data within the budget comes back equal to itself (0, false, ""
    and {} included). Otherwise: a value JSON cannot hold (a tuple key, a 5,000-digit integer,
    a lone surrogate, a set) is converted, with `dropped` saying what was changed; a value
    too deep or too large becomes `{"truncated": true, "preview": <its first bytes>}`."""
    notes: set[str] = set()
    try:
        plain = _plain(value, 0, notes)
        kept: Any = {"value": plain, "dropped": sorted(notes)} if notes else plain
        text = json.dumps(kept, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except Exception as exc:  # RecursionError is an Exception; nothing here may escape
        reason = clip_bytes(str(exc) or type(exc).__name__, 256) or type(exc).__name__
        return {"truncated": True, "dropped": [reason], "preview": _preview(value)}
    if len(text.encode("utf-8")) > MAX_RESULT_BYTES:
        return {"truncated": True, "preview": clip_bytes(text, RESULT_PREVIEW_BYTES)}
    return kept


def _preview(value: Any) -> str:
    try:
        text = repr(value)[: RESULT_PREVIEW_BYTES * 2]
    except Exception:  # a repr that raises (or recurses) says nothing worth keeping
        text = f"<{type(value).__name__}>"
    return clip_bytes(text, RESULT_PREVIEW_BYTES) or ""


def doc_bytes(run: Run) -> int:
    return len(run.model_dump_json(exclude_none=True).encode())


def fit(run: Run) -> Run:
    """The run within its byte budget: history capped at MAX_HISTORY entries (creation kept,
    the oldest of the rest dropped and counted in `history_dropped`), and cut further to its
    creation and latest entry if the whole run would still pass MAX_RUN_BYTES."""
    history = run.history
    dropped = run.history_dropped
    if len(history) > MAX_HISTORY:
        cut = len(history) - MAX_HISTORY
        history = [history[0], *history[1 + cut :]]
        dropped += cut
        run = run.model_copy(update={"history": history, "history_dropped": dropped})
    if len(history) > SMALL_HISTORY and doc_bytes(run) > MAX_RUN_BYTES:
        dropped += len(history) - 2
        run = run.model_copy(update={"history": [history[0], history[-1]], "history_dropped": dropped})
    if len(history) > SMALL_HISTORY and run.result is not None and doc_bytes(run) > MAX_RUN_BYTES:
        run = run.model_copy(update={"result": storable_result(run.result)})
    return run
