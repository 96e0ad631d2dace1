"""The done-when walk of #15: each role's flows in Chromium on a busy cluster.

The demo seed on its mixed 64-node layout (512 GPUs) with its workload generator runs a
few hours of cluster time of arrivals, scheduling cycles and metrics rollups; the web
server's clock stands still (SIMULATOR_SPEED=0), so every page of a walk is read at one
cycle unless the test moves it. On every page visited, and on the live parts after
they update, ``readable`` asserts no raw epoch or float dump and no time without its
zone (tests/browser/trust_checks.py). Each walk also checks what its role reads twice:
a job's timeline is in time order, the same number agrees on every surface that shows
it (pages and the API, read at the same cycle), destructive actions ask first, errors
are portal pages with a way back, and the node and line pages follow changes live.

Confirmations, live pages and error pages have their own focused tests
(test_confirm_flow.py, test_live_pages.py, tests/portal/test_error_pages.py); here they
are walked on the busy cluster, with the readability checks on every page. The walks
also take the docs' screenshots of the busy cluster (`make screenshots`).
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect
from rest_framework.test import APIClient

from demo.workload import generate
from monitoring.rollup import rollup
from quotas.models import BusinessLine, Queue, QuotaRequest
from quotas.services import QuotaRequestInput, approve_quota_request, create_quota_request
from quotas.tasks import quota_activation
from scheduling import verdict_text
from scheduling.cycle import run_cycle
from scheduling.engine import PolicyConfig
from scheduling.engine.explain import when
from scheduling.models import Job, Node
from scheduling.nodes.services import drain_node
from scheduling.sim_services import advance_clock
from tests.browser.conftest import draw_dashboard, in_thread, screenshot
from tests.browser.test_live_pages import LIVE_MS, go_live, same_document
from tests.browser.test_whatif_form import ask
from tests.browser.trust_checks import readable, readable_json
from tests.conftest import DEMO_PASSWORD
from tests.drills import start_busy_cluster, submit
from tests.engine.helpers import NOW, node, pjob, rjob, run, snap

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOURS, STEP_S = 3, 600  # cluster time of the busy history, one cycle + sample per step
NUMBERS = ("borrowed_gpus", "pending_gpus", "pending_jobs", "running_jobs")


# -- the busy cluster ---------------------------------------------------------------------------


def make_busy() -> dict:
    """Seed, then HOURS of workload, cycles and rollups; the researcher's own jobs: one
    running from the start (urgent tier, checkpointed hourly), one too big to start now."""
    people = {u.username: u for u in get_user_model().objects.all()}
    admin = people["admin"]
    start_busy_cluster()
    me = APIClient()
    me.force_authenticate(people["researcher"])
    running = submit(me, name="pretrain-7b", queue="llm-urgent", gpus=8,
                     sim_duration_minutes=6000, checkpoint_interval_minutes=60)  # fmt: skip
    for _ in range(HOURS * 3600 // STEP_S):
        generate()
        run_cycle()
        rollup()
        quota_activation()  # the beat's usage samples, as `make run` takes them
        advance_clock(admin, STEP_S)
    waiting = submit(me, name="sweep-64", queue="llm-experiment", gpus=64,
                     sim_duration_minutes=600)  # fmt: skip
    # and a burst from another researcher, so work waits whatever the random arrivals of
    # these cluster hours made of the 512 GPUs (the walk reads many waiting verdicts)
    other = APIClient()
    other.force_authenticate(people["researcher2"])
    for i in range(24):
        queue = ("search-rec-core", "search-rec-finetune", "search-rec-experiment")[i % 3]
        submit(other, name=f"burst-{i}", queue=queue, gpus=16, gpus_per_node=8,
               sim_duration_minutes=300)  # fmt: skip
    # one other line given the whole cluster as quota: its jobs wait for GPUs, priority or
    # topology rather than quota, so the walk reads more than one kind of verdict
    roomy = BusinessLine.objects.exclude(name="llm").order_by("name").first()
    BusinessLine.objects.filter(pk=roomy.pk).update(quota_gpus=512)
    Queue.objects.filter(business_line=roomy).update(quota_gpus=None)
    generate()
    run_cycle()  # the cycle every page is read at
    rollup()
    return {"running": running, "waiting": waiting}


@pytest.fixture
def busy(transactional_db, monkeypatch) -> dict:
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", nodes=64, nodes_per_rack=8, seed=3, stdout=None)
    jobs = in_thread(make_busy)
    assert Job.objects.filter(state="pending").count() > 20, "a busy cluster: work waits"
    assert Job.objects.filter(state="running").count() > 20, "a busy cluster: work runs"
    people = {u.username: u for u in get_user_model().objects.all()}
    return {**jobs, "users": people}


# -- reading surfaces ---------------------------------------------------------------------------


def visit(page, url: str, where: str | None = None) -> str:
    response = page.goto(url)
    assert response is not None and response.status < 400, f"{url}: {response and response.status}"
    return readable(page, where or url)


def api_get(page, base: str, path: str) -> dict:
    """The API as the signed-in browser reads it (its session), at the same cycle."""
    response = page.request.get(f"{base}/api/v1/{path}")
    assert response.ok, f"{path}: {response.status}"
    return response.json()


def api_rows(page, base: str, path: str) -> dict[str, dict]:
    return {r["name"]: r for r in api_get(page, base, f"{path}/?limit=1000")["results"]}


def cell(row, field: str) -> str:
    return row.locator(f'td[data-field="{field}"]').inner_text().strip()


def first_int(text: str) -> int:
    return int(re.match(r"\s*(\d+)", text).group(1))


def queues_numbers(page) -> dict[str, dict[str, int]]:
    """/queues/: each queue's row, as numbers."""
    out = {}
    for row in page.locator("tr[data-queue-id]").all():
        name = row.locator("th").first.inner_text().strip()
        out[name] = {"used_gpus": first_int(cell(row, "used"))}
        out[name].update({k: int(cell(row, k)) for k in NUMBERS})
        out[name]["eviction_ratio"] = cell(row, "eviction_ratio")
    return out


def line_numbers(page) -> dict[str, dict[str, int]]:
    """A line page's contract table: the line's row and each queue's, as numbers."""
    out = {}
    for row in page.locator("#contract tr[data-line], #contract tr[data-queue]").all():
        name = row.get_attribute("data-queue") or "line"
        out[name] = {k: int(cell(row, k)) for k in ("used_gpus",) + NUMBERS}
        ratio = row.locator('td[data-field="eviction_ratio"]')
        if ratio.count():
            out[name]["eviction_ratio"] = ratio.inner_text().strip()
    return out


def timeline_in_order(page, where: str) -> list[datetime]:
    """A job page's timeline: its times (machine-readable and shown) never go back."""
    stamps = [
        datetime.fromisoformat(t)
        for t in page.locator("#timeline time").evaluate_all("ts => ts.map(t => t.dateTime)")
    ]
    assert stamps == sorted(stamps), f"{where}: timeline out of order: {stamps}"
    shown = page.locator("#timeline time").all_inner_texts()
    assert shown == sorted(shown), f"{where}: timeline shown out of order: {shown}"
    return stamps


def estimate_text(api_job: dict) -> str | None:
    value = api_job.get("estimated_start")
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")


def predicted_times(verdict: dict, facts: list[tuple[str, str]]) -> list[str]:
    """The times a verdict's message and remedy name that are not among its facts: a time
    the verdict also lists as a fact (when a patient job may start preempting, when shared
    inference wants its GPUs back) is a stated deadline, not a predicted start."""
    said = verdict["message"] + " " + (verdict["remedy"] or "")
    for _label, text in facts:
        if re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", text):
            said = said.replace(text, "")
    return re.findall(r"\d\d:\d\d UTC", said)


def error_page(page, url: str, status: int, where: str) -> None:
    """A styled portal error page: the layout, the reason, a way back; no debug page."""
    response = page.goto(url)
    assert response.status == status, f"{url}: {response.status}"
    text = readable(page, where)
    for words in ("Using the URLconf", "Django tried these URL patterns", "Traceback"):
        assert words not in text, f"{where}: {words}"
    expect(page.locator("header.topbar")).to_be_visible()
    expect(page.locator("#error-h")).to_be_visible()
    back = page.get_by_role("link", name="Home: the cluster at a glance")
    expect(back).to_be_visible()


# -- the walks ----------------------------------------------------------------------------------


def test_a_researcher_walks_a_busy_cluster(busy, page, login):
    base = login("researcher")
    visit(page, f"{base}/", "home")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    screenshot(page, "home")

    # the waiting job: one estimated start on the job page, the API and the job list
    waiting = busy["waiting"]
    text = visit(page, f"{base}/jobs/{waiting}/", "waiting job")
    api_job = api_get(page, base, f"jobs/{waiting}/")
    readable_json(api_job, "API waiting job")
    assert api_job["state"] == "pending" and api_job["pending_reason"], api_job
    shown = page.locator("#estimated-start").inner_text().strip()
    expected = estimate_text(api_job)
    if expected is None:
        assert shown.startswith("unknown"), shown
    else:
        assert shown == expected, (shown, expected)
    verdict = api_job["pending_reason"]
    assert page.locator("#verdict-code").inner_text().strip() == verdict["code"]
    assert page.locator("#verdict-message").inner_text().strip() == verdict["message"]
    assert page.locator("#verdict-remedy").inner_text().strip() == verdict["remedy"]
    assert verdict["estimated_start_text"] == shown, (verdict["estimated_start_text"], shown)
    assert "Estimated start" in text
    timeline_in_order(page, "waiting job")
    screenshot(page, "job-detail")

    visit(page, f"{base}/jobs/", "job list")
    row = page.locator("tr", has=page.locator(f'a[href="/jobs/{waiting}/"]'))
    why = row.locator("td").nth(7).inner_text()
    assert verdict["code"] in why, why
    if expected is None:
        assert "starts ~" not in why, why
    else:
        assert f"starts ~{expected}" in why, why

    # the running job: timeline in order; cancel asks first with the GPU-hours at risk
    running = busy["running"]
    visit(page, f"{base}/jobs/{running}/", "running job")
    expect(page.locator("#job-state")).to_have_text("running")
    assert len(timeline_in_order(page, "running job")) >= 2
    page.get_by_role("button", name="Cancel this job").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Cancel job #{running}")
    readable(page, "cancel confirmation")
    expect(page.locator("#confirm-figures")).to_contain_text(re.compile(r"\d+\.\d GPU-hours"))
    assert Job.objects.get(pk=running).state == "running", "the first step changes nothing"
    page.locator("#confirm-button").click()
    expect(page.locator("#job-state")).to_have_text("cancelled")
    readable(page, "cancelled job")
    timeline_in_order(page, "cancelled job")

    visit(page, f"{base}/jobs/new/", "submit form")
    screenshot(page, "submit")
    # the form's what-if on the busy cluster reads well too
    page.get_by_label("Job name").fill("wide")
    page.get_by_label("Queue").select_option(label="llm-core — Core training, tier core")
    answer = ask(page, base, "16")
    readable_json(answer, "what-if answer")
    page.locator("#feasibility-numbers summary").click()
    readable(page, "submit form with its what-if")
    screenshot(page, "submit-whatif")

    # the queues: /queues/, the line page and the API agree at this cycle
    visit(page, f"{base}/queues/", "/queues/")
    on_queues = queues_numbers(page)
    screenshot(page, "queues")
    api_queues = api_rows(page, base, "queues")
    visit(page, f"{base}/quotas/lines/llm/", "line page")
    on_line = line_numbers(page)
    for name, row in on_line.items():
        if name == "line":
            continue
        for k in ("used_gpus",) + NUMBERS:
            assert row[k] == on_queues[name][k] == api_queues[name][k], (name, k)
        assert (
            row.get("eviction_ratio", on_queues[name]["eviction_ratio"])
            == (on_queues[name]["eviction_ratio"])
        ), name
    api_line = api_rows(page, base, "business-lines")["llm"]
    for k in ("used_gpus",) + NUMBERS:
        assert on_line["line"][k] == api_line[k], ("llm", k)

    # styled errors: an on-call page (403) and a page that does not exist (404)
    error_page(page, f"{base}/oncall/", 403, "403 for a researcher")
    error_page(page, f"{base}/jobs/999999/", 404, "404 job")
    error_page(page, f"{base}/no-such-page/", 404, "404 page")


def test_a_team_lead_walks_a_busy_cluster(busy, page, login):
    base = login("lead")
    visit(page, f"{base}/", "home")
    visit(page, f"{base}/quotas/", "quotas")
    visit(page, f"{base}/jobs/", "job list")
    visit(page, f"{base}/queues/", "/queues/")
    on_queues = queues_numbers(page)

    # the request form, then the request's page with its impact
    visit(page, f"{base}/quotas/requests/new/", "request form")
    before = BusinessLine.objects.get(name="llm").quota_gpus
    request = in_thread(
        lambda: create_quota_request(
            busy["users"]["lead"],
            QuotaRequestInput(business_line="llm", quota_gpus=before + 16, reason="a bigger run"),
        )  # fmt: skip
    )
    visit(page, f"{base}/quotas/requests/{request.pk}/", "request page")
    screenshot(page, "quota-request")
    # its impact reads the line's numbers of /queues/ (the sum of its queues' rows)
    llm = {k: sum(r[k] for n, r in on_queues.items() if n.startswith("llm-"))
           for k in ("used_gpus", "pending_gpus")}  # fmt: skip
    now = page.locator('tr[data-when="line llm now"]')
    assert int(cell(now, "used_gpus")) == llm["used_gpus"], llm
    expect(page.locator("#recent-use")).to_contain_text(f"Pending now: {llm['pending_gpus']} GPUs")
    expect(page.locator("#recent-use")).to_contain_text(
        re.compile(r"\d+ samples? in the last \d+ days?\)")
    )
    visit(page, f"{base}/quotas/requests/", "request list")

    # the line page follows an approval without a reload, at the numbers of /queues/
    go_live(page, f"{base}/quotas/lines/llm/")
    text = readable(page, "line page")
    on_line = line_numbers(page)
    for name, row in on_line.items():
        if name != "line":
            for k in ("used_gpus",) + NUMBERS:
                assert row[k] == on_queues[name][k], (name, k)
    assert "Eviction ratio, last 72 h" in text
    quota_cell = page.locator("#contract tbody tr").first.locator("td").first
    expect(quota_cell).to_have_text(str(before))
    in_thread(approve_quota_request, busy["users"]["admin"], request.pk, "fine")
    expect(quota_cell).to_have_text(str(before + 16), timeout=LIVE_MS)
    expect(page.locator("#history")).to_contain_text(f"request #{request.pk}")
    assert same_document(page), "the line page changed without a reload"
    readable(page, "line page after the approval")

    visit(page, f"{base}/quotas/requests/{request.pk}/", "approved request")
    expect(page.locator("main")).to_contain_text("approved")
    error_page(page, f"{base}/oncall/nodes/n0000/", 403, "403 on-call page for a lead")


def test_an_oncall_engineer_walks_a_busy_cluster(busy, page, login):
    base = login("oncall")
    visit(page, f"{base}/oncall/", "on-call")
    screenshot(page, "oncall")
    visit(page, f"{base}/oncall/rack-map/", "rack map")
    screenshot(page, "rack-map")
    error_page(page, f"{base}/dashboard/", 403, "403 dashboard for on-call")

    # the busiest node: a drain asks first, naming the jobs it hits
    node = (
        Node.objects.filter(state="ready", health="ok", allocations__isnull=False)
        .distinct()
        .order_by("name")
        .first()
    )
    hit = set(Job.objects.filter(allocations__node=node).values_list("pk", flat=True))
    assert hit
    visit(page, f"{base}/oncall/nodes/{node.name}/", "node page")
    page.get_by_label(re.compile("^Reason")).fill("fan failure")
    page.get_by_role("button", name="Drain", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Drain node {node.name}?")
    readable(page, "drain confirmation")
    screenshot(page, "confirm-drain")
    for job_id in hit:
        expect(page.locator("#confirm-jobs")).to_contain_text(f"#{job_id} ")
    expect(page.locator("#confirm-figures")).to_contain_text(re.compile(r"\d+\.\d GPU-hours"))
    assert Node.objects.get(pk=node.pk).state == "ready", "the first step changes nothing"
    page.get_by_role("link", name="No, go back").click()
    expect(page.locator("#node-state")).to_have_text("ready")

    # a drain made through the service: the node page follows without a reload
    go_live(page, f"{base}/oncall/nodes/{node.name}/")
    used = int(page.locator("#node-status").get_attribute("data-used"))
    assert used > 0
    in_thread(drain_node, busy["users"]["admin"], node.name, "disk errors: move the work off")
    expect(page.locator("#node-state")).to_have_text("draining", timeout=LIVE_MS)
    readable(page, "node page after the drain")
    screenshot(page, "node-detail")
    in_thread(run_cycle)  # asks the jobs to checkpoint and move
    in_thread(advance_clock, busy["users"]["admin"], 900)
    in_thread(run_cycle)
    expect(page.locator("#node-gpus")).to_contain_text(
        re.compile(r"^0 used, 8 idle, out of the pool \(draining\)"), timeout=LIVE_MS
    )
    expect(page.locator("#node-jobs")).to_contain_text("No job holds a GPU here.")
    assert same_document(page), "the node page changed without a reload"
    readable(page, "node page after the jobs moved")
    expect(page.locator("#node-history")).to_contain_text("Drain started")


def test_an_admin_walks_a_busy_cluster(busy, page, login):
    base = login("admin")
    visit(page, f"{base}/", "home")
    summary = api_get(page, base, "metrics/summary/")
    for field in ("gpus_total", "gpus_healthy", "gpus_allocated"):
        shown = int(page.locator(f"#{field.replace('_', '-')}").inner_text())
        assert shown == summary[field], (field, shown, summary[field])

    # the dashboard: the card and its caption are one reading, equal to the API's
    draw_dashboard(page, f"{base}/dashboard/")
    readable(page, "dashboard")
    card = page.locator("#tile-utilization").inner_text().strip()
    caption = page.locator("#summary-utilization .summary-text").inner_text()
    assert caption.startswith(f"Utilization {card} now ("), (card, caption)
    summary = api_get(page, base, "metrics/summary/")
    assert card == f"{summary['utilization']:.1%}", (card, summary["utilization"])
    allocated = page.locator("#tile-gpus_allocated").inner_text()
    assert allocated == f"{summary['gpus_allocated_healthy']:,}"
    assert (
        page.locator("#tile-pending_jobs").inner_text()
        == f"{sum(summary['pending_by_reason'].values()):,}"
    )
    screenshot(page, "dashboard")
    for window in ("24h", "7d"):
        draw_dashboard(page, f"{base}/dashboard/?window={window}")
        readable(page, f"dashboard {window}")

    # every queue's numbers: /queues/, its line's page and the API
    visit(page, f"{base}/queues/", "/queues/")
    on_queues = queues_numbers(page)
    api_queues = api_rows(page, base, "queues")
    for name, row in on_queues.items():
        for k in ("used_gpus",) + NUMBERS:
            assert row[k] == api_queues[name][k], (name, k)
    for line in BusinessLine.objects.order_by("name"):
        visit(page, f"{base}/quotas/lines/{line.name}/", f"line {line.name}")
        for name, row in line_numbers(page).items():
            if name != "line":
                for k in ("used_gpus",) + NUMBERS:
                    assert row[k] == on_queues[name][k], (line.name, name, k)

    # every waiting job's verdict reads well in the API; one job per verdict code: the
    # page, the API and the job list say the same verdict and the same estimated start
    pending = api_get(page, base, "jobs/?state=pending&limit=1000")["results"]
    assert len(pending) > 20
    readable_json(pending, "API pending jobs")
    one_per_code = {
        code: api_get(page, base, f"jobs/{pk}/")
        for code, pk in Job.objects.filter(state="pending")
        .exclude(pending_code="")
        .order_by("-pk")
        .values_list("pending_code", "pk")
    }  # one job per verdict code (the oldest waiting)
    assert len(one_per_code) >= 2, sorted(one_per_code)
    for code, row in sorted(one_per_code.items()):
        where = f"a waiting job ({code})"
        visit(page, f"{base}/jobs/{row['id']}/", where)
        timeline_in_order(page, where)
        api_job = api_get(page, base, f"jobs/{row['id']}/")
        readable_json(api_job, f"API {where}")
        assert page.locator("#verdict-code").inner_text().strip() == code
        assert api_job["pending_reason"]["code"] == code, "the code holds at one cycle"
        shown = page.locator("#estimated-start").inner_text().strip()
        assert shown == api_job["pending_reason"]["estimated_start_text"], (where, shown)
        assert estimate_text(api_job) in (None, shown), (where, shown)
        verdict = api_job["pending_reason"]
        labels = page.locator("#verdict-details dt").all_inner_texts()
        texts = page.locator("#verdict-details dd").all_inner_texts()
        facts = list(zip(labels, texts, strict=True))
        assert facts == [(f["label"], f["text"]) for f in verdict["facts"]], where
        if shown.startswith("unknown"):  # no time predicted elsewhere on the same verdict
            assert not predicted_times(verdict, facts), (where, verdict["message"])
        listed = next((r for r in pending if r["id"] == row["id"]), None)
        assert listed is None or estimate_text(listed) == estimate_text(api_job), where
    preempted = Job.objects.filter(preemption_count__gt=0).order_by("pk").first()
    if preempted is not None:
        visit(page, f"{base}/jobs/{preempted.pk}/", "a preempted job")
        timeline_in_order(page, "a preempted job")

    # a quota request rejected in two steps
    lead = busy["users"]["lead"]
    more = BusinessLine.objects.get(name="llm").quota_gpus + 32
    request = in_thread(
        lambda: create_quota_request(
            lead, QuotaRequestInput(business_line="llm", quota_gpus=more, reason="a bigger run")
        )  # fmt: skip
    )
    visit(page, f"{base}/quotas/requests/{request.pk}/", "request to decide")
    screenshot(page, "quota-approval")
    page.locator("#reject-form textarea").fill("not this quarter")
    page.locator("#reject-form").get_by_role("button", name="Reject").click()
    expect(page.locator("#confirm-h")).to_be_visible()
    readable(page, "reject confirmation")
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.PENDING, "the first step changes nothing"
    page.locator("#confirm-button").click()
    expect(page.get_by_text("rejected", exact=False).first).to_be_visible()
    readable(page, "rejected request")

    for url in ("/audit/", "/oncall/", "/quotas/requests/"):
        visit(page, f"{base}{url}", url)

    # the job list of waiting jobs: each row's verdict and estimated start are the API's
    visit(page, f"{base}/jobs/?state=pending", "pending job list")
    by_id = {r["id"]: r for r in pending}
    compared = 0
    for tr in page.locator("tbody tr").all():
        link = tr.locator('a[href^="/jobs/"]')
        if not link.count():
            continue
        job_id = int(re.search(r"/jobs/(\d+)/", link.get_attribute("href")).group(1))
        if job_id not in by_id or not by_id[job_id]["pending_reason"]:
            continue
        why = tr.locator("td").nth(7).inner_text()
        assert by_id[job_id]["pending_reason"]["code"] in why, (job_id, why)
        expected = estimate_text(by_id[job_id])
        assert (f"starts ~{expected}" in why) if expected else ("starts ~" not in why), why
        compared += 1
    assert compared >= 10, compared
    error_page(page, f"{base}/quotas/lines/no-such-line/", 404, "404 line")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "html",
    [
        "<p>Quota room at 1796085057.451252</p>",
        "<p>Quota room at 1796085057</p>",
        "<dd>predicted 1.79612e+09</dd>",
        "<p>eviction ratio 0.8423117</p>",
        "<ol><li>22:30 cancelled</li><li>00:32 started</li></ol>",
        "<table><thead><tr><th>When</th></tr></thead><tbody><tr><td>2026-12-01 03:10</td>"
        "</tr></tbody></table>",
    ],
)
def test_the_checks_catch_what_issue_15_saw(page, html):
    """The walk's checks are not vacuous: each defect seen in #15 fails them."""
    page.set_content(f"<body><main>{html}</main></body>")
    with pytest.raises(AssertionError):
        readable(page, "sample")


@pytest.mark.django_db
def test_the_checks_pass_times_with_their_zone_and_relative_ones(page):
    page.set_content(
        "<body><p>Started 2026-12-01 00:30 UTC</p><p>updated 5 min ago</p><table><thead><tr>"
        "<th>Submitted (UTC)</th></tr></thead><tbody><tr><td>2026-12-01 03:10</td></tr>"
        "</tbody></table><p>82.7% of 512 GPUs, job #1400, 0.25 h, 127.0.0.1</p></body>"
    )
    readable(page, "sample")


def test_a_patient_jobs_deadline_is_no_predicted_time():
    """An urgent job may be told when it may start preempting (the admin walk met one with
    no estimated start in CI): that deadline is a fact, any other time in the words is not."""
    running = [rjob(1, {"n0": range(8)}, tier="experiment")]
    urgent = pjob(9, 8, tier="urgent", submitted_at=NOW - 600)
    patient = PolicyConfig(tier_preempt_after_s=1800)
    verdict = run(snap([node("n0")], [urgent], running, policy=patient)).verdicts[9]
    said = {"message": verdict.message, "remedy": verdict.remedy}
    facts = [(f["label"], f["text"]) for f in verdict_text.facts(verdict.details)]
    assert ("May preempt from", when(NOW + 1200)) in facts and "may then preempt" in said["message"]
    assert predicted_times(said, facts) == []
    said["remedy"] += " Predicted to start by 2031-01-01 03:17 UTC."
    assert predicted_times(said, facts) == ["03:17 UTC"]
