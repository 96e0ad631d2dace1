"""The provider sweep (``portal/auth/provider_sweep.py``) against the real OpenID Connect
provider (``oidc_provider.mjs``): a sign-in keeps the provider's refresh token, encrypted;
the sweep uses it, and a person the provider deleted or disabled since (it refuses the
token, ``invalid_grant``) loses the account, its sessions and API tokens without opening a
page. A person still there stays (their rotated token kept); a provider that does not
answer, or refuses the portal itself, changes nothing; local and directory accounts are
never asked about. No mock: every answer is the provider's."""

from __future__ import annotations

import importlib
import os
import signal
import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token

from core import tokens
from core.models import AuditRecord
from core.roles import role_of
from monitoring.models import Alert
from portal.auth import provider_sweep, refresh_tokens
from portal.auth.models import DirectoryAccount, ProviderAccount
from portal.auth.tasks import provider_sweep as provider_sweep_task
from scheduling.models import Job
from tests.conftest import DEMO_PASSWORD
from tests.identity.conftest import PEOPLE, prefixed
from tests.identity.test_oidc import lines_of, sign_in
from tests.identity.test_sweep import can_use_session, can_use_token, command_output, state

pytestmark = pytest.mark.django_db


def sweep_env(provider, **extra: str) -> dict[str, str]:
    """The portal's OpenID Connect settings for the test provider; a bound of one half
    unless set (a handful of accounts: the default tenth would hold all but one)."""
    return provider.portal_env(**prefixed("OIDC", **{"SWEEP_MAX_SHARE": "0.5", **extra}))


def user(name: str):
    return get_user_model().objects.get(username=name)


def signed_in(name: str) -> Client:
    client, response = sign_in(name)
    assert response.status_code == 302, response.content.decode()[:500]
    return client


def stored_token(name: str) -> str | None:
    """The refresh token kept for ``name``, decrypted (None: none kept)."""
    sealed = ProviderAccount.objects.get(user__username=name).refresh_token
    return refresh_tokens.unseal(sealed) if sealed else None


def run_command(*args: str) -> tuple[int, str]:
    return command_output("sweep_provider", *args)


@pytest.mark.parametrize("change", ["deleted", "disabled"])
def test_someone_deleted_or_disabled_at_the_provider_loses_account_sessions_and_tokens(
    demo, provider, configure, change
):
    configure(sweep_env(provider))
    boss = signed_in("boss")
    dora = signed_in("dora")
    assert stored_token("boss") and stored_token("dora")
    secret = tokens.create_token(user("boss"), "laptop")[1]
    legacy = Token.objects.create(user=user("boss")).key
    job = boss.post("/api/v1/jobs/", {"name": "train", "queue": "llm-core", "gpus": 8})
    assert job.status_code == 201, job.content
    if change == "deleted":
        del provider.accounts["boss"]
    else:
        provider.accounts["boss"]["disabled"] = True
    provider.write_accounts()
    # before the sweep the person keeps everything: they open no page, the API is not checked
    assert can_use_token(secret) and user("boss").is_superuser

    report = provider_sweep_task()
    assert report["deactivated"] == ["boss"], report
    assert (report["checked"], report["still_there"]) == (2, 1)
    boss_user = user("boss")
    assert (boss_user.is_active, role_of(boss_user), boss_user.is_superuser) == (
        False, "researcher", False,
    )  # fmt: skip
    assert not can_use_token(secret) and not can_use_token(legacy)
    api = Client().get("/api/v1/jobs/", headers={"Authorization": f"Token {secret}"})
    assert api.status_code == 401
    assert not Session.objects.filter(session_key=boss.session.session_key).exists()
    assert not can_use_session(boss)
    # one record, by the system, saying why and what they had
    record = AuditRecord.objects.get(action="identity.offboard", target_id=str(boss_user.pk))
    assert record.actor is None and record.actor_name == "system"
    assert record.reason.startswith("single sign-on sweep: the provider refused")
    assert "invalid_grant" in record.reason and "2 API token(s) revoked" in record.reason
    assert record.before["role"] == "admin" and record.after["active"] is False
    # the refused token is dropped; their work keeps running; dora is untouched
    assert stored_token("boss") is None
    assert Job.objects.get(pk=job.json()["id"]).state != Job.State.CANCELLED
    assert can_use_session(dora) and user("dora").is_active
    assert lines_of("dora") == {"llm": "lead"}
    # a second sweep has nothing more to do, and asks about the inactive account no more
    count = AuditRecord.objects.count()
    again = provider_sweep_task()
    assert (again["deactivated"], again["checked"]) == ([], 1)
    assert AuditRecord.objects.count() == count


def test_someone_still_there_stays_and_the_rotated_token_is_kept(demo, provider, configure):
    configure(sweep_env(provider))
    rick = signed_in("rick")
    first = stored_token("rick")
    assert first
    report = provider_sweep_task()
    assert (report["checked"], report["still_there"], report["rotated"]) == (1, 1, 1)
    assert report["deactivated"] == [] and user("rick").is_active and can_use_session(rick)
    second = stored_token("rick")
    assert second and second != first
    account = ProviderAccount.objects.get(user__username="rick")
    assert account.checked_at is not None and account.stored_at == account.checked_at
    # the kept one works (and is rotated again); the first one is refused (oidc-provider
    # then revokes the grant: a used refresh token presented again is a stolen one)
    assert provider_sweep_task()["still_there"] == 1 and stored_token("rick") != second
    assert user("rick").is_active
    endpoint = provider_sweep.oidc.provider_metadata()["token_endpoint"]
    with pytest.raises(provider_sweep.Refused):
        provider_sweep.refresh(endpoint, first)


def test_a_token_refused_after_a_request_that_went_unanswered_deactivates_nobody(
    demo, provider, configure
):
    """The provider received a refresh request but its answer never came (a timeout): it
    rotated the token all the same, so it refuses the one the portal kept. That refusal
    says nothing of the person: left as is, the token dropped, listed as uncertain."""
    configure(sweep_env(provider, TIMEOUT="1"))
    signed_in("rick")
    endpoint = provider_sweep.oidc.provider_metadata()["token_endpoint"]
    pk = ProviderAccount.objects.get(user__username="rick").pk
    report = provider_sweep.Report()
    os.kill(provider.proc.pid, signal.SIGSTOP)  # it takes the request, and answers later
    try:
        with pytest.raises(provider_sweep.NotAnswered) as unanswered:
            provider_sweep._ask(pk, endpoint, report)
    finally:
        os.kill(provider.proc.pid, signal.SIGCONT)
    assert unanswered.value.maybe_used
    assert ProviderAccount.objects.get(pk=pk).unanswered_at is not None
    time.sleep(0.5)  # the provider handles the request it had taken: the token is used
    report = provider_sweep_task()
    assert (report["deactivated"], report["uncertain"]) == ([], ["rick"]), report
    assert user("rick").is_active and stored_token("rick") is None
    code, out = run_command()
    assert "no refresh token stored (until their next sign-in): 1 (rick)" in out
    signed_in("rick")  # the next sign-in stores a token: swept again
    assert provider_sweep_task()["still_there"] == 1


def test_the_refresh_token_is_not_in_the_database_in_plain_text(demo, provider, configure):
    configure(sweep_env(provider))
    signed_in("olga")
    plain = stored_token("olga")
    assert plain
    with connection.cursor() as cursor:
        cursor.execute("SELECT refresh_token FROM portal_auth_provideraccount")
        (raw,) = cursor.fetchone()
    assert plain not in raw and raw.startswith("gAAAAA")  # a Fernet token
    # read with the key of SECRET_KEY; after a rotation, with SECRET_KEY_FALLBACKS only
    from django.conf import settings

    old = settings.SECRET_KEY
    with override_settings(SECRET_KEY="another-" + "k" * 50):
        assert refresh_tokens.unseal(raw) is None
        report = provider_sweep_task()  # unreadable: not swept, listed, left as is
        assert report["unreadable"] == ["olga"] and report["checked"] == 0
        with override_settings(SECRET_KEY_FALLBACKS=[old]):
            assert refresh_tokens.unseal(raw) == plain


def test_a_provider_that_does_not_answer_changes_nothing(demo, provider, configure):
    configure(sweep_env(provider, TIMEOUT="1"))
    signed_in("dora")
    before = stored_token("dora")
    del provider.accounts["dora"]
    provider.write_accounts()
    os.kill(provider.proc.pid, signal.SIGSTOP)
    try:
        code, out = run_command()
    finally:
        os.kill(provider.proc.pid, signal.SIGCONT)
    assert code == 1 and "nobody deactivated, no groups applied: provider unavailable" in out, out
    assert user("dora").is_active and stored_token("dora") == before
    assert not AuditRecord.objects.filter(action="identity.offboard").exists()
    held = Alert.objects.get(kind="provider_sweep")  # on-call hears of it
    assert (held.subject, held.severity, held.status) == ("provider unavailable", "warning", "open")
    assert held.message.startswith("The single sign-on sweep did not run through.")
    # the provider answers again: the next run does it, and the alert closes
    assert provider_sweep_task()["deactivated"] == ["dora"]
    held.refresh_from_db()
    assert held.status == "resolved"


def test_a_provider_that_refuses_the_portal_itself_deactivates_nobody(demo, provider, configure):
    """A wrong client secret (``invalid_client``, the portal's configuration, not the
    person): nothing changes, the tokens are kept."""
    configure(sweep_env(provider))
    signed_in("dora")
    del provider.accounts["dora"]
    provider.write_accounts()
    configure(sweep_env(provider, CLIENT_SECRET="rotated-elsewhere"))
    report = provider_sweep_task()
    assert (report["deactivated"], report["not_answered"], report["checked"]) == ([], 1, 0)
    assert ProviderAccount.objects.get(user__username="dora").unanswered_at is None  # not used
    assert user("dora").is_active and stored_token("dora")
    held = Alert.objects.get(kind="provider_sweep", status="open")
    assert held.subject == "provider unavailable" and "did not answer for 1 of 1" in held.message
    configure(sweep_env(provider))
    assert provider_sweep_task()["deactivated"] == ["dora"]


def test_a_provider_that_refuses_too_many_deactivates_nobody(demo, provider, configure):
    """A provider that lost its tokens (restarted here: its store is in memory) refuses every
    one: more than ``OIDC_SWEEP_MAX_SHARE``, so nobody is deactivated."""
    configure(sweep_env(provider, SWEEP_MAX_SHARE="0.1"))
    for name in ("dora", "rick", "olga"):
        signed_in(name)
    provider.stop()
    provider.start()
    configure(sweep_env(provider, SWEEP_MAX_SHARE="0.1"))
    code, out = run_command()
    assert code == 1 and "refused 3 of 3 refresh tokens" in out, out
    assert "would deactivate: dora" in out
    assert all(user(name).is_active for name in ("dora", "rick", "olga"))
    assert not AuditRecord.objects.filter(action="identity.offboard").exists()
    held = Alert.objects.get(kind="provider_sweep", status="open")
    assert held.subject == "sweep bound"
    assert "The provider refused 3 of 3 refresh tokens, more than" in held.message
    # a sign-in stores a new token: that person is swept again, and still there
    signed_in("rick")
    code, out = run_command("--dry-run")
    assert code == 1 and "refused 2 of 3" in out and "would deactivate: rick" not in out


def test_local_and_directory_accounts_are_never_asked_about(demo, directory, provider, configure):
    configure({**directory.portal_env(**prefixed("LDAP")), **sweep_env(provider)})
    local = Client()
    assert local.post("/accounts/login/", {"username": "admin", "password": DEMO_PASSWORD})
    ldap_client = Client()
    answer = ldap_client.post(
        "/accounts/login/", {"username": "rick", "password": PEOPLE["rick"][0]}
    )
    assert answer.status_code == 302 and DirectoryAccount.objects.filter(user=user("rick")).exists()
    signed_in("dora")
    # made local since its single sign-on: a password in the portal, never swept again
    signed_in("olga")
    olga = user("olga")
    olga.set_password("olga-local-password-123")
    olga.save()
    for name in ("admin", "rick", "olga", "dora"):
        provider.accounts.pop(name, None)
    provider.write_accounts()
    report = provider_sweep_task()
    assert report["deactivated"] == ["dora"] and report["checked"] == 1
    assert all(user(name).is_active for name in ("admin", "rick", "olga"))
    assert not ProviderAccount.objects.filter(user__username__in=["admin", "rick"]).exists()
    assert can_use_session(local) and can_use_session(ldap_client)


def test_an_account_with_no_stored_token_is_listed_and_left_as_is(demo, provider, configure):
    """Signed in while the sweep was off (no ``offline_access`` asked, no refresh token):
    the account is the provider's, listed as not swept, and stays until a sign-in stores
    a token."""
    configure(sweep_env(provider, SWEEP="0"))
    signed_in("dora")
    assert ProviderAccount.objects.get(user__username="dora").refresh_token == ""
    assert run_command() == (
        0, "OpenID Connect is not configured (OIDC_ISSUER) or OIDC_SWEEP is off: nothing to "
        "sweep\n",
    )  # fmt: skip
    configure(sweep_env(provider))
    del provider.accounts["dora"]
    provider.write_accounts()
    code, out = run_command()
    assert code == 0 and "no refresh token stored (until their next sign-in): 1 (dora)" in out
    assert "deactivated: none" in out and user("dora").is_active


def test_the_command_says_what_it_did(demo, provider, configure):
    configure(sweep_env(provider))
    for name in ("boss", "rick", "olga"):
        signed_in(name)
    provider.accounts["olga"]["disabled"] = True
    provider.write_accounts()
    code, out = run_command("--dry-run")
    assert code == 0 and "would deactivate: olga" in out and "nobody was deactivated" in out
    assert user("olga").is_active
    code, out = run_command()
    assert code == 0, out
    assert "accounts checked at the provider: 3" in out
    assert "still there: 2 (2 token(s) rotated)" in out
    assert "deactivated: olga" in out and not user("olga").is_active


def test_the_sign_in_asks_for_offline_access_only_with_the_sweep(demo, provider, configure):
    configure(sweep_env(provider))
    assert "offline_access" in Client().get("/oidc/authenticate/")["Location"]
    configure(sweep_env(provider, SWEEP="0"))
    assert "offline_access" not in Client().get("/oidc/authenticate/")["Location"]


def test_nothing_is_swept_without_openid_connect(demo):
    assert provider_sweep_task() == {
        "enabled": False, "held": "", "checked": 0, "still_there": 0, "rotated": 0,
        "not_answered": 0, "changed": [], "deactivated": [], "would_deactivate": [],
        "would_demote": [], "without_token": [], "unreadable": [], "uncertain": [],
        "no_user_info": [], "other_account": [],
    }  # fmt: skip


def test_the_upgrade_marks_accounts_a_single_sign_on_changed(demo):
    """Accounts from before ``ProviderAccount``: one a single sign-on changed is the
    provider's (no token: listed as not swept); one the directory changed is not."""
    from django.apps import apps

    from core import audit

    User = get_user_model()
    dora, olga = User.objects.create_user("dora"), User.objects.create_user("olga")
    for person, reason in ((dora, "directory sign-in: groups llm-leads"),
                           (olga, "single sign-on sign-in: groups portal-oncall"),
                           (user("lead"), "single sign-on sign-in: groups llm-leads")):  # fmt: skip
        audit.record(person, "identity.sync", person, reason=reason)
    migration = importlib.import_module("portal.auth.migrations.0003_provider_account")
    migration.mark(apps, None)
    migration.mark(apps, None)  # twice: the same rows
    assert list(ProviderAccount.objects.values_list("user__username", "refresh_token")) == [
        ("olga", "")
    ]


def test_the_beat_schedule_runs_the_sweep_at_its_setting():
    from portal.celery import beat_schedule

    entry = beat_schedule(5.0, 900.0, 300.0)["provider-sweep"]
    assert entry["task"] == provider_sweep_task.name == "portal.auth.tasks.provider_sweep"
    assert (entry["schedule"], entry["options"]["expires"]) == (300.0, 270.0)
    assert beat_schedule(5.0)["provider-sweep"]["schedule"] == 900.0


def test_a_session_check_keeps_the_token_it_brings(demo, provider, configure):
    """The session check's silent round trip (``prompt=none``) is a sign-in: the refresh
    token it brings replaces the kept one."""
    from tests.identity.test_oidc_session_check import RENEW, renewal_time_passes
    from tests.identity.test_oidc_session_check import signed_in as browser_signed_in

    configure(sweep_env(provider))
    with override_settings(OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS=RENEW):
        dora = browser_signed_in("dora")
        first = stored_token("dora")
        renewal_time_passes()
        assert dora.load("/jobs/").status_code == 200 and dora.asked_provider
    assert stored_token("dora") not in (None, first)
    assert provider_sweep_task()["still_there"] == 1


# --- groups: the provider sweep re-applies each person's groups from the user info ---------

QUOTA_ASK = {"business_line": "llm", "quota_gpus": 20, "guarantee_gpus": 6, "reason": "Q3 runs"}


def asks_for_quota(secret: str) -> int:
    """The status of a quota request for the llm line with API token ``secret`` (a lead's
    action: a researcher is refused, 403)."""
    return Client().post(
        "/api/v1/quota-requests/", QUOTA_ASK, content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {secret}",
    ).status_code  # fmt: skip


def test_a_lead_taken_out_of_the_lead_group_at_the_provider_is_a_researcher_after_a_sweep(
    demo, provider, configure
):
    configure(sweep_env(provider))
    dora = signed_in("dora")
    secret = tokens.create_token(user("dora"), "laptop")[1]
    assert state("dora") == (True, "team_lead", False, {"llm": "lead"})
    assert asks_for_quota(secret) == 201
    first = stored_token("dora")
    provider.set_groups("dora", ["llm-team", "gpu-users"])
    # before the sweep her API token still acts as the lead: she opens no page
    assert role_of(user("dora")) == "team_lead"

    report = provider_sweep_task()
    assert report["changed"] == ["dora"] and report["deactivated"] == [], report
    assert (report["still_there"], report["rotated"], report["held"]) == (1, 1, "")
    assert state("dora") == (True, "researcher", False, {"llm": "member"})
    assert asks_for_quota(secret) == 403  # the token keeps working, without the lead's rights
    assert can_use_token(secret) and can_use_session(dora)
    assert stored_token("dora") not in (None, first)  # the rotated token is kept as before
    record = AuditRecord.objects.get(action="identity.sync", target_id=str(user("dora").pk),
                                     reason__startswith="single sign-on sweep")  # fmt: skip
    assert record.actor is None and record.actor_name == "system"
    assert record.reason == "single sign-on sweep: groups llm-team"
    assert (record.before["role"], record.after["role"]) == ("team_lead", "researcher")
    assert (record.before["lines"], record.after["lines"]) == ({"llm": "lead"}, {"llm": "member"})
    # nothing changed at the provider since: nothing written
    count = AuditRecord.objects.count()
    again = provider_sweep_task()
    assert (again["changed"], again["still_there"]) == ([], 1)
    assert AuditRecord.objects.count() == count
    # given back at the provider: given back by the next sweep
    provider.set_groups("dora", ["llm-leads", "gpu-users"])
    assert provider_sweep_task()["changed"] == ["dora"] and asks_for_quota(secret) == 201


def test_someone_taken_out_of_every_required_group_at_the_provider_is_offboarded(
    demo, provider, configure
):
    configure(sweep_env(provider, REQUIRED_GROUPS="gpu-users"))
    boss = signed_in("boss")
    for name in ("dora", "rick"):
        signed_in(name)
    secret = tokens.create_token(user("boss"), "laptop")[1]
    provider.set_groups("boss", ["portal-admins"])  # still an admin group, no longer let in
    report = provider_sweep_task()
    assert report["deactivated"] == ["boss"] and report["changed"] == [], report
    assert state("boss") == (False, "researcher", False, {})
    assert not can_use_token(secret) and not can_use_session(boss)
    record = AuditRecord.objects.get(action="identity.offboard")
    assert record.actor is None and record.target_id == str(user("boss").pk)
    assert record.reason.startswith("single sign-on sweep: in none of the required groups")
    assert stored_token("boss") is None
    assert state("dora") == (True, "team_lead", False, {"llm": "lead"})
    assert state("rick") == (True, "researcher", False, {"search-rec": "member"})


def test_a_sweep_that_would_demote_too_many_changes_nobody(demo, provider, configure):
    """A provider that stops sending the groups claim (a mapper removed) would take every
    admin's role and every lead's line at once: past ``OIDC_SWEEP_MAX_SHARE`` nobody's
    groups change and nobody is deactivated, and on-call is told."""
    configure(sweep_env(provider, SWEEP_MAX_SHARE="0.1"))
    for name in ("boss", "dora", "olga", "rick"):
        signed_in(name)
    for name in ("boss", "dora", "olga"):
        provider.set_groups(name, [])
    del provider.accounts["rick"]  # refused as well: not deactivated either
    provider.write_accounts()
    records = AuditRecord.objects.count()
    report = provider_sweep_task()
    assert report["held"] == (
        "the provider refused 1 of 4 refresh tokens and 3 would lose a role or a line, more "
        "than OIDC_SWEEP_MAX_SHARE allows (1 of each)"
    ), report
    assert sorted(report["would_demote"]) == ["boss", "dora", "olga"]
    assert report["changed"] == [] and report["deactivated"] == []
    assert state("boss") == (True, "admin", True, {})
    assert state("dora") == (True, "team_lead", False, {"llm": "lead"})
    assert role_of(user("olga")) == "oncall" and user("rick").is_active
    assert AuditRecord.objects.count() == records
    held = Alert.objects.get(kind="provider_sweep", status="open")
    assert held.subject == "sweep bound" and "3 would lose a role or a line" in held.message
    code, out = run_command("--dry-run")
    assert code == 1 and "would take a role or a line from: boss" in out, out
    assert "nobody deactivated, no groups applied: the provider refused" in out
    held.refresh_from_db()
    assert held.count == 1, "a dry run tells nobody"
    # one of each is always allowed (counted apart): the provider sends the groups again,
    # one lead really moved, and rick really left
    for name in ("boss", "olga"):
        provider.set_groups(name, sorted(PEOPLE[name][1]))
    provider.set_groups("dora", ["llm-team", "gpu-users"])
    report = provider_sweep_task()
    assert (report["changed"], report["deactivated"], report["held"]) == (["dora"], ["rick"], "")
    assert state("boss") == (True, "admin", True, {})
    held.refresh_from_db()
    assert held.status == "resolved"


def test_a_dry_run_says_whom_it_would_change_and_changes_nobody(demo, provider, configure):
    configure(sweep_env(provider, REQUIRED_GROUPS="gpu-users"))
    for name in ("boss", "dora", "rick"):
        signed_in(name)
    provider.set_groups("dora", ["llm-team", "gpu-users"])
    provider.set_groups("rick", ["search-rec-team"])
    records = AuditRecord.objects.count()
    code, out = run_command("--dry-run")
    assert code == 0, out
    assert "would take a role or a line from: dora" in out
    assert "would deactivate: rick (in none of the required groups)" in out
    assert "dry run: nobody was deactivated and no groups were applied" in out
    assert state("dora") == (True, "team_lead", False, {"llm": "lead"})
    assert user("rick").is_active and AuditRecord.objects.count() == records
    code, out = run_command()
    assert code == 0, out
    assert "role or lines changed: dora" in out and "deactivated: rick" in out
    assert state("dora") == (True, "researcher", False, {"llm": "member"})
    assert not user("rick").is_active


@pytest.mark.parametrize("claims", ["another user name", "another subject"])
def test_a_user_info_about_another_account_leaves_the_person_as_is(
    demo, provider, configure, claims
):
    configure(sweep_env(provider))
    signed_in("dora")
    first = stored_token("dora")
    provider.accounts["dora"]["groups"] = ["gpu-users"]
    if claims == "another user name":
        provider.accounts["dora"]["preferred_username"] = "rick"
    else:
        provider.accounts["dora"]["userinfo_sub"] = "rick"
    provider.write_accounts()
    records = AuditRecord.objects.count()
    report = provider_sweep_task()
    assert report["other_account"] == ["dora"] and report["changed"] == [], report
    assert (report["still_there"], report["rotated"], report["deactivated"]) == (1, 1, [])
    assert state("dora") == (True, "team_lead", False, {"llm": "lead"})
    assert stored_token("dora") not in (None, first)
    assert AuditRecord.objects.count() == records
    code, out = run_command()
    assert "left as is, the user info names another account: dora" in out, out
    # the provider tells about her again: her groups are applied
    provider.accounts["dora"]["preferred_username"] = "dora"
    provider.accounts["dora"].pop("userinfo_sub", None)
    provider.write_accounts()
    assert provider_sweep_task()["changed"] == ["dora"]
    assert state("dora") == (True, "researcher", False, {})


def test_a_user_info_that_fails_leaves_the_groups_as_they_are(demo, provider, configure):
    """The provider accepts the refresh token but its user info endpoint fails (a 500): the
    rotated token is stored, nobody's groups change, and it is asked about nobody else this
    run (a provider whose user info is down would make every person wait for it); on-call
    is told, and the next sweep that reads the groups applies them."""
    configure(sweep_env(provider, SWEEP_MAX_SHARE="1"))  # both lose something: the bound
    signed_in("dora")
    signed_in("boss")
    first = stored_token("dora")
    provider.accounts["dora"]["userinfo_fails"] = True
    for name in ("dora", "boss"):
        provider.accounts[name]["groups"] = ["gpu-users"]
    provider.write_accounts()
    records = AuditRecord.objects.count()
    report = provider_sweep_task()
    assert report["no_user_info"] == ["dora", "boss"] and report["changed"] == [], report
    assert (report["still_there"], report["rotated"], report["deactivated"]) == (2, 2, [])
    assert stored_token("dora") not in (None, first)
    assert state("dora") == (True, "team_lead", False, {"llm": "lead"})
    assert role_of(user("boss")) == "admin" and AuditRecord.objects.count() == records
    held = Alert.objects.get(kind="provider_sweep", status="open")
    assert held.subject == "provider unavailable"
    assert "user info endpoint gave no claims for 2 of 2 accounts" in held.message
    code, out = run_command()
    assert "groups not applied, the user info gave no claims: dora" in out, out
    del provider.accounts["dora"]["userinfo_fails"]
    provider.write_accounts()
    report = provider_sweep_task()
    assert sorted(report["changed"]) == ["boss", "dora"] and report["no_user_info"] == []
    held.refresh_from_db()
    assert held.status == "resolved"
