"""Time limits (``scheduling.time_limits``, Slurm's ``--time``) through the API and the loop,
on the small simulated cluster (4 x 8 GPUs): a run that reaches its limit is asked to
checkpoint and stop, and its job fails with no retry, its progress kept; a run that ends
before its limit is untouched; a run ended by the backend once it lasted its limit fails
the same way; refusals write nothing; the predictor never predicts a run past its limit.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from scheduling.backend_factory import get_backend
from scheduling.backends.base import FAILED, STOPPED
from scheduling.cycle.context import Cycle
from scheduling.cycle.finished import run_ended
from scheduling.models import Eviction, Job, JobRun
from tests.drills import advance, cycle, job, make_quotas_roomy, submit, when
from tests.scheduling.test_job_holds import snapshot, timeline

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def test_a_run_at_its_limit_is_stopped_and_the_job_fails_with_no_retry(api):
    admin, me = api("admin"), api("researcher")
    limited = submit(
        me, name="sweep", gpus=8, sim_duration_minutes=120, time_limit_minutes=30,
        checkpoint_path="nfs://ckpt/sweep", checkpoint_interval_minutes=10, max_retries=3,
    )  # fmt: skip
    detail = job(me, limited)
    assert detail["time_limit_minutes"] == 30
    assert detail["time_limit_at"] is None, "no run on yet"
    assert timeline(limited)[0][1].endswith("; time limit 30 min a run")

    cycle(admin)
    detail = job(me, limited)
    assert detail["state"] == "running"
    started = when(detail["started_at"])
    assert when(detail["time_limit_at"]) == started + timedelta(minutes=30)

    advance(admin, 25 * 60)
    cycle(admin)
    assert job(me, limited)["state"] == "running", "5 minutes short of its limit"

    advance(admin, 6 * 60)
    cycle(admin)
    assert job(me, limited)["state"] == "preempting"
    kind, message = timeline(limited)[-1]
    assert kind == "checkpointing"
    assert message == (
        "asked to checkpoint and stop: it reached its time limit of 30 min a run; the job "
        "then ends failed, with no retry"
    )
    for _ in range(8):
        advance(admin, 60)
        cycle(admin)
        if job(me, limited)["state"] != "preempting":
            break
    detail = job(me, limited)
    assert detail["state"] == "failed"
    assert detail["retry_count"] == 0, "a time limit is not retried"
    assert detail["failure_reason"].startswith(
        "time limit reached (Slurm's TIMEOUT): the run lasted 3"
    )
    assert (
        "of the 30 min a run may last, and stopped after its checkpoint"
        in (detail["failure_reason"])
    )
    assert detail["progress_seconds"] >= 30 * 60, "its checkpoint's progress is kept"
    assert detail["time_limit_at"] is None
    assert not Eviction.objects.filter(job_id=limited).exists(), "no eviction"
    assert list(JobRun.objects.filter(job_id=limited).values_list("outcome", flat=True)) == [
        JobRun.Outcome.FAILED
    ]
    assert timeline(limited)[-1][0] == "failed"
    advance(admin, 600)
    cycle(admin)
    assert job(me, limited)["state"] == "failed", "never started again"


def test_a_run_that_ends_before_its_limit_succeeds(api):
    admin, me = api("admin"), api("researcher")
    short = submit(me, name="eval", gpus=8, sim_duration_minutes=20, time_limit_minutes=30)
    cycle(admin)
    for _ in range(4):
        advance(admin, 10 * 60)
        cycle(admin)
    detail = job(me, short)
    assert detail["state"] == "succeeded"
    assert detail["failure_reason"] == ""
    assert not any(kind == "checkpointing" for kind, _ in timeline(short))


def test_a_job_without_a_limit_runs_past_any(api):
    admin, me = api("admin"), api("researcher")
    free = submit(me, name="long", gpus=8, sim_duration_minutes=600)
    cycle(admin)
    advance(admin, 3 * 3600)
    cycle(admin)
    detail = job(me, free)
    assert detail["state"] == "running"
    assert detail["time_limit_minutes"] is None and detail["time_limit_at"] is None


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"time_limit_minutes": 0}, "time_limit_minutes", "greater than or equal to 1"),
        ({"time_limit_minutes": -5}, "time_limit_minutes", "greater than or equal to 1"),
        ({"time_limit_minutes": 90 * 24 * 60 + 1}, "time_limit_minutes", "less than or equal"),
        ({"time_limit_minutes": "4:00:00"}, "time_limit_minutes", "valid integer"),
        ({"time_limit_minutes": 1.5}, "time_limit_minutes", "valid integer"),
        ({"time_limit_minutes": True}, "time_limit_minutes", "valid integer"),
        (
            {"time_limit_minutes": 60, "estimated_runtime_minutes": 90},
            "estimated_runtime_minutes",
            "your estimate (90 min) is longer than the time limit (60 min): the run would be "
            "stopped before it ends; raise the limit or lower the estimate",
        ),
    ],
)
def test_bad_time_limits_are_refused_and_write_nothing(api, body, field, words):
    me = api("researcher")
    before = Job.objects.count()
    payload = {"name": "bad", "queue": "llm-experiment", "gpus": 8, **body}
    for path in ("/api/v1/jobs/", "/api/v1/arrays/"):
        sent = {**payload, "array": "0-3"} if "arrays" in path else payload
        response = me.post(path, sent, format="json")
        assert response.status_code == 400, response.data
        assert words in " ".join(map(str, response.data["errors"].get(field, ()))), (
            path,
            response.data,
        )
    assert Job.objects.count() == before


def test_an_array_gives_each_task_the_limit(api):
    me = api("researcher")
    response = me.post(
        "/api/v1/arrays/",
        {"name": "sweep", "queue": "llm-experiment", "gpus": 8, "array": "0-2",
         "time_limit_minutes": 45},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.data
    limits = Job.objects.filter(array_id=response.data["id"]).values_list(
        "time_limit_minutes", flat=True
    )
    assert list(limits) == [45, 45, 45]


def test_no_run_is_predicted_past_its_limit(api):
    """Without history or an estimate the predictor says 12 h; with a 40-minute limit the
    engine plans the waiting job as 40 minutes, and the running one as ending by its limit."""
    admin, me = api("admin"), api("researcher")
    running = submit(me, name="on", gpus=32, sim_duration_minutes=600, time_limit_minutes=40)
    cycle(admin)
    assert job(me, running)["state"] == "running"
    waiting = submit(me, name="next", gpus=8, time_limit_minutes=25)
    unlimited = submit(me, name="other", gpus=8)
    snap = snapshot().snapshot
    pending = {j.id: j for j in snap.pending}
    assert pending[waiting].predicted_runtime_s == 25 * 60
    assert pending[unlimited].predicted_runtime_s == 12 * 3600, "the default, uncapped"
    (run,) = [r for r in snap.running if r.id == running]
    assert run.predicted_end == pytest.approx(run.started_at + 40 * 60)


def _ended(job_id: int, state: str, ran_s: float, with_end: bool = True) -> Job:
    """Settle the run of running job ``job_id`` as the backend reports it ended after
    ``ran_s`` (or, ``with_end`` off, without saying when), in memory."""
    with transaction.atomic():
        backend = get_backend(advance=False)
        cycle = Cycle(backend, backend.observe(), "cycle")
        target = Job.objects.get(pk=job_id)
        ended_at = target.started_at.timestamp() + ran_s if with_end else None
        run_ended(cycle, target, state, 600.0, "the job script failed", [], ended_at)
        backend.close()
    return target


@pytest.mark.parametrize(
    ("state", "ran_s", "with_end", "outcome"),
    [
        (FAILED, 30 * 60, True, "failed"),  # Kubernetes' deadline, Slurm's TIMEOUT
        (STOPPED, 31 * 60, True, "failed"),  # checkpointed on Slurm's warning signal
        (FAILED, 20 * 60, True, "pending"),  # a failure before the limit: retried
        (FAILED, 30 * 60, False, "pending"),  # no end given: a cycle cannot tell
    ],
)
def test_a_run_the_backend_ended_at_its_limit_fails_its_job(api, state, ran_s, with_end, outcome):
    admin, me = api("admin"), api("researcher")
    limited = submit(me, name="t", gpus=8, sim_duration_minutes=600, time_limit_minutes=30)
    cycle(admin)
    advance(admin, ran_s + 60)  # the cycle that sees the end comes after it
    ended = _ended(limited, state, ran_s, with_end)
    assert ended.state == outcome
    if outcome == "failed":
        assert ended.failure_reason.startswith("time limit reached (Slurm's TIMEOUT)")
        assert ended.retry_count == 0
    else:
        assert ended.retry_count == 1


def limit_queue(name: str = "llm-experiment", most: int | None = None, default=None) -> None:
    from quotas.models import Queue

    Queue.objects.filter(name=name).update(
        max_time_limit_minutes=most, default_time_limit_minutes=default
    )


@pytest.mark.parametrize(
    ("most", "default", "asked", "limit"),
    [
        (1440, 480, None, 480),  # the queue's default (Slurm's DefaultTime)
        (1440, None, None, 1440),  # no default: the max
        (1440, 480, 60, 60),  # asked: its own
        (1440, 480, 1440, 1440),  # the max itself is allowed
        (None, 480, 2000, 2000),  # a default, no max: any limit
        (None, None, None, None),  # nothing: no limit
    ],
)
def test_a_queue_gives_its_default_and_bounds_the_limit(api, most, default, asked, limit):
    me = api("researcher")
    limit_queue(most=most, default=default)
    extra = {} if asked is None else {"time_limit_minutes": asked}
    made = submit(me, name="q", gpus=8, **extra)
    assert job(me, made)["time_limit_minutes"] == limit
    response = me.post("/api/v1/arrays/", {"name": "a", "queue": "llm-experiment", "gpus": 8,
                                           "array": "0-1", **extra}, format="json")  # fmt: skip
    assert response.status_code == 201, response.data
    tasks = Job.objects.filter(array_id=response.data["id"])
    assert set(tasks.values_list("time_limit_minutes", flat=True)) == {limit}


def test_a_limit_above_the_queue_s_max_is_refused_and_writes_nothing(api):
    me = api("researcher")
    limit_queue(most=1440, default=480)
    before = Job.objects.count()
    response = me.post("/api/v1/jobs/", {"name": "long", "queue": "llm-experiment", "gpus": 8,
                                         "time_limit_minutes": 1441}, format="json")  # fmt: skip
    assert response.status_code == 400
    assert response.data["errors"]["time_limit_minutes"] == [
        "queue llm-experiment lets a run last at most 24 h (1,440 min): ask for that or less, "
        "or submit to another queue"
    ]
    response = me.post("/api/v1/jobs/", {"name": "est", "queue": "llm-experiment", "gpus": 8,
                                         "estimated_runtime_minutes": 600}, format="json")  # fmt: skip
    assert response.status_code == 400
    assert response.data["errors"]["estimated_runtime_minutes"] == [
        "your estimate (600 min) is longer than the time limit (480 min, queue llm-experiment's "
        "for a job that gives none): the run would be stopped before it ends; raise the limit "
        "or lower the estimate"
    ]
    assert Job.objects.count() == before
    other = submit(me, name="core", queue="llm-core", gpus=8, time_limit_minutes=5000)
    assert job(me, other)["time_limit_minutes"] == 5000, "another queue, no bound"


def test_the_queues_list_says_their_limits(api):
    limit_queue(most=1440, default=480)
    rows = {q["name"]: q for q in api("researcher").get("/api/v1/queues/").data["results"]}
    experiment, core = rows["llm-experiment"], rows["llm-core"]
    assert (experiment["max_time_limit_minutes"], experiment["default_time_limit_minutes"]) == (
        1440, 480,
    )  # fmt: skip
    assert (core["max_time_limit_minutes"], core["default_time_limit_minutes"]) == (None, None)


def test_a_default_above_the_max_is_refused_by_the_model_and_the_database():
    from django.core.exceptions import ValidationError
    from django.db import IntegrityError

    from quotas.models import Queue

    queue = Queue.objects.get(name="llm-experiment")
    queue.max_time_limit_minutes, queue.default_time_limit_minutes = 60, 120
    with pytest.raises(ValidationError) as refused:
        queue.full_clean()
    assert refused.value.message_dict["default_time_limit_minutes"] == [
        "at most the max time limit (60 min)"
    ]
    with pytest.raises(IntegrityError), transaction.atomic():
        queue.save()


def test_a_job_failed_on_its_limit_is_counted_on_metrics(api, django_capture_on_commit_callbacks):
    from core import telemetry

    telemetry.reset()
    telemetry.touch(["llm-experiment", "llm-core"])
    admin, me = api("admin"), api("researcher")
    with django_capture_on_commit_callbacks(execute=True):
        limited = submit(me, name="t", gpus=8, sim_duration_minutes=120, time_limit_minutes=10,
                         checkpoint_path="nfs://ckpt/t", checkpoint_interval_minutes=5)  # fmt: skip
        cycle(admin)
        for _ in range(8):
            advance(admin, 5 * 60)
            cycle(admin)
    assert job(me, limited)["state"] == "failed"
    assert telemetry.TIMED_OUT.labels("llm-experiment")._value.get() == 1
    assert telemetry.TIMED_OUT.labels("llm-core")._value.get() == 0
