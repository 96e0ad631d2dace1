"""Replay reports: a Markdown summary and a self-contained HTML page with Plotly figures.

Pure functions of result dicts (as ``run_replay`` returns them), one per policy of
the same scenario. The HTML inlines plotly.js once (``include_plotlyjs=True`` on
the first figure): it opens offline, no CDN.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import plotly.graph_objects as go
import plotly.io as pio

from .prediction_error import table as prediction_table
from .start_estimates import table as estimates_table

COLORS = {
    "fifo": "#7f7f7f",
    "priority": "#1f77b4",
    "backfill": "#2ca02c",
    "full": "#d62728",
    "oracle-sjf": "#9467bd",
}


def duration(seconds: float | None) -> str:
    """``31 s``, ``12.5 min``, ``3.2 h``, ``4.1 d``."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def num(x: float | int | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.{digits}f}"


QUEUE_COLUMNS = (
    ("jobs", "jobs", num),
    ("avg_queue_s", "avg queue", duration),
    ("median_queue_s", "median queue", duration),
    ("p95_queue_s", "p95 queue", duration),
    ("avg_jct_s", "avg JCT", duration),
    ("utilization", "utilization", pct),
    ("backlog_utilization", "backlog util.", pct),
    ("fragmentation", "fragmentation", pct),
    ("preemptions", "preemptions", num),
    ("migrations", "migrations", num),
    ("eviction_ratio", "evictions per run", lambda x: num(x, 4)),
    ("eviction_ratio_gpu_time", "eviction ratio (GPU time, R4)", pct),
    ("jobs_demoted", "demoted", num),
    ("borrowed_starts", "borrowed starts", num),
    ("swaps", "quota swaps", num),
)
#: The policies' table adds what only the whole run has (the engine queues' window peak).
OVERALL_COLUMNS = (
    *QUEUE_COLUMNS,
    ("peak_window_eviction_ratio", "highest 72 h eviction ratio of a queue", pct),
    ("moved_restart_avg_s", "moved jobs' avg restart", duration),
)


def title_of(run: dict) -> str:
    layout = (
        f"one shared pool of {run['pool_gpus']} GPUs with quotas"
        if run["layout"] == "shared"
        else "one isolated pool per queue"
    )
    return f"{run['trace']} replay, window {run['window'] or 'whole trace'}, {layout}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |"]
    out.append("| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |")
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def overall_rows(runs: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["policy", *(label for _, label, _ in OVERALL_COLUMNS), "wall time", "sim days / s"]
    rows = []
    for r in runs:
        o = r["overall"]
        rows.append(
            [
                r["policy"],
                *(f(o.get(k)) for k, _, f in OVERALL_COLUMNS),
                f"{o['wall_s']:.1f} s",
                f"{o['sim_days_per_wall_s']}",
            ]
        )
    return header, rows


def queue_rows(run: dict) -> tuple[list[str], list[list[str]]]:
    header = ["queue", "GPUs", *(label for _, label, _ in QUEUE_COLUMNS)]
    rows = []
    for q, st in [*run["per_queue"].items(), ("**overall**", run["overall"])]:
        rows.append([q, num(st.get("capacity_gpus")), *(f(st.get(k)) for k, _, f in QUEUE_COLUMNS)])
    return header, rows


def _rows_of(
    runs: Sequence[dict], key: str, table: Callable[[dict], list[tuple[str, str]]]
) -> tuple[list[str], list[list[str]]]:
    """One row per run of the (label, value) rows ``table`` makes of ``overall[key]``."""
    header = ["policy"]
    rows = []
    for r in runs:
        got = table(r["overall"].get(key) or {})
        header = ["policy", *(label for label, _ in got)]
        rows.append([r["policy"], *(value for _, value in got)])
    return header, rows


def prediction_rows(runs: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per run: the runtime predictor's error (``replay.prediction_error``)."""
    return _rows_of(runs, "prediction", prediction_table)


def estimate_rows(runs: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per run: the estimated starts' error (``replay.start_estimates``)."""
    return _rows_of(runs, "start_estimates", estimates_table)


def wait_rows(runs: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per run: seconds of queueing delay per finished job by what the jobs
    waited for (``replay.wait_reasons``), with each reason's share of the delay."""
    reasons: list[str] = []
    for r in runs:
        reasons += [k for k in r["overall"].get("wait_by_reason_s") or {} if k not in reasons]
    rows = []
    for r in runs:
        got = r["overall"].get("wait_by_reason_s") or {}
        total = sum(got.values())
        cells = [
            f"{got[k]:,.0f} s ({100 * got[k] / total:.0f}%)" if k in got and total else "-"
            for k in reasons
        ]
        rows.append([r["policy"], f"{total:,.0f} s", *cells])
    return ["policy", "queueing delay", *reasons], rows


def render_markdown(runs: Sequence[dict]) -> str:
    if not runs:
        return ""
    first = runs[0]
    o = first["overall"]
    lines = [
        f"# {title_of(first)}",
        "",
        f"- Layout: {first['layout_rule']}; {o['capacity_gpus']:,} GPUs in 8-GPU nodes.",
        f"- {o['jobs']:,} jobs; submission window {first['window_s'] / 86400:.2f} days; "
        f"seed {first['seed']}; a scheduling cycle every {first['cycle_s']:g} s.",
        "- Utilization = busy GPU-seconds in the window / (capacity x window); backlog "
        "utilization counts only instants when a job waits; queueing delay = first start - submit.",
        "",
        "## Overall",
        "",
    ]
    header, rows = overall_rows(runs)
    lines += _md_table(header, rows)
    sections = (
        (
            "Runtime prediction error",
            "Predicted whole runtime at a job's first start against its true runtime, "
            "finished jobs only.",
            prediction_rows,
        ),
        (
            "Estimated starts",
            "The estimated start each waiting job was shown against when it first started "
            "(error = start - estimate): its first verdict's, and every verdict's weighted "
            "by how long it was shown.",
            estimate_rows,
        ),
        (
            "What the jobs waited for",
            "Average queueing delay of the finished jobs, by the pending reason they held "
            "(the engine's verdict at each plan; `awaiting_cycle`: until the first plan).",
            wait_rows,
        ),
    )
    for title, intro, rows_of in sections:
        lines += ["", f"## {title}", "", intro, ""]
        lines += _md_table(*rows_of(runs))
    for r in runs:
        lines += ["", f"## Per queue: {r['policy']}", ""]
        header, rows = queue_rows(r)
        lines += _md_table(header, rows)
    lines += ["", "## Commands", "", "```sh"]
    lines += [r.get("command", "") for r in runs]
    lines += ["```", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- HTML


def utilization_figure(runs: Sequence[dict]) -> go.Figure:
    fig = go.Figure()
    for r in runs:
        series = r["series"]["utilization"]
        per = max(1, round(86400 / r["series"]["bucket_s"]))
        days = [
            sum(series[i : i + per]) / len(series[i : i + per]) for i in range(0, len(series), per)
        ]
        fig.add_trace(
            go.Scatter(
                x=list(range(len(days))),
                y=[100 * d for d in days],
                mode="lines",
                name=r["policy"],
                line={"color": COLORS.get(r["policy"])},
            )
        )
    if runs:
        fig.add_vline(
            x=runs[0]["window_s"] / 86400,
            line_dash="dot",
            annotation_text="end of submissions",
        )
    fig.update_layout(
        title="GPU utilization over time (daily mean)",
        xaxis_title="day of the replay",
        yaxis_title="busy GPUs (% of capacity)",
        height=420,
    )
    return fig


def delay_figure(runs: Sequence[dict]) -> go.Figure:
    fig = go.Figure()
    for r in runs:
        pcts = r["series"]["queue_delay_percentiles"]
        step = 100 / max(1, len(pcts) - 1)
        fig.add_trace(
            go.Scatter(
                x=[max(1.0, v) for v in pcts],
                y=[i * step for i in range(len(pcts))],
                mode="lines",
                name=r["policy"],
                line={"color": COLORS.get(r["policy"])},
            )
        )
    fig.update_layout(
        title="Queueing delay distribution (all jobs; delays under 1 s drawn at 1 s)",
        xaxis={"title": "queueing delay (s, log scale)", "type": "log"},
        yaxis_title="percent of jobs waiting at most that long",
        height=420,
    )
    return fig


def queue_bars(runs: Sequence[dict], key: str, title: str, scale: float, unit: str) -> go.Figure:
    fig = go.Figure()
    for r in runs:
        queues = list(r["per_queue"])
        fig.add_trace(
            go.Bar(
                x=queues,
                y=[
                    None if r["per_queue"][q].get(key) is None else r["per_queue"][q][key] * scale
                    for q in queues
                ],
                name=r["policy"],
                marker_color=COLORS.get(r["policy"]),
            )
        )
    fig.update_layout(title=title, barmode="group", yaxis_title=unit, height=420)
    return fig


def figures(runs: Sequence[dict]) -> list[go.Figure]:
    return [
        utilization_figure(runs),
        delay_figure(runs),
        queue_bars(runs, "avg_queue_s", "Average queueing delay per queue", 1 / 3600, "hours"),
        queue_bars(runs, "p95_queue_s", "p95 queueing delay per queue", 1 / 3600, "hours"),
        queue_bars(
            runs, "utilization", "Utilization per queue (of its pool or quota)", 100, "percent"
        ),
    ]


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c.replace('**', ''))}</td>" for c in r) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(runs: Sequence[dict]) -> str:
    if not runs:
        return ""
    first = runs[0]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title_of(first))}</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}</style></head><body>",
        f"<h1>{html.escape(title_of(first))}</h1>",
        f"<p>{html.escape(first['layout_rule'])}. {first['overall']['jobs']:,} jobs, "
        f"seed {first['seed']}, a scheduling cycle every {first['cycle_s']:g} s.</p>",
        "<h2>Overall</h2>",
        _html_table(*overall_rows(runs)),
        "<h2>Runtime prediction error</h2>",
        _html_table(*prediction_rows(runs)),
        "<h2>Estimated starts</h2>",
        _html_table(*estimate_rows(runs)),
        "<h2>What the jobs waited for</h2>",
        _html_table(*wait_rows(runs)),
    ]
    for i, fig in enumerate(figures(runs)):
        parts.append(pio.to_html(fig, include_plotlyjs=i == 0, full_html=False))
    for r in runs:
        parts.append(f"<h2>Per queue: {html.escape(r['policy'])}</h2>")
        parts.append(_html_table(*queue_rows(r)))
    parts.append("<h2>Commands</h2><pre>")
    parts += [html.escape(r.get("command", "")) + "\n" for r in runs]
    parts.append("</pre></body></html>\n")
    return "\n".join(parts)
