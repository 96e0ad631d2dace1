"""The group mapping (core/identity.py, pure) and the identity settings read from the
environment (portal/auth/config.py, core/env.py): what each configuration gives, and that
a bad one stops start-up naming the variable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.env import env_pairs
from core.identity import (
    ADMIN,
    ONCALL,
    RESEARCHER,
    TEAM_LEAD,
    IdentityMapping,
    grant_for,
    groups_from_claim,
)
from portal.auth.config import identity_mapping, ldap_settings, oidc_settings

REPO = Path(__file__).resolve().parents[2]
MAPPING = IdentityMapping.build(
    admin_groups=["Portal-Admins"],
    oncall_groups=["portal-oncall"],
    line_groups=[("llm-team", "llm"), ("search-rec-team", "search-rec"), ("eng", "llm"),
                 ("eng", "multimodal")],
    lead_groups=[("llm-leads", "llm")],
)  # fmt: skip


def test_no_mapped_group_is_a_researcher_of_no_line():
    grant = grant_for(MAPPING, ["everyone", "vpn-users"])
    assert (grant.role, dict(grant.lines), grant.groups) == (RESEARCHER, {}, ())


def test_a_line_group_makes_a_member_and_a_lead_group_a_lead():
    assert grant_for(MAPPING, ["llm-team"]).lines == {"llm": False}
    lead = grant_for(MAPPING, ["llm-leads"])
    assert (lead.role, dict(lead.lines)) == (TEAM_LEAD, {"llm": True})
    both = grant_for(MAPPING, ["llm-team", "llm-leads", "search-rec-team"])
    assert (both.role, dict(both.lines)) == (TEAM_LEAD, {"llm": True, "search-rec": False})


def test_one_group_may_give_several_lines():
    assert dict(grant_for(MAPPING, ["eng"]).lines) == {"llm": False, "multimodal": False}


def test_the_strongest_role_wins_and_lines_are_kept():
    admin = grant_for(MAPPING, ["llm-leads", "portal-oncall", "portal-admins"])
    assert (admin.role, dict(admin.lines)) == (ADMIN, {"llm": True})
    oncall = grant_for(MAPPING, ["llm-leads", "portal-oncall"])
    assert (oncall.role, dict(oncall.lines)) == (ONCALL, {"llm": True})


def test_group_names_match_whatever_their_case():
    assert grant_for(MAPPING, ["PORTAL-ADMINS"]).role == ADMIN
    assert grant_for(MAPPING, ["portal-admins"]).role == ADMIN
    assert grant_for(MAPPING, ["LLM-Leads"]).lines == {"llm": True}


def test_the_grant_names_the_mapped_groups_only():
    grant = grant_for(MAPPING, ["llm-team", "vpn-users", "portal-oncall"])
    assert grant.groups == ("llm-team", "portal-oncall")


def test_required_groups_keep_others_out():
    mapping = IdentityMapping.build(required_groups=["gpu-users"], admin_groups=["admins"])
    assert grant_for(mapping, ["admins"]) is None
    assert grant_for(mapping, []) is None
    assert grant_for(mapping, ["GPU-Users"]).role == RESEARCHER


def test_managed_lines_are_every_line_the_mapping_names():
    assert MAPPING.managed_lines == {"llm", "search-rec", "multimodal"}


@pytest.mark.parametrize(
    ("claim", "groups"),
    [
        (["a", "b"], ["a", "b"]),
        ("a", ["a"]),
        (None, []),
        ({"a": 1}, []),
        (["a", 3, None, {"x": 1}], ["a"]),
    ],
)
def test_the_groups_claim_in_the_shapes_providers_send(claim, groups):
    assert groups_from_claim(claim) == groups


def test_the_mapping_module_imports_no_django():
    code = "import core.identity, sys; assert 'django' not in sys.modules, 'django imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


# --- the environment -----------------------------------------------------------------------


def test_pairs_parse_and_refuse_what_is_not_a_pair():
    assert env_pairs("X", {"X": "a=b, c = d=e ,,"}) == [("a", "b"), ("c", "d=e")]
    assert env_pairs("X", {}) == []
    for bad in ("a", "=b", "a=", "a=b,c"):
        with pytest.raises(ImproperlyConfigured, match="X must list name=value pairs"):
            env_pairs("X", {"X": bad})


def test_neither_sign_in_is_on_by_default():
    assert ldap_settings({}) == {"LDAP_ENABLED": False}
    assert oidc_settings({}) == {"OIDC_ENABLED": False}


def test_the_mapping_from_the_environment():
    env = {
        "LDAP_ADMIN_GROUPS": "admins,root-ish",
        "LDAP_ONCALL_GROUPS": "sre",
        "LDAP_LINE_GROUPS": "llm-team=llm",
        "LDAP_LEAD_GROUPS": "llm-leads=llm,sr-leads=search-rec",
        "LDAP_REQUIRED_GROUPS": "gpu-users",
    }
    mapping = identity_mapping("LDAP", env)
    assert mapping.admin_groups == {"admins", "root-ish"}
    assert mapping.lead_groups == {"llm-leads": {"llm"}, "sr-leads": {"search-rec"}}
    assert mapping.required_groups == {"gpu-users"}
    assert identity_mapping("OIDC", env) == IdentityMapping()


LDAP_ENV = {
    "LDAP_SERVER_URI": "ldaps://ldap.example.org",
    "LDAP_BIND_DN": "cn=portal,dc=example,dc=org",
    "LDAP_BIND_PASSWORD": "pw",
    "LDAP_USER_SEARCH_BASE": "ou=people,dc=example,dc=org",
    "LDAP_GROUP_SEARCH_BASE": "ou=groups,dc=example,dc=org",
    "LDAP_ADMIN_GROUPS": "admins",
}


def test_ldap_settings_from_the_environment():
    import ldap
    from django_auth_ldap.config import GroupOfNamesType, PosixGroupType

    values = ldap_settings(LDAP_ENV)
    assert values["LDAP_ENABLED"] is True
    assert values["AUTH_LDAP_SERVER_URI"] == "ldaps://ldap.example.org"
    assert values["AUTH_LDAP_USER_SEARCH"].base_dn == "ou=people,dc=example,dc=org"
    assert values["AUTH_LDAP_USER_SEARCH"].filterstr == "(uid=%(user)s)"
    assert isinstance(values["AUTH_LDAP_GROUP_TYPE"], GroupOfNamesType)
    assert values["AUTH_LDAP_CACHE_TIMEOUT"] == 0  # groups read at every sign-in
    assert values["AUTH_LDAP_CONNECTION_OPTIONS"][ldap.OPT_NETWORK_TIMEOUT] == 5.0
    assert values["LDAP_IDENTITY_MAPPING"].admin_groups == {"admins"}
    posix = ldap_settings({**LDAP_ENV, "LDAP_GROUP_TYPE": "posixGroup"})
    assert isinstance(posix["AUTH_LDAP_GROUP_TYPE"], PosixGroupType)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"LDAP_SERVER_URI": "http://ldap.example.org"}, "LDAP_SERVER_URI must be a URL"),
        ({"LDAP_USER_SEARCH_BASE": ""}, "LDAP_USER_SEARCH_BASE must be set"),
        ({"LDAP_GROUP_SEARCH_BASE": ""}, "LDAP_GROUP_SEARCH_BASE must be set"),
        ({"LDAP_USER_FILTER": "(uid=alice)"}, "LDAP_USER_FILTER must contain"),
        ({"LDAP_GROUP_TYPE": "nis"}, "LDAP_GROUP_TYPE must be one of"),
        ({"LDAP_BIND_PASSWORD": ""}, "LDAP_BIND_PASSWORD must be set"),
        ({"LDAP_TIMEOUT": "0"}, "LDAP_TIMEOUT must be at least"),
        ({"LDAP_LEAD_GROUPS": "llm-leads"}, "LDAP_LEAD_GROUPS must list name=value pairs"),
    ],
)
def test_a_bad_ldap_configuration_stops_start_up(change, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        ldap_settings({**LDAP_ENV, **change})


OIDC_ENV = {
    "OIDC_ISSUER": "https://sso.example.org/realms/corp/",
    "OIDC_CLIENT_ID": "gpu-portal",
    "OIDC_CLIENT_SECRET": "s3cret",
    "OIDC_LEAD_GROUPS": "llm-leads=llm",
}


def test_oidc_settings_from_the_environment():
    values = oidc_settings(OIDC_ENV)
    assert values["OIDC_ENABLED"] is True
    assert values["OIDC_ISSUER"] == "https://sso.example.org/realms/corp"
    # offline_access: a refresh token for the provider sweep (portal.auth.provider_sweep)
    assert values["OIDC_RP_SCOPES"] == "openid email profile groups offline_access"
    assert values["OIDC_RP_SIGN_ALGO"] == "RS256"
    assert values["OIDC_USE_PKCE"] is True
    assert values["OIDC_TOKEN_USE_BASIC_AUTH"] is True
    assert (values["OIDC_USERNAME_CLAIM"], values["OIDC_GROUPS_CLAIM"]) == (
        "preferred_username",
        "groups",
    )
    assert values["OIDC_IDENTITY_MAPPING"].lead_groups == {"llm-leads": {"llm"}}
    custom = oidc_settings(
        {**OIDC_ENV, "OIDC_SCOPES": "openid,email", "OIDC_GROUPS_CLAIM": "roles",
         "OIDC_TOKEN_AUTH": "client_secret_post", "OIDC_CA_BUNDLE": "/etc/ssl/corp.pem"}
    )  # fmt: skip
    assert custom["OIDC_RP_SCOPES"] == "openid email offline_access"
    assert custom["OIDC_GROUPS_CLAIM"] == "roles"
    assert custom["OIDC_TOKEN_USE_BASIC_AUTH"] is False
    assert custom["OIDC_VERIFY_SSL"] == "/etc/ssl/corp.pem"
    # the session check (portal.auth.oidc.SessionCheck): every 15 minutes unless told
    assert values["OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"] == 900
    rechecked = oidc_settings({**OIDC_ENV, "OIDC_RECHECK_SECONDS": "3600"})
    assert rechecked["OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"] == 3600
    # http is for a provider on this machine only (the tests' one)
    assert oidc_settings({**OIDC_ENV, "OIDC_ISSUER": "http://127.0.0.1:9000"})["OIDC_ENABLED"]
    # the provider sweep (portal.auth.provider_sweep): on, every 15 minutes, a tenth at most
    assert (values["OIDC_SWEEP"], values["OIDC_SWEEP_SECONDS"]) == (True, 900.0)
    assert values["OIDC_SWEEP_MAX_SHARE"] == 0.1
    off = oidc_settings({**OIDC_ENV, "OIDC_SWEEP": "0"})
    assert off["OIDC_SWEEP"] is False and off["OIDC_RP_SCOPES"] == "openid email profile groups"
    asked = oidc_settings({**OIDC_ENV, "OIDC_SCOPES": "openid,offline_access,email"})
    assert asked["OIDC_RP_SCOPES"] == "openid offline_access email"  # asked once
    hourly = oidc_settings({**OIDC_ENV, "OIDC_SWEEP_SECONDS": "3600", "OIDC_SWEEP_MAX_SHARE": "1"})
    assert (hourly["OIDC_SWEEP_SECONDS"], hourly["OIDC_SWEEP_MAX_SHARE"]) == (3600.0, 1.0)
    # refresh tokens let go of are revoked (portal.auth.revocation): at the discovered
    # revocation endpoint unless one is named
    assert (values["OIDC_REVOKE"], values["OIDC_OP_REVOCATION_ENDPOINT"]) == (True, "")
    named = oidc_settings(
        {**OIDC_ENV, "OIDC_REVOCATION_ENDPOINT": "https://sso.example.org/revoke",
         "OIDC_REVOKE": "0"}
    )  # fmt: skip
    assert named["OIDC_OP_REVOCATION_ENDPOINT"] == "https://sso.example.org/revoke"
    assert named["OIDC_REVOKE"] is False


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"OIDC_ISSUER": "http://sso.example.org"}, "OIDC_ISSUER must be an https URL"),
        ({"OIDC_ISSUER": "ftp://sso.example.org"}, "OIDC_ISSUER must be a URL"),
        ({"OIDC_CLIENT_ID": ""}, "OIDC_CLIENT_ID must be set"),
        ({"OIDC_CLIENT_SECRET": ""}, "OIDC_CLIENT_SECRET must be set"),
        ({"OIDC_SCOPES": "email,profile"}, "OIDC_SCOPES must include openid"),
        ({"OIDC_SIGN_ALGO": "HS256"}, "OIDC_SIGN_ALGO must be one of"),
        ({"OIDC_TOKEN_AUTH": "none"}, "OIDC_TOKEN_AUTH must be one of"),
        ({"OIDC_RECHECK_SECONDS": "5"}, "OIDC_RECHECK_SECONDS must be between 60 and 86400"),
        ({"OIDC_RECHECK_SECONDS": "2d"}, "OIDC_RECHECK_SECONDS must be a whole number"),
        ({"OIDC_RECHECK_SECONDS": "90000"}, "OIDC_RECHECK_SECONDS must be between 60 and"),
        ({"OIDC_SWEEP": "maybe"}, "OIDC_SWEEP must be a boolean"),
        ({"OIDC_SWEEP_SECONDS": "10"}, "OIDC_SWEEP_SECONDS must be at least 60"),
        ({"OIDC_SWEEP_MAX_SHARE": "2"}, "OIDC_SWEEP_MAX_SHARE must be at most 1"),
        ({"OIDC_REVOKE": "maybe"}, "OIDC_REVOKE must be a boolean"),
        (
            {"OIDC_REVOCATION_ENDPOINT": "http://sso.example.org/revoke"},
            "OIDC_REVOCATION_ENDPOINT must be an https URL",
        ),
        ({"OIDC_REVOCATION_ENDPOINT": "sso.example.org"}, "OIDC_REVOCATION_ENDPOINT must be a URL"),
    ],
)
def test_a_bad_oidc_configuration_stops_start_up(change, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        oidc_settings({**OIDC_ENV, **change})


def test_the_portal_starts_local_only_without_identity_variables():
    """Settings as ``make run`` and the tests load them: local accounts only."""
    from django.conf import settings

    assert settings.AUTHENTICATION_BACKENDS == ["django.contrib.auth.backends.ModelBackend"]
    assert settings.LDAP_ENABLED is False and settings.OIDC_ENABLED is False
