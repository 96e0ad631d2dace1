"""Job dependencies (``after``, Slurm's afterok) through the loop, on the small simulated
cluster (4 x 8 GPUs): a job waits, held from the engine, while a job it starts after has not
succeeded (``DEPENDENCY``); it starts in the cycle after they all succeeded; it is cancelled
in the cycle one of them ends failed or cancelled, down a chain.

Driven through the API as ``tests/scheduling/test_launch_retry_reason.py`` is: cluster time
moves only through ``simulator/advance``, a run fails through a drill fault.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from django.db import transaction

from scheduling import whatif
from scheduling.backend_factory import get_backend
from scheduling.cycle.context import production_policy
from scheduling.models import Allocation, Job, JobEvent
from scheduling.prediction import RuntimePredictor
from scheduling.services import JobRequest, submit_job
from scheduling.snapshot import build_snapshot
from tests.drills import advance, cycle, job, make_quotas_roomy, submit, when

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def node_of(job_id: int) -> str:
    return Allocation.objects.filter(job_id=job_id).values_list("node__name", flat=True)[0]


def fail_run(admin, job_id: int) -> None:
    """Break the GPU of the node ``job_id`` runs on (a drill): its run fails."""
    body = {"kind": "gpu_failure", "node": node_of(job_id)}
    response = admin.post("/api/v1/simulator/faults/", body, format="json")
    assert response.status_code == 200, response.data


def timeline(job_id: int) -> list[tuple[str, str]]:
    return list(JobEvent.objects.filter(job_id=job_id).values_list("kind", "message"))


def test_a_job_waits_for_its_dependency_then_starts_in_the_cycle_after_it_succeeded(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain-7b", gpus=8, sim_duration_minutes=30)
    cycle(admin)
    assert job(me, first)["state"] == "running"
    then = submit(me, name="eval-7b", gpus=8, after=[first])

    summary = cycle(admin)
    detail = job(me, then)
    assert detail["state"] == "pending", "three nodes are free, yet it waits"
    assert (detail["after"], detail["waiting_for"]) == ([first], [first])
    reason = detail["pending_reason"]
    assert reason["code"] == "DEPENDENCY"
    assert reason["message"].startswith(
        f"Waits for job {first} (pretrain-7b) to succeed: running, predicted to end "
    )
    assert reason["details"]["waiting_for"] == [first]
    end = when(reason["details"]["dependencies_end_at"])
    assert when(detail["estimated_start"]) == end, "the dependency's predicted end, a lower bound"
    assert end.second == 0, "to the minute, as verdicts say times"
    assert detail["queue_position"] is None
    assert summary["pending_by_reason"] == {"DEPENDENCY": 1}
    assert reason["job_links"] == {str(first): f"/jobs/{first}/"}
    # stable while the situation is
    advance(admin, 60)
    cycle(admin)
    assert job(me, then)["pending_reason"] == reason

    advance(admin, 31 * 60)  # the first job's 30 minutes are over
    summary = cycle(admin)
    assert job(me, first)["state"] == "succeeded"
    assert job(me, then)["state"] == "running", "started in the cycle its dependency succeeded"
    assert summary["starts"] == 1


def test_a_held_job_is_not_the_engines_it_takes_no_room_from_later_jobs(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain", gpus=8)
    cycle(admin)
    # 24 GPUs free: a 24-GPU job after ``first`` would take them all if the engine saw it
    held = submit(me, name="big-eval", gpus=24, after=[first])
    later = [submit(me, name=f"small-{i}", gpus=8) for i in range(3)]
    summary = cycle(admin)
    assert summary["starts"] == 3
    assert [job(me, j)["state"] for j in later] == ["running"] * 3
    assert job(me, held)["pending_reason"]["code"] == "DEPENDENCY"
    # nor is it demand: the queues' pending numbers (and the usage samples the borrowing's
    # demand history is read from) leave it out
    queue = next(
        q for q in me.get("/api/v1/queues/").data["results"] if q["name"] == "llm-experiment"
    )
    assert (queue["pending_jobs"], queue["pending_gpus"]) == (0, 0)


def test_a_dependency_that_fails_for_good_cancels_its_chain_in_the_same_cycle(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="convert", gpus=8, max_retries=0)
    cycle(admin)
    second = submit(me, name="finetune", gpus=8, after=[first])
    third = submit(me, name="eval", gpus=8, after=[second])
    unrelated = submit(me, name="other", gpus=8, sim_duration_minutes=600)
    cycle(admin)
    assert job(me, second)["pending_reason"]["code"] == "DEPENDENCY"
    assert job(me, third)["pending_reason"]["message"].startswith(
        f"Waits for job {second} (finetune) to succeed: waiting to start, predicted to end at "
        "the earliest "
    )

    fail_run(admin, first)
    cycle(admin)
    assert job(me, first)["state"] == "failed"
    assert job(me, second)["state"] == "cancelled"
    assert job(me, third)["state"] == "cancelled", "down the chain, in the same cycle"
    assert timeline(second)[-1] == ("cancelled", f"cancelled: job {first} it waited for failed")
    assert timeline(third)[-1] == (
        "cancelled", f"cancelled: job {second} it waited for was cancelled"
    )  # fmt: skip
    assert job(me, second)["finished_at"] is not None
    assert job(me, unrelated)["state"] == "running"


def loop_agrees(user, admin, asked: JobRequest, answer, array: str | None = None) -> None:
    """``asked`` submitted by ``user`` (with ``array``, as an array: its first task) and a
    cycle run: its verdict is the what-if's ``answer``, message and estimated start."""
    from scheduling.array_services import submit_array

    then = (
        submit_job(user, asked) if array is None
        else submit_array(user, asked, array).tasks.order_by("array_index").first()
    )  # fmt: skip
    cycle(admin)
    then.refresh_from_db()
    assert (answer.message, answer.estimated_start) == (
        then.pending_message, then.estimated_start.timestamp()
    )  # fmt: skip


def held_runtimes() -> dict[int, float | None]:
    """The predicted runtimes of the held jobs, as the loop's snapshot reads them."""
    with transaction.atomic():
        backend = get_backend(advance=False)
        ctx = build_snapshot(
            backend.observe(), production_policy(), RuntimePredictor.from_history()
        )
        backend.close()
    return {job_id: view.predicted_runtime_s for job_id, view in ctx.held.items()}


def test_a_chain_has_an_estimate_at_every_depth(api, demo):
    """convert (running) -> finetune -> eval -> report: each job held in turn starts at the
    earliest when the one before it is predicted to end, and ends that much later: its
    predicted runtime. The last one's estimate is the sum down the chain."""
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="convert", gpus=8, sim_duration_minutes=30)
    cycle(admin)
    chain = [first]
    for name in ("finetune", "eval", "report"):
        chain.append(submit(me, name=name, gpus=8, after=[chain[-1]]))
    cycle(admin)
    runtimes = held_runtimes()
    reasons = [job(me, j)["pending_reason"] for j in chain[1:]]
    assert [r["code"] for r in reasons] == ["DEPENDENCY"] * 3
    assert reasons[0]["message"].startswith(
        f"Waits for job {first} (convert) to succeed: running, predicted to end "
    )
    for before, reason, name in zip(chain[1:3], reasons[1:], ("finetune", "eval"), strict=True):
        start = when(job(me, before)["estimated_start"])
        end = datetime.fromtimestamp(
            math.ceil((start.timestamp() + runtimes[before]) / 60) * 60, UTC
        )  # up to the minute, as verdicts say times
        assert reason["message"] == (
            f"Waits for job {before} ({name}) to succeed: waiting to start, predicted to end at "
            f"the earliest {end:%Y-%m-%d %H:%M} UTC."
        )
        assert when(reason["details"]["dependencies_end_at"]) == end
        assert "no_estimate_reason" not in reason["details"]
    starts = [when(job(me, j)["estimated_start"]) for j in chain[1:]]
    assert starts == sorted(starts) and len(set(starts)) == 3, "each later than the one before"
    # the what-if of a job after the end of the chain answers as the loop then does
    asked = JobRequest(name="summary", queue="llm-experiment", gpus=8, after=(chain[3],))
    answer = whatif.what_if(demo["researcher"], asked)
    assert answer.code == "DEPENDENCY" and answer.estimated_start is not None
    loop_agrees(demo["researcher"], admin, asked, answer)
    # a job on hold in the chain has no predicted start: after it, no estimate
    me.post(f"/api/v1/jobs/{chain[2]}/hold/", {}, format="json")
    cycle(admin)
    last = job(me, chain[3])["pending_reason"]
    assert last["details"]["no_estimate_reason"] == (
        f"job {chain[2]} it waits for has no predicted end"
    )
    assert job(me, chain[3])["estimated_start"] is None
    assert job(me, chain[2])["pending_reason"]["code"] == "HELD"


def test_a_run_that_fails_with_retries_left_keeps_its_dependents_waiting(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain", gpus=8, max_retries=2)
    cycle(admin)
    then = submit(me, name="eval", gpus=8, after=[first])
    cycle(admin)
    fail_run(admin, first)
    cycle(admin)
    assert job(me, first)["retry_count"] == 1
    assert job(me, first)["state"] in ("pending", "running")
    assert job(me, then)["state"] == "pending"
    assert job(me, then)["pending_reason"]["code"] == "DEPENDENCY"


def test_a_cancelled_dependency_cancels_its_dependents(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain", gpus=8)
    then = submit(me, name="eval", gpus=8, after=[first])
    assert me.post(f"/api/v1/jobs/{first}/cancel/").status_code == 200
    cycle(admin)
    assert job(me, then)["state"] == "cancelled"
    assert timeline(then)[-1] == (
        "cancelled",
        f"cancelled: job {first} it waited for was cancelled",
    )


def test_a_job_after_several_waits_for_all_of_them(api):
    admin, me = api("admin"), api("researcher")
    short = submit(me, name="a", gpus=8, sim_duration_minutes=10)
    long = submit(me, name="b", gpus=8, sim_duration_minutes=40)
    cycle(admin)
    then = submit(me, name="c", gpus=8, after=[long, short, long])
    cycle(admin)
    detail = job(me, then)
    assert detail["after"] == sorted([short, long]), "duplicates collapse"
    reason = detail["pending_reason"]
    assert reason["message"].startswith("Waits for 2 jobs to succeed: ")
    ends = when(reason["details"]["dependencies_end_at"])
    assert when(detail["estimated_start"]) == ends
    advance(admin, 11 * 60)
    cycle(admin)
    detail = job(me, then)
    assert detail["state"] == "pending" and detail["waiting_for"] == [long]
    assert detail["pending_reason"]["details"]["waiting_for"] == [long]
    advance(admin, 30 * 60)
    cycle(admin)
    assert job(me, then)["state"] == "running"


def test_a_released_job_queues_from_when_its_last_dependency_ended(api):
    """Its place in the fair order (and the starvation bound) counts from then: the engine
    is given that time, not the submission's."""
    admin, me = api("admin"), api("researcher")
    submit(me, name="blocker", gpus=8, sim_duration_minutes=600)
    first = submit(me, name="pretrain", gpus=8, sim_duration_minutes=30)
    cycle(admin)
    then = submit(me, name="eval", gpus=32, after=[first])
    advance(admin, 31 * 60)
    cycle(admin)  # ``first`` succeeded; ``then`` waits for the whole cluster
    assert job(me, then)["pending_reason"]["code"] != "DEPENDENCY"
    ended = Job.objects.get(pk=first).finished_at.timestamp()
    with transaction.atomic():
        backend = get_backend(advance=False)
        ctx = build_snapshot(
            backend.observe(), production_policy(), RuntimePredictor.from_history()
        )
        backend.close()
    view = next(p for p in ctx.snapshot.pending if p.id == then)
    assert view.submitted_at == ended > Job.objects.get(pk=then).submitted_at.timestamp()
    assert then not in ctx.held


def wait_observed(queue: str) -> tuple[float, float]:
    """``gpuportal_job_wait_seconds`` of ``queue``: (count, sum)."""
    from core import telemetry

    samples = {s.name: s.value for m in telemetry.JOB_WAIT.collect() for s in m.samples
               if s.labels.get("queue") == queue}  # fmt: skip
    return samples.get("gpuportal_job_wait_seconds_count", 0), samples.get(
        "gpuportal_job_wait_seconds_sum", 0
    )


def test_the_wait_of_a_job_that_waited_for_others_counts_from_when_they_ended(
    api, django_capture_on_commit_callbacks
):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain", gpus=8, sim_duration_minutes=30)
    cycle(admin)
    then = submit(me, name="eval", gpus=8, after=[first])
    advance(admin, 31 * 60)
    count, total = wait_observed("llm-experiment")
    with django_capture_on_commit_callbacks(execute=True):
        cycle(admin)
    assert job(me, then)["state"] == "running"
    new_count, new_total = wait_observed("llm-experiment")
    assert new_count == count + 1
    waited = Job.objects.get(pk=then)
    ended = Job.objects.get(pk=first).finished_at
    assert new_total - total == pytest.approx((waited.started_at - ended).total_seconds())
    assert (waited.started_at - waited.submitted_at).total_seconds() > 30 * 60


def test_prune_keeps_a_pending_dependent_and_its_dependencies(api, settings):
    """Retention deletes history (cycles, resolved alerts, audit records), never jobs nor
    their links: a prune with every period at its shortest leaves the dependent waiting for
    exactly what it waited for, and the loop goes on with it."""
    from io import StringIO

    from django.core.management import call_command

    from scheduling.models import SchedulingCycle

    settings.RETENTION_CYCLE_DAYS = settings.RETENTION_AUDIT_DAYS = 1
    settings.RETENTION_RESOLVED_ALERT_DAYS = 1
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain", gpus=8, sim_duration_minutes=30)
    cycle(admin)
    then = submit(me, name="eval", gpus=8, after=[first])
    cycle(admin)
    SchedulingCycle.objects.update(started_at=datetime(2020, 1, 1, tzinfo=UTC))
    call_command("prune", stdout=StringIO())
    assert not SchedulingCycle.objects.exists(), "the prune did delete history"
    assert list(Job.objects.get(pk=then).after.values_list("pk", flat=True)) == [first]
    cycle(admin)
    assert job(me, then)["pending_reason"]["code"] == "DEPENDENCY"
    advance(admin, 31 * 60)
    cycle(admin)
    assert job(me, then)["state"] == "running"


def test_a_dependency_deleted_by_hand_holds_nothing_back(api):
    """Jobs are never pruned, but a row deleted by hand (in SQL: the admin site may not
    delete jobs) takes its links with it: it counts as ended, and the job waits no more."""
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="pretrain", gpus=8)
    then = submit(me, name="eval", gpus=8, after=[first])
    cycle(admin)
    assert job(me, then)["pending_reason"]["code"] == "DEPENDENCY"
    Allocation.objects.filter(job_id=first).delete()
    Job.objects.filter(pk=first).delete()
    cycle(admin)
    detail = job(me, then)
    assert detail["state"] == "running" and detail["after"] == []


def test_a_batch_submission_refuses_after_and_stores_nothing(demo):
    from django.core.exceptions import ValidationError

    from scheduling.services import JobRequest, submit_jobs

    me = demo["researcher"]
    first = submit_jobs(me, [JobRequest(name="a", queue="llm-core", gpus=8)])[0]
    with pytest.raises(ValidationError) as refused:
        submit_jobs(me, [JobRequest(name="b", queue="llm-core", gpus=8),
                         JobRequest(name="c", queue="llm-core", gpus=8, after=[first.pk])])  # fmt: skip
    assert list(refused.value.message_dict) == ["jobs[1].after"]
    assert Job.objects.count() == 1


def test_a_held_job_the_cluster_could_never_run_reads_never_fits_first():
    """``DEPENDENCY`` is checked right after ``NEVER_FITS``: a waiting job asking more GPU
    memory than any node has (the cluster changed under it) says so, whatever it waits for."""
    from scheduling import dependencies
    from scheduling.engine import types as et
    from scheduling.engine.feasibility import ClusterShape

    nodes = [et.NodeView("n0", "r0", "b0", "H100", 80, 8, free_gpus=tuple(range(8)))]
    shape = ClusterShape.of_nodes(nodes)
    link = dependencies.Link(12, "pretrain", "running", None, same_line=True)
    view = et.PendingJob(id=13, queue="q", line="l", tier=et.Tier.CORE, gpus=8, gpus_per_node=8)
    row = {"gpus": 8, "gpus_per_node": 8, "gpu_memory_gb": None, "rdma": False,
           "preemptible": False, "avoid_inference": False}  # fmt: skip
    waits = dependencies.verdict(view, [link], dependencies.Ends({12: 1_800_000_030.0}), shape, row)
    assert waits.code == "DEPENDENCY"
    assert waits.estimated_start == 1_800_000_060.0, "up to the whole minute"
    assert waits.message == (
        "Waits for job 12 (pretrain) to succeed: running, predicted to end 2027-01-15 08:01 UTC."
    )
    never = dependencies.verdict(view, [link], dependencies.Ends({12: 1_800_000_030.0}), shape,
                                 {**row, "gpu_memory_gb": 200})  # fmt: skip
    assert never.code == "NEVER_FITS" and never.estimated_start is None


def test_a_dependency_on_hold_is_said_to_be_on_hold(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8)
    assert me.post(f"/api/v1/jobs/{first}/hold/", {}, format="json").status_code == 200
    then = submit(me, name="eval", gpus=8, after=[first])
    cycle(admin)
    assert job(me, then)["pending_reason"]["message"] == (
        f"Waits for job {first} (train) to succeed: on hold (it starts only once released)."
    )
    assert me.post(f"/api/v1/jobs/{first}/release/", {}, format="json").status_code == 200
    cycle(admin)
    assert job(me, first)["state"] == "running"
    assert job(me, then)["pending_reason"]["message"].startswith(
        f"Waits for job {first} (train) to succeed: running"
    )
