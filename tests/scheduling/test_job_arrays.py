"""Job arrays through the services and the loop (``scheduling.array_services``,
``scheduling.arrays``), on the small simulated cluster (4 x 8 GPUs): an array's tasks are
jobs of their own, its bound keeps all but the lowest waiting indices out of the engine
(``ARRAY_LIMIT``, with the predicted end that opens a place), a raised bound starts more
the next cycle, and cancelling the array cancels every active task."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from core.models import AuditRecord
from scheduling.array_services import cancel_array, set_max_running, submit_array
from scheduling.models import Job, JobArray, JobEvent
from scheduling.selectors import array_progress
from scheduling.services import JobRequest
from tests.drills import cycle, job, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def request(**over) -> JobRequest:
    fields = {"name": "sweep", "queue": "llm-experiment", "gpus": 4, "sim_duration_minutes": 90}
    fields.update(over)
    return JobRequest(**fields)


def states(array: JobArray) -> dict[int, str]:
    return dict(array.tasks.order_by("array_index").values_list("array_index", "state"))


def test_an_array_is_one_job_per_index_with_its_place_in_its_timeline(demo):
    array = submit_array(demo["researcher"], request(), "0-2,10")
    assert (array.spec, array.size, array.max_running) == ("0-2,10", 4, None)
    tasks = list(array.tasks.order_by("array_index"))
    assert [t.array_index for t in tasks] == [0, 1, 2, 10]
    assert array.task_ids == [t.pk for t in tasks]
    assert {(t.name, t.gpus, t.state, t.owner.username) for t in tasks} == {
        ("sweep", 4, "pending", "researcher")
    }
    first = JobEvent.objects.get(job=tasks[3], kind="submitted").message
    assert first.endswith(f"; task 10 of array {array.pk} (0-2,10)")


def test_the_bound_keeps_all_but_the_lowest_indices_out_and_explains_why(api, demo):
    admin, me = api("admin"), api("researcher")
    array = submit_array(demo["researcher"], request(), "0-5%2")
    summary = cycle(admin)
    assert states(array) == {0: "running", 1: "running", **dict.fromkeys(range(2, 6), "pending")}
    assert summary["pending_by_reason"] == {"ARRAY_LIMIT": 4}, "the cluster had room for all"
    t3 = array.tasks.get(array_index=3)
    reason = job(me, t3.pk)["pending_reason"]
    assert reason["code"] == "ARRAY_LIMIT"
    assert reason["message"] == (
        f"Its array {array.pk} runs at most 2 tasks at once: 2 tasks hold GPUs, and 1 waiting "
        "task goes before task 3."
    )
    assert reason["details"]["tasks_before"] == 1
    # the second of the running tasks' predicted ends opens task 3's place
    assert job(me, t3.pk)["estimated_start"] is not None
    progress = array_progress(array)
    assert (progress.by_state["running"], progress.held_back, progress.gpus_held) == (2, 4, 8)


def test_a_raised_bound_starts_more_the_next_cycle_and_a_lowered_one_stops_none(api, demo):
    admin = api("admin")
    array = submit_array(demo["researcher"], request(), "0-5%1")
    cycle(admin)
    assert list(states(array).values()).count("running") == 1
    set_max_running(demo["researcher"], array.pk, 4)
    cycle(admin)
    assert list(states(array).values()).count("running") == 4
    set_max_running(demo["researcher"], array.pk, 1)
    cycle(admin)
    assert list(states(array).values()).count("running") == 4, "no running task is stopped"
    set_max_running(demo["researcher"], array.pk, None)
    cycle(admin)
    assert set(states(array).values()) == {"running"}, "6 x 4 GPUs fit the 32-GPU cluster"


def test_other_jobs_use_what_the_bound_leaves_free(api, demo):
    admin, me = api("admin"), api("researcher")
    submit_array(demo["researcher"], request(gpus=8), "0-9%1")
    other = submit(me, name="other", gpus=24)
    cycle(admin)
    assert job(me, other)["state"] == "running", "the bound reserves nothing"


def test_cancelling_the_array_cancels_every_active_task_once(api, demo):
    admin = api("admin")
    array = submit_array(demo["researcher"], request(), "0-3%2")
    cycle(admin)
    lead = demo["lead"]
    cancelled = cancel_array(lead, array.pk, source_ip="10.0.0.9")
    assert len(cancelled) == 4
    assert set(states(array).values()) == {"cancelled"}
    assert Job.objects.filter(pk__in=cancelled, finished_at__isnull=True).count() == 2, (
        "the running two end once the loop has freed their GPUs"
    )
    record = AuditRecord.objects.get(action="array.cancel")
    assert (record.actor_name, record.target_id, record.after) == (
        "lead", str(array.pk), {"cancelled": 4},
    )  # fmt: skip
    assert record.before == {"active_tasks": {"running": 2, "pending": 2}}
    assert cancel_array(lead, array.pk) == [], "nothing left to cancel"
    cycle(admin)
    assert Job.objects.filter(pk__in=cancelled, finished_at__isnull=True).count() == 0


def test_who_may_act_on_an_array(demo):
    array = submit_array(demo["researcher"], request(), "0-1")
    with pytest.raises(PermissionDenied):
        set_max_running(demo["oncall"], array.pk, 1)  # sees every job, acts on none
    with pytest.raises(JobArray.DoesNotExist):
        cancel_array(demo["researcher2"], array.pk)  # another line's: not even seen
    set_max_running(demo["admin"], array.pk, 1)
    assert AuditRecord.objects.filter(action="array.max_running").count() == 1
    set_max_running(demo["researcher"], array.pk, 2)
    assert AuditRecord.objects.filter(action="array.max_running").count() == 1, "their own"


@pytest.mark.parametrize(
    ("spec", "over", "field"),
    [
        ("0-5%0", {}, "array"),
        ("", {}, "array"),
        ("0-1", {"gpus": 100_000}, "gpus"),
        ("0-1", {"queue": "no-such"}, "queue"),
        ("0-1", {"after": [987654]}, "after"),
    ],
)
def test_a_bad_array_writes_nothing(demo, spec, over, field):
    jobs = Job.objects.count()
    with pytest.raises(ValidationError) as caught:
        submit_array(demo["researcher"], request(**over), spec)
    assert field in caught.value.message_dict
    assert not JobArray.objects.exists() and Job.objects.count() == jobs


@pytest.mark.parametrize("value", [0, -1, True, "3", 2.5, 3])
def test_a_bad_bound_is_refused(demo, value):
    array = submit_array(demo["researcher"], request(), "0-1")
    with pytest.raises(ValidationError) as caught:
        set_max_running(demo["researcher"], array.pk, value)
    assert "max_running" in caught.value.message_dict
    array.refresh_from_db()
    assert array.max_running is None


def test_every_task_waits_for_the_jobs_after_it(api, demo):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="prep", gpus=8, sim_duration_minutes=30)
    array = submit_array(demo["researcher"], request(after=[first]), "0-2")
    cycle(admin)
    assert set(states(array).values()) == {"pending"}
    codes = set(array.tasks.values_list("pending_code", flat=True))
    assert codes == {"DEPENDENCY"}
