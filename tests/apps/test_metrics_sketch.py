"""The quantile sketch: within its relative accuracy of the exact percentile, and exact
under merge (a merged sketch is the sketch of all the values, whatever the split)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventplatform.apps.metrics.sketch import (
    PERCENTILES,
    RELATIVE_ACCURACY,
    SMALLEST,
    merged,
    percentile,
    representative,
    sketch_of,
)

values = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


def exact(ordered: list[float], p: int) -> float:
    return ordered[p * (len(ordered) - 1) // 100]


@given(st.lists(values, min_size=1, max_size=300))
def test_percentiles_are_within_the_relative_accuracy(sample: list[float]) -> None:
    sketch = sketch_of(sample)
    ordered = sorted(sample)
    for p in (0, *PERCENTILES, 100):
        wanted = exact(ordered, p)
        found = percentile(sketch, p)
        assert found is not None
        if abs(wanted) < SMALLEST:
            assert found == 0.0
        else:
            assert abs(found - wanted) <= RELATIVE_ACCURACY * abs(wanted) * (1 + 1e-12)


@given(st.lists(values, max_size=200), st.lists(st.integers(0, 200), max_size=5))
def test_a_merge_is_the_sketch_of_everything(sample: list[float], cuts: list[int]) -> None:
    bounds = sorted({0, len(sample), *(min(cut, len(sample)) for cut in cuts)})
    parts = [sample[a:b] for a, b in pairwise(bounds)]
    together = merged(*(sketch_of(part) for part in parts))
    assert together == sketch_of(sample)
    for p in PERCENTILES:
        assert percentile(together, p) == percentile(sketch_of(sample), p)


def test_representatives_keep_order_and_sign() -> None:
    assert representative(0.0) == 0.0
    assert representative(1e-12) == 0.0
    assert representative(-5.0) == -representative(5.0)
    assert representative(10.0) < representative(11.0)


def test_an_empty_sketch_has_no_percentile_and_a_bad_one_is_refused() -> None:
    assert percentile({}, 50) is None
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile({1.0: 1}, 101)
