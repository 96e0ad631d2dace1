"""The line's estimated start read as a researcher reads it (session 34, ``line_estimate``):
in Chromium, on a full cluster, the jobs behind the reservations are dated, their page says
what the date is, and the page, the API and the job list say the same date."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from quotas.models import BusinessLine, Queue
from scheduling.cycle import run_cycle
from scheduling.models import Job
from tests.browser.conftest import in_thread
from tests.browser.test_verdict_words import listed_estimate, read_job
from tests.conftest import DEMO_PASSWORD
from tests.drills import start_busy_cluster, submit

pytestmark = pytest.mark.django_db(transaction=True)

BASIS = "Estimated start from"


def fill_and_wait() -> list[int]:
    """Four 8-GPU runs of 90 min fill the 4 nodes; six 4-GPU jobs of 30 min wait."""
    start_busy_cluster()
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    BusinessLine.objects.update(quota_gpus=64, guarantee_gpus=0)
    me = APIClient()
    me.force_authenticate(get_user_model().objects.get(username="researcher"))
    for i in range(4):
        submit(me, name=f"fill-{i}", queue="llm-core", gpus=8,
               estimated_runtime_minutes=90, sim_duration_minutes=90)  # fmt: skip
    run_cycle()
    waiting = [
        submit(
            me,
            name=f"wait-{i}",
            queue="llm-core",
            gpus=4,
            estimated_runtime_minutes=30,
            sim_duration_minutes=30,
        )  # fmt: skip
        for i in range(6)
    ]
    run_cycle()
    return waiting


@pytest.fixture
def waiting(transactional_db, monkeypatch) -> list[int]:
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command(
        "seed_demo", nodes=4, nodes_per_rack=4, uniform=True, no_workload=True, stdout=None
    )
    return in_thread(fill_and_wait)


def test_the_jobs_behind_the_reservations_read_their_turn_the_same_everywhere(waiting, page, login):
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=waiting)}
    assert all(jobs[pk].state == "pending" for pk in waiting)
    base = login("researcher")
    dates = {}
    for pk in waiting:
        reading = read_job(page, base, pk)  # readable; the page's facts and date are the API's
        shown = f"{jobs[pk].estimated_start:%Y-%m-%d %H:%M} UTC"
        assert reading["estimate"] == shown, (pk, reading["estimate"], shown)
        dates[pk] = shown
        lined = BASIS in reading["facts"]
        assert lined == (pk in waiting[4:]), (pk, reading["facts"])  # the first four reserve
        if lined:
            assert reading["facts"][BASIS].startswith("its turn for the GPUs"), reading["facts"]
        listed_estimate(page, base, pk, shown)  # the job list: the same date
    # all four nodes free when the 90-min runs end: the jobs in line start with the reserved
    assert len(set(dates.values())) == 1, dates
