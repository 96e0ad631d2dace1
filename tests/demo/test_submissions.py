"""The demo's jobs are ordinary submissions: the API would take each one, the service writes them.

The demo workload submits as the ``workload`` user through ``submit_jobs``: the same
rules as a client posting to ``/api/v1/jobs/`` (the serializer's types and bounds, then
the service's queue access, tier ceiling and cluster size), on every cluster size.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from rest_framework.test import APIClient

from demo import workload
from quotas.models import Queue
from scheduling.api import JobSubmitSerializer
from scheduling.clock import cluster_now_ts, to_datetime
from scheduling.models import ClusterSettings, Job, JobEvent
from scheduling.selectors import cluster_shape
from scheduling.services import JobRequest, resolve_job_request, submit_jobs
from tests.scheduling.test_submit_jobs import fields_of

pytestmark = pytest.mark.django_db


def seed(nodes: int, **options) -> None:
    call_command(
        "seed_demo", nodes=nodes, nodes_per_rack=min(nodes, 8), uniform=True, stdout=None,
        **options,
    )  # fmt: skip


def owner():
    return get_user_model().objects.get(username=workload.WORKLOAD_USER)


def pairs() -> list[tuple[str, str]]:
    return list(Queue.objects.values_list("name", "tier"))


def api_body(req: JobRequest) -> dict:
    """What a client posts for ``req``: every field it sets, nothing left as None."""
    return {k: v for k, v in dataclasses.asdict(req).items() if v is not None}


def demo_requests(seeds=(0, 1, 2), minutes: int = 30) -> list[JobRequest]:
    """The demo's first fill for a few seeds, then ``minutes`` minutes of arrivals."""
    _, gpus = cluster_shape()
    jobs = [g for s in seeds for g, _ in workload.arrivals(None, 0.0, s, gpus, pairs())]
    jobs += [g for g, _ in workload.arrivals(-1, minutes * 60.0, 5, gpus, pairs())]
    return [workload.job_request(g) for g in jobs]


@pytest.mark.parametrize("nodes", [4, 64])
def test_every_demo_request_is_one_the_api_would_accept(nodes):
    seed(nodes)
    requests = demo_requests()
    assert len(requests) > 50
    user, shape = owner(), cluster_shape()
    for req in requests:
        incoming = JobSubmitSerializer(data=api_body(req))
        assert incoming.is_valid(), (req, incoming.errors)
        assert JobRequest(**incoming.validated_data) == req, "the API reads the same request"
        resolve_job_request(user, req, shape=shape)  # the service's rules: raises if broken


def test_on_a_small_cluster_no_demo_job_is_larger_than_the_cluster():
    seed(4)  # 32 GPUs: the generator's 256-GPU jobs would never fit
    assert workload.generate() > 0
    assert max(Job.objects.values_list("gpus", flat=True)) <= 32


def test_the_stored_jobs_are_what_the_api_stores_for_the_same_body():
    seed(64, no_workload=True)
    requests = demo_requests(seeds=(3,), minutes=0)[:25]
    assert len({r.queue for r in requests}) > 1
    bulk = submit_jobs(owner(), requests)
    client = APIClient()
    client.force_authenticate(owner())
    for req, job in zip(requests, bulk, strict=True):
        response = client.post("/api/v1/jobs/", api_body(req), format="json")
        assert response.status_code == 201, response.json()
        assert fields_of(Job.objects.get(pk=response.json()["id"])) == fields_of(job)


def test_generate_submits_through_the_service():
    seed(64)
    now = cluster_now_ts()
    expected = workload.arrivals(None, now, ClusterSettings.load().seed, 512, pairs())
    assert workload.generate(now) == len(expected)

    jobs = list(Job.objects.order_by("id").select_related("queue"))
    assert [j.name for j in jobs] == [g.name for g, _ in expected]
    assert {j.owner.username for j in jobs} == {workload.WORKLOAD_USER}
    assert {j.state for j in jobs} == {Job.State.PENDING}
    assert {j.submitted_at for j in jobs} == {to_datetime(now)}
    events = Counter(JobEvent.objects.filter(kind="submitted").values_list("job_id", flat=True))
    assert events == Counter(j.pk for j in jobs), "one submitted event each"
    for job in jobs[:20]:
        (event,) = job.events.all()
        assert event.message == (
            f"submitted by workload to {job.queue.name}: {job.gpus} "
            f"GPU{'' if job.gpus == 1 else 's'}, tier {job.tier}"
        )
        assert event.at == job.submitted_at


def test_later_arrivals_carry_the_minute_they_arrived_in():
    seed(64)
    # a fixed instant: arrivals are drawn per cluster minute, and about one 3-minute span
    # in 30 brings none on 512 GPUs, so the clock's own minute made this test flaky
    now = 1_798_761_617.0
    workload.generate(now)
    Job.objects.all().delete()
    minute = int(now // 60)
    later = (minute + 3) * 60.0 + 30
    assert workload.generate(later) > 0
    stamps = set(Job.objects.values_list("submitted_at", flat=True))
    assert stamps <= {to_datetime(m * 60.0) for m in range(minute + 1, minute + 4)}
    assert ClusterSettings.load().workload_minute == minute + 3


def test_a_refused_batch_writes_nothing_and_keeps_the_minute(monkeypatch):
    seed(64)

    def refuse(*args, **kwargs):
        raise ValidationError({"jobs[0].gpus": ["too big"]})

    monkeypatch.setattr(workload, "submit_jobs", refuse)
    with pytest.raises(ValidationError):
        workload.generate()
    assert Job.objects.count() == 0
    assert ClusterSettings.load().workload_minute is None, "the next call tries again"


@pytest.mark.parametrize(
    "change",
    [
        lambda: ClusterSettings.objects.update(workload_enabled=False),
        lambda: get_user_model().objects.filter(username=workload.WORKLOAD_USER).delete(),
        lambda: Queue.objects.all().delete(),
    ],
    ids=["workload off", "no workload user", "no queues"],
)
def test_nothing_is_submitted_without_a_workload_a_user_or_queues(change):
    seed(8)
    change()
    assert workload.generate() == 0
    assert Job.objects.count() == 0


def test_a_long_queue_pauses_the_arrivals(monkeypatch):
    seed(64)
    workload.generate()
    monkeypatch.setattr(workload, "MAX_PENDING", 1)
    before = Job.objects.count()
    assert workload.generate(cluster_now_ts() + 600) == 0
    assert Job.objects.count() == before


def test_the_backlog_fills_one_and_a_half_times_the_cluster():
    seed(64)
    jobs = workload.arrivals(None, 0.0, 0, 512, pairs())
    total = sum(g.gpus for g, _ in jobs)
    assert 768 <= total < 768 + 256
    assert {at for _, at in jobs} == {0.0}


def test_catching_up_brings_every_minute_back_to_the_limit():
    seed(64)
    stamps = {at for _, at in workload.arrivals(0, 600 * 60.0, 0, 512, pairs())}
    assert min(stamps) == (600 - workload.MAX_CATCH_UP_MINUTES + 1) * 60.0
    assert max(stamps) == 600 * 60.0
    hour = {at for _, at in workload.arrivals(540, 600 * 60.0, 0, 512, pairs())}
    assert min(hour) == 541 * 60.0, "an hour since the last call: all of it"


@pytest.mark.parametrize("cluster_gpus", [4, 8, 32, 255, 256, 10_000])
def test_the_generator_never_asks_more_than_the_cluster_nor_part_nodes(cluster_gpus):
    gen = workload.generator(0, cluster_gpus)
    sizes = {g for mix in gen.size_mix.values() for g, _ in mix}
    assert max(sizes) <= min(cluster_gpus, workload.MAX_JOB_GPUS)
    assert all(g % 8 == 0 for g in sizes if g > 8), sizes
