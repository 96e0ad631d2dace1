"""Counts read the same on every page (session 33): on the demo's full 10,000-GPU
cluster every count of 1,000 or more has its thousands separators, on every page a
role reads and after the live parts rewrite them.

The trust walk (test_trust_walk.py) reads a 512-GPU cluster, where no count reaches
1,000, so its ``readable`` check for separators (tests/browser/trust_checks.py) could not
bite there. Session 32 found the dashboard writing "2943 jobs pending" beside "2,943
jobs were waiting", and the home, queues, line and quota pages writing "4186 used" where
the dashboard wrote "4,186": the same number, written two ways.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect
from rest_framework.test import APIClient

from demo.workload import generate
from monitoring.rollup import rollup
from quotas.models import BusinessLine, Queue
from quotas.services import QuotaRequestInput, create_quota_request
from quotas.tasks import quota_activation
from scheduling.cycle import run_cycle
from scheduling.models import Job, Node
from scheduling.services import JobRequest, submit_jobs
from scheduling.sim_services import advance_clock
from tests.browser.conftest import draw_dashboard, in_thread
from tests.browser.test_live_pages import LIVE_MS, go_live
from tests.browser.test_whatif_form import ask
from tests.browser.trust_checks import readable, readable_json, unseparated
from tests.conftest import DEMO_PASSWORD
from tests.drills import start_busy_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SEPARATED = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")
STEPS, STEP_S = 3, 600


def make_big() -> dict:
    """The full demo cluster after a few cycles of its workload, and a quota request whose
    impact counts the cluster's guarantees."""
    people = {u.username: u for u in get_user_model().objects.all()}
    start_busy_cluster()
    for _ in range(STEPS):
        generate()
        run_cycle()
        rollup()
        quota_activation()
        advance_clock(people["admin"], STEP_S)
    generate()
    run_cycle()  # the cycle every page is read at
    rollup()
    line = BusinessLine.objects.get(name="llm")  # the lead's line
    request = create_quota_request(
        people["lead"],
        QuotaRequestInput(business_line="llm", quota_gpus=line.quota_gpus + 8, reason="more"),
    )
    return {"request": request.pk, "line": line.name}


@pytest.fixture
def big(transactional_db, monkeypatch) -> dict:
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", seed=3, stdout=None)
    out = in_thread(make_big)
    assert Node.objects.count() >= 1000, "the full demo cluster"
    out["job"] = Job.objects.filter(state="pending").order_by("-gpus", "id").first().pk
    out["node"] = Node.objects.order_by("name").first().name
    return out


def read(page, url: str, where: str) -> str:
    response = page.goto(url)
    assert response is not None and response.status < 400, f"{url}: {response and response.status}"
    return readable(page, where)


def test_every_count_has_its_separators_on_the_full_cluster(big, page, login):
    base = login("admin")
    pages = {
        "home": "/",
        "job list": "/jobs/?state=pending",
        "a big waiting job": f"/jobs/{big['job']}/",
        "/queues/": "/queues/",
        "quotas": "/quotas/",
        "line page": f"/quotas/lines/{big['line']}/",
        "request page": f"/quotas/requests/{big['request']}/",
        "request list": "/quotas/requests/",
        "on-call": "/oncall/",
        "rack map": "/oncall/rack-map/",
        "node page": f"/oncall/nodes/{big['node']}/",
        "audit": "/audit/",
        "Django admin, jobs": "/admin/scheduling/job/",
        "Django admin, a job": f"/admin/scheduling/job/{big['job']}/change/",
        "Django admin, nodes": "/admin/scheduling/node/",
    }
    texts = {where: read(page, f"{base}{url}", where) for where, url in pages.items()}
    # the check bites: these pages do write counts of 1,000 and more
    for where in ("home", "/queues/", "quotas", "line page", "request page", "rack map",
                  "Django admin, jobs", "Django admin, nodes"):  # fmt: skip
        assert SEPARATED.search(texts[where]), f"{where}: no count of 1,000 or more"
    draw_dashboard(page, f"{base}/dashboard/")
    assert SEPARATED.search(readable(page, "dashboard"))
    # the lead's request form shows the line's and its queues' numbers
    base = login("lead")
    assert SEPARATED.search(read(page, f"{base}/quotas/requests/new/", "request form"))
    # what a person reads in the API's answers too (verdicts, events)
    admin = APIClient()
    admin.force_authenticate(get_user_model().objects.get(username="admin"))
    for path in (f"/api/v1/jobs/{big['job']}/", "/api/v1/jobs/?state=pending&limit=200"):
        response = admin.get(path)
        assert response.status_code == 200
        readable_json(response.json(), path)


def test_the_live_parts_keep_the_separators(big, page, login):
    base = login("admin")

    def next_cycle() -> None:
        in_thread(advance_clock, get_user_model().objects.get(username="admin"), STEP_S)
        in_thread(lambda: (generate(), run_cycle()))

    for where, url, marker in (
        ("/queues/", "/queues/", "#queues-page"),
        ("rack map", "/oncall/rack-map/", "#rack-map"),
    ):
        go_live(page, f"{base}{url}")
        before = page.locator(marker).get_attribute("data-refreshed")
        next_cycle()
        expect(page.locator(marker)).not_to_have_attribute(
            "data-refreshed", before or "", timeout=LIVE_MS
        )
        assert SEPARATED.search(readable(page, f"{where}, live"))


def test_the_what_if_writes_a_place_in_line_past_1000_with_its_separator(big, page, login):
    # a new job's place in line past a thousand, written by the form's script from the
    # what-if's answer (Dom.count): behind 1,100 jobs of the researcher's own in
    # llm-experiment (the people of a line take turns: behind the demo workload's jobs
    # alone, the researcher's first job would go near the front)
    researcher = get_user_model().objects.get(username="researcher")
    burst = [JobRequest(name=f"sweep-{i}", queue="llm-experiment", gpus=8) for i in range(1100)]
    in_thread(submit_jobs, researcher, burst)
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("one-more")
    page.get_by_label("Queue").select_option(value=str(Queue.objects.get(name="llm-experiment").pk))
    answer = ask(page, base, "8")
    assert answer["position"] >= 1000, answer
    expect(page.locator("#feasibility-position")).to_have_text(
        f"; place in line: {answer['position']:,}"
    )
    readable(page, "submit form with its what-if")


@pytest.mark.parametrize(
    "text, bare",
    [
        ("4186 used", ["4186"]),
        ("9369 / 9792 GPUs", ["9369", "9792"]),
        ("average 1860.7 GPUs", ["1860"]),
        ("2356 jobs, page 1 of 48.", ["2356"]),
        ("4,186 used; 1,860.7 GPUs; 999 jobs", []),
        ("#4186 train · job 4186 · Job 4186 · jobs 4186", []),  # ids
        ("2030-01-07 09:30 UTC · r005-n0123 · v1.2345 · :8000 · s3://b/run/2048", []),
    ],
)
def test_the_check_knows_a_bare_count_from_an_id_a_date_or_a_name(text, bare):
    found = unseparated(text)
    assert len(found) == len(bare) and all(b in f for b, f in zip(bare, found, strict=True))
