"""The `jobsched` command line: a client for the HTTP API (with SigV4 for a deployed stack),
and the launcher of local mode.

Not part of the Lambda asset: it runs on the user's machine."""

from .args import build_parser
from .commands import Context, job_body
from .entry import main
from .follow import RunFollower
from .rendering import format_api_error, format_fields, format_table, tail_line
from .values import (
    UsageError,
    attach_negative_values,
    duration_seconds,
    parse_assignments,
    parse_every,
    parse_instant,
    parse_json_arg,
)

__all__ = [
    "Context",
    "RunFollower",
    "UsageError",
    "attach_negative_values",
    "build_parser",
    "duration_seconds",
    "format_api_error",
    "format_fields",
    "format_table",
    "job_body",
    "main",
    "parse_assignments",
    "parse_every",
    "parse_instant",
    "parse_json_arg",
    "tail_line",
]
