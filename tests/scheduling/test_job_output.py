"""A job's output: who may read it, which run, how much, a backend that cannot answer, and the
three surfaces (the service, ``GET /api/v1/jobs/{id}/output/``, the page ``/jobs/<id>/output/``)
on the simulator backend of the demo seed."""

from __future__ import annotations

import html
import time

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from scheduling import output
from scheduling.backends.base import NoOutput, OutputTail, TransientBackendError
from scheduling.backends.simulator import SimulatorBackend
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.output import MAX_BYTES, OutputUnavailable, read_job_output
from scheduling.services import JobRequest, submit_job

pytestmark = pytest.mark.django_db

HOSTILE = (
    b"step 1 \x1b[31mred\x1b[0m\r\n<script>alert(1)</script>\n\x1b]0;pwned\x07title\n"
    b"bell\x07 rtl\xe2\x80\xaeevil tab\tok\n"
)


@pytest.fixture
def running(demo) -> Job:
    """A researcher's job of the llm line, started by a cycle on the simulator."""
    job = submit_job(demo["researcher"], JobRequest(
        name="sft", queue="llm-finetune", gpus=2, checkpoint_path="nfs://ckpt/sft",
        sim_duration_minutes=600,
    ))  # fmt: skip
    run_cycle()
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 1
    return job


@pytest.fixture
def backend_says(monkeypatch):
    """Make every backend's ``read_output`` answer ``answer`` (a value, or an exception)."""

    def install(answer) -> None:
        def read_output(self, ref, max_bytes, *, checkpoint_path=""):
            if isinstance(answer, BaseException):
                raise answer
            return answer(ref, max_bytes) if callable(answer) else answer

        monkeypatch.setattr(SimulatorBackend, "read_output", read_output)

    return install


def as_user(demo, username: str) -> Client:
    client = Client()
    client.force_login(demo[username])
    return client


# -- the service -------------------------------------------------------------------------------


@pytest.mark.parametrize("username", ["researcher", "lead", "oncall", "admin"])
def test_the_people_who_troubleshoot_read_the_simulators_output(demo, running, username):
    out = read_job_output(demo[username], running)
    assert out.attempt == 1 and out.attempts == 1 and out.reason == ""
    assert f"[portal-{running.pk}-1] started on" in out.text
    assert "starting from the beginning" in out.text
    assert out.source.startswith("simulator")


def test_a_researcher_of_the_line_who_is_not_the_owner_may_see_the_job_but_not_its_output(
    demo, running
):
    workload = demo["workload"]  # a plain member of every line: sees the job
    from scheduling.selectors import get_job_for_user

    assert get_job_for_user(workload, running.pk) is not None
    with pytest.raises(PermissionDenied):
        read_job_output(workload, running)


def test_a_job_that_has_not_run_has_no_output_and_no_attempt_to_ask_for(demo):
    job = submit_job(demo["researcher"], JobRequest(name="later", queue="llm-finetune", gpus=2))
    out = read_job_output(demo["researcher"], job)
    assert out.attempt is None and out.text == "" and "not started" in out.reason
    with pytest.raises(ValidationError) as err:
        read_job_output(demo["researcher"], job, attempt=1)
    assert "attempt" in err.value.message_dict


@pytest.mark.parametrize(("attempt", "size", "field"), [
    (2, 100, "attempt"), (0, 100, "attempt"), (1, 0, "bytes"), (1, MAX_BYTES + 1, "bytes"),
])  # fmt: skip
def test_bad_attempts_and_sizes_are_refused(demo, running, attempt, size, field):
    with pytest.raises(ValidationError) as err:
        read_job_output(demo["researcher"], running, attempt=attempt, max_bytes=size)
    assert field in err.value.message_dict


def test_the_tail_is_cut_to_the_bytes_asked(demo, running):
    out = read_job_output(demo["researcher"], running, max_bytes=40)
    assert out.truncated and len(out.text.encode()) <= 40


def test_output_is_made_displayable(demo, running, backend_says):
    backend_says(OutputTail(data=HOSTILE, truncated=False, source="test"))
    text = read_job_output(demo["researcher"], running).text
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "\u202e" not in text and "\\u202e" in text and "\\x07" in text
    assert "step 1 red\n<script>alert(1)</script>\ntitle\n" in text
    assert "tab\tok" in text


def test_a_tail_cut_inside_a_character_starts_at_the_next_one(demo, running, backend_says):
    backend_says(OutputTail(data="é".encode()[1:] + b"ok\xff", truncated=True, source="t"))
    assert read_job_output(demo["researcher"], running).text == "ok\ufffd"


def test_a_backend_without_output_says_why(demo, running, backend_says):
    backend_says(NoOutput("SLURM_JOB_OUTPUT is /dev/null"))
    out = read_job_output(demo["researcher"], running)
    assert out.text == "" and out.reason == "SLURM_JOB_OUTPUT is /dev/null"


@pytest.mark.parametrize("failure", [
    TransientBackendError("controller down"), RuntimeError("a bug in a backend"),
])  # fmt: skip
def test_a_backend_failure_is_output_unavailable(demo, running, backend_says, failure):
    backend_says(failure)
    with pytest.raises(OutputUnavailable):
        read_job_output(demo["researcher"], running)


def test_a_backend_that_does_not_answer_in_time_is_output_unavailable(
    demo, running, backend_says, monkeypatch
):
    monkeypatch.setattr(output, "TIMEOUT_S", 0.2)
    backend_says(lambda ref, n: time.sleep(1.0))
    started = time.monotonic()
    with pytest.raises(OutputUnavailable, match="did not answer within"):
        read_job_output(demo["researcher"], running)
    assert time.monotonic() - started < 0.9


def test_an_earlier_run_is_read_by_its_attempt(demo, running, admin_advances):
    # the first run trains 20 minutes, is preempted (checkpoint-and-stop), runs again
    from django.db import transaction

    from scheduling.backend_factory import open_simulator

    admin_advances(1200)
    with transaction.atomic():
        backend = open_simulator()
        backend.checkpoint_and_stop(f"portal-{running.pk}-1", 300)
        backend.close()
    admin_advances(600)
    run_cycle()
    run_cycle()
    running.refresh_from_db()
    assert running.attempt == 2
    first = read_job_output(demo["researcher"], running, attempt=1)
    latest = read_job_output(demo["researcher"], running)
    assert first.attempt == 1 and latest.attempt == 2 and latest.attempts == 2
    assert "received SIGTERM" in first.text and "stopped on request" in first.text
    assert f"[portal-{running.pk}-2] started on" in latest.text
    assert "resuming from step" in latest.text and "nfs://ckpt/sft" in latest.text


@pytest.fixture
def admin_advances(demo):
    from scheduling.sim_services import advance_clock

    return lambda seconds: advance_clock(demo["admin"], seconds)


# -- the API -----------------------------------------------------------------------------------


def test_the_api_answers_the_tail_as_json(api, running):
    body = api("researcher").get(f"/api/v1/jobs/{running.pk}/output/").json()
    assert body["job"] == running.pk and body["attempt"] == 1 and body["attempts"] == 1
    assert body["truncated"] is False and body["reason"] is None
    assert body["source"].startswith("simulator") and "started on" in body["text"]
    cut = api("researcher").get(f"/api/v1/jobs/{running.pk}/output/?bytes=30&attempt=1").json()
    assert cut["truncated"] is True and len(cut["text"].encode()) <= 30


@pytest.mark.parametrize(("username", "code"), [
    ("researcher", 200), ("lead", 200), ("oncall", 200), ("admin", 200),
    ("researcher2", 404), ("workload", 403), (None, 401),
])  # fmt: skip
def test_the_api_per_role(api, running, username, code):
    response = api(username).get(f"/api/v1/jobs/{running.pk}/output/")
    assert response.status_code == code


@pytest.mark.parametrize("query", [
    "bytes=0", "bytes=-1", "bytes=1048577", "bytes=abc", "bytes=1e3", "bytes=%D9%A7",
    "bytes=99999999999999999999999", "attempt=0", "attempt=2", "attempt=x", "attempt=",
    "bytes=10&bytes=20", "lines=5", "follow=1",
])  # fmt: skip
def test_the_api_refuses_bad_queries_with_400(api, running, query):
    response = api("researcher").get(f"/api/v1/jobs/{running.pk}/output/?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["errors"]


def test_the_api_answers_404_for_unknown_or_malformed_jobs(api, running):
    for path in ("999999", "abc", "%D9%A2"):
        assert api("admin").get(f"/api/v1/jobs/{path}/output/").status_code == 404


def test_the_api_says_503_when_the_backend_cannot_answer(api, running, backend_says):
    backend_says(TransientBackendError("slurmctld is not responding"))
    response = api("researcher").get(f"/api/v1/jobs/{running.pk}/output/")
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert "slurmctld is not responding" in response.json()["errors"]["cluster"][0]


def test_the_api_schema_documents_the_output_action(api):
    schema = api("admin").get("/api/schema/", HTTP_ACCEPT="application/json").json()
    op = schema["paths"]["/api/v1/jobs/{id}/output/"]["get"]
    assert {p["name"] for p in op["parameters"]} >= {"attempt", "bytes"}
    assert {"200", "400", "403", "404", "503"} <= set(op["responses"])


# -- the pages ---------------------------------------------------------------------------------


def test_the_job_page_links_its_output_for_those_who_may_read_it(demo, running):
    page = as_user(demo, "researcher").get(f"/jobs/{running.pk}/").content.decode()
    assert 'id="output-heading"' in page and f'href="/jobs/{running.pk}/output/"' in page
    other = as_user(demo, "workload").get(f"/jobs/{running.pk}/").content.decode()
    assert 'id="output-heading"' not in other


def test_the_output_page_shows_the_tail_escaped(demo, running, backend_says):
    backend_says(OutputTail(data=HOSTILE, truncated=True, source="/shared/logs/x.out"))
    response = as_user(demo, "researcher").get(f"/jobs/{running.pk}/output/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x1b" not in page and "\x07" not in page and "\u202e" not in page
    pre = page.split('id="output-text"', 1)[1].split("</pre>", 1)[0]
    assert "\\u202eevil" in html.unescape(pre) and "only the end is shown" in page
    assert "/shared/logs/x.out" in page and 'id="output-refresh"' in page
    assert "<script" not in page.split("<main", 1)[-1].split("</main>", 1)[0]


def test_the_output_page_per_role_and_bad_queries(demo, running):
    path = f"/jobs/{running.pk}/output/"
    assert as_user(demo, "lead").get(path).status_code == 200
    assert as_user(demo, "researcher2").get(path).status_code == 404
    assert as_user(demo, "workload").get(path).status_code == 403
    assert Client().get(path).status_code == 302  # to the login page
    client = as_user(demo, "researcher")
    for query in ("attempt=9", "attempt=x", "bytes=12", "bytes=65536&bytes=1", "what=1"):
        assert client.get(f"{path}?{query}").status_code == 400, query
    assert client.get(f"{path}?attempt=1&bytes=16384").status_code == 200


def test_the_output_page_says_when_the_cluster_cannot_answer(demo, running, backend_says):
    backend_says(TransientBackendError("the API server timed out"))
    response = as_user(demo, "researcher").get(f"/jobs/{running.pk}/output/")
    assert response.status_code == 503
    assert "the API server timed out" in response.content.decode()
