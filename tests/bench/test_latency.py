"""One percentile for every benchmark: nearest rank, checked against its definition."""

from __future__ import annotations

import math
import random

import pytest

from bench.latency import latency_ms, percentile


def nearest_rank(values: list[float], q: float) -> float:
    """The textbook definition: the smallest value with at least q% of the values at or below."""
    ordered = sorted(values)
    for v in ordered:
        if sum(x <= v for x in ordered) * 100 >= q * len(ordered):
            return v
    return ordered[-1]


def test_percentiles_are_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 95) == 95
    assert percentile([7.0], 95) == 7.0 and percentile([], 95) == 0.0
    assert percentile([1, 2, 3, 4], 75) == 3, "rank ceil(0.75 x 4) = 3, not one above"
    assert percentile(values, 7) == 7, "7 / 100 * 100 is 7.000000000000001 in floats"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 10, 20, 21, 30, 99, 100, 101])
@pytest.mark.parametrize("q", [0, 1, 7, 14, 25, 28, 50, 57, 75, 90, 95, 99, 100])
def test_percentile_matches_the_definition(n, q):
    rng = random.Random(n * 1000 + q)
    values = [rng.choice([rng.uniform(0, 100), 5.0]) for _ in range(n)]  # with ties
    assert percentile(values, q) == nearest_rank(values, q)


def test_percentile_is_a_value_of_the_list_and_grows_with_q():
    rng = random.Random(3)
    values = [rng.expovariate(1.0) for _ in range(57)]
    got = [percentile(values, q) for q in range(0, 101)]
    assert all(g in values for g in got)
    assert got == sorted(got)
    assert got[0] == min(values) and got[-1] == max(values)


def test_percentile_does_not_reorder_its_argument():
    values = [3.0, 1.0, 2.0]
    percentile(values, 50)
    assert values == [3.0, 1.0, 2.0]


def test_latency_summary_rounds_to_a_tenth_of_a_millisecond():
    values = [float(v) + 0.04 for v in range(1, 201)]
    got = latency_ms(values)
    assert got == {"p50_ms": 100.0, "p95_ms": 190.0, "p99_ms": 198.0, "max_ms": 200.0}


def test_latency_summary_of_nothing_is_zeros():
    assert latency_ms([]) == {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}


def test_p50_p95_p99_max_are_ordered():
    rng = random.Random(11)
    got = latency_ms([rng.lognormvariate(3, 1) for _ in range(333)])
    assert got["p50_ms"] <= got["p95_ms"] <= got["p99_ms"] <= got["max_ms"]
    assert not any(math.isnan(v) for v in got.values())
