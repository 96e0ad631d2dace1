"""How long an on-call cordon waits for a running scheduling cycle (``manage.py bench_cordon``).

The cycle locks node rows (``reconcile.sync_nodes``: the nodes it will write back;
``launch.start_all``: the nodes of its planned starts) until it commits, so a cordon of
such a node (``scheduling.nodes.services.cordon_node``, the service the node page and the
API call) waits for it. This measures the wait on the configured database, which must
hold a seeded cluster (``seed_demo``: 1,250 nodes of 8 GPUs) and no running loop:

1. *baseline*: a second process cordons (then uncordons) random ready nodes, one at a
   time, with no cycle running;
2. *during cycles*: the same, while this process runs cycles back to back (the demo
   workload submits its arrivals before each, as ``make run``'s beat does).

Every cordon is timed in the cordoning process, to its COMMIT and to its return; every
cycle records, through a ``connection.execute_wrapper`` (``LockWatch``), when each of its
statements that lock node rows returned and which nodes it named, and when its COMMIT
returned. A cordon that committed after a cycle which had locked its node before is
attributed to the statement that took that lock. Cordoned nodes are uncordoned right
after (timed too), so the cluster is left in the pool; each uncordon makes the next cycle
tell the backend. docs/benchmarks.md, "Session 40", has the figures.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.db import connection, connections

from .latency import latency_ms, percentile

REASON = "bench_cordon: isolating a node"
# The node-locking statements of a cycle, and what each is called in the result.
LOCKERS = (("FOR NO KEY UPDATE", "start_all"), ("FOR UPDATE", "sync_nodes"))
# The cycle phases from the launches' node lock to the commit, in order.
TAIL_PHASES = ("starts", "verdicts", "observers", "dependencies", "events", "close", "record")


@dataclass
class Cordon:
    """One cordon as the cordoning process timed it (``time.time()`` seconds): asked,
    committed (its COMMIT returned), returned (after its live event was sent)."""

    node: str
    start: float
    committed: float
    end: float
    uncordon_s: float

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1000

    @property
    def commit_ms(self) -> float:
        return (self.committed - self.start) * 1000


@dataclass
class CycleSpan:
    """One cycle: its node locks (acquired at, by which statement, on which nodes) and
    its commit (``time.time()`` seconds)."""

    began: float
    locks: list[tuple[float, str, frozenset[str]]] = field(default_factory=list)
    committed: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    starts: int = 0
    pending: int = 0

    def held_ms(self, locker: str | None = None) -> float | None:
        """Milliseconds from the first node lock (of ``locker``, or any) to the commit."""
        times = [at for at, who, _ in self.locks if locker in (None, who)]
        return (self.committed - min(times)) * 1000 if times else None

    def holder(self, cordon: Cordon) -> tuple[str, float, float] | None:
        """The lock of this cycle the cordon met, if it waited for one on its node (the
        lock taken before the cordon committed, which committed after the cycle): which
        statement took it, and milliseconds from the cordon's start to the lock and from
        the cycle's commit to the cordon's."""
        for at, who, names in self.locks:
            if (
                cordon.node in names
                and at < cordon.committed
                and cordon.start < self.committed <= cordon.committed
            ):
                return who, (at - cordon.start) * 1000, (cordon.committed - self.committed) * 1000
        return None


def _cordoner(conn: Any, names: list[str], pause_s: float, seed: int) -> None:
    """Child process: cordon and uncordon each node in turn as ``oncall`` after a random
    pause, send back the ``Cordon`` list (without the few nodes the cycle isolated
    before their turn: their cordon is refused)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.exceptions import ValidationError

    from scheduling.nodes.services import cordon_node, uncordon_node

    user = get_user_model().objects.get(username="oncall")
    rng = random.Random(seed)
    conn.send("ready")
    conn.recv()  # go
    done = []
    commits: list[float] = []
    with stamped_commit(commits.append):
        for name in names:
            time.sleep(rng.uniform(0, pause_s))
            t0 = time.time()
            try:
                cordon_node(user, name, REASON)
            except ValidationError:
                continue  # the cycle isolated it meanwhile (a simulated fault): refused
            t1 = time.time()
            committed = commits[-1]
            uncordon_node(user, name, "bench_cordon: back to the pool")
            done.append(Cordon(name, t0, committed, t1, time.time() - t1))
    conn.send(done)


class Cordoner:
    """The cordons in a process of their own (as on-call's web request is): the cycles run
    here hold the GIL and a connection of their own."""

    def __init__(self, names: list[str], pause_s: float, seed: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_cordoner, args=(child, names, pause_s, seed), daemon=True)

    def __enter__(self) -> Cordoner:
        self.proc.start()
        if not self.conn.poll(60) or self.conn.recv() != "ready":
            raise RuntimeError("the cordoning process did not start")
        self.conn.send("go")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)

    def finished(self) -> bool:
        return self.conn.poll()

    def cordons(self) -> list[Cordon]:
        return self.conn.recv()


@dataclass
class LockWatch:
    """A ``connection.execute_wrapper`` noting the cycle's statements that lock node rows:
    ``SELECT ... FOR [NO KEY] UPDATE`` (the nodes named) and ``UPDATE`` (their ids, mapped
    to names with ``names``). A ``scheduling.sql.bulk_set`` of 200 rows or more goes
    through a temporary table and names no rows here: it is noted, with no nodes."""

    span: CycleSpan
    names: dict[int, str]

    def __call__(self, execute: Callable, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if locked := self.locks(sql, list(params or ())):
            self.span.locks.append((time.time(), *locked))
        return result

    def locks(self, sql: str, params: list) -> tuple[str, frozenset[str]] | None:
        head = sql.split(" WHERE ", 1)[0]
        if sql.startswith("SELECT") and '"scheduling_node"' in head and " FOR " in sql:
            who = next(name for clause, name in LOCKERS if clause in sql)
            return who, frozenset(p for p in params if isinstance(p, str))
        if not sql.startswith('UPDATE "scheduling_node"'):
            return None
        column = head.split(" SET ", 1)[1].split()[0].strip('"')
        if " AS t " in head:  # bulk_set: (pk, value, ...) per row, or a temporary table
            ids = params[:: head.count(" = v.c") + 1] if "(VALUES" in head else []
        else:  # Django's bulk_update: ids in CASE WHEN and IN (...)
            ids = [p for p in params if isinstance(p, int)]
        return f"update {column}", frozenset(self.names[i] for i in ids if i in self.names)


def timed_cycle(workload: bool, watch: Callable[[CycleSpan], LockWatch]) -> CycleSpan:
    """One scheduling cycle (after the demo workload's arrivals), its node locks and commit."""
    from scheduling.cycle import run_cycle
    from scheduling.cycle.phases import CycleTrace

    if workload:
        from demo.workload import generate

        generate()
    span = CycleSpan(began=time.time())
    trace = CycleTrace()
    stamp = partial(setattr, span, "committed")
    with connection.execute_wrapper(watch(span)), stamped_commit(stamp):
        record = run_cycle(wait_s=30, trace=trace)
    span.phases = trace.phases
    span.starts, span.pending = (record.starts, record.pending) if record else (0, 0)
    return span


@contextmanager
def stamped_commit(note: Callable[[float], object]) -> Iterator[None]:
    """Give ``note`` the time each COMMIT of this connection returns, when its row locks
    go: before the commit hooks (live events) and the cycle's garbage collection, which an
    outer transaction's on-commit hook would count. Wraps the connection's ``_commit``."""
    real = connection._commit

    def commit() -> None:
        real()
        note(time.time())

    connection._commit = commit
    try:
        yield
    finally:
        del connection._commit


def _ready_nodes(count: int, rng: random.Random) -> list[str]:
    from scheduling.models import Node

    names = sorted(Node.objects.filter(state=Node.State.READY).values_list("name", flat=True))
    if len(names) < count:
        raise ValueError(f"{count} cordons need as many ready nodes; {len(names)} are (seed_demo?)")
    return rng.sample(names, count)


def measure(cordons: int, pause_s: float, seed: int = 0, workload: bool = True) -> dict:
    """The baseline, then the same number of cordons while cycles run back to back."""
    from scheduling.models import Node

    rng = random.Random(seed)
    names = _ready_nodes(2 * cordons, rng)
    ids = dict(Node.objects.values_list("pk", "name"))
    connections.close_all()
    with Cordoner(names[:cordons], pause_s, seed) as child:
        baseline = child.cordons()
    spans: list[CycleSpan] = []
    with Cordoner(names[cordons:], pause_s, seed + 1) as child:
        while not child.finished():
            spans.append(timed_cycle(workload, lambda span: LockWatch(span, ids)))
        during = child.cordons()
    return summarize(baseline, during, spans, pause_s, workload)


def _ms(values: list[float]) -> dict[str, float]:
    """Median, p95 and max (milliseconds) of ``values``."""
    return {
        "p50_ms": round(statistics.median(values), 1) if values else 0.0,
        "p95_ms": round(percentile(values, 95), 1),
        "max_ms": round(max(values, default=0.0), 1),
    }


def summarize(
    baseline: list[Cordon], during: list[Cordon], spans: list[CycleSpan], pause_s: float,
    workload: bool,
) -> dict:  # fmt: skip
    """The result ``bench_cordon`` prints."""
    waited: dict[str, list[float]] = {}
    met = []
    for c in during:
        held = next((h for s in spans if (h := s.holder(c))), None)
        waited.setdefault(held[0] if held else "none", []).append(c.ms)
        if held:
            met.append({"node": c.node, "ms": round(c.ms, 1), "lock": held[0],
                        "locked_after_ms": round(held[1], 1),
                        "committed_after_cycle_ms": round(held[2], 1)})  # fmt: skip
    tail = {p: round(statistics.median(s.phases.get(p, 0.0) for s in spans), 1)
            for p in TAIL_PHASES} if spans else {}  # fmt: skip
    held = [ms for s in spans if (ms := s.held_ms()) is not None]
    lockers = sorted({who for s in spans for _, who, _ in s.locks})
    held_by = {w: _ms([ms for s in spans if (ms := s.held_ms(w)) is not None]) for w in lockers}
    return {
        "loadavg": round(os.getloadavg()[0], 2),
        "workload": workload,
        "pause_s": pause_s,
        "baseline": {"cordons": len(baseline), **_ms([c.ms for c in baseline])},
        "during_cycles": {"cordons": len(during), **_ms([c.ms for c in during])},
        "baseline_to_commit": _ms([c.commit_ms for c in baseline]),
        "during_cycles_to_commit": _ms([c.commit_ms for c in during]),
        "uncordon_during_cycles": _ms([c.uncordon_s * 1000 for c in during]),
        "by_lock": {who: {"cordons": len(ms), **_ms(ms)} for who, ms in sorted(waited.items())},
        "cycles": len(spans),
        "cycle": _ms([(s.committed - s.began) * 1000 for s in spans]),
        "starts_per_cycle_max": max((s.starts for s in spans), default=0),
        "pending_per_cycle_median": statistics.median(s.pending for s in spans) if spans else 0,
        "nodes_locked_by": {
            w: {"p50": statistics.median(counts), "max": max(counts)}
            for w in lockers
            if (
                counts := [
                    len({n for _, who, ns in s.locks if who == w for n in ns}) for s in spans
                ]
            )
        },
        "nodes_locked_per_cycle_max": max(
            (len(frozenset().union(*(n for _, _, n in s.locks))) for s in spans if s.locks),
            default=0,
        ),
        "node_locks_held": _ms(held),
        "locks_held_by": held_by,
        "tail_phases_median_ms": tail,
        "met_a_lock": met,
        "slowest_cordons": sorted(
            ([c.node, round(c.ms, 1), round(c.commit_ms, 1)] for c in during if c.ms > 200),
            key=lambda row: -row[1],
        )[:10],
        "during_p99_ms": latency_ms([c.ms for c in during])["p99_ms"],
    }


def human(result: dict) -> Iterator[str]:
    """A few lines: each distribution as median / p95 / max."""

    def row(label: str, d: dict) -> str:
        n = f"{d['cordons']:>4} " if "cordons" in d else "     "
        return f"{label:>34}: {n}{d['p50_ms']:9.1f} {d['p95_ms']:9.1f} {d['max_ms']:9.1f}"

    yield f"load {result['loadavg']}, {result['cycles']} cycles (workload: {result['workload']})"
    yield f"{'ms':>34}:    n       p50       p95       max"
    yield row("cordon, no cycle running", result["baseline"])
    yield row("cordon, cycles back to back", result["during_cycles"])
    yield row("  to its commit, no cycle", result["baseline_to_commit"])
    yield row("  to its commit, cycles", result["during_cycles_to_commit"])
    for who, d in result["by_lock"].items():
        yield row(f"  waited on {who}" if who != "none" else "  met no lock of its node", d)
    yield row("uncordon, cycles back to back", result["uncordon_during_cycles"])
    yield row("cycle (begin to commit)", result["cycle"])
    yield row("node locks held (first to commit)", result["node_locks_held"])
    for who, d in result["locks_held_by"].items():
        nodes = result["nodes_locked_by"][who]
        yield row(f"  {who}'s locks held", d) + f"   nodes p50 {nodes['p50']}, max {nodes['max']}"
    yield f"{'phases from start_all to commit':>34}: " + ", ".join(
        f"{p} {ms}" for p, ms in result["tail_phases_median_ms"].items()
    )
    yield (f"{'most starts / nodes locked':>34}: {result['starts_per_cycle_max']} / "
           f"{result['nodes_locked_per_cycle_max']}; jobs waiting (median) "
           f"{result['pending_per_cycle_median']}")  # fmt: skip
