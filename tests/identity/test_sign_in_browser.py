"""Sign-in with the organization's identity, end to end in Chromium: the portal's web
server configured for a real OpenLDAP directory and a real OpenID Connect provider.

A lead of a group sees their line's lead page (the quota request form offers their line);
a group changed in the directory or at the provider shows at the next sign-in; with the
directory down the login page says so and the local break-glass admin signs in."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import DEMO_PASSWORD
from tests.identity.conftest import PEOPLE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def password_sign_in(page: Page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def sign_out(page: Page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()


def led_lines(page: Page, base: str) -> list[str]:
    """The lines the lead page (the quota request form) offers."""
    page.goto(f"{base}/quotas/requests/new/")
    return page.locator("select[name=business_line] option").evaluate_all(
        "options => options.map(o => o.value)"
    )


def test_directory_sign_in_groups_outage_and_break_glass(page: Page, identity_server, directory):
    base = identity_server
    page.goto(f"{base}/accounts/login/")
    expect(page.get_by_text("Company (directory) accounts")).to_be_visible()

    password_sign_in(page, base, "dora", PEOPLE["dora"][0])
    page.wait_for_url(f"{base}/")
    expect(page.locator(".who")).to_contain_text("dora · Team lead")
    assert led_lines(page, base) == ["llm"]

    # the directory moves her to leading search-rec: her next sign-in shows it
    directory.set_groups("dora", {"search-rec-leads", "gpu-users"})
    sign_out(page)
    password_sign_in(page, base, "dora", PEOPLE["dora"][0])
    page.wait_for_url(f"{base}/")
    assert led_lines(page, base) == ["search-rec"]
    sign_out(page)

    # the directory goes down: a clear message, and the local admin still signs in
    directory.stop()
    password_sign_in(page, base, "dora", PEOPLE["dora"][0])
    expect(page.get_by_text("The company directory (LDAP) cannot be reached")).to_be_visible()
    expect(page.get_by_text("didn't match")).to_have_count(0)
    assert page.url.startswith(f"{base}/accounts/login/")
    password_sign_in(page, base, "admin", DEMO_PASSWORD)
    page.wait_for_url(f"{base}/")
    expect(page.locator(".who")).to_contain_text("admin · Cluster admin")
    expect(page.get_by_role("link", name="On-call")).to_be_visible()


def test_single_sign_on_with_the_groups_claim(page: Page, identity_server, provider):
    base = identity_server
    page.goto(f"{base}/accounts/login/?next=/quotas/requests/new/")
    page.get_by_role("link", name="Sign in with Example Corp SSO").click()
    expect(page.get_by_role("heading", name="Example Corp sign-in")).to_be_visible()
    assert page.url.startswith(provider.issuer)
    page.get_by_label("Corporate login").fill("dora")
    page.get_by_label("Corporate password").fill("wrong")
    page.get_by_role("button", name="Continue").click()
    expect(page.get_by_text("Wrong login or password.")).to_be_visible()
    page.get_by_label("Corporate login").fill("dora")
    page.get_by_label("Corporate password").fill("dora-sso-pw")
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(f"{base}/quotas/requests/new/")  # where she was going
    expect(page.locator(".who")).to_contain_text("dora · Team lead")
    assert led_lines(page, base) == ["llm"]

    # the provider's groups change; her next sign-in (still signed in at the provider: no
    # password asked) brings the new lines
    provider.set_groups("dora", ["search-rec-leads", "llm-team"])
    sign_out(page)
    page.get_by_role("link", name=re.compile("Sign in with")).click()
    page.wait_for_url(f"{base}/")
    expect(page.locator(".who")).to_contain_text("dora · Team lead")
    assert led_lines(page, base) == ["search-rec"]
