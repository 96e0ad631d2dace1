"""A researcher in a real browser: estimator, submit form, live job page, live queues page.

The cluster (4 uniform H100 80 GB nodes) is first filled by other work, so the submitted
job waits with a verdict; the scheduling loop runs in this process (``run_cycle``, in a
worker thread) and publishes through Redis to the web server serving the page, which must
change without reload.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from quotas.models import BusinessLine, Queue
from scheduling import services
from scheduling.cycle import run_cycle as run_one_cycle
from scheduling.models import Job
from scheduling.services import JobRequest
from tests.browser.conftest import in_thread, screenshot
from tests.browser.frames import Frames

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def run_cycle():
    return in_thread(run_one_cycle)


def submit_job(user, req: JobRequest) -> Job:
    return in_thread(services.submit_job, user, req)


def cancel_job(user, job_id: int) -> Job:
    return in_thread(services.cancel_job, user, job_id)


@pytest.fixture
def cluster_full_of_experiments(demo):
    """Roomy quotas, and four 8-GPU experiments of the lead's running on all 32 GPUs."""
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    blockers = [
        submit_job(
            demo["lead"],
            JobRequest(
                name=f"blocker{i}", queue="llm-experiment", gpus=8, sim_duration_minutes=600
            ),
        )
        for i in range(4)
    ]
    run_cycle()
    assert Job.objects.filter(state="running").count() == 4
    return blockers


def test_a_researcher_estimates_submits_and_watches_the_job_start_live(
    demo, cluster_full_of_experiments, page, login
):
    frames = Frames(page)
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()

    # The estimator: 7B, ZeRO-3 over 8 GPUs -> one node of H100 80 GB.
    page.get_by_label("Model size (parameters)").fill("7B")
    page.get_by_label("Optimizer").select_option("adam")
    page.get_by_label("Sharding (ZeRO / FSDP)").select_option("3")
    page.get_by_label("Data-parallel degree").fill("8")
    page.get_by_role("button", name="Estimate").click()
    recommendation = page.locator("#recommendation-text")
    expect(recommendation).to_contain_text("Recommended: 8 × H100 80 GB, fits on one node")
    expect(page.locator('#estimate-result [data-part="optimizer_gb"]')).to_have_text("10.5")
    page.get_by_role("button", name="Fill the job form with this").click()
    expect(page.get_by_label("GPUs in total")).to_have_value("8")
    expect(page.get_by_label("Minimum GPU memory (GB)")).to_have_value("37")

    # The job form, keyboard-style; HTML in the name must stay text.
    page.get_by_label("Job name").fill("llama-7b <b>sft</b>")
    page.get_by_label("Queue").select_option(label="llm-core — Core training, tier core")
    expect(page.locator("#queue-hint")).to_contain_text("tier core")
    page.get_by_label("Simulated true runtime (minutes)").fill("600")
    feasibility = page.locator("#feasibility-title")  # the engine's what-if (#15)
    expect(feasibility).to_contain_text("Would wait: not enough free GPUs")
    expect(page.locator("#feasibility")).to_have_attribute("data-status", "would_wait")
    screenshot(page, "submit")
    # (a mouse click right after a full-page screenshot can land beside the button in
    # Chromium; the keyboard is what we want to support anyway)
    page.get_by_role("button", name="Submit job").focus()
    page.keyboard.press("Enter")

    # The job page: pending, not yet explained; then the loop explains it, live.
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="llama-7b <b>sft</b>")
    assert (job.gpus, job.gpu_memory_gb, job.queue.name, job.state) == (
        8,
        37,
        "llm-core",
        "pending",
    )
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Job #{job.pk}: llama-7b <b>sft</b>")
    state = page.locator("#job-state")
    expect(state).to_have_text("pending")
    expect(page.locator("#verdict-none")).to_be_visible()
    expect(page.locator("#placement")).to_have_text("Not placed yet.")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    frames.wait_subscribed(page, f"job.{job.pk}")
    frames.wait_subscribed(page, "pending")
    page.evaluate("window.__sameDocument = true")

    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending" and job.pending_code
    expect(page.locator("#verdict-code")).to_have_text(job.pending_code)
    expect(page.locator("#verdict-message")).to_contain_text("8")
    expect(page.locator("#verdict-details")).to_contain_text("Matching GPUs left free")
    # The live update renders the API's estimate as the page does: a date, or why none.
    expect(page.locator("#estimated-start")).to_have_text(
        re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$|^unknown: .+")
    )
    expect(page.locator("#verdict-remedy")).not_to_be_empty()
    expect(page.locator("#queue-position")).to_have_text(str(job.queue_position))

    # One experiment is cancelled; the next cycle starts our job: the open page follows.
    cancel_job(demo["lead"], cluster_full_of_experiments[0].pk)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "running"
    expect(state).to_have_text("running")
    expect(page.locator("#verdict")).to_be_hidden()
    expect(page.locator("#timeline")).to_contain_text("started")
    expect(page.locator("#placement li")).to_have_count(1)
    expect(page.locator("#placement")).to_contain_text("all 8 GPUs")
    assert page.evaluate("window.__sameDocument === true"), "no reload, no navigation"
    # Its run ends: the GPUs go, and the page says where to read where it ran (page walk:
    # a finished job's placement read "Not placed on any node.").
    cancel_job(demo["researcher"], job.pk)
    run_cycle()
    expect(state).to_have_text("cancelled")
    expect(page.locator("#placement")).to_have_text(
        "Holds no GPUs now; where it ran is in the timeline."
    )
    expect(page.locator("#progress-label")).to_have_text("Progress made")
    expect(page.locator("#timeline")).to_contain_text("its run has ended; 8 GPUs freed")
    assert page.evaluate("window.__sameDocument === true"), "no reload, no navigation"

    # A job that waits shows its verdict in words and numbers.
    big = submit_job(
        demo["researcher"],
        JobRequest(name="wide-70b", queue="llm-core", gpus=16, model_name="llama-70b"),
    )
    run_cycle()
    big.refresh_from_db()
    page.goto(f"{base}/jobs/{big.pk}/")
    expect(page.locator("#job-state")).to_have_text("pending")
    expect(page.get_by_role("heading", name="Why it is waiting")).to_be_visible()
    expect(page.locator("#verdict-code")).to_have_text(big.pending_code)
    expect(page.locator("#verdict-message")).to_have_text(big.pending_message)
    expect(page.locator("#verdict-details dt").first).to_be_visible()
    screenshot(page, "job-detail")


def test_the_queues_page_follows_the_loop_live(demo, page, login):
    """The demo's own contracts (llm: quota 14 of the 32 GPUs): experiments borrow beyond it."""
    experiments = [
        submit_job(
            demo["lead"],
            JobRequest(name=f"exp{i}", queue="llm-experiment", gpus=8, sim_duration_minutes=600),
        )
        for i in range(2)
    ]
    submit_job(demo["researcher"], JobRequest(name="core", queue="llm-core", gpus=8))
    run_cycle()
    frames = Frames(page)
    base = login("researcher2")
    page.goto(f"{base}/queues/")
    line = BusinessLine.objects.get(name="llm")
    core = page.locator(f'tr[data-queue-id="{Queue.objects.get(name="llm-core").pk}"]')
    exp = page.locator(f'tr[data-queue-id="{Queue.objects.get(name="llm-experiment").pk}"]')
    totals = page.locator(f'section[data-line-id="{line.pk}"] table').first
    expect(totals.locator(".rp-usage-text")).to_have_text("24 of 14 GPUs (171%), over quota")
    # borrowed: the line's use beyond its own quota, 24 - 14 (#15: not the jobs' start flags)
    expect(totals.locator('[data-field="borrowed_gpus"]')).to_have_text("10")
    expect(totals.locator('[data-field="within_quota_gpus"]')).to_have_text("14")
    expect(exp.locator('[data-field="borrowed_gpus"]')).to_have_text("12")
    expect(exp.locator(".rp-usage-text")).to_have_text("16 of 4 GPUs (400%), over quota")
    expect(core.locator('[data-field="pending_jobs"]')).to_have_text("0")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    frames.wait_subscribed(page, "queues")
    page.evaluate("window.__sameDocument = true")

    waiting = submit_job(demo["researcher"], JobRequest(name="over", queue="llm-core", gpus=8))
    expect(core.locator('[data-field="pending_jobs"]')).to_have_text("1")
    expect(totals.locator('[data-field="pending_gpus"]')).to_have_text("8")
    cancel_job(demo["lead"], experiments[0].pk)
    run_cycle()
    waiting.refresh_from_db()
    assert waiting.state == "pending" and waiting.pending_code == "QUOTA_EXCEEDED"
    expect(exp.locator('[data-field="running_jobs"]')).to_have_text("1")
    expect(totals.locator(".rp-usage-text")).to_have_text("16 of 14 GPUs (114%), over quota")
    expect(totals.locator('[data-field="borrowed_gpus"]')).to_have_text("2")
    expect(exp.locator('[data-field="borrowed_gpus"]')).to_have_text("4")
    assert page.evaluate("window.__sameDocument === true"), "no reload, no navigation"
    screenshot(page, "queues")


def test_the_submit_form_works_from_the_keyboard_and_refuses_bad_input(demo, page, login):
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").focus()
    page.keyboard.type("keyboard-only")
    page.keyboard.press("Tab")  # to the queue select
    expect(page.get_by_label("Queue")).to_be_focused()
    page.get_by_label("Queue").select_option(label="llm-finetune — Fine-tuning, tier finetune")
    page.get_by_label("GPUs in total").fill("0")
    page.get_by_label("GPUs in total").press("Enter")  # implicit submission: "Submit job"
    invalid = page.evaluate("document.getElementById('id_gpus').validity.rangeUnderflow")
    assert invalid, "the browser already refuses 0 GPUs (min=1) before the server does"
    page.get_by_label("GPUs in total").fill("2")
    # node-local: the browser accepts it, the service refuses it
    page.get_by_label("Checkpoint location").fill("/home/me/ckpt")
    page.get_by_label("Checkpoint location").press("Enter")
    summary = page.locator("#error-summary")
    expect(summary).to_be_visible()
    expect(summary).to_be_focused()
    expect(summary).to_contain_text("Checkpoint location: checkpoints must live on shared storage")
    expect(page.get_by_label("Job name")).to_have_value("keyboard-only")
    assert Job.objects.count() == 0
    page.get_by_label("Checkpoint location").fill("nfs://shared/me/ckpt")
    page.get_by_label("Checkpoint location").press("Enter")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    assert Job.objects.get().name == "keyboard-only"


def test_the_estimator_works_without_javascript(demo, browser, portal_server, login):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    base = login("researcher", target=page)
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Model size (parameters)").fill("70B")
    page.get_by_label("Sharding (ZeRO / FSDP)").select_option("3")
    page.get_by_label("Data-parallel degree").fill("8")
    page.get_by_role("button", name="Estimate").click()  # posts the form, job fields empty
    expect(page.locator("#recommendation-text")).to_contain_text("Recommended: 32 × H100 80 GB")
    expect(page.locator("#estimate-result")).to_contain_text("activation checkpointing")
    page.get_by_role("button", name="Fill the job form with this").click()
    expect(page.get_by_label("GPUs in total")).to_have_value("32")
    expect(page.get_by_label("Model size (parameters)")).to_have_value("70B")
    assert Job.objects.count() == 0
    context.close()
