"""OpenID Connect sign-in against a real provider (``oidc-provider`` from npm, run by
``oidc_provider.mjs``): the portal's side in this process (Django's test client), the
person's side over HTTP to the provider (its own login page). The groups claim gives the
role and the lines at every sign-in; every failure is the login page with a message."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urljoin, urlparse

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from core.models import AuditRecord, LineMembership
from core.roles import role_of
from tests.conftest import DEMO_PASSWORD
from tests.identity.conftest import at_once, prefixed

pytestmark = pytest.mark.django_db

PORTAL = "http://testserver"


def sso_password(uid: str) -> str:
    return f"{uid}-sso-pw"


def to_provider(client: Client, next_url: str = "") -> str:
    """Start at the portal: the address of the provider's authorization endpoint."""
    response = client.get("/oidc/authenticate/" + (f"?next={next_url}" if next_url else ""))
    assert response.status_code == 302, response
    return response["Location"]


def at_provider(location: str, login: str, password: str) -> requests.Response | str:
    """The person at the provider: its login page, then back to the portal. Returns the
    portal address the provider sends the browser to, or the provider's page when it
    keeps them (a wrong password)."""
    browser = requests.Session()
    response = browser.get(location, allow_redirects=True, timeout=10)
    assert response.status_code == 200 and "Example Corp sign-in" in response.text, response.text
    response = browser.post(
        response.url, data={"login": login, "password": password}, allow_redirects=False,
        timeout=10,
    )  # fmt: skip
    while response.status_code in (302, 303):
        target = urljoin(response.url, response.headers["Location"])
        if target.startswith(PORTAL):
            return target
        response = browser.get(target, allow_redirects=False, timeout=10)
    return response


def sign_in(uid: str, password: str | None = None, client: Client | None = None):
    client = client or Client()
    back = at_provider(to_provider(client), uid, password or sso_password(uid))
    assert isinstance(back, str), getattr(back, "text", back)
    return client, client.get(back.removeprefix(PORTAL))


def lines_of(username: str) -> dict[str, str]:
    return {
        m.business_line.name: "lead" if m.is_lead else "member"
        for m in LineMembership.objects.filter(user__username=username).select_related(
            "business_line"
        )
    }


def signed_in_as(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    return get_user_model().objects.get(pk=user_id).username if user_id else None


def test_the_login_page_offers_the_provider_when_configured(demo, oidc_on):
    page = Client().get("/accounts/login/?next=/jobs/").content.decode()
    assert "Sign in with Example Corp SSO" in page
    assert 'href="/oidc/authenticate/?next=/jobs/"' in page


def test_single_sign_on_signs_a_lead_in_with_the_lines_of_their_groups(demo, oidc_on):
    client = Client()
    location = to_provider(client, "/quotas/requests/new/")
    query = parse_qs(urlparse(location).query)
    assert location.startswith(oidc_on.issuer + "/auth?")
    assert query["code_challenge_method"] == ["S256"] and query["nonce"]
    assert query["scope"] == ["openid email profile groups offline_access"]  # OIDC_SWEEP
    back = at_provider(location, "dora", sso_password("dora"))
    landed = client.get(back.removeprefix(PORTAL))
    assert landed.status_code == 302 and landed["Location"] == "/quotas/requests/new/"
    assert signed_in_as(client) == "dora"
    dora = get_user_model().objects.get(username="dora")
    assert (role_of(dora), lines_of("dora")) == ("team_lead", {"llm": "lead"})
    assert dora.email == "dora@example.org" and not dora.has_usable_password()
    assert client.get("/quotas/requests/new/").status_code == 200
    record = AuditRecord.objects.get(action="identity.sync", target_id=str(dora.pk))
    assert record.after["lines"] == {"llm": "lead"} and "single sign-on" in record.reason


def test_group_changes_take_effect_at_the_next_sign_in(demo, oidc_on):
    sign_in("boss")
    sign_in("dora")
    assert role_of(get_user_model().objects.get(username="boss")) == "admin"
    oidc_on.set_groups("dora", ["search-rec-leads"])
    oidc_on.set_groups("boss", ["portal-oncall"])
    client, response = sign_in("dora")
    assert response.status_code == 302 and signed_in_as(client) == "dora"
    assert lines_of("dora") == {"search-rec": "lead"}
    sign_in("boss")
    boss = get_user_model().objects.get(username="boss")
    assert role_of(boss) == "oncall" and not boss.is_superuser


def test_a_wrong_password_stays_at_the_provider(demo, oidc_on):
    page = at_provider(to_provider(Client()), "dora", "wrong")
    assert isinstance(page, requests.Response) and "Wrong login or password" in page.text
    assert not get_user_model().objects.filter(username="dora").exists()


def test_the_local_break_glass_admin_is_never_taken_over(demo, oidc_on):
    client, response = sign_in("admin")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert signed_in_as(client) is None
    page = client.get("/accounts/login/").content.decode()
    assert "belongs to a local portal account" in page
    assert get_user_model().objects.get(username="admin").check_password(DEMO_PASSWORD)


def test_required_groups_keep_others_out(demo, provider, configure):
    configure(provider.portal_env(**prefixed("OIDC", REQUIRED_GROUPS="gpu-users")))
    client, response = sign_in("outsider")
    assert response["Location"] == "/accounts/login/" and signed_in_as(client) is None
    page = client.get("/accounts/login/").content.decode()
    assert "not in a group that may use the portal" in page


def test_provider_down_is_a_message_and_local_accounts_still_sign_in(demo, provider, configure):
    from tests.identity.testbeds import free_port

    env = provider.portal_env(**prefixed("OIDC"))
    configure({**env, "OIDC_ISSUER": f"http://127.0.0.1:{free_port()}"})  # nothing listens
    client = Client()
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    page = client.get("/accounts/login/").content.decode()
    assert "the identity provider cannot be reached" in page
    local = Client().post("/accounts/login/", {"username": "admin", "password": DEMO_PASSWORD})
    assert local.status_code == 302


def test_a_callback_that_was_not_asked_for_is_refused_without_a_500(demo, oidc_on):
    client = Client()
    for query in ("?code=x&state=unknown", "?error=access_denied&state=x", "?code=x"):
        response = client.get("/oidc/callback/" + query)
        assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert signed_in_as(client) is None
    # a replayed callback: the state was used once
    to = to_provider(client)
    back = at_provider(to, "rick", sso_password("rick"))
    assert client.get(back.removeprefix(PORTAL)).status_code == 302
    fresh = Client()
    assert fresh.get(back.removeprefix(PORTAL))["Location"] == "/accounts/login/"
    assert signed_in_as(fresh) is None


def test_id_tokens_are_checked_for_issuer_and_audience(settings):
    """mozilla-django-oidc leaves ``iss`` and ``aud`` unchecked; the portal's backend checks
    both, with the provider's signature (a real RSA key here)."""
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from portal.auth.oidc import PortalOIDCBackend

    settings.OIDC_RP_CLIENT_ID = "gpu-portal"
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    backend = PortalOIDCBackend()
    backend.issuer = "https://sso.example.org"
    now = int(time.time())
    claims = {"iss": "https://sso.example.org", "aud": "gpu-portal", "sub": "dora",
              "exp": now + 60, "iat": now}  # fmt: skip

    def token(**change):
        return jwt.encode({**claims, **change}, key, algorithm="RS256")

    assert backend._verify_jws(token(), key.public_key())["sub"] == "dora"
    with pytest.raises(jwt.InvalidAudienceError):
        backend._verify_jws(token(aud="another-app"), key.public_key())
    with pytest.raises(jwt.InvalidIssuerError):
        backend._verify_jws(token(iss="https://evil.example.org"), key.public_key())
    with pytest.raises(jwt.ExpiredSignatureError):
        backend._verify_jws(token(exp=now - 600), key.public_key())
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(jwt.InvalidSignatureError):
        backend._verify_jws(jwt.encode(claims, other, algorithm="RS256"), key.public_key())


def test_a_provider_that_names_another_issuer_is_not_used(demo, provider, configure):
    env = provider.portal_env(**prefixed("OIDC"))
    configure({**env, "OIDC_ISSUER": provider.issuer.replace("127.0.0.1", "localhost")})
    client = Client()
    assert client.get("/oidc/authenticate/")["Location"] == "/accounts/login/"
    assert "cannot be reached" in client.get("/accounts/login/").content.decode()


def test_single_sign_on_is_off_unless_configured(demo, provider):
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with" not in page and "directory" not in page


def test_a_look_alike_name_in_the_claim_is_not_the_account_it_looks_like(demo, oidc_on):
    """PostgreSQL's ``UPPER`` (Django's ``iexact``) folds a dotless ``ı`` into ``I``: a
    provider account named ``rıck`` (its own, distinct name) was signed in as ``rick``."""
    sign_in("rick")
    oidc_on.accounts["mallory"] = {
        "password": sso_password("mallory"), "preferred_username": "r\u0131ck",
        "email": "mallory@example.org", "groups": [],
    }  # fmt: skip
    oidc_on.write_accounts()
    client, response = sign_in("mallory")
    assert response.status_code == 302
    assert signed_in_as(client) == "r\u0131ck"
    rick = get_user_model().objects.get(username="rick")
    assert rick.email == "rick@example.org"


@pytest.mark.parametrize(
    "claims, field, kept",
    [
        ({"email": ["eve@example.org"]}, "email", ""),  # not a string: a 500
        ({"email": 42}, "email", ""),
        ({"email": "eve." + "x" * 300 + "@example.org"}, "email", ""),  # too long: a 500
        ({"email": "eve\x00@example.org"}, "email", ""),  # NUL: a 500
        ({"given_name": "Eve\x00"}, "first_name", ""),
        ({"family_name": "\x1b[2J"}, "last_name", ""),  # a terminal escape
        ({"given_name": "É" * 151}, "first_name", "É" * 150),
    ],
)
def test_claims_the_account_cannot_hold_are_not_a_500(demo, oidc_on, claims, field, kept):
    """The e-mail claim went to ``create_user`` as it came (a list or a number: an
    AttributeError; too long or with a NUL: a DataError), and names with a NUL too: each a
    500 at the callback. Such a claim is not kept; the sign-in goes on."""
    oidc_on.accounts["eve"] = {
        "password": sso_password("eve"), "preferred_username": "eve", "email": "eve@example.org",
        "groups": ["llm-team"], **claims,
    }  # fmt: skip
    oidc_on.write_accounts()
    for _ in range(2):  # made at the first sign-in, updated at the second
        client, response = sign_in("eve")
        assert response.status_code == 302 and signed_in_as(client) == "eve"
        eve = get_user_model().objects.get(username="eve")
        assert getattr(eve, field) == kept and lines_of("eve") == {"llm": "member"}


def test_someone_no_longer_in_a_required_group_loses_the_role_the_groups_gave(
    demo, provider, configure
):
    """As for the directory: a refused sign-in left an admin an admin."""
    configure(provider.portal_env(**prefixed("OIDC", REQUIRED_GROUPS="gpu-users")))
    sign_in("boss")
    boss = get_user_model().objects.get(username="boss")
    assert role_of(boss) == "admin" and boss.is_superuser
    provider.set_groups("boss", [])
    client, response = sign_in("boss")
    assert response["Location"] == "/accounts/login/" and signed_in_as(client) is None
    boss = get_user_model().objects.get(username="boss")
    assert (role_of(boss), boss.is_superuser, boss.is_staff) == ("researcher", False, False)
    record = AuditRecord.objects.filter(action="identity.sync", target_id=str(boss.pk)).first()
    assert (record.before["role"], record.after["role"]) == ("admin", "researcher")


def test_a_code_the_provider_refuses_is_not_said_to_be_an_outage(demo, oidc_on):
    """A code the token endpoint refuses (400 ``invalid_grant``: made up, used, expired or
    for another PKCE verifier) was told as "the identity provider cannot be reached ...
    try again in a few minutes": the provider had answered."""
    client = Client()
    back = at_provider(to_provider(client), "rick", sso_password("rick"))
    state = parse_qs(urlparse(back).query)["state"][0]
    response = client.get(f"/oidc/callback/?code=made-up&state={state}")
    assert response["Location"] == "/accounts/login/" and signed_in_as(client) is None
    page = client.get("/accounts/login/").content.decode()
    assert "did not complete" in page and "cannot be reached" not in page


@pytest.mark.django_db(transaction=True)
def test_sign_ins_of_one_person_at_once_are_not_a_500(demo, oidc_on):
    """Two first sign-ins of one person completing at once (two tabs) both made the
    account, and the second was a 500 (``auth_user_username_key``)."""

    def flow() -> tuple[Client, str]:
        client = Client(raise_request_exception=False)
        return client, at_provider(to_provider(client), "dora", sso_password("dora"))

    def back(client: Client, url: str) -> Callable[[], str]:
        def go() -> str:
            response = client.get(url.removeprefix(PORTAL))
            return response.get("Location") or str(response.status_code)

        return go

    for _ in range(3):
        get_user_model().objects.filter(username="dora").delete()
        flows = [flow() for _ in range(4)]
        assert at_once([back(client, url) for client, url in flows]) == ["/"] * 4
        assert [signed_in_as(client) for client, _ in flows] == ["dora"] * 4
        assert lines_of("dora") == {"llm": "lead"}


def test_a_user_info_about_another_subject_is_not_used(demo, oidc_on):
    """OpenID Connect Core 1.0, 5.3.2: the user info's ``sub`` must be the ID token's, or
    its claims must not be used. mozilla-django-oidc does not compare them, so the claims
    of a user info about another subject signed the ID token's person in."""
    oidc_on.accounts["mallory"] = {
        "password": sso_password("mallory"), "preferred_username": "mallory",
        "email": "mallory@example.org", "groups": ["portal-admins"], "userinfo_sub": "boss",
    }  # fmt: skip
    oidc_on.write_accounts()
    client, response = sign_in("mallory")
    assert response["Location"] == "/accounts/login/" and signed_in_as(client) is None
    assert not get_user_model().objects.filter(username="mallory").exists()
    assert "did not complete" in client.get("/accounts/login/").content.decode()
    del oidc_on.accounts["mallory"]["userinfo_sub"]
    oidc_on.write_accounts()
    assert signed_in_as(sign_in("mallory")[0]) == "mallory"  # the same, about its subject


@pytest.fixture
def odd_provider(provider):
    """A stand-in issuer on this machine whose discovery document and token answer a test
    sets (``odd_provider.answers``); the person signs in at the real provider, whose other
    endpoints it names."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers: dict[str, object] = {}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = json.dumps(answers.get(self.path.split("?")[0], {})).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    answers["/.well-known/openid-configuration"] = {
        "issuer": issuer,
        "authorization_endpoint": provider.issuer + "/auth",
        "token_endpoint": issuer + "/token",
        "userinfo_endpoint": provider.issuer + "/me",
        "jwks_uri": provider.issuer + "/jwks",
    }
    server.issuer, server.answers = issuer, answers
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "path, answer",
    [
        ("/.well-known/openid-configuration", {"issuer": 5}),
        ("/.well-known/openid-configuration", ["not", "an", "object"]),
        ("/token", ["not", "an", "object"]),
        ("/jwks", ["not", "an", "object"]),
        ("/jwks", {"keys": ["test-key"]}),
        ("/jwks", {"keys": [{"kid": "test-key", "kty": "EC"}]}),  # no curve: a PyJWKError
    ],
)
def test_answers_of_the_wrong_shape_from_the_provider_are_not_a_500(
    demo, provider, configure, odd_provider, path, answer
):
    """A discovery document whose ``issuer`` is not text, or one that is not a JSON object,
    a token answer that is not an object, a key set that is not an object or holds no
    usable keys: each an AttributeError, a TypeError or PyJWT's ``PyJWKError`` /
    ``InvalidKeyError`` (not ``InvalidTokenError``s) in reading it, a 500."""
    configure({**provider.portal_env(**prefixed("OIDC")), "OIDC_ISSUER": odd_provider.issuer})
    odd_provider.answers[path] = answer
    if path == "/jwks":  # the real provider's tokens, checked with these keys
        discovery = odd_provider.answers["/.well-known/openid-configuration"]
        discovery["token_endpoint"] = provider.issuer + "/token"
        discovery["jwks_uri"] = odd_provider.issuer + "/jwks"
    client = Client()
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    if path.startswith("/.well-known/"):
        assert start["Location"] == "/accounts/login/"
        assert "cannot be reached" in client.get("/accounts/login/").content.decode()
        return
    back = at_provider(start["Location"], "rick", sso_password("rick"))
    response = client.get(back.removeprefix(PORTAL))
    assert response["Location"] == "/accounts/login/" and signed_in_as(client) is None
    assert "did not complete" in client.get("/accounts/login/").content.decode()


def test_a_deactivated_account_is_refused_before_its_groups_are_applied(demo, oidc_on):
    """An account the directory sweep (or an admin) deactivated got its groups applied at
    a single sign-on (an admin role back, audited as a sign-in) before mozilla-django-oidc
    refused it as inactive."""
    assert signed_in_as(sign_in("boss")[0]) == "boss"
    get_user_model().objects.filter(username="boss").update(is_active=False, is_superuser=False)
    records = AuditRecord.objects.count()
    client, response = sign_in("boss")
    assert signed_in_as(client) is None
    assert "Your portal account is deactivated" in client.get("/accounts/login/").content.decode()
    boss = get_user_model().objects.get(username="boss")
    assert not boss.is_superuser and AuditRecord.objects.count() == records


def test_an_account_deactivated_while_signed_in_is_signed_out(demo, oidc_on):
    """mozilla-django-oidc's backend gave a session its person even when inactive (LDAP's
    does not), so an admin's deactivation left a person signed in through OpenID Connect
    browsing as before."""
    client, _ = sign_in("dora")
    assert client.get("/jobs/").status_code == 200
    get_user_model().objects.filter(username="dora").update(is_active=False)
    response = client.get("/jobs/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/jobs/"
