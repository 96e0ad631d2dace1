"""The settings of the organization sign-ins, from the environment (docs/deploy.md, "Identity").

``ldap_settings`` and ``oidc_settings`` return the names to set in ``portal/settings.py``;
each is off (only ``LDAP_ENABLED`` / ``OIDC_ENABLED`` false) unless its server is named
(``LDAP_SERVER_URI``, ``OIDC_ISSUER``). A bad or incomplete configuration stops start-up
with ``ImproperlyConfigured`` naming the variable, as every setting does (``core.env``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

from core.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_pairs,
    env_str,
    env_url,
)
from core.identity import IdentityMapping

LDAP_GROUP_TYPES = (
    "groupOfNames",
    "nestedGroupOfNames",
    "groupOfUniqueNames",
    "posixGroup",
    "activeDirectory",
    "nestedActiveDirectory",
)
# The directory sweep (portal/auth/sweep.py): how often, and the share of the directory's
# accounts one sweep may deactivate before it deactivates nobody.
DEFAULT_SWEEP_SECONDS = 900.0
DEFAULT_SWEEP_MAX_SHARE = 0.1
# The session check (portal.auth.oidc.SessionCheck): seconds between two asks of the provider
# whether a person signed in through it still is.
DEFAULT_OIDC_RECHECK_SECONDS = 900
# The provider sweep (portal/auth/provider_sweep.py): how often each OpenID Connect account's
# refresh token is used, and the share of those accounts one sweep may deactivate.
DEFAULT_OIDC_SWEEP_SECONDS = 900.0
DEFAULT_OIDC_SWEEP_MAX_SHARE = 0.1
OFFLINE_SCOPE = "offline_access"
# What the session check never redirects to the provider: all but the pages a person
# navigates to. mozilla-django-oidc's ``OIDC_EXEMPT_URLS``: URL names and paths are matched
# exactly, patterns from the start of the path. The live parts' refetch of a page's own
# address and any fetch() a browser marks (Sec-Fetch-Mode) are told apart by their headers.
OIDC_EXEMPT_URLS = [
    re.compile(r"/api/"),  # the API: tokens, and the session of pages' fetch() and Swagger
    re.compile(r"/static/"),
    re.compile(r"/ws/"),
    "metrics",
    "healthz",
    "readyz",
    "favicon",
    # what the live pages fetch() (static/js/pages/)
    "monitoring:dashboard-data",
    "monitoring:oncall-alerts",
    "monitoring:oncall-rack-cells",
    "scheduling:job-estimate",
    "scheduling:job-feasibility",
]
OIDC_SIGN_ALGOS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256")


def identity_mapping(prefix: str, environ: Mapping[str, str] | None = None) -> IdentityMapping:
    """``<prefix>_ADMIN_GROUPS``, ``_ONCALL_GROUPS``, ``_LINE_GROUPS``, ``_LEAD_GROUPS`` and
    ``_REQUIRED_GROUPS`` as one ``IdentityMapping``."""
    return IdentityMapping.build(
        admin_groups=env_list(f"{prefix}_ADMIN_GROUPS", [], environ),
        oncall_groups=env_list(f"{prefix}_ONCALL_GROUPS", [], environ),
        line_groups=env_pairs(f"{prefix}_LINE_GROUPS", environ),
        lead_groups=env_pairs(f"{prefix}_LEAD_GROUPS", environ),
        required_groups=env_list(f"{prefix}_REQUIRED_GROUPS", [], environ),
    )


def _required(name: str, environ: Mapping[str, str] | None, why: str) -> str:
    value = env_str(name, "", environ)
    if not value:
        raise ImproperlyConfigured(f"{name} must be set {why}")
    return value


def ldap_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """django-auth-ldap's ``AUTH_LDAP_*`` settings and the portal's ``LDAP_*`` ones."""
    uri = env_url("LDAP_SERVER_URI", ("ldap", "ldaps"), environ)
    if not uri:
        return {"LDAP_ENABLED": False}
    import ldap
    from django_auth_ldap import config as ldap_config

    why = "when LDAP_SERVER_URI is"
    user_base = _required("LDAP_USER_SEARCH_BASE", environ, why)
    user_filter = env_str("LDAP_USER_FILTER", "(uid=%(user)s)", environ)
    if "%(user)s" not in user_filter:
        raise ImproperlyConfigured(f"LDAP_USER_FILTER must contain %(user)s, got {user_filter!r}")
    group_base = _required("LDAP_GROUP_SEARCH_BASE", environ, why)
    group_filter = env_str("LDAP_GROUP_FILTER", "(objectClass=groupOfNames)", environ)
    group_type = env_choice("LDAP_GROUP_TYPE", "groupOfNames", LDAP_GROUP_TYPES, environ)
    group_class = getattr(ldap_config, group_type[0].upper() + group_type[1:] + "Type")
    timeout = env_float("LDAP_TIMEOUT", 5.0, environ, minimum=0.5, maximum=120)
    bind_dn = env_str("LDAP_BIND_DN", "", environ)
    bind_password = env_str("LDAP_BIND_PASSWORD", "", environ)
    if bind_dn and not bind_password:
        raise ImproperlyConfigured("LDAP_BIND_PASSWORD must be set when LDAP_BIND_DN is")
    return {
        "LDAP_ENABLED": True,
        "LDAP_IDENTITY_MAPPING": identity_mapping("LDAP", environ),
        "LDAP_SWEEP_SECONDS": env_float(
            "LDAP_SWEEP_SECONDS", DEFAULT_SWEEP_SECONDS, environ, minimum=60, maximum=86400
        ),
        "LDAP_SWEEP_MAX_SHARE": env_float(
            "LDAP_SWEEP_MAX_SHARE", DEFAULT_SWEEP_MAX_SHARE, environ, minimum=0, maximum=1
        ),
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_BIND_DN": bind_dn,
        "AUTH_LDAP_BIND_PASSWORD": bind_password,
        "AUTH_LDAP_START_TLS": env_bool("LDAP_START_TLS", False, environ),
        "AUTH_LDAP_USER_SEARCH": ldap_config.LDAPSearch(user_base, ldap.SCOPE_SUBTREE, user_filter),
        "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn", "email": "mail"},
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_GROUP_SEARCH": ldap_config.LDAPSearch(
            group_base, ldap.SCOPE_SUBTREE, group_filter
        ),
        "AUTH_LDAP_GROUP_TYPE": group_class(name_attr="cn"),
        "AUTH_LDAP_CACHE_TIMEOUT": 0,  # groups are read at every sign-in
        "AUTH_LDAP_CONNECTION_OPTIONS": {
            ldap.OPT_NETWORK_TIMEOUT: timeout,
            ldap.OPT_TIMEOUT: timeout,
            ldap.OPT_REFERRALS: 0,
        },
    }


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def oidc_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """mozilla-django-oidc's ``OIDC_RP_*`` settings and the portal's ``OIDC_*`` ones; the
    endpoints come from the issuer's discovery document (``portal.auth.oidc``)."""
    issuer = env_url("OIDC_ISSUER", ("https", "http"), environ)
    if not issuer:
        return {"OIDC_ENABLED": False}
    if urlparse(issuer).scheme == "http" and not _loopback(urlparse(issuer).hostname):
        raise ImproperlyConfigured(
            f"OIDC_ISSUER must be an https URL (http only on this machine), got {issuer!r}"
        )
    why = "when OIDC_ISSUER is"
    scopes = env_list("OIDC_SCOPES", ["openid", "email", "profile", "groups"], environ)
    if "openid" not in scopes:
        raise ImproperlyConfigured(f"OIDC_SCOPES must include openid, got {' '.join(scopes)!r}")
    swept = env_bool("OIDC_SWEEP", True, environ)
    if swept and OFFLINE_SCOPE not in scopes:
        scopes = [*scopes, OFFLINE_SCOPE]  # a refresh token the provider sweep can use
    ca_bundle = env_str("OIDC_CA_BUNDLE", "", environ)
    token_auth = env_choice(
        "OIDC_TOKEN_AUTH", "client_secret_basic", ("client_secret_basic", "client_secret_post"),
        environ,
    )  # fmt: skip
    revocation = env_url("OIDC_REVOCATION_ENDPOINT", ("https", "http"), environ) or ""
    parsed = urlparse(revocation)
    if parsed.scheme == "http" and not _loopback(parsed.hostname):
        raise ImproperlyConfigured(
            "OIDC_REVOCATION_ENDPOINT must be an https URL (http only on this machine), "
            f"got {revocation!r}"
        )
    return {
        "OIDC_ENABLED": True,
        "OIDC_ISSUER": issuer.rstrip("/"),
        "OIDC_LABEL": env_str("OIDC_LABEL", "single sign-on", environ),
        "OIDC_USERNAME_CLAIM": env_str("OIDC_USERNAME_CLAIM", "preferred_username", environ),
        "OIDC_GROUPS_CLAIM": env_str("OIDC_GROUPS_CLAIM", "groups", environ),
        "OIDC_IDENTITY_MAPPING": identity_mapping("OIDC", environ),
        "OIDC_RP_CLIENT_ID": _required("OIDC_CLIENT_ID", environ, why),
        "OIDC_RP_CLIENT_SECRET": _required("OIDC_CLIENT_SECRET", environ, why),
        "OIDC_RP_SCOPES": " ".join(scopes),
        "OIDC_RP_SIGN_ALGO": env_choice("OIDC_SIGN_ALGO", "RS256", OIDC_SIGN_ALGOS, environ),
        "OIDC_TOKEN_USE_BASIC_AUTH": token_auth == "client_secret_basic",
        "OIDC_USE_PKCE": True,
        "OIDC_USE_NONCE": True,
        "OIDC_TIMEOUT": env_float("OIDC_TIMEOUT", 10.0, environ, minimum=0.5, maximum=120),
        "OIDC_VERIFY_SSL": ca_bundle or True,
        "OIDC_CREATE_USER": True,
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
        # The session check asks the provider again (prompt=none) at the first page load
        # after this many seconds since the sign-in or the last check.
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": env_int(
            "OIDC_RECHECK_SECONDS",
            DEFAULT_OIDC_RECHECK_SECONDS,
            environ,
            minimum=60,
            maximum=86400,
        ),
        "OIDC_EXEMPT_URLS": OIDC_EXEMPT_URLS,
        # The provider sweep: each account's refresh token used every OIDC_SWEEP_SECONDS; a
        # provider that refuses it (invalid_grant) has deleted or disabled the person.
        "OIDC_SWEEP": swept,
        "OIDC_SWEEP_SECONDS": env_float(
            "OIDC_SWEEP_SECONDS", DEFAULT_OIDC_SWEEP_SECONDS, environ, minimum=60, maximum=86400
        ),
        "OIDC_SWEEP_MAX_SHARE": env_float(
            "OIDC_SWEEP_MAX_SHARE", DEFAULT_OIDC_SWEEP_MAX_SHARE, environ, minimum=0, maximum=1
        ),
        # Refresh tokens the portal lets go of (replaced by a sign-in of another session at
        # the provider, or an offboarded person's) are revoked at the provider's revocation
        # endpoint (RFC 7009; portal.auth.revocation): this one, or when empty the discovery
        # document's ``revocation_endpoint`` (none published: nothing is revoked).
        "OIDC_REVOKE": env_bool("OIDC_REVOKE", True, environ),
        "OIDC_OP_REVOCATION_ENDPOINT": revocation,
    }
