"""The submit form in Chromium shows the engine's what-if as you type, and it comes true (#15).

Four 8-GPU core jobs of the lead's hold the 32-GPU test cluster for two hours. Typed into
the form: a 16-GPU core job would wait for GPUs (code, message, estimated start, place in
line, remedy and numbers shown); with the llm line's quota lowered, a 24-GPU one would
wait for quota. Each answer shown is the endpoint's, and the submitted job's next cycle
agrees; once a node is free, a short 8-GPU job would start now, and does, on the nodes
the form named.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from quotas.models import BusinessLine, Queue
from scheduling import services, whatif
from scheduling.cycle import run_cycle as run_one_cycle
from scheduling.models import Job
from scheduling.services import JobRequest
from tests.browser.conftest import in_thread, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def run_cycle():
    return in_thread(run_one_cycle)


@pytest.fixture
def busy(demo):
    """Roomy quotas; all 32 GPUs held by two-hour core jobs nobody may preempt."""
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    jobs = [
        in_thread(
            services.submit_job,
            demo["lead"],
            JobRequest(
                name=f"hold{i}",
                queue="llm-core",
                gpus=8,
                estimated_runtime_minutes=120,
                sim_duration_minutes=600,
            ),
        )  # fmt: skip
        for i in range(4)
    ]
    run_cycle()
    assert Job.objects.filter(state="running").count() == 4
    return jobs


def ask(page, base: str, gpus: str) -> dict:
    """Type a GPU count into the form; wait for the what-if; return the endpoint's answer."""
    with page.expect_response(re.compile(rf"/jobs/feasibility/\?.*gpus={gpus}\b")) as got:
        page.get_by_label("GPUs in total").fill(gpus)
    answer = got.value.json()
    expect(page.locator("#feasibility")).to_have_attribute("data-status", answer["status"])
    expect(page.locator("#feasibility-title")).to_have_text(answer["title"])
    expect(page.locator("#feasibility-text")).to_have_text(answer["message"])
    return answer


def test_the_form_shows_the_engines_verdict_and_the_next_cycle_agrees(demo, busy, page, login):
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    expect(page.locator("#feasibility-text")).to_have_text("Choose a queue and a GPU count to see.")
    page.get_by_label("Job name").fill("wide")
    page.get_by_label("Queue").select_option(label="llm-core — Core training, tier core")

    # Waits for GPUs: code, message, when, place in line, what to do, the numbers.
    wait = ask(page, base, "16")
    assert (wait["status"], wait["code"]) == ("would_wait", "INSUFFICIENT_GPUS")
    expect(page.locator("#feasibility-code")).to_have_text("INSUFFICIENT_GPUS")
    expect(page.locator("#feasibility-start")).to_have_text(wait["estimated_start_text"])
    assert wait["estimated_start_text"].endswith("(in 2 h)")
    expect(page.locator("#feasibility-position")).to_have_text("; place in line: 1")
    expect(page.locator("#feasibility-remedy")).to_have_text(wait["remedy"])
    page.locator("#feasibility-numbers summary").click()
    expect(page.locator("#feasibility-details")).to_contain_text("Matching GPUs left free")
    expect(page.locator("#feasibility-asof")).to_contain_text("cycle #")
    screenshot(page, "submit-whatif")

    # Over quota, once the line's quota is lowered under it (the snapshot is rebuilt).
    BusinessLine.objects.filter(name="llm").update(quota_gpus=40)
    over = ask(page, base, "24")
    assert over["code"] == "QUOTA_EXCEEDED" and over["title"] == "Would wait for quota"
    expect(page.locator("#feasibility-details")).to_contain_text("Quota (GPUs)")

    # Back to 16 GPUs and submitted: the next cycle says what the form said.
    wait = ask(page, base, "16")
    page.get_by_role("button", name="Submit job").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    run_cycle()
    job = Job.objects.get(name="wide")
    assert whatif.verdict_of(job) == (wait["status"], wait["code"])
    assert job.queue_position == wait["position"]

    # One of the lead's jobs ends: an 8-GPU job now starts at once, on the freed node.
    in_thread(services.cancel_job, demo["lead"], busy[0].pk)
    run_cycle()  # the cancelled job's GPUs come back; "wide" still waits for 16
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("narrow")
    page.get_by_label("Queue").select_option(label="llm-finetune — Fine-tuning, tier finetune")
    page.get_by_label("Your runtime estimate (minutes)").fill("30")
    starts = ask(page, base, "8")
    assert starts["status"] == "fits_now" and starts["title"] == "Would start now"
    expect(page.locator("#feasibility-code")).to_be_hidden()
    expect(page.locator("#feasibility-start")).to_have_text("now")
    page.get_by_role("button", name="Submit job").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    run_cycle()
    narrow = Job.objects.get(name="narrow")
    assert narrow.state == "running"
    assert set(narrow.allocations.values_list("node__name", flat=True)) == set(starts["nodes"])


def test_the_answers_cycle_is_named_in_the_viewers_zone(demo, busy, page, login):
    """Page walk: in JST, the what-if's estimated start read "2026-12-08 00:11 JST" and the
    line under it "as its cycle #418 left it (2026-12-07 14:24:34 UTC, cluster time)"."""
    from core.models import Profile

    in_thread(
        lambda: Profile.objects.filter(user=demo["researcher"]).update(time_zone="Asia/Tokyo")
    )
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("wide")
    page.get_by_label("Queue").select_option(label="llm-core — Core training, tier core")
    answer = ask(page, base, "16")
    assert answer["estimated_start_text"].endswith("(in 2 h)")
    expect(page.locator("#feasibility-start")).to_contain_text(" JST (in 2 h)")
    expect(page.locator("#feasibility-asof")).to_contain_text(
        re.compile(r"left it \(\d{4}-\d\d-\d\d \d\d:\d\d JST, cluster time\)")
    )


def test_naming_jobs_to_start_after_changes_the_answer_as_you_type(demo, busy, page, login):
    """The "Start after jobs" field is part of the question: naming a running job turns the
    answer into "would wait for other jobs to succeed", with that job's predicted end."""
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("eval")
    page.get_by_label("Queue").select_option(label="llm-core — Core training, tier core")
    ask(page, base, "8")
    held = busy[0]
    with page.expect_response(re.compile(rf"/jobs/feasibility/\?.*after={held.pk}\b")) as got:
        page.get_by_label("Start after jobs").fill(str(held.pk))
        page.get_by_label("Start after jobs").blur()
    answer = got.value.json()
    assert (answer["status"], answer["code"]) == ("would_wait", "DEPENDENCY")
    expect(page.locator("#feasibility-title")).to_have_text("Would wait for other jobs to succeed")
    expect(page.locator("#feasibility-text")).to_have_text(answer["message"])
    assert f"job {held.pk} (hold0)" in answer["message"] and "running" in answer["message"]
    expect(page.locator("#feasibility-start")).to_have_text(answer["estimated_start_text"])
    assert "(in 2 h" in answer["estimated_start_text"]  # its end, to the minute up


def test_an_array_spec_asks_for_its_tasks_together_and_the_next_cycle_agrees(
    demo, busy, page, login
):
    """The "Array" field is part of the question: with one node freed, a 0-3 sweep of
    4-GPU tasks reads "Would start 2 of its 4 tasks now", task 2 waiting for GPUs; submitted,
    the next cycle starts two of its tasks."""
    in_thread(services.cancel_job, demo["lead"], busy[0].pk)
    run_cycle()  # one node's 8 GPUs free
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("sweep")
    page.get_by_label("Queue").select_option(label="llm-core — Core training, tier core")
    ask(page, base, "4")
    with page.expect_response(re.compile(r"/jobs/feasibility/\?.*array=0-3\b")) as got:
        page.get_by_label("Array", exact=True).fill("0-3")
        page.get_by_label("Array", exact=True).blur()
    answer = got.value.json()
    assert answer["tasks"] == {"total": 4, "start_now": 2, "at_once": None}
    expect(page.locator("#feasibility-title")).to_have_text("Would start 2 of its 4 tasks now")
    expect(page.locator("#feasibility-text")).to_have_text(answer["message"])
    assert answer["message"].startswith("2 of its 4 tasks would start now; task 2 would wait: ")
    page.get_by_role("button", name="Submit job").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/arrays/\d+/$"))
    run_cycle()
    assert Job.objects.filter(name="sweep", state="running").count() == 2
