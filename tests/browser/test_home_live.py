"""The home page in a real browser: login, the cluster at a glance, and a live websocket."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_researcher_logs_in_sees_the_cluster_and_goes_live(demo, page, login):
    login("researcher")
    expect(page.locator("#nodes-total")).to_have_text("4")
    expect(page.locator("#gpus-total")).to_have_text("32")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    screenshot(page, "home")


def test_anonymous_visitors_get_the_login_page(demo, page, portal_server):
    page.goto(portal_server + "/")
    expect(page).to_have_url(portal_server + "/accounts/login/?next=/")
