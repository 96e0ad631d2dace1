"""Login and the home page: signed-in users of every role see the cluster at a glance."""

import pytest

from tests.conftest import DEMO_PASSWORD

pytestmark = pytest.mark.django_db


def test_anonymous_visitors_are_sent_to_login(client, demo):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_login_page_renders_a_labelled_form_with_csrf(client, demo):
    body = client.get("/accounts/login/").content.decode()
    assert 'for="id_username"' in body and 'for="id_password"' in body
    assert "csrfmiddlewaretoken" in body


def test_wrong_password_is_refused(client, demo):
    response = client.post("/accounts/login/", {"username": "researcher", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("username", ["admin", "oncall", "lead", "researcher", "researcher2"])
def test_every_role_logs_in_and_sees_the_cluster(client, demo, username):
    response = client.post("/accounts/login/", {"username": username, "password": DEMO_PASSWORD})
    assert response.status_code == 302
    page = client.get("/").content.decode()
    assert '<span class="big" id="nodes-total">4</span>' in page
    assert '<span class="big" id="gpus-total">32</span>' in page
    assert "Large language models" in page


def test_csrf_is_enforced_on_login(demo):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/accounts/login/", {"username": "admin", "password": DEMO_PASSWORD})
    assert response.status_code == 403


def test_only_admins_reach_the_django_admin(client, demo):
    client.force_login(demo["researcher"])
    assert client.get("/admin/").status_code == 302
    client.force_login(demo["admin"])
    assert client.get("/admin/").status_code == 200


def test_issue_token_prints_a_working_token(demo):
    from io import StringIO

    from django.core.management import call_command
    from rest_framework.test import APIClient

    out = StringIO()
    call_command("issue_token", "researcher", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {out.getvalue().strip()}")
    assert client.get("/api/v1/queues/").status_code == 200


def test_issue_token_for_an_unknown_user_fails_clearly(demo):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no user named"):
        call_command("issue_token", "ghost")
