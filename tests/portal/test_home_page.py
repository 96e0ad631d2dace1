"""Login and the home page: signed-in users of every role see the cluster at a glance."""

import re

import pytest

from scheduling.models import Job
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


def test_the_home_page_opens_with_the_person_s_own_active_jobs(client, demo):
    """Page walk: a researcher landing on the home page read only the cluster's totals."""
    from scheduling.cycle import run_cycle
    from scheduling.services import JobRequest, cancel_job, submit_job

    client.force_login(demo["researcher"])

    def own() -> str:
        return re.search(r'<p id="own-jobs">(.*?)</p>', client.get("/").content.decode())[1]

    assert own() == ('<strong>Your jobs:</strong> none waiting or running · '
                     '<a href="/jobs/new/">Submit a job</a>')  # fmt: skip
    for name, gpus in (("runs", 8), ("waits", 32), ("also-waits", 32), ("gone", 1)):
        submit_job(demo["researcher"], JobRequest(name=name, queue="llm-core", gpus=gpus))
    submit_job(demo["lead"], JobRequest(name="not-mine", queue="llm-core", gpus=1))
    cancel_job(demo["researcher"], Job.objects.get(name="gone").pk)
    run_cycle()
    assert own() == (
        '<strong>Your jobs:</strong> <a href="/jobs/?state=pending&amp;mine=1">2 jobs pending</a>'
        ' · <a href="/jobs/?state=running&amp;mine=1">1 job running</a> · '
        '<a href="/jobs/new/">Submit a job</a>'
    )
    # each link lists exactly the jobs it counts
    listed = client.get("/jobs/?state=pending&mine=1").content.decode()
    assert "2 jobs." in listed and "waits" in listed and "not-mine" not in listed
