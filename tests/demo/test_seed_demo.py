"""seed_demo builds the demo and is idempotent."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from core.models import LineMembership
from quotas.models import BusinessLine, Queue
from scheduling.models import Job, Node

pytestmark = pytest.mark.django_db


def _counts() -> tuple:
    return (
        Node.objects.count(),
        BusinessLine.objects.count(),
        Queue.objects.count(),
        get_user_model().objects.count(),
        LineMembership.objects.count(),
    )


def test_full_demo_is_1250_nodes_and_10000_gpus_with_every_role(monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "pw-for-tests")
    call_command("seed_demo", stdout=None)
    assert Node.objects.count() == 1250
    assert sum(Node.objects.values_list("gpus_total", flat=True)) == 10_000
    assert Node.objects.filter(rdma=False).exists(), "a minority of nodes lacks RDMA"
    assert Node.objects.values("gpu_model").distinct().count() > 1
    assert set(BusinessLine.objects.values_list("name", flat=True)) >= {
        "llm",
        "search-rec",
        "multimodal",
    }
    assert set(Queue.objects.values_list("tier", flat=True)) == {
        "urgent",
        "core",
        "finetune",
        "experiment",
    }
    names = set(get_user_model().objects.values_list("username", flat=True))
    assert names >= {"admin", "oncall", "lead", "researcher", "researcher2"}
    assert LineMembership.objects.get(user__username="lead").is_lead


def test_running_the_seed_twice_changes_nothing(monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "pw-for-tests")
    call_command("seed_demo", nodes=16, nodes_per_rack=8, stdout=None)
    first = _counts()
    line_ids = list(BusinessLine.objects.order_by("id").values_list("id", flat=True))
    call_command("seed_demo", nodes=16, nodes_per_rack=8, stdout=None)
    assert _counts() == first
    assert list(BusinessLine.objects.order_by("id").values_list("id", flat=True)) == line_ids


def test_guarantees_stay_within_quotas_and_capacity(monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "pw-for-tests")
    call_command("seed_demo", nodes=8, nodes_per_rack=4, uniform=True, stdout=None)
    capacity = sum(Node.objects.values_list("gpus_total", flat=True))
    assert sum(BusinessLine.objects.values_list("guarantee_gpus", flat=True)) <= capacity
    for line in BusinessLine.objects.all():
        assert line.guarantee_gpus <= line.quota_gpus
        assert sum(q.guarantee_gpus for q in line.queues.all()) <= line.guarantee_gpus
    assert set(Node.objects.values_list("rdma", flat=True)) == {True}


def test_uniform_small_cluster_is_deterministic_for_a_seed(monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "pw-for-tests")
    call_command("seed_demo", nodes=12, nodes_per_rack=4, seed=7, stdout=None)
    first = list(Node.objects.order_by("name").values_list("name", "rack", "gpu_model", "rdma"))
    Node.objects.all().delete()
    call_command("seed_demo", nodes=12, nodes_per_rack=4, seed=7, stdout=None)
    assert (
        list(Node.objects.order_by("name").values_list("name", "rack", "gpu_model", "rdma"))
        == first
    )


def test_the_busy_demo_waits_before_preempting_and_a_quiet_seed_does_not(monkeypatch):
    """#19: the demo with its workload seeds the quota policy's blind patience; the
    portal's own default (and a cluster seeded without workload, as the drills use) waits
    25 minutes before a reclaim, only for room predicted to free, and preempts for urgent
    work at once."""
    from quotas.models import QuotaPolicy

    monkeypatch.setenv("DEMO_PASSWORD", "pw-for-tests")
    call_command("seed_demo", nodes=8, nodes_per_rack=4, no_workload=True, stdout=None)
    quiet = QuotaPolicy.load()
    assert (quiet.preempt_after_minutes, quiet.urgent_preempt_after_minutes) == (25, 0)
    assert quiet.predictive_patience
    call_command("seed_demo", nodes=8, nodes_per_rack=4, stdout=None)
    busy = QuotaPolicy.load()
    assert (busy.preempt_after_minutes, busy.urgent_preempt_after_minutes) == (15, 10)
    assert not busy.predictive_patience


def test_the_busy_demo_s_researchers_own_jobs_once_and_a_quiet_seed_none(monkeypatch):
    """``make run`` seeds with --own-jobs: signing in as researcher showed "0 jobs"."""
    monkeypatch.setenv("DEMO_PASSWORD", "pw-for-tests")
    call_command("seed_demo", nodes=16, nodes_per_rack=8, uniform=True, own_jobs=True,
                 stdout=None)  # fmt: skip
    owned = dict(
        Job.objects.exclude(owner__username="workload").values_list("name", "owner__username")
    )
    # the line quotas of 128 GPUs (llm 57) leave the 64-GPU pre-training out
    assert owned == {
        "llama-7b-sft": "researcher",
        "bert-eval-sweep": "researcher",
        "two-tower-retrain": "researcher2",
    }
    assert set(Job.objects.filter(name__in=owned).values_list("state", flat=True)) == {"pending"}
    sweep = Job.objects.filter(name="bert-eval-sweep")
    assert sweep.count() == 16, "an array of 16 tasks"
    assert set(sweep.values_list("array__spec", "array__max_running")) == {("0-15%4", 4)}
    call_command("seed_demo", nodes=16, nodes_per_rack=8, uniform=True, own_jobs=True,
                 stdout=None)  # fmt: skip
    assert Job.objects.filter(name__in=owned).count() == 18, "a second seed submits none again"


@pytest.mark.parametrize("opts", [{"no_workload": True, "own_jobs": True}, {}])
def test_a_seed_without_workload_or_own_jobs_submits_no_job(monkeypatch, opts):
    monkeypatch.setenv("DEMO_PASSWORD", "pw-for-tests")
    call_command("seed_demo", nodes=16, nodes_per_rack=8, stdout=None, **opts)
    assert not Job.objects.exists()
