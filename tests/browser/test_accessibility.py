"""Every page passes axe-core's WCAG 2.2 A and AA rules and its best practices, as each role
reads it on a busy cluster, on a wide screen and on a 390 px phone; and the keyboard alone
reaches every control, each showing where the focus is.

axe-core (Deque's engine, bundled by ``axe-playwright-python``) runs in Chromium on each
page after its scripts and live parts have run: forms with their errors shown, the
dashboard with its charts drawn, error pages, the Django admin. What it finds and what the
portal did about each is in docs/accessibility.md. It does not judge everything WCAG asks
(it cannot tell a good label from a bad one); the flows' own tests use the pages by their
roles and labels, as a screen reader would (``get_by_role``, ``get_by_label``).
"""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe

from quotas.services import QuotaRequestInput, create_quota_request
from scheduling.models import Node
from tests.browser.conftest import draw_dashboard, in_thread
from tests.browser.test_trust_walk import busy  # noqa: F401 - the busy cluster fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RULES = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
WIDTHS = (1400, 390)
# /api/docs/ is Swagger UI (drf-spectacular): its markup's faults are upstream's
# (swagger-api/swagger-ui#10697, #9576): method badges below 4.5:1, buttons holding links,
# small operation links, a heading level skipped, content outside landmarks. The page's
# own part (its language, its title) is checked.
SWAGGER_UI_RULES = ["html-has-lang", "html-lang-valid", "document-title"]

AXE = Axe()


def violations(page, rules: list[str] | None = None) -> list[str]:
    """axe-core's violations on the page as it stands, one line each."""
    run_only = {"type": "rule", "values": rules} if rules else {"type": "tag", "values": RULES}
    found = AXE.run(page, options={"resultTypes": ["violations"], "runOnly": run_only})
    return [
        f"{v['id']} ({v['impact']}): {v['help']}; e.g. {v['nodes'][0]['target']}"
        f" ({len(v['nodes'])} elements)"
        for v in found.response["violations"]
    ]


def audit(page, where: str, rules: list[str] | None = None) -> list[str]:
    """The violations at each width, named by where they were found."""
    out = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(150)  # the tables' focusability follows the resize
        out += [f"{where} at {width} px: {v}" for v in violations(page, rules)]
    page.set_viewport_size({"width": WIDTHS[0], "height": 900})
    return out


def submit_empty(page, url: str, button: str) -> None:
    """A form sent empty (past the browser's own checks), so its errors are on the page."""
    page.goto(url)
    page.evaluate("document.querySelectorAll('form').forEach((f) => { f.noValidate = true; })")
    page.locator(button).click()
    page.wait_for_load_state()
    assert page.locator("main .error").count() > 0, f"{url}: no error shown"


def test_every_page_passes_axe_core_as_each_role_reads_it(busy, page, login, portal_server):  # noqa: F811
    base = portal_server
    lead = busy["users"]["lead"]
    request = in_thread(
        lambda: (
            create_quota_request(
                lead, QuotaRequestInput(business_line="llm", quota_gpus=300, reason="Q4 needs more")
            ).pk
        )
    )
    node = Node.objects.order_by("name").first().name
    pages = {
        "researcher": [
            "/", "/jobs/", "/jobs/new/", f"/jobs/{busy['waiting']}/",
            f"/jobs/{busy['running']}/", f"/jobs/{busy['running']}/output/", "/queues/",
            "/quotas/", "/account/",
            "/account/tokens/", "/usage/", "/audit/",  # the last: a 403 page
        ],
        "lead": [
            "/quotas/", "/quotas/requests/", "/quotas/requests/new/",
            f"/quotas/requests/{request}/", "/quotas/lines/llm/",
        ],
        "oncall": ["/oncall/", "/oncall/rack-map/", f"/oncall/nodes/{node}/", "/usage/"],
        "admin": [
            "/jobs/?state=pending", "/audit/", f"/quotas/requests/{request}/",
            "/no/such/page/", "/admin/", "/admin/quotas/quotapolicy/",
        ],
    }  # fmt: skip
    found = []
    page.goto(f"{base}/accounts/login/")
    found += audit(page, "login")
    page.get_by_label("Username").fill("nobody")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Log in").click()
    found += audit(page, "login refused")
    for role, paths in pages.items():
        page.context.clear_cookies()
        login(role)
        for path in paths:
            page.goto(base + path)
            page.wait_for_timeout(500)  # live parts connect and fill in
            found += audit(page, f"{role} {path}")
    submit_empty(page, f"{base}/jobs/new/", "#submit-button")  # the admin's: every form error shown
    found += audit(page, "submit form with errors")
    page.context.clear_cookies()
    login("lead")
    submit_empty(page, f"{base}/quotas/requests/new/", "main form.card button[type=submit]")
    found += audit(page, "quota request form with errors")
    page.context.clear_cookies()
    login("admin")
    draw_dashboard(page, f"{base}/dashboard/")
    found += audit(page, "dashboard, charts drawn")
    page.goto(f"{base}/api/docs/")
    page.wait_for_selector(".swagger-ui .info")
    found += audit(page, "API docs", SWAGGER_UI_RULES)
    assert found == [], "\n".join(found)


# What has the keyboard's focus: whether it is on screen and shows where it is.
FOCUSED_JS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const cs = getComputedStyle(el);
  const r = el.getBoundingClientRect();
  const label = el.getAttribute("aria-label") || el.innerText || el.value || el.id || "";
  return {
    what: `${el.tagName.toLowerCase()} "${label.trim().slice(0, 40)}"`,
    inMain: !!el.closest("main"),
    outlined: cs.outlineStyle !== "none" && parseFloat(cs.outlineWidth) >= 2,
    onScreen: r.width > 0 && r.height > 0 && r.bottom > 0 && r.top < innerHeight
      && r.right > 0 && r.left < innerWidth,
  };
}"""
TABS = 120  # past the header and well into each page (a page's rack map has 64 cells)


def tab_through(page, where: str) -> list[str]:
    """Press Tab until focus leaves the page (or TABS times): every control it reaches
    must be on screen and outlined (WCAG 2.4.7, focus visible; 2.4.11, not hidden)."""
    bad = []
    for _ in range(TABS):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED_JS)
        if focused is None:
            break  # past the last control, to the browser
        if not (focused["outlined"] and focused["onScreen"]):
            bad.append(f"{where}: {focused}")
    return bad


def test_the_keyboard_reaches_every_control_and_shows_where_it_is(busy, page, login, portal_server):  # noqa: F811
    """Tab from the top of each page: the first stop is "Skip to content", which moves
    the focus into the page, and every control after it shows its focus on screen."""
    base = portal_server
    pages = {
        "researcher": ["/", "/jobs/", "/jobs/new/", f"/jobs/{busy['waiting']}/", "/queues/"],
        "lead": ["/quotas/", "/quotas/requests/new/", "/quotas/lines/llm/"],
        "oncall": ["/oncall/", "/oncall/rack-map/"],
        "admin": ["/audit/", "/account/tokens/"],
    }
    bad = []
    for role, paths in pages.items():
        page.context.clear_cookies()
        login(role)
        for path in paths:
            page.goto(base + path)
            page.keyboard.press("Tab")
            first = page.evaluate(FOCUSED_JS)
            assert first and first["what"] == 'a "Skip to content"', f"{path}: {first}"
            assert first["onScreen"] and first["outlined"], f"{path}: {first}"
            page.keyboard.press("Enter")
            assert page.evaluate("document.activeElement.id") == "content", path
            if page.locator("main a[href], main button, main input, main select").count():
                page.keyboard.press("Tab")
                inside = page.evaluate(FOCUSED_JS)
                assert inside and inside["inMain"], f"{path}: after the skip link, {inside}"
            page.goto(base + path)
            bad += tab_through(page, f"{role} {path}")
    page.set_viewport_size({"width": 390, "height": 844})  # and on a phone
    page.goto(f"{base}/queues/")
    bad += tab_through(page, "admin /queues/ at 390 px")
    assert bad == [], "\n".join(bad)


def focused_node(page) -> str | None:
    return page.evaluate("document.activeElement.dataset.n || null")


def test_the_rack_map_is_one_tab_stop_and_the_arrows_move_between_nodes(
    busy,  # noqa: F811
    page,
    login,
    portal_server,
):
    """The on-call console's map of every node is one Tab stop, not one per node (1,250 on
    the demo): the arrow keys move from node to node, by the rack's rows and into the
    next rack, Page Down to the next rack, Home and End to the ends, Enter opens it."""
    login("oncall")
    page.goto(f"{portal_server}/oncall/rack-map/")
    names = page.locator("#rack-map a.n").evaluate_all("cells => cells.map((c) => c.dataset.n)")
    racks = page.locator("#rack-map .rack .cells").evaluate_all(
        "boxes => boxes.map((b) => Array.from(b.querySelectorAll('a.n')).map((c) => c.dataset.n))"
    )
    assert len(racks) > 2 and all(len(r) == 8 for r in racks), racks  # one row of 8 each
    for _ in range(40):
        page.keyboard.press("Tab")
        if focused_node(page):
            break
    assert focused_node(page) == names[0]
    page.keyboard.press("Tab")
    assert focused_node(page) is None, "one Tab leaves the map"
    page.keyboard.press("Shift+Tab")
    assert focused_node(page) == names[0], "and Shift+Tab comes back to it"
    page.keyboard.press("ArrowRight")
    assert focused_node(page) == names[1]
    page.keyboard.press("ArrowDown")  # a rack is one row: the next rack, same column
    assert focused_node(page) == racks[1][1]
    page.keyboard.press("ArrowUp")
    assert focused_node(page) == names[1]
    page.keyboard.press("PageDown")
    assert focused_node(page) == racks[1][0]
    page.keyboard.press("End")
    assert focused_node(page) == names[-1]
    page.keyboard.press("ArrowRight")  # the last node stays
    assert focused_node(page) == names[-1]
    page.keyboard.press("Home")
    assert focused_node(page) == names[0]
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Tab")
    page.keyboard.press("Shift+Tab")
    assert focused_node(page) == names[1], "the map remembers where the reader was"
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/oncall/nodes/{names[1]}/")
