"""domain.budget: whatever a target answers, what a run stores is JSON within its budget, and
storing it never raises (a success whose answer cannot be kept is still a success)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.budget import (
    MAX_HISTORY,
    MAX_RESULT_BYTES,
    MAX_RUN_BYTES,
    clip_bytes,
    doc_bytes,
    fit,
    storable_result,
)
from jobsched.domain.runs import Run, RunState, Transition

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
odd_values = st.recursive(
    st.none()
    | st.integers()
    | st.floats()
    | st.text(alphabet=st.characters(codec=None, min_codepoint=0xD7F0, max_codepoint=0xE010))
    | st.binary(max_size=8)
    | st.sets(st.integers(), max_size=3)
    | st.integers(min_value=4000, max_value=6000).map(lambda digits: 10**digits),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(), st.tuples(st.integers())), children, max_size=3
        )
    ),
    max_leaves=20,
)


def stored_text(value) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@given(json_values)
@settings(max_examples=300)
def test_plain_json_within_the_budget_is_kept_exactly(value):
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return  # lone surrogates: covered below
    if len(text.encode()) <= MAX_RESULT_BYTES:
        assert storable_result(value) == value


@given(odd_values)
@settings(max_examples=300)
def test_anything_becomes_storable_json_within_the_budget_without_raising(value):
    kept = storable_result(value)
    text = stored_text(kept)  # strict JSON: no NaN, no lone surrogate, string keys
    text.encode("utf-8")
    assert len(text.encode()) <= MAX_RESULT_BYTES + 200
    assert json.loads(text) == kept


def test_a_value_whose_text_raises_or_whose_keys_collide_is_still_stored():
    class Hostile:
        def __str__(self) -> str:
            raise AttributeError("no text")

        def __repr__(self) -> str:
            raise AttributeError("no repr")

    kept = storable_result({"x": Hostile()})
    assert kept["value"] == {"x": "<Hostile>"} and kept["dropped"]
    collided = storable_result({1: "a", "1": "b"})
    assert any("kept once" in note for note in collided["dropped"])
    # The wrapper that says what was dropped stays within the budget too.
    wrapped = storable_result({(i,): "x" * 20 for i in range(150)})
    assert len(stored_text(wrapped).encode()) <= MAX_RESULT_BYTES


def test_falsy_results_are_themselves():
    falsy: tuple[object, ...] = (0, False, "", {}, [], None, 0.0)
    for value in falsy:
        kept = storable_result(value)
        assert kept == value and type(kept) is type(value)


def test_what_cannot_be_stored_as_it_is_says_what_was_dropped():
    assert storable_result({(1, 2): "x"})["dropped"]
    assert storable_result(10**5000)["dropped"]
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert storable_result(deep)["truncated"] is True


@given(st.text(), st.integers(min_value=4, max_value=600))
def test_clipped_text_fits_and_is_encodable(text, limit):
    clipped = clip_bytes(text, limit)
    assert clipped is not None and len(clipped.encode("utf-8")) <= limit


def _run_with_history(entries: int, message: str) -> Run:
    history = [
        Transition(at=T0, actor="x", source=None, target=RunState.PENDING, fence=0, attempt=0),
        *[
            Transition(
                at=T0, actor="worker:w", target=RunState.RETRY_WAIT, fence=i, attempt=i, error_message=message
            )
            for i in range(entries)
        ],
    ]
    return Run(
        run_key="j_x@2026-11-02T08:00:00Z",
        job_id="j_x",
        tenant="t",
        job_type="ok",
        scheduled_for=T0,
        due_at=T0,
        state=RunState.RETRY_WAIT,
        definition_version=1,
        created_at=T0,
        updated_at=T0,
        history=history,
        payload={"blob": "p" * 60_000},
    )


@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=1000))
@settings(max_examples=40, deadline=None)
def test_a_fitted_run_stays_in_budget_and_keeps_its_creation(entries, message_bytes):
    fitted = fit(_run_with_history(entries, "m" * message_bytes))
    assert len(fitted.history) <= MAX_HISTORY
    assert fitted.history[0].source is None
    assert doc_bytes(fitted) <= MAX_RUN_BYTES or len(fitted.history) <= 2
    assert fitted.history_dropped == entries + 1 - len(fitted.history)
