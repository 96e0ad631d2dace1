"""Pages usable on a phone, and no failed request on any page load (#15 item 10).

Every main page, signed in as the admin (the lead for the request form), on a busy cluster, in
Chromium at 390 px wide: the page does not scroll sideways (wide tables scroll inside
their own box) and no request of the page load fails (the favicon included).
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from quotas.models import BusinessLine, Queue, QuotaRequest
from quotas.services import QuotaRequestInput, create_quota_request
from scheduling.array_services import submit_array
from scheduling.models import Job, JobArray, Node
from scheduling.services import JobRequest
from tests.browser.conftest import in_thread
from tests.drills import cycle, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def populate(api, demo) -> None:
    call_command("seed_demo", nodes=64, nodes_per_rack=16, uniform=True, no_workload=True,
                 stdout=None)  # fmt: skip
    BusinessLine.objects.update(quota_gpus=200, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    me, other = api("researcher"), api("researcher2")
    for i in range(12):
        submit(me, name=f"a-rather-long-experiment-name-{i}", queue="llm-experiment",
               gpus=8, sim_duration_minutes=600)  # fmt: skip
        submit(other, name=f"rec{i}", queue="search-rec-finetune", gpus=16,
               sim_duration_minutes=60)  # fmt: skip
    sweep = JobRequest(name="a-rather-long-sweep-name", queue="llm-experiment", gpus=8,
                       sim_duration_minutes=600)  # fmt: skip
    submit_array(demo["researcher"], sweep, "0-59%4")
    cycle(api("admin"))
    create_quota_request(demo["lead"], QuotaRequestInput(
        business_line="llm", quota_gpus=260, reason="Q4 pre-training needs more"))  # fmt: skip


def main_pages() -> list[str]:
    job = Job.objects.filter(state="running").order_by("pk").first()
    node = Node.objects.filter(allocations__isnull=False).order_by("name").first()
    request = QuotaRequest.objects.get()
    return [
        "/",
        "/jobs/",
        "/jobs/new/",
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/output/",
        f"/arrays/{JobArray.objects.get().pk}/",
        "/queues/",
        "/quotas/",
        "/quotas/lines/llm/",
        "/quotas/requests/",
        f"/quotas/requests/{request.pk}/",
        "/dashboard/",
        "/oncall/",
        "/oncall/rack-map/",
        f"/oncall/nodes/{node.name}/",
        "/audit/",
        "/usage/",
        "/no/such/page/",
    ]


def cancelled_favicon(request) -> bool:
    """Chromium fetches the favicon on its own after the page's load, and the next
    navigation cancels it when it is still in flight (``net::ERR_ABORTED``, seen on a
    loaded machine): not a failed request of the page. A missing favicon still fails the
    test, as a 404 response."""
    name = request.url.rsplit("/", 1)[-1]
    return name.startswith("favicon") and request.failure == "net::ERR_ABORTED"


def test_every_main_page_fits_390_px_and_loads_without_a_failed_request(demo, api, page, login):
    in_thread(populate, api, demo)
    base = login("admin")
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400
            and not r.url.endswith("/no/such/page/") else None)  # fmt: skip
    page.on("requestfailed", lambda r: None if cancelled_favicon(r) else failed.append(
            f"failed {r.url}: {r.failure}"))  # fmt: skip
    page.set_viewport_size(PHONE)
    widths = {}
    for path in [*main_pages(), "lead", "/quotas/requests/new/"]:
        if path == "lead":  # only leads may ask for quota
            page.context.clear_cookies()
            seen = len(failed)
            login("lead")
            page.wait_for_load_state("networkidle")
            # signing in submits the form at once: a favicon still loading on the sign-in page
            # is cancelled by that navigation (net::ERR_ABORTED), which is not a page load's failure
            del failed[seen:]
            continue
        page.goto(base + path)
        expect(page.locator("main")).to_be_visible()
        page.wait_for_load_state("networkidle")
        widths[path] = page.evaluate("document.documentElement.scrollWidth")
    too_wide = {p: w for p, w in widths.items() if w > PHONE["width"]}
    assert not too_wide, f"pages wider than 390 px: {too_wide}"
    assert not failed, failed
