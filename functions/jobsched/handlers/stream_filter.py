"""Lambda's event filtering (EventBridge pattern syntax), evaluated here as Lambda would, for
the stream consumers' filter patterns: local mode's glue and the tests deliver exactly the
records a deployed mapping would. Only the rules the patterns use: exact values, `prefix`,
and `exists` (on leaf nodes only, as in Lambda)."""

from __future__ import annotations

from typing import Any

_ABSENT = object()


def matches_pattern(pattern: dict[str, Any], value: Any) -> bool:
    """Whether `value` (a stream record, or a part of one) matches `pattern`."""
    node = value if isinstance(value, dict) else {}
    for key, rule in pattern.items():
        child = node.get(key, _ABSENT)
        if isinstance(rule, dict):
            if not matches_pattern(rule, child):
                return False
        elif not any(_leaf_matches(matcher, child) for matcher in rule):
            return False
    return True


def _leaf_matches(matcher: Any, value: Any) -> bool:
    if isinstance(matcher, dict):
        if "exists" in matcher:
            present = value is not _ABSENT and not isinstance(value, dict)
            return present is bool(matcher["exists"])
        if "prefix" in matcher:
            return isinstance(value, str) and value.startswith(matcher["prefix"])
        raise ValueError(f"unsupported filter rule {matcher}")
    if isinstance(value, list):
        return matcher in value
    return value is not _ABSENT and value == matcher
