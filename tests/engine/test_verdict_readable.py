"""Verdicts a person can read (#15): no epoch, no float dump, one estimated start.

Every verdict the engine gives, over the plan corpus and a busy multi-cycle run:

- ``details`` are machine fields: ints and strings only; ``..._at`` an ISO 8601 UTC time to
  the second, ``..._seconds`` whole seconds;
- the message and the remedy hold no epoch-like number and no float (``1796085057.45``,
  ``1.79612e+09``);
- a time they name is the verdict's ``estimated_start``, formatted as ``when`` formats it;
- no estimated start <=> ``details["no_estimate_reason"]`` says why.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime

from scheduling.engine import Code, LineView, Plan, Tier, Verdict, plan
from scheduling.engine import types as et
from scheduling.engine.explain import NO_ESTIMATE, when
from scheduling.engine.line_estimate import BORROWING, ESTIMATE_BASIS

from .corpus import CASES, corpus_snapshot
from .helpers import HOUR, node, pjob, rjob, run, snap, standard_queues
from .sim import Stepper
from .strategies import NOW

EPOCH = re.compile(r"\d{9,}")
FLOAT = re.compile(r"\d\.\d|\d[eE][+-]?\d")
SHOWN_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")
ISO_SECOND = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def unreadable(v: Verdict) -> list[str]:
    out = []
    for key, value in v.details.items():
        if isinstance(value, bool) or not isinstance(value, int | str):
            out.append(f"details[{key}] = {value!r} is not an int or a string")
        elif key.endswith("_at") and not (isinstance(value, str) and ISO_SECOND.match(value)):
            out.append(f"details[{key}] = {value!r} is not ISO 8601 UTC to the second")
        elif key.endswith("_seconds") and not isinstance(value, int):
            out.append(f"details[{key}] = {value!r} is not whole seconds")
    for text in (v.message, v.remedy):
        if EPOCH.search(text) or FLOAT.search(text):
            out.append(f"raw number in {text!r}")
        for shown in SHOWN_TIME.findall(text):
            if shown != when(v.estimated_start):
                out.append(f"{shown!r} in {text!r} is not the estimated start")
    if (v.estimated_start is None) != (NO_ESTIMATE in v.details):
        out.append(f"estimated start {v.estimated_start} but details {v.details}")
    if v.estimated_start is not None and v.code == Code.QUOTA_EXCEEDED:
        at = datetime.fromtimestamp(int(v.estimated_start), tz=UTC)
        stamp = at.isoformat().replace("+00:00", "Z")
        if v.details.get(ESTIMATE_BASIS) == BORROWING:
            # its turn to borrow, before its own room (if that comes at all)
            if v.details.get("quota_room_at", "9999") <= stamp:
                out.append(f"borrowing at {stamp}, not before the room {v.details}")
        else:
            # the quota room, or the later start of the nodes an overdue job reserved
            key = (
                "reservation_starts_at" if "reservation_starts_at" in v.details else "quota_room_at"
            )
            if v.details.get(key) != stamp:
                out.append(f"{key} {v.details.get(key)} is not the estimate")
    return out


def all_unreadable(p: Plan) -> list[tuple[int, str, list[str]]]:
    return [(j, v.code, bad) for j, v in p.verdicts.items() if (bad := unreadable(v))]


def test_every_corpus_verdict_reads_well():
    codes: set[str] = set()
    for case in range(0, CASES, 3):
        p = plan(corpus_snapshot(case), NOW)
        assert all_unreadable(p) == [], case
        codes.update(v.code for v in p.verdicts.values())
    assert codes == set(et.VERDICT_CODES)


def test_a_busy_run_on_a_realistic_clock_reads_well():
    """Cluster time in 2026 (epochs of ten digits), jobs coming and going for 6 hours."""
    rng = random.Random(7)
    nodes = [node(f"r{r}-n{i}", rack=f"r{r}", block=f"b{r // 4}", rdma=r % 5 != 0)
             for r in range(12) for i in range(8)]  # fmt: skip
    lines = [LineView("llm", None), LineView("search", 200)]
    queues = [et.QueueView(f"{ln.name}-{t.label}", ln.name, t) for ln in lines for t in Tier]
    st = Stepper(nodes, lines, queues, now=1_796_085_057.451252)
    job_id = 0
    for cycle in range(72):
        for _ in range(rng.randint(0, 9)):
            job_id += 1
            line, tier = rng.choice(lines).name, rng.choice(list(Tier))
            gpus = rng.choice([1, 2, 4, 8, 16, 32, 64])
            st.submit(
                et.PendingJob(id=job_id, queue=f"{line}-{tier.label}", line=line, tier=tier,
                              gpus=gpus, rdma=gpus > 8, submitted_at=st.now,
                              predicted_runtime_s=rng.choice([None, 1800.0, 5400.0]),
                              preemption_count=rng.choice([0, 0, 0, 4])),
                duration=rng.uniform(600, 4 * HOUR),
            )  # fmt: skip
        p = st.step(300.0 if cycle else 0.0)
        assert all_unreadable(p) == [], cycle
    seen = {v.code for _, _, p in st.plans for v in p.verdicts.values()}
    assert {Code.QUOTA_EXCEEDED, Code.PREEMPTING, Code.DEMOTED, Code.INSUFFICIENT_GPUS} <= seen


def test_the_quota_estimate_is_the_same_in_the_remedy_and_the_estimated_start():
    """#15: "predicted by 2026-12-01 00:30 UTC" and "Estimated start: unknown" at once."""
    t0 = 1_796_085_057.451252
    running = [rjob(1, {"a": range(8)}, tier="core", predicted_end=t0 + 2 * HOUR)]
    p = run(snap([node("a"), node("b")], [pjob(2, 16, tier="core")], running,
                 lines=[LineView("llm", 16)]), now=t0)  # fmt: skip
    v = p.verdicts[2]
    assert v.code == Code.QUOTA_EXCEEDED
    assert v.estimated_start == t0 + 2 * HOUR
    assert f"predicted by {when(t0 + 2 * HOUR)}" in v.remedy
    assert v.details["quota_room_at"] == "2026-12-01T02:30:57Z"
    assert unreadable(v) == []


def test_the_quota_estimate_counts_the_jobs_this_plan_starts_and_holds_next_plan():
    """The jobs that fill the quota start in the same plan: the waiting job's estimate is
    when the first of them ends, from that first plan on, and the same at the next."""
    st = Stepper([node("a"), node("b"), node("c")], [LineView("llm", 16)],
                 standard_queues("llm"), now=NOW)  # fmt: skip
    for i, runtime in ((1, 2 * HOUR), (2, HOUR)):
        st.submit(pjob(i, 8, tier="core", predicted_runtime_s=runtime), duration=10 * HOUR)
    st.submit(pjob(3, 8, tier="core"), duration=HOUR)
    first = st.step()
    assert sorted(x.job_id for x in first.starts) == [1, 2]
    v = first.verdicts[3]
    assert v.code == Code.QUOTA_EXCEEDED and v.estimated_start == NOW + HOUR
    assert unreadable(v) == []
    again = st.step(60.0).verdicts[3]
    assert (again.code, again.estimated_start, again.remedy) == (v.code, NOW + HOUR, v.remedy)
