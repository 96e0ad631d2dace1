"""On-call and dashboard in a real browser (Chromium via Playwright, the portal's web server, websockets).

- An on-call engineer cordons a node from its page; the rack map open in a second browser
  changes live (no reload) within seconds.
- A fault injected from the node page plus a scheduling cycle raises an alert that
  appears live on the console, and it can be acknowledged there.
- The dashboard draws its Plotly charts (served locally) and redraws them on live events.
"""

import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from monitoring.models import Alert
from monitoring.rollup import rollup
from quotas.models import BusinessLine, Queue
from scheduling.models import Node
from tests.browser.conftest import in_thread, screenshot
from tests.drills import advance, cycle, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_S = 5_000  # "within a couple of seconds", with slack for a loaded CI machine


def populate(api) -> None:
    call_command("seed_demo", nodes=64, nodes_per_rack=16, uniform=True, no_workload=True,
                 stdout=None)  # fmt: skip
    BusinessLine.objects.update(quota_gpus=200, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    me, other = api("researcher"), api("researcher2")
    for i in range(10):
        submit(me, name=f"core{i}", queue="llm-core", gpus=16 if i < 3 else 8,
               sim_duration_minutes=600)  # fmt: skip
    for i in range(14):
        submit(me, name=f"exp{i}", queue="llm-experiment", gpus=4 if i % 2 else 2,
               sim_duration_minutes=30 + 20 * i)  # fmt: skip
        submit(other, name=f"rec{i}", queue="search-rec-finetune", gpus=4,
               sim_duration_minutes=40 + 15 * i)  # fmt: skip
    cycle(api("admin"))


@pytest.fixture
def cluster(demo, api):
    """64 uniform nodes in 4 racks, some of them running jobs."""
    in_thread(populate, api)
    return api


def history(api, steps: int = 12) -> None:
    """A working hour of cluster time: cycles, two urgent waves (evictions), a sample each step."""
    admin, lead, me = api("admin"), api("lead"), api("researcher")
    for i in range(6):  # a backlog: the LLM line is at its 200-GPU quota
        submit(me, name=f"wait{i}", queue="llm-core", gpus=32, sim_duration_minutes=600)
    for step in range(steps):
        if step in (4, 8):
            submit(lead, name=f"hotfix{step}", queue="llm-urgent", gpus=64,
                   sim_duration_minutes=20)  # fmt: skip
        cycle(admin)
        advance(admin, 300)
        rollup()


def go_live(page, url: str) -> None:
    page.goto(url)
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    # the subscriptions are sent on open; give the server a moment to join the groups
    page.wait_for_timeout(500)
    page.evaluate("window.__sameDocument = true")


def still_same_document(page) -> bool:
    return page.evaluate("window.__sameDocument === true")


def busy_node() -> Node:
    return (
        Node.objects.filter(allocations__job__state="running", state="ready")
        .order_by("name")
        .first()
    )


def test_cordoning_a_node_changes_the_rack_map_live_in_a_second_browser(
    cluster, page, login, browser
):
    base = login("oncall")
    go_live(page, f"{base}/oncall/rack-map/")
    node = busy_node()
    cell = page.locator(f'#rack-map a[data-n="{node.name}"]')
    expect(cell).not_to_have_text("C")
    used = Node.objects.get(pk=node.pk).allocations.count()

    second = browser.new_page()
    login("oncall", target=second)
    second.goto(f"{base}/oncall/nodes/{node.name}/")
    blast = second.locator("#blast-radius")
    expect(blast).to_contain_text(re.compile(r"\d+ jobs? in \d+ queues?"))
    job = node.allocations.select_related("job").first().job
    expect(blast).to_contain_text(f"#{job.pk} {job.name}")
    screenshot(second, "node-detail")

    second.get_by_label(re.compile("^Reason")).fill("ECC warnings in dmesg; hardware check")
    second.get_by_role("button", name="Cordon", exact=True).click()
    # the second step (tests/browser/test_confirm_flow.py walks it in full)
    second.get_by_role("button", name=f"Yes, cordon {node.name}").click()
    expect(second.locator(".messages")).to_contain_text(f"{node.name} cordoned")
    expect(second.locator("#node-state")).to_have_text("cordoned")

    expect(cell).to_have_text("C", timeout=LIVE_S)
    expect(cell).to_have_attribute(
        "aria-label", f"{node.name}: cordoned, {used}/8 GPUs used", timeout=LIVE_S
    )
    expect(cell).to_have_class(re.compile(r"\bk-cordoned\b"))
    expect(page.locator('.legend-count[data-status="cordoned"]')).to_have_text("1")
    assert still_same_document(page), "the rack map changed without a reload"
    screenshot(page, "rack-map")
    second.close()


def test_maintenance_scheduled_marks_the_node_on_the_rack_map_live(cluster, page, login, demo):
    """Scheduled on the node page of another browser (here: the service, from a worker
    thread, as the page's form does), the window outlines the node's cell with dashes on
    the open map, its sentence says when (the viewer's zone: UTC) and why, and the legend
    counts it; the cell keeps its glyph and colour (the node is still in service)."""
    from core import clock
    from scheduling.nodes.maintenance import create_window

    base = login("oncall")
    go_live(page, f"{base}/oncall/rack-map/")
    node = busy_node()
    cell = page.locator(f'#rack-map a[data-n="{node.name}"]')
    glyph = cell.inner_text()
    expect(page.locator("#rm-maintenance-soon")).to_have_text("0")
    start = clock.now().replace(second=0, microsecond=0) + timedelta(hours=3)
    in_thread(lambda: create_window(demo["oncall"], nodes=[node.name],
                                    starts_at=start.isoformat(), reason="PDU swap"))  # fmt: skip
    expect(cell).to_have_class(re.compile(r"\bm-soon\b"), timeout=LIVE_S)
    label = cell.get_attribute("aria-label")
    assert label.endswith(f"; maintenance from {start:%Y-%m-%d %H:%M} UTC: PDU swap"), label
    assert cell.inner_text() == glyph, "still in service: the same glyph"
    # outlined solid for a few seconds as changed, then dashed for as long as it stands
    expect(cell).not_to_have_class(re.compile(r"\bchanged\b"), timeout=LIVE_S + 4_000)
    style = cell.evaluate("el => getComputedStyle(el).outlineStyle")
    assert style == "dashed"
    expect(page.locator("#rm-maintenance-soon")).to_have_text("1")
    assert still_same_document(page)


def test_a_fault_and_a_cycle_raise_an_alert_live_and_it_is_acknowledged(
    cluster, page, login, browser
):
    base = login("oncall")
    go_live(page, f"{base}/oncall/")
    node = busy_node()
    expect(page.locator("#no-alerts")).to_be_visible()

    second = browser.new_page()
    login("admin", target=second)
    second.goto(f"{base}/oncall/nodes/{node.name}/")
    second.get_by_label("Fault to inject").select_option("gpu_failure")
    second.get_by_role("button", name="Inject fault").click()
    expect(second.locator(".messages")).to_contain_text("injected on")
    second.close()

    in_thread(
        cycle, cluster("admin")
    )  # the loop sees the sick GPU: isolates the node, raises the alert

    alert = Alert.objects.get(kind="node_unhealthy", subject=node.name)
    item = page.locator(f"#alert-{alert.pk}")
    expect(item).to_be_visible(timeout=LIVE_S)
    expect(item).to_contain_text("CRITICAL")
    expect(item).to_contain_text(node.name)
    expect(page.locator(f'#rack-map a[data-n="{node.name}"]')).to_have_text("U", timeout=LIVE_S)
    assert still_same_document(page), "the alert arrived without a reload"
    item.locator("summary").click()  # its troubleshooting guide
    expect(item.locator("details.guide")).to_contain_text("First actions")
    screenshot(page, "oncall")

    item.get_by_role("button", name=re.compile(r"^Acknowledge alert")).click()
    expect(page.locator(".messages")).to_contain_text(f"Alert #{alert.pk}")
    expect(page.locator(f"#alert-{alert.pk}")).to_have_attribute("data-status", "acknowledged")
    alert.refresh_from_db()
    assert alert.status == "acknowledged" and alert.acknowledged_by.username == "oncall"


def test_the_dashboard_draws_its_charts_and_follows_the_loop(cluster, page, login):
    admin = cluster("admin")
    in_thread(history, cluster)
    base = login("admin")
    # tall enough for the whole page: a full-page screenshot then resizes nothing, so the
    # responsive charts are not caught half-way through a relayout
    page.set_viewport_size({"width": 1280, "height": 1600})
    go_live(page, f"{base}/dashboard/")
    for key in ("utilization", "lines", "pending", "eviction", "fragmentation"):
        expect(page.locator(f"#chart-{key} .main-svg").first).to_be_visible(timeout=10_000)
    before = page.locator("#dashboard").get_attribute("data-sample")
    screenshot(page, "dashboard")

    in_thread(advance, admin, 300)
    in_thread(cycle, admin)  # cycle.completed
    in_thread(rollup)  # eviction.updated: a new sample
    expect(page.locator("#dashboard")).not_to_have_attribute(
        "data-sample", before or "", timeout=LIVE_S
    )
    assert still_same_document(page)
