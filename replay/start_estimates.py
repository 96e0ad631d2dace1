"""How right the estimated start a waiting job is shown was, measured on a replay.

Every verdict of a waiting job carries its one estimated start (``Verdict.estimated_start``)
or none; the portal shows it on the job's page, in the job list and through the API until
the next plan says otherwise. Once the job first starts, each estimate it was shown is
compared with when it started (``error = actual start - estimate``: positive, it started
later than shown):

- ``first``: the estimate of the job's first verdict, what its owner reads right after
  submitting (``jobs``, ``with_estimate_share``, ``median_abs_error_s``,
  ``p90_abs_error_s``, ``late_share``: started more than one cycle after it);
- ``shown``: every estimate, weighted by how long it was shown (from its plan to the job's
  next verdict or start), what a person reading the page at a random moment reads
  (``estimate_share``: the share of that waiting time with an estimate at all);
- ``by_code``: the same ``shown`` figures per pending reason code of the verdict that
  gave the estimate (``time_share`` of the waiting time counted, ``estimate_share``,
  the median and p90 ``|error|``, the ``median_error_s`` with its sign, ``late_share``):
  which explanation's estimate to trust, and which way it errs.

Only the wait before the first start counts (as ``avg_queue_s``); a job that never
started is left out. Jobs started by the plan that first saw them were shown nothing and
are left out too. A job the replay's shortcuts leave out of a plan keeps its last
verdict, as the portal's page keeps the last cycle's.

Pure: ``StartEstimates`` collects, ``summary()`` returns the plain dict
(``overall.start_estimates`` of ``--json``), ``table(d)`` the rows of the text report.
"""

from __future__ import annotations

from typing import Any

from . import metrics as m

# an estimate shown: (shown since, estimated start or None, the verdict's code)
_Shown = tuple[float, float | None, str]


class StartEstimates:
    """The estimates shown to the jobs still waiting, and the errors of the started ones."""

    __slots__ = ("_cycle_s", "_open", "_first_err", "_no_first", "_spans", "_blind_s")

    def __init__(self, cycle_s: float) -> None:
        self._cycle_s = cycle_s
        self._open: dict[int, list[_Shown]] = {}  # waiting job -> its verdicts so far
        self._first_err: list[float] = []  # per started job: start - first estimate
        self._no_first = 0  # started jobs whose first verdict had no estimate
        # per code: (seconds shown, start - estimate); the waiting time shown no estimate
        self._spans: dict[str, list[tuple[float, float]]] = {}
        self._blind_s: dict[str, float] = {}

    def shown(self, job: int, t: float, estimate: float | None, code: str) -> None:
        """A plan at ``t`` gave the waiting ``job`` this estimate (None: none), in a
        verdict of this pending reason ``code``."""
        seen = self._open.setdefault(job, [])
        if seen and seen[-1][1:] == (estimate, code):
            return  # the same estimate, shown on
        seen.append((t, estimate, code))

    def started(self, job: int, t: float) -> None:
        """The job's first start at ``t``: every estimate it was shown is settled."""
        seen = self._open.pop(job, None)
        if not seen:
            return
        first = seen[0][1]
        if first is None:
            self._no_first += 1
        else:
            self._first_err.append(t - first)
        ends = [since for since, _, _ in seen[1:]] + [t]
        for (since, est, code), until in zip(seen, ends, strict=True):
            if until <= since:
                continue
            if est is None:
                self._blind_s[code] = self._blind_s.get(code, 0.0) + until - since
            else:
                self._spans.setdefault(code, []).append((until - since, t - est))

    def drop(self, job: int) -> None:
        """The job left without starting (rejected): nothing to settle."""
        self._open.pop(job, None)

    def summary(self) -> dict[str, Any]:
        """The error figures over the jobs started so far."""
        late_by = self._cycle_s
        first = sorted(abs(e) for e in self._first_err)
        n_first = len(first) + self._no_first
        every = [span for spans in self._spans.values() for span in spans]
        waited_s = sum(w for w, _ in every) + sum(self._blind_s.values())
        return {
            "jobs": n_first,
            "with_estimate_share": m.rounded(len(first) / n_first if n_first else None),
            "first": {
                "median_abs_error_s": m.rounded(m.quantile(first, 0.5), 1),
                "p90_abs_error_s": m.rounded(m.quantile(first, 0.9), 1),
                "late_share": m.rounded(
                    sum(e > late_by for e in self._first_err) / len(first) if first else None
                ),
            },
            "shown": self._shown(every, sum(self._blind_s.values())),
            "by_code": {
                code: self._of_code(code, waited_s)
                for code in sorted(set(self._spans) | set(self._blind_s))
            },
        }

    def _of_code(self, code: str, waited_s: float) -> dict[str, Any]:
        """The ``shown`` figures of the estimates verdicts of ``code`` gave, with the
        code's share of the ``waited_s`` counted and its median signed error."""
        spans, blind_s = self._spans.get(code, []), self._blind_s.get(code, 0.0)
        by_error = sorted((e, w) for w, e in spans)
        return {
            "time_share": m.rounded((sum(w for w, _ in spans) + blind_s) / waited_s),
            **self._shown(spans, blind_s),
            "median_error_s": m.rounded(_weighted_quantile(by_error, 0.5), 1),
        }

    def _shown(self, spans: list[tuple[float, float]], blind_s: float) -> dict[str, Any]:
        """The ``shown`` figures of these (seconds shown, error) spans and ``blind_s``
        seconds shown no estimate."""
        shown_s = sum(w for w, _ in spans)
        by_size = sorted((abs(e), w) for w, e in spans)
        late_s = sum(w for w, e in spans if e > self._cycle_s)
        return {
            "estimate_share": m.rounded(
                shown_s / (shown_s + blind_s) if shown_s + blind_s else None
            ),
            "median_abs_error_s": m.rounded(_weighted_quantile(by_size, 0.5), 1),
            "p90_abs_error_s": m.rounded(_weighted_quantile(by_size, 0.9), 1),
            "late_share": m.rounded(late_s / shown_s if shown_s else None),
        }


def _weighted_quantile(pairs: list[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of values weighted by time: ``pairs`` are (value, weight),
    sorted by value; the smallest value whose cumulative weight reaches ``q`` of the whole."""
    total = sum(w for _, w in pairs)
    if total <= 0:
        return None
    goal = q * total
    acc = 0.0
    for value, w in pairs:
        acc += w
        if acc >= goal:
            return value
    return pairs[-1][0]


def _dur(s: float | None) -> str:
    return "-" if s is None else f"{s:,.0f} s"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def table(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the estimate figures, for the text report."""
    dur, share = _dur, _share
    first, shown = d.get("first") or {}, d.get("shown") or {}
    return [
        ("jobs that waited a plan", f"{d.get('jobs', 0):,}"),
        ("given an estimate at once", share(d.get("with_estimate_share"))),
        ("first estimate: median |error|", dur(first.get("median_abs_error_s"))),
        ("first estimate: p90 |error|", dur(first.get("p90_abs_error_s"))),
        ("first estimate: started later", share(first.get("late_share"))),
        ("waiting time with an estimate", share(shown.get("estimate_share"))),
        ("as shown: median |error|", dur(shown.get("median_abs_error_s"))),
        ("as shown: p90 |error|", dur(shown.get("p90_abs_error_s"))),
        ("as shown: started later", share(shown.get("late_share"))),
    ]


def code_table(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of ``by_code``, the most waited-for code first: each code's
    share of the waiting time, then its estimates as shown."""
    by_code = d.get("by_code") or {}
    rows = []
    for code, c in sorted(by_code.items(), key=lambda kv: -(kv[1].get("time_share") or 0)):
        signed = c.get("median_error_s")
        rows.append(
            (
                f"as shown, {code}",
                f"{_share(c.get('time_share'))} of the waiting time; with an estimate "
                f"{_share(c.get('estimate_share'))}; median |error| "
                f"{_dur(c.get('median_abs_error_s'))}, p90 {_dur(c.get('p90_abs_error_s'))}; "
                f"median error {'-' if signed is None else f'{signed:+,.0f} s'}; "
                f"started later {_share(c.get('late_share'))}",
            )
        )
    return rows
