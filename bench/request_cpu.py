"""Where a request's CPU goes: thread-CPU timers around the steps of the request path.

    python -m portal.web --cpu-timers DIR [its other options]   # serve, timed
    python -m bench.request_cpu DIR [--json]                     # the split

``--cpu-timers`` runs the normal web server (same processes, threads, access log,
settings) whose workers load ``portal.timed_asgi``: the portal's own ASGI application with
a timer (``start`` below) around each step listed in ``STEPS``. A timer reads ``time.thread_time()`` (the CPU
of the thread serving the request, not the wall clock, so waits for PostgreSQL or for the
GIL count nothing) and adds it up per kind of request (method and path, ids folded) and
step; each worker writes its totals to ``DIR/<pid>.json`` every second. ``report`` sums the
workers and prints, per kind of request, the CPU milliseconds per request of each step
(inclusive, nested as in ``TREE``; ``rest`` lines are the parent's own share), and the
event loop's share (the process's CPU outside request threads: HTTP parsing, the access
log, sending). A timer costs about a microsecond: the figures are those of the normal
server, unlike a profiler's.

docs/api.md ("Throughput") has the split of a job submission and of the baseline insert.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_DIR = "REQUEST_CPU_DIR"  # where portal.timed_asgi writes (set by portal.web --cpu-timers)

# (step, module, attribute path): the functions timed, outermost first. A step whose module
# or attribute is missing is skipped (older code); several targets may share a step.
STEPS: tuple[tuple[str, str, str], ...] = (
    ("request", "portal.http_threads", "ThreadedWSGI.respond"),
    ("view", "rest_framework.views", "APIView.dispatch"),
    ("render", "rest_framework.renderers", "JSONRenderer.render"),
    ("auth", "core.security", "RateLimitedTokenAuthentication.authenticate"),
    ("handler", "scheduling.api", "JobViewSet.create"),
    ("handler", "bench.baseline", "BaselineInsertView.post"),
    ("parse", "rest_framework.request", "Request._parse"),
    ("validate", "rest_framework.serializers", "BaseSerializer.is_valid"),
    ("service", "scheduling.api", "submit_job"),
    ("queue", "scheduling.services", "resolve_queue"),
    ("lock", "scheduling.services", "hold_submissions_of"),
    ("bound", "scheduling.services", "check_active_jobs"),
    ("dependencies", "scheduling.services", "check_dependencies"),
    ("shape", "scheduling.feasibility", "read_cluster_shape"),
    ("feasibility", "scheduling.feasibility", "refusal_for"),
    ("insert", "scheduling.services", "_insert_with_first_event"),
    ("insert", "django.db.models.base", "Model.save_base"),
    ("commit", "django.db.transaction", "Atomic.__exit__"),
    ("clock", "scheduling.clock", "cluster_now_ts"),
    ("publish", "scheduling.services", "publish_coalesced"),
    ("answer", "scheduling.api", "JobDetailSerializer.to_representation"),
    ("sql", "django.db.backends.utils", "CursorWrapper._execute"),
    ("telemetry", "prometheus_client.metrics", "MetricWrapperBase.labels"),
    ("telemetry", "prometheus_client.metrics", "Counter.inc"),
    ("telemetry", "prometheus_client.metrics", "Histogram.observe"),
    ("telemetry", "prometheus_client.metrics", "Gauge.set"),
)

# How the steps nest in a request (``sql`` and ``telemetry`` cut across: shown apart).
TREE: dict[str, tuple[str, ...]] = {
    "request": ("view", "render"),
    "view": ("auth", "handler"),
    "handler": ("parse", "validate", "service", "answer", "insert"),
    "service": (
        "queue",
        "shape",
        "feasibility",
        "lock",
        "bound",
        "dependencies",
        "insert",
        "commit",
        "publish",
    ),
    "insert": ("clock",),
}
ACROSS = ("sql", "telemetry")


NUMBER_IN_PATH = re.compile(r"/\d+(?=/|$)")


def request_kind(method: str, path: str) -> str:
    """``POST /api/v1/jobs/``; numbers in the path folded (``/api/v1/jobs/<id>/``)."""
    return f"{method} {NUMBER_IN_PATH.sub('/<id>', path)}"


class Timers:
    """Thread-CPU totals per (kind of request, step); the outermost call of a step counts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.totals: dict[str, dict[str, list[float]]] = defaultdict(dict)
        self.local = threading.local()
        self.started_cpu = time.process_time()

    def kind(self) -> str:
        return getattr(self.local, "kind", "outside requests")

    def wrap(self, step: str, function: Callable) -> Callable:
        local = self.local

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, step, 0)
            setattr(local, step, depth + 1)
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                setattr(local, step, depth)
                if depth == 0:
                    self.add(step, time.thread_time() - started)

        return timed

    def wrap_request(self, function: Callable) -> Callable:
        """The outermost timer: names the kind of request for the steps inside it."""
        timed = self.wrap("request", function)

        @functools.wraps(function)
        def respond(server: Any, scope: dict, body: Any) -> Any:
            self.local.kind = request_kind(scope["method"], scope["path"])
            try:
                return timed(server, scope, body)
            finally:
                self.local.kind = "outside requests"

        return respond

    def add(self, step: str, seconds: float) -> None:
        with self.lock:
            row = self.totals[self.kind()].setdefault(step, [0, 0.0])
            row[0] += 1
            row[1] += seconds

    def snapshot(self) -> dict:
        with self.lock:
            steps = {
                kind: {s: list(v) for s, v in rows.items()} for kind, rows in self.totals.items()
            }
        return {"process_cpu_s": time.process_time() - self.started_cpu, "kinds": steps}


def _resolve(module: str, attribute: str) -> tuple[Any, str] | None:
    try:
        owner: Any = importlib.import_module(module)
    except ImportError:
        return None
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    return (owner, name) if hasattr(owner, name) else None


def install(timers: Timers) -> list[str]:
    """Wrap every step found; returns the ``module:attribute`` of those not found."""
    missing = []
    for step, module, attribute in STEPS:
        found = _resolve(module, attribute)
        if found is None:
            missing.append(f"{module}:{attribute}")
            continue
        owner, name = found
        original = getattr(owner, name)
        wrapped = (
            timers.wrap_request(original) if step == "request" else timers.wrap(step, original)
        )
        setattr(owner, name, wrapped)
    return missing


def _writer(timers: Timers, out: Path) -> None:
    path = out / f"{os.getpid()}.json"
    partial = path.with_suffix(".part")
    while True:
        time.sleep(1.0)
        partial.write_text(json.dumps(timers.snapshot()))
        partial.replace(path)  # a reader never sees half a file


def start(out: str | Path) -> list[str]:
    """Time this process's requests and write the totals to ``out/<pid>.json`` every second
    (a daemon thread). Returns the steps not found (skipped)."""
    timers = Timers()
    missing = install(timers)
    thread = threading.Thread(target=_writer, args=(timers, Path(out)), daemon=True)
    thread.name = "request-cpu"
    thread.start()
    return missing


# -- the report ------------------------------------------------------------------------------


def read(directory: Path) -> dict:
    """The workers' totals summed: ``{"process_cpu_s", "kinds": {kind: {step: [n, s]}}}``."""
    total: dict = {
        "process_cpu_s": 0.0,
        "kinds": defaultdict(lambda: defaultdict(lambda: [0, 0.0])),
    }
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        total["process_cpu_s"] += data["process_cpu_s"]
        for kind, steps in data["kinds"].items():
            for step, (calls, seconds) in steps.items():
                row = total["kinds"][kind][step]
                row[0] += calls
                row[1] += seconds
    return total


def split(data: dict) -> dict:
    """Per kind of request: requests, and ms of CPU per request for each step (``TREE``
    order, ``rest`` lines where a parent does work of its own), ``sql`` and ``telemetry``
    (with their calls per request) apart, and the event loop's share per request."""
    kinds = {k: v for k, v in data["kinds"].items() if "request" in v}
    all_requests = sum(v["request"][0] for v in kinds.values())
    in_threads = sum(v["request"][1] for v in kinds.values())
    loop_ms = 1000 * (data["process_cpu_s"] - in_threads) / all_requests if all_requests else 0.0
    result = {}
    for kind, steps in sorted(kinds.items(), key=lambda item: -item[1]["request"][0]):
        n = steps["request"][0]
        ms = {step: 1000 * seconds / n for step, (_, seconds) in steps.items()}
        rows: list[dict] = []

        def walk(step: str, depth: int, ms: dict = ms, rows: list = rows) -> None:
            if step not in ms:
                return
            rows.append({"step": step, "depth": depth, "ms": round(ms[step], 3)})
            children = [c for c in TREE.get(step, ()) if c in ms and not _inside(c, step, ms)]
            for child in children:
                walk(child, depth + 1)
            if children:
                rest = ms[step] - sum(ms[c] for c in children)
                rows.append({"step": f"{step}: rest", "depth": depth + 1, "ms": round(rest, 3)})

        walk("request", 0)
        across = {
            step: {
                "ms": round(ms.get(step, 0.0), 3),
                "calls": round(steps.get(step, [0])[0] / n, 2),
            }
            for step in ACROSS
        }
        result[kind] = {
            "requests": n,
            "steps": rows,
            "across": across,
            "event_loop_ms": round(loop_ms, 3),
        }
    return result


def _inside(child: str, parent: str, ms: dict) -> bool:
    """Whether ``child`` is timed under a sibling that is itself a child of ``parent`` (the
    insert of a service sits under ``service``, not beside it, when both are timed)."""
    return any(child in TREE.get(sibling, ()) and sibling in ms for sibling in TREE.get(parent, ()))


def render(result: dict) -> list[str]:
    """The human lines of ``split``: one block per kind of request."""

    def line(label: str, ms: float) -> str:
        return f"  {label:<48} {ms:>7.3f}"

    lines = []
    for kind, row in result.items():
        lines.append(f"{kind}: {row['requests']} requests, CPU ms per request")
        lines.append(line("event loop (HTTP, access log; all kinds alike)", row["event_loop_ms"]))
        lines += [line("  " * s["depth"] + s["step"], s["ms"]) for s in row["steps"]]
        for step, value in row["across"].items():
            lines.append(line(f"({step}, across steps: {value['calls']} calls)", value["ms"]))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.request_cpu",
        description="The CPU split per kind of request of a server run with --cpu-timers DIR.",
    )
    parser.add_argument("directory", type=Path, help="the --cpu-timers directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = split(read(args.directory))
    print(json.dumps(result, indent=2) if args.json else "\n".join(render(result)))


if __name__ == "__main__":
    main()
