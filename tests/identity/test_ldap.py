"""LDAP sign-in through the login form against a real OpenLDAP (``testbeds.Directory``):
groups give the role and the lines at every sign-in, audited; local accounts are never
taken over; a directory outage is a message, not a 500, and local accounts still work."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from core.models import AuditRecord, LineMembership, Profile
from core.roles import role_of
from tests.conftest import DEMO_PASSWORD
from tests.identity.conftest import PEOPLE, at_once, prefixed

pytestmark = pytest.mark.django_db

UNREACHABLE = "The company directory (LDAP) cannot be reached right now"
MISMATCH = "Your username and password didn't match"


def sign_in(
    username: str, password: str | None = None, client: Client | None = None
) -> tuple[Client, object]:
    client = client or Client()
    password = PEOPLE[username][0] if password is None else password
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return client, response


def lines_of(username: str) -> dict[str, str]:
    return {
        m.business_line.name: "lead" if m.is_lead else "member"
        for m in LineMembership.objects.filter(user__username=username).select_related(
            "business_line"
        )
    }


def user(username: str):
    return get_user_model().objects.get(username=username)


def test_a_lead_group_signs_in_as_the_lead_of_its_line(demo, ldap_on):
    client, response = sign_in("dora")
    assert response.status_code == 302, response.content.decode()[:2000]
    dora = user("dora")
    assert (role_of(dora), lines_of("dora")) == ("team_lead", {"llm": "lead"})
    assert dora.email == "dora@example.org" and not dora.has_usable_password()
    # the lead's page: the quota request form offers the line
    page = client.get("/quotas/requests/new/")
    assert page.status_code == 200
    assert 'value="llm"' in page.content.decode() or ">llm<" in page.content.decode()
    record = AuditRecord.objects.get(action="identity.sync", target_id=str(dora.pk))
    assert record.actor == dora
    assert record.before == {"role": "researcher", "superuser": False, "lines": {}}
    assert record.after == {"role": "team_lead", "superuser": False, "lines": {"llm": "lead"}}
    assert "directory sign-in" in record.reason and "llm-leads" in record.reason


def test_admin_and_oncall_groups(demo, ldap_on):
    assert sign_in("boss")[1].status_code == 302
    assert sign_in("olga")[1].status_code == 302
    boss, olga = user("boss"), user("olga")
    assert role_of(boss) == "admin" and boss.is_superuser and boss.is_staff
    assert role_of(olga) == "oncall" and not olga.is_superuser
    client, _ = sign_in("rick")
    assert (role_of(user("rick")), lines_of("rick")) == ("researcher", {"search-rec": "member"})
    assert client.get("/quotas/requests/new/").status_code == 403  # not a lead


def test_group_changes_take_effect_at_the_next_sign_in(demo, ldap_on):
    assert sign_in("boss")[1].status_code == 302
    assert sign_in("dora")[1].status_code == 302
    # HR moves dora from leading llm to leading search-rec (and a member of llm); boss leaves
    # the admins.
    ldap_on.set_groups("dora", {"search-rec-leads", "llm-team"})
    ldap_on.set_groups("boss", {"gpu-users"})
    assert lines_of("dora") == {"llm": "lead"}  # nothing changes before the next sign-in
    client, response = sign_in("dora")
    assert response.status_code == 302
    assert lines_of("dora") == {"llm": "member", "search-rec": "lead"}
    form = client.get("/quotas/requests/new/").content.decode()
    assert "search-rec" in form
    assert sign_in("boss")[1].status_code == 302
    boss = user("boss")
    assert role_of(boss) == "researcher" and not boss.is_superuser and not boss.is_staff
    demoted = AuditRecord.objects.filter(action="identity.sync", target_id=str(boss.pk)).first()
    assert (demoted.before["role"], demoted.after["role"]) == ("admin", "researcher")
    # the same groups again: nothing changes, nothing is audited
    count = AuditRecord.objects.filter(action="identity.sync").count()
    assert sign_in("dora")[1].status_code == 302
    assert AuditRecord.objects.filter(action="identity.sync").count() == count


def test_memberships_outside_the_mapped_lines_are_left_alone(demo, ldap_on):
    from quotas.models import BusinessLine

    assert sign_in("rick")[1].status_code == 302
    LineMembership.objects.create(
        user=user("rick"), business_line=BusinessLine.objects.get(name="multimodal")
    )  # given by hand in a line the mapping does not name
    ldap_on.set_groups("rick", {"gpu-users"})
    assert sign_in("rick")[1].status_code == 302
    assert lines_of("rick") == {"multimodal": "member"}


def test_a_wrong_directory_password_is_refused(demo, ldap_on):
    client, response = sign_in("dora", "not-her-password")
    assert response.status_code == 200
    assert MISMATCH in response.content.decode()
    assert not get_user_model().objects.filter(username="dora").exists()


def test_the_local_break_glass_admin_is_never_taken_over_by_the_directory(demo, ldap_on):
    local = user("admin")
    # the directory's "admin" with the directory's password: refused, local account untouched
    _, response = sign_in("admin", PEOPLE["admin"][0])
    assert response.status_code == 200
    assert "belongs to a local portal account" in response.content.decode()
    after = user("admin")
    assert after.check_password(DEMO_PASSWORD) and after.email == local.email
    assert not AuditRecord.objects.filter(action="identity.sync").exists()
    # the local password signs in, as ever
    assert sign_in("admin", DEMO_PASSWORD)[1].status_code == 302


def test_directory_down_is_a_message_and_local_accounts_still_sign_in(demo, ldap_on):
    assert sign_in("dora")[1].status_code == 302  # she has an account from earlier
    ldap_on.stop()
    client, response = sign_in("dora")
    body = response.content.decode()
    assert response.status_code == 200
    assert UNREACHABLE in body and "Local accounts still work" in body
    assert MISMATCH not in body  # her password was not found wrong: it was not checked
    assert "_auth_user_id" not in client.session
    # local accounts: researcher and the break-glass admin
    assert sign_in("researcher", DEMO_PASSWORD)[1].status_code == 302
    client, response = sign_in("admin", DEMO_PASSWORD)
    assert response.status_code == 302
    assert client.get("/admin/").status_code == 200
    ldap_on.start()
    assert sign_in("dora")[1].status_code == 302  # and back


def test_required_groups_keep_others_out(demo, directory, configure):
    configure(directory.portal_env(**prefixed("LDAP", REQUIRED_GROUPS="gpu-users")))
    client, response = sign_in("outsider")
    assert response.status_code == 200
    assert "not in a group that may use the portal" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert sign_in("rick")[1].status_code == 302


def test_a_sign_in_with_nothing_configured_does_not_ask_the_directory(demo, directory):
    # the test settings (no LDAP_* variables): directory people are unknown here
    _, response = sign_in("dora")
    assert response.status_code == 200
    assert not get_user_model().objects.filter(username="dora").exists()
    assert Profile.objects.filter(user__username="lead").get().role == "team_lead"


def test_a_frozen_directory_costs_its_timeout_not_a_hung_sign_in(demo, directory, configure):
    """A directory that accepts connections and never answers (a hung slapd, a black-holed
    firewall): the sign-in gives up after ``LDAP_TIMEOUT`` and says so."""
    import socket
    import time

    with socket.socket() as frozen:
        frozen.bind(("127.0.0.1", 0))
        frozen.listen(16)  # the kernel completes the handshake; nobody ever reads
        env = directory.portal_env(**prefixed("LDAP"), LDAP_TIMEOUT="1")
        configure({**env, "LDAP_SERVER_URI": f"ldap://127.0.0.1:{frozen.getsockname()[1]}"})
        started = time.monotonic()
        client, response = sign_in("dora")
        took = time.monotonic() - started
    assert response.status_code == 200 and UNREACHABLE in response.content.decode()
    assert took < 5, took


def test_a_directory_that_refuses_the_service_account_is_said_too(demo, directory, configure):
    env = directory.portal_env(**prefixed("LDAP"), LDAP_BIND_PASSWORD="rotated-elsewhere")
    configure(env)
    client, response = sign_in("dora")
    body = response.content.decode()
    assert response.status_code == 200
    assert "The company directory (LDAP) answered with an error" in body
    assert MISMATCH not in body
    assert sign_in("admin", DEMO_PASSWORD)[1].status_code == 302


def test_sign_ins_the_directory_could_not_check_do_not_lock_the_account(demo, ldap_on, settings):
    """During a directory outage a directory person's attempts were counted as wrong
    passwords: after 10 of them (``LOGIN_FAILURES_PER_USERNAME_AND_IP``) she was locked out
    for 5 minutes once the directory came back. A local account's failures still count."""
    settings.LOGIN_FAILURES_PER_USERNAME_AND_IP = 3
    assert sign_in("dora")[1].status_code == 302
    ldap_on.stop()
    for _ in range(5):
        response = sign_in("dora")[1]
        assert response.status_code == 200 and UNREACHABLE in response.content.decode()
    for _ in range(3):  # a local account's password is checked (and wrong) whatever LDAP does
        assert sign_in("researcher", "wrong-password")[1].status_code == 200
    assert sign_in("researcher", DEMO_PASSWORD)[1].status_code == 429
    ldap_on.start()
    assert sign_in("dora")[1].status_code == 302


def test_a_spelling_the_directory_folds_is_no_way_past_the_local_account_guard(demo, ldap_on):
    """OpenLDAP matches ``admİn`` (a capital dotted I) to ``admin``; Python lower-cases it to
    ``admi̇n`` (an i and a combining dot), which no account has. The directory's ``admin``
    typed that way signed in as a new superuser ``admi̇n``, past the guard of the local
    break-glass ``admin``, and ``rİck`` made rick a second account."""
    _, response = sign_in("adm\u0130n", PEOPLE["admin"][0])
    assert response.status_code == 200
    assert list(get_user_model().objects.filter(is_superuser=True).values_list("username")) == [
        ("admin",)
    ]
    _, response = sign_in("r\u0130ck", PEOPLE["rick"][0])
    assert response.status_code == 200
    assert not get_user_model().objects.filter(username__startswith="ri").exists()
    assert sign_in("RICK", PEOPLE["rick"][0])[1].status_code == 302  # case alone: the same one
    assert user("rick").get_username() == "rick"


def test_a_spelling_the_directory_folds_does_not_escape_the_failure_limit(demo, ldap_on, settings):
    """The limiter counts ``rİck`` apart from ``rick`` (NFKC and case-folding keep the dot);
    the directory must not take it for rick, or each I of a name doubles the guesses."""
    settings.LOGIN_FAILURES_PER_USERNAME_AND_IP = 3
    for _ in range(3):
        assert sign_in("rick", "not-his-password")[1].status_code == 200
    assert sign_in("rick")[1].status_code == 429
    client, response = sign_in("r\u0130ck", PEOPLE["rick"][0])
    assert response.status_code == 200 and "_auth_user_id" not in client.session


def test_accounts_whose_names_only_look_the_same_are_told_apart(demo, ldap_on):
    """PostgreSQL's ``UPPER`` (Django's ``iexact``) folds a dotless ``ı`` into ``I``: the
    directory's rick signed in to ``rıck`` (another person's single sign-on account), and
    with ``rick`` there too the lookup found two and answered 500, as it did for two
    accounts differing only in case."""
    get_user_model().objects.create_user("r\u0131ck")  # no password: made by a sign-in
    client, response = sign_in("rick")
    assert response.status_code == 302 and user("rick").email == "rick@example.org"
    assert user("r\u0131ck").email == ""
    get_user_model().objects.create_user("Dora", password="a-local-password")
    get_user_model().objects.create_user("dora")
    client, response = sign_in("dora")
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    assert "More than one portal account has this user name" in response.content.decode()


@pytest.mark.parametrize(
    "attribute, value, field, kept",
    [
        ("mail", b"olga." + b"x" * 300 + b"@example.org", "email", ""),  # cut: another address
        ("givenName", "Ö".encode() * 151, "first_name", "Ö" * 150),  # cut to the column
        ("sn", b"Olga\x00Ivanova", "last_name", ""),  # PostgreSQL refuses NUL
        ("sn", b"\x1b[2J", "last_name", ""),  # a terminal escape
    ],
)
def test_directory_attributes_the_account_cannot_hold_are_not_a_500(
    demo, ldap_on, attribute, value, field, kept
):
    """The directory's ``mail``, ``givenName`` and ``sn`` were copied as they came: one
    too long for its column, or with a NUL, was a 500 at sign-in."""
    original = b"olga@example.org" if attribute == "mail" else b"olga"
    ldap_on.set_attribute("olga", attribute, value)
    try:
        _, response = sign_in("olga")
    finally:
        ldap_on.set_attribute("olga", attribute, original)
    assert response.status_code == 302 and role_of(user("olga")) == "oncall"
    assert getattr(user("olga"), field) == kept


def test_someone_no_longer_in_a_required_group_loses_the_role_the_groups_gave(
    demo, directory, configure
):
    """An admin taken out of every group (one who left) was refused at the next sign-in,
    rightly, but stayed a superuser and an admin for their open sessions and API tokens:
    the refusal wrote nothing. Now it takes away what the groups gave, audited."""
    configure(directory.portal_env(**prefixed("LDAP", REQUIRED_GROUPS="gpu-users")))
    assert sign_in("boss")[1].status_code == 302 and user("boss").is_superuser
    assert sign_in("dora")[1].status_code == 302 and lines_of("dora") == {"llm": "lead"}
    directory.set_groups("boss", set())
    directory.set_groups("dora", {"llm-leads"})
    for name in ("boss", "dora"):
        client, response = sign_in(name)
        assert response.status_code == 200 and "_auth_user_id" not in client.session
        assert "not in a group that may use the portal" in response.content.decode()
    boss = user("boss")
    assert (role_of(boss), boss.is_superuser, boss.is_staff) == ("researcher", False, False)
    assert (role_of(user("dora")), lines_of("dora")) == ("researcher", {})
    record = AuditRecord.objects.filter(action="identity.sync", target_id=str(boss.pk)).first()
    assert (record.before["role"], record.after["role"]) == ("admin", "researcher")
    assert "required" in record.reason


@pytest.mark.django_db(transaction=True)
def test_sign_ins_of_one_person_at_once_are_not_a_500(demo, ldap_on):
    """Two first sign-ins of one person at once (a double click, two tabs) both made the
    account, and the second save was a 500 (``auth_user_username_key``); two syncs of
    the same groups at once both audited the one change."""

    def one() -> int:
        return sign_in("dora", client=Client(raise_request_exception=False))[1].status_code

    for _ in range(4):
        get_user_model().objects.filter(username="dora").delete()
        assert at_once([one] * 4) == [302] * 4
        assert lines_of("dora") == {"llm": "lead"}
        dora = user("dora")
        assert AuditRecord.objects.filter(target_id=str(dora.pk)).count() == 1
