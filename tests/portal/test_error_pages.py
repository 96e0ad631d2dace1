"""Errors people can use (#15 item 10): 400/403/404/500 pages in the portal layout with the
reason and a way back, never Django's debug pages (with DEBUG on too, as in ``make run``);
JSON under /api/; the favicon answered.

This module is also the URLconf of the 500 tests (the portal's, plus a view that fails).
"""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import SuspiciousOperation
from django.test import Client, override_settings
from django.urls import include, path

from monitoring.permissions import DASHBOARD_ONLY

pytestmark = pytest.mark.django_db


def _boom(request):
    raise RuntimeError("secret internals: the database password is hunter2")


def _suspicious(request):
    raise SuspiciousOperation("tampered")


urlpatterns = [
    path("boom/", _boom),
    path("api/v1/boom/", _boom),
    path("suspicious/", _suspicious),
    path("", include("portal.urls")),
]
handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.page_not_found"
handler500 = "portal.errors.server_error"

TECHNICAL = ("Using the URLconf", "Django tried these URL patterns", "Traceback",
             "DEBUG = True", "technical_500", "hunter2")  # fmt: skip


def signed_in(demo, username: str = "researcher", **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(demo[username])
    return client


def assert_portal_page(response, status: int, title: str) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    for words in TECHNICAL:
        assert words not in body, words
    assert '<header class="topbar">' in body, "in the portal layout"
    assert 'rel="icon"' in body and "css/portal.css" in body
    assert f'<h1 id="error-h">{title}</h1>' in body
    assert '<a href="/">Home: the cluster at a glance</a>' in body, "a way back"
    return body


@pytest.mark.parametrize("debug", [False, True], ids=["production", "make-run"])
def test_an_unknown_address_is_the_portals_404_page(demo, debug):
    with override_settings(DEBUG=debug):
        response = signed_in(demo).get("/no/such/page/")
    body = assert_portal_page(response, 404, "Not found")
    assert "<code>/no/such/page/</code>" in body
    assert 'href="/jobs/"' in body and "researcher" in body, "the header knows who is signed in"


@pytest.mark.parametrize("debug", [False, True], ids=["production", "make-run"])
def test_a_views_404_is_the_portals_page_too(demo, debug):
    with override_settings(DEBUG=debug):
        response = signed_in(demo).get("/jobs/999999/")
    assert_portal_page(response, 404, "Not found")


@override_settings(DEBUG=True)
def test_a_missing_slash_still_redirects_with_debug_on(demo):
    response = signed_in(demo).get("/queues")
    assert response.status_code == 301 and response["Location"] == "/queues/"


@pytest.mark.parametrize("debug", [False, True], ids=["production", "make-run"])
def test_a_403_says_why_and_offers_the_way_back(demo, debug):
    client = signed_in(demo)
    with override_settings(DEBUG=debug):
        response = client.get("/dashboard/", HTTP_REFERER="http://testserver/queues/")
    body = assert_portal_page(response, 403, "Not allowed")
    assert f'<p class="error" role="alert" id="error-reason">{DASHBOARD_ONLY}</p>' in body
    assert '<a href="http://testserver/queues/">Back to the page you came from</a>' in body


def test_the_way_back_never_leads_to_another_site(demo):
    response = signed_in(demo).get("/dashboard/", HTTP_REFERER="https://evil.example/x")
    body = assert_portal_page(response, 403, "Not allowed")
    assert "evil.example" not in body


def test_a_quota_decision_refused_by_role_is_explained(demo):
    from quotas.services import QuotaRequestInput, create_quota_request

    req = create_quota_request(
        demo["lead"], QuotaRequestInput(business_line="llm", quota_gpus=20, reason="more")
    )
    response = signed_in(demo, "lead").post(f"/quotas/requests/{req.pk}/approve/", {"note": "x"})
    body = assert_portal_page(response, 403, "Not allowed")
    assert "only cluster admins decide quota requests" in body


@pytest.mark.parametrize("debug", [False, True], ids=["production", "make-run"])
@override_settings(ROOT_URLCONF=__name__)
def test_an_error_is_the_portals_500_page_and_is_logged(demo, debug, caplog):
    client = signed_in(demo, raise_request_exception=False)
    with override_settings(DEBUG=debug), caplog.at_level(logging.ERROR, "django.request"):
        response = client.get("/boom/")
    body = assert_portal_page(response, 500, "Something went wrong")
    assert "it is logged for the admins" in body
    logged = [
        r for r in caplog.records if r.name == "django.request" and r.levelno == logging.ERROR
    ]
    assert logged and logged[0].exc_info and "hunter2" in str(logged[0].exc_info[1])


@override_settings(ROOT_URLCONF=__name__)
def test_a_bad_request_is_the_portals_400_page(demo):
    response = signed_in(demo).get("/suspicious/")
    assert_portal_page(response, 400, "Bad request")


@pytest.mark.parametrize("debug", [False, True], ids=["production", "make-run"])
def test_api_paths_keep_json_errors(demo, debug):
    client = signed_in(demo)
    with override_settings(DEBUG=debug):
        unrouted = client.get("/api/v1/no-such-thing/")
        routed = client.get("/api/v1/jobs/999999/")
        with override_settings(ROOT_URLCONF=__name__):
            client.raise_request_exception = False
            failed = client.get("/api/v1/boom/")
    assert unrouted.status_code == 404 and unrouted.json() == {"detail": "Not found."}
    assert routed.status_code == 404 and routed.json() == {"detail": "Not found."}
    assert failed.status_code == 500 and failed.json() == {"detail": "Server error."}


def test_an_expired_form_token_gets_a_page_that_says_what_to_do(demo):
    client = signed_in(demo, enforce_csrf_checks=True)
    response = client.post("/jobs/new/", {"name": "x"})
    assert response.status_code == 403
    body = response.content.decode()
    assert '<header class="topbar">' in body and "Nothing was changed" in body
    assert "reload the page" in body


def test_anonymous_visitors_get_the_pages_too(db):
    response = Client().get("/no/such/page/")
    body = assert_portal_page(response, 404, "Not found")
    assert '<a href="/accounts/login/">Log in</a>' in body


def test_the_favicon_is_answered_and_named_by_every_page(demo):
    client = Client()
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00", "an ICO file"
    assert client.post("/favicon.ico").status_code == 405
    login = client.get("/accounts/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in login


@pytest.mark.parametrize("debug", [False, True], ids=["production", "make-run"])
def test_opening_a_forms_address_explains_itself(demo, debug):
    with override_settings(DEBUG=debug):
        response = signed_in(demo).get("/jobs/1/cancel/")
    body = assert_portal_page(response, 405, "Not a page to open")
    assert response["Allow"] == "POST"
    assert "only takes a form" in body and "nothing was changed" in body


def test_an_api_405_stays_json(demo):
    # as an admin: the endpoint checks the role before the method (a researcher's GET is a 403)
    response = signed_in(demo, "admin").get("/api/v1/scheduler/cycle/")
    assert response.status_code == 405 and response["Content-Type"] == "application/json"
