"""The session check (``portal.auth.oidc.SessionCheck``, mozilla-django-oidc's
``SessionRefresh``) against the real provider: once the renewal time has passed, a page
load of a person signed in through OpenID Connect goes to the provider with
``prompt=none`` and back. Each test is one browser: the portal's side in this process
(Django's test client), the provider's side over HTTP with the provider's cookies
(``requests``), so the silent round trip is the provider's real answer."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from urllib.parse import parse_qs, urljoin, urlparse

import pytest
import requests
from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client, override_settings

from core.models import AuditRecord
from core.roles import role_of
from core.tokens import create_token
from monitoring.routing import websocket_urlpatterns
from portal.auth.tasks import provider_sweep
from tests.conftest import DEMO_PASSWORD
from tests.identity.conftest import PEOPLE, prefixed
from tests.identity.test_oidc import PORTAL, lines_of, signed_in_as, sso_password, to_provider
from tests.monitoring.test_consumers import _closed_with, _open, async_to_sync

pytestmark = pytest.mark.django_db

# OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS here (OIDC_RECHECK_SECONDS itself is at least 60).
RENEW = 3
ENDED = "Your session at Example Corp SSO ended, or your account there was removed or disabled"


class Browser:
    """One person's browser: the portal's cookies (a test client) and the provider's."""

    def __init__(self) -> None:
        self.portal = Client(raise_request_exception=False)
        self.provider = requests.Session()
        self.asked_provider = False  # whether the last ``load`` went through the provider

    def back_at_portal(self, response: requests.Response) -> str:
        """Follow the provider's redirects from ``response`` to the portal address it sends
        the browser to (a page of its own, such as its login page, fails the test)."""
        for _ in range(10):
            assert response.status_code in (302, 303), (response.status_code, response.text)
            target = urljoin(response.url, response.headers["Location"])
            if target.startswith(PORTAL):
                return target.removeprefix(PORTAL)
            response = self.provider.get(target, allow_redirects=False, timeout=10)
        raise AssertionError("the provider kept redirecting")

    def load(self, path: str, **headers: str):
        """A page load: the portal's redirects followed, through the provider and back when
        the portal sends the browser there; the last answer."""
        self.asked_provider = False
        response = self.portal.get(path, headers=headers)
        for _ in range(10):
            if response.status_code != 302:
                return response
            location = response["Location"]
            if location.startswith("http"):  # the provider: the portal redirects to paths
                self.asked_provider = True
                answer = self.provider.get(location, allow_redirects=False, timeout=10)
                location = self.back_at_portal(answer)
            response = self.portal.get(location)
        raise AssertionError(f"{path}: a redirect loop")


def signed_in(uid: str) -> Browser:
    """A browser in which ``uid`` signed in through the provider (their password there)."""
    browser = Browser()
    page = browser.provider.get(to_provider(browser.portal), timeout=10)
    assert "Example Corp sign-in" in page.text
    answer = browser.provider.post(
        page.url, data={"login": uid, "password": sso_password(uid)}, allow_redirects=False,
        timeout=10,
    )  # fmt: skip
    browser.portal.get(browser.back_at_portal(answer))
    assert signed_in_as(browser.portal) == uid
    return browser


def renewal_time_passes() -> None:
    time.sleep(RENEW + 0.3)


def sent_to_provider(response) -> bool:
    return response.status_code == 302 and response["Location"].startswith("http")


@pytest.fixture
def checked(provider, configure):
    """OpenID Connect on, a session checked every ``RENEW`` seconds."""
    configure(provider.portal_env(**prefixed("OIDC")))
    with override_settings(OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=RENEW):
        yield provider


@pytest.mark.parametrize("change", ["deleted", "disabled"])
def test_a_person_deleted_or_disabled_at_the_provider_is_signed_out_at_their_next_page_load(
    demo, checked, change
):
    dora = signed_in("dora")
    _, secret = create_token(get_user_model().objects.get(username="dora"), "ci")
    if change == "deleted":
        del checked.accounts["dora"]
    else:
        checked.accounts["dora"]["disabled"] = True
    checked.write_accounts()
    assert dora.load("/jobs/").status_code == 200  # before the renewal time: not asked
    assert not dora.asked_provider
    renewal_time_passes()
    page = dora.load("/jobs/")
    assert dora.asked_provider and signed_in_as(dora.portal) is None
    assert page.status_code == 200 and page.wsgi_request.path == "/accounts/login/"
    assert ENDED in page.content.decode()
    again = dora.load("/jobs/")  # no loop: the login page, the provider not asked
    assert again.wsgi_request.path == "/accounts/login/" and not dora.asked_provider
    assert ENDED not in again.content.decode()
    # the session check ends the session only: the account and its API tokens end at the
    # provider sweep (tests/identity/test_provider_sweep.py), which the provider refuses
    api = Client().get("/api/v1/jobs/", headers={"Authorization": f"Token {secret}"})
    assert api.status_code == 200
    assert provider_sweep()["deactivated"] == ["dora"]
    api = Client().get("/api/v1/jobs/", headers={"Authorization": f"Token {secret}"})
    assert api.status_code == 401


def test_a_session_that_ended_at_the_provider_ends_at_the_portal(demo, checked):
    """The provider's own session gone (expired, signed out there; here: a browser without
    the provider's cookies): it answers ``login_required``."""
    rick = signed_in("rick")
    rick.provider.cookies.clear()
    renewal_time_passes()
    page = rick.load("/queues/")
    assert rick.asked_provider and signed_in_as(rick.portal) is None
    assert page.wsgi_request.path == "/accounts/login/" and ENDED in page.content.decode()


def test_a_group_change_at_the_provider_takes_effect_at_the_first_page_load_after_the_renewal_time(
    demo, checked
):
    boss = signed_in("boss")
    checked.set_groups("boss", ["portal-oncall"])
    assert boss.load("/jobs/").status_code == 200 and not boss.asked_provider
    user = get_user_model().objects.get(username="boss")
    assert role_of(user) == "admin" and user.is_superuser  # not asked yet
    dora = signed_in("dora")
    checked.set_groups("dora", ["search-rec-leads"])
    renewal_time_passes()
    page = boss.load("/jobs/?state=running")
    assert boss.asked_provider and page.status_code == 200  # no password asked: straight back
    assert page.wsgi_request.get_full_path() == "/jobs/?state=running"
    assert signed_in_as(boss.portal) == "boss"
    user = get_user_model().objects.get(username="boss")
    assert (role_of(user), user.is_superuser) == ("oncall", False)
    record = AuditRecord.objects.filter(action="identity.sync", target_id=str(user.pk)).first()
    assert (record.before["role"], record.after["role"]) == ("admin", "oncall")
    assert record.actor == user and "single sign-on" in record.reason
    assert boss.load("/jobs/").status_code == 200 and not boss.asked_provider  # renewed
    assert dora.load("/quotas/requests/new/").status_code == 200 and dora.asked_provider
    assert lines_of("dora") == {"search-rec": "lead"}


def test_someone_taken_out_of_the_required_groups_is_signed_out_at_the_check(
    demo, provider, configure
):
    configure(provider.portal_env(**prefixed("OIDC", REQUIRED_GROUPS="gpu-users")))
    with override_settings(OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=RENEW):
        boss = signed_in("boss")
        provider.set_groups("boss", ["portal-admins"])
        renewal_time_passes()
        page = boss.load("/jobs/")
    assert boss.asked_provider and signed_in_as(boss.portal) is None
    assert "not in a group that may use the portal" in page.content.decode()
    user = get_user_model().objects.get(username="boss")
    assert (role_of(user), user.is_superuser) == ("researcher", False)


def test_local_and_directory_sessions_are_never_sent_to_the_provider(
    demo, directory, provider, configure
):
    configure(
        {**directory.portal_env(**prefixed("LDAP")), **provider.portal_env(**prefixed("OIDC"))}
    )
    with override_settings(OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=RENEW):
        local, ldap_person = Browser(), Browser()
        for browser, (name, password) in (
            (local, ("admin", DEMO_PASSWORD)),
            (ldap_person, ("rick", PEOPLE["rick"][0])),
        ):
            answer = browser.portal.post(
                "/accounts/login/", {"username": name, "password": password}
            )
            assert answer.status_code == 302 and signed_in_as(browser.portal) == name
        sso = signed_in("dora")
        renewal_time_passes()
        for browser in (local, ldap_person):
            for path in ("/", "/jobs/", "/queues/", "/account/"):
                assert not sent_to_provider(browser.portal.get(path)), path
        assert sent_to_provider(sso.portal.get("/jobs/"))  # the same page, signed in by OIDC


def test_the_api_probes_static_files_and_what_live_pages_fetch_are_never_sent_to_the_provider(
    demo, checked
):
    boss = signed_in("boss")
    _, secret = create_token(get_user_model().objects.get(username="boss"), "ci")
    renewal_time_passes()
    fetched = [
        "/api/v1/jobs/",
        "/api/v1/queues/?limit=1000",
        "/api/v1/version/",
        "/api/schema/",
        "/healthz",
        "/readyz",
        "/metrics",
        "/favicon.ico",
        "/static/css/portal.css",
        "/dashboard/data/?window=24h",
        "/oncall/alerts/",
        "/oncall/rack-map/cells/",
        "/jobs/estimate/?params=7B&precision=bf16",
        "/jobs/feasibility/?queue=llm-batch&gpus=1",
    ]
    for path in fetched:
        response = boss.portal.get(path)
        assert not sent_to_provider(response), path
        assert response.status_code in (200, 400, 503), (path, response.status_code)  # 503:
        # /readyz without a scheduler
    token = Client().get("/api/v1/jobs/", headers={"Authorization": f"Token {secret}"})
    assert token.status_code == 200
    # a live part's refetch of its page, and any fetch() a browser marks as not a navigation
    assert boss.portal.get("/", headers={"X-Live-Refresh": "1"}).status_code == 200
    assert boss.portal.get("/jobs/", headers={"Sec-Fetch-Mode": "cors"}).status_code == 200
    assert not sent_to_provider(boss.portal.post("/jobs/999/cancel/"))  # a form's data kept
    assert sent_to_provider(boss.portal.get("/jobs/", headers={"Sec-Fetch-Mode": "navigate"}))
    assert signed_in_as(boss.portal) == "boss"


def test_an_unreachable_provider_postpones_the_check_and_signs_nobody_out(
    demo, provider, configure, caplog
):
    """A provider that does not answer (stopped: it accepts connections and says nothing)
    when the check is due: the page is served, a warning logged, the person stays signed
    in; it is not asked again for a while (pages do not each wait for it); once it answers
    again the check is made."""
    configure(provider.portal_env(**prefixed("OIDC", TIMEOUT="1")))
    with override_settings(OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=RENEW):
        dora = signed_in("dora")
        renewal_time_passes()
        os.kill(provider.proc.pid, signal.SIGSTOP)
        try:
            with caplog.at_level(logging.WARNING, logger="portal.auth"):
                pages = [dora.load("/jobs/"), dora.load("/queues/")]
        finally:
            os.kill(provider.proc.pid, signal.SIGCONT)
        assert [page.status_code for page in pages] == [200, 200]
        assert signed_in_as(dora.portal) == "dora" and not dora.asked_provider
        postponed = [r for r in caplog.records if "session check of dora postponed" in r.message]
        assert len(postponed) == 1, "the second page did not wait for the provider again"
        renewal_time_passes()
        assert dora.load("/jobs/").status_code == 200
        assert dora.asked_provider and signed_in_as(dora.portal) == "dora"


@pytest.mark.parametrize(
    "query",
    [
        "?code=made-up&state={state}",  # the provider refuses the code (invalid_grant)
        "?error=login_required&state={state}",
        "?error=server_error&error_description=%ff%fe&state={state}",
        "?state={state}",
        "?error=&code=x&state={state}",
        "?code=x&code=y&state=forged&state={state}",
        "?code=" + "x" * 5000 + "&state={state}",
    ],
)
def test_whatever_comes_back_to_the_callback_during_a_check_is_not_a_500(
    demo, provider, configure, query
):
    """An answer to this session's check that does not sign the person in again signs
    them out (the login page, with the message); answers to no request of this session (a
    link from elsewhere, a used state) change nothing: a GET cannot sign a person out."""
    configure(provider.portal_env(**prefixed("OIDC")))
    with override_settings(OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=1):
        dora = signed_in("dora")
        time.sleep(1.3)
        start = dora.portal.get("/jobs/")
    assert sent_to_provider(start)
    state = parse_qs(urlparse(start["Location"]).query)["state"][0]
    for forged in ("", "?error=login_required", "?error=x&state=forged", "?code=x&state=y",
                   "?code=x", "?state=" + "s" * 3000):  # fmt: skip
        response = dora.portal.get("/oidc/callback/" + forged)
        assert (response.status_code, response["Location"]) == (302, "/"), forged
        assert signed_in_as(dora.portal) == "dora", forged
    response = dora.portal.get("/oidc/callback/" + query.format(state=state))
    assert (response.status_code, response["Location"]) == (302, "/accounts/login/")
    assert signed_in_as(dora.portal) is None
    assert ENDED in dora.portal.get("/accounts/login/").content.decode()
    replayed = dora.portal.get("/oidc/callback/" + query.format(state=state))
    assert (replayed.status_code, replayed["Location"]) == (302, "/accounts/login/")


def live_connection(browser: Browser):
    """The consumer behind ``browser``'s portal session (as ``tests/monitoring``)."""
    session = SessionStore(browser.portal.cookies[settings.SESSION_COOKIE_NAME].value)
    app = AuthMiddleware(URLRouter(websocket_urlpatterns))

    async def with_session(scope, receive, send):
        return await app({**scope, "session": session}, receive, send)

    return with_session


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", ["deleted at the provider", "another person there now"])
def test_a_check_that_ends_a_session_closes_its_live_connections(demo, checked, change):
    dora = signed_in("dora")
    app = live_connection(dora)
    if change == "deleted at the provider":
        del checked.accounts["dora"]
        checked.write_accounts()
        expected = None
    else:  # the browser's session at the provider is now rick's (a shared machine)
        dora.provider = signed_in("rick").provider
        expected = "rick"

    async def run():
        comm = await _open(app)
        await asyncio.sleep(RENEW + 0.3)
        await database_sync_to_async(dora.load)("/jobs/")
        code = await _closed_with(comm)
        await comm.disconnect()
        return code

    assert async_to_sync(run)() == 4401, "signed out: the page says so and does not reconnect"
    assert dora.asked_provider and signed_in_as(dora.portal) == expected
