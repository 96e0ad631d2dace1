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
- keeps no session of an inactive account (an admin's deactivation signs the person out).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from core.identity import groups_from_claim
from portal.auth import notices
from portal.auth.accounts import accounts_named, make_account, profile_text
from portal.auth.sync import apply_groups

logger = logging.getLogger("portal.auth")
SOURCE = "single sign-on"
DISCOVERY_TTL = 300.0
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or is not usable."""


_discovered: dict[str, tuple[float, dict[str, str]]] = {}
_discovered_lock = threading.Lock()


def enabled() -> bool:
    return bool(getattr(settings, "OIDC_ENABLED", False))


def provider_metadata(issuer: str | None = None) -> dict[str, str]:
    """The provider's endpoints, from its discovery document (cached ``DISCOVERY_TTL`` s).

    Raises ``ProviderUnavailable`` when it cannot be read, is not a JSON object, names another
    issuer (OpenID Connect Discovery 1.0, section 4.3) or lacks an endpoint.
    """
    issuer = (issuer or settings.OIDC_ISSUER).rstrip("/")
    now = time.monotonic()
    with _discovered_lock:
        cached = _discovered.get(issuer)
        if cached and now - cached[0] < DISCOVERY_TTL:
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
    with _discovered_lock:
        _discovered[issuer] = (now, found)
    return found


def forget_provider() -> None:
    """Drop the cached discovery documents (tests; a provider that moved its endpoints)."""
    with _discovered_lock:
        _discovered.clear()


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
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            logger.warning("OpenID Connect sign-in failed: %s", exc)
            if _refused(exc):  # it answered: the code (made up, used, expired) was refused
                notices.tell(request, notices.sso_failed())
            else:
                notices.tell(request, notices.sso_unavailable())
        except (SuspiciousOperation, jwt.PyJWTError, ValueError, KeyError) as exc:
            logger.warning("OpenID Connect sign-in refused: %r", exc)
            notices.tell(request, notices.sso_failed())
        return None

    def get_user(self, user_id: Any) -> Any:
        """The session's person while their account is active (the library's answered an
        inactive one too: an admin's deactivation left their sessions signed in)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The library's token request; an answer that is not a JSON object is refused (the
        library read it with ``.get``: an AttributeError, a 500)."""
        token = super().get_token(payload)
        if not isinstance(token, dict):
            raise SuspiciousOperation("the token endpoint did not answer a JSON object")
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
    """``/oidc/callback/``: a failure of any kind is the login page with a message."""

    @property
    def failure_url(self) -> str:
        return resolve_url(settings.LOGIN_URL)

    def login_failure(self) -> HttpResponse:
        if not getattr(self.request, "identity_notice", None):
            notices.tell(self.request, notices.sso_failed())
        return super().login_failure()

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured")
        try:
            return super().get(request)
        except SuspiciousOperation as exc:  # an unknown or replayed state
            logger.warning("OpenID Connect callback refused: %s", exc)
            return self.login_failure()
