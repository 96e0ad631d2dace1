"""The verdict details of #19 as a person reads them on the job page, in Chromium.

Two waiting jobs are made through the product's own paths, on the demo's mixed layout at
10 nodes (80 GPUs; one H100 node, ``r000-n00``, shared with online inference):

- nine experiments of researcher2's (submitted through the API, ``avoid_inference``,
  borrowing) fill every node without inference, and 20 hourly scheduling cycles on the
  simulator, from a Monday 09:00 to Tuesday 05:00 of cluster time, learn the shared node's
  inference by hour (``Node.inference_profile``: its afternoon peak, its night trough);
- the admin sets the patience knobs in the Django admin (``QuotaPolicy``:
  ``preempt_after_minutes``, ``urgent_preempt_after_minutes``, and ``predictive_patience``
  off: the jobs wait out their patience whatever the predictions);
- the researcher submits through the API an urgent fix (8 GPUs, off the shared node): it
  waits out its patience, so its verdict says ``may_preempt_at``; and a 12-hour sweep
  asking exactly the GPUs the shared node has free at night: inference is predicted to
  want them back before it ends, so it reads INSUFFICIENT_GPUS with
  ``inference_reclaims_gpus`` and ``predicted_end_at`` (and its own ``may_preempt_at``:
  it may reclaim the borrowed GPUs after its patience);
- one more cycle writes the verdicts, and the researcher opens each job's page.

On each page: the facts' labels and words (``scheduling/verdict_text.py``), each time as
the page writes cluster time (``2030-01-08 05:10 UTC``), the count as a count, and every
time said twice (the message and its fact, the estimate on the page, the API and the job
list) said the same; ``readable`` (tests/browser/trust_checks.py) on every page: no raw
epoch, no float dump, no time without its zone. The web server's clock stands still
(SIMULATOR_SPEED=0), so the expected times follow from the one cluster clock: the cycle,
the submission and the page all read ``CLUSTER_NOW``.

The second test is the engine defect this walk found, fixed in the planner: the sweep's
estimated start was the very cycle's time (its reservation counted the GPUs inference
is predicted to take back).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect
from rest_framework.test import APIClient

from quotas.models import QuotaPolicy
from scheduling.cycle import run_cycle
from scheduling.models import Job, Node
from scheduling.sim_services import advance_clock
from tests.browser.conftest import in_thread, wait_in_page
from tests.browser.frames import Frames
from tests.browser.trust_checks import readable, readable_json
from tests.conftest import DEMO_PASSWORD
from tests.drills import BUSY_START, start_busy_cluster, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LEARN_HOURS = 20  # Monday 09:00 -> Tuesday 05:00: the afternoon peak is learned, it is night
CLUSTER_NOW = BUSY_START + timedelta(hours=LEARN_HOURS)
PATIENCE_MIN, URGENT_PATIENCE_MIN = 15, 10  # the admin's knobs (the busy demo's values)
SWEEP_MINUTES = 720  # the sweep runs through the afternoon: inference wants its GPUs back
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")

MAY_PREEMPT = "May preempt from"
ENDS_BY = "It would end by"
RECLAIMS = "Free GPUs online inference will want back before it ends"


def shown(at: datetime) -> str:
    """Cluster time as the page writes it (the header clock, ``|utc``, the verdict)."""
    return at.strftime("%Y-%m-%d %H:%M UTC")


# -- the cluster, made through the product's paths ----------------------------------------------


def learn_a_day() -> None:
    """Fill the nodes without inference with borrowed work, then run hourly cycles on the
    simulator so the shared node's inference is learned hour by hour."""
    people = {u.username: u for u in get_user_model().objects.all()}
    start_busy_cluster()
    other = APIClient()
    other.force_authenticate(people["researcher2"])
    for i in range(Node.objects.filter(inference=False).count()):
        submit(other, name=f"filler-{i}", queue="search-rec-experiment", gpus=8,
               avoid_inference=True, preemptible=True, sim_duration_minutes=3000)  # fmt: skip
    run_cycle()
    for _ in range(LEARN_HOURS):
        advance_clock(people["admin"], 3600)
        run_cycle()


@pytest.fixture
def learned(transactional_db, monkeypatch) -> Node:
    """The 10-node cluster after a day of cycles: every node without inference full, the
    shared node's inference learned; returns the shared node."""
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", nodes=10, nodes_per_rack=2, seed=3, no_workload=True, stdout=None)
    in_thread(learn_a_day)
    fillers = Job.objects.filter(state="running", borrowed=True).count()
    assert fillers == Node.objects.filter(inference=False).count(), "nodes without inference full"
    shared = Node.objects.get(inference=True)
    peaks = shared.inference_profile
    assert max(peaks["before"]) >= shared.inference_gpus + 3, "the afternoon peak is learned"
    return shared


def set_patience(page, base: str) -> None:
    """The admin edits the quota policy in the Django admin, as the model says it is."""
    page.goto(f"{base}/quotas/")  # the quotas page reads the policy (its row, once)
    page.goto(f"{base}/admin/quotas/quotapolicy/")
    page.locator("#result_list tbody a").first.click()
    page.locator("#id_preempt_after_minutes").fill(str(PATIENCE_MIN))
    page.locator("#id_urgent_preempt_after_minutes").fill(str(URGENT_PATIENCE_MIN))
    page.locator("#id_predictive_patience").uncheck()  # on by default (session 29)
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    policy = QuotaPolicy.load()
    assert (policy.preempt_after_minutes, policy.urgent_preempt_after_minutes) == (
        PATIENCE_MIN,
        URGENT_PATIENCE_MIN,
    )
    assert not policy.predictive_patience


def submit_and_plan(free_on_shared: int) -> tuple[int, int]:
    """The researcher's two jobs through the API, then the cycle that explains them."""
    me = APIClient()
    me.force_authenticate(get_user_model().objects.get(username="researcher"))
    urgent = submit(me, name="urgent-fix", queue="llm-urgent", gpus=8, avoid_inference=True,
                    estimated_runtime_minutes=120, sim_duration_minutes=120)  # fmt: skip
    sweep = submit(me, name="night-sweep", queue="llm-experiment", gpus=free_on_shared,
                   estimated_runtime_minutes=SWEEP_MINUTES,
                   sim_duration_minutes=SWEEP_MINUTES)  # fmt: skip
    run_cycle()
    return urgent, sweep


# -- reading a job page -------------------------------------------------------------------------


def read_job(page, base: str, job_id: int) -> dict:
    """A waiting job's page as a person reads it (and the API at the same cycle)."""
    where = f"job #{job_id}"
    response = page.goto(f"{base}/jobs/{job_id}/")
    assert response is not None and response.ok, where
    readable(page, where)
    labels = page.locator("#verdict-details dt").all_inner_texts()
    texts = page.locator("#verdict-details dd").all_inner_texts()
    pairs = list(zip(labels, texts, strict=True))
    api = page.request.get(f"{base}/api/v1/jobs/{job_id}/").json()
    readable_json(api, f"API {where}")
    verdict = api["pending_reason"]
    # the page's rows are the API's (what the live updates and gpuctl show), in order
    assert pairs == [(f["label"], f["text"]) for f in verdict["facts"]], where
    estimate = page.locator("#estimated-start").inner_text().strip()
    assert estimate == verdict["estimated_start_text"], (where, estimate)
    return {
        "facts": dict(pairs),
        "message": page.locator("#verdict-message").inner_text().strip(),
        "code": page.locator("#verdict-code").inner_text().strip(),
        "estimate": estimate,
        "submitted": page.locator('#job-status [data-field="submitted_at"]').inner_text(),
    }


def said_twice(reading: dict, label: str, expected: str) -> None:
    """A time of the verdict: its fact and the message say it, the same, in the page's
    words for cluster time."""
    assert label in reading["facts"], (label, reading["facts"])
    assert reading["facts"][label] == expected, (label, reading["facts"][label], expected)
    assert expected in reading["message"], (expected, reading["message"])


def times_in_message_are_facts(reading: dict) -> None:
    """Every time the message names is one of the facts' (the same time, said the same)."""
    facts_times = {t for text in reading["facts"].values() for t in TIME.findall(text)}
    for t in TIME.findall(reading["message"]):
        assert t in facts_times, (t, reading["facts"], reading["message"])


def listed_estimate(page, base: str, job_id: int, estimate: str) -> None:
    """The job list says the same estimated start as the job page."""
    page.goto(f"{base}/jobs/?state=pending")
    readable(page, "pending job list")
    row = page.locator(f'tr[data-job-id="{job_id}"]')
    why = row.locator("td").nth(7).inner_text()
    if estimate.startswith("unknown"):
        assert "starts ~" not in why, why
    else:
        assert f"starts ~{estimate}" in why, (why, estimate)


# -- the walk -----------------------------------------------------------------------------------


def waiting_jobs(page, login, shared: Node) -> tuple[int, int, int]:
    """The admin's knobs, the researcher's two jobs, the cycle: (urgent, sweep, the GPUs
    the shared node has free)."""
    base = login("admin")
    set_patience(page, base)
    free_on_shared = shared.gpus_total - shared.inference_gpus - shared.residual_gpus
    urgent, sweep = in_thread(submit_and_plan, free_on_shared)
    return urgent, sweep, free_on_shared


def test_waiting_jobs_read_their_patience_and_the_inference_forecast(learned, page, login, browser):
    urgent, sweep, free_on_shared = waiting_jobs(page, login, learned)
    context = browser.new_context()  # the researcher, in a browser of their own
    mine = context.new_page()
    try:
        base = login("researcher", mine)
        # the urgent fix: it waits out its patience before preempting
        fix = read_job(mine, base, urgent)
        assert fix["submitted"] == shown(CLUSTER_NOW), "the one cluster clock"
        may_preempt = shown(CLUSTER_NOW + timedelta(minutes=URGENT_PATIENCE_MIN))
        said_twice(fix, MAY_PREEMPT, may_preempt)
        assert f"by {may_preempt}, it may then preempt" in fix["message"], fix["message"]
        times_in_message_are_facts(fix)
        listed_estimate(mine, base, urgent, fix["estimate"])

        # the sweep: kept off the shared node's GPUs, which inference wants back
        night = read_job(mine, base, sweep)
        assert night["code"] == "INSUFFICIENT_GPUS", night["message"]
        assert night["submitted"] == shown(CLUSTER_NOW)
        said_twice(night, ENDS_BY, shown(CLUSTER_NOW + timedelta(minutes=SWEEP_MINUTES)))
        said_twice(night, MAY_PREEMPT, shown(CLUSTER_NOW + timedelta(minutes=PATIENCE_MIN)))
        reclaims = Job.objects.get(pk=sweep).pending_details["inference_reclaims_gpus"]
        assert isinstance(reclaims, int) and 0 < reclaims <= free_on_shared, reclaims
        assert night["facts"].get(RECLAIMS) == str(reclaims), night["facts"]
        said = f"{reclaims} more are free on nodes shared with online inference"
        assert said in night["message"], night["message"]
        times_in_message_are_facts(night)
        listed_estimate(mine, base, sweep, night["estimate"])
    finally:
        context.close()


def test_a_job_kept_off_the_shared_node_is_not_estimated_to_start_now(learned, page, login):
    _urgent, sweep, _free = waiting_jobs(page, login, learned)
    night = read_job(page, login("researcher"), sweep)
    assert night["code"] == "INSUFFICIENT_GPUS" and RECLAIMS in night["facts"], night
    assert night["estimate"] != shown(CLUSTER_NOW), night["estimate"]


def test_a_viewer_in_tokyo_reads_every_verdict_time_in_jst_also_after_a_live_update(
    learned, page, login, browser
):
    """The verdicts are written in UTC (API, gpuctl); a page shows the viewer's zone, so
    the job page rewrites the verdict's times as it does every other time, on load and on
    every live update (found in session 9: a Tokyo viewer read "Submitted" in JST beside a
    verdict in UTC, and the live update put "Submitted" back in UTC)."""
    urgent, sweep, _free = waiting_jobs(page, login, learned)
    context = browser.new_context(timezone_id="Asia/Tokyo")
    mine = context.new_page()
    frames = Frames(mine)

    def jst(at: datetime) -> str:
        return (at + timedelta(hours=9)).strftime("%Y-%m-%d %H:%M JST")

    def read(job_id: int) -> str:
        readable(mine, f"job #{job_id} in Tokyo")
        text = mine.locator("#verdict").inner_text() + mine.locator("#job-status").inner_text()
        assert " UTC" not in text, text
        return text

    try:
        base = login("researcher", mine)
        mine.goto(f"{base}/jobs/{urgent}/")
        fix = read(urgent)
        assert jst(CLUSTER_NOW + timedelta(minutes=URGENT_PATIENCE_MIN)) in fix, fix
        assert jst(CLUSTER_NOW) in fix, "submitted, in JST"
        mine.goto(f"{base}/jobs/{sweep}/")
        night = read(sweep)
        ends = jst(CLUSTER_NOW + timedelta(minutes=SWEEP_MINUTES))
        assert night.count(ends) >= 2, night  # the message and its row
        # the next cycle rewrites the verdicts: the page refetches the job and re-renders
        # (marked stale first, so the reading below is the live update's); the cycle runs
        # once the page listens (in the full suite it ran before, and no refetch came)
        frames.wait_subscribed(mine, f"job.{sweep}")
        mine.evaluate("document.getElementById('verdict-message').textContent = 'stale'")
        with mine.expect_response(lambda r: f"/api/v1/jobs/{sweep}/" in r.url):
            in_thread(run_cycle)
        wait_in_page(mine, "document.getElementById('verdict-message').textContent !== 'stale'")
        again = read(sweep)
        assert again.count(ends) >= 2 and jst(CLUSTER_NOW) in again, again
        listed = f"{base}/jobs/?state=pending"
        mine.goto(listed)
        readable(mine, "pending job list in Tokyo")
        assert " UTC" not in mine.locator(f'tr[data-job-id="{sweep}"]').inner_text()
    finally:
        context.close()
