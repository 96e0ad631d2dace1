"""``/api/v1/nodes/`` from ``scheduling.nodes.api``: the fields of API.md, free GPUs, the
actions' answers and refusals (roles are covered across the API in tests/api/test_matrix)."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Job, Node
from scheduling.nodes.api import OPERATOR_ACTIONS, NodeViewSet
from scheduling.permissions import OperatesNodes

pytestmark = pytest.mark.django_db

NODE = "r000-n01"
FIELDS = {"name", "rack", "block", "gpu_model", "gpu_memory_gb", "gpus_total", "gpus_free",
          "rdma", "inference", "state", "state_reason", "health", "health_detail",
          "residual_gpus", "inference_gpus"}  # fmt: skip


def hold(demo, node: str, indices: list[int]) -> None:
    from quotas.models import Queue

    job = Job.objects.create(name="h", owner=demo["researcher"], tier="experiment",
                             queue=Queue.objects.get(name="llm-experiment"),
                             gpus=len(indices), state="running")  # fmt: skip
    target = Node.objects.get(name=node)
    Allocation.objects.bulk_create(Allocation(job=job, node=target, gpu_index=i) for i in indices)


def test_the_list_gives_every_node_by_name_with_the_documented_fields(demo, api):
    response = api("researcher").get("/api/v1/nodes/")
    assert response.status_code == 200
    rows = response.data["results"] if isinstance(response.data, dict) else response.data
    assert [r["name"] for r in rows] == sorted(Node.objects.values_list("name", flat=True))
    assert all(set(r) == FIELDS for r in rows)


def test_free_gpus_leave_out_allocated_and_residual_ones(demo, api):
    hold(demo, NODE, [0, 1, 2])
    Node.objects.filter(name=NODE).update(residual_gpus=2)
    body = api("researcher").get(f"/api/v1/nodes/{NODE}/").data
    assert (body["gpus_total"], body["gpus_free"], body["residual_gpus"]) == (8, 3, 2)


def test_free_gpus_leave_out_those_serving_online_inference(demo, api):
    hold(demo, NODE, [0, 1])
    Node.objects.filter(name=NODE).update(inference=True, inference_gpus=4)
    body = api("researcher").get(f"/api/v1/nodes/{NODE}/").data
    assert (body["gpus_total"], body["gpus_free"], body["inference_gpus"]) == (8, 2, 4)


def test_filters_narrow_the_list(demo, api):
    Node.objects.filter(name=NODE).update(state="cordoned")
    rows = api("researcher").get("/api/v1/nodes/?state=cordoned").data
    rows = rows["results"] if isinstance(rows, dict) else rows
    assert [r["name"] for r in rows] == [NODE]


@pytest.mark.parametrize(("action", "state"), [("cordon", "cordoned"), ("drain", "draining")])
def test_an_action_answers_with_the_node_as_it_is_now(demo, api, action, state):
    response = api("oncall").post(f"/api/v1/nodes/{NODE}/{action}/", {"reason": "fan noise"},
                                  format="json")  # fmt: skip
    assert response.status_code == 200
    assert (response.data["name"], response.data["state"]) == (NODE, state)
    assert response.data["state_reason"] == "fan noise" and set(response.data) == FIELDS


def test_a_refused_transition_is_a_409_naming_the_state(demo, api):
    """The node's state, not the request, is what refuses: 409 Conflict (#16)."""
    response = api("oncall").post(f"/api/v1/nodes/{NODE}/uncordon/", {"reason": "x"},
                                  format="json")  # fmt: skip
    assert response.status_code == 409
    assert response.data == {"errors": {"state": [f"{NODE} is ready; cannot uncordon it"]}}


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "x" * 301}])
def test_a_missing_or_long_reason_is_a_400_on_reason(demo, api, body):
    response = api("admin").post(f"/api/v1/nodes/{NODE}/cordon/", body, format="json")
    assert response.status_code == 400 and set(response.data["errors"]) == {"reason"}
    assert Node.objects.get(name=NODE).state == "ready"


def test_a_researcher_is_refused_with_the_services_words(demo, api):
    response = api("researcher").post(f"/api/v1/nodes/{NODE}/cordon/", {"reason": "x"},
                                      format="json")  # fmt: skip
    assert response.status_code == 403
    assert str(response.data["detail"]) == "on-call engineers and admins only"


def test_an_unknown_node_is_a_404(demo, api):
    response = api("oncall").post("/api/v1/nodes/r999-n99/cordon/", {"reason": "x"}, format="json")
    assert response.status_code == 404


def test_the_blast_radius_of_a_busy_node(demo, api):
    hold(demo, NODE, [0])
    body = api("oncall").get(f"/api/v1/nodes/{NODE}/blast-radius/").data
    assert body["node"] == NODE and body["queues"] == ["llm-experiment"]
    assert [j["owner"] for j in body["jobs"]] == ["researcher"]


def test_operator_actions_are_the_viewsets_actions_and_ask_operates_nodes():
    for name in OPERATOR_ACTIONS:
        assert callable(getattr(NodeViewSet, name))
    view = NodeViewSet()
    for name in [*OPERATOR_ACTIONS, "list", "retrieve"]:
        view.action = name
        has = any(isinstance(p, OperatesNodes) for p in view.get_permissions())
        assert has is (name in OPERATOR_ACTIONS), name
