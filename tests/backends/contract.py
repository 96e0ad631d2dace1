"""The contract every cluster backend passes (``scheduling.backends.base.ClusterBackend``).

A backend's test module subclasses :class:`BackendContract` and provides a
``harness`` fixture (a :class:`Harness`): the backend under test, its node names,
and how time passes for it (the simulator advances a virtual clock; a real
cluster is polled in real time, bounded). The tests then read as the interface's
promises:

- ``observe`` lists every node with its free GPU indices;
- ``launch`` places exactly the requested GPUs, the run shows up as ``running``
  with ``job_id`` parsed from its ref, and a gang gets all its nodes at once;
- launching the same ref twice does not duplicate it;
- busy GPUs, an unknown node or a cordoned node are refused with
  ``PermanentBackendError``;
- ``checkpoint_and_stop`` ends the run ``stopped`` within the grace, keeping its
  progress; ``kill`` ends it and frees its GPUs (both idempotent);
- ``cordon`` makes the node report ``cordoned``, ``uncordon`` clears it.

GPU indices: the engine always asks for the lowest free indices of a node, and
so do these tests (a real Slurm picks indices itself, lowest free first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduling.backends.base import (
    ENDED,
    RUNNING,
    STOPPED,
    STOPPING,
    SUCCEEDED,
    ClusterBackend,
    LaunchRequest,
    NoOutput,
    Observation,
    ObservedJob,
    ObservedNode,
    OutputTail,
    PermanentBackendError,
    run_ref,
)
from scheduling.engine.types import Slot

Settle = Callable[[Callable[[Observation], Any], float, str], Observation]


@dataclass
class Harness:
    """How a contract test drives one backend.

    ``settle(pred, timeout, what)`` lets time pass (virtual or real, at most
    ``timeout`` seconds of it) until ``pred(observation)`` is truthy and returns
    that observation, or fails the test. ``ready(ref)`` waits until a started
    run can take a checkpoint request (a real job script must have set its
    signal trap). ``short_run_s`` is a run length that ends on its own quickly.
    """

    backend: ClusterBackend
    nodes: tuple[str, ...]
    settle: Settle
    grace_s: float
    short_run_s: float
    gpus_per_node: int = 8
    ready: Callable[[str], None] = field(default=lambda ref: None)
    # added to the tests' job ids: a backend that keeps ended runs visible across tests
    # (Slurm, for MinJobAge) needs refs of its own per test, else "portal-16-1" cancelled
    # by an earlier test (of another file, whose portal job 16 it was) shows up in this one
    job_base: int = 0

    def request(self, job_id: int, placement: Any, **kwargs: Any) -> LaunchRequest:
        """``launch_request`` for this test's job ``job_id`` (offset by ``job_base``)."""
        return launch_request(self.job_base + job_id, placement, **kwargs)


def polling_settle(
    backend: ClusterBackend,
    *,
    clock: Callable[[], float],
    wait: Callable[[], None],
    unit: str = "s",
) -> Settle:
    """A ``Harness.settle`` that observes ``backend`` until the predicate holds.

    Between looks it calls ``wait`` (sleep a poll interval, or advance a virtual
    clock); it fails the test once ``timeout`` has passed on ``clock`` (seconds of
    that clock: ``unit`` names them in the failure).
    """

    def settle(pred: Callable[[Observation], Any], timeout: float, what: str) -> Observation:
        deadline = clock() + timeout
        while True:
            obs = backend.observe()
            if pred(obs):
                return obs
            if clock() >= deadline:
                pytest.fail(f"timed out after {timeout:.0f} {unit} waiting for {what}")
            wait()

    return settle


def launch_request(
    job_id: int,
    placement: tuple[Slot, ...] | list[Slot],
    *,
    attempt: int = 1,
    progress_s: float = 0.0,
    checkpoint_interval_s: float = 3600.0,
    duration_s: float | None = 10 * 86400.0,
    exclusive: bool = False,
    name: str | None = None,
    checkpoint_path: str = "",
) -> LaunchRequest:
    """The launch of run ``attempt`` of portal job ``job_id`` (its ref as the loop names it)."""
    return LaunchRequest(
        ref=run_ref(job_id, attempt),
        job_id=job_id,
        name=f"contract-{job_id}" if name is None else name,
        placement=tuple(placement),
        progress_s=progress_s,
        checkpoint_interval_s=checkpoint_interval_s,
        checkpoint_path=checkpoint_path,
        exclusive_node=exclusive,
        sim_duration_s=duration_s,
    )


def job_of(obs: Observation, ref: str) -> ObservedJob | None:
    return next((j for j in obs.jobs if j.ref == ref), None)


def node_of(obs: Observation, name: str) -> ObservedNode:
    found = next((n for n in obs.nodes if n.name == name), None)
    assert found is not None, f"node {name} missing from the observation"
    return found


def state_of(ref: str, *states: str) -> Callable[[Observation], bool]:
    def pred(obs: Observation) -> bool:
        job = job_of(obs, ref)
        return job is not None and job.state in states

    return pred


def all_free(*names: str, gpus: int = 8) -> Callable[[Observation], bool]:
    def pred(obs: Observation) -> bool:
        return all(len(node_of(obs, n).free_gpus) == gpus for n in names)

    return pred


class BackendContract:
    """Subclass it (``class TestXContract(BackendContract)``) and give a ``harness`` fixture."""

    # -- observe ----------------------------------------------------------------
    def test_observe_lists_every_node_with_free_gpu_indices(self, harness: Harness):
        obs = harness.backend.observe()
        assert sorted(n.name for n in obs.nodes) == sorted(harness.nodes)
        for n in obs.nodes:
            assert n.gpus_total == harness.gpus_per_node
            assert n.free_gpus == tuple(range(harness.gpus_per_node)), "an idle node is all free"
            assert n.health == "ok" and not n.cordoned
            assert n.rack and n.block and n.gpu_model
        assert not [j for j in obs.jobs if j.state not in ENDED], "the cluster starts idle"

    def test_time_moves_forward(self, harness: Harness):
        first = harness.backend.observe().now
        later = harness.settle(lambda obs: obs.now > first, 10, "the clock to move")
        assert later.now > first

    # -- launch -----------------------------------------------------------------
    def test_launch_places_exactly_the_requested_gpus(self, harness: Harness):
        b, node = harness.backend, harness.nodes[0]
        first = harness.request(11, [Slot(node, (0, 1))])
        second = harness.request(12, [Slot(node, (2, 3, 4))])
        b.launch(first)
        b.launch(second)
        obs = harness.settle(
            lambda o: state_of(first.ref, RUNNING)(o) and state_of(second.ref, RUNNING)(o),
            30,
            "both runs to run",
        )
        one, two = job_of(obs, first.ref), job_of(obs, second.ref)
        assert one.placement == (Slot(node, (0, 1)),) and one.job_id == harness.job_base + 11
        assert two.placement == (Slot(node, (2, 3, 4)),) and two.job_id == harness.job_base + 12
        assert node_of(obs, node).free_gpus == (5, 6, 7)
        for other in harness.nodes[1:]:
            assert len(node_of(obs, other).free_gpus) == harness.gpus_per_node

    def test_launch_carries_the_progress_a_run_resumes_from(self, harness: Harness):
        req = harness.request(13, [Slot(harness.nodes[1], (0, 1, 2, 3))], progress_s=1800.0)
        harness.backend.launch(req)
        obs = harness.settle(state_of(req.ref, RUNNING), 30, "the run to start")
        assert job_of(obs, req.ref).progress_s >= 1800.0
        later = harness.settle(
            lambda o: job_of(o, req.ref).progress_s > job_of(obs, req.ref).progress_s,
            15,
            "progress to grow while it runs",
        )
        assert job_of(later, req.ref).state == RUNNING

    def test_launching_the_same_ref_twice_does_not_duplicate(self, harness: Harness):
        b, node = harness.backend, harness.nodes[2]
        req = harness.request(14, [Slot(node, (0, 1, 2, 3))])
        b.launch(req)
        b.launch(req)  # e.g. a cycle that lost its commit launches again at once
        obs = harness.settle(state_of(req.ref, RUNNING), 30, "the run to start")
        b.launch(req)  # ... or later, once it runs
        obs = b.observe()
        assert [j.ref for j in obs.jobs if j.ref == req.ref] == [req.ref]
        assert node_of(obs, node).free_gpus == (4, 5, 6, 7), "its GPUs are taken once"
        assert len([j for j in obs.jobs if j.state not in ENDED]) == 1

    def test_launch_on_busy_gpus_is_refused_permanently(self, harness: Harness):
        b, node = harness.backend, harness.nodes[0]
        holder = harness.request(15, [Slot(node, (0, 1, 2, 3))])
        b.launch(holder)
        harness.settle(state_of(holder.ref, RUNNING), 30, "the holder to start")
        clash = harness.request(16, [Slot(node, (2, 3))])
        with pytest.raises(PermanentBackendError):
            b.launch(clash)
        obs = b.observe()
        assert job_of(obs, clash.ref) is None, "a refused launch leaves nothing behind"
        assert job_of(obs, holder.ref).placement == (Slot(node, (0, 1, 2, 3)),)

    def test_launch_on_an_unknown_node_is_refused_permanently(self, harness: Harness):
        req = harness.request(17, [Slot("no-such-node", (0,))])
        with pytest.raises(PermanentBackendError):
            harness.backend.launch(req)
        assert job_of(harness.backend.observe(), req.ref) is None

    def test_a_multi_node_gang_gets_all_its_nodes_at_once(self, harness: Harness):
        b = harness.backend
        a, c = harness.nodes[0], harness.nodes[1]
        every = tuple(range(harness.gpus_per_node))
        gang = harness.request(18, [Slot(a, every), Slot(c, every)])
        b.launch(gang)
        obs = harness.settle(state_of(gang.ref, RUNNING), 30, "the gang to start")
        assert sorted(job_of(obs, gang.ref).placement, key=lambda s: s.node) == [
            Slot(a, every),
            Slot(c, every),
        ]
        assert node_of(obs, a).free_gpus == () and node_of(obs, c).free_gpus == ()
        b.kill(gang.ref)
        harness.settle(
            lambda o: (
                state_of(gang.ref, *ENDED)(o) and all_free(a, c, gpus=harness.gpus_per_node)(o)
            ),
            30,
            "the gang to end and free both nodes",
        )

    def test_a_run_that_finishes_on_its_own_succeeds(self, harness: Harness):
        req = harness.request(19, [Slot(harness.nodes[3], (0,))], duration_s=harness.short_run_s)
        launched = harness.backend.observe().now
        harness.backend.launch(req)
        running = harness.settle(state_of(req.ref, RUNNING, SUCCEEDED), 30, "the run to start")
        assert (
            job_of(running, req.ref).state == SUCCEEDED or job_of(running, req.ref).ended_at is None
        )
        obs = harness.settle(
            state_of(req.ref, SUCCEEDED), harness.short_run_s * 3 + 20, "the run to finish"
        )
        done = job_of(obs, req.ref)
        assert done.progress_s >= harness.short_run_s * 0.9
        # when it ended, in cluster time (its job's "Finished"): after its launch (whole
        # seconds on Slurm), no later than the observation that says it
        assert done.ended_at is not None and launched - 1 <= done.ended_at <= obs.now
        assert done.ended_at >= launched + harness.short_run_s * 0.9 - 1
        assert node_of(obs, harness.nodes[3]).free_gpus[:1] == (0,), "its GPU is free again"

    # -- stop and kill ---------------------------------------------------------------
    def test_checkpoint_and_stop_ends_stopped_within_the_grace(self, harness: Harness):
        b, node = harness.backend, harness.nodes[1]
        req = harness.request(20, [Slot(node, (0, 1))], progress_s=600.0)
        b.launch(req)
        obs = harness.settle(state_of(req.ref, RUNNING), 30, "the run to start")
        harness.ready(req.ref)
        asked = b.observe()
        progress_at_request = job_of(asked, req.ref).progress_s
        b.checkpoint_and_stop(req.ref, harness.grace_s)
        b.checkpoint_and_stop(req.ref, harness.grace_s)  # asking again changes nothing
        obs = b.observe()
        assert job_of(obs, req.ref).state in (STOPPING, STOPPED)
        obs = harness.settle(state_of(req.ref, STOPPED), harness.grace_s, "the run to stop")
        stopped = job_of(obs, req.ref)
        assert obs.now - asked.now <= harness.grace_s + 5
        assert stopped.progress_s >= 600.0
        assert stopped.progress_s >= progress_at_request - 1, "a checkpoint keeps the progress"
        obs = harness.settle(all_free(node, gpus=harness.gpus_per_node), 15, "its GPUs back")
        b.checkpoint_and_stop(req.ref, harness.grace_s)  # an ended run: nothing to do

    def test_checkpoint_and_stop_of_an_unknown_run_is_refused_permanently(self, harness: Harness):
        with pytest.raises(PermanentBackendError):
            harness.backend.checkpoint_and_stop(run_ref(999, 1), harness.grace_s)

    def test_kill_ends_the_run_and_frees_its_gpus(self, harness: Harness):
        b, node = harness.backend, harness.nodes[2]
        req = harness.request(21, [Slot(node, (0, 1, 2, 3, 4, 5))])
        b.launch(req)
        harness.settle(state_of(req.ref, RUNNING), 30, "the run to start")
        b.kill(req.ref)
        obs = harness.settle(
            lambda o: state_of(req.ref, STOPPED)(o) and all_free(node)(o), 30, "the kill"
        )
        assert node_of(obs, node).free_gpus == tuple(range(harness.gpus_per_node))
        b.kill(req.ref)  # idempotent
        b.kill(run_ref(998, 1))  # unknown: nothing to do

    # -- nodes -------------------------------------------------------------------------
    def test_cordon_and_uncordon(self, harness: Harness):
        b, node = harness.backend, harness.nodes[3]
        b.cordon(node, "contract test: cordon")
        b.cordon(node, "contract test: cordon again")
        assert node_of(b.observe(), node).cordoned
        with pytest.raises(PermanentBackendError):
            b.launch(harness.request(22, [Slot(node, (0,))]))
        b.uncordon(node)
        b.uncordon(node)
        obs = b.observe()
        assert not node_of(obs, node).cordoned and node_of(obs, node).health == "ok"
        req = harness.request(23, [Slot(node, (0,))])
        b.launch(req)
        harness.settle(state_of(req.ref, RUNNING), 30, "a run on the uncordoned node")

    def test_clean_residual_on_a_clean_node_frees_nothing(self, harness: Harness):
        assert harness.backend.clean_residual(harness.nodes[0]) == 0

    # -- output ------------------------------------------------------------------------
    def test_read_output_answers_a_runs_tail_or_why_there_is_none(self, harness: Harness):
        b, node = harness.backend, harness.nodes[0]
        req = harness.request(24, [Slot(node, (0,))])
        b.launch(req)
        harness.settle(state_of(req.ref, RUNNING), 30, "the run to start")
        harness.ready(req.ref)
        out = b.read_output(req.ref, 4096)
        assert isinstance(out, OutputTail | NoOutput)
        if isinstance(out, OutputTail):
            assert out.data and len(out.data) <= 4096 and out.source
            cut = b.read_output(req.ref, 8)
            assert isinstance(cut, OutputTail) and cut.truncated and cut.data == out.data[-8:]
        else:
            assert out.reason
        unknown = b.read_output(run_ref(997, 1), 4096)
        assert isinstance(unknown, NoOutput) and unknown.reason
        b.kill(req.ref)
