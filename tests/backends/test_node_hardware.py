"""One description of a node's hardware for the engine, the backends and the simulator.

``NodeHardware`` (scheduling/engine/types.py) is the first part of the engine's
``NodeView``, a backend's ``ObservedNode`` and the simulator's ``NodeObservation``;
the simulator backend copies it as is from what the simulator reports.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from scheduling.backends.base import ObservedNode
from scheduling.backends.simulator import SimulatorBackend
from scheduling.engine.types import NodeHardware, NodeView
from scheduling.simcore.cluster import SimNode
from scheduling.simcore.observation import NodeObservation
from tests.backends.sim_stores import MemorySimulatorStore

HARDWARE = ("name", "rack", "block", "gpu_model", "gpu_memory_gb", "gpus_total")


def names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def hardware_of(node: object) -> tuple:
    return tuple(getattr(node, f) for f in HARDWARE)


def test_the_hardware_is_name_place_and_gpus_in_this_order():
    assert names(NodeHardware) == HARDWARE


@pytest.mark.parametrize("cls", [NodeView, ObservedNode, NodeObservation])
def test_every_view_of_a_node_starts_with_the_hardware(cls):
    assert issubclass(cls, NodeHardware)
    assert names(cls)[: len(HARDWARE)] == HARDWARE
    assert not set(names(cls)[len(HARDWARE) :]) & set(HARDWARE)


@pytest.mark.parametrize("cls", [NodeHardware, NodeView, ObservedNode, NodeObservation])
def test_every_view_of_a_node_stays_frozen_and_slotted(cls):
    assert cls.__dataclass_params__.frozen
    assert "__dict__" not in dir(cls)


def test_positional_construction_still_reads_the_fields_in_their_old_order():
    view = NodeView("n1", "r1", "b1", "H100", 80, 8, (0, 1))
    assert hardware_of(view) == ("n1", "r1", "b1", "H100", 80, 8)
    assert view.free_gpus == (0, 1) and view.rdma is True and view.pool is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.name = "n2"  # type: ignore[misc]


def test_equal_hardware_does_not_make_different_views_equal():
    view = NodeView("n1", "r1", "b1", "H100", 80, 8, ())
    assert view != NodeHardware("n1", "r1", "b1", "H100", 80, 8)
    assert view == dataclasses.replace(view) and hash(view) == hash(dataclasses.replace(view))


def test_the_simulator_backend_reports_each_nodes_hardware_as_the_simulator_has_it():
    nodes = [
        SimNode("a-0", "ra", "b0", "H100", 80, gpus_total=8),
        SimNode("a-1", "ra", "b0", "A100", 40, gpus_total=4, rdma=False),
        SimNode("c-0", "rc", "b1", "L40S", 48, gpus_total=2, inference=True),
    ]
    backend = SimulatorBackend(MemorySimulatorStore(nodes), wall_now=time.time(), advance=False)
    observed = {n.name: n for n in backend.observe().nodes}
    assert {name: hardware_of(n) for name, n in observed.items()} == {
        n.name: hardware_of(n) for n in nodes
    }
    assert not observed["a-1"].rdma and observed["c-0"].inference
