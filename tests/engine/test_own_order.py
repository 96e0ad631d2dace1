"""A person's own order (Slurm's ``scontrol top``, ``own_order.py``): a job put first among
its owner's waiting jobs takes the first of their places, the latest put first goes first,
and nobody else's job changes place, with the people's turns or without; other tiers,
lines and overdue jobs are never swapped with it."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import aging
from scheduling.engine import types as et

from .helpers import NOW, node, pjob, rjob, run, snap, started
from .test_user_turns import FULL, PLAIN, ids, jobs_strategy


def topped(job: et.PendingJob, at: float) -> et.PendingJob:
    return dataclasses.replace(job, first_among_own=at)


def test_a_job_put_first_takes_the_first_of_its_owner_s_places_only() -> None:
    jobs = [pjob(i, 8, owner="ann" if i % 2 else "bob", submitted_at=NOW - 900 + i)
            for i in range(1, 7)]  # fmt: skip
    assert ids(aging.order(jobs, NOW, PLAIN, {}, {})) == [1, 2, 3, 4, 5, 6]
    jobs[4] = topped(jobs[4], NOW - 10)  # ann's job 5
    # ann's places (1, 3, 5) go 5, 1, 3; bob's (2, 4, 6) are as they were
    assert ids(aging.order(jobs, NOW, PLAIN, {}, {})) == [5, 2, 1, 4, 3, 6]
    assert ids(aging.order(jobs, NOW, FULL, {}, {})) == [5, 2, 1, 4, 3, 6]
    # the latest put first goes first
    jobs[2] = topped(jobs[2], NOW - 5)
    assert ids(aging.order(jobs, NOW, PLAIN, {}, {})) == [3, 2, 5, 4, 1, 6]


def test_another_tier_line_or_an_overdue_job_is_never_swapped_with_it() -> None:
    bound = FULL.starvation_bound_s
    assert bound is not None
    jobs = [
        pjob(1, 8, owner="ann", tier="finetune", submitted_at=NOW - 900),
        pjob(2, 8, owner="ann", line="cv", submitted_at=NOW - 850),
        pjob(3, 8, owner="ann", submitted_at=NOW - bound - 10),  # overdue: first
        pjob(4, 8, owner="ann", submitted_at=NOW - 800),
        topped(pjob(5, 8, owner="ann", submitted_at=NOW - 700), NOW - 1),
    ]
    before = ids(aging.order([*jobs[:4], pjob(5, 8, owner="ann", submitted_at=NOW - 700)],
                             NOW, PLAIN, {}, {}))  # fmt: skip
    after = ids(aging.order(jobs, NOW, PLAIN, {}, {}))
    # only llm's experiment jobs of ann that are not overdue (4 and 5) trade places
    assert after == [4 if i == 5 else 5 if i == 4 else i for i in before]


def test_the_plan_starts_the_job_put_first() -> None:
    nodes = [node("a")]
    anns = [pjob(i, 8, owner="ann", submitted_at=NOW - 600 + i) for i in (1, 2, 3)]
    assert list(started(run(snap(nodes, anns, [], policy=FULL)))) == [1]
    anns[2] = topped(anns[2], NOW - 30)
    assert list(started(run(snap(nodes, anns, [], policy=FULL)))) == [3]
    # a colleague's job ahead keeps its place: bob's job 0 still starts first
    bob = pjob(9, 8, owner="bob", submitted_at=NOW - 900)
    busy = [rjob(100, {"a": range(8)}, owner="carl", predicted_end=NOW + 3600)]
    plan = run(snap([*nodes, node("b")], [bob, *anns], busy, policy=FULL))
    assert list(started(plan)) == [9]


@settings(max_examples=300, deadline=None)
@given(
    jobs_strategy,
    st.dictionaries(st.sampled_from(["ann", "bob", "cy"]), st.integers(0, 64)),
    st.lists(st.integers(0, 39), max_size=6),
    st.booleans(),
)
def test_putting_jobs_first_moves_nobody_else_s(specs, held_by, tops, turns) -> None:
    """With random jobs, GPUs held and jobs put first: every job of a person who put none
    first keeps its place; each person keeps the same places; within them the jobs put
    first come first, latest first."""
    policy = FULL if turns else PLAIN
    jobs = [
        pjob(i + 1, g, tier=tier, line=line, owner=owner, submitted_at=NOW - 6000 + t)
        for i, (owner, line, tier, g, t) in enumerate(specs)
    ]
    held = {(line, who): n for who, n in held_by.items() for line in ("llm", "cv")}
    plain = aging.order(jobs, NOW, policy, {}, {}, held)
    chosen = {i: NOW - 100 + k for k, i in enumerate(tops) if i < len(jobs)}
    for i, at in chosen.items():
        jobs[i] = topped(jobs[i], at)
    mine = aging.order(jobs, NOW, policy, {}, {}, held)
    assert [j.owner for j in mine] == [j.owner for j in plain], "each person, the same places"
    assert [(j.tier, j.line) for j in mine] == [(j.tier, j.line) for j in plain]
    movers = {jobs[i].owner for i in chosen}
    for before, after in zip(plain, mine, strict=True):
        if before.owner not in movers:
            assert after.id == before.id
    for who in movers:
        for group in {(j.tier, j.line) for j in jobs}:
            own = [j for j in mine if j.owner == who and (j.tier, j.line) == group]
            keys = [j.first_among_own for j in own]
            first = [k for k in keys if k]
            assert keys[: len(first)] == sorted(first, reverse=True), "put first, latest first"
