"""Live means live (#15 item 8), in Chromium against the real web server and websockets.

- The node page follows a drain made elsewhere (the service, as the API or another
  on-call engineer would): state, GPU counts, the jobs on it and the blast radius change
  without a reload as the loop moves the jobs off.
- A line's page follows an approval: the contract's quota and the history change.
- The job page's flash ("submitted: it waits for the next cycle") is marked as earlier
  once the job runs, with a line saying where it stands now.
- The job page follows a hold and a release made elsewhere (its hold section and form).
- The home page follows the loop; a page that does not update itself says "not live".
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from quotas.models import BusinessLine, Queue
from quotas.services import QuotaRequestInput, approve_quota_request, create_quota_request
from scheduling.models import Job, Node
from scheduling.nodes.services import drain_node
from tests.browser.conftest import in_thread
from tests.drills import advance, cycle, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_MS = 8_000  # a cycle's events through Redis, then a refetch, on a loaded machine


def roomy() -> None:
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)


def go_live(page, url: str) -> None:
    page.goto(url)
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)  # the subscriptions are sent on open
    page.evaluate("window.__sameDocument = true")


def same_document(page) -> bool:
    return page.evaluate("window.__sameDocument === true")


def test_the_node_page_follows_a_drain_without_a_reload(demo, api, page, login):
    in_thread(roomy)
    me, admin = api("researcher"), api("admin")
    first = in_thread(lambda: submit(me, name="moves", queue="llm-core", gpus=8,
                                     sim_duration_minutes=6000))  # fmt: skip
    in_thread(cycle, admin)
    job = Job.objects.get(pk=first)
    node = Node.objects.get(allocations__job=job, allocations__gpu_index=0)
    base = login("oncall")
    go_live(page, f"{base}/oncall/nodes/{node.name}/")
    expect(page.locator("#node-gpus")).to_contain_text("8 used, 0 free")
    expect(page.locator("#node-jobs")).to_contain_text(f"#{job.pk} moves")
    expect(page.locator("#blast-radius")).to_contain_text("1 job in 1 queue runs here")

    in_thread(drain_node, demo["admin"], node.name, "disk errors: move the work off")
    expect(page.locator("#node-state")).to_have_text("draining", timeout=LIVE_MS)
    expect(page.locator("#node-state-reason")).to_have_text("disk errors: move the work off")
    expect(page.locator("#node-buttons")).not_to_contain_text("Drain")
    expect(page.locator("#node-history")).to_contain_text("Drain started")

    in_thread(cycle, admin)  # asks the job to checkpoint and move
    expect(page.locator("#node-jobs")).to_contain_text("preempting", timeout=LIVE_MS)
    in_thread(advance, admin, 900)
    in_thread(cycle, admin)  # it stopped: requeued, and started on another node
    job.refresh_from_db()
    assert job.state == "running" and not job.allocations.filter(node=node).exists()
    expect(page.locator("#node-gpus")).to_contain_text(
        "0 used, 8 idle, out of the pool (draining)", timeout=LIVE_MS
    )
    expect(page.locator("#node-jobs")).to_contain_text("No job holds a GPU here.")
    expect(page.locator("#blast-radius")).to_contain_text("No job runs here")
    expect(page.locator("#node-label")).to_contain_text(f"{node.name}: draining")
    assert same_document(page), "the node page changed without a reload"


def test_a_lines_page_follows_an_approval_without_a_reload(demo, page, login):
    before = BusinessLine.objects.get(name="llm").quota_gpus
    base = login("lead")
    go_live(page, f"{base}/quotas/lines/llm/")
    quota_cell = page.locator("#contract tbody tr").first.locator("td").first
    expect(quota_cell).to_have_text(str(before))
    expect(page.locator("#history")).to_contain_text("No changes yet.")

    def ask_and_approve() -> int:
        req = create_quota_request(demo["lead"], QuotaRequestInput(
            business_line="llm", quota_gpus=before + 8, reason="a bigger run"))  # fmt: skip
        approve_quota_request(demo["admin"], req.pk, "fine")
        return req.pk

    request_id = in_thread(ask_and_approve)
    assert BusinessLine.objects.get(name="llm").quota_gpus == before + 8
    expect(quota_cell).to_have_text(str(before + 8), timeout=LIVE_MS)
    expect(page.locator("#history")).to_contain_text(f"request #{request_id}")
    expect(page.locator("#history")).to_contain_text(f"{before} → {before + 8}")
    assert same_document(page), "the line page changed without a reload"


def test_the_job_pages_flash_is_marked_as_earlier_once_the_job_runs(demo, api, page, login):
    in_thread(roomy)
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("flash-check")
    page.get_by_label("Queue").select_option(label="llm-core — Core training, tier core")
    page.get_by_label("GPUs in total").fill("8")
    page.get_by_label("Simulated true runtime (minutes)").fill("600")
    page.get_by_role("button", name="Submit job").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="flash-check")
    flash = page.locator("main > ul.messages")
    expect(flash).to_contain_text(f"Job #{job.pk} submitted: it waits for the next cycle.")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)
    page.evaluate("window.__sameDocument = true")

    in_thread(cycle, api("admin"))
    expect(page.locator("#job-state")).to_have_text("running", timeout=LIVE_MS)
    expect(page.locator("#started-label")).to_have_text("Started")  # not a last run's
    earlier = flash.locator("li.is-earlier")
    expect(earlier).to_have_text(f"Earlier: Job #{job.pk} submitted: it waits for the next cycle.")
    expect(flash.locator("li[data-now]")).to_have_text(
        re.compile(
            rf"^Now: job #{job.pk} is running \(started \d{{4}}-\d\d-\d\d \d\d:\d\d UTC\)\.$"
        )
    )
    assert same_document(page)


def test_the_job_page_follows_a_hold_and_a_release_made_elsewhere(demo, api, page, login):
    """The team lead holds the researcher's job through the API while its page is open: the
    page says who holds it and why and hides its hold form, without a reload; released,
    the hold is gone and the form is back (its reason field as it was typed)."""
    in_thread(roomy)
    job_id = in_thread(lambda: submit(api("researcher"), name="to-hold", gpus=8))
    base = login("researcher")
    go_live(page, f"{base}/jobs/{job_id}/")
    expect(page.locator("#hold-form")).to_be_visible()
    expect(page.locator("#hold")).to_have_count(0)
    page.locator("#hold-reason").fill("typed, not sent")
    lead = api("lead")
    held = in_thread(lambda: lead.post(f"/api/v1/jobs/{job_id}/hold/",
                                       {"reason": "line budget"}, format="json"))  # fmt: skip
    assert held.status_code == 200, held.data
    expect(page.locator("#hold-text")).to_contain_text("by lead since", timeout=LIVE_MS)
    expect(page.locator("#hold-text")).to_contain_text(": line budget.")
    expect(page.locator("#hold-form")).to_be_hidden()
    expect(page.locator("#release-form")).to_be_visible()  # the owner may release a user hold
    released = in_thread(lambda: lead.post(f"/api/v1/jobs/{job_id}/release/"))
    assert released.status_code == 200, released.data
    expect(page.locator("#hold")).to_have_count(0, timeout=LIVE_MS)
    expect(page.locator("#hold-form")).to_be_visible()
    expect(page.locator("#hold-reason")).to_have_value("typed, not sent")
    assert same_document(page)


def test_the_home_page_follows_the_loop_and_static_pages_say_not_live(demo, api, page, login):
    in_thread(roomy)
    base = login("researcher")
    go_live(page, f"{base}/")
    expect(page.locator("#gpus-allocated")).to_have_text("0")
    me, admin = api("researcher"), api("admin")
    in_thread(lambda: submit(me, name="home", queue="llm-core", gpus=8))
    in_thread(cycle, admin)
    expect(page.locator("#gpus-allocated")).to_have_text("8", timeout=LIVE_MS)
    assert same_document(page)

    page.goto(f"{base}/jobs/")
    status = page.locator("#live-status")
    expect(status).to_have_text("not live")
    expect(status).to_have_attribute("data-state", "off")
    expect(status).to_have_attribute("title", re.compile("reload it for the latest figures"))


def _show(page, visible: bool) -> None:
    """Put the page behind another tab (``visible`` False) or in front again. Headless
    Chromium reports every page visible, so the page's ``visibilityState`` is set and its
    ``visibilitychange`` fired as the browser does when a tab is switched."""
    page.evaluate(
        """(visible) => {
            Object.defineProperty(document, "visibilityState",
                                  { value: visible ? "visible" : "hidden", configurable: true });
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        visible,
    )


def test_a_hidden_tab_refetches_nothing_and_catches_up_when_shown(demo, api, page, login):
    """Five hundred people with the portal in a background tab must not make the server
    render five hundred pages each cycle: a hidden home page handles no event; a visible
    one beside it (the same person's other tab) follows the cycle; once shown again the
    hidden one catches up with one refetch, without a reload."""
    in_thread(roomy)
    base = login("researcher")
    go_live(page, f"{base}/")
    front = page.context.new_page()
    go_live(front, f"{base}/")
    refetches: list[str] = []
    page.on(
        "request", lambda r: refetches.append(r.url) if r.headers.get("x-live-refresh") else None
    )
    _show(page, False)

    me, admin = api("researcher"), api("admin")
    in_thread(lambda: submit(me, name="behind", queue="llm-core", gpus=8))
    in_thread(cycle, admin)
    expect(front.locator("#gpus-allocated")).to_have_text("8", timeout=LIVE_MS)
    page.wait_for_timeout(3_000)  # the same events reached it; a refetch would be done by now
    expect(page.locator("#gpus-allocated")).to_have_text("0")
    assert refetches == []

    _show(page, True)
    expect(page.locator("#gpus-allocated")).to_have_text("8", timeout=LIVE_MS)
    expect(page.locator("#own-jobs")).to_contain_text("1 job running")
    assert refetches == [f"{base}/"] and same_document(page)
    front.close()


def test_the_pages_ask_again_spread_over_two_seconds_after_a_cycle(demo, api, page, login):
    """A hundred open home pages asking at the same instant after each cycle made a
    submission wait 2 s behind them (docs/reliability.md): a page-wide event reaches the
    page's refetch after a random wait of up to 2 s. With the page's random draw at its
    top, the refetch starts about 2 s after the cycle, not at once."""
    in_thread(roomy)
    base = login("researcher")
    go_live(page, f"{base}/")
    asked: list[float] = []
    page.on(
        "request", lambda r: asked.append(time.time()) if r.headers.get("x-live-refresh") else None
    )
    page.evaluate("Math.random = () => 0.999")
    me, admin = api("researcher"), api("admin")
    in_thread(lambda: submit(me, name="spread", queue="llm-core", gpus=8))
    in_thread(cycle, admin)
    committed = time.time()
    expect(page.locator("#gpus-allocated")).to_have_text("8", timeout=LIVE_MS)
    assert asked and asked[0] - committed >= 1.8, [t - committed for t in asked]


def test_the_queues_pages_eviction_time_follows_the_ratios_it_names(demo, api, page, login):
    """Page walk: /queues/ rewrites its eviction ratios live from each new rollup sample,
    while the sentence naming their sample kept the time of the page's load ("as of the
    rollup sample at 15:20 JST" over the ratios of 15:35, which a reload showed)."""
    from monitoring.rollup import rollup

    in_thread(roomy)
    admin = api("admin")
    in_thread(rollup)
    base = login("researcher")
    go_live(page, f"{base}/queues/")
    first = page.locator("#eviction-as-of").inner_text()
    in_thread(advance, admin, 3600)
    sample = in_thread(rollup)
    in_thread(cycle, admin)  # queues.updated: the page refetches its numbers
    later = f"as of the rollup sample at {sample.at:%Y-%m-%d %H:%M} UTC"
    assert later != first
    expect(page.locator("#eviction-as-of")).to_have_text(later, timeout=LIVE_MS)
    page.reload()
    expect(page.locator("#eviction-as-of")).to_have_text(later)


def test_a_page_says_signed_out_when_the_directory_closes_the_account(demo, page, login):
    from core.people import offboard

    base = login("oncall")
    go_live(page, f"{base}/oncall/")
    in_thread(lambda: offboard(demo["oncall"], managed_lines=[], source="LDAP",
                               reason="gone from the directory"))  # fmt: skip
    expect(page.locator("#live-status")).to_have_text(
        "signed out: reload the page to sign in again", timeout=LIVE_MS
    )
    page.wait_for_timeout(1500)  # no reconnect: it would be refused, and the badge says so
    expect(page.locator("#live-status")).to_have_text(
        "signed out: reload the page to sign in again"
    )
    page.reload()
    assert "/accounts/login/" in page.url
