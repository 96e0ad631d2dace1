"""Node isolation racing the scheduling cycle (V5): a cordon committed while a cycle runs
is never undone by the cycle, and no job lands on a node once its cordon has committed.

Real PostgreSQL, real threads, the real simulator: the cycle is held at one of its own
backend calls while on-call acts (as ``test_cancel_races_cycle`` holds a cycle-like
transaction), then let go."""

from __future__ import annotations

import threading

import pytest

from core.models import AuditRecord
from scheduling.backends.simulator import SimulatorBackend
from scheduling.models import Node
from scheduling.nodes.services import cordon_node, uncordon_node
from scheduling.sim_services import run_cycle_now
from tests.concurrency.threads import in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def hold_at(monkeypatch, method: str) -> tuple[threading.Event, threading.Event]:
    """Hold the cycle inside the simulator's ``method`` until ``go`` is set."""
    reached, go = threading.Event(), threading.Event()
    real = getattr(SimulatorBackend, method)

    def held(self, *args, **kwargs):
        reached.set()
        assert go.wait(30), "the test never let the cycle go"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SimulatorBackend, method, held)
    return reached, go


def test_a_cordon_committed_while_the_cycle_uncordons_the_node_is_not_undone(demo, monkeypatch):
    """On-call uncordons a node, then cordons it again while the cycle is telling the
    backend about the uncordon: the cycle wrote back the state it had read (ready), so the
    cordon, answered and audited, was gone and jobs could land on the node."""
    oncall, admin = demo["oncall"], demo["admin"]
    node = Node.objects.order_by("name").first().name
    cordon_node(oncall, node, "flaky fan")
    run_cycle_now(admin)
    uncordon_node(oncall, node, "fan replaced")
    reached, go = hold_at(monkeypatch, "uncordon")
    errors: list[str] = []
    cycle = in_thread(errors, lambda: run_cycle_now(admin))
    assert reached.wait(30), errors
    recordon = in_thread(errors, lambda: cordon_node(oncall, node, "fan failed again"))
    recordon.join(2)  # commits at once, or waits for the cycle (as it may)
    go.set()
    cycle.join(60)
    recordon.join(60)
    assert errors == []
    assert AuditRecord.objects.filter(action="node.cordon", reason="fan failed again").exists()
    state = Node.objects.values_list("state", "state_reason").get(name=node)
    assert state == ("cordoned", "fan failed again"), "the cycle undid the cordon"
