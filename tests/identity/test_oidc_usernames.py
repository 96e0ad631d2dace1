"""The user name an OpenID Connect provider's claim gives: the one Django stores.

``create_user`` stores a user name in NFKC (Django's ``normalize_username``), so a claim in
compatibility characters (``ｌｅａｄ``, full width) must be looked up in that form too:
otherwise the lookup misses the account ``lead`` and the creation collides with it.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.test import override_settings

from portal.auth.oidc import PortalOIDCBackend

pytestmark = pytest.mark.django_db


@override_settings(OIDC_USERNAME_CLAIM="preferred_username")
@pytest.mark.parametrize("claim", ["ｌｅａｄ", "LEAD", " lead ", "ＬＥＡＤ"])
def test_a_claim_in_compatibility_characters_names_the_stored_user(claim):
    get_user_model().objects.create_user("lead", password="local-password")
    backend = PortalOIDCBackend()
    claims = {"preferred_username": claim}
    assert backend.username_from(claims) == "lead"
    assert [u.username for u in backend.filter_users_by_claims(claims)] == ["lead"]


@override_settings(OIDC_USERNAME_CLAIM="preferred_username")
@pytest.mark.parametrize("claim", ["\u202eadmin", "ad\u200bmin", "a b", ""])
def test_a_claim_that_is_no_user_name_is_refused(claim):
    with pytest.raises(SuspiciousOperation):
        PortalOIDCBackend().username_from({"preferred_username": claim})
