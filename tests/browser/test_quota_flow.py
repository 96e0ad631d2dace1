"""A team lead files a quota request in the browser; an admin sees its impact and approves it."""

import re

import pytest
from playwright.sync_api import expect

from quotas.models import BusinessLine, QuotaRequest
from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_lead_requests_more_quota_and_an_admin_approves_it_after_seeing_the_impact(
    demo, browser, portal_server, login
):
    before = BusinessLine.objects.get(name="llm").quota_gpus
    lead_page = browser.new_page()
    login("lead", target=lead_page)
    lead_page.goto(f"{portal_server}/quotas/requests/new/")
    lead_page.get_by_label("Business line").select_option("llm")
    lead_page.get_by_label(re.compile(r"^New quota")).fill(str(before + 4))
    lead_page.get_by_label(re.compile(r"^Reason")).fill("Q4 pre-training run needs 4 more GPUs")
    lead_page.get_by_role("button", name="Send to the cluster admins").click()
    expect(lead_page.get_by_text("pending", exact=False).first).to_be_visible()
    request = QuotaRequest.objects.get()
    assert request.state == "pending" and request.requester.username == "lead"
    screenshot(lead_page, "quota-request")

    admin_page = browser.new_page()
    login("admin", target=admin_page)
    admin_page.goto(f"{portal_server}/quotas/requests/{request.pk}/")
    expect(admin_page.locator("#impact")).to_be_visible()
    expect(admin_page.locator("#fit")).to_contain_text("Fits")
    screenshot(admin_page, "quota-approval")
    admin_page.locator("#approve-form").get_by_role("button", name="Approve").click()
    expect(admin_page.get_by_text("approved", exact=False).first).to_be_visible()
    request.refresh_from_db()
    assert request.state == "approved"
    assert BusinessLine.objects.get(name="llm").quota_gpus == before + 4
