"""The directory sweep (``portal/auth/sweep.py``) against a real OpenLDAP: a person deleted
from the directory, or no longer in the required groups, loses the account, its sessions
and API tokens without signing in; a group change takes effect without a sign-in; a
directory that cannot be asked, or a sweep that would deactivate too many, changes nothing;
local accounts are never touched."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from core import tokens
from core.models import AuditRecord
from core.roles import role_of
from demo.workload import WORKLOAD_USER
from monitoring.models import Alert
from portal.auth.models import DirectoryAccount
from portal.auth.tasks import directory_sweep
from scheduling.models import Job
from tests.conftest import DEMO_PASSWORD
from tests.identity.conftest import prefixed
from tests.identity.test_ldap import lines_of, sign_in, user
from tests.identity.testbeds import PEOPLE

pytestmark = pytest.mark.django_db


def sweep_env(directory, **extra: str) -> dict[str, str]:
    """The portal's LDAP settings for the test directory; a bound of one half unless set
    (a handful of accounts: the default tenth would hold any deactivation but one)."""
    return directory.portal_env(**prefixed("LDAP", **{"SWEEP_MAX_SHARE": "0.5", **extra}))


def signed_in(name: str) -> Client:
    client, response = sign_in(name)
    assert response.status_code == 302, response.content.decode()[:500]
    return client


def can_use_session(client: Client) -> bool:
    return client.get("/").status_code == 200


def can_use_token(secret: str) -> bool:
    return Client().get("/api/v1/queues/", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 200


def command_output(command: str, *args: str) -> tuple[int, str]:
    """A management command's exit code and what it printed (stdout, then stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(command, *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code), out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


def run_command(*args: str) -> tuple[int, str]:
    return command_output("sync_directory", *args)


def state(name: str) -> tuple:
    account = user(name)
    return account.is_active, role_of(account), account.is_superuser, lines_of(name)


def test_someone_deleted_from_the_directory_loses_account_sessions_and_tokens(
    demo, directory, configure
):
    configure(sweep_env(directory))
    boss = signed_in("boss")
    dora = signed_in("dora")
    secret = tokens.create_token(user("boss"), "laptop")[1]
    legacy = Token.objects.create(user=user("boss")).key
    job = boss.post("/api/v1/jobs/", {"name": "train", "queue": "llm-core", "gpus": 8})
    assert job.status_code == 201, job.content
    assert can_use_session(boss) and can_use_token(secret) and can_use_token(legacy)
    directory.delete_person("boss")
    # before the sweep, the deleted admin is still an admin in every open session
    assert can_use_session(boss) and user("boss").is_superuser

    code, out = run_command()
    assert code == 0 and "deactivated: boss" in out, out
    boss_user = user("boss")
    assert state("boss") == (False, "researcher", False, {})
    assert not boss_user.is_staff
    assert not Session.objects.filter(session_key=boss.session.session_key).exists()
    assert not can_use_session(boss)
    assert not can_use_token(secret) and not can_use_token(legacy)
    assert not Token.objects.filter(user=boss_user).exists()
    # one record, by the system, with the reason and what they had
    record = AuditRecord.objects.get(action="identity.offboard", target_id=str(boss_user.pk))
    assert record.actor is None and record.actor_name == "system"
    assert "no longer in the directory" in record.reason
    assert record.before == {"role": "admin", "superuser": True, "lines": {}, "active": True}
    assert record.after == {"role": "researcher", "superuser": False, "lines": {}, "active": False}
    assert "2 API token(s) revoked" in record.reason and "1 session(s) ended" in record.reason
    # their work keeps running; the others are untouched
    assert Job.objects.get(pk=job.json()["id"]).state != Job.State.CANCELLED
    assert can_use_session(dora) and state("dora") == (True, "team_lead", False, {"llm": "lead"})
    # a second sweep finds nothing more to do
    count = AuditRecord.objects.count()
    assert directory_sweep()["deactivated"] == []
    assert AuditRecord.objects.count() == count


def test_the_command_says_what_it_did(demo, directory, configure):
    configure(sweep_env(directory))
    signed_in("boss")
    signed_in("dora")
    directory.delete_person("boss")
    code, out = run_command("--dry-run")
    assert code == 0 and "would deactivate: boss (no longer in the directory)" in out
    assert user("boss").is_active  # a dry run changes nothing
    code, out = run_command()
    assert code == 0 and "deactivated: boss" in out and not user("boss").is_active


def test_a_group_change_takes_effect_without_a_sign_in(demo, directory, configure):
    configure(sweep_env(directory, SWEEP_MAX_SHARE="1"))  # both lose something: the bound
    boss = signed_in("boss")
    signed_in("dora")
    directory.set_groups("dora", {"search-rec-leads", "llm-team"})
    directory.set_groups("boss", {"gpu-users"})
    report = directory_sweep()
    assert sorted(report["changed"]) == ["boss", "dora"] and report["deactivated"] == []
    assert state("dora") == (True, "team_lead", False, {"llm": "member", "search-rec": "lead"})
    assert state("boss") == (True, "researcher", False, {})
    assert boss.get("/admin/").status_code == 302  # no longer staff: sent to the admin login
    record = AuditRecord.objects.filter(action="identity.sync", target_id=str(user("boss").pk))
    demoted = record.first()
    assert (demoted.before["role"], demoted.after["role"]) == ("admin", "researcher")
    assert demoted.reason.startswith("directory sweep: groups") and demoted.actor is None
    # nothing changed since: nothing written
    count = AuditRecord.objects.count()
    assert directory_sweep()["changed"] == []
    assert AuditRecord.objects.count() == count


def test_someone_taken_out_of_the_required_groups_is_deactivated(demo, directory, configure):
    configure(sweep_env(directory, REQUIRED_GROUPS="gpu-users"))
    boss = signed_in("boss")
    signed_in("dora")
    signed_in("rick")
    directory.set_groups("boss", {"portal-admins"})  # still an admin group, not let in
    assert directory_sweep()["deactivated"] == ["boss"]
    assert state("boss") == (False, "researcher", False, {})
    assert not can_use_session(boss)
    record = AuditRecord.objects.get(action="identity.offboard")
    assert "in none of the required groups" in record.reason
    assert state("dora") == (True, "team_lead", False, {"llm": "lead"})


@pytest.mark.parametrize("outage", ["stopped", "bind refused", "no such search base"])
def test_a_directory_that_cannot_be_asked_changes_nothing(demo, directory, configure, outage):
    configure(sweep_env(directory))
    boss = signed_in("boss")
    signed_in("dora")
    directory.delete_person("boss")
    directory.set_groups("dora", set())
    before = {name: state(name) for name in ("boss", "dora")}
    records = AuditRecord.objects.count()
    if outage == "stopped":
        directory.stop()
    elif outage == "bind refused":
        configure(sweep_env(directory, BIND_PASSWORD="rotated-elsewhere"))
    else:
        configure(sweep_env(directory, USER_SEARCH_BASE="ou=staff,dc=example,dc=org"))
    try:
        report = directory_sweep()
        code, out = run_command()
    finally:
        directory.start() if not directory.running else None
    assert report["held"].startswith("directory unavailable") and report["deactivated"] == []
    assert code == 1 and "nothing changed: directory unavailable" in out
    assert {name: state(name) for name in ("boss", "dora")} == before
    assert AuditRecord.objects.count() == records
    assert can_use_session(boss)
    held = Alert.objects.get(kind="directory_sweep")  # on-call is told, once per outage
    assert held.subject == "directory unavailable" and held.count == 2, held.count
    assert held.status == "open" and "people deleted from the directory keep" in held.message
    configure(sweep_env(directory))  # back: the next run does it
    assert directory_sweep()["deactivated"] == ["boss"]
    held.refresh_from_db()
    assert held.status == "resolved", "a sweep that ran through resolves it"


def test_a_sweep_that_would_deactivate_too_many_deactivates_nobody(demo, directory, configure):
    configure(directory.portal_env(**prefixed("LDAP")))  # the default bound: a tenth
    for name in ("boss", "dora", "rick", "olga"):
        signed_in(name)
    directory.set_groups("dora", {"search-rec-leads"})
    directory.delete_person("boss")
    directory.delete_person("rick")
    records = AuditRecord.objects.count()
    report = directory_sweep()
    assert "would deactivate 2 of 4 directory accounts" in report["held"]
    assert all(user(name).is_active for name in ("boss", "rick"))
    assert lines_of("dora") == {"llm": "lead"}  # held: nothing at all is written
    assert AuditRecord.objects.count() == records
    held = Alert.objects.get(kind="directory_sweep", subject="sweep bound")
    assert "would deactivate 2 of 4 directory accounts" in held.message
    assert run_command("--dry-run")[0] == 1
    held.refresh_from_db()
    assert held.count == 1, "a dry run tells nobody"
    code, out = run_command()
    assert code == 1 and "LDAP_SWEEP_MAX_SHARE" in out and "would deactivate: boss" in out
    # a user search base that exists but holds nobody: everyone looks deleted
    directory.restore_person("boss")
    directory.restore_person("rick")
    empty_base = "ou=groups,dc=example,dc=org"
    configure(directory.portal_env(**prefixed("LDAP", USER_SEARCH_BASE=empty_base)))
    assert "would deactivate 4 of 4" in directory_sweep()["held"]
    assert all(user(name).is_active for name in ("boss", "dora", "rick", "olga"))
    # a group search base with no group in it: nobody is deleted, but everyone would lose
    # what their groups gave (the admin their role, the lead their line) at once
    configure(directory.portal_env(**prefixed("LDAP", GROUP_SEARCH_BASE=PEOPLE)))
    held = directory_sweep()["held"]
    assert "would deactivate 0 of 4 directory accounts and take a role or a line from" in held
    code, out = run_command("--dry-run")
    assert code == 1 and "would take a role or a line from: boss" in out
    assert "would take a role or a line from: dora" in out
    assert role_of(user("boss")) == "admin" and lines_of("dora") == {"llm": "lead"}
    # one is always allowed, whatever the share
    configure(directory.portal_env(**prefixed("LDAP")))
    directory.delete_person("olga")
    assert directory_sweep()["deactivated"] == ["olga"]


def test_local_accounts_and_accounts_the_directory_does_not_have_are_left_alone(
    demo, directory, configure
):
    configure(sweep_env(directory))
    signed_in("dora")
    User = get_user_model()
    # "admin" is in the directory too, but here it is the local break-glass admin
    local = {u.username: state(u.username) for u in User.objects.all() if u.has_usable_password()}
    assert "admin" in local and "researcher" in local
    bot = User.objects.create_user("ci-bot")  # automation: no password, not in the directory
    secret = tokens.create_token(bot, "ci")[1]
    # rick's account from before directory accounts were marked (no usable password)
    rick = User.objects.create_user("rick")
    directory.delete_person("dora")
    report = directory_sweep()
    # dora, rick, ci-bot and the demo's workload account: local accounts are never looked up
    assert report["checked"] == 4
    assert report["deactivated"] == ["dora"]
    assert report["adopted"] == ["rick"] and DirectoryAccount.objects.filter(user=rick).exists()
    assert state("rick") == (True, "researcher", False, {"search-rec": "member"})
    assert {name: state(name) for name in local} == local
    assert user("admin").check_password(DEMO_PASSWORD)
    assert user("ci-bot").is_active and can_use_token(secret)
    assert user(WORKLOAD_USER).is_active and lines_of(WORKLOAD_USER)  # passwordless too
    assert not DirectoryAccount.objects.filter(user=bot).exists()


def test_nothing_is_swept_without_ldap(demo, directory):
    get_user_model().objects.create_user("dora")  # passwordless, but LDAP is not configured
    assert directory_sweep() == {
        "enabled": False, "held": "", "checked": 0, "adopted": [], "changed": [],
        "deactivated": [], "would_deactivate": [], "would_demote": [], "ambiguous": [],
    }  # fmt: skip
    assert run_command() == (0, "LDAP is not configured (LDAP_SERVER_URI): nothing to sweep\n")
    assert user("dora").is_active


def test_an_account_made_inactive_has_no_session_left(demo, ldap_on):
    """django-auth-ldap's ``get_user`` served the session of an inactive account: one an
    admin deactivated kept browsing in the session it had."""
    dora = signed_in("dora")
    get_user_model().objects.filter(username="dora").update(is_active=False)
    assert dora.get("/").status_code == 302


def test_a_directory_sign_in_marks_the_account_as_the_directorys(demo, ldap_on):
    signed_in("dora")
    assert DirectoryAccount.objects.filter(user__username="dora").exists()
    assert not DirectoryAccount.objects.filter(user__username="researcher").exists()


def test_the_beat_schedule_runs_the_sweep_at_its_setting():
    from portal.celery import beat_schedule

    entry = beat_schedule(5.0, 300.0)["directory-sweep"]
    assert entry["task"] == directory_sweep.name == "portal.auth.tasks.directory_sweep"
    assert (entry["schedule"], entry["options"]["expires"]) == (300.0, 270.0)
    assert beat_schedule(5.0)["directory-sweep"]["schedule"] == 900.0


def test_the_upgrade_marks_accounts_a_directory_sign_in_changed(demo):
    """Accounts from before ``DirectoryAccount``: one a directory sign-in changed (its
    ``identity.sync`` record says "directory sign-in") is the directory's; one the
    provider changed, or a local one, is not."""
    import importlib

    from django.apps import apps

    from core import audit

    User = get_user_model()
    dora, olga = User.objects.create_user("dora"), User.objects.create_user("olga")
    for person, reason in ((dora, "directory sign-in: groups llm-leads"),
                           (olga, "single sign-on sign-in: groups portal-oncall"),
                           (user("lead"), "directory sign-in: groups llm-leads")):  # fmt: skip
        audit.record(person, "identity.sync", person, reason=reason)
    migration = importlib.import_module("portal.auth.migrations.0002_directory_accounts_from_audit")
    migration.mark(apps, None)
    migration.mark(apps, None)  # twice: the same rows
    assert list(DirectoryAccount.objects.values_list("user__username", flat=True)) == ["dora"]


def test_someone_who_comes_back_needs_an_admin_to_reactivate_the_account(
    demo, directory, configure
):
    configure(sweep_env(directory))
    signed_in("boss")
    signed_in("dora")
    directory.delete_person("boss")
    assert directory_sweep()["deactivated"] == ["boss"]
    directory.restore_person("boss")  # re-hired
    client, response = sign_in("boss")
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    assert "Your portal account is deactivated" in response.content.decode()
    assert state("boss") == (False, "researcher", False, {})  # the groups are not applied
    assert AuditRecord.objects.filter(target_id=str(user("boss").pk)).count() == 2  # sync, offboard
    assert directory_sweep()["deactivated"] == [] and not user("boss").is_active
    get_user_model().objects.filter(username="boss").update(is_active=True)  # the admin
    assert signed_in("boss") and state("boss") == (True, "admin", True, {})
