"""A mergeable quantile sketch with relative accuracy: logarithmic buckets with counts.

A positive value ``v`` falls in bucket ``i = ceil(log_gamma(v))``, which holds
the values in ``(gamma**(i-1), gamma**i]``, with ``gamma = (1 + a) / (1 - a)``.
The bucket's representative ``2 * gamma**i / (gamma + 1)`` is within relative
error ``a`` (:data:`RELATIVE_ACCURACY`) of every value in the bucket.
Negative values mirror the positive ones; values smaller in magnitude than
:data:`SMALLEST` count as zero.

A sketch is a multiset of representatives: ``{representative: count}``. Two
sketches merge by adding counts, so a sketch of an hour is exactly the sum
of its minutes' sketches, in any order, and quantiles read from a merged
sketch equal those read from one built at once. The projections keep a
sketch as rows ``(representative, observations)``; SQL reads quantiles off
them with a running sum (see the ``metrics_quantiles`` view).

Percentile ``p`` is the representative of the bucket holding the value of
rank ``p * (n - 1) / 100`` rounded down (ranks from 0), so it is within
``a`` of that value: the first bucket whose running count ``c`` has
``100 * c > p * (n - 1)``, in integers, so that SQL on either database
and Python pick the same bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
LOG_GAMMA = math.log(GAMMA)
SMALLEST = 1e-9
PERCENTILES = (50, 95, 99)


def representative(value: float) -> float:
    """The representative of the bucket ``value`` falls in (0.0 for values near zero)."""
    magnitude = abs(value)
    if magnitude < SMALLEST:
        return 0.0
    index = math.ceil(math.log(magnitude) / LOG_GAMMA)
    center = 2.0 * GAMMA**index / (GAMMA + 1.0)
    return center if value > 0 else -center


def sketch_of(values: Iterable[float]) -> dict[float, int]:
    sketch: dict[float, int] = {}
    for value in values:
        bucket = representative(value)
        sketch[bucket] = sketch.get(bucket, 0) + 1
    return sketch


def merged(*sketches: Mapping[float, int]) -> dict[float, int]:
    total: dict[float, int] = {}
    for sketch in sketches:
        for bucket, count in sketch.items():
            total[bucket] = total.get(bucket, 0) + count
    return {bucket: count for bucket, count in total.items() if count}


def percentile(sketch: Mapping[float, int], p: int) -> float | None:
    """Percentile ``p`` (0 to 100) of the sketch's values; ``None`` for an empty sketch."""
    if not 0 <= p <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {p}")
    total = sum(sketch.values())
    if total <= 0:
        return None
    running = 0
    for bucket in sorted(sketch):
        running += sketch[bucket]
        if 100 * running > p * (total - 1):
            return bucket
    return max(sketch)
