"""Trace context: the X-Ray trace header a Lambda invocation runs under, and the W3C
`traceparent` an HTTP target receives.

Lambda puts the invocation's header in the `_X_AMZN_TRACE_ID` environment variable
(`Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>`, fields in any order, others
ignored). Every history entry of a run records the trace id of the invocation that wrote it
(the first, the API request that created or triggered the run, or the sweep that made it);
the outbox hands that first trace to SQS (`AWSTraceHeader`), so X-Ray links the worker's
invocation to it. An invocation Lambda did not sample (`Sampled=0`) still has an id, which
every log line it wrote carries (`xray_trace_id`), but no trace in X-Ray.

Pure: parsing never raises (a header it cannot read is no header), and every value built
here is one AWS and the W3C Trace Context specification accept."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from urllib.parse import quote

TRACE_ENV = "_X_AMZN_TRACE_ID"  # set by Lambda for each invocation
_ROOT = re.compile(r"1-([0-9a-f]{8})-([0-9a-f]{24})")
_PARENT = re.compile(r"[0-9a-f]{16}")
MAX_HEADER_CHARS = 256  # far above a real header (about 80): a longer one is not read


@dataclass(frozen=True)
class TraceContext:
    """`root`: the X-Ray trace id (`1-<8 hex>-<24 hex>`); `parent`: the segment the next
    one descends from (16 hex), if known; `sampled`: the sampling decision, if made."""

    root: str
    parent: str | None = None
    sampled: bool | None = None

    def header(self) -> str:
        """As X-Ray writes it (`AWSTraceHeader`, `X-Amzn-Trace-Id`)."""
        fields = [f"Root={self.root}"]
        if self.parent is not None:
            fields.append(f"Parent={self.parent}")
        if self.sampled is not None:
            fields.append(f"Sampled={int(self.sampled)}")
        return ";".join(fields)

    @property
    def w3c_trace_id(self) -> str:
        """The same trace id as W3C writes it: the 32 hex digits without `1-` and the dash."""
        match = _ROOT.fullmatch(self.root)
        assert match is not None  # parse_trace_header checked it
        return match.group(1) + match.group(2)


def parse_trace_header(header: str | None) -> TraceContext | None:
    """The trace context in an X-Ray header; None when there is none, or it is malformed
    (no valid `Root`, a `Parent` that is not 16 hex digits, a `Sampled` not 0 or 1, or
    longer than MAX_HEADER_CHARS). Never raises."""
    if not header or len(header) > MAX_HEADER_CHARS:
        return None
    fields: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            fields.setdefault(name, value)
    root = fields.get("Root", "")
    if not _ROOT.fullmatch(root):
        return None
    parent = fields.get("Parent")
    if parent is not None and not _PARENT.fullmatch(parent):
        return None
    sampled = fields.get("Sampled")
    if sampled not in (None, "0", "1"):
        return None  # `?` (not yet decided) reads as none: the run is not forced into a trace
    return TraceContext(root, parent, None if sampled is None else sampled == "1")


def traceparent(context: TraceContext | None, run_key: str, attempt: int) -> str:
    """The W3C `traceparent` for one attempt's call (`00-<32 hex>-<16 hex>-<2 hex>`): under
    `context` (the calling invocation's trace) when there is one, its parent the
    invocation's segment (`Parent`), so the receiver's spans hang under the worker's; else
    a trace of the run's own, derived from its key (the same trace id for every attempt),
    with a span per attempt, not sampled."""
    span = hashlib.sha256(f"{run_key}#{attempt}".encode()).hexdigest()[:16]
    if span == "0" * 16:
        span = "0" * 15 + "1"  # all zeros is invalid
    if context is None:
        trace_id = hashlib.sha256(run_key.encode()).hexdigest()[:32]
        return f"00-{trace_id}-{span}-00"
    parent = context.parent if context.parent and context.parent != "0" * 16 else span
    return f"00-{context.w3c_trace_id}-{parent}-{'01' if context.sampled else '00'}"


# The AWS console's host in each partition, by the region's prefix (the commercial one else).
_CONSOLES = (("cn-", "console.amazonaws.cn"), ("us-gov-", "console.amazonaws-us-gov.com"))


def console_url(region: str, trace_id: str) -> str:
    """The CloudWatch console's page for the X-Ray trace `trace_id` in `region`, on its
    partition's console."""
    region = quote(region, safe="")
    host = next(
        (h for prefix, h in _CONSOLES if region.startswith(prefix)), f"{region}.console.aws.amazon.com"
    )
    return f"https://{host}/cloudwatch/home?region={region}#xray:traces/{quote(trace_id, safe='')}"
