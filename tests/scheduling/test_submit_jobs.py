"""``submit_jobs``: many submissions at once, each held to exactly the rules of ``submit_job``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduling import services
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, submit_job, submit_jobs

pytestmark = pytest.mark.django_db

# What a submission decides (the rest is the loop's and the clock's); tests/demo compares too.
FIELDS = (
    "name", "queue_id", "tier", "gpus", "gpus_per_node", "gpu_memory_gb", "rdma",
    "exclusive_node", "avoid_inference", "preemptible", "max_retries", "checkpoint_path",
    "checkpoint_interval_minutes", "estimated_runtime_minutes", "model_name",
    "sim_duration_minutes", "state", "owner_id",
)  # fmt: skip

REQUESTS = {
    "defaults": JobRequest(name="a", queue="llm-experiment", gpus=1),
    "multi-node": JobRequest(name="b", queue="llm-core", gpus=16),
    "lower tier": JobRequest(name="c", queue="llm-core", gpus=4, tier="experiment"),
    "explicit": JobRequest(
        name="d",
        queue="llm-finetune",
        gpus=8,
        gpus_per_node=4,
        gpu_memory_gb=80,
        rdma=False,
        exclusive_node=True,
        avoid_inference=True,
        preemptible=True,
        max_retries=0,
        checkpoint_path="s3://bucket/d",
        checkpoint_interval_minutes=15,
        estimated_runtime_minutes=90,
        model_name="llama-7b",
        sim_duration_minutes=30,
    ),  # fmt: skip
}


def fields_of(job: Job) -> dict:
    return {f: getattr(job, f) for f in FIELDS}


@pytest.mark.parametrize("name", REQUESTS)
def test_a_bulk_job_is_the_job_a_single_submission_makes(demo, name):
    req = REQUESTS[name]
    one = submit_job(demo["researcher"], req)
    (many,) = submit_jobs(demo["researcher"], [req])
    assert fields_of(many) == fields_of(Job.objects.get(pk=one.pk))
    assert fields_of(Job.objects.get(pk=many.pk)) == fields_of(many)


def test_each_job_gets_its_submitted_event(demo):
    jobs = submit_jobs(demo["researcher"], list(REQUESTS.values()))
    for job in jobs:
        (event,) = JobEvent.objects.filter(job=job)
        assert event.kind == "submitted"
        assert event.message == (
            f"submitted by researcher to {job.queue.name}: {job.gpus} "
            f"GPU{'' if job.gpus == 1 else 's'}, tier {job.tier}"
        )


def test_one_broken_request_and_nothing_is_written(demo):
    requests = [
        REQUESTS["defaults"],
        JobRequest(name="x", queue="search-rec-core", gpus=1),  # not the researcher's line
        JobRequest(name="y", queue="llm-core", gpus=10_000),  # more than the cluster
        JobRequest(name="z", queue="llm-core", gpus=1, checkpoint_path="/tmp/ckpt"),
        JobRequest(name="w", queue="llm-experiment", gpus=1, tier="core"),  # above the queue
    ]
    with pytest.raises(ValidationError) as err:
        submit_jobs(demo["researcher"], requests)
    assert set(err.value.message_dict) == {
        "jobs[1].queue", "jobs[2].gpus", "jobs[3].checkpoint_path", "jobs[4].tier",
    }  # fmt: skip
    assert err.value.message_dict["jobs[1].queue"] == ["you may not submit to this queue"]
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_the_same_errors_as_one_submission(demo):
    bad = JobRequest(name="y", queue="llm-core", gpus=12, gpus_per_node=8)
    with pytest.raises(ValidationError) as single:
        submit_job(demo["researcher"], bad)
    with pytest.raises(ValidationError) as bulk:
        submit_jobs(demo["researcher"], [bad])
    assert bulk.value.message_dict == {
        f"jobs[0].{k}": v for k, v in single.value.message_dict.items()
    }


def test_anonymous_users_may_not_submit(demo):
    with pytest.raises(PermissionDenied):
        submit_jobs(AnonymousUser(), [REQUESTS["defaults"]])


def test_submission_times_stamp_the_jobs_and_their_events(demo):
    at = [datetime(2030, 1, 1, 12, m, tzinfo=UTC) for m in (0, 1)]
    jobs = submit_jobs(demo["researcher"], [REQUESTS["defaults"], REQUESTS["multi-node"]],
                       submitted_at=at)  # fmt: skip
    for job, when in zip(jobs, at, strict=True):
        assert Job.objects.get(pk=job.pk).submitted_at == when
        assert JobEvent.objects.get(job=job).at == when


def test_one_submission_time_per_request(demo):
    with pytest.raises(ValueError, match="1 submission times for 2 requests"):
        submit_jobs(demo["researcher"], [REQUESTS["defaults"]] * 2,
                    submitted_at=[datetime(2030, 1, 1, tzinfo=UTC)])  # fmt: skip


def test_nothing_to_submit_writes_nothing(demo):
    assert submit_jobs(demo["researcher"], []) == []
    assert Job.objects.count() == 0


def queries_for(user, n: int) -> int:
    requests = [
        JobRequest(name=f"j{i}", queue=("llm-core", "llm-experiment", "llm-finetune")[i % 3],
                   gpus=1 + i % 4)
        for i in range(n)
    ]  # fmt: skip
    with CaptureQueriesContext(connection) as captured:
        assert len(submit_jobs(user, requests)) == n
    return len(captured)


def test_queries_do_not_grow_with_the_batch(demo):
    queries_for(demo["researcher"], 3)  # the user's role and lines, then cached on it
    small = queries_for(demo["researcher"], 6)
    assert queries_for(demo["researcher"], 450) == small
    assert small <= 11, "three queues, the cluster size, the lock, two inserts, the savepoint"


def test_each_queue_written_to_is_announced_once(demo, monkeypatch):
    sent = []
    monkeypatch.setattr(services, "publish_coalesced", lambda *args: sent.append(args))
    submit_jobs(demo["researcher"], [REQUESTS["defaults"]] * 3 + [REQUESTS["multi-node"]])
    assert sent == [
        ("queues", "queues.updated", {"queue": "llm-core"}),
        ("queues", "queues.updated", {"queue": "llm-experiment"}),
    ]


def test_inside_a_callers_transaction_the_jobs_roll_back_with_it(demo):
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        submit_jobs(demo["researcher"], [REQUESTS["defaults"]])
        assert Job.objects.count() == 1
        raise Abort
    assert Job.objects.count() == 0
