"""Isolation and the residual sweep (``scheduling.cycle.isolation``), on one node row."""

from __future__ import annotations

import pytest

from core.models import AuditRecord
from monitoring.models import Alert
from scheduling.backends.base import HEALTH_LABELS, PermanentBackendError
from scheduling.backends.simulator import HEALTH_DETAIL
from scheduling.cycle import isolation
from scheduling.models import Node
from tests.scheduling.cycle.conftest import make_cycle

pytestmark = pytest.mark.django_db


def test_isolating_changes_the_node_in_memory_for_the_caller_to_write(backend):
    node = Node.objects.get(name="n0")
    node.health = "rdma_degraded"
    cycle = make_cycle(backend)
    isolation.isolate(cycle, node, "RDMA link flapping")
    assert (node.state, node.state_reason) == (
        "unhealthy",
        "isolated automatically: RDMA link flapping",
    )
    assert Node.objects.get(name="n0").state == "ready", "written by reconcile, with the others"
    assert AuditRecord.objects.get().target_id == str(node.pk)
    assert "n0: RDMA degraded (RDMA link flapping); isolated" in Alert.objects.get().message


def test_a_node_is_isolated_even_when_the_backend_refuses_the_cordon(backend):
    """The portal stops placing work there at once; the cordon is asked again next cycle."""
    node = Node.objects.get(name="n0")
    backend.fail_next("cordon", PermanentBackendError("node unknown to the controller"))
    cycle = make_cycle(backend)
    isolation.isolate(cycle, node, "down")
    assert node.state == "unhealthy"
    assert cycle.report.errors == ["cordon n0: permanent: node unknown to the controller"]
    assert Alert.objects.filter(kind="node_unhealthy").exists()


def test_a_repeated_residual_process_bumps_one_alert(backend):
    node = Node.objects.get(name="n1")
    for _ in range(2):
        backend.set_node("n1", residual_gpus=(0,))
        node.residual_gpus = 1
        isolation.clean_residual(make_cycle(backend), node, 1)
        assert node.residual_gpus == 0
    alert = Alert.objects.get(kind="residual_process", subject="n1")
    assert alert.count == 2


@pytest.mark.parametrize("health", sorted(HEALTH_DETAIL))
def test_the_simulator_s_health_words_read_once_in_the_isolation_alert(backend, health):
    """Page walk: the alert read "RDMA degraded (RDMA link degraded (packet loss on the
    fabric))": the detail repeated the label and nested its own brackets."""
    node = Node.objects.get(name="n0")
    node.health = health
    isolation.isolate(make_cycle(backend), node, HEALTH_DETAIL[health])
    message = Alert.objects.get().message
    label = HEALTH_LABELS[health]
    assert message.startswith(f"n0: {label} ({HEALTH_DETAIL[health]}); isolated"), message
    assert message.lower().count(label.lower()) == 1 and message.count("(") == 1, message
