"""The database itself refuses what must never happen (PostgreSQL)."""

import pytest
from django.db import IntegrityError, transaction

from quotas.models import BusinessLine, Queue
from scheduling.models import Allocation, Job, Node

pytestmark = pytest.mark.django_db


def _refused(fn) -> bool:
    try:
        with transaction.atomic():
            fn()
    except IntegrityError:
        return True
    return False


def _job(demo, **kw) -> Job:
    values = {"name": "j", "owner": demo["researcher"], "queue": Queue.objects.get(name="llm-core"),
              "tier": "core", "gpus": 2}  # fmt: skip
    values.update(kw)
    return Job.objects.create(**values)


def test_a_gpu_cannot_be_given_to_two_jobs(demo):
    node = Node.objects.first()
    a, b = _job(demo), _job(demo)
    Allocation.objects.create(job=a, node=node, gpu_index=3)
    assert _refused(lambda: Allocation.objects.create(job=b, node=node, gpu_index=3))
    Allocation.objects.create(job=b, node=node, gpu_index=4)  # another GPU is fine


def test_gpu_index_beyond_an_8_gpu_node_is_refused(demo):
    node = Node.objects.first()
    assert _refused(lambda: Allocation.objects.create(job=_job(demo), node=node, gpu_index=8))


@pytest.mark.parametrize("gpus", [0, -1])
def test_jobs_need_at_least_one_gpu(demo, gpus):
    assert _refused(lambda: _job(demo, gpus=gpus))


def test_gpus_per_node_stays_within_a_node(demo):
    assert _refused(lambda: _job(demo, gpus=16, gpus_per_node=9))


def test_line_guarantee_cannot_exceed_its_quota(demo):
    line = BusinessLine.objects.get(name="llm")
    line.guarantee_gpus = line.quota_gpus + 1
    assert _refused(line.save)


def test_queue_guarantee_cannot_exceed_its_quota(demo):
    queue = Queue.objects.get(name="llm-experiment")
    queue.guarantee_gpus = (queue.quota_gpus or 0) + 1
    assert _refused(queue.save)


def test_node_gpu_count_is_between_1_and_8(demo):
    node = Node.objects.first()
    node.gpus_total = 9
    assert _refused(node.save)
    node.gpus_total = 0
    assert _refused(node.save)


def test_residual_gpus_cannot_exceed_the_node(demo):
    node = Node.objects.first()
    node.residual_gpus = 9
    assert _refused(node.save)


def test_negative_quota_is_refused(demo):
    line = BusinessLine.objects.get(name="llm")
    line.quota_gpus = -5
    assert _refused(line.save)
