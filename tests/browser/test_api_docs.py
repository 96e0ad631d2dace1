"""The browsable API docs (/api/docs/, Swagger UI from local files) in a real browser:
a researcher finds the API from the navigation, reads the job submission, and tries a
call with their session."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_docs_render_every_path_and_try_calls_with_the_session(demo, page, login):
    base = login("researcher")
    outside: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))
    page.get_by_role("link", name="API", exact=True).click()
    page.wait_for_url(f"{base}/api/docs/")

    jobs_post = page.locator(".opblock-post", has_text="/api/v1/jobs/").first
    expect(jobs_post).to_be_visible(timeout=15_000)
    for path in ("/api/v1/queues/", "/api/v1/nodes/{name}/cordon/", "/api/v1/metrics/summary/"):
        expect(page.locator(".opblock-summary-path", has_text=path).first).to_be_visible()
    assert outside == [], f"the docs page fetched from outside the portal: {outside[:3]}"

    queues_get = page.locator(".opblock-get", has_text="/api/v1/queues/").first
    queues_get.locator(".opblock-summary").click()
    queues_get.get_by_role("button", name="Try it out").click()
    queues_get.get_by_role("button", name="Execute").click()
    status = queues_get.locator(".live-responses-table tbody .response-col_status").first
    expect(status).to_have_text(re.compile(r"^\s*200"), timeout=15_000)
    expect(queues_get.locator(".live-responses-table")).to_contain_text("llm-experiment")
    screenshot(page, "api-docs")
