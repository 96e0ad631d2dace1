"""In Chromium (#18): a browser in Tokyo gets its zone remembered on the first visit
(static/js/tz.js) and the pages, the header clock included, show times in JST."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest

from tests.browser.conftest import (  # noqa: F401
    browser_type_launch_args,
    login,
    portal_server,
    wait_in_page,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_browser_zone_becomes_the_display_zone(browser, login, demo):  # noqa: F811
    context = browser.new_context(timezone_id="Asia/Tokyo")
    page = context.new_page()
    try:
        base = login("researcher", page)
        cookies = {c["name"]: c["value"] for c in context.cookies()}
        assert unquote(cookies.get("tz", "")) == "Asia/Tokyo"
        page.goto(f"{base}/account/")
        assert page.locator("#zone-now strong").inner_text() == "Asia/Tokyo"
        assert page.locator("html").get_attribute("data-tz") == "Asia/Tokyo"
        # the ticking header clock (Dom.when) names the zone too
        wait_in_page(page, "document.getElementById('cluster-time').textContent.endsWith('JST')")
        page.wait_for_timeout(1500)  # the clock has ticked (Dom.when): still JST, not GMT+9
        assert page.locator("#cluster-time").inner_text().endswith(" JST")
        assert page.locator("html").get_attribute("data-tz-names") == "540=JST"
        assert re.fullmatch(
            r"\d{4}-\d\d-\d\d \d\d:\d\d JST",
            page.locator("#zone-now").inner_text().split("now: ")[1].rstrip("."),
        )
        # chosen UTC on the account page: UTC, said so
        page.select_option("#id_time_zone", "UTC")
        page.get_by_role("button", name="Save").click()
        page.wait_for_url(f"{base}/account/")
        assert page.locator("#zone-now strong").inner_text() == "UTC"
        wait_in_page(page, "document.getElementById('cluster-time').textContent.endsWith(' UTC')")
    finally:
        context.close()
