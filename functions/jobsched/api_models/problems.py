"""Validation errors as the API reports them: each names the field as the client spelled
it and the rule broken, read from the error's structure (pydantic's `loc`, `type` and
`ctx`), never parsed back out of its message."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from ..domain.errors import FieldProblem, ValidationFailed
from ..domain.models import RULE_ON_FIELD

# Domain paths that the API spells differently (after the camelCase alias).
_RENAMES = {
    "at": "runAt",
    "everySeconds": "every",
    "misfire": "missedRuns",
    "catchUpWindowSeconds": "catchUpWindow",
    "retry.maxAttempts": "maxAttempts",
}
_SOURCES = ("body", "query", "header", "path", "response")


def field_name(loc: Iterable[Any], *, domain: bool = False) -> str:
    """`("body", "retry", "cap_seconds")` → `retry.capSeconds`. With `domain`, the location
    is in the domain's JobSpec, whose `schedule` and `policies` the API spells flat."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in _SOURCES:
        parts = parts[1:]
    if domain and parts and parts[0] in ("schedule", "policies"):
        parts = parts[1:]
    path = ".".join(to_camel(p) if "_" in p else p for p in parts)
    for old, new in _RENAMES.items():
        if path == old or path.startswith(old + "."):
            return new + path[len(old) :]
    return path


def problem_of(error: Any, *, domain: bool = False) -> FieldProblem:
    kind = error.get("type")
    context = error.get("ctx") or {}
    loc = tuple(error.get("loc", ()))
    rule = str(error.get("msg", "is invalid"))
    if kind == RULE_ON_FIELD:
        loc, rule = (*loc, *context["loc"]), context["rule"]
    elif kind == "json_refused":
        rule = context["rule"]
    elif kind in ("value_error", "assertion_error") and "error" in context:
        rule = str(context["error"])
    elif kind == "extra_forbidden":
        rule = "is not a known field"
    elif kind in _TAG_ERRORS:
        # The member that picks the object's shape is what is wrong (`target.kind`), not the
        # object, whose other members cannot be checked until it names a known shape.
        loc, rule = (*loc, _unquoted(context["discriminator"])), _tag_rule(context)
    elif kind == "json_invalid":
        return FieldProblem("body", f"is not valid JSON ({context.get('error') or rule})")
    return FieldProblem(field_name(loc, domain=domain) or "body", rule)


_TAG_ERRORS = ("union_tag_invalid", "union_tag_not_found")  # pydantic's discriminated unions
_TAG_SHOWN = 64  # characters of an unknown tag echoed in the rule


def _unquoted(text: Any) -> str:
    """pydantic's context quotes each name it holds (`'kind'`, `'http', 'sqs'`)."""
    return str(text).replace("'", "")


def _tag_rule(context: dict[str, Any]) -> str:
    if "tag" not in context:
        return "is required"
    return f"must be one of {_unquoted(context['expected_tags'])}; got {str(context['tag'])[:_TAG_SHOWN]}"


def problems_of(errors: Iterable[Any], *, domain: bool = False) -> list[FieldProblem]:
    return [problem_of(error, domain=domain) for error in errors]


def validation_failed(exc: ValidationError, *, domain: bool = False) -> ValidationFailed:
    first, *more = problems_of(exc.errors(), domain=domain)
    return ValidationFailed(first.field, first.rule, *more)
