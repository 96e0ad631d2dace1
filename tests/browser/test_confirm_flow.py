"""Confirm what destroys work (#15 item 9), walked in Chromium.

An on-call engineer drains a busy node from its page: the first click shows the blast
radius (the jobs, their GPUs, the GPU-hours since their last checkpoints) and changes
nothing; "No, go back" leaves the node as it was; "Yes, drain" drains it, and the node
page then follows the loop moving the jobs off, marking its flash as earlier. A
researcher cancels a running job in a browser with JavaScript off: the same two steps.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from core.models import AuditRecord
from quotas.models import BusinessLine, Queue
from scheduling.models import Job, Node
from tests.browser.conftest import in_thread, screenshot
from tests.drills import advance, cycle, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_MS = 8_000


def busy_cluster(api) -> list[int]:
    """Two 8-GPU jobs running for an hour of cluster time on the 4-node test cluster."""
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    me, admin = api("researcher"), api("admin")
    ids = [submit(me, name=f"pretrain{i}", queue="llm-core", gpus=8, sim_duration_minutes=6000,
                  checkpoint_interval_minutes=600) for i in range(2)]  # fmt: skip
    cycle(admin)
    advance(admin, 3600)
    cycle(admin)
    return ids


def test_an_oncall_engineer_drains_a_busy_node_in_two_steps(demo, api, page, login):
    ids = in_thread(busy_cluster, api)
    job = Job.objects.get(pk=ids[0])
    node = Node.objects.get(allocations__job=job, allocations__gpu_index=0)
    base = login("oncall")
    page.goto(f"{base}/oncall/nodes/{node.name}/")
    reason = page.get_by_label(re.compile("^Reason"))

    reason.fill("fan failure")
    page.get_by_role("button", name="Drain", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Drain node {node.name}?")
    figures = page.locator("#confirm-figures")
    expect(figures).to_contain_text("1 job stopped and requeued (llm-core)")
    expect(figures).to_contain_text("8 GPUs stop (8 here")
    expect(figures).to_contain_text(re.compile(r"8\.0 GPU-hours of work since their last"))
    expect(page.locator("#confirm-jobs")).to_contain_text(f"#{job.pk} {job.name}")
    screenshot(page, "confirm-drain")
    assert Node.objects.get(pk=node.pk).state == "ready", "the first step changes nothing"

    page.get_by_role("link", name="No, go back").click()
    expect(page).to_have_url(f"{base}/oncall/nodes/{node.name}/")
    expect(page.locator("#node-state")).to_have_text("ready")

    page.get_by_label(re.compile("^Reason")).fill("fan failure")
    page.get_by_role("button", name="Drain", exact=True).click()
    page.get_by_role("button", name=f"Yes, drain {node.name}").click()
    expect(page).to_have_url(f"{base}/oncall/nodes/{node.name}/")
    flash = page.locator("main > ul.messages")
    expect(flash).to_contain_text(f"{node.name} draining")
    expect(page.locator("#node-state")).to_have_text("draining")
    record = AuditRecord.objects.get(action="node.drain")
    assert record.actor == demo["oncall"] and record.reason == "fan failure"

    # the page then follows the loop moving the job off
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)
    admin = api("admin")
    in_thread(cycle, admin)
    in_thread(advance, admin, 900)
    in_thread(cycle, admin)
    expect(page.locator("#node-gpus")).to_contain_text("0 used", timeout=LIVE_MS)
    expect(flash.locator("li.is-earlier")).to_contain_text(f"Earlier: {node.name} draining")
    expect(flash.locator("li[data-now]")).to_have_text(
        f"Now: {node.name} is draining, 0 of 8 GPUs used, 0 jobs on it."
    )


def test_a_researcher_cancels_a_running_job_in_two_steps_without_javascript(
    demo, api, browser, portal_server
):
    ids = in_thread(busy_cluster, api)
    job = Job.objects.get(pk=ids[1])
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{portal_server}/accounts/login/")
    from tests.conftest import DEMO_PASSWORD

    page.get_by_label("Username").fill("researcher")
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{portal_server}/jobs/{job.pk}/")
    expect(page.locator("#cancel-note")).to_be_visible()
    page.get_by_role("button", name="Cancel this job").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Cancel job #{job.pk} ({job.name})?")
    expect(page.locator("#confirm-figures")).to_contain_text(
        re.compile(r"8\.0 GPU-hours of work since (its last checkpoint|it started)")
    )
    job.refresh_from_db()
    assert job.state == "running", "the first step changes nothing"
    page.get_by_role("button", name=f"Yes, cancel job #{job.pk}").click()
    expect(page).to_have_url(f"{portal_server}/jobs/{job.pk}/")
    expect(page.locator("#job-state")).to_have_text("cancelled")
    expect(page.locator("main > ul.messages")).to_contain_text(f"Job #{job.pk} cancelled")
    context.close()
