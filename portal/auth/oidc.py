"""Sign-in with the organization's OpenID Connect provider (mozilla-django-oidc).

The provider is named by its issuer (``OIDC_ISSUER``); its endpoints come from its
discovery document (``/.well-known/openid-configuration``), fetched when someone signs in
and kept for ``DISCOVERY_TTL`` seconds, so a provider that is down when the portal starts
does not stop the portal, and a provider down at sign-in is a message on the login page.

On top of mozilla-django-oidc (authorization code flow with PKCE and a nonce, ID token
signature checked against the provider's keys), ``PortalOIDCBackend``:

- checks the ID token's issuer and audience, and that the user info is about the ID
  token's subject (the library leaves all three unchecked);
- names the user by a claim (``OIDC_USERNAME_CLAIM``, ``preferred_username``), not by a
  hash of the e-mail, so a person has one account whichever sign-in they use;
- maps the groups claim (``OIDC_GROUPS_CLAIM``) to the role and lines at every sign-in
  (``OIDC_IDENTITY_MAPPING``, ``portal.auth.sync``);
- never signs in or changes a local account (usable password) of the same name;
- turns every failure (provider unreachable, bad token, refused claims) into a message on
  the login page, never a 500;
- keeps no session of an inactive account (an admin's deactivation signs the person out);
- marks the account as the provider's and keeps the provider's refresh token, encrypted
  (``portal.auth.refresh_tokens``), for the provider sweep (``portal.auth.provider_sweep``),
  which deactivates a person the provider no longer has, and applies the groups of the
  others, without their opening a page; the token it replaces, when of another session at
  the provider (the ID token's ``sid``), is revoked there (``portal.auth.revocation``).

The provider is asked again while a person stays signed in (``SessionCheck``,
mozilla-django-oidc's ``SessionRefresh``): at their first page load once
``OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS`` (``OIDC_RECHECK_SECONDS``) have passed since the
sign-in or the last check, the browser goes to the provider with ``prompt=none`` and
straight back through the callback. Someone still signed in there comes back with a code,
and their groups are applied again as at a sign-in; someone deleted or disabled there, or
whose session there ended, comes back with an error, or a code the provider then refuses,
and is signed out with a message (``SignInCallback``). A provider that does not answer the
portal at that moment postpones the check: the page is served.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import BACKEND_SESSION_KEY, get_user_model
from django.core.exceptions import MiddlewareNotUsed, SuspiciousOperation, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.utils.module_loading import import_string
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.middleware import SessionRefresh
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from core.identity import groups_from_claim
from portal.auth import notices
from portal.auth.accounts import accounts_named, make_account, profile_text
from portal.auth.refresh_tokens import remember_sign_in
from portal.auth.sync import apply_groups

logger = logging.getLogger("portal.auth")
SOURCE = "single sign-on"
DISCOVERY_TTL = 300.0
# A provider that did not answer a session check is not asked again for this long (nor
# longer than the renewal time): its pages are served meanwhile, without waiting for it.
RECHECK_RETRY_SECONDS = 30.0
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")
# Published by some providers only (``portal.auth.revocation``): kept when present.
OPTIONAL_ENDPOINTS = ("revocation_endpoint",)


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or is not usable."""


_discovered: dict[str, tuple[float, dict[str, str]]] = {}
_discovered_lock = threading.Lock()


def enabled() -> bool:
    return bool(getattr(settings, "OIDC_ENABLED", False))


def provider_metadata(issuer: str | None = None, *, fresh: bool = False) -> dict[str, str]:
    """The provider's endpoints, from its discovery document (cached ``DISCOVERY_TTL`` s;
    ``fresh``: read now, whether the provider answers at this moment); an optional one
    (``OPTIONAL_ENDPOINTS``) only when the document names it.

    Raises ``ProviderUnavailable`` when it cannot be read, is not a JSON object, names another
    issuer (OpenID Connect Discovery 1.0, section 4.3) or lacks an endpoint.
    """
    issuer = (issuer or settings.OIDC_ISSUER).rstrip("/")
    now = time.monotonic()
    with _discovered_lock:
        cached = _discovered.get(issuer)
        if cached and now - cached[0] < DISCOVERY_TTL and not fresh:
            return cached[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from exc
    named = document.get("issuer") if isinstance(document, dict) else None
    if not isinstance(named, str) or named.rstrip("/") != issuer:
        raise ProviderUnavailable(f"{url} names another issuer: {named!r}")
    missing = [key for key in ENDPOINTS if not isinstance(document.get(key), str)]
    if missing:
        raise ProviderUnavailable(f"{url} lacks {', '.join(missing)}")
    found = {key: document[key] for key in ENDPOINTS} | {"issuer": document["issuer"]}
    found |= {
        key: document[key]
        for key in OPTIONAL_ENDPOINTS
        if isinstance(document.get(key), str) and document[key]
    }
    with _discovered_lock:
        _discovered[issuer] = (now, found)
    return found


def forget_provider() -> None:
    """Drop the cached discovery documents (tests; a provider that moved its endpoints)."""
    with _discovered_lock:
        _discovered.clear()


def post_as_client(url: str, data: dict[str, str]) -> requests.Response:
    """POST ``data`` to the provider's token or revocation endpoint ``url`` as the portal's
    client: its credentials as mozilla-django-oidc's token request sends them
    (``OIDC_TOKEN_AUTH``: HTTP Basic, or in the form), ``OIDC_TIMEOUT``,
    ``OIDC_VERIFY_SSL``, no redirect followed. Raises what ``requests`` raises."""
    auth = None
    if settings.OIDC_TOKEN_USE_BASIC_AUTH:
        auth = (settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET)
    else:
        data = data | {
            "client_id": settings.OIDC_RP_CLIENT_ID,
            "client_secret": settings.OIDC_RP_CLIENT_SECRET,
        }
    return requests.post(
        url,
        data=data,
        auth=auth,
        timeout=settings.OIDC_TIMEOUT,
        verify=settings.OIDC_VERIFY_SSL,
        allow_redirects=False,
    )


def signed_in_by_oidc(request: HttpRequest) -> bool:
    """Whether ``request``'s person signed in through the provider (the session's backend,
    as ``SessionRefresh`` tells)."""
    backend = request.session.get(BACKEND_SESSION_KEY)
    return bool(
        request.user.is_authenticated
        and backend
        and issubclass(import_string(backend), OIDCAuthenticationBackend)
    )


def _failed(request: HttpRequest) -> str:
    """The login page's words for a callback that did not sign the person in: for a session
    check (``SignInCallback``), that their session at the provider is over."""
    if getattr(request, "oidc_session_check", False):
        return notices.sso_session_ended()
    return notices.sso_failed()


def _refused(exc: requests.RequestException) -> bool:
    """The provider answered with a 4xx (a refusal: ``invalid_grant`` for a code made up,
    used twice or expired), not a failure to reach it (no answer, or a 5xx)."""
    response = exc.response
    return response is not None and 400 <= response.status_code < 500


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with discovery, issuer/audience checks, user names from a
    claim, the group mapping, the local-account guard and no 500s (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__: it reads the endpoints from settings, and every password
        # sign-in instantiates every backend; the endpoints are discovered at a callback only.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = getattr(settings, "OIDC_RP_CLIENT_ID", "")
        self.OIDC_RP_CLIENT_SECRET = getattr(settings, "OIDC_RP_CLIENT_SECRET", "")
        self.OIDC_RP_SIGN_ALGO = getattr(settings, "OIDC_RP_SIGN_ALGO", "RS256")
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_OP_TOKEN_ENDPOINT = self.OIDC_OP_USER_ENDPOINT = self.OIDC_OP_JWKS_ENDPOINT = ""
        self.issuer = ""
        self.refresh_token: str | None = None  # the token endpoint's, kept by ``authenticate``
        self.session_id = ""  # the ID token's ``sid``: the provider's session of this sign-in

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if not enabled() or request is None or "code" not in request.GET:
            return None
        try:
            metadata = provider_metadata()
        except ProviderUnavailable as exc:
            logger.warning("OpenID Connect sign-in failed: %s", exc)
            notices.tell(request, notices.sso_unavailable())
            return None
        self.issuer = metadata["issuer"]
        self.OIDC_OP_TOKEN_ENDPOINT = metadata["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = metadata["userinfo_endpoint"]
        self.OIDC_OP_JWKS_ENDPOINT = metadata["jwks_uri"]
        self.refresh_token = None
        self.session_id = ""
        try:
            user = super().authenticate(request, **kwargs)
            if user is not None:  # the provider's account: its refresh token for the sweep
                swept = getattr(settings, "OIDC_SWEEP", False)
                replaced = remember_sign_in(
                    user, self.refresh_token if swept else None, self.session_id
                )
                if replaced:  # another session's token: revoked once this commits
                    from portal.auth.revocation import revoke_replaced  # it imports this module

                    revoke_replaced(user, replaced)
            return user
        except requests.RequestException as exc:
            logger.warning("OpenID Connect sign-in failed: %s", exc)
            if _refused(exc):  # it answered: the code (made up, used, expired) was refused
                notices.tell(request, _failed(request))
            else:
                notices.tell(request, notices.sso_unavailable())
        except (SuspiciousOperation, jwt.PyJWTError, ValueError, KeyError) as exc:
            logger.warning("OpenID Connect sign-in refused: %r", exc)
            notices.tell(request, _failed(request))
        return None

    def get_user(self, user_id: Any) -> Any:
        """The session's person while their account is active (the library's answered an
        inactive one too: an admin's deactivation left their sessions signed in)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The library's token request; an answer that is not a JSON object is refused (the
        library read it with ``.get``: an AttributeError, a 500). Its refresh token, if any,
        is kept for ``authenticate`` (``portal.auth.provider_sweep``)."""
        token = super().get_token(payload)
        if not isinstance(token, dict):
            raise SuspiciousOperation("the token endpoint did not answer a JSON object")
        refresh_token = token.get("refresh_token")  # with offline_access (OIDC_SWEEP)
        self.refresh_token = refresh_token if isinstance(refresh_token, str) else None
        return token

    def retrieve_matching_jwk(self, token: Any) -> Any:
        """The library's key for the token from the provider's key set; a key set of the
        wrong shape (not an object, keys that are not objects) is refused, not a TypeError
        (a key it cannot use is PyJWT's ``PyJWKError``, refused in ``authenticate``)."""
        try:
            return super().retrieve_matching_jwk(token)
        except (TypeError, AttributeError) as exc:
            raise SuspiciousOperation(f"the provider's key set is not usable: {exc}") from exc

    def _verify_jws(self, payload: Any, key: Any) -> dict[str, Any]:
        """The library's signature check, plus the issuer and our client as audience."""
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"token signed with {header.get('alg')!r}")
        return jwt.decode(
            payload,
            key,
            algorithms=[self.OIDC_RP_SIGN_ALGO],
            audience=self.OIDC_RP_CLIENT_ID,
            issuer=self.issuer,
            options={"require": ["iss", "aud", "exp", "sub"]},
        )

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The library's; the ID token's (``payload``'s) ``sid`` is kept for ``authenticate``:
        the provider's session this sign-in's refresh token belongs to (OpenID Connect
        Front-/Back-Channel Logout; empty when the provider names none)."""
        sid = payload.get("sid")
        self.session_id = sid if isinstance(sid, str) else ""
        return super().get_or_create_user(access_token, id_token, payload)

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The provider's user info, used only when it is about the ID token's subject
        (OpenID Connect Core 1.0, 5.3.2; the library does not compare the ``sub``)."""
        info = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the user info is not about the ID token's subject")
        return info

    def username_from(self, claims: dict[str, Any]) -> str:
        """The portal user name: the ``OIDC_USERNAME_CLAIM`` claim in NFKC, as ``create_user``
        stores it (``ｌｅａｄ`` is ``lead``: looked up unnormalized it missed that account and
        its creation collided with it, a 500), lower-cased as the directory's are; refused
        (``SuspiciousOperation``) when missing or not a valid name."""
        value = claims.get(settings.OIDC_USERNAME_CLAIM)
        if not isinstance(value, str) or not value.strip():
            raise SuspiciousOperation(f"no {settings.OIDC_USERNAME_CLAIM!r} claim")
        name = self.UserModel.normalize_username(value).strip().lower()
        field = self.UserModel._meta.get_field(self.UserModel.USERNAME_FIELD)
        try:
            field.run_validators(name)
        except ValidationError:
            raise SuspiciousOperation(f"{name!r} is not a valid user name") from None
        if len(name) > field.max_length:
            raise SuspiciousOperation(f"{name!r} is too long for a user name")
        return name

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        self.username_from(claims)
        return True

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        """The account of the claim's user name whatever its case (``accounts_named``: an
        ``iexact`` filter signed a provider's ``rıck`` in as ``rick``)."""
        return accounts_named(self.username_from(claims))

    def create_user(self, claims: dict[str, Any]) -> Any:
        # No password: unusable, so the account signs in through the provider only
        # (``make_account``: two first sign-ins at once were a 500). The e-mail and names
        # are ``update_user``'s (``profile_text``).
        user, _ = make_account(self.username_from(claims))
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        if user.has_usable_password():
            logger.warning("single sign-on as %s refused: a local account has that name", user)
            notices.tell(self.request, notices.local_account_taken(notices.sso_label()))
            raise SuspiciousOperation("a local account has this user name")
        if not user.is_active:  # closed by the directory sweep or an admin: groups not applied
            logger.info("single sign-on as %s refused: the account is inactive", user)
            notices.tell(self.request, notices.DEACTIVATED)
            raise SuspiciousOperation("the account is inactive")
        fields = {
            "email": claims.get("email"),
            "first_name": claims.get("given_name"),
            "last_name": claims.get("family_name"),
        }
        changed = []
        for name, claim in fields.items():
            value = profile_text(name, claim)  # None: a claim the account cannot hold, not kept
            if value is not None and getattr(user, name) != value:
                setattr(user, name, value)
                changed.append(name)
        if changed:
            user.save(update_fields=changed)
        groups = groups_from_claim(claims.get(settings.OIDC_GROUPS_CLAIM))
        if not apply_groups(
            user, settings.OIDC_IDENTITY_MAPPING, groups, source=SOURCE, request=self.request
        ):
            notices.tell(self.request, notices.not_let_in(notices.sso_label()))
            raise SuspiciousOperation("in none of the required groups")
        return user


class SignInStart(OIDCAuthenticationRequestView):
    """``/oidc/authenticate/``: off (404) unless configured; a provider that cannot be
    reached sends the person back to the login page with a message."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = getattr(settings, "OIDC_RP_CLIENT_ID", "")
        self.OIDC_OP_AUTH_ENDPOINT = ""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_metadata()["authorization_endpoint"]
        except ProviderUnavailable as exc:
            logger.warning("OpenID Connect sign-in cannot start: %s", exc)
            notices.tell(request, notices.sso_unavailable())
            return HttpResponseRedirect(resolve_url(settings.LOGIN_URL))
        return super().get(request)


class SignInCallback(OIDCAuthenticationCallbackView):
    """``/oidc/callback/``: a failure of any kind is the login page with a message.

    For a person signed in through the provider it ends a session check (``SessionCheck``):
    a code that signs the same person in again renews the check; any other answer (an error
    such as ``login_required``, a code the provider refuses, groups that no longer let them
    in, an inactive account) signs them out, and a code for someone else (signed in at the
    provider in that browser since) signs them out before the other is signed in. Signing
    out closes the session's live connections too (``user_logged_out``, ``core.apps``). An
    answer to no request of this session (a link made elsewhere, a used state) changes
    nothing for someone signed in: a GET from anywhere must not sign a person out (the
    library signed out on any ``error``)."""

    checking: Any = None  # the person whose session is being checked

    @property
    def failure_url(self) -> str:
        return resolve_url(settings.LOGIN_URL)

    def login_failure(self) -> HttpResponse:
        if self.checking is not None:
            if self.request.user.is_authenticated:
                auth.logout(self.request)
            logger.info("OpenID Connect session check of %s failed: signed out", self.checking)
        if not getattr(self.request, "identity_notice", None):
            notices.tell(self.request, _failed(self.request))
        return super().login_failure()

    def login_success(self) -> HttpResponse:
        if self.checking is not None and self.user != self.checking:
            # someone else is signed in at the provider now: this person's session ends
            # (their live connections with it) before the library signs the other one in
            auth.logout(self.request)
        return super().login_success()

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured")
        states = request.session.get("oidc_states")
        asked = isinstance(states, dict) and request.GET.get("state") in states
        if request.user.is_authenticated and not asked:
            logger.warning("OpenID Connect callback for %s ignored: not asked", request.user)
            return HttpResponseRedirect(resolve_url(settings.LOGIN_REDIRECT_URL))
        self.checking = request.user if signed_in_by_oidc(request) else None
        request.oidc_session_check = self.checking is not None
        try:
            return super().get(request)
        except SuspiciousOperation as exc:  # an unknown or replayed state
            logger.warning("OpenID Connect callback refused: %s", exc)
            return self.login_failure()


class SessionCheck(SessionRefresh):
    """mozilla-django-oidc's ``SessionRefresh`` (module docstring), in ``MIDDLEWARE`` when
    OpenID Connect is on, with:

    - the authorization endpoint from the provider's discovery document, read at each check:
      a provider that does not answer it postpones the check (the page is served, a warning
      logged; asked again after ``RECHECK_RETRY_SECONDS``), so an outage at the provider
      signs nobody out and a page load does not wait for it more than once a while;
    - pages a person navigates to only: not ``OIDC_EXEMPT_URLS`` (``portal.auth.config``:
      the API, probes, static files and what live pages fetch), nor a request a browser says
      is not a navigation (``Sec-Fetch-Mode``), nor a live part's refetch of its page
      (``X-Live-Refresh``, ``static/js/live_parts.js``): a fetch() sent to the provider would
      fail and break the live page.

    Only sessions signed in through the provider are checked (the library's test of the
    session's backend): local accounts and LDAP never are.
    """

    def __init__(self, get_response: Any) -> None:
        if not enabled():
            raise MiddlewareNotUsed("OpenID Connect is off")
        super().__init__(get_response)
        self._not_before = 0.0  # time.monotonic() before which the provider is not asked

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        if attr == "OIDC_OP_AUTHORIZATION_ENDPOINT":  # discovered at each check, not a setting
            return ""
        return import_from_settings(attr, *args)

    @property
    def OIDC_OP_AUTHORIZATION_ENDPOINT(self) -> str:  # noqa: N802 - the library's attribute
        return provider_metadata()["authorization_endpoint"]

    @OIDC_OP_AUTHORIZATION_ENDPOINT.setter
    def OIDC_OP_AUTHORIZATION_ENDPOINT(self, value: str) -> None:  # noqa: N802
        pass  # the library's __init__ sets it from the settings: it is discovered instead

    def is_refreshable_url(self, request: HttpRequest) -> bool:
        navigation = (
            request.headers.get("Sec-Fetch-Mode", "navigate") == "navigate"
            and "X-Live-Refresh" not in request.headers
        )
        return navigation and super().is_refreshable_url(request)

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if not self.is_refreshable_url(request):
            return None
        if request.session.get("oidc_id_token_expiration", 0) > time.time():
            return None  # checked less than the renewal time ago
        if time.monotonic() < self._not_before:
            return None  # the provider did not answer a moment ago
        try:
            provider_metadata(fresh=True)
        except ProviderUnavailable as exc:
            renew = self.get_settings("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS", 900)
            retry = min(RECHECK_RETRY_SECONDS, renew)
            self._not_before = time.monotonic() + retry
            logger.warning(
                "OpenID Connect session check of %s postponed (the page is served): %s",
                request.user,
                exc,
            )
            return None
        return super().process_request(request)
