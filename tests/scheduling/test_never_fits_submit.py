"""NEVER_FITS is exact (#15): a request the cluster's shape could never satisfy, even empty and
all healthy, is refused at submit with a 400 naming the field and the rule (service, API,
form, gpuctl, bulk), as a request larger than the cluster is; a job already waiting when
the cluster changes under it reads NEVER_FITS at the next cycle, with no estimated start.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.models import Queue
from scheduling import feasibility
from scheduling.models import Job, Node
from scheduling.services import JobRequest, submit_job, submit_jobs
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(demo):
    """Two blocks: b0 = racks r0, r1 of 4 RDMA nodes (H100 80 GB), b1 = rack r2 of 4 nodes
    without RDMA (A100 40 GB). 96 GPUs in all."""
    make_quotas_roomy()
    Node.objects.all().delete()
    for rack, block, model, memory, rdma in (
        ("r0", "b0", "H100", 80, True), ("r1", "b0", "H100", 80, True),
        ("r2", "b1", "A100", 40, False),
    ):  # fmt: skip
        for i in range(4):
            Node.objects.create(name=f"{rack}-n{i}", rack=rack, block=block, gpu_model=model,
                                gpu_memory_gb=memory, gpus_total=8, rdma=rdma)  # fmt: skip
    return demo


def req(**kw) -> JobRequest:
    return JobRequest(**{"name": "j", "queue": "llm-core", "gpus": 8, **kw})


REFUSED = [
    # (request, field, words) -- each rule of the shape, named
    (req(gpu_memory_gb=141), "gpu_memory_gb", "it asks for 141 GB per GPU but the largest GPUs "
     "have 80 GB"),
    (req(gpus=72), "gpus", "it needs 9 nodes (RDMA) with 8 GPUs each but the cluster has 8 such "
     "nodes"),  # multi-node: RDMA by default, and only b0 has it
    (req(gpus=72, rdma=False, gpu_memory_gb=80), "gpus", "it needs 9 nodes (80 GB) with 8 GPUs "
     "each but the cluster has 8 such nodes"),
    (req(gpus=72, rdma=False), "gpus", "it needs 9 nodes with 8 GPUs each inside one network "
     "block (a job never spans blocks) but the largest block has 8 such nodes"),
    (req(gpus=64, gpu_memory_gb=80), "gpus", None),  # fits: b0, its 8 RDMA nodes
    (req(gpus=16, gpu_memory_gb=40, rdma=True, gpus_per_node=4), None, None),  # fits
]  # fmt: skip


@pytest.mark.parametrize("request_, field, words", REFUSED)
def test_the_service_refuses_what_the_shape_can_never_run(cluster, request_, field, words):
    if words is None:
        assert submit_job(cluster["researcher"], request_).state == Job.State.PENDING
        return
    with pytest.raises(ValidationError) as refused:
        submit_job(cluster["researcher"], request_)
    errors = refused.value.message_dict
    assert list(errors) == [field]
    assert errors[field][0].startswith("This job could never run on this cluster, even empty: ")
    assert words in errors[field][0]
    assert Job.objects.count() == 0


def test_cordoned_and_failed_nodes_still_count_as_the_shape(cluster):
    """Not NEVER_FITS: it would run on the healthy cluster; it waits (NODES_UNAVAILABLE)."""
    Node.objects.filter(rack="r1").update(state=Node.State.CORDONED)
    Node.objects.filter(name="r0-n0").update(state=Node.State.UNHEALTHY, health="gpu_failure")
    assert submit_job(cluster["researcher"], req(gpus=64)).gpus == 64


def test_non_preemptible_work_never_counts_inference_nodes(cluster):
    Node.objects.filter(rack="r1").update(inference=True)
    with pytest.raises(ValidationError) as refused:
        submit_job(cluster["researcher"], req(gpus=64))  # core: not preemptible
    assert "the cluster has 4 such nodes" in refused.value.message_dict["gpus"][0]
    preemptible = submit_job(cluster["researcher"], req(gpus=64, queue="llm-experiment"))
    assert preemptible.preemptible


def test_the_api_answers_400_naming_the_field(cluster, api):
    response = api("researcher").post(
        "/api/v1/jobs/", {"name": "big", "queue": "llm-core", "gpus": 72}, format="json"
    )
    assert response.status_code == 400
    (message,) = response.json()["errors"]["gpus"]
    assert message == (
        "This job could never run on this cluster, even empty: it needs 9 nodes (RDMA) with 8 "
        "GPUs each but the cluster has 8 such nodes."
    )
    memory = api("researcher").post(
        "/api/v1/jobs/", {"name": "m", "queue": "llm-core", "gpus": 4, "gpu_memory_gb": 96},
        format="json",
    )  # fmt: skip
    assert memory.status_code == 400 and list(memory.json()["errors"]) == ["gpu_memory_gb"]
    assert Job.objects.count() == 0


def test_the_form_shows_the_refusal_on_its_field(cluster, client):
    client.force_login(cluster["researcher"])
    queue = Queue.objects.get(name="llm-core")
    response = client.post("/jobs/new/", {
        "action": "submit", "name": "big", "queue": queue.pk, "gpus": 72,
        "max_retries": 3, "checkpoint_interval_minutes": 60,
    })  # fmt: skip
    assert response.status_code == 200
    assert "could never run on this cluster, even empty" in response.content.decode()
    assert Job.objects.count() == 0


def test_bulk_submission_refuses_by_index_and_reads_the_shape_once(cluster):
    good = [req(name=f"ok{i}", gpus=8) for i in range(300)]
    with pytest.raises(ValidationError) as refused:
        submit_jobs(cluster["researcher"], [*good, req(gpu_memory_gb=141)])
    assert list(refused.value.message_dict) == ["jobs[300].gpu_memory_gb"]
    assert Job.objects.count() == 0
    with CaptureQueriesContext(connection) as captured:
        submit_jobs(cluster["researcher"], good)
    shape_reads = [q for q in captured.captured_queries if "GROUP BY block, rack" in q["sql"]]
    assert len(shape_reads) == 1


def test_the_shape_is_every_node_by_rack_and_kind_in_one_query(cluster):
    with CaptureQueriesContext(connection) as captured:
        shape = feasibility.read_cluster_shape()
    assert len(captured.captured_queries) == 1
    assert (shape.nodes, shape.largest_node, shape.total_gpus) == (12, 8, 96)
    assert {(k.rack, k.count, k.rdma) for k in shape.kinds} == {
        ("r0", 4, True),
        ("r1", 4, True),
        ("r2", 4, False),
    }


# -- a job already waiting when the cluster shrinks ------------------------------------------


def test_a_waiting_job_reads_never_fits_when_nodes_leave_and_has_no_estimate(cluster, monkeypatch):
    from scheduling.cycle import run
    from tests.scheduling.cycle.conftest import FakeBackend, observed_node

    backend = FakeBackend([
        observed_node(n.name, rack=n.rack, block=n.block, gpu_model=n.gpu_model,
                      gpu_memory_gb=n.gpu_memory_gb, rdma=n.rdma)
        for n in Node.objects.all()
    ])  # fmt: skip
    monkeypatch.setattr(run, "get_backend", lambda wall_now=None: backend)
    busy = submit_job(cluster["researcher"], req(name="busy", gpus=8))
    waiting = submit_job(cluster["researcher"], req(name="wide", gpus=64))  # all of block b0
    run.run_cycle()
    waiting.refresh_from_db()
    busy.refresh_from_db()
    assert busy.state == Job.State.RUNNING
    assert waiting.pending_code == "INSUFFICIENT_GPUS" and waiting.estimated_start is not None
    # Rack r1 leaves the cluster: the backend no longer reports it.
    for name in [n for n in backend.nodes if n.startswith("r1-")]:
        del backend.nodes[name]
    run.run_cycle()
    waiting.refresh_from_db()
    assert waiting.pending_code == "NEVER_FITS"
    assert waiting.estimated_start is None
    assert waiting.pending_details["no_estimate_reason"] == "it can never run as asked"
    assert waiting.pending_details["constraint"] == "node_count"
    assert "the cluster has 4 such nodes" in waiting.pending_message
