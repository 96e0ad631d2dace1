"""The Content-Security-Policy in a real browser (Chromium via Playwright against the web server):
every page, as each role that sees it, loads without a single violation of the policy,
including style-src 'self' (no <style> element, no style="..." attribute), and so do the
dashboard's hover labels and mode bar.

A violation means a page is broken under the policy: fix the page (code in static/, a
class or a <progress> instead of an inline style, a vendored library's injected CSS as a
static file) rather than loosening the policy.
"""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import expect

from tests.browser.conftest import (  # noqa: F401 - fixtures
    browser_type_launch_args,
    in_thread,
    login,
    portal_server,
)
from tests.security.pages import build_world, html_pages

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push({directive: e.effectiveDirective, disposition: e.disposition,
                     source: e.sourceFile, line: e.lineNumber});
});
"""
ADMIN_PAGES = ["/admin/", "/admin/scheduling/job/", "/admin/portal/auditrecord/",
               "/admin/auth/user/add/"]  # fmt: skip
API_DOCS = "/api/docs/"  # Swagger UI, under the same policy


def violations_on(page, url: str) -> list[dict]:
    response = page.goto(url)
    assert response is not None and response.status == 200, url
    assert "style-src 'self';" in response.headers["content-security-policy"]
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)
    if url.endswith("/dashboard/"):
        hover_a_chart(page)
    return page.evaluate("window.__csp")


def hover_a_chart(page) -> None:
    """Plotly draws a hover label and shows the mode bar on hover: neither may need inline
    CSS, and its global rules come from vendor/plotly.css (no <style> injected)."""
    assert page.locator("style").count() == 0
    chart = page.locator("#chart-lines")
    marker = chart.locator(".scatterlayer .point").first
    marker.wait_for(state="attached")  # a line-ew marker: no area, "hidden" to Playwright
    box = marker.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(chart.locator(".hoverlayer .hovertext").first).to_be_visible()
    # rules of vendor/plotly.css: the mode bar fades in on hover; the layers are stacked
    expect(chart.locator(".modebar-group").first).to_have_css("opacity", "1")
    expect(chart.locator(".main-svg").first).to_have_css("position", "absolute")
    page.mouse.move(0, 0)
    page.wait_for_timeout(200)


# Admins see every page but the quota request form, which only team leads may open.
@pytest.mark.parametrize("role", ["admin", "lead"])
def test_every_page_loads_without_csp_violations(api, demo, role, portal_server, page, login):  # noqa: F811
    def pages_of_role() -> list[str]:
        client = Client()
        client.force_login(demo[role])
        urls = sorted(html_pages(client, build_world(api)))
        return [*urls, API_DOCS, *(ADMIN_PAGES if role == "admin" else [])]

    urls = in_thread(pages_of_role)
    assert len(urls) >= 5, urls
    page.add_init_script(RECORD_VIOLATIONS)
    found = {"/accounts/login/": violations_on(page, portal_server + "/accounts/login/")}
    # The recorder catches what the policy blocks: an injected inline script (never runs)
    # and a style attribute set from script (not applied).
    page.evaluate("""() => { const s = document.createElement("script");
        s.textContent = "window.__ran = true"; document.body.appendChild(s); }""")
    page.evaluate("() => document.body.setAttribute('style', 'color: rgb(255, 0, 0)')")
    page.wait_for_timeout(200)
    seen = {(v["directive"], v["disposition"]) for v in page.evaluate("window.__csp")}
    assert {("script-src-elem", "enforce"), ("style-src-attr", "enforce")} <= seen, seen
    assert page.evaluate("window.__ran") is None
    assert page.evaluate("getComputedStyle(document.body).color") != "rgb(255, 0, 0)"
    login(role)
    for url in urls:
        found[url] = violations_on(page, portal_server + url)

    violations = {
        (url, v["directive"], v["disposition"]): f"{v['source']}:{v['line']}"
        for url, vs in found.items()
        for v in vs
    }
    assert violations == {}
