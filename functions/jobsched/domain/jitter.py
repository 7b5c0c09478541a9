"""Randomness derived from the run key, so a retried sweep or a redelivered message
computes exactly the same start jitter and retry delay as the first attempt did."""

from __future__ import annotations

import hashlib
import math

# Past this exponent base * 2**attempt is above any sane cap; clamping keeps ldexp finite.
_MAX_EXPONENT = 1024
_FRACTION_BITS = 53  # a float's mantissa: every value of the fraction is exact


def start_jitter_seconds(run_key: str, max_seconds: int) -> int:
    """Uniform integer in [0, max_seconds] picked by sha256(run_key)."""
    if max_seconds < 0:
        raise ValueError("max_seconds must not be negative")
    if max_seconds == 0:
        return 0
    # 256 bits modulo a small range: the bias is far below anything measurable.
    return int.from_bytes(_digest(run_key), "big") % (max_seconds + 1)


def retry_delay_seconds(run_key: str, attempt: int, base_seconds: float, cap_seconds: float) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)], picked by sha256(run_key#attempt).

    `attempt` is 0 for the first retry."""
    if attempt < 0:
        raise ValueError("attempt must not be negative")
    if base_seconds < 0 or cap_seconds < 0:
        raise ValueError("base_seconds and cap_seconds must not be negative")
    try:
        ceiling = math.ldexp(base_seconds, min(attempt, _MAX_EXPONENT))
    except OverflowError:
        ceiling = math.inf
    bound = min(cap_seconds, ceiling)
    top_bits = int.from_bytes(_digest(f"{run_key}#{attempt}")[:8], "big") >> (64 - _FRACTION_BITS)
    fraction = top_bits / ((1 << _FRACTION_BITS) - 1)  # in [0, 1], both ends reachable
    return fraction * bound


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()
