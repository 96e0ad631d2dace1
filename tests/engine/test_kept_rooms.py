"""Rooms kept for moved jobs (#19, ``kept_rooms.py``): while a moved job checkpoints no
other job takes the room its move kept for it, and once stopped it restarts there first.

Scenario: four 8-GPU nodes. n00 runs the moved job M (1 GPU, checkpointing on its way to
n01); n01 is 7/8 used by core work, its last GPU the room kept for M; n02 has 2 GPUs
free; n03 is wholly free. A 1-GPU job waits: best fit would put it in n01's hole.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et

from .helpers import HOUR, NOW, node, pjob, rjob, run, snap
from .test_consolidation_properties import fragmented

MOVED = 100
NEW = 1


def base(extra: list[et.RunningJob] | None = None) -> list[et.RunningJob]:
    core = [
        rjob(200, {"n01": range(7)}, tier="core", predicted_end=NOW + 10 * HOUR),
        rjob(201, {"n02": range(6)}, tier="core", predicted_end=NOW + 10 * HOUR),
    ]
    return core + (extra or [])


def checkpointing(move_to: str | None = "n01") -> et.RunningJob:
    return rjob(
        MOVED, {"n00": [0]}, checkpointable=True, state=et.PREEMPTING, migrating=True,
        preempted_for=None, preempt_deadline=NOW + 200, predicted_end=NOW + 5 * HOUR,
        move_to=move_to,
    )  # fmt: skip


def nodes() -> list[et.NodeView]:
    return [node(f"n{i:02d}") for i in range(4)]


def test_while_it_checkpoints_its_room_is_not_given_to_another_job():
    result = run(snap(nodes(), [pjob(NEW, 1)], base([checkpointing()])))
    [start] = result.starts
    assert [s.node for s in start.placement] == ["n02"]  # not n01's hole, not whole n03


def test_without_a_kept_room_best_fit_takes_the_hole():
    """The same state with the room not kept: the control that shows the hole is the
    tightest fit."""
    result = run(snap(nodes(), [pjob(NEW, 1)], base([checkpointing(move_to=None)])))
    assert [s.node for s in result.starts[0].placement] == ["n01"]


def test_the_checker_refuses_a_plan_that_takes_the_kept_room():
    s = snap(nodes(), [pjob(NEW, 1)], base([checkpointing()]))
    good = plan(s, NOW)
    slot = et.Slot("n01", (7,))
    bad = dataclasses.replace(
        good, starts=(dataclasses.replace(good.starts[0], placement=(slot,)),)
    )
    assert any("room kept for moved jobs" in e for e in check_plan(s, bad))


def moved_back(move_to: str = "n01", **kw) -> et.PendingJob:
    """M after its stop: waiting again, with the room kept on ``move_to``."""
    return pjob(MOVED, 1, submitted_at=NOW - 10 * HOUR, move_to=move_to, **kw)


def test_once_stopped_it_restarts_in_its_room_before_any_other_job():
    # a core job of 1 GPU submitted earlier would go first, and to the tightest hole
    waiting = [pjob(NEW, 1, tier="core", submitted_at=NOW - 20 * HOUR), moved_back()]
    result = run(snap(nodes(), waiting, base()))
    placed = {s.job_id: [x.node for x in s.placement] for s in result.starts}
    assert placed == {MOVED: ["n01"], NEW: ["n02"]}


def test_a_room_that_is_gone_is_not_kept_and_the_job_waits_its_turn():
    """n01 filled up meanwhile: the moved job is one waiting job among others."""
    full = base([rjob(300, {"n01": [7]}, tier="core")])
    full[1] = rjob(201, {"n02": range(7)}, tier="core")  # one GPU left: n02's
    three = [node(f"n{i:02d}") for i in range(3)]
    waiting = [pjob(NEW, 1, tier="core", submitted_at=NOW - 20 * HOUR), moved_back()]
    result = run(snap(three, waiting, full, policy=et.PolicyConfig(borrowing=False)))
    placed = {s.job_id: [x.node for x in s.placement] for s in result.starts}
    # the core job ahead of it took the one hole; the moved job breaks the free n00
    assert placed == {NEW: ["n02"], MOVED: ["n00"]}


def test_the_restart_still_obeys_its_quota():
    lines = [et.LineView("llm", 0)]
    policy = et.PolicyConfig(borrowing=False)
    result = run(snap(nodes(), [moved_back()], base(), lines=lines, policy=policy))
    assert result.starts == ()
    assert result.verdicts[MOVED].code == "QUOTA_EXCEEDED"


# -- two plans in a row, on random fragmented clusters ------------------------------------
def after_moves(s: et.Snapshot, p: et.Plan, rng: random.Random) -> et.Snapshot:
    """The next plan's snapshot: the plan's moved jobs checkpoint (``move_to`` set), its
    starts run, and new small jobs arrive."""
    moved = {m.job_id: m for m in p.migrations}
    running = [
        dataclasses.replace(
            r, state=et.PREEMPTING, migrating=True, preempted_for=moved[r.id].for_job_id,
            preempt_deadline=moved[r.id].grace_deadline, move_to=moved[r.id].to_node,
        ) if r.id in moved else r
        for r in s.running
    ]  # fmt: skip
    used: dict[str, set[int]] = {}
    started_ids = set()
    pending = {j.id: j for j in s.pending}
    for st_ in p.starts:
        started_ids.add(st_.job_id)
        j = pending[st_.job_id]
        for slot in st_.placement:
            used.setdefault(slot.node, set()).update(slot.gpus)
        running.append(
            et.RunningJob(
                id=j.id, queue=j.queue, line=j.line, tier=j.tier, gpus=j.gpus,
                placement=st_.placement, preemptible=j.preemptible, started_at=NOW,
                predicted_end=NOW + 3600, borrowed=st_.borrowed,
            )
        )  # fmt: skip
    nodes_ = tuple(
        dataclasses.replace(n, free_gpus=tuple(g for g in n.free_gpus if g not in used.get(n.name, ())))
        for n in s.nodes
    )  # fmt: skip
    waiting = [j for j in s.pending if j.id not in started_ids]
    waiting += [
        et.PendingJob(
            id=500 + i,
            queue="L0-experiment",
            line="L0",
            tier=et.Tier.EXPERIMENT,
            gpus=rng.choice([1, 1, 2]),
            submitted_at=NOW - 50000,
        )  # fmt: skip
        for i in range(rng.randint(1, 6))
    ]
    return dataclasses.replace(s, nodes=nodes_, running=tuple(running), pending=tuple(waiting))


def stopped(s: et.Snapshot) -> et.Snapshot:
    """The moved jobs have stopped: waiting again with their rooms kept."""
    leaving = [r for r in s.running if r.move_to is not None]
    freed: dict[str, set[int]] = {}
    for r in leaving:
        for slot in r.placement:
            freed.setdefault(slot.node, set()).update(slot.gpus)
    nodes_ = tuple(
        dataclasses.replace(n, free_gpus=tuple(sorted({*n.free_gpus, *freed.get(n.name, ())})))
        for n in s.nodes
    )
    back = [
        et.PendingJob(id=r.id, queue=r.queue, line=r.line, tier=r.tier, gpus=r.gpus,
                      preemptible=r.preemptible, submitted_at=NOW - 1000, move_to=r.move_to)
        for r in leaving
    ]  # fmt: skip
    running = tuple(r for r in s.running if r.move_to is None)
    return dataclasses.replace(s, nodes=nodes_, running=running, pending=(*s.pending, *back))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_moved_jobs_keep_their_rooms_across_plans_and_restart_there(seed, defrag):
    """Plan, then the next plan while the moved jobs checkpoint (none of their rooms is
    taken: re-derived here, and ``check_plan`` agrees), then the plan after they stopped:
    every moved job whose room is still free restarts in it."""
    rng = random.Random(seed)
    s1 = fragmented(rng, defrag=defrag)
    p1 = plan(s1, NOW)
    if not p1.migrations:
        return
    s2 = after_moves(s1, p1, rng)
    p2 = plan(s2, NOW)
    assert check_plan(s2, p2) == []
    free = {n.name: len(n.free_gpus) for n in s2.nodes}
    ready = {n.name for n in s2.nodes if n.state == "ready" and not n.exclusive}
    left = dict(free)
    for r in s2.running:  # the rooms kept: on a usable node, while its free GPUs last
        if r.move_to in ready and left[r.move_to] >= r.gpus:
            left[r.move_to] -= r.gpus
    for st_ in p2.starts:
        for slot in st_.placement:
            left[slot.node] -= len(slot.gpus)
    for m in p2.migrations:
        left[m.to_node] -= next(r.gpus for r in s2.running if r.id == m.job_id)
    assert all(g >= 0 for g in left.values()), left
    s3 = stopped(s2)
    p3 = plan(s3, NOW)
    assert check_plan(s3, p3) == []
    placed = {x.job_id: x.placement for x in p3.starts}
    room = {n.name: len(n.free_gpus) for n in s3.nodes if n.name in ready}
    for j in s3.pending:
        if j.move_to is None or room.get(j.move_to, 0) < j.gpus:
            continue
        assert j.id in placed or p3.verdicts[j.id].code == "QUOTA_EXCEEDED", j.id
        if j.id in placed:
            assert [x.node for x in placed[j.id]] == [j.move_to]
        room[j.move_to] -= j.gpus


def test_the_random_states_move_jobs_and_keep_rooms():
    """Non-vacuity: the property above meets moves, kept rooms and restarts in them."""
    restarts = 0
    for seed in range(400):
        rng = random.Random(seed)
        s1 = fragmented(rng, defrag=seed % 2 == 0)
        p1 = plan(s1, NOW)
        if not p1.migrations:
            continue
        s3 = stopped(after_moves(s1, p1, rng))
        moved = {j.id: j.move_to for j in s3.pending if j.move_to}
        p3 = plan(s3, NOW)
        restarts += sum(
            1 for x in p3.starts if x.job_id in moved and x.placement[0].node == moved[x.job_id]
        )
    assert restarts >= 20


def test_a_moved_job_now_over_its_quota_borrows_its_own_room_before_others_start():
    """Its line's quota is full by now (the borrowed flags follow the quotas): it restarts
    borrowed, in its room, before the earlier core job of another line is placed."""
    lines = [et.LineView("llm", 13), et.LineView("cv", None)]
    waiting = [
        pjob(NEW, 1, tier="core", line="cv", submitted_at=NOW - 20 * HOUR),
        moved_back(predicted_runtime_s=HOUR),
    ]
    result = run(snap(nodes(), waiting, base(), lines=lines))
    placed = {s.job_id: ([x.node for x in s.placement], s.borrowed) for s in result.starts}
    assert placed == {MOVED: (["n01"], True), NEW: (["n02"], False)}
