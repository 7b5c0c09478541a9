"""Trace headers read strictly and never raising, and the values built from them valid for
X-Ray and for W3C Trace Context."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from jobsched.domain.tracing import (
    MAX_HEADER_CHARS,
    TraceContext,
    console_url,
    parse_trace_header,
    traceparent,
)

ROOT = "1-674e6a07-8b1c2d3e4f5a6b7c8d9e0f1a"
TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-0[01]")


def test_lambdas_header_is_read_in_any_field_order_and_written_back():
    header = f"Parent=53995c3f42cd8ad8;Sampled=1;Root={ROOT};Lineage=a87bd80c:0"
    context = parse_trace_header(header)
    assert context == TraceContext(ROOT, "53995c3f42cd8ad8", True)
    assert context.header() == f"Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=1"
    assert parse_trace_header(f"Root={ROOT}") == TraceContext(ROOT)
    assert TraceContext(ROOT).header() == f"Root={ROOT}"
    assert context.w3c_trace_id == "674e6a078b1c2d3e4f5a6b7c8d9e0f1a"


def test_a_malformed_header_is_no_header():
    for header in (
        None,
        "",
        "Root=",
        "Root=1-674e6a07-8b1c2d3e4f5a6b7c8d9e0f1",  # one digit short
        "Root=2-674e6a07-8b1c2d3e4f5a6b7c8d9e0f1a",  # another version
        "Root=1-674E6A07-8B1C2D3E4F5A6B7C8D9E0F1A",  # upper case
        f"Root={ROOT};Parent=xyz",
        f"Root={ROOT};Sampled=?",
        f"Root={ROOT};Sampled=yes",
        "Parent=53995c3f42cd8ad8",
        f"Root={ROOT};" + "x" * MAX_HEADER_CHARS,
        f" Root = {ROOT}",
    ):
        assert parse_trace_header(header) is None, header


@given(st.text(max_size=400))
def test_no_text_makes_parsing_raise(text):
    context = parse_trace_header(text)
    if context is not None:
        assert parse_trace_header(context.header()) == context


@given(st.text(min_size=1, max_size=200), st.integers(min_value=1, max_value=100), st.booleans())
def test_every_traceparent_is_valid_and_one_run_keeps_one_trace(run_key, attempt, sampled):
    own = traceparent(None, run_key, attempt)
    assert TRACEPARENT.fullmatch(own) and own.endswith("-00")
    assert own.split("-")[1] == traceparent(None, run_key, attempt + 1).split("-")[1]
    assert own.split("-")[2] != traceparent(None, run_key, attempt + 1).split("-")[2]
    under = traceparent(TraceContext(ROOT, None, sampled), run_key, attempt)
    assert TRACEPARENT.fullmatch(under)
    assert under.split("-")[1] == "674e6a078b1c2d3e4f5a6b7c8d9e0f1a"
    assert under.endswith("-01" if sampled else "-00")
    # Under the invocation's segment when Lambda named it.
    child = traceparent(TraceContext(ROOT, "53995c3f42cd8ad8", sampled), run_key, attempt)
    assert child.split("-")[2] == "53995c3f42cd8ad8"


def test_the_console_link_names_the_region_and_the_trace():
    assert console_url("eu-west-1", ROOT) == (
        f"https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1#xray:traces/{ROOT}"
    )
    assert "/" not in console_url("a/b", ROOT).split("//", 1)[1].split(".")[0]
    assert console_url("cn-north-1", ROOT).startswith(
        "https://console.amazonaws.cn/cloudwatch/home?region=cn-north-1"
    )
    assert console_url("us-gov-west-1", ROOT).startswith("https://console.amazonaws-us-gov.com/")
