"""Backend errors: transient ones back off and the job starts; permanent ones fail it visibly.

Driven through the API on the small simulated cluster (4 x 8 GPUs). The simulator's
``inject_api_errors(n)`` makes its next n calls raise a transient error without effect;
cluster time moves only through ``simulator/advance`` (SIMULATOR_SPEED=0 in tests), so
the backoff is checked to the second without sleeping.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from scheduling.backend_factory import get_backend
from scheduling.backends.base import PermanentBackendError, TransientBackendError
from scheduling.backends.simulator import SimulatorBackend
from scheduling.consistency import find_inconsistencies
from scheduling.cycle import LAUNCH_RETRY, launch_backoff_s
from scheduling.models import Allocation, SchedulingCycle
from tests.drills import advance, cycle, job, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def inject_backend_errors(count: int) -> None:
    """The simulator's next ``count`` calls fail transiently (saved with its state)."""
    with transaction.atomic():
        backend = get_backend(advance=False)
        backend.sim.inject_api_errors(count)
        backend.close()


def backend_errors_left() -> int:
    with transaction.atomic():
        backend = get_backend(advance=False)
        left = backend.sim._api_errors
        transaction.set_rollback(True)
    return left


def test_the_backoff_doubles_with_the_age_of_the_failure_streak_up_to_five_minutes():
    assert [launch_backoff_s(age) for age in (0, 10, 20, 40, 80, 160, 320, 10_000)] == [
        10, 10, 20, 40, 80, 160, 300, 300
    ]  # fmt: skip


def test_a_transient_launch_error_is_retried_with_backoff_until_the_job_starts(api):
    admin, me = api("admin"), api("researcher")
    job_id = submit(me)
    inject_backend_errors(3)

    summary = cycle(admin)
    assert summary["starts"] == 0
    assert any("simulated backend outage" in e for e in summary["errors"]), summary["errors"]
    detail = job(me, job_id)
    assert detail["state"] == "pending" and detail["failure_reason"] == ""
    retry = detail["events"][-1]
    assert retry["kind"] == LAUNCH_RETRY
    assert "could not start it right now" in retry["message"]
    assert "next attempt in 10 s" in retry["message"]

    # (cluster seconds since the first failure, backend calls made, what the job shows)
    clock = 0
    for elapsed, calls, state in [
        (0, 0, "pending"),  # backing off: the backend is not asked again
        (10, 1, "pending"),  # second failure; the streak is 10 s old: wait 10 s more
        (15, 0, "pending"),
        (20, 1, "pending"),  # third failure; the streak is 20 s old: wait 20 s
        (39, 0, "pending"),
        (40, 1, "running"),  # the backend answers again
    ]:
        before = backend_errors_left()
        if elapsed > clock:
            advance(admin, elapsed - clock)
            clock = elapsed
        cycle(admin)
        assert before - backend_errors_left() == min(calls, before), elapsed
        assert job(me, job_id)["state"] == state, elapsed

    detail = job(me, job_id)
    kinds = [e["kind"] for e in detail["events"]]
    assert kinds == ["submitted", LAUNCH_RETRY, LAUNCH_RETRY, LAUNCH_RETRY, "started"]
    assert "next attempt in 20 s" in detail["events"][3]["message"]
    assert Allocation.objects.filter(job_id=job_id).count() == 8
    assert find_inconsistencies() == []


def test_a_launch_that_timed_out_but_happened_is_adopted_next_cycle_not_launched_twice(
    api, monkeypatch
):
    admin, me = api("admin"), api("researcher")
    job_id = submit(me)
    real_launch = SimulatorBackend.launch

    def launch_then_time_out(self, request):
        real_launch(self, request)
        raise TransientBackendError("sbatch: timed out waiting for the controller")

    monkeypatch.setattr(SimulatorBackend, "launch", launch_then_time_out)
    cycle(admin)
    assert job(me, job_id)["state"] == "pending"
    monkeypatch.setattr(SimulatorBackend, "launch", real_launch)

    summary = cycle(admin)  # no backoff needed: the run is found on the cluster
    assert any(f"adopted for job {job_id}" in d for d in summary["drift"]), summary["drift"]
    detail = job(me, job_id)
    assert detail["state"] == "running"
    assert [e["kind"] for e in detail["events"]] == ["submitted", LAUNCH_RETRY, "adopted"]
    assert find_inconsistencies() == []


def test_a_permanent_launch_error_fails_the_job_with_the_reason_its_owner_sees(api, monkeypatch):
    admin, me = api("admin"), api("researcher")
    doomed = submit(me, name="bad-image")
    fine = submit(me, name="good")
    real_launch = SimulatorBackend.launch

    def refuse_bad_image(self, request):
        if request.name == "bad-image":
            raise PermanentBackendError(
                "image registry.example/llm:missing not found", code="invalid_argument"
            )
        real_launch(self, request)

    monkeypatch.setattr(SimulatorBackend, "launch", refuse_bad_image)
    summary = cycle(admin)

    assert summary["failed"] == 1 and summary["starts"] == 1, "one refusal blocks no one else"
    detail = job(me, doomed)
    assert detail["state"] == "failed"
    assert detail["failure_reason"] == (
        "the cluster refused to start it: image registry.example/llm:missing not found"
    )
    assert detail["finished_at"] is not None
    assert detail["events"][-1]["kind"] == "failed"
    assert detail["events"][-1]["message"] == detail["failure_reason"]
    assert detail["placement"] == [] and not Allocation.objects.filter(job_id=doomed).exists()
    assert job(me, fine)["state"] == "running"
    assert "not found" in SchedulingCycle.objects.first().errors[0]

    cycle(admin)  # a failed job is final: never retried
    assert job(me, doomed)["state"] == "failed"
    assert find_inconsistencies() == []
