"""How wrong the runtime predictor was, measured on the jobs of a replay.

For every job the replay records, at its first start, the whole runtime the
scheduler's predictor believed it would take (``ReplayJob.predicted_s``; the
oracle policy records the predictor's answer too, although it plans with the
truth). When the job has finished, its error is ``predicted - true runtime``:

- ``median_abs_error_s`` / ``p90_abs_error_s``: quantiles of ``|error|``;
- ``underestimate_share``: the share of jobs predicted shorter than they ran
  (those are the ones that overrun a backfill slot or delay a reservation);
- ``median_rel_error``: the median of ``|error| / true runtime``;
- ``by_source``: how many predictions came from each level of the hierarchy.

Pure: ``prediction_error(jobs)`` returns a plain dict (``overall.prediction`` of
``--json``), ``table(d)`` the rows of the text report.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import metrics as m
from .pools import DONE, ReplayJob


def prediction_error(jobs: Iterable[ReplayJob]) -> dict[str, Any]:
    """Error figures of the predictions made at first start, over the finished jobs."""
    abs_err: list[float] = []
    rel_err: list[float] = []
    under = 0
    by_source: dict[str, int] = {}
    for j in jobs:
        if j.state != DONE or j.predicted_s is None or not j.duration > 0:
            continue
        err = j.predicted_s - j.duration
        abs_err.append(abs(err))
        rel_err.append(abs(err) / j.duration)
        under += err < 0
        src = j.predicted_source or "unknown"
        by_source[src] = by_source.get(src, 0) + 1
    abs_err.sort()
    rel_err.sort()
    n = len(abs_err)
    return {
        "jobs": n,
        "median_abs_error_s": m.rounded(m.quantile(abs_err, 0.5), 1),
        "p90_abs_error_s": m.rounded(m.quantile(abs_err, 0.9), 1),
        "mean_abs_error_s": m.rounded(m.mean(abs_err), 1),
        "underestimate_share": m.rounded(under / n if n else None),
        "median_rel_error": m.rounded(m.quantile(rel_err, 0.5)),
        "by_source": dict(sorted(by_source.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def table(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the error figures, for the text report."""

    def dur(s: float | None) -> str:
        return "-" if s is None else f"{s:,.0f} s"

    share = d.get("underestimate_share")
    rel = d.get("median_rel_error")
    return [
        ("jobs measured", f"{d.get('jobs', 0):,}"),
        ("median |error|", dur(d.get("median_abs_error_s"))),
        ("p90 |error|", dur(d.get("p90_abs_error_s"))),
        ("underestimated", "-" if share is None else f"{share:.1%}"),
        ("median |error| / runtime", "-" if rel is None else f"{rel:.2f}"),
    ]
