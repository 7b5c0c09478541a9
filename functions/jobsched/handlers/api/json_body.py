"""Request bodies are JSON, decoded strictly: what the standard decoder would accept but the
API must not (NaN, numbers past what can be stored, nesting past what can be validated, text
that is not Unicode, a member name given twice in one object) is refused as a 400 naming the
field it sits in."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

MAX_JSON_DEPTH = 32  # arrays and objects nested in one body
MAX_NUMBER_CHARS = 64  # characters of one JSON number
_SURROGATE = re.compile("[\ud800-\udfff]")
_PATH_SHOWN = 8  # segments of a field path named in an error


class _Refused:
    """What the decoder leaves where a value breaks a rule, so the walk can name its field."""

    __slots__ = ("rule",)

    def __init__(self, rule: str) -> None:
        self.rule = rule


def _number(text: str, kind: type[int] | type[float]) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        return _Refused(f"is a number of {len(text)} characters; at most {MAX_NUMBER_CHARS}")
    value = kind(text)
    if isinstance(value, float) and not math.isfinite(value):
        return _Refused("is a number beyond the range of a 64-bit float")
    return value


def _constant(text: str) -> Any:
    return _Refused(f"{text} is not JSON; numbers are finite")


DUPLICATE_RULE = "is given more than once in its object; member names must be unique"


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose member names are unique. The standard decoder keeps the last of two
    values silently (RFC 8259 leaves it to the receiver): a repeated name is refused instead,
    so no reader of the body (a proxy, a validator, a log) can see another value than ours."""
    members: dict[str, Any] = {}
    for name, value in pairs:
        members[name] = _Refused(DUPLICATE_RULE) if name in members else value
    return members


def decode_json(text: str | bytes) -> Any:
    """The body's JSON, or a 400 naming the field: no NaN or Infinity, no number longer than
    MAX_NUMBER_CHARS, no nesting deeper than MAX_JSON_DEPTH, no lone UTF-16 surrogate in a
    string (it is not Unicode text and cannot be stored or echoed), no member name twice in
    one object (the 400 names that member, at any depth)."""
    try:
        data = json.loads(
            text,
            parse_int=lambda t: _number(t, int),
            parse_float=lambda t: _number(t, float),
            parse_constant=_constant,
            object_pairs_hook=_object,
        )
    except RecursionError:
        raise _invalid_body(
            _too_deep_at(text), f"nests deeper than {MAX_JSON_DEPTH} arrays or objects"
        ) from None
    problem = _first_problem(data)
    if problem is not None:
        raise _invalid_body(*problem)
    return data


def _first_problem(data: Any) -> tuple[tuple[str | int, ...], str] | None:
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _Refused):
            return path, value.rule
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path, "contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not Unicode text"
            continue
        if not isinstance(value, dict | list):
            continue
        if len(path) >= MAX_JSON_DEPTH:
            return path, f"nests deeper than {MAX_JSON_DEPTH} arrays or objects"
        if isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    return path, "has a member name with a lone UTF-16 surrogate, which is not Unicode text"
                stack.append((item, (*path, key)))
        else:
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
    return None


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]')


def _too_deep_at(text: str | bytes) -> tuple[str | int, ...]:
    """Where a body too deep for the parser first nests too deep (a scan of its brackets)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    frames: list[list[Any]] = []  # [bracket, member name or index]
    last_string = ""
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            last_string = token
        elif token in "[{":
            if len(frames) >= MAX_JSON_DEPTH:
                break
            frames.append([token, 0 if token == "[" else ""])
        elif token in "]}":
            if frames:
                frames.pop()
        elif frames and token == ",":
            if frames[-1][0] == "[":
                frames[-1][1] += 1
        elif frames and token == ":":
            try:
                frames[-1][1] = str(json.loads(last_string))
            except ValueError:
                frames[-1][1] = last_string.strip('"')
    return tuple(frame[1] for frame in frames)


def _invalid_body(path: tuple[str | int, ...], rule: str) -> RequestValidationError:
    if path and isinstance(path[0], int):
        path = ()  # the body itself is an array: it is the body that is wrong
    shown = tuple(p[:64] if isinstance(p, str) else p for p in path[:_PATH_SHOWN])
    return RequestValidationError(
        [{"type": "json_refused", "loc": ("body", *shown), "msg": rule, "ctx": {"rule": rule}}]
    )
