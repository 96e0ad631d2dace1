"""Roles and sessions on the web side: the Django admin, logout, session and CSRF cookies,
CSRF on every form, and hostile job names rendered escaped on every page."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import Client, override_settings

from core.models import AuditRecord
from quotas.models import BusinessLine, QuotaRequest
from scheduling.models import Job, Node
from tests.conftest import DEMO_PASSWORD, PRODUCTION_ENV
from tests.security.pages import HOSTILE_ESCAPED, HOSTILE_NAME, html_pages

pytestmark = pytest.mark.django_db

ROLES = ("admin", "oncall", "lead", "researcher", "researcher2")


def as_user(demo, role: str | None, **kwargs) -> Client:
    client = Client(**kwargs)
    if role:
        client.force_login(demo[role])
    return client


# -- the Django admin -----------------------------------------------------------------

ADMIN_URLS = ["/admin/", "/admin/scheduling/job/", "/admin/auth/user/",
              "/admin/portal/auditrecord/", "/admin/quotas/businessline/"]  # fmt: skip


@pytest.mark.parametrize("role", ["oncall", "lead", "researcher", "researcher2", None])
def test_the_django_admin_sends_everyone_but_admins_to_its_login(demo, role):
    client = as_user(demo, role)
    for url in ADMIN_URLS:
        response = client.get(url)
        assert response.status_code == 302, (url, response.status_code)
        assert response["Location"].startswith("/admin/login/")
    before = BusinessLine.objects.count()
    response = client.post("/admin/quotas/businessline/add/", {"name": "mine", "quota_gpus": 1})
    assert response.status_code == 302 and BusinessLine.objects.count() == before
    # The admin's own login form refuses them too (not staff), even with the password.
    if role:
        refused = Client().post("/admin/login/", {"username": role, "password": DEMO_PASSWORD})
        assert refused.status_code == 200 and "_auth_user_id" not in refused.wsgi_request.session


def test_admins_use_the_django_admin(demo):
    client = as_user(demo, "admin")
    for url in ADMIN_URLS:
        assert client.get(url).status_code == 200, url


def test_a_staff_flag_without_the_admin_role_does_not_open_the_admin(demo):
    researcher = demo["researcher"]
    researcher.is_staff = True
    researcher.save(update_fields=["is_staff"])
    assert as_user(demo, "researcher").get("/admin/").status_code == 302


# -- sessions -------------------------------------------------------------------------


def test_logout_requires_post(demo):
    client = as_user(demo, "researcher")
    assert client.get("/accounts/logout/").status_code == 405
    assert client.get("/jobs/").status_code == 200  # still signed in
    response = client.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert client.get("/jobs/").status_code == 302  # signed out


def test_logout_without_the_csrf_token_is_refused(demo):
    client = as_user(demo, "researcher", enforce_csrf_checks=True)
    assert client.post("/accounts/logout/").status_code == 403
    assert client.get("/jobs/").status_code == 200


def test_signing_in_rotates_the_session_key(demo):
    client = Client()
    client.get("/accounts/login/")
    client.session.save()
    before = client.session.session_key
    response = client.post(
        "/accounts/login/", {"username": "researcher", "password": DEMO_PASSWORD}
    )
    assert response.status_code == 302
    assert client.session.session_key != before


def production_settings(*names: str) -> dict:
    """Values of ``names`` in portal.settings loaded as production would (DEBUG off)."""
    env = {**PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    code = (
        "import json; from django.conf import settings as s; "
        f"print(json.dumps({{n: getattr(s, n) for n in {list(names)!r}}}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=settings.BASE_DIR)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


COOKIE_SETTINGS = ("SESSION_COOKIE_SECURE", "SESSION_COOKIE_HTTPONLY", "SESSION_COOKIE_SAMESITE",
                   "CSRF_COOKIE_SECURE", "CSRF_COOKIE_SAMESITE", "SECURE_SSL_REDIRECT",
                   "SECURE_HSTS_SECONDS", "SECURE_PROXY_SSL_HEADER", "DEBUG")  # fmt: skip


def test_production_cookies_are_secure_httponly_and_samesite(demo):
    prod = production_settings(*COOKIE_SETTINGS)
    assert prod["DEBUG"] is False and prod["SECURE_SSL_REDIRECT"] is True
    assert prod["SESSION_COOKIE_SECURE"] is True and prod["SESSION_COOKIE_HTTPONLY"] is True
    assert prod["CSRF_COOKIE_SECURE"] is True
    assert prod["SESSION_COOKIE_SAMESITE"] == "Lax" and prod["CSRF_COOKIE_SAMESITE"] == "Lax"
    assert prod["SECURE_HSTS_SECONDS"] >= 31536000
    # ...and those values put the flags on the cookies a real sign-in sets.
    applied = {k: (tuple(v) if isinstance(v, list) else v) for k, v in prod.items() if k != "DEBUG"}
    with override_settings(**applied):
        client = Client()
        client.get("/accounts/login/", secure=True)
        response = client.post("/accounts/login/", secure=True,
                               data={"username": "researcher", "password": DEMO_PASSWORD})  # fmt: skip
        assert response.status_code == 302
        session = response.cookies[settings.SESSION_COOKIE_NAME]
        assert session["secure"] and session["httponly"] and session["samesite"] == "Lax"
        csrf = client.cookies[settings.CSRF_COOKIE_NAME]
        assert csrf["secure"] and csrf["samesite"] == "Lax"


# -- CSRF on every form ---------------------------------------------------------------

FORM = re.compile(r"<form\b([^>]*)>(.*?)</form>", re.S | re.I)


def post_forms(html: str) -> list[tuple[str, str]]:
    """(action, body) of every ``<form method="post">`` in ``html``."""
    found = []
    for attrs, body in FORM.findall(html):
        if re.search(r'method\s*=\s*"post"', attrs, re.I):
            action = re.search(r'action\s*=\s*"([^"]*)"', attrs)
            found.append((action.group(1) if action else "", body))
    return found


def test_every_post_form_on_every_page_carries_the_csrf_token(demo, world):
    seen = set()
    pages = {"/accounts/login/": Client().get("/accounts/login/").content.decode()}
    for role in ROLES:
        client = as_user(demo, role)
        pages.update({f"{url} as {role}": html for url, html in html_pages(client, world).items()})
    for page, html in pages.items():
        for action, body in post_forms(html):
            assert 'name="csrfmiddlewaretoken"' in body, f"{page}: form to {action!r}"
            seen.add(re.sub(r"\d+", "N", action))
    # The walk met every kind of form the portal has (so the check above is not vacuous).
    expected = {"/accounts/login/", "/accounts/logout/", "/jobs/new/", "/jobs/N/cancel/",
                "/jobs/N/time-limit/", "/jobs/N/begin-time/", "/jobs/N/top/",
                "/jobs/N/move/",
                "/oncall/alerts/N/ack/", "/oncall/alerts/N/resolve/", "/quotas/requests/N/approve/",
                "/quotas/requests/N/reject/", "/quotas/requests/N/withdraw/"}  # fmt: skip
    expected |= {f"/oncall/nodes/{world.node}/action/", f"/oncall/nodes/{world.node}/fault/"}
    expected = {re.sub(r"\d+", "N", e) for e in expected}
    assert expected <= seen, expected - seen


def state() -> tuple:
    return (
        list(Job.objects.order_by("pk").values_list("pk", "state")),
        list(Node.objects.order_by("pk").values_list("name", "state")),
        list(QuotaRequest.objects.order_by("pk").values_list("pk", "state")),
        AuditRecord.objects.count(),
    )


def test_every_post_form_is_refused_without_the_token(demo, world):
    actions = set()
    for role in ROLES:
        for html in html_pages(as_user(demo, role), world).values():
            actions |= {a for a, _ in post_forms(html) if a.startswith("/")}
    actions.add("/quotas/requests/new/")
    assert len(actions) >= 8, actions
    before = state()
    for role in ("admin", "lead", "researcher"):
        strict = as_user(demo, role, enforce_csrf_checks=True)
        for action in sorted(actions):
            data = {"reason": "x", "note": "x", "name": "csrf", "queue": "llm-finetune", "gpus": 1,
                    "action": "cordon", "kind": "residual_process"}  # fmt: skip
            response = strict.post(action, data)
            assert response.status_code == 403, (role, action, response.status_code)
            assert b"CSRF" in response.content
    assert state() == before


def test_the_api_needs_csrf_with_a_session_but_not_with_a_token(demo):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    body = {"name": "csrf-check", "queue": "llm-finetune", "gpus": 1}
    session = APIClient(enforce_csrf_checks=True)
    session.force_login(demo["researcher"])
    response = session.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 403 and "CSRF" in str(response.data)
    assert not Job.objects.filter(name="csrf-check").exists()
    token = APIClient(enforce_csrf_checks=True)
    token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=demo['researcher'])}")
    assert token.post("/api/v1/jobs/", body, format="json").status_code == 201


# -- hostile names --------------------------------------------------------------------


def test_html_in_job_names_is_escaped_on_every_page(demo, world):
    shown_on = set()
    for role in ROLES:
        for url, html in html_pages(as_user(demo, role), world).items():
            assert HOSTILE_NAME not in html, (role, url)
            assert "<script>alert(" not in html and "onerror=alert" not in html.replace(
                "&lt;img src=x onerror=alert", ""
            ), (role, url)
            if HOSTILE_ESCAPED in html:
                shown_on.add(re.sub(r"\d+", "N", url.replace(world.node, "NODE")))
    # Pages that show the running job's name (so the check above is not vacuous).
    assert {"/jobs/", "/jobs/N/", "/oncall/nodes/NODE/"} <= shown_on, shown_on


def test_job_names_in_json_data_blocks_cannot_close_the_script(demo, world):
    html = as_user(demo, "researcher").get(f"/jobs/{world.job}/").content.decode()
    for block in re.findall(r'<script[^>]*type="application/json"[^>]*>(.*?)</script>', html, re.S):
        assert "</script" not in block.lower() and "<" not in block
