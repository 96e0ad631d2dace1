"""``ledger.quota_gpu_seconds``: the quota held over a period, from its changes."""

from __future__ import annotations

import pytest

from quotas.ledger import quota_gpu_seconds


@pytest.mark.parametrize(
    ("current", "changes", "expected"),
    [
        pytest.param(100, [], 100 * 10, id="no change: the quota now"),
        pytest.param(200, [(4, 100, 200)], 100 * 4 + 200 * 6, id="raised in the period"),
        pytest.param(50, [(4, 100, 200), (12, 200, 50)], 100 * 4 + 200 * 6, id="a change after it"),
        pytest.param(300, [(15, 100, 300)], 100 * 10, id="only a change after the period"),
        pytest.param(100, [(0, 100, 100), (10, 100, 100)], 100 * 10, id="changes at both edges"),
        pytest.param(None, [], None, id="no quota of its own"),
        pytest.param(80, [(5, None, 80)], None, id="none for part of it"),
        pytest.param(None, [(5, 80, None)], None, id="none from a moment on"),
        pytest.param(0, [], 0, id="a zero quota"),
    ],
)
def test_the_quota_is_integrated_over_the_period(current, changes, expected):
    assert quota_gpu_seconds(current, changes, 0.0, 10.0) == expected


def test_an_empty_period_has_no_quota_hours():
    assert quota_gpu_seconds(100, [], 10.0, 10.0) is None
