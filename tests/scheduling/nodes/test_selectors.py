"""Node reads in isolation: free GPUs, usage, rack-ordered rows, a node's jobs, history and
blast radius, each on allocations written by hand (no loop involved)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import audit
from quotas.models import Queue
from scheduling.models import Allocation, Job, Node
from scheduling.nodes import selectors

# -- free GPUs: pure arithmetic ------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "allocated", "residual", "free"),
    [
        (8, 0, 0, 8), (8, 8, 0, 0), (8, 0, 8, 0), (8, 3, 2, 3), (8, 5, 5, 0),
        (8, 9, 0, 0), (0, 0, 0, 0), (4, 0, 1, 3), (8, 7, 1, 0),
    ],
)  # fmt: skip
def test_free_gpus_is_total_less_allocated_and_residual_never_below_zero(
    total, allocated, residual, free
):
    assert selectors.free_gpus(total, allocated, residual) == free


def test_free_gpus_never_exceeds_the_total():
    for total in range(9):
        for used in range(10):
            for residual in range(10):
                assert 0 <= selectors.free_gpus(total, used, residual) <= total


# -- on the demo's four nodes ---------------------------------------------------------------


def run(demo, name: str, node_gpus: dict[str, list[int]], state: str = "running") -> Job:
    """A job of ``researcher`` in llm-experiment holding the given GPUs (no loop)."""
    gpus = sum(len(v) for v in node_gpus.values())
    job = Job.objects.create(
        name=name, owner=demo["researcher"], queue=Queue.objects.get(name="llm-experiment"),
        tier="experiment", gpus=gpus, state=state,
    )  # fmt: skip
    for node, indices in node_gpus.items():
        target = Node.objects.get(name=node)
        Allocation.objects.bulk_create(
            Allocation(job=job, node=target, gpu_index=i) for i in indices
        )
    return job


@pytest.mark.django_db
def test_usage_counts_allocations_per_node(demo):
    run(demo, "a", {"r000-n00": [0, 1, 2], "r000-n01": [0]})
    usage = dict(selectors.list_nodes_with_usage().values_list("name", "gpus_allocated"))
    assert usage == {"r000-n00": 3, "r000-n01": 1, "r000-n02": 0, "r000-n03": 0}


@pytest.mark.django_db
def test_usable_free_gpus_leave_out_isolated_and_unhealthy_nodes(demo):
    run(demo, "a", {"r000-n00": [0, 1]})
    Node.objects.filter(name="r000-n01").update(residual_gpus=3)
    Node.objects.filter(name="r000-n02").update(state="cordoned")
    Node.objects.filter(name="r000-n03").update(health="gpu_failure")
    assert sorted(selectors.list_usable_free_gpus()) == [5, 6]


@pytest.mark.django_db
def test_usable_free_gpus_is_one_query(demo):
    with CaptureQueriesContext(connection) as queries:
        selectors.list_usable_free_gpus()
    assert len(queries) == 1


@pytest.mark.django_db
def test_node_rows_are_in_rack_order_with_the_documented_columns(demo):
    run(demo, "a", {"r000-n02": [4, 5]})
    Node.objects.filter(name="r000-n03").update(residual_gpus=1, state="cordoned")
    rows = selectors.list_node_rows()
    assert [r[0] for r in rows] == ["r000-n00", "r000-n01", "r000-n02", "r000-n03"]
    by_name = {r[0]: dict(zip(selectors.NODE_ROW_FIELDS, r, strict=True)) for r in rows}
    assert by_name["r000-n02"]["gpus_allocated"] == 2
    assert by_name["r000-n03"] == {
        "name": "r000-n03", "rack": by_name["r000-n00"]["rack"], "state": "cordoned",
        "health": "ok", "gpus_total": 8, "residual_gpus": 1, "gpus_allocated": 0,
        "inference_gpus": 0,
    }  # fmt: skip


@pytest.mark.django_db
def test_node_rows_for_one_name_or_none(demo):
    assert [r[0] for r in selectors.list_node_rows("r000-n01")] == ["r000-n01"]
    assert selectors.list_node_rows("r999-n99") == []


@pytest.mark.django_db
def test_get_node_and_node_exists(demo):
    assert selectors.get_node("r000-n00").name == "r000-n00" and selectors.node_exists("r000-n00")
    assert selectors.get_node("nope") is None and not selectors.node_exists("nope")


@pytest.mark.django_db
def test_a_nodes_jobs_count_their_gpus_on_it(demo):
    a = run(demo, "a", {"r000-n00": [0, 1, 2], "r000-n01": [0]})
    b = run(demo, "b", {"r000-n00": [3]})
    jobs = selectors.list_node_jobs(Node.objects.get(name="r000-n00"))
    assert [(j["job_id"], j["job__name"], j["gpus_here"]) for j in jobs] == [
        (a.pk, "a", 3), (b.pk, "b", 1)
    ]  # fmt: skip
    assert jobs[0]["job__gpus"] == 4 and jobs[0]["job__owner__username"] == "researcher"
    assert jobs[0]["job__queue__name"] == "llm-experiment" and jobs[0]["job__state"] == "running"
    assert selectors.list_node_jobs(Node.objects.get(name="r000-n03")) == []


@pytest.mark.django_db
def test_a_nodes_history_is_its_own_latest_records_first(demo):
    node, other = Node.objects.get(name="r000-n00"), Node.objects.get(name="r000-n01")
    for i in range(5):
        audit.record(demo["oncall"], "node.cordon", node, reason=f"r{i}")
    audit.record(demo["oncall"], "node.cordon", other, reason="elsewhere")
    history = list(selectors.list_node_history(node, 3))
    assert [r.reason for r in history] == ["r4", "r3", "r2"]


@pytest.mark.django_db
def test_blast_radius_names_active_jobs_and_their_queues(demo):
    a = run(demo, "a", {"r000-n00": [0, 1], "r000-n01": [0]})
    b = run(demo, "b", {"r000-n00": [2]}, state="preempting")
    b.queue = Queue.objects.exclude(name="llm-experiment").order_by("name").first()
    b.save(update_fields=["queue"])
    run(demo, "done", {"r000-n00": [3]}, state="succeeded")
    radius = selectors.build_blast_radius("r000-n00")
    assert radius["node"] == "r000-n00"
    assert [j["id"] for j in radius["jobs"]] == [a.pk, b.pk]
    assert radius["jobs"][0] == {
        "id": a.pk, "name": "a", "queue": "llm-experiment", "owner": "researcher", "gpus": 3
    }  # fmt: skip
    assert radius["queues"] == sorted({"llm-experiment", b.queue.name})


@pytest.mark.django_db
def test_an_idle_or_unknown_node_has_no_blast_radius(demo):
    assert selectors.build_blast_radius("r000-n03") == {
        "node": "r000-n03",
        "jobs": [],
        "queues": [],
    }
    assert selectors.build_blast_radius("nope") == {"node": "nope", "jobs": [], "queues": []}
