"""Moving a waiting job to another queue (``move_services``, Slurm's ``scontrol update
Partition=``) through the API, on the small simulated cluster (4 x 8 GPUs): a job waiting
for its full queue's quota moves to a queue of its line with room and starts at the next
cycle, its wait counted from its submission; the lead and an admin may (audited), to a
queue the owner may submit to; a job that started, an array's task, the queue it is in, a
queue whose tier or time-limit rules it breaks are refused and nothing changes; past the
loop's hold of the cluster, a 409."""

from __future__ import annotations

import pytest

from core.models import AuditRecord
from quotas.models import Queue
from scheduling.models import Job, JobEvent
from tests.concurrency.threads import cluster_held
from tests.drills import cycle, job, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def move(client, job_id: int, queue, reason: str | None = None):
    body = {"queue": queue} | ({} if reason is None else {"reason": reason})
    return client.post(f"/api/v1/jobs/{job_id}/move/", body, format="json")


def queue_of(job_id: int) -> str:
    return Job.objects.get(pk=job_id).queue.name


def test_a_job_waiting_for_its_queue_s_quota_moves_and_starts(api):
    admin, me = api("admin"), api("researcher")
    Queue.objects.filter(name="llm-experiment").update(quota_gpus=8)
    # not preemptible: they may not borrow beyond the quota
    first = submit(me, name="first", preemptible=False)
    waiting = submit(me, name="second", preemptible=False)
    cycle(admin)
    assert job(me, waiting)["pending_reason"]["code"] == "QUOTA_EXCEEDED"
    response = move(me, waiting, "llm-finetune", "experiment quota is full")
    assert response.status_code == 200, response.data
    assert response.data["queue"] == "llm-finetune"
    (line,) = JobEvent.objects.filter(job_id=waiting, kind="moved").values_list(
        "message", flat=True
    )
    assert line == (
        "moved by researcher from queue llm-experiment to llm-finetune (Slurm's scontrol update "
        "Partition=): experiment quota is full; it waits there from the next cycle, its wait "
        "counted from its submission"
    )
    assert not AuditRecord.objects.filter(action="job.move").exists(), "their own job"
    cycle(admin)
    assert job(me, waiting)["state"] == "running"
    assert job(me, first)["state"] == "running"


def test_the_lead_and_an_admin_may_audited_to_a_queue_the_owner_may_submit_to(api):
    me, lead, admin = api("researcher"), api("lead"), api("admin")
    mine = submit(me, name="t")
    assert move(lead, mine, "llm-finetune").status_code == 200
    record = AuditRecord.objects.get(action="job.move")
    assert (record.before, record.after) == ({"queue": "llm-experiment"}, {"queue": "llm-finetune"})
    refused = move(admin, mine, "search-rec-experiment")
    assert refused.status_code == 400
    assert refused.data["errors"]["queue"] == [
        "researcher may not submit to queue 'search-rec-experiment'"
    ]
    unknown = move(admin, mine, "nowhere")
    assert unknown.data["errors"]["queue"] == ["unknown queue 'nowhere'"], "not the owner's rule"
    assert queue_of(mine) == "llm-finetune"
    by_id = Queue.objects.get(name="llm-experiment").pk
    assert move(admin, mine, by_id).status_code == 200, "by id"
    assert queue_of(mine) == "llm-experiment"
    assert move(api("researcher2"), mine, "llm-finetune").status_code == 404
    assert move(api("oncall"), mine, "llm-finetune").status_code == 403


@pytest.mark.parametrize(
    ("queue", "words"),
    [
        ("llm-experiment", "it is already in queue llm-experiment"),
        ("search-rec-experiment", "you may not submit to this queue"),
        ("nowhere", "unknown queue 'nowhere'"),
        ("llm-urgent", None),  # allowed: tier experiment is below urgent's
    ],
)
def test_where_it_may_move(api, queue, words):
    me = api("researcher")
    mine = submit(me, name="t")
    response = move(me, mine, queue)
    if words is None:
        assert response.status_code == 200, response.data
        return
    assert response.status_code == 400 and response.data["errors"]["queue"] == [words]
    assert queue_of(mine) == "llm-experiment"
    assert not JobEvent.objects.filter(job_id=mine, kind="moved").exists()


def test_the_new_queue_s_tier_and_time_limit_rules_hold(api):
    me = api("researcher")
    core = submit(me, name="core", queue="llm-core")
    refused = move(me, core, "llm-experiment")
    assert refused.data["errors"]["queue"] == [
        "queue llm-experiment allows tiers up to 'experiment', not 'core'"
    ]
    Queue.objects.filter(name="llm-finetune").update(max_time_limit_minutes=300)
    long = submit(me, name="long", time_limit_minutes=600)
    refused = move(me, long, "llm-finetune")
    assert refused.data["errors"]["queue"] == [
        "queue llm-finetune lets a run last at most 5 h; its time limit is 10 h: lower it first"
    ]
    assert (queue_of(core), queue_of(long)) == ("llm-core", "llm-experiment")


def test_a_started_job_an_array_task_and_bad_bodies_are_refused(api):
    admin, me = api("admin"), api("researcher")
    running = submit(me, name="r", gpus=8)
    cycle(admin)
    started = move(me, running, "llm-finetune")
    assert started.status_code == 409
    assert "it has started: only a waiting job can move to another queue" in str(started.data)
    made = me.post("/api/v1/arrays/", {"name": "s", "queue": "llm-experiment", "gpus": 32,
                                       "array": "0-1"}, format="json")  # fmt: skip
    task = made.data["tasks"][1]
    refused = move(me, task, "llm-finetune")
    assert refused.status_code == 400
    assert refused.data["errors"]["queue"] == [
        f"a task of array {made.data['id']} stays in its array's queue"
    ]
    for body in ({}, {"queue": ["llm-finetune"]}, {"queue": "llm-finetune", "reason": "a\nb"},
                 {"queue": "llm-finetune", "extra": 1}):  # fmt: skip
        waiting = Job.objects.filter(owner__username="researcher", state="pending",
                                     array__isnull=True).first()  # fmt: skip
        if waiting is None:
            waiting = Job.objects.get(pk=submit(me, name="w"))
        response = me.post(f"/api/v1/jobs/{waiting.pk}/move/", body, format="json")
        assert response.status_code == 400, (body, response.data)
        assert queue_of(waiting.pk) == "llm-experiment"


@pytest.mark.django_db(transaction=True)
def test_while_the_loop_holds_the_cluster_it_is_a_409_that_moves_nothing(api, monkeypatch):
    from scheduling import move_services

    me = api("researcher")
    mine = submit(me, name="t")
    monkeypatch.setattr(move_services, "LOCK_WAIT_S", 0.5)
    with cluster_held():
        response = move(me, mine, "llm-finetune")
    assert response.status_code == 409, response.data
    assert "busy" in response.json()["errors"]["non_field_errors"][0]
    assert queue_of(mine) == "llm-experiment"
