"""The OpenID Connect session check in Chromium, against the portal's web server and the
real provider: after the renewal time a live page's fetch() calls are answered as before
(one sent to the provider would fail on CORS), the next page a person goes to makes the
silent round trip through the provider, and a person deleted there is signed out at their
next page, with the message, their other tab's live connection closed."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.identity.test_oidc_session_check import ENDED

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RENEW = 3  # seconds: the web server's OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS (tests/settings.py)

# [url, headers] -> [url, status, the address answered] or [url, the error]
FETCH = """async (targets) => {
  const out = [];
  for (const [url, headers] of targets) {
    try {
      const r = await fetch(url, { headers, credentials: "same-origin" });
      out.push([url, r.status, new URL(r.url).pathname]);
    } catch (e) {
      out.push([url, String(e)]);
    }
  }
  return out;
}"""


@pytest.fixture
def identity_env() -> dict[str, str]:
    return {"TEST_OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": str(RENEW)}


def test_the_session_check_in_a_browser(page: Page, identity_server, provider):
    base = identity_server
    at_provider: list[str] = []
    page.context.on(
        "request",
        lambda r: at_provider.append(r.url) if r.url.startswith(provider.issuer) else None,
    )
    page.goto(f"{base}/accounts/login/?next=/dashboard/")
    page.get_by_role("link", name="Sign in with Example Corp SSO").click()
    page.get_by_label("Corporate login").fill("dora")
    page.get_by_label("Corporate password").fill("dora-sso-pw")
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(f"{base}/dashboard/")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(RENEW * 1000 + 500)

    # the renewal time has passed: what live pages fetch is answered, not sent to the provider
    asked = len(at_provider)
    data = page.locator("#dashboard").get_attribute("data-url")
    targets = [
        [data, {"Accept": "application/json"}],
        ["/dashboard/", {"X-Live-Refresh": "1"}],  # a live part's refetch of its page
        ["/jobs/", {}],  # a fetch() of any page: Chromium says it is no navigation
        ["/api/v1/jobs/", {"Accept": "application/json"}],
    ]
    answers = page.evaluate(FETCH, targets)
    assert answers == [[url, 200, url.split("?")[0]] for url, _ in targets]
    assert len(at_provider) == asked

    # the next page she goes to is checked: to the provider and straight back, no password
    page.goto(f"{base}/jobs/")
    expect(page).to_have_url(f"{base}/jobs/")
    assert any("prompt=none" in url for url in at_provider[asked:]), at_provider[asked:]
    expect(page.locator(".who")).to_contain_text("dora · Team lead")

    # deleted at the provider, a live page open in another tab
    live = page.context.new_page()
    live.goto(f"{base}/")
    expect(live.locator("#live-status")).to_have_text("live", timeout=10_000)
    del provider.accounts["dora"]
    provider.write_accounts()
    page.wait_for_timeout(RENEW * 1000 + 500)
    page.goto(f"{base}/queues/")
    page.wait_for_url(re.compile(r"/accounts/login/"))
    expect(page.get_by_text(ENDED)).to_be_visible()
    expect(live.locator("#live-status")).to_have_text(
        "signed out: reload the page to sign in again", timeout=10_000
    )
    asked = len(at_provider)
    page.goto(f"{base}/queues/")  # signed out: the login page, the provider not asked again
    page.wait_for_url(re.compile(r"/accounts/login/\?next=/queues/"))
    expect(page.get_by_text(ENDED)).to_have_count(0)
    assert len(at_provider) == asked
