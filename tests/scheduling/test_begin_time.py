"""A job's earliest start (``begin_at``, Slurm's ``sbatch --begin``) through the API and the
loop, on the small simulated cluster (4 x 8 GPUs): until then it waits, held from the
engine with ``BEGIN_TIME`` and that time as its estimated start, on an empty cluster; from
then it queues and starts, its wait counted from then; a time already past is no wait;
refusals write nothing; a job that also waits for others reads ``DEPENDENCY`` no earlier.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from core import clock
from scheduling.array_services import submit_array
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.drills import advance, cycle, job, make_quotas_roomy, submit, when
from tests.scheduling.test_after_ended import refused_writing_nothing
from tests.scheduling.test_job_dependencies import loop_agrees, timeline, wait_observed

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def later(minutes: float) -> datetime:
    """Cluster time ``minutes`` from now, to the second."""
    return (clock.now() + timedelta(minutes=minutes)).replace(microsecond=0)


def test_a_job_waits_until_its_begin_time_then_starts_its_wait_counted_from_then(
    api, django_capture_on_commit_callbacks
):
    admin, me = api("admin"), api("researcher")
    begin = later(120)
    then = submit(me, name="tonight", gpus=8, begin_at=iso(begin))
    detail = job(me, then)
    assert when(detail["begin_at"]) == begin
    assert timeline(then)[0][1].endswith(f"; not to start before {begin:%Y-%m-%d %H:%M} UTC")
    cycle(admin)
    detail = job(me, then)
    assert detail["state"] == "pending", "the cluster is empty, yet it waits"
    reason = detail["pending_reason"]
    assert reason["code"] == "BEGIN_TIME"
    assert reason["message"] == (
        f"Asked not to start before {begin:%Y-%m-%d %H:%M} UTC (Slurm's --begin): it queues "
        "from then."
    )
    assert reason["remedy"] == "Nothing to do: it queues like any other job from then."
    assert when(detail["estimated_start"]) == begin
    facts = {fact["key"]: (fact["label"], fact["text"]) for fact in reason["facts"]}
    assert facts["begin_at"] == ("Not before", f"{begin:%Y-%m-%d %H:%M} UTC")
    summary = admin.get("/api/v1/metrics/summary/").json()
    assert summary["pending_by_reason"].get("BEGIN_TIME") == 1

    advance(admin, 119 * 60)
    cycle(admin)
    assert job(me, then)["state"] == "pending", "a minute early"
    advance(admin, 2 * 60)
    count, total = wait_observed("llm-experiment")
    with django_capture_on_commit_callbacks(execute=True):
        cycle(admin)
    assert job(me, then)["state"] == "running"
    new_count, new_total = wait_observed("llm-experiment")
    assert new_count == count + 1
    started = Job.objects.get(pk=then).started_at
    assert new_total - total == pytest.approx((started - begin).total_seconds())


def test_a_time_already_past_is_no_wait(api):
    admin, me = api("admin"), api("researcher")
    then = submit(me, name="now", gpus=8, begin_at=iso(later(-30)))
    assert job(me, then)["begin_at"] is None, "not kept"
    cycle(admin)
    assert job(me, then)["state"] == "running"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("2026-12-08T09:00:00", "say the zone: ISO 8601 with a zone, e.g. 2026-12-01T14:00:00Z"),
        ("tomorrow", "not a time: ISO 8601 with a zone, e.g. 2026-12-01T14:00:00Z"),
        ("2026-02-30T09:00:00Z", "no such date or time: 2026-02-30T09:00:00Z"),
        (12, "not a time: ISO 8601 with a zone, e.g. 2026-12-01T14:00:00Z"),
    ],
)
def test_a_bad_begin_time_is_refused_and_writes_nothing(api, value, error):
    refused_writing_nothing(api("researcher"), {"begin_at": value}, {"begin_at": [error]})


@pytest.mark.parametrize(
    ("value", "error"),
    [("0001-01-01T00:00:00+14:00", "too far in the past"),
     ("9999-12-31T23:59:59-14:00", "at most 366 days ahead")],
)  # fmt: skip
def test_a_time_python_cannot_hold_in_utc_is_refused_in_words(api, value, error):
    refused_writing_nothing(api("researcher"), {"begin_at": value}, {"begin_at": [error]})


def test_more_than_a_year_ahead_is_refused(api):
    far = later(367 * 24 * 60)
    now = clock.now()
    refused_writing_nothing(
        api("researcher"), {"begin_at": iso(far)},
        {"begin_at": [f"at most 366 days ahead (cluster time is {now:%Y-%m-%d %H:%M} UTC)"]},
    )  # fmt: skip


def test_a_job_also_waiting_for_others_reads_dependency_no_earlier_than_its_begin(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, sim_duration_minutes=30, estimated_runtime_minutes=30)
    cycle(admin)
    begin = later(240)
    then = submit(me, name="eval", gpus=8, after=[first], begin_at=iso(begin))
    cycle(admin)
    detail = job(me, then)
    reason = detail["pending_reason"]
    assert reason["code"] == "DEPENDENCY"
    assert when(reason["details"]["begin_at"]) == begin
    assert when(detail["estimated_start"]) == begin, "its dependency ends well before"
    advance(admin, 31 * 60)
    cycle(admin)
    reason = job(me, then)["pending_reason"]
    assert reason["code"] == "BEGIN_TIME", "its dependency succeeded: its begin is left"


def test_every_task_of_an_array_waits_for_its_begin(api, demo):
    admin = api("admin")
    begin = later(60)
    array = submit_array(
        demo["researcher"],
        JobRequest(name="sweep", queue="llm-experiment", gpus=8, begin_at=iso(begin)),
        "0-3%2",
    )  # fmt: skip
    cycle(admin)
    codes = set(array.tasks.values_list("pending_code", flat=True))
    assert codes == {"BEGIN_TIME"}
    advance(admin, 61 * 60)
    cycle(admin)
    states = sorted(array.tasks.values_list("state", flat=True))
    assert states == ["pending", "pending", "running", "running"], "then its bound applies"


def test_the_what_if_of_a_job_asked_to_begin_later_answers_as_the_loop_does(api, demo):
    from scheduling import whatif

    admin = api("admin")
    cycle(admin)
    asked = JobRequest(name="later", queue="llm-experiment", gpus=8, begin_at=iso(later(90)))
    answer = whatif.what_if(demo["researcher"], asked)
    assert answer.code == "BEGIN_TIME"
    loop_agrees(demo["researcher"], admin, asked, answer)


def test_the_service_reads_an_aware_datetime_as_the_form_gives_it(demo):
    begin = later(60)
    made = submit_job(
        demo["researcher"],
        JobRequest(name="x", queue="llm-experiment", gpus=8, begin_at=begin.astimezone()),
    )  # fmt: skip
    assert made.begin_at == begin
    with pytest.raises(ValidationError) as caught:
        submit_job(
            demo["researcher"],
            JobRequest(name="y", queue="llm-experiment", gpus=8, begin_at=begin.replace(tzinfo=None)),
        )  # fmt: skip
    assert list(caught.value.message_dict) == ["begin_at"]
