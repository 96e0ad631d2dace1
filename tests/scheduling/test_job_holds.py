"""Holds and suspensions (``scheduling.holds``, ``scheduling.hold_services``) through the
loop, on the small simulated cluster (4 x 8 GPUs), driven through the API as
``test_job_dependencies.py`` is: a held job is never started nor reserved for, even on an
empty cluster, and reads ``HELD``; released, it starts the next cycle and its wait counts
from the release; a running job held is suspended gracefully and comes back pending and
held, which is no preemption.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from core.models import AuditRecord
from scheduling.backend_factory import get_backend
from scheduling.cycle.context import production_policy
from scheduling.models import Eviction, Job, JobEvent, JobRun
from scheduling.prediction import RuntimePredictor
from scheduling.snapshot import build_snapshot
from tests.drills import advance, cycle, job, make_quotas_roomy, submit, when

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def timeline(job_id: int) -> list[tuple[str, str]]:
    return list(JobEvent.objects.filter(job_id=job_id).values_list("kind", "message"))


def hold(client, job_id: int, reason: str | None = None):
    body = {} if reason is None else {"reason": reason}
    return client.post(f"/api/v1/jobs/{job_id}/hold/", body, format="json")


def release(client, job_id: int):
    return client.post(f"/api/v1/jobs/{job_id}/release/")


def snapshot():
    with transaction.atomic():
        backend = get_backend(advance=False)
        ctx = build_snapshot(
            backend.observe(), production_policy(), RuntimePredictor.from_history()
        )
        backend.close()
    return ctx


def test_a_held_job_never_starts_on_an_empty_cluster_and_reads_held(api):
    admin, me = api("admin"), api("researcher")
    held = submit(me, name="big", gpus=32)
    response = hold(me, held, "waiting for the new tokenizer")
    assert response.status_code == 200, response.data
    hold_field = response.data["hold"]
    assert (hold_field["by"], hold_field["reason"], hold_field["kind"]) == (
        "researcher", "waiting for the new tokenizer", "user",
    )  # fmt: skip
    later = submit(me, name="small", gpus=8)

    summary = cycle(admin)
    detail = job(me, held)
    assert detail["state"] == "pending", "the whole cluster is free, yet it waits"
    reason = detail["pending_reason"]
    assert reason["code"] == "HELD"
    assert reason["message"].startswith("Held by researcher at ")
    assert reason["message"].endswith(": waiting for the new tokenizer.")
    assert reason["remedy"] == "Release it to queue it again."
    assert reason["details"]["held_by"] == "researcher"
    assert reason["details"]["hold_kind"] == "user"
    assert when(reason["details"]["held_at"]) == when(hold_field["at"]).replace(microsecond=0)
    assert detail["estimated_start"] is None and detail["queue_position"] is None
    assert job(me, later)["state"] == "running", "no room kept for the held job"
    assert summary["pending_by_reason"] == {"HELD": 1}
    ctx = snapshot()
    assert held not in {p.id for p in ctx.snapshot.pending}, "not the engine's"
    queue = next(
        q for q in me.get("/api/v1/queues/").data["results"] if q["name"] == "llm-experiment"
    )
    assert (queue["pending_jobs"], queue["pending_gpus"]) == (0, 0), "no demand"
    assert me.get("/api/v1/jobs/?held=1").data["count"] == 1
    assert me.get("/api/v1/jobs/?held=0").data["count"] == 1

    advance(admin, 600)
    cycle(admin)
    assert job(me, held)["pending_reason"] == reason, "stable while held"


def test_release_queues_it_next_cycle_and_its_wait_counts_from_the_release(api):
    admin, me = api("admin"), api("researcher")
    held = submit(me, name="big", gpus=32)
    assert hold(me, held).status_code == 200
    cycle(admin)
    assert job(me, held)["pending_reason"]["message"].endswith(".")
    advance(admin, 3600)
    response = release(me, held)
    assert response.status_code == 200, response.data
    assert response.data["hold"] is None
    released_at = Job.objects.get(pk=held).released_at
    assert released_at is not None
    view = next(p for p in snapshot().snapshot.pending if p.id == held)
    assert view.submitted_at == pytest.approx(released_at.timestamp()), "queues from the release"
    cycle(admin)
    assert job(me, held)["state"] == "running"
    kinds = [kind for kind, _ in timeline(held)]
    assert kinds[:3] == ["submitted", "held", "released"]


def test_a_held_job_that_also_waits_for_dependencies_reads_held(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain", gpus=8)
    then = submit(me, name="eval", gpus=8, after=[first])
    assert hold(me, then).status_code == 200
    cycle(admin)
    assert job(me, then)["pending_reason"]["code"] == "HELD"
    assert job(me, then)["pending_reason"]["message"].startswith("Held by researcher at ")
    assert release(me, then).status_code == 200
    cycle(admin)
    assert job(me, then)["pending_reason"]["code"] == "DEPENDENCY"


def test_suspend_stops_a_running_job_gracefully_and_it_comes_back_held_not_preempted(api):
    admin, me = api("admin"), api("researcher")
    running = submit(me, name="train", gpus=8, checkpoint_path="nfs://ckpt/train")
    cycle(admin)
    advance(admin, 20 * 60)
    cycle(admin)
    assert job(me, running)["state"] == "running"
    response = hold(me, running, "freeing the line for a demo")
    assert response.status_code == 200, response.data
    assert response.data["state"] == "running", "the loop stops it, not the request"

    cycle(admin)
    assert job(me, running)["state"] == "preempting"
    stopping = timeline(running)[-1]
    assert stopping[0] == "checkpointing"
    assert "suspended by researcher" in stopping[1]
    for _ in range(6):
        advance(admin, 60)
        cycle(admin)
        if job(me, running)["state"] == "pending":
            break
    detail = job(me, running)
    assert detail["state"] == "pending"
    assert detail["preemption_count"] == 0, "a suspension is no preemption"
    assert detail["progress_seconds"] > 0, "progress kept"
    assert detail["pending_reason"]["code"] == "HELD"
    assert detail["hold"]["by"] == "researcher"
    assert not Eviction.objects.filter(job_id=running).exists(), "no eviction counted"
    assert list(JobRun.objects.filter(job_id=running).values_list("outcome", flat=True)) == [
        JobRun.Outcome.STOPPED
    ]
    kind, message = next(e for e in reversed(timeline(running)) if e[0] == "suspended")
    assert message.startswith("suspended by researcher: stopped ")
    advance(admin, 600)
    cycle(admin)
    assert job(me, running)["state"] == "pending", "held until released"

    assert release(me, running).status_code == 200
    cycle(admin)
    detail = job(me, running)
    assert detail["state"] == "running" and detail["preemption_count"] == 0


def test_a_suspension_released_before_the_loop_acts_keeps_the_job_running(api):
    admin, me = api("admin"), api("researcher")
    running = submit(me, name="train", gpus=8)
    cycle(admin)
    assert hold(me, running).status_code == 200
    response = release(me, running)
    assert response.status_code == 200
    cycle(admin)
    assert job(me, running)["state"] == "running"
    assert timeline(running)[-1][1] == (
        "released by researcher before it was suspended: it keeps running"
    )


def test_a_job_without_a_checkpoint_path_is_still_stopped_gracefully(api):
    admin, me = api("admin"), api("researcher")
    running = submit(me, name="train", gpus=8)
    cycle(admin)
    assert hold(me, running).status_code == 200
    cycle(admin)
    assert job(me, running)["state"] == "preempting"
    assert "restarts from the beginning" in timeline(running)[-1][1]


def test_who_may_hold_and_release(api, demo):
    admin, me, lead = api("admin"), api("researcher"), api("lead")
    other, oncall = api("researcher2"), api("oncall")
    job_id = submit(me, name="mine", gpus=8)
    assert hold(other, job_id).status_code == 404, "not theirs to see"
    assert hold(oncall, job_id).status_code == 403, "sees it, may not act on it"
    assert Job.objects.get(pk=job_id).held_at is None

    # the team lead's hold is a user hold: the owner may release it; audited (not theirs)
    assert hold(lead, job_id).status_code == 200
    assert Job.objects.get(pk=job_id).hold_kind == "user"
    audit = AuditRecord.objects.get(action="job.hold", target_id=str(job_id))
    assert (audit.actor_name, audit.after["hold_kind"]) == ("lead", "user")
    response = hold(me, job_id)
    assert response.status_code == 409, "already held: a refusal by its state"
    assert response.data["errors"]["state"] == ["job is already held by lead"]
    assert release(me, job_id).status_code == 200
    assert not AuditRecord.objects.filter(action="job.release").exists(), "own job: no audit"
    assert release(me, job_id).status_code == 409, "not held"

    # an admin's hold of someone else's job: a reason, and only an admin releases it
    response = hold(admin, job_id)
    assert response.status_code == 400 and "reason" in response.data["errors"]
    assert hold(admin, job_id, "node firmware rollout").status_code == 200
    assert Job.objects.get(pk=job_id).hold_kind == "admin"
    for client in (me, lead):
        response = release(client, job_id)
        assert response.status_code == 403
        assert Job.objects.get(pk=job_id).held_at is not None
    assert release(admin, job_id).status_code == 200
    assert AuditRecord.objects.filter(action="job.release", actor_name="admin").count() == 1
    kinds = [kind for kind, _ in timeline(job_id)]
    assert kinds == ["submitted", "held", "released", "held", "released"]

    # an admin's hold over the owner's own hold turns it into an admin hold (Slurm's), held
    # since the first hold; a second admin hold is refused
    assert hold(me, job_id, "my data").status_code == 200
    since = Job.objects.get(pk=job_id).held_at
    assert hold(admin, job_id, "quota audit").status_code == 200
    held = Job.objects.get(pk=job_id)
    assert (held.hold_kind, held.hold_reason, held.held_by.username, held.held_at) == (
        "admin", "quota audit", "admin", since,
    )  # fmt: skip
    assert timeline(job_id)[-1][1].startswith("admin hold by admin: quota audit, over the hold")
    assert hold(admin, job_id, "again").status_code == 409
    assert release(me, job_id).status_code == 403


@pytest.mark.parametrize(
    "reason", ["x" * 301, "bad\x00nul", "two\nlines", "esc\x1b[31m", "evil\u202etxt.exe"]
)
def test_a_bad_reason_is_a_400_and_nothing_changes(api, reason):
    me = api("researcher")
    job_id = submit(me, name="mine", gpus=8)
    response = me.post(f"/api/v1/jobs/{job_id}/hold/", {"reason": reason}, format="json")
    assert response.status_code == 400, response.data
    assert Job.objects.get(pk=job_id).held_at is None
    assert [kind for kind, _ in timeline(job_id)] == ["submitted"]


def test_unknown_fields_ids_and_ended_jobs_are_refused(api):
    me = api("researcher")
    job_id = submit(me, name="mine", gpus=8)
    assert me.post(f"/api/v1/jobs/{job_id}/hold/", {"why": "x"}, format="json").status_code == 400
    assert hold(me, 999999).status_code == 404
    assert release(me, 999999).status_code == 404
    assert me.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
    response = hold(me, job_id)
    assert response.status_code == 409
    assert response.data["errors"]["state"] == ["job is already cancelled"]
    assert Job.objects.get(pk=job_id).held_at is None


def test_the_wait_histogram_counts_from_the_release(api, django_capture_on_commit_callbacks):
    """``gpuportal_job_wait_seconds``: the time before the hold does not count."""
    from tests.scheduling.test_job_dependencies import wait_observed

    admin, me = api("admin"), api("researcher")
    held = submit(me, name="later", gpus=8)
    assert hold(me, held).status_code == 200
    cycle(admin)
    advance(admin, 2 * 3600)
    cycle(admin)
    advance(admin, 600)
    assert release(me, held).status_code == 200
    advance(admin, 120)
    count, total = wait_observed("llm-experiment")
    with django_capture_on_commit_callbacks(execute=True):
        cycle(admin)
    job_row = Job.objects.get(pk=held)
    assert job_row.state == "running"
    new_count, new_total = wait_observed("llm-experiment")
    assert new_count == count + 1
    assert new_total - total == pytest.approx(
        (job_row.started_at - job_row.released_at).total_seconds()
    )
    assert (job_row.started_at - job_row.submitted_at).total_seconds() > 2 * 3600


def test_a_held_job_is_never_pending_too_long_and_a_released_one_waits_from_the_release(api):
    from datetime import timedelta

    from monitoring.models import Alert
    from monitoring.rollup import rollup
    from scheduling.clock import cluster_now

    admin, me = api("admin"), api("researcher")
    for i in range(4):  # the cluster is full: what is released waits
        submit(me, name=f"full-{i}", gpus=8)
    cycle(admin)
    held = submit(me, name="held", gpus=8)
    assert hold(me, held).status_code == 200
    Job.objects.filter(pk=held).update(submitted_at=cluster_now() - timedelta(hours=7))
    rollup()
    assert not Alert.objects.filter(kind="pending_too_long").exists(), "held: not waiting"
    assert release(me, held).status_code == 200
    rollup()
    assert not Alert.objects.filter(kind="pending_too_long").exists(), "released just now"
    Job.objects.filter(pk=held).update(released_at=cluster_now() - timedelta(hours=7))
    rollup()
    assert Alert.objects.get(kind="pending_too_long", subject="llm-experiment")
