"""The pre-merge's records from eventlog rows: the headers each row hands the planner."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.spark_projections.columns import ARROW_SCHEMA
from eventplatform.spark_projections.execute import header_pairs

HEADERS = ARROW_SCHEMA.field("headers").type

header = st.tuples(
    st.sampled_from(["event-type", "event-version", "trace", ""]),
    st.one_of(st.none(), st.sampled_from([b"", b"1", b"2", b"PageViewed"]), st.binary(max_size=4)),
)
row = st.one_of(st.none(), st.lists(header, max_size=3))


def expected(rows: list[Any]) -> list[Any]:
    return [[(h["key"], h["value"]) for h in r] or None if r else None for r in rows]


def batch_of(array: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([array], names=["headers"])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.one_of(
        st.lists(row, max_size=12),
        # every row with as many headers: the shared-list path
        st.integers(1, 3).flatmap(lambda n: st.lists(st.lists(header, min_size=n, max_size=n))),
    ),
    cut=st.tuples(st.integers(0, 3), st.integers(0, 3)),
)
def test_header_pairs_equal_the_rows_headers(rows: list[Any], cut: tuple[int, int]) -> None:
    pairs = [None if r is None else [{"key": k, "value": v} for k, v in r] for r in rows]
    array = pa.array(pairs, type=HEADERS)
    start = min(cut[0], len(rows))
    sliced = array.slice(start, max(0, len(rows) - start - cut[1]))
    assert header_pairs(batch_of(sliced)) == expected(sliced.to_pylist())


def test_rows_with_the_same_headers_share_one_list() -> None:
    alike = [{"key": "event-type", "value": b"PageViewed"}, {"key": "event-version", "value": b"1"}]
    other = [{"key": "event-type", "value": b"Clicked"}, {"key": "event-version", "value": b"1"}]
    got = header_pairs(batch_of(pa.array([alike, other, alike], type=HEADERS)))
    assert got[0] is got[2]
    assert got[1] == [("event-type", b"Clicked"), ("event-version", b"1")]
