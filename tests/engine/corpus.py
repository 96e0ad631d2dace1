"""A fixed corpus of generated snapshots and a stable fingerprint of their plans.

``tests/engine/plan_corpus.json`` records, for every case, the plan the engine
made when the corpus was written; ``test_plan_corpus`` asserts that the engine
still makes exactly those plans. Refactors of the planner or of victim
selection must leave every fingerprint unchanged; a deliberate change of
behaviour rewrites the file with ``python -m tests.engine.corpus``.

Cases come from ``strategies.build_snapshot`` with an RNG seeded by the case
number, and policies from ``strategies.random_policy``; every eighth case is
larger, and every fourth is urgent-heavy on a full cluster so that victim
selection (single node, multi-node, exclusive, quota room) is well exercised.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

from scheduling.engine import Plan, Snapshot, Tier, plan

from .strategies import NOW, build_snapshot, random_policy

FIXTURE = Path(__file__).with_name("plan_corpus.json")
CASES = 1500


def corpus_snapshot(case: int) -> Snapshot:
    """The snapshot of one case (deterministic in ``case``)."""
    rng = random.Random(case)
    policy = random_policy(rng)
    if case % 8 == 7:
        sizes = (rng.randint(12, 30), rng.randint(10, 40), rng.randint(10, 40))
    else:
        sizes = (rng.randint(1, 10), rng.randint(0, 14), rng.randint(0, 14))
    s = build_snapshot(rng, *sizes, rng.randint(1, 3), policy)
    if case % 4 in (1, 3):
        s = _urgent_heavy(rng, s)
    if case % 4 == 3:
        # Lines near their quota: preemptors also need room inside their line.
        held: dict[str, int] = {}
        for r in s.running:
            held[r.line] = held.get(r.line, 0) + r.gpus
        lines = tuple(
            dataclasses.replace(
                line, quota_gpus=max(0, held.get(line.name, 0) + rng.randint(-8, 8))
            )
            for line in s.lines
        )
        s = dataclasses.replace(s, lines=lines)
    return s


def _urgent_heavy(rng: random.Random, s: Snapshot) -> Snapshot:
    """Most waiting work may preempt, victims are not yet demoted, often no
    guarantees are in the way, and preemption is on."""
    pending = tuple(
        dataclasses.replace(j, tier=Tier.URGENT, queue=f"{j.line}-urgent")
        if rng.random() < 0.7
        else j
        for j in s.pending
    )
    running = tuple(
        dataclasses.replace(r, preemption_count=0) if rng.random() < 0.8 else r for r in s.running
    )
    queues = s.queues
    if rng.random() < 0.5:
        queues = tuple(dataclasses.replace(q, guarantee_gpus=0) for q in queues)
    return dataclasses.replace(
        s,
        pending=pending,
        running=running,
        queues=queues,
        policy=dataclasses.replace(s.policy, preemption=True),
    )


def fingerprint(p: Plan) -> dict[str, Any]:
    """What a plan decided, in a form that survives JSON: the preemptions in
    full (they are what victim selection produces) and a digest of the rest.

    The digest is of the plan's fields as they were when the corpus was written (the
    dataclass repr before ``Plan.migrations``); migrations and borrowed flags, when there are
    any, are listed apart, so a plan without them keeps its recorded fingerprint."""
    legacy = (
        f"Plan(starts={p.starts!r}, preemptions={p.preemptions!r}, "
        f"reservations={p.reservations!r}, verdicts={p.verdicts!r}, now={p.now!r})"
    )
    out: dict[str, Any] = {
        "preemptions": [[x.victim_id, x.for_job_id] for x in p.preemptions],
        "digest": hashlib.sha256(legacy.encode()).hexdigest()[:16],
    }
    if p.migrations:
        out["migrations"] = [[m.job_id, m.for_job_id, m.to_node] for m in p.migrations]
    if p.marks:
        out["marks"] = [[m.job_id, m.borrowed] for m in p.marks]
    return out


def record() -> list[dict[str, Any]]:
    """The fingerprint of every case's plan, in case order."""
    return [fingerprint(plan(corpus_snapshot(case), NOW)) for case in range(CASES)]


def load() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text())


def write() -> None:
    """One case a line, so a diff of the fixture names the cases that changed."""
    rows = ",\n".join(json.dumps(f, sort_keys=True) for f in record())
    FIXTURE.write_text(f"[\n{rows}\n]\n")


if __name__ == "__main__":  # pragma: no cover - rewrites the fixture on purpose
    write()
    sys.stdout.write(f"wrote {CASES} plans to {FIXTURE}\n")
