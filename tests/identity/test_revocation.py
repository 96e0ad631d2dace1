"""Refresh tokens the portal lets go of are revoked at the real provider
(``portal/auth/revocation.py``, RFC 7009 at ``oidc_provider.mjs``'s revocation endpoint):
the one a sign-in of another session replaces, and an offboarded person's, whichever sweep
offboards them. A revocation endpoint that does not answer fails no sign-in. No mock:
every refusal is the provider's. The revocations run once the transaction commits: the
tests run the commit callbacks (``django_capture_on_commit_callbacks``)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import override_settings

from core.people import offboard
from portal.auth import oidc, provider_sweep
from portal.auth.models import DirectoryAccount, ProviderAccount
from portal.auth.sync import managed_lines
from portal.auth.tasks import directory_sweep
from portal.auth.tasks import provider_sweep as provider_sweep_task
from tests.identity.conftest import prefixed
from tests.identity.test_oidc import sign_in, signed_in_as
from tests.identity.test_provider_sweep import signed_in, stored_token, sweep_env, user
from tests.identity.testbeds import free_port

pytestmark = pytest.mark.django_db

REVOKED = "refresh token revoked at the provider"
NOT_REVOKED = "refresh token not revoked at the provider"


def accepted(token: str) -> bool:
    """Whether the provider's token endpoint accepts ``token`` now (using it: the provider
    rotates it)."""
    endpoint = oidc.provider_metadata()["token_endpoint"]
    try:
        provider_sweep.refresh(endpoint, token)
    except provider_sweep.Refused:
        return False
    return True


def test_the_provider_publishes_its_revocation_endpoint(provider, configure):
    configure(sweep_env(provider))
    metadata = oidc.provider_metadata(fresh=True)
    assert metadata["revocation_endpoint"] == f"{provider.issuer}/token/revocation"


def test_a_second_sign_in_revokes_the_first_refresh_token(
    demo, provider, configure, django_capture_on_commit_callbacks, caplog
):
    configure(sweep_env(provider))
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("rick")
    first = stored_token("rick")
    assert first and ProviderAccount.objects.get(user__username="rick").session_id
    caplog.set_level(logging.INFO, logger="portal.auth.revocation")
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("rick")  # another browser: another session at the provider
    second = stored_token("rick")
    assert second and second != first
    assert f"rick's {REVOKED}" in caplog.text
    assert not accepted(first)  # invalid_grant: a copy of it is of no use any more
    report = provider_sweep_task()  # the stored one still works
    assert (report["checked"], report["still_there"], report["deactivated"]) == (1, 1, [])
    assert user("rick").is_active and stored_token("rick") not in (None, second)


def test_a_session_check_does_not_revoke_its_own_sessions_token(
    demo, provider, configure, django_capture_on_commit_callbacks, caplog
):
    """The session check's silent round trip brings a token of the same session (the same
    grant at the provider): revoking the one it replaces would revoke the new one too, and
    the sweep would then deactivate the person. It is left to expire."""
    from tests.identity.test_oidc_session_check import RENEW, renewal_time_passes
    from tests.identity.test_oidc_session_check import signed_in as browser_signed_in

    configure(sweep_env(provider))
    caplog.set_level(logging.INFO, logger="portal.auth.revocation")
    with override_settings(OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=RENEW):
        with django_capture_on_commit_callbacks(execute=True):
            dora = browser_signed_in("dora")
        first = stored_token("dora")
        renewal_time_passes()
        with django_capture_on_commit_callbacks(execute=True):
            assert dora.load("/jobs/").status_code == 200 and dora.asked_provider
    assert stored_token("dora") not in (None, first)
    assert REVOKED not in caplog.text
    report = provider_sweep_task()
    assert (report["still_there"], report["deactivated"]) == (1, [])
    assert user("dora").is_active


def test_a_provider_that_revokes_the_new_token_too_deactivates_nobody(
    demo, provider, configure, django_capture_on_commit_callbacks, caplog
):
    """A provider whose revocation of one token revokes all of the person's for the client
    (``revoke_all`` here) also revokes the token the sign-in just stored: kept, it would be
    refused at the next sweep and the person deactivated as if they had left. The portal
    checks the new token after the revocation, drops it and says why."""
    configure(sweep_env(provider))
    provider.accounts["rick"]["revoke_all"] = True
    provider.write_accounts()
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("rick")
    first = stored_token("rick")
    caplog.set_level(logging.INFO, logger="portal.auth.revocation")
    with django_capture_on_commit_callbacks(execute=True):
        client = signed_in("rick")
    assert client.get("/jobs/").status_code == 200  # the sign-in itself went through
    assert "revoked the new one too" in caplog.text and "OIDC_REVOKE=0" in caplog.text
    assert stored_token("rick") is None and not accepted(first)
    report = provider_sweep_task()
    assert report["deactivated"] == [] and report["without_token"] == ["rick"], report
    assert user("rick").is_active


def test_a_revocation_endpoint_that_does_not_answer_fails_no_sign_in(
    demo, provider, configure, django_capture_on_commit_callbacks, caplog
):
    closed = f"http://127.0.0.1:{free_port()}/token/revocation"  # nothing listens there
    configure(sweep_env(provider, REVOCATION_ENDPOINT=closed))
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("rick")
    first = stored_token("rick")
    caplog.set_level(logging.WARNING, logger="portal.auth.revocation")
    with django_capture_on_commit_callbacks(execute=True):
        client, response = sign_in("rick")
    assert response.status_code == 302 and signed_in_as(client) == "rick"
    assert client.get("/jobs/").status_code == 200
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any(NOT_REVOKED in r.getMessage() and "rick" in r.getMessage() for r in warnings)
    second = stored_token("rick")
    assert second and second != first
    assert provider_sweep_task()["still_there"] == 1 and user("rick").is_active


def test_nothing_is_revoked_with_revocation_off(
    demo, provider, configure, django_capture_on_commit_callbacks
):
    configure(sweep_env(provider, REVOKE="0"))
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("rick")
    first = stored_token("rick")
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("rick")
    assert accepted(first)  # left to expire at the provider


def test_an_offboarded_persons_refresh_token_is_revoked_and_dropped(
    demo, provider, configure, django_capture_on_commit_callbacks, caplog
):
    configure(sweep_env(provider))
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("dora")
        signed_in("rick")
    token = stored_token("dora")
    assert token
    caplog.set_level(logging.INFO, logger="portal.auth.revocation")
    lines = managed_lines(provider_sweep.settings.OIDC_IDENTITY_MAPPING)
    with django_capture_on_commit_callbacks(execute=True):
        assert offboard(user("dora"), managed_lines=lines, source="test", reason="left")
    assert stored_token("dora") is None
    assert f"dora's {REVOKED}" in caplog.text
    assert not accepted(token)
    assert stored_token("rick") and provider_sweep_task()["still_there"] == 1


def test_someone_the_provider_sweep_offboards_has_their_token_revoked(
    demo, provider, configure, django_capture_on_commit_callbacks, caplog
):
    """Out of every required group, the person's token still works at the provider: the
    offboarding revokes it (the one the sweep rotated to) and drops it."""
    configure(sweep_env(provider, REQUIRED_GROUPS="gpu-users"))
    signed_in("boss")
    signed_in("rick")
    provider.set_groups("boss", ["portal-admins"])
    caplog.set_level(logging.INFO, logger="portal.auth.revocation")
    with django_capture_on_commit_callbacks(execute=True):
        report = provider_sweep_task()
    assert report["deactivated"] == ["boss"], report
    assert stored_token("boss") is None and f"boss's {REVOKED}" in caplog.text


def test_someone_the_directory_sweep_offboards_has_their_provider_token_revoked(
    demo, directory, provider, configure, django_capture_on_commit_callbacks
):
    """One person, both sign-ins: deleted from the directory, the directory sweep offboards
    them, and the refresh token their single sign-on left is revoked at the provider."""
    from tests.identity.test_ldap import sign_in as ldap_sign_in

    env = {
        **directory.portal_env(**prefixed("LDAP", SWEEP_MAX_SHARE="0.5")),
        **sweep_env(provider),
    }
    configure(env)
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("rick")
    token = stored_token("rick")
    _, response = ldap_sign_in("rick")
    assert response.status_code == 302
    assert DirectoryAccount.objects.filter(user__username="rick").exists()
    directory.delete_person("rick")
    with django_capture_on_commit_callbacks(execute=True):
        assert directory_sweep()["deactivated"] == ["rick"]
    assert not user("rick").is_active and stored_token("rick") is None
    assert not accepted(token)


@pytest.mark.django_db(transaction=True)
def test_an_offboarding_does_not_wait_for_an_account_row_another_transaction_holds(
    demo, provider, configure
):
    """The provider sweep locks the account row, then the person's; an offboarding holds the
    person's: waiting there for the account row was a deadlock. It lets the token go once
    it commits instead."""
    configure(sweep_env(provider))
    signed_in("dora")  # a transactional test: the commit callbacks run as in production
    token = stored_token("dora")
    dora_pk = user("dora").pk
    held, failures = threading.Event(), []

    def sweep_like() -> None:
        try:
            with transaction.atomic():
                ProviderAccount.objects.select_for_update().get(user_id=dora_pk)  # that row only
                held.set()
                time.sleep(0.5)  # meanwhile the offboarding locks the person
                get_user_model().objects.select_for_update().get(pk=dora_pk)
        except Exception as exc:  # noqa: BLE001 - asserted below
            failures.append(exc)
        finally:
            connection.close()

    other = threading.Thread(target=sweep_like)
    other.start()
    dora = user("dora")
    lines = managed_lines(provider_sweep.settings.OIDC_IDENTITY_MAPPING)
    assert held.wait(10)
    assert offboard(dora, managed_lines=lines, source="test", reason="left")
    other.join(15)
    assert not other.is_alive() and failures == []
    assert stored_token("dora") is None and not accepted(token)


def test_a_deactivation_in_the_django_admin_revokes_the_provider_token(
    demo, provider, configure, client, django_capture_on_commit_callbacks
):
    """An admin who unticks "active" in the Django admin closes the account as an
    offboarding does, as far as the provider goes: the stored refresh token is dropped and
    revoked there (it was kept, valid, for as long as the provider allowed)."""
    from tests.security.test_admin_time_zone import field_values

    configure(sweep_env(provider))
    with django_capture_on_commit_callbacks(execute=True):
        signed_in("dora")
        signed_in("rick")
    token = stored_token("dora")
    assert token
    client.force_login(demo["admin"])
    url = f"/admin/auth/user/{user('dora').pk}/change/"
    form = field_values(client.get(url).content.decode())
    assert form.pop("is_active") == "on"
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not user("dora").is_active
    assert stored_token("dora") is None and not accepted(token)
    assert stored_token("rick")  # nobody else's
