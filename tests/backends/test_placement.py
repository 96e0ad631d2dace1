"""The shared placement check (scheduling/backends/placement.py) and how each real backend
feeds it: good placements pass, every bad one is refused with the same code and words
whichever backend refuses it. Pure: no cluster, no database.
"""

from __future__ import annotations

import pytest

from scheduling.backends.base import (
    BackendError,
    LaunchRequest,
    PermanentBackendError,
    TransientBackendError,
    run_ref,
)
from scheduling.backends.placement import (
    NodeCapacity,
    check_placement,
    launch_ref,
    shape_problems,
    take_gpus,
)
from scheduling.backends.slurm import SlurmBackend, _View
from scheduling.backends.slurm_cli import SlurmCLI, SlurmNode
from scheduling.engine.types import Slot

NOW = 1_800_000_000.0
DRAINED = PermanentBackendError("node c is drained (maintenance)", code="node_cordoned")
SILENT = TransientBackendError("node d's slurmd is not responding", code="node_not_responding")

# a: empty 8-GPU node; b: GPUs 0-3 taken; c: drained; d: slurmd silent
NODES = {
    "a": NodeCapacity(gpus_total=8, free_gpus=tuple(range(8))),
    "b": NodeCapacity(gpus_total=8, free_gpus=(4, 5, 6, 7)),
    "c": NodeCapacity(gpus_total=8, free_gpus=tuple(range(8)), refusal=DRAINED),
    "d": NodeCapacity(gpus_total=8, free_gpus=tuple(range(8)), refusal=SILENT),
}


def request(*slots: tuple[str, tuple[int, ...]], exclusive: bool = False, job_id: int = 7,
            ref: str | None = None) -> LaunchRequest:  # fmt: skip
    return LaunchRequest(
        ref=ref or run_ref(job_id, 1),
        job_id=job_id,
        name="train",
        placement=tuple(Slot(node, gpus) for node, gpus in slots),
        progress_s=0.0,
        checkpoint_interval_s=3600.0,
        checkpoint_path="",
        exclusive_node=exclusive,
    )


# ---------------------------------------------------------------------------------------
# shape_problems: what is wrong on its face
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "slots, problems",
    [
        ([("a", (0,))], []),
        ([("a", (0, 1)), ("b", (4, 5))], []),
        ([], ["placement is empty"]),
        ([("a", ())], ["no GPUs on a"]),
        ([("a", (1, 1))], ["bad GPU indices [1, 1] on a"]),
        ([("a", (-1,))], ["bad GPU indices [-1] on a"]),
        ([("a", (0,)), ("a", (1,))], ["node a listed twice"]),
        ([("a", ()), ("a", (2, 2))],
         ["no GPUs on a", "bad GPU indices [2, 2] on a", "node a listed twice"]),
    ],
)  # fmt: skip
def test_shape_problems_lists_every_problem_in_order(slots, problems):
    assert shape_problems(tuple(Slot(n, g) for n, g in slots)) == problems


# ---------------------------------------------------------------------------------------
# check_placement
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "req",
    [
        request(("a", (0,))),
        request(("a", tuple(range(8)))),
        request(("b", (4, 5, 6, 7))),
        request(("b", (6,))),  # the check does not insist on the lowest free GPUs
        request(("a", (0, 1)), ("b", (4, 5))),
        request(("a", tuple(range(8))), exclusive=True),
    ],
    ids=["one GPU", "whole node", "the free half", "any free GPU", "two nodes", "exclusive"],
)
def test_good_placements_pass(req):
    check_placement(req, NODES)


@pytest.mark.parametrize(
    "req, code, words, permanent",
    [
        (request(), "invalid_placement", "placement is empty", True),
        (request(("a", ())), "invalid_placement", "no GPUs on a", True),
        (request(("a", (0, 0))), "invalid_placement", "bad GPU indices [0, 0] on a", True),
        (request(("a", (0,)), ("a", (1,))), "invalid_placement", "node a listed twice", True),
        (request(("zz", (0,))), "unknown_node", "unknown node zz", True),
        (request(("c", (0,))), "node_cordoned", "node c is drained", True),
        (request(("d", (0,))), "node_not_responding", "slurmd is not responding", False),
        (request(("a", (8,))), "invalid_placement", "bad GPU indices [8] on a (8 GPUs)", True),
        (request(("b", (2, 3, 4))), "gpu_busy", "b GPU(s) [2, 3] are in use", True),
        (request(("b", (4, 5, 6, 7)), exclusive=True), "gpu_busy", "b is not empty", True),
        (request(("a", (0,)), ("b", (0,))), "gpu_busy", "b GPU(s) [0] are in use", True),
    ],
    ids=["empty", "no GPUs", "duplicate GPU", "node twice", "unknown node", "drained",
         "not responding", "GPU beyond the node", "busy", "exclusive on a busy node",
         "second node busy"],
)  # fmt: skip
def test_bad_placements_are_refused_with_a_code_and_words(req, code, words, permanent):
    with pytest.raises(BackendError) as err:
        check_placement(req, NODES)
    assert err.value.code == code
    assert words in str(err.value)
    assert err.value.permanent is permanent


def test_the_node_refusal_is_the_backends_own_error_object():
    with pytest.raises(BackendError) as err:
        check_placement(request(("c", (0,))), NODES)
    assert err.value is DRAINED


def test_the_shape_is_checked_before_the_nodes():
    """A request wrong in two ways gets the same answer every time: its shape first."""
    with pytest.raises(PermanentBackendError) as err:
        check_placement(request(("zz", (0,)), ("zz", (1,))), NODES)
    assert err.value.code == "invalid_placement"


def test_nodes_are_checked_in_placement_order():
    with pytest.raises(BackendError) as err:
        check_placement(request(("d", (0,)), ("c", (0,))), NODES)
    assert err.value is SILENT


def test_the_unknown_node_hint_says_where_the_backend_looked():
    with pytest.raises(PermanentBackendError, match=r"^unknown node zz in partition gpu$"):
        check_placement(request(("zz", (0,))), NODES, unknown_hint=" in partition gpu")


# ---------------------------------------------------------------------------------------
# launch_ref, take_gpus
# ---------------------------------------------------------------------------------------
def test_launch_ref_parses_the_run_of_its_own_job():
    assert launch_ref(request(("a", (0,)), job_id=7)) == (7, 1)


@pytest.mark.parametrize("ref", ["portal-8-1", "someone-else", "portal-7", "portal-7-x"])
def test_launch_ref_refuses_a_ref_of_another_job(ref):
    with pytest.raises(PermanentBackendError) as err:
        launch_ref(request(("a", (0,)), job_id=7, ref=ref))
    assert err.value.code == "bad_ref" and "does not name job 7" in str(err.value)


def test_take_gpus_removes_exactly_the_launched_gpus():
    free = {"a": list(range(8)), "b": [4, 5, 6, 7]}
    take_gpus(free, request(("a", (0, 1)), ("b", (5,))))
    assert free == {"a": [2, 3, 4, 5, 6, 7], "b": [4, 6, 7]}


def test_take_gpus_of_an_exclusive_run_takes_the_whole_node():
    free = {"a": list(range(8)), "b": [4, 5, 6, 7]}
    take_gpus(free, request(("a", (0,)), exclusive=True))
    assert free == {"a": [], "b": [4, 5, 6, 7]}


def test_after_take_gpus_the_same_placement_is_busy():
    free = {"a": list(range(8))}
    req = request(("a", (0, 1)))
    take_gpus(free, req)
    nodes = {"a": NodeCapacity(gpus_total=8, free_gpus=free["a"])}
    with pytest.raises(PermanentBackendError, match="in use"):
        check_placement(req, nodes)


# ---------------------------------------------------------------------------------------
# Slurm feeds the check from its view, then adds what only Slurm needs
# ---------------------------------------------------------------------------------------
def snode(name: str, state: str = "idle", flags: frozenset[str] = frozenset(),
          reason: str | None = None, raw: str = "") -> SlurmNode:  # fmt: skip
    return SlurmNode(name=name, state=state, flags=flags, reason=reason, features=(),
                     gpus_total=8, gpus_used=0, raw_state=raw or state)  # fmt: skip


def slurm_on(*nodes: SlurmNode, free: dict[str, list[int]] | None = None,
             partition: str | None = None) -> tuple[SlurmBackend, _View]:  # fmt: skip
    backend = SlurmBackend(cli=SlurmCLI(env={}), grace_s=60, clock=lambda: NOW,
                           partition=partition)  # fmt: skip
    view = _View(now=NOW, nodes={n.name: n for n in nodes},
                 free=free or {n.name: list(range(8)) for n in nodes}, runs={},
                 predicted={})  # fmt: skip
    backend._view_cache = view
    return backend, view


@pytest.mark.parametrize(
    "node, code, words, permanent",
    [
        (snode("gpu1", "down", raw="down"), "node_unhealthy", "node gpu1 is down", True),
        (snode("gpu1", flags=frozenset({"not_responding"})), "node_not_responding",
         "slurmd is not responding", False),
        (snode("gpu1", flags=frozenset({"drain"}), reason="disk"), "node_cordoned",
         "node gpu1 is drained (disk)", True),
    ],
    ids=["down", "not responding", "drained"],
)  # fmt: skip
def test_slurm_refuses_a_launch_on_a_node_it_would_not_run(node, code, words, permanent):
    backend, _ = slurm_on(node)
    with pytest.raises(BackendError) as err:
        backend.launch(request(("gpu1", (0,))))
    assert (err.value.code, err.value.permanent) == (code, permanent)
    assert words in str(err.value)


def test_slurm_names_its_partition_for_an_unknown_node():
    backend, _ = slurm_on(snode("gpu1"), partition="train")
    with pytest.raises(PermanentBackendError, match="unknown node gpu9 in partition train"):
        backend.launch(request(("gpu9", (0,))))


def test_slurm_needs_the_same_gpu_count_on_every_node():
    backend, view = slurm_on(snode("gpu1"), snode("gpu2"))
    with pytest.raises(PermanentBackendError, match="--gres=gpu:N is per node") as err:
        backend._validate(view, request(("gpu1", (0, 1)), ("gpu2", (0,))))
    assert err.value.code == "invalid_placement"


def test_slurm_refuses_gpus_it_would_not_choose_itself_for_now():
    backend, view = slurm_on(snode("gpu1"), free={"gpu1": [2, 3, 4, 5, 6, 7]})
    with pytest.raises(TransientBackendError, match=r"it would give \[2, 3\] on gpu1") as err:
        backend._validate(view, request(("gpu1", (3, 4))))
    assert err.value.code == "gpu_choice"


def test_slurm_passes_the_lowest_free_gpus_and_says_how_many_per_node():
    backend, view = slurm_on(
        snode("gpu1"), snode("gpu2"), free={"gpu1": [2, 3, 4, 5, 6, 7], "gpu2": list(range(8))}
    )
    assert backend._validate(view, request(("gpu1", (2, 3)), ("gpu2", (0, 1)))) == 2
