"""Command line of the replay, shared by ``python -m replay`` and ``manage.py replay``.

    replay TRACE [--policy P] [--pool-gpus N] [--window START:END] [--seed S]
                 [--json] [--out DIR] [--cycle-s S] [--replan-s S] [--check] [--progress]

``--json`` prints exactly one JSON object (``overall``, ``per_queue`` and the run's
parameters). ``--out DIR`` writes the run as ``DIR/<scenario>--<policy>.json`` and
rebuilds ``DIR/<scenario>.md`` and ``DIR/<scenario>.html`` from every policy run of
the same scenario (trace, layout, window, seed, cycle) found in ``DIR``, so running
each policy with the same ``--out`` gives one page comparing them.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitoring.metrics import EVICTION_ALERT_RATIO
from scheduling.engine.predict import PLAN_QUANTILE

from .prediction_error import table as prediction_table
from .replay import BORROW_KNOBS, ORDER_KNOBS, POLICIES, ReplayConfig, run_replay
from .report import render_html, render_markdown
from .start_estimates import code_table
from .start_estimates import table as estimates_table

Writer = Callable[[str], None]


class CliError(Exception):
    """A bad argument or an unreadable trace: reported without a traceback."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="philly, itp, alibaba, or a path to a trace CSV")
    parser.add_argument(
        "--policy",
        default="full",
        choices=POLICIES,
        help="engine configuration (default: full, what the portal runs)",
    )
    parser.add_argument(
        "--pool-gpus",
        type=int,
        default=None,
        metavar="N",
        help="one shared pool of N GPUs (8-GPU nodes) with per-queue quotas, "
        "instead of one isolated pool per queue",
    )
    parser.add_argument(
        "--window",
        default=None,
        metavar="START:END",
        help="START:END of submit times; Philly: ISO dates (default 2017-10-01:2017-12-01); "
        "ITP/Alibaba: trace seconds with optional s/m/h/d unit, e.g. 0:7d",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="S",
        help="seed of the trace's tier/model/preemptible mapping and of the simulator",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="write the Markdown and HTML report here"
    )
    parser.add_argument(
        "--cycle-s", type=float, default=60.0, help="virtual seconds between scheduling cycles"
    )
    parser.add_argument(
        "--replan-s",
        type=float,
        default=600.0,
        help="re-plan a pool with waiting jobs at least this often even when nothing "
        "happened (0: only on arrivals/completions)",
    )
    parser.add_argument(
        "--predict-quantile",
        type=float,
        default=None,
        metavar="Q",
        help="the quantile (0-1) of learnt runtimes the plans use for reservations and "
        "backfill (default 0.8)",
    )
    parser.add_argument(
        "--true-runtimes",
        action="store_true",
        help="plan with each job's true remaining runtime instead of learnt predictions: "
        "what perfect prediction would buy the policy (a bound, like oracle-sjf)",
    )
    parser.add_argument(
        "--borrow",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="set a borrowing rule of the engine's policy (#19), repeatable: "
        + ", ".join(f"{name}" for name in BORROW_KNOBS),
    )
    parser.add_argument(
        "--order",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="set an ordering, placement, preemption or consolidation rule of the engine's policy (#19), repeatable: "
        + ", ".join(f"{name}" for name in ORDER_KNOBS),
    )
    parser.add_argument(
        "--check", action="store_true", help="verify every plan with check_plan (slower)"
    )
    parser.add_argument("--progress", action="store_true", help="progress lines on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m replay",
        description="Replay a GPU-cluster job trace through the scheduling engine in virtual time.",
    )
    add_arguments(parser)
    return parser


def config_from(options: dict[str, Any]) -> ReplayConfig:
    # finite too: with --cycle-s 1e309 (inf) the replay ran no cycle and gave up on every
    # job; --replan-s nan passed ``< 0``
    if options.get("cycle_s") is not None and not 0 < options["cycle_s"] < math.inf:
        raise CliError("--cycle-s must be > 0")
    if options.get("replan_s") is not None and not 0 <= options["replan_s"] < math.inf:
        raise CliError("--replan-s must be >= 0")
    pq = options.get("predict_quantile")
    if pq is not None and not 0.0 <= pq <= 1.0:
        raise CliError("--predict-quantile must be within 0 and 1")
    return ReplayConfig(
        trace=options["trace"],
        policy=options.get("policy") or "full",
        pool_gpus=options.get("pool_gpus"),
        window=options.get("window"),
        seed=options.get("seed") or 0,
        cycle_s=float(options.get("cycle_s") or 60.0),
        replan_s=float(options["replan_s"] if options.get("replan_s") is not None else 600.0),
        check=bool(options.get("check")),
        predict_quantile=PLAN_QUANTILE if pq is None else float(pq),
        true_runtimes=bool(options.get("true_runtimes")),
        borrow=knobs("--borrow", options.get("borrow"), BORROW_KNOBS),
        order=knobs("--order", options.get("order"), ORDER_KNOBS),
    )


def knobs(flag: str, items: Any, allowed: dict[str, type]) -> tuple[tuple[str, Any], ...]:
    """``NAME=VALUE`` items of ``flag`` as (name, typed value) pairs."""
    out: list[tuple[str, Any]] = []
    for item in items or ():
        name, _, value = str(item).partition("=")
        kind = allowed.get(name)
        if kind is None or not value:
            raise CliError(f"{flag} takes NAME=VALUE with NAME one of {', '.join(allowed)}")
        if kind is bool:
            if value not in ("true", "false"):
                raise CliError(f"{flag} {name} takes true or false")
            out.append((name, value == "true"))
            continue
        try:
            number = float(value)
        except ValueError:
            raise CliError(f"{flag} {name} takes a number") from None
        if not math.isfinite(number) or number < 0 or (kind is int and number != int(number)):
            raise CliError(
                f"{flag} {name} takes a number >= 0" + (", whole" if kind is int else "")
            )
        out.append((name, int(number) if kind is int else number))
    return tuple(out)


def command_line(config: ReplayConfig) -> str:
    """The shortest ``manage.py replay`` line that reproduces ``config``."""
    parts = ["python", "manage.py", "replay", config.trace, "--policy", config.policy]
    if config.pool_gpus is not None:
        parts += ["--pool-gpus", str(config.pool_gpus)]
    if config.window:
        parts += ["--window", config.window]
    if config.seed:
        parts += ["--seed", str(config.seed)]
    if config.cycle_s != 60.0:
        parts += ["--cycle-s", f"{config.cycle_s:g}"]
    if config.replan_s != 600.0:
        parts += ["--replan-s", f"{config.replan_s:g}"]
    if config.predict_quantile != PLAN_QUANTILE:
        parts += ["--predict-quantile", f"{config.predict_quantile:g}"]
    if config.true_runtimes:
        parts.append("--true-runtimes")
    for flag, pairs in (("--borrow", config.borrow), ("--order", config.order)):
        for name, value in pairs:
            text = str(value).lower() if isinstance(value, bool) else f"{value:g}"
            parts += [flag, f"{name}={text}"]
    return shlex.join(parts)


def scenario_slug(result: dict) -> str:
    layout = result["layout"] + (f"{result['pool_gpus']}" if result.get("pool_gpus") else "")
    window = result["window"].replace(":", "_") or "all"
    raw = f"{result['trace']}-{layout}-{window}-seed{result['seed']}-cycle{result['cycle_s']:g}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)


def write_report(result: dict, out: Path) -> tuple[Path, Path]:
    """Save this run and rebuild the scenario's Markdown and HTML pages from all its runs."""
    out.mkdir(parents=True, exist_ok=True)
    slug = scenario_slug(result)
    (out / f"{slug}--{result['policy']}.json").write_text(json.dumps(result, indent=1) + "\n")
    runs = []
    for path in sorted(out.glob(f"{slug}--*.json")):
        try:
            runs.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    order = {p: i for i, p in enumerate(POLICIES)}
    runs.sort(key=lambda r: order.get(r.get("policy"), len(order)))
    md = out / f"{slug}.md"
    html = out / f"{slug}.html"
    md.write_text(render_markdown(runs))
    html.write_text(render_html(runs))
    return md, html


def _shares(title: str, amounts: dict[str, float], unit: str) -> list[str]:
    """A titled table of ``amounts`` with each one's share of their total (none if 0)."""
    total = sum(amounts.values())
    if total <= 0:
        return []
    width = max(len(name) for name in amounts)
    return ["", title] + [
        f"  {name.ljust(width)}  {x:>12,.0f} {unit}  {x / total:6.1%}"
        for name, x in amounts.items()
    ]


def _fmt(x: Any, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.3f}" if unit == "ratio" else f"{x:,.0f}"
    return f"{x:,}"


def human_summary(result: dict) -> list[str]:
    o = result["overall"]
    lines = [
        f"{result['trace']} ({result['window']}), {result['layout']} layout, "
        f"{o['capacity_gpus']} GPUs, policy {result['policy']}, seed {result['seed']}",
        f"replayed {o['simulated_days']:.1f} simulated days in {o['wall_s']:.1f} s of wall time "
        f"({o['sim_days_per_wall_s']} simulated days per second, {o['plan_calls']} plan calls)",
        "",
    ]
    cols = (
        ("jobs", "jobs", ""),
        ("avg_queue_s", "avg q s", ""),
        ("median_queue_s", "med q s", ""),
        ("p95_queue_s", "p95 q s", ""),
        ("avg_jct_s", "avg JCT s", ""),
        ("utilization", "util", "ratio"),
        ("backlog_utilization", "backlog util", "ratio"),
        ("fragmentation", "frag", "ratio"),
        ("preemptions", "preempt", ""),
        ("migrations", "moves", ""),
        ("eviction_ratio", "evict/run", "ratio"),
        ("eviction_ratio_gpu_time", "evict GPU-time", "ratio"),
        ("jobs_demoted", "demoted", ""),
    )
    rows = [("queue", *(c[1] for c in cols))]
    for q, st in [*result["per_queue"].items(), ("overall", o)]:
        rows.append((q, *(_fmt(st.get(k), u) for k, _, u in cols)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    peak = o.get("peak_window_eviction_ratio")
    if peak is not None:
        over = o.get("queues_over_alert_line") or []
        lines.append(
            f"highest 72 h eviction ratio of a queue at a plan (3 evictions in the window "
            f"at least, as the portal's alert): {peak:.1%}; over the "
            f"{EVICTION_ALERT_RATIO:.0%} alert line at some point: {', '.join(over) or 'none'}"
        )
    lines += _shares(
        "idle GPUs while jobs wait, by cause:",
        {c: gs / 3600 for c, gs in (o.get("idle_gpu_s_by_cause") or {}).items()},
        "GPU-h",
    )
    lines += _shares(
        "queueing delay by what the jobs waited for (seconds per finished job):",
        o.get("wait_by_reason_s") or {},
        "s",
    )
    for key, title, table in (
        ("prediction", "runtime prediction error (predicted at first start vs. true runtime):",
         prediction_table),
        ("start_estimates", "estimated starts shown to waiting jobs vs. when they started:",
         estimates_table),
    ):  # fmt: skip
        got = o.get(key) or {}
        if got.get("jobs"):
            rows = table(got) + (code_table(got) if key == "start_estimates" else [])
            width = max(len(label) for label, _ in rows)
            lines += ["", title, *(f"  {label.ljust(width)}  {value}" for label, value in rows)]
    if o.get("rejected"):
        lines.append(
            f"{o['rejected']} jobs could never fit their pool or quota and were not replayed"
        )
    if o.get("unfinished"):
        lines.append(f"WARNING: {o['unfinished']} jobs had not finished when the replay gave up")
    return lines


def execute(options: dict[str, Any], out: Writer, err: Writer) -> dict:
    """Run one replay from parsed options; write the output; return the result."""
    config = config_from(options)

    def progress(t: float, done: int) -> None:
        err(f"  virtual day {t / 86400:.1f}: {done} jobs done")

    try:
        result = run_replay(config, progress if options.get("progress") else None)
    except (ValueError, OSError) as exc:  # OSError: a directory, no permission, not found
        raise CliError(str(exc)) from exc
    result["command"] = command_line(config)
    if options.get("out"):
        md, html = write_report(result, Path(options["out"]))
        err(f"wrote {md} and {html}")
    if options.get("json"):
        public = {k: v for k, v in result.items() if k != "series"}
        out(json.dumps(public, sort_keys=False))
    else:
        for line in human_summary(result):
            out(line)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")

    def err(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    try:
        execute(vars(args), out, err)
    except CliError as exc:
        err(f"error: {exc}")
        return 2
    return 0
