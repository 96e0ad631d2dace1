"""The what-if of a job array (``whatif.what_if(..., array=spec)``): each task one more
candidate, up to the array's bound, planned together as the loop would plan them once
submitted; the answer says how many would start now and why the first of the others would
wait. Checked against the cycle after a real submission of the same array, on the 4-node x
8-GPU demo cluster.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling import whatif
from scheduling.array_services import submit_array
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.services import JobRequest, submit_jobs
from tests.scheduling import test_whatif

pytestmark = pytest.mark.django_db

# the what-if tests' fixtures: a cache cleared around each test, the demo with roomy quotas
fresh_cache, roomy = test_whatif.fresh_cache, test_whatif.roomy


def req(**kw) -> JobRequest:
    values = {"name": "sweep", "queue": "llm-core", "gpus": 8, "sim_duration_minutes": 600}
    return JobRequest(**{**values, **kw})


def started_after_submitting(user, spec: str, **kw) -> int:
    """Submit the array, run the next cycle: how many of its tasks started."""
    array = submit_array(user, req(**kw), spec)
    run_cycle()
    return array.tasks.filter(state=Job.State.RUNNING).count()


def test_an_array_that_fits_starts_every_task_on_the_nodes_said(roomy):
    answer = whatif.what_if(roomy["researcher"], req(gpus=4), array="0-7")
    assert answer.status == "fits_now" and answer.code == ""
    assert answer.tasks == whatif.Tasks(total=8, start_now=8, at_once=None)
    assert answer.message == (
        "All 8 tasks would start now, on 4 nodes (" + ", ".join(answer.nodes) + ")."
    )
    assert answer.as_dict()["tasks"] == {"total": 8, "start_now": 8, "at_once": None}
    assert started_after_submitting(roomy["researcher"], "0-7", gpus=4) == 8


def test_an_array_larger_than_the_free_gpus_starts_what_fits_and_says_why_the_next_waits(roomy):
    submit_jobs(roomy["lead"], [req(name="busy", estimated_runtime_minutes=120)])
    run_cycle()  # 24 GPUs left: three 8-GPU tasks
    answer = whatif.what_if(roomy["researcher"], req(), array="0-4")
    assert (answer.status, answer.code) == ("would_wait", "INSUFFICIENT_GPUS")
    assert answer.tasks == whatif.Tasks(total=5, start_now=3, at_once=None)
    assert answer.message.startswith("3 of its 5 tasks would start now; task 3 would wait: ")
    # the tasks have no job ids yet: a verdict naming one names it by index
    first_id = (Job.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1
    assert f"job {first_id}" not in answer.message
    assert whatif._name_tasks("behind job 7 and job 9", {7: "task 0 of this array"}) == (
        "behind task 0 of this array and job 9"
    )
    assert answer.estimated_start is not None and answer.estimated_start > answer.now
    assert started_after_submitting(roomy["researcher"], "0-4") == 3


def test_a_bounded_array_starts_up_to_its_bound_and_says_when_the_next_place_opens(roomy):
    answer = whatif.what_if(roomy["researcher"], req(gpus=1), array="0-9%2")
    assert (answer.status, answer.code) == ("would_wait", "ARRAY_LIMIT")
    assert answer.tasks == whatif.Tasks(total=10, start_now=2, at_once=2)
    assert answer.message.startswith(
        "2 of its 10 tasks would start now, at most 2 at once: the other 8 wait for their "
        "places, the first predicted to open "
    )
    assert answer.estimated_start is not None and answer.estimated_start > answer.now
    assert answer.details == {"max_running": 2} and answer.remedy
    array = submit_array(roomy["researcher"], req(gpus=1), "0-9%2")
    run_cycle()
    assert array.tasks.filter(state=Job.State.RUNNING).count() == 2
    # the loop says the same of the next task: its place opens when a started one ends
    nxt = array.tasks.get(array_index=2)
    assert nxt.pending_code == "ARRAY_LIMIT"
    assert nxt.estimated_start.timestamp() == answer.estimated_start


def test_an_array_none_of_whose_tasks_would_start_says_so_first(roomy):
    submit_jobs(roomy["lead"], [req(name=f"busy{i}") for i in range(4)])
    run_cycle()
    answer = whatif.what_if(roomy["researcher"], req(), array="0-3")
    assert answer.status == "would_wait" and answer.tasks.start_now == 0
    assert answer.message.startswith("None of its 4 tasks would start now; task 0 would wait: ")
    assert started_after_submitting(roomy["researcher"], "0-3") == 0


def test_a_single_job_has_no_tasks_and_a_bad_spec_is_refused_on_its_field(roomy):
    assert whatif.what_if(roomy["researcher"], req()).tasks is None
    assert "tasks" not in whatif.what_if(roomy["researcher"], req()).as_dict()
    with pytest.raises(ValidationError) as caught:
        whatif.what_if(roomy["researcher"], req(), array="5-1")
    assert list(caught.value.message_dict) == ["array"]


def test_the_per_person_bound_refuses_the_what_if_as_it_refuses_the_submission(roomy, settings):
    """Two active jobs of a bound of three: one more job would be accepted, an array of two
    tasks refused, by the what-if in the submission's words."""
    settings.ACTIVE_JOBS_PER_PERSON = 3
    submit_jobs(roomy["researcher"], [req(name=f"mine{i}") for i in range(2)])
    assert whatif.what_if(roomy["researcher"], req(gpus=1)).status in ("fits_now", "would_wait")
    with pytest.raises(ValidationError, match="may have at most 3 at once") as asked:
        whatif.what_if(roomy["researcher"], req(gpus=1), array="0-1")
    with pytest.raises(ValidationError) as submitted:
        submit_array(roomy["researcher"], req(gpus=1), "0-1")
    assert asked.value.messages == submitted.value.messages
