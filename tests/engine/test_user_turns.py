"""People of a line take turns (``user_turns``, on in ``full``): a burst of one person's
jobs no longer goes first by submit time ahead of a colleague's later job."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import aging
from scheduling.engine import types as et
from scheduling.engine.user_turns import take_turns

from .helpers import NOW, node, pjob, rjob, run, snap, started

FULL = et.PolicyConfig.preset("full")
PLAIN = dataclasses.replace(FULL, user_turns=False)


def ids(jobs) -> list[int]:
    return [j.id for j in jobs]


def test_a_burst_of_one_person_s_jobs_no_longer_keeps_a_colleague_waiting() -> None:
    burst = [pjob(i, 8, owner="ann", submitted_at=NOW - 600 + i) for i in range(1, 7)]
    later = pjob(7, 8, owner="bob", submitted_at=NOW - 60)
    assert ids(aging.order([*burst, later], NOW, PLAIN, {}, {})) == [1, 2, 3, 4, 5, 6, 7]
    # a tie at nothing held goes to the earlier job; then bob, who holds less than ann
    assert ids(aging.order([*burst, later], NOW, FULL, {}, {})) == [1, 7, 2, 3, 4, 5, 6]


def test_the_gpus_people_hold_now_count() -> None:
    """ann holds 16 GPUs: bob's jobs go first until his GPUs (held and given) reach hers."""
    anns = [pjob(i, 8, owner="ann", submitted_at=NOW - 600 + i) for i in (1, 2)]
    bobs = [pjob(i, 8, owner="bob", submitted_at=NOW - 300 + i) for i in (3, 4, 5)]
    held = {("llm", "ann"): 16}
    order = aging.order([*anns, *bobs], NOW, FULL, {}, {}, held)
    # bob 0 -> 3, bob 8 -> 4, then ann 16 (job 1, earlier) against bob 16 (job 5)
    assert ids(order) == [3, 4, 1, 5, 2]
    # held in another line does not count in this one
    assert ids(aging.order([*anns, *bobs], NOW, FULL, {}, {}, {("cv", "ann"): 16})) == [
        1, 3, 2, 4, 5,
    ]  # fmt: skip


def test_other_lines_tiers_and_overdue_jobs_keep_their_places() -> None:
    bound = FULL.starvation_bound_s
    assert bound is not None
    jobs = [
        pjob(1, 8, owner="ann", submitted_at=NOW - 900),
        pjob(2, 8, owner="cy", line="cv", submitted_at=NOW - 850),
        pjob(3, 8, owner="ann", submitted_at=NOW - 800),
        pjob(4, 8, owner="dee", line="cv", submitted_at=NOW - 750),
        pjob(5, 8, owner="bob", submitted_at=NOW - 700),
        pjob(6, 8, owner="bob", tier="finetune", submitted_at=NOW - 650),
        pjob(7, 8, owner="ann", submitted_at=NOW - bound - 10),  # overdue: first
    ]
    plain = ids(aging.order(jobs, NOW, PLAIN, {}, {}))
    assert plain == [6, 7, 1, 2, 3, 4, 5]
    # llm's experiment places (1, 3, 5) go ann, bob, ann; cv's, the finetune job and the
    # overdue job stay where they were
    assert ids(aging.order(jobs, NOW, FULL, {}, {})) == [6, 7, 1, 2, 5, 4, 3]


def test_the_plan_starts_the_colleague_s_job_in_the_one_free_place() -> None:
    nodes = [node("a"), node("b")]
    busy = [rjob(100, {"a": range(8)}, owner="ann", predicted_end=NOW + 3600)]
    anns = [pjob(i, 8, owner="ann", submitted_at=NOW - 600 + i) for i in (1, 2, 3)]
    bobs = [pjob(4, 8, owner="bob", submitted_at=NOW - 60)]
    assert list(started(run(snap(nodes, [*anns, *bobs], busy, policy=FULL)))) == [4]
    assert list(started(run(snap(nodes, [*anns, *bobs], busy, policy=PLAIN)))) == [1]


def test_only_the_full_preset_takes_turns() -> None:
    assert FULL.user_turns
    for name in ("fifo", "priority", "backfill"):
        assert not et.PolicyConfig.preset(name).user_turns


jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["ann", "bob", "cy", ""]),
        st.sampled_from(["llm", "cv"]),
        st.sampled_from(["experiment", "finetune"]),
        st.integers(1, 16),
        st.integers(0, 5000),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(jobs_strategy, st.dictionaries(st.sampled_from(["ann", "bob", "cy"]), st.integers(0, 64)))
def test_turns_only_permute_a_line_s_places_fairly(specs, held_by) -> None:
    """Every group keeps its places; each person's jobs keep their order; each place goes to
    a person holding the fewest GPUs (held plus given so far) of those still waiting."""
    jobs = [
        pjob(i + 1, g, tier=tier, line=line, owner=owner, submitted_at=NOW - 6000 + t)
        for i, (owner, line, tier, g, t) in enumerate(specs)
    ]
    held = {(line, who): n for who, n in held_by.items() for line in ("llm", "cv")}
    plain = aging.order(jobs, NOW, PLAIN, {}, {})
    fair = aging.order(jobs, NOW, FULL, {}, {}, held)
    assert sorted(ids(fair)) == sorted(ids(plain))

    def group(j):
        return (j.tier, j.line)

    assert [group(j) for j in fair] == [group(j) for j in plain]
    for who in {j.owner for j in jobs}:
        for g in {group(j) for j in jobs}:
            mine = [j.id for j in plain if j.owner == who and group(j) == g]
            assert [j.id for j in fair if j.owner == who and group(j) == g] == mine
    for g in {group(j) for j in jobs}:
        given_: dict[str, int] = {}
        waiting = [j for j in fair if group(j) == g]
        for i, j in enumerate(waiting):
            line = j.line
            level = {
                o.owner: held.get((line, o.owner), 0) + given_.get(o.owner, 0) for o in waiting[i:]
            }
            assert level[j.owner] == min(level.values())
            given_[j.owner] = given_.get(j.owner, 0) + j.gpus


def test_one_person_per_line_keeps_the_plain_order() -> None:
    """Replays (every owner ``""``) plan exactly as before the turns."""
    jobs = [pjob(i, 1 + i % 8, line=("llm", "cv")[i % 2], submitted_at=NOW - 50 * i)
            for i in range(1, 30)]  # fmt: skip
    assert ids(aging.order(jobs, NOW, FULL, {}, {})) == ids(aging.order(jobs, NOW, PLAIN, {}, {}))
    assert take_turns(jobs, {}, [j.line for j in jobs]) == jobs
