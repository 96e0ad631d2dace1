"""A job past the starvation bound, as its owner reads it on the job page, in Chromium (#19).

The cluster is the demo's mixed layout at 4 nodes, made through the product's paths:
researcher2's experiments fill every node without online inference; the researcher submits
an 8-GPU experiment that may not run beside inference, so it waits for capacity. The admin
sets the starvation bound to one hour in the Django admin (``QuotaPolicy``), the simulated
clock moves two hours, and a cycle writes the verdict. The page must say the job is past
the bound, since when (the one cluster clock: its submission plus the bound), and what that
means; the facts are the API's; nothing on the page is a raw epoch or a float dump.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect
from rest_framework.test import APIClient

from quotas.models import QuotaPolicy
from scheduling.cycle import run_cycle
from scheduling.models import Job, Node
from scheduling.sim_services import advance_clock
from tests.browser.conftest import in_thread
from tests.browser.test_verdict_words import read_job, shown
from tests.conftest import DEMO_PASSWORD
from tests.drills import BUSY_START, make_quotas_roomy, start_busy_cluster, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BOUND_HOURS = 1
WAITED = timedelta(hours=2)
PAST = "Past the starvation bound since"


def fill_and_wait() -> int:
    """Every node without inference full with researcher2's work; the researcher's job
    waits for capacity. Returns its id."""
    people = {u.username: u for u in get_user_model().objects.all()}
    start_busy_cluster()
    make_quotas_roomy()
    other = APIClient()
    other.force_authenticate(people["researcher2"])
    for i in range(Node.objects.filter(inference=False).count()):
        submit(other, name=f"filler-{i}", queue="search-rec-experiment", gpus=8,
               avoid_inference=True, sim_duration_minutes=3000)  # fmt: skip
    run_cycle()
    me = APIClient()
    me.force_authenticate(people["researcher"])
    waiting = submit(me, name="long-wait", queue="llm-experiment", gpus=8, avoid_inference=True,
                     estimated_runtime_minutes=60, sim_duration_minutes=60)  # fmt: skip
    run_cycle()
    return waiting


def wait_past_the_bound() -> None:
    advance_clock(get_user_model().objects.get(username="admin"), WAITED.total_seconds())
    run_cycle()


def set_bound(page, base: str) -> None:
    """The admin sets the starvation bound in the Django admin."""
    page.goto(f"{base}/admin/quotas/quotapolicy/")
    page.locator("#result_list tbody a").first.click()
    page.locator("#id_starvation_bound_hours").fill(str(BOUND_HOURS))
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert QuotaPolicy.load().starvation_bound_hours == BOUND_HOURS


def test_a_job_past_the_starvation_bound_says_so_and_since_when(
    transactional_db, monkeypatch, page, login, browser
):
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", nodes=4, nodes_per_rack=2, seed=3, no_workload=True, stdout=None)
    waiting = in_thread(fill_and_wait)
    assert Job.objects.get(pk=waiting).state == "pending"
    base = login("admin")
    QuotaPolicy.load()  # the row the admin edits
    set_bound(page, base)
    in_thread(wait_past_the_bound)

    context = browser.new_context()  # the researcher, in a browser of their own
    mine = context.new_page()
    try:
        reading = read_job(mine, login("researcher", mine), waiting)
        assert reading["submitted"] == shown(BUSY_START), "the one cluster clock"
        since = shown(BUSY_START + timedelta(hours=BOUND_HOURS))
        assert reading["facts"].get(PAST) == since, reading["facts"]
        assert reading["message"].endswith(
            f"It has waited past the {BOUND_HOURS} h starvation bound, so it goes ahead of "
            "every job of its tier that has waited less."
        ), reading["message"]
        assert reading["code"] in ("INSUFFICIENT_GPUS", "PRIORITY", "TOPOLOGY"), reading
    finally:
        context.close()
