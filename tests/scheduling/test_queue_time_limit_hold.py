"""A pending job whose time limit is above its queue's max now (the max lowered, or set,
after it was submitted): it does not start as it is, as Slurm keeps such a job pending
(``PartitionTimeLimit``). The loop holds it from the engine with ``QUEUE_TIME_LIMIT`` until
its limit is lowered within the queue's (its owner may), the queue's is raised, or an admin
gives it a limit past the queue's (their choice); a running job keeps its limit; a job
without one starts with the queue's (as Slurm's partition gives its own). Through the API
and the loop, on the small simulated cluster (4 x 8 GPUs).
"""

from __future__ import annotations

import pytest

from quotas.models import Queue
from scheduling.consistency import find_inconsistencies
from tests.drills import cycle, job, make_quotas_roomy, submit
from tests.scheduling.test_time_limit_changes import change, lines

pytestmark = pytest.mark.django_db

QUEUE = "llm-experiment"


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def lower_the_queue_s_max(minutes: int | None) -> None:
    Queue.objects.filter(name=QUEUE).update(max_time_limit_minutes=minutes)


def test_a_job_above_its_queue_s_lowered_max_waits_until_its_owner_lowers_its_limit(api):
    admin, me = api("admin"), api("researcher")
    running = submit(me, name="long", gpus=8, time_limit_minutes=600)
    cycle(admin)
    waiting = submit(me, name="later", gpus=8, time_limit_minutes=600)
    within = submit(me, name="short", gpus=8, time_limit_minutes=240)
    lower_the_queue_s_max(300)
    cycle(admin)
    assert job(me, running)["state"] == "running", "a running job keeps its limit"
    assert job(me, within)["state"] == "running"
    detail = job(me, waiting)
    assert detail["state"] == "pending", "two nodes are free, yet it waits"
    reason = detail["pending_reason"]
    assert reason["code"] == "QUEUE_TIME_LIMIT"
    assert reason["message"] == (
        f"Its time limit (10 h a run) is longer than queue {QUEUE} lets a run last now (5 h): "
        "the queue's bound was lowered after it was submitted, and it does not start as it is."
    )
    assert reason["remedy"] == (
        "Lower its time limit to 5 h (300 min) or less: Change the time limit on its page, or "
        "gpuctl time-limit JOB 300. Or ask an admin to raise the queue's."
    )
    facts = {fact["key"]: (fact["label"], fact["text"]) for fact in reason["facts"]}
    assert facts["time_limit_seconds"] == ("Its time limit (a run)", "10 h")
    assert facts["queue_max_time_limit_seconds"] == ("The longest run its queue allows now", "5 h")
    assert detail["estimated_start"] is None
    summary = api("admin").get("/api/v1/metrics/summary/").json()
    assert summary["pending_by_reason"].get("QUEUE_TIME_LIMIT") == 1, summary["pending_by_reason"]

    # its owner may lower it (not raise it): within the queue's, it starts next cycle
    assert change(me, waiting, 400).status_code == 403, "still above the queue's: admins only"
    assert change(me, waiting, 300).status_code == 200
    cycle(admin)
    assert job(me, waiting)["state"] == "running"
    assert find_inconsistencies() == []


def test_a_job_without_a_limit_starts_with_its_queue_s_as_slurm_gives_its_partition_s(api):
    admin, me = api("admin"), api("researcher")
    waiting = submit(me, name="open-ended", gpus=8)
    assert job(me, waiting)["time_limit_minutes"] is None
    Queue.objects.filter(name=QUEUE).update(
        max_time_limit_minutes=1440, default_time_limit_minutes=480
    )
    cycle(admin)
    detail = job(me, waiting)
    assert detail["state"] == "running", "not held: it had no limit above the queue's"
    assert detail["time_limit_minutes"] == 480, "the queue's for jobs that give none"
    assert lines(waiting) == ["it gave no time limit: its queue's for such jobs applies, 8 h a run"]


def test_the_queue_s_max_raised_again_lets_it_start(api):
    admin, me = api("admin"), api("researcher")
    waiting = submit(me, name="later", gpus=8, time_limit_minutes=600)
    lower_the_queue_s_max(300)
    cycle(admin)
    assert job(me, waiting)["pending_reason"]["code"] == "QUEUE_TIME_LIMIT"
    lower_the_queue_s_max(None)
    cycle(admin)
    assert job(me, waiting)["state"] == "running"


def test_an_admin_s_limit_past_the_queue_s_max_is_their_choice(api):
    admin, me = api("admin"), api("researcher")
    waiting = submit(me, name="later", gpus=8, time_limit_minutes=600)
    lower_the_queue_s_max(300)
    cycle(admin)
    assert change(admin, waiting, 700, "the paper deadline").status_code == 200
    assert lines(waiting)[-1] == (
        "time limit changed by admin from 10 h a run to 11 h 40 min a run: the paper deadline; "
        f"above queue {QUEUE}'s longest run (5 h), by an admin: the queue's bound does not hold "
        "it back"
    )
    cycle(admin)
    assert job(me, waiting)["state"] == "running"


def test_a_held_job_reads_held_and_one_waiting_for_others_reads_the_queue_s_bound(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, sim_duration_minutes=600)
    held = submit(me, name="held", gpus=8, time_limit_minutes=600)
    assert me.post(f"/api/v1/jobs/{held}/hold/", {}, format="json").status_code == 200
    after = submit(me, name="eval", gpus=8, time_limit_minutes=600, after=[first])
    lower_the_queue_s_max(300)
    cycle(admin)
    assert job(me, held)["pending_reason"]["code"] == "HELD", "release it first"
    assert job(me, after)["pending_reason"]["code"] == "QUEUE_TIME_LIMIT", "something to do"
