"""check_plan catches every kind of broken plan (table-driven mutations)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from scheduling.engine import (
    LineView,
    Mark,
    Plan,
    PolicyConfig,
    Preemption,
    QueueView,
    Reservation,
    Slot,
    Start,
    Tier,
    Verdict,
    check_plan,
    plan,
)

from .helpers import HOUR, NOW, node, pjob, rjob, snap


def base():
    nodes = [
        node("a"),
        node("b", free=range(4)),
        node("c", state="cordoned"),
        node("d", rdma=False),
        node("e", gpu_memory_gb=40),
    ]
    running = [
        rjob(1, {"b": range(4, 8)}, tier="experiment"),
        rjob(2, {"x": range(8)}, tier="core", preemptible=False),
        rjob(3, {"y": range(8)}, tier="urgent", preemptible=True),
        rjob(4, {"z": range(8)}, tier="experiment", preemption_count=4),
        rjob(5, {"g": range(8)}, tier="experiment", queue="llm-guarded"),
    ]
    nodes += [node("x", free=()), node("y", free=()), node("z", free=()), node("g", free=())]
    queues = [
        QueueView("llm-urgent", "llm", Tier.URGENT),
        QueueView("llm-core", "llm", Tier.CORE, quota_gpus=8),
        QueueView("llm-experiment", "llm", Tier.EXPERIMENT),
        QueueView("llm-finetune", "llm", Tier.FINETUNE),
        QueueView("llm-guarded", "llm", Tier.EXPERIMENT, guarantee_gpus=8),
    ]
    pending = [
        pjob(10, 8, tier="urgent"),
        pjob(11, 4, rdma=True, gpu_memory_gb=80),
        pjob(12, 16, tier="core"),
        pjob(13, 4, tier="core", exclusive_node=True),
    ]
    s = snap(nodes, pending, running, lines=[LineView("llm", None)], queues=queues)
    return s


def with_(p: Plan, **kw) -> Plan:
    return dataclasses.replace(p, **kw)


def verdicts_without(p: Plan, *ids: int) -> dict[int, Verdict]:
    return {k: v for k, v in p.verdicts.items() if k not in ids}


def start(job_id: int, *slots: tuple[str, tuple[int, ...]], borrowed: bool = False) -> Start:
    return Start(job_id, tuple(Slot(n, g) for n, g in slots), borrowed)


def starting(*starts: Start) -> Callable[[Plan], Plan]:
    """Mutation: the plan starts exactly these jobs (and has no verdict for them)."""
    ids = [x.job_id for x in starts]
    return lambda p: with_(p, starts=starts, verdicts=verdicts_without(p, *ids))


def preempting(
    victim_id: int, for_job_id: int, mode: str = "graceful", deadline: float = NOW + 300
) -> Callable[[Plan], Plan]:
    """Mutation: the plan preempts exactly this victim for this job."""
    return lambda p: with_(p, preemptions=(Preemption(victim_id, for_job_id, mode, deadline),))


EIGHT = tuple(range(8))
MUTATIONS = [
    (
        "GPU given twice",
        starting(start(10, ("a", EIGHT)), start(11, ("a", (0, 1, 2, 3)))),
        "given twice",
    ),
    ("GPU not free", starting(start(11, ("b", (3, 4, 5, 6)))), "not free"),
    ("partial gang", starting(start(12, ("a", EIGHT))), "gang broken"),
    ("cordoned node", starting(start(10, ("c", EIGHT))), "cordoned node"),
    ("RDMA violated", starting(start(11, ("d", (0, 1, 2, 3)))), "does not meet its needs"),
    ("GPU memory violated", starting(start(11, ("e", (0, 1, 2, 3)))), "does not meet its needs"),
    ("exclusive shared", starting(start(13, ("b", (0, 1, 2, 3)))), "shared node"),
    ("quota exceeded", starting(start(12, ("a", EIGHT), ("d", EIGHT))), "over 8"),
    (
        "non-preemptible borrower",
        starting(start(12, ("a", EIGHT), ("d", EIGHT), borrowed=True)),
        "non-preemptible job 12 started on borrowed",
    ),
    ("victim of equal tier", preempting(3, 10), "not a lower tier"),
    ("non-preemptible victim", preempting(2, 10), "non-preemptible job 2 preempted"),
    ("demoted victim", preempting(4, 10), "demoted job 4 preempted"),
    ("guarantee eaten", preempting(5, 10), "below its guarantee"),
    ("victim preempted for a lower tier", preempting(1, 11), "not a lower tier"),
    ("unknown mode", preempting(1, 10, "nuke", NOW), "unknown mode"),
    ("missing verdict", lambda p: with_(p, verdicts=verdicts_without(p, 12)), "has no verdict"),
    (
        "unknown code",
        lambda p: with_(p, verdicts={**p.verdicts, 12: Verdict("BECAUSE", "x", {}, "y")}),
        "unknown verdict code",
    ),
    (
        "node reserved twice",
        lambda p: with_(
            p,
            reservations=(
                Reservation(12, ("a", "d"), NOW + HOUR),
                Reservation(13, ("a",), NOW + HOUR),
            ),
        ),
        "reserved twice",
    ),
    (
        "backfill delays a reservation",
        lambda p: with_(
            starting(start(11, ("a", (0, 1, 2, 3))))(p),
            reservations=(Reservation(10, ("a",), NOW + 60),),
        ),
        "does not fit on its nodes",
    ),
    (
        "flag against the accounting",
        lambda p: with_(p, marks=(Mark(1, True),)),
        "against the accounting",
    ),
    (
        "flag of an unknown job",
        lambda p: with_(p, marks=(Mark(99, False),)),
        "unknown running job 99",
    ),
    (
        "flag of a job the plan stops",
        lambda p: with_(preempting(1, 10)(p), marks=(Mark(1, True),)),
        "the plan stops, moves or displaces it",
    ),
]


@pytest.mark.parametrize("name, mutate, expected", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_check_plan_reports(name, mutate, expected):
    s = base()
    good = plan(s, NOW)
    assert check_plan(s, good) == []
    bad = mutate(good)
    errors = check_plan(s, bad)
    assert any(expected in e for e in errors), errors


def test_preemption_when_policy_forbids_it_is_reported():
    s = dataclasses.replace(base(), policy=PolicyConfig(preemption=False))
    good = plan(s, NOW)
    bad = with_(good, preemptions=(Preemption(1, 10, "graceful", NOW + 300),))
    assert any("preemption is off" in e for e in check_plan(s, bad))


def test_reclaiming_borrowed_work_is_allowed_at_equal_tier():
    s = snap(
        [node("a", free=()), node("b", free=())],
        [pjob(10, 8, line="search")],
        [rjob(1, {"a": range(8)}, started_at=0), rjob(6, {"b": range(8)}, started_at=5)],
        lines=[LineView("llm", 8), LineView("search", 8)],
    )
    p = plan(s, NOW)
    assert [(x.victim_id, x.for_job_id) for x in p.preemptions] == [(6, 10)]
    assert check_plan(s, p) == []


def test_started_job_with_a_verdict_is_reported():
    s = base()
    good = plan(s, NOW)
    sid = good.starts[0].job_id
    bad = with_(good, verdicts={**good.verdicts, sid: Verdict("PRIORITY", "x", {}, "y")})
    assert any("also has a verdict" in e for e in check_plan(s, bad))
