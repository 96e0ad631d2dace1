"""Security headers on every kind of response, and no inline script anywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from tests.security.pages import html_pages

pytestmark = pytest.mark.django_db

TEMPLATES = Path(settings.BASE_DIR) / "templates"
EXPECTED = {
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def directives(policy: str) -> dict[str, list[str]]:
    parsed = {}
    for part in policy.split(";"):
        name, *values = part.split()
        assert name not in parsed, f"{name} given twice"
        parsed[name] = values
    return parsed


def assert_security_headers(response) -> None:
    for name, value in EXPECTED.items():
        assert response.get(name) == value, (name, response.get(name))
    csp = directives(response["Content-Security-Policy"])
    assert csp["default-src"] == ["'self'"]
    assert csp["script-src"] == ["'self'"]  # no 'unsafe-inline', no 'unsafe-eval', no hosts
    assert csp["object-src"] == ["'none'"] and csp["base-uri"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"] and csp["form-action"] == ["'self'"]
    assert csp["connect-src"] == ["'self'"] and csp["img-src"] == ["'self'", "data:"]
    assert csp["style-src"] == ["'self'"]  # no 'unsafe-inline': no <style>, no style="..."
    assert "Content-Security-Policy-Report-Only" not in response  # nothing left to try out
    permissions = response["Permissions-Policy"]
    for feature in ("camera", "microphone", "geolocation", "payment", "usb"):
        assert f"{feature}=()" in permissions


def test_pages_carry_the_security_headers(client, demo):
    assert_security_headers(client.get("/accounts/login/"))
    client.force_login(demo["admin"])
    assert_security_headers(client.get("/"))
    assert_security_headers(client.get("/audit/"))
    assert_security_headers(client.get("/admin/"))


def test_api_static_errors_and_redirects_carry_them_too(client, api):
    assert_security_headers(api("researcher").get("/api/v1/jobs/"))
    assert_security_headers(api(None).get("/api/v1/jobs/"))  # 401
    assert_security_headers(api("researcher").get("/api/v1/jobs/999999/"))  # 404
    assert_security_headers(api("researcher").post("/api/v1/jobs/", {}, format="json"))  # 400
    assert_security_headers(client.get("/jobs/"))  # 302 to the login page
    assert_security_headers(client.get("/no-such-page/"))  # 404
    assert_security_headers(client.get("/api/schema/"))
    assert_security_headers(client.get("/metrics"))


def test_static_files_carry_them(client, demo):
    response = client.get("/static/css/portal.css")
    assert response.status_code == 200
    assert_security_headers(response)


def test_production_adds_hsts_and_redirects_to_https(client, demo):
    prod = {"SECURE_SSL_REDIRECT": True, "SECURE_HSTS_SECONDS": 31536000,
            "SECURE_HSTS_INCLUDE_SUBDOMAINS": True, "SECURE_HSTS_PRELOAD": True}  # fmt: skip
    with override_settings(**prod):
        plain = client.get("/accounts/login/")
        assert plain.status_code == 301 and plain["Location"].startswith("https://")
        secure = client.get("/accounts/login/", secure=True)
        assert secure["Strict-Transport-Security"] == (
            "max-age=31536000; includeSubDomains; preload"
        )
        assert_security_headers(secure)


SCRIPT_TAG = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S | re.I)


def inline_scripts(html: str) -> list[str]:
    """<script> elements with code in them: neither ``src=`` nor a JSON data block."""
    found = []
    for attrs, body in SCRIPT_TAG.findall(html):
        if re.search(r"\bsrc\s*=", attrs) or re.search(r'type\s*=\s*"application/json"', attrs):
            continue
        found.append(f"<script{attrs}>{body[:60]}")
    return found


def test_no_template_has_an_inline_script_or_event_handler():
    """The CSP allows no inline script: code lives in static/js/ (a nonce would be the
    alternative, never 'unsafe-inline')."""
    offenders = {}
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text()
        problems = inline_scripts(text)
        problems += re.findall(r"\son[a-z]+\s*=\s*[\"']", text)
        problems += re.findall(r"javascript:", text, re.I)
        if problems:
            offenders[str(path.relative_to(TEMPLATES))] = problems
    assert offenders == {}


INLINE_STYLE = re.compile(r"<style\b|\sstyle\s*=", re.I)
TEMPLATE_COMMENT = re.compile(r"\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}", re.S)


def test_no_template_has_an_inline_style():
    """The CSP allows no inline style (style-src 'self'): no <style> element and no
    style="..." attribute; scripts may set ``element.style`` (CSSOM, not restricted)."""
    offenders = {}
    for path in TEMPLATES.rglob("*.html"):
        problems = INLINE_STYLE.findall(TEMPLATE_COMMENT.sub("", path.read_text()))
        if problems:
            offenders[str(path.relative_to(TEMPLATES))] = problems
    assert offenders == {}


def test_rendered_pages_have_no_inline_script_or_style(client, demo, world):
    for role in ("admin", "lead"):
        client.force_login(demo[role])
        pages = html_pages(client, world)
        assert len(pages) >= 5
        for url, html in pages.items():
            assert inline_scripts(html) == [], url
            assert INLINE_STYLE.findall(html) == [], url
