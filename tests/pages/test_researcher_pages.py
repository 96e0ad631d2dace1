"""Researcher pages: submit (with the estimator and the feasibility line), jobs, job detail,
cancel, queues — per role, with bad input, escaping, bounded queries and timings at scale."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from monitoring.models import MetricSample
from quotas.models import BusinessLine, Queue
from scheduling.api import JobSubmitSerializer
from scheduling.cycle import run_cycle
from scheduling.forms import EstimatorForm, JobSubmitForm
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, cancel_job, submit_job

pytestmark = pytest.mark.django_db

PAGES = [
    "/jobs/",
    "/jobs/new/",
    "/queues/",
    "/jobs/estimate/?params=7B",
    "/jobs/feasibility/?queue=llm-core&gpus=8",
]


@pytest.fixture
def roomy_quotas(demo):
    """Quotas far above the 32-GPU test cluster, so placement, not quota, decides."""
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)


@pytest.fixture
def as_user(demo):
    def make(username: str | None, **kw) -> Client:
        client = Client(**kw)
        if username:
            client.force_login(demo[username])
        return client

    return make


def queue_id(name: str) -> str:
    return str(Queue.objects.get(name=name).pk)


def form_data(**overrides) -> dict:
    data = {
        "action": "submit",
        "name": "llama-sft",
        "queue": queue_id("llm-finetune"),
        "gpus": "4",
        "max_retries": "3",
        "checkpoint_interval_minutes": "60",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def estimator_data(**overrides: str) -> dict:
    """The estimator's fields as posted (prefix ``est-``): 7B in bf16 with AdamW, unsharded,
    one replica, 4096 tokens, micro-batch 1, unless overridden."""
    data = {"params": "7B", "precision": "bf16", "optimizer": "adamw", "zero_stage": "0",
            "data_parallel": "1", "seq_len": "4096", "micro_batch": "1", **overrides}  # fmt: skip
    return {f"est-{name}": value for name, value in data.items()}


def new_job(demo, username="researcher", **kw) -> Job:
    values = {"name": "job", "queue": "llm-finetune", "gpus": 8}
    values.update(kw)
    return submit_job(demo[username], JobRequest(**values))


# -- access per role --------------------------------------------------------------------------


@pytest.mark.parametrize("url", [*PAGES, "/jobs/1/"])
def test_anonymous_visitors_are_sent_to_the_login_page(as_user, url):
    response = as_user(None).get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_anonymous_visitors_cannot_cancel(demo, as_user):
    job = new_job(demo)
    response = as_user(None).post(f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    job.refresh_from_db()
    assert job.state == "pending"


@pytest.mark.parametrize("username", ["researcher", "researcher2", "lead", "oncall", "admin"])
def test_every_signed_in_role_gets_every_page(as_user, username):
    client = as_user(username)
    for url in PAGES:
        response = client.get(url)
        assert response.status_code in (200, 400), url  # 400: oncall may use no queue


def test_researcher2_cannot_see_llm_jobs(demo, as_user):
    job = new_job(demo, name="secret-llm-run")
    other = as_user("researcher2")
    assert other.get(f"/jobs/{job.pk}/").status_code == 404
    assert other.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    listing = other.get("/jobs/?mine=0").content.decode()
    assert "secret-llm-run" not in listing
    job.refresh_from_db()
    assert job.state == "pending"


def test_unknown_jobs_are_404(as_user):
    assert as_user("admin").get("/jobs/999999/").status_code == 404


def test_the_owner_cancels_with_a_post_and_the_timeline_says_so(demo, as_user):
    job = new_job(demo)
    client = as_user("researcher")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="cancel-form"' in page and "csrfmiddlewaretoken" in page
    assert client.get(f"/jobs/{job.pk}/cancel/").status_code == 405, "GET never cancels"
    response = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert response.status_code == 200
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert JobEvent.objects.filter(job=job, kind="cancelled").exists()
    body = response.content.decode()
    assert "cancelled" in body and f"Job #{job.pk} cancelled" in body


def test_cancel_needs_the_csrf_token(demo, as_user):
    job = new_job(demo)
    client = as_user("researcher", enforce_csrf_checks=True)
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.state == "pending"


def test_the_team_lead_may_cancel_a_member_job(demo, as_user):
    job = new_job(demo)
    lead = as_user("lead")
    assert 'id="cancel-form"' in lead.get(f"/jobs/{job.pk}/").content.decode()
    lead.post(f"/jobs/{job.pk}/cancel/")
    job.refresh_from_db()
    assert job.state == "cancelled"


def test_oncall_sees_the_job_but_gets_no_cancel_button_and_a_403(demo, as_user):
    job = new_job(demo)
    oncall = as_user("oncall")
    page = oncall.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200 and 'id="cancel-form"' not in page.content.decode()
    assert oncall.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.state == "pending"


def test_a_colleague_in_the_same_line_sees_but_cannot_cancel(demo, as_user):
    from core.models import LineMembership

    LineMembership.objects.create(
        user=demo["researcher2"], business_line_id=BusinessLine.objects.get(name="llm").pk
    )
    job = new_job(demo)
    colleague = as_user("researcher2")
    assert 'id="cancel-form"' not in colleague.get(f"/jobs/{job.pk}/").content.decode()
    assert colleague.post(f"/jobs/{job.pk}/cancel/").status_code == 403


def test_a_finished_job_cannot_be_cancelled_and_says_why(demo, as_user):
    job = new_job(demo)
    cancel_job(demo["researcher"], job.pk)
    client = as_user("researcher")
    assert 'id="cancel-form" hidden' in client.get(f"/jobs/{job.pk}/").content.decode()
    response = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "Not cancelled: job is already cancelled" in response.content.decode()


# -- submit -----------------------------------------------------------------------------------


def test_the_submit_form_lists_only_the_users_queues(as_user):
    page = as_user("researcher").get("/jobs/new/").content.decode()
    assert "llm-core" in page and "llm-experiment" in page
    assert "search-rec-core" not in page and "multimodal-core" not in page
    other = as_user("researcher2").get("/jobs/new/").content.decode()
    assert "search-rec-core" in other and "llm-core" not in other


def chosen_queue(page: str) -> list[str]:
    select = re.search(r'<select name="queue"[^>]*>(.*?)</select>', page, re.S).group(1)
    return re.findall(r'<option value="([^"]*)"[^>]*selected', select)


def test_a_link_chooses_the_queue_it_names_by_id_or_name(as_user):
    client = as_user("researcher")
    for asked in (queue_id("llm-core"), "llm-core"):
        response = client.get("/jobs/new/", {"queue": asked})
        page = response.content.decode()
        assert response.status_code == 200 and "prefill-refused" not in page
        assert chosen_queue(page) == [queue_id("llm-core")]


@pytest.mark.parametrize("asked", ["search-rec-core", "999999", "llm-cor"])
def test_a_link_to_a_queue_the_user_may_not_submit_to_is_a_400_saying_so(as_user, asked):
    """``/jobs/new/?queue=<another line's queue>`` showed "Choose a queue…" as if no queue
    had been asked for (and a name, as the API takes, was never chosen)."""
    if asked == "search-rec-core":
        asked = queue_id(asked)  # by id: it exists, but is another line's
    response = as_user("researcher").get("/jobs/new/", {"queue": asked})
    page = html.unescape(response.content.decode())
    assert response.status_code == 400 and chosen_queue(page) in ([], [""])
    assert f"“{asked}” is not a queue you may submit to; choose one below" in page
    assert 'role="alert" id="prefill-refused"' in page
    assert not Job.objects.exists()


def test_every_api_submission_field_has_a_labelled_input_with_help(as_user):
    page = as_user("researcher").get("/jobs/new/").content.decode()
    for name in JobSubmitSerializer().fields:
        assert re.search(rf'<label[^>]*for="id_{name}"', page), name
        assert f'id="id_{name}"' in page, name
        assert f'id="id_{name}_helptext"' in page, name
    assert len(EstimatorForm.base_fields) == 10
    for name in EstimatorForm.base_fields:
        assert re.search(rf'<label[^>]*for="id_est-{name}"', page), name
    inputs = re.findall(r'<(?:input|select)[^>]*\bid="(id_[^"]+)"', page)
    labels = set(re.findall(r'<label[^>]*for="(id_[^"]+)"', page))
    assert inputs and set(inputs) <= labels, set(inputs) - labels


def test_the_form_has_the_api_bounds():
    serializer = JobSubmitSerializer().fields
    form = JobSubmitForm(queues=[]).fields
    # the form's array spec goes to the array service (the API may submit arrays elsewhere)
    assert set(serializer) <= set(form) and set(form) - set(serializer) <= {"array"}
    for name, field in serializer.items():
        # a list of ids in the API, a text of ids on the form: the service counts them for
        # both (test_job_after_pages.py, test_array_after_pages.py)
        # (and a time as RFC 3339 text in the API, a date and time in the viewer's zone on
        # the form: both read by the service's ``core.time_text.parse_time``)
        if name in ("after", "after_arrays", "after_corresponding", "begin_at"):
            continue
        for attr in ("min_value", "max_value", "max_length", "min_length"):
            expected = getattr(field, attr, None)
            if expected is not None and not (attr == "min_length" and expected == 1):
                assert getattr(form[name], attr, None) == expected, (name, attr)
        assert form[name].required == field.required, name


def test_every_submit_field_is_in_exactly_one_fieldset():
    names = [name for _, names in JobSubmitForm.FIELDSETS for name in names]
    assert len(names) == len(set(names)), "a field in two fieldsets"
    assert set(names) == set(JobSubmitForm.base_fields), "a field the page would not show"


@pytest.mark.parametrize("simulator", [True, False])
def test_the_fieldsets_show_the_fields_this_form_has(simulator):
    form = JobSubmitForm(queues=[], simulator=simulator)
    shown = [field.name for _, fields in form.fieldsets() for field in fields]
    assert sorted(shown) == sorted(form.fields)
    assert ("sim_duration_minutes" in shown) is simulator
    assert [legend for legend, _ in form.fieldsets()] == [
        "What and where",
        "Resources",
        "Failures and checkpoints",
        "Hints for the scheduler",
        "Pipeline",
        "Many copies (a job array)",
    ]


def test_the_submit_page_lays_out_the_fieldsets_and_the_estimator_in_order(as_user):
    page = as_user("researcher").get("/jobs/new/").content.decode()
    legends = re.findall(r"<legend>([^<]+)</legend>", page)
    assert legends == [legend for legend, _ in JobSubmitForm.FIELDSETS]
    marks = ['id="id_name"', 'id="id_queue"', 'id="queue-hint"', 'id="id_tier"',
             'id="id_preemptible"', "<legend>Resources</legend>", 'id="id_gpus"']  # fmt: skip
    at = [page.index(mark) for mark in marks]
    assert at == sorted(at), "the queue's hint stands right after the queue"
    assert page.count('id="queue-hint"') == 1
    fields = [page.index(f'id="id_est-{name}"') for name in EstimatorForm.base_fields]
    assert fields == sorted(fields) and page.index('id="estimator"') < fields[0]


def test_a_valid_submission_stores_the_job_with_queue_defaults_and_shows_it(demo, as_user):
    client = as_user("researcher")
    response = client.post("/jobs/new/", form_data(queue=queue_id("llm-core"), gpus="16"))
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.owner, job.queue.name, job.state) == (demo["researcher"], "llm-core", "pending")
    assert job.tier == "core", "the tier defaults to the queue's"
    assert job.preemptible is False, "core and above are not preemptible by default"
    assert job.gpus_per_node == 8 and job.rdma is True, "multi-node: whole nodes and RDMA"
    detail = client.get(response["Location"]).content.decode()
    assert f"Job #{job.pk} submitted" in detail and "Not yet seen by the scheduler" in detail


def test_empty_optional_fields_take_the_api_defaults(as_user):
    data = form_data(max_retries="", checkpoint_interval_minutes="", tier="", rdma="")
    assert as_user("researcher").post("/jobs/new/", data).status_code == 302
    job = Job.objects.get()
    assert (job.max_retries, job.checkpoint_interval_minutes, job.tier) == (3, 60, "finetune")
    assert job.rdma is False and job.gpus_per_node == 4


def test_an_experiment_queue_makes_the_job_preemptible_by_default(as_user):
    as_user("researcher").post("/jobs/new/", form_data(queue=queue_id("llm-experiment")))
    job = Job.objects.get()
    assert job.tier == "experiment" and job.preemptible is True


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"gpus": "0"}, "gpus", "greater than or equal to 1"),
        ({"gpus": "many"}, "gpus", "whole number"),
        ({"name": ""}, "name", "required"),
        ({"name": "x" * 101}, "name", "at most 100"),
        ({"gpus_per_node": "9"}, "gpus_per_node", "less than or equal to 8"),
        ({"max_retries": "11"}, "max_retries", "less than or equal to 10"),
        ({"tier": "platinum"}, "tier", "Select a valid choice"),
        ({"checkpoint_interval_minutes": "0"}, "checkpoint_interval_minutes", "greater than"),
        # The service's rules, mapped back onto their fields:
        ({"tier": "urgent"}, "tier", "allows tiers up to 'finetune'"),
        ({"gpus": "12", "gpus_per_node": "8"}, "gpus_per_node", "cannot be split evenly"),
        ({"gpus": "33"}, "gpus", "the cluster has 32 GPUs in all"),
        ({"checkpoint_path": "/local/ckpt"}, "checkpoint_path", "shared storage"),
        ({"queue": "999999"}, "queue", "unknown queue"),
    ],
)
def test_bad_input_is_refused_with_the_field_named_and_nothing_stored(
    as_user, overrides, field, message
):
    response = as_user("researcher").post("/jobs/new/", form_data(**overrides))
    assert response.status_code == 200
    form = response.context["form"]
    assert field in form.errors, form.errors
    assert message in " ".join(form.errors[field])
    page = response.content.decode()
    assert "The job was not submitted" in page and f'href="#id_{field}"' in page
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_another_lines_queue_is_refused(as_user):
    response = as_user("researcher2").post("/jobs/new/", form_data(queue=queue_id("llm-core")))
    assert "you may not submit to this queue" in response.context["form"].errors["queue"][0]
    assert Job.objects.count() == 0


def test_the_posted_values_come_back_after_an_error(as_user):
    response = as_user("researcher").post(
        "/jobs/new/", form_data(name="keep-me", gpus="0", model_name="llama-7b")
    )
    page = response.content.decode()
    assert 'value="keep-me"' in page and 'value="llama-7b"' in page


def test_html_in_names_is_escaped_everywhere(demo, as_user):
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    client = as_user("researcher")
    client.post("/jobs/new/", form_data(name=evil, model_name=evil))
    job = Job.objects.get()
    assert job.name == evil
    for url in (f"/jobs/{job.pk}/", "/jobs/"):
        page = client.get(url).content.decode()
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    refused = client.post("/jobs/new/", form_data(name=evil, gpus="0")).content.decode()
    assert "<script>alert" not in refused


def test_estimate_without_javascript_shows_the_breakdown_and_keeps_the_form(as_user):
    data = form_data(
        action="estimate",
        name="keep-me",
        **estimator_data(optimizer="adam", zero_stage="3", data_parallel="8"),
    )
    response = as_user("researcher").post("/jobs/new/", data)
    page = response.content.decode()
    assert response.status_code == 200 and Job.objects.count() == 0
    rec = response.context["recommendation"]
    assert rec.fits and rec.gpus == 8 and rec.fits_one_node
    assert "Optimizer states" in page and "Recommended:</strong> 8 × H100 80 GB" in page
    assert "fits on one node" in page and 'value="keep-me"' in page
    assert "The job was not submitted" not in page


def test_the_estimate_writes_large_gigabytes_with_thousands_separators(as_user):
    """70B asked unsharded over 16 GPUs needs about 1,200 GB per GPU: the note and the model
    states read "1,212 GB" and "1,120 GB" as every other count on the portal, not "1212 GB"."""
    data = form_data(
        action="estimate", **estimator_data(params="70B", data_parallel="16", seq_len="4096")
    )
    page = html.unescape(as_user("researcher").post("/jobs/new/", data).content.decode())
    rec_note = re.search(r"As asked it needs ([\d,]+) GB per GPU over 16 GPUs", page)
    assert rec_note and rec_note.group(1) == "1,212", rec_note
    assert "1,120 GB for the whole model before sharding" in page


def test_fill_without_javascript_puts_the_recommendation_into_the_job_form(as_user):
    data = form_data(action="fill", gpus="1", **estimator_data())
    response = as_user("researcher").post("/jobs/new/", data)
    form = response.context["form"]
    rec = response.context["recommendation"]
    assert rec.gpus == 4 and rec.zero_stage == 3
    assert form.initial["gpus"] == 4
    assert form.initial["gpu_memory_gb"] == rec.breakdown.needed_memory_gb
    assert 'name="gpus" value="4"' in response.content.decode()
    assert response.context["feasibility"]["status"] == "fits_now"  # the engine's what-if
    assert Job.objects.count() == 0


def test_bad_estimator_input_is_named_and_nothing_breaks(as_user):
    response = as_user("researcher").post(
        "/jobs/new/", form_data(action="estimate", **{"est-params": "huge", "est-seq_len": "0"})
    )
    est_form = response.context["est_form"]
    assert "params" in est_form.errors and "seq_len" in est_form.errors
    assert response.context["recommendation"] is None


def test_check_without_javascript_shows_the_feasibility_line(roomy_quotas, as_user):
    response = as_user("researcher").post(
        "/jobs/new/", form_data(action="check", gpus="8", gpu_memory_gb="141")
    )
    shown = response.context["feasibility"]  # the engine's what-if (or the service's refusal)
    assert shown["status"] in ("never_fits", "invalid") and "141" in shown["message"]
    assert shown["message"] in html.unescape(response.content.decode())
    assert Job.objects.count() == 0


# -- the JSON endpoints ------------------------------------------------------------------------


def test_the_estimate_endpoint_answers_with_a_breakdown_and_a_recommendation(as_user):
    response = as_user("researcher").get(
        "/jobs/estimate/",
        {"params": "7B", "optimizer": "adam", "zero_stage": "3", "data_parallel": "8"},
    )
    assert response.status_code == 200
    body = response.json()
    b = body["breakdown"]
    assert (b["weights_gb"], b["gradients_gb"], b["optimizer_gb"]) == (1.75, 1.75, 10.5)
    assert body["fits"] and body["gpus"] == 8 and body["fits_one_node"]
    assert body["gpu_model"] == "H100" and body["gpu_memory_gb"] == 80
    assert body["form"] == {"gpus": 8, "gpu_memory_gb": b["needed_memory_gb"]}


def test_the_estimate_endpoint_says_what_is_wrong_with_a_400(as_user):
    client = as_user("researcher")
    response = client.get(
        "/jobs/estimate/", {"params": "lots", "precision": "fp4", "data_parallel": "-1"}
    )
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"params", "precision", "data_parallel"}
    assert client.get("/jobs/estimate/", {"params": "1e400"}).status_code == 400
    assert client.post("/jobs/estimate/", {"params": "7B"}).status_code == 405


def test_the_feasibility_endpoint_follows_the_cluster(demo, roomy_quotas, as_user):
    client = as_user("researcher")
    fits = client.get("/jobs/feasibility/", {"queue": queue_id("llm-core"), "gpus": "8"}).json()
    assert fits["status"] == "fits_now"
    BusinessLine.objects.filter(name="llm").update(quota_gpus=16)
    for i in range(2):
        new_job(demo, name=f"q{i}", queue="llm-core")
    run_cycle()
    quota = client.get("/jobs/feasibility/", {"queue": queue_id("llm-core"), "gpus": "8"}).json()
    assert quota["status"] == "would_wait" and quota["code"] == "QUOTA_EXCEEDED"
    assert "llm holds 16 of its 16 GPU quota" in quota["message"]
    never = client.get(
        "/jobs/feasibility/", {"queue": "llm-core", "gpus": "8", "gpu_memory_gb": "141"}
    )
    if never.status_code == 200:  # (a submission that can never fit may be refused: 400)
        assert never.json()["status"] == "never_fits" and "141" in never.json()["message"]
    else:
        assert never.status_code == 400 and "141" in str(never.json()["errors"])


def test_the_feasibility_endpoint_refuses_bad_requests_with_400(as_user):
    client = as_user("researcher")
    assert set(client.get("/jobs/feasibility/").json()["errors"]) == {"queue", "gpus"}
    response = client.get("/jobs/feasibility/", {"queue": queue_id("search-rec-core"), "gpus": 8})
    assert response.status_code == 400
    assert "you may not submit" in response.json()["errors"]["queue"][0]
    response = client.get("/jobs/feasibility/", {"queue": "llm-core", "gpus": "0"})
    assert response.status_code == 400 and "gpus" in response.json()["errors"]
    for bad in ("abc", "12;DROP", "١٢", "0"):
        response = client.get("/jobs/feasibility/", {"queue": "llm-core", "gpus": 8, "after": bad})
        assert response.status_code == 400 and "after" in response.json()["errors"], bad
    response = client.get("/jobs/feasibility/", {"queue": "llm-core", "gpus": 8, "after": "999999"})
    assert response.status_code == 400 and "unknown job 999999" in str(response.json()["errors"])


def test_the_feasibility_endpoint_says_a_job_after_others_waits_for_them(
    demo, roomy_quotas, as_user
):
    first = new_job(demo, name="pretrain", queue="llm-core")
    client = as_user("researcher")
    answer = client.get(
        "/jobs/feasibility/", {"queue": queue_id("llm-core"), "gpus": "8", "after": f"{first.pk}"}
    ).json()
    assert (answer["status"], answer["code"]) == ("would_wait", "DEPENDENCY")
    assert answer["title"] == "Would wait for other jobs to succeed"
    assert f"job {first.pk} (pretrain)" in answer["message"]


# -- jobs and job detail -----------------------------------------------------------------------


def test_a_pending_job_shows_its_verdict_in_words_and_numbers(demo, roomy_quotas, as_user):
    fillers = [new_job(demo, name=f"fill{i}", queue="llm-core") for i in range(4)]
    late = new_job(demo, name="late", queue="llm-core")
    run_cycle()
    run_cycle()
    late.refresh_from_db()
    assert late.state == "pending" and late.pending_code == "INSUFFICIENT_GPUS"
    page = as_user("researcher").get(f"/jobs/{late.pk}/").content.decode()
    assert "Why it is waiting" in page and "Not enough free GPUs" in page
    assert late.pending_message in page.replace("&#x27;", "'")
    assert "<dt>Matching GPUs left free</dt><dd>0</dd>" in page
    assert "<dt>GPUs short</dt><dd>8</dd>" in page
    assert "What would make it start" in page and late.pending_remedy in page
    assert f'id="queue-position">{late.queue_position}<' in page
    assert late.estimated_start is not None
    assert late.estimated_start.strftime("%Y-%m-%d %H:%M") + " UTC" in page
    running = as_user("researcher").get(f"/jobs/{fillers[0].pk}/").content.decode()
    assert 'data-state="running"' in running and ": all 8 GPUs</li>" in running
    assert "<strong>submitted</strong>" in running and "<strong>started</strong>" in running
    assert (
        'id="verdict" class="card rp-verdict" aria-labelledby="verdict-heading" hidden' in running
    )


def waiting_on_overrun(job: Job, run: Job) -> None:
    """``job``'s verdict as the overrun note (``scheduling.engine.overrun_note``) writes it
    when its estimate waits for ``run``, which has outlived its prediction."""
    sentence = (
        f" Its estimate waits for job {run.pk}, which has run 20 h 5 min, past its predicted "
        "end; until that job ends, each cycle expects it within 30 min, so this estimate "
        "keeps moving later."
    )
    Job.objects.filter(pk=job.pk).update(
        pending_code="INSUFFICIENT_GPUS",
        pending_message="8 more GPUs of the kind it asks must free up <soon>." + sentence,
        pending_details={"short_gpus": 8, "overrun_job": run.pk, "overrun_job_ran_seconds": 72300},
    )


def test_a_verdict_links_the_overrunning_job_it_waits_for_to_that_job_s_page(demo, as_user, api):
    """ "Its estimate waits for job 7905" was plain text on the job page, in the sentence and
    in its facts: now a link to job 7905's page, as the job list links jobs, for viewers who
    may see that job (here: of the same line, and an admin), and on the live updates too
    (the API's ``job_links``, which ``jobs_detail.js`` links with)."""
    run = new_job(demo, "lead", name="long-run", queue="llm-core")
    waiting = new_job(demo, name="waits")
    waiting_on_overrun(waiting, run)
    link = f'<a href="/jobs/{run.pk}/">'
    for who in ("researcher", "admin"):
        page = as_user(who).get(f"/jobs/{waiting.pk}/").content.decode()
        message = re.search(r'<p id="verdict-message">(.*?)</p>', page, re.S).group(1)
        assert f"Its estimate waits for {link}job {run.pk}</a>, which has run" in message
        assert "must free up &lt;soon&gt;." in message, "the rest of the text stays escaped"
        assert f"<dt>Its estimate waits for job</dt><dd>{link}#{run.pk}</a></dd>" in page
        reason = api(who).get(f"/api/v1/jobs/{waiting.pk}/").json()["pending_reason"]
        assert reason["job_links"] == {str(run.pk): f"/jobs/{run.pk}/"}


def test_an_overrunning_job_the_viewer_may_not_see_is_named_but_not_linked(demo, as_user, api):
    """The run may be another line's (its nodes are shared): researchers see their lines'
    jobs only, so its id stays plain text (its page would be a 404)."""
    run = new_job(demo, "researcher2", name="theirs", queue="search-rec-core")
    waiting = new_job(demo, name="waits")
    waiting_on_overrun(waiting, run)
    page = as_user("researcher").get(f"/jobs/{waiting.pk}/").content.decode()
    assert f"Its estimate waits for job {run.pk}, which has run" in page
    assert f"<dd>#{run.pk}</dd>" in page and f'href="/jobs/{run.pk}/"' not in page
    reason = api("researcher").get(f"/api/v1/jobs/{waiting.pk}/").json()["pending_reason"]
    assert reason["job_links"] == {}
    assert as_user("researcher").get(f"/jobs/{run.pk}/").status_code == 404
    assert (
        f'href="/jobs/{run.pk}/"' in as_user("oncall").get(f"/jobs/{waiting.pk}/").content.decode()
    )


def test_a_requeued_job_says_its_start_was_its_last_runs(demo, roomy_quotas, as_user):
    job = new_job(demo, name="again", queue="llm-core")
    run_cycle()
    job.refresh_from_db()
    assert job.state == "running" and job.started_at is not None
    page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
    assert '<dt id="started-label">Started</dt>' in page
    # waiting again after a preemption, it keeps the start of the run it lost
    Job.objects.filter(pk=job.pk).update(state="pending")
    page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
    assert '<dt id="started-label">Last run started</dt>' in page
    assert job.started_at.strftime("%Y-%m-%d %H:%M") in page


def test_a_running_jobs_progress_is_so_far_not_kept(demo, roomy_quotas, as_user):
    """Page walk: a running job without a checkpoint read "Progress kept: 6 min" above "Last
    checkpoint: —"; its progress is saved only at a checkpoint, so while it runs it is the
    progress so far, and "kept" once it waits again with what its checkpoint saved."""
    job = new_job(demo, name="runs", queue="llm-core")
    run_cycle()
    Job.objects.filter(pk=job.pk).update(progress_seconds=360.0)
    page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
    assert '<dt id="progress-label">Progress so far</dt>' in page and "Progress kept" not in page
    Job.objects.filter(pk=job.pk).update(state="pending")
    page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
    assert '<dt id="progress-label">Progress kept</dt>' in page
    # cancelled or failed: the work since its last checkpoint is lost, not kept
    for state in ("cancelled", "failed"):
        Job.objects.filter(pk=job.pk).update(state=state)
        page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
        assert '<dt id="progress-label">Progress made</dt>' in page, state
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
    assert '<dt id="progress-label">Progress kept</dt>' in page


def test_pending_details_are_listed_readably():
    from scheduling.views import detail_rows

    rows = detail_rows(
        {
            "held_gpus": 16,
            "quota_gpus": 16,
            "scope": "line",
            "deadline": 0.0,
            "strict_order": 0,
            "some_new_number": 3.5,
        }
    )
    assert rows == [  # in the order of verdict_text.LABELS, unknown keys last
        ("Limited by", "line"),
        ("GPUs held now", "16"),
        ("Quota (GPUs)", "16"),
        ("Strict order policy", "no"),
        ("They stop by", "unknown"),
        ("Some new number", "3.5"),
    ]
    assert detail_rows({"where": "", "best_rack": ""}) == [
        ("Best rack", "none"),
        ("Free GPUs by rack", "none"),
    ]
    assert detail_rows({"deadline": 1_700_000_000.0})[0][1] == "2023-11-14 22:13 UTC"
    assert detail_rows({"next_attempt_at": "2026-11-29T14:05:09.5+00:00"})[0][1] == (
        "2026-11-29 14:05 UTC"
    )
    assert detail_rows({"next_attempt_at": "soon"})[0][1] == "soon"


def test_the_job_list_filters_by_state_queue_and_owner(demo, roomy_quotas, as_user):
    mine = new_job(demo, name="mine-core", queue="llm-core")
    new_job(demo, "lead", name="leads-exp", queue="llm-experiment")
    run_cycle()
    client = as_user("researcher")
    default = client.get("/jobs/").content.decode()
    assert "mine-core" in default and "leads-exp" not in default, "researchers see theirs first"
    everyone = client.get("/jobs/?mine=0").content.decode()
    assert "mine-core" in everyone and "leads-exp" in everyone
    running = client.get("/jobs/?mine=0&state=running").content.decode()
    assert "mine-core" in running
    pending = client.get("/jobs/?mine=0&state=pending").content.decode()
    assert "mine-core" not in pending
    by_queue = client.get(f"/jobs/?mine=0&queue={queue_id('llm-experiment')}").content.decode()
    assert "leads-exp" in by_queue and "mine-core" not in by_queue
    assert f'href="/jobs/{mine.pk}/"' in default


def job_rows(body: str) -> list[str]:
    return re.findall(r'<tr data-job-id="(\d+)">', body)


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [("state=bogus", "state", "unknown state “bogus”; one of pending, running"),
     ("state=Running", "state", "unknown state “Running”"),
     ("queue=x", "queue", "no queue “x” among those you may see"),
     ("queue=99999999", "queue", "no queue “99999999”"),
     ("mine=yes", "mine", "“yes” is neither 1 (only mine) nor 0 (all)"),
     ("page=zz", "page", "Page: a page number"),
     ("page=0", "page", "Page: pages start at 1"),
     ("page=%D9%A7", "page", "Page: a page number"),  # an Arabic-Indic seven read as page 7
     ("owner=alice", None, "this page has no filter “owner”; it takes state, queue, mine, held, name, array, page"),
     ("mine=0&State=running", None, "this page has no filter “State”")],
)  # fmt: skip
def test_a_bad_job_list_filter_is_a_400_naming_it_not_an_unfiltered_list(
    demo, as_user, query, field, words
):
    """``/jobs/?state=bogus`` listed every job as if unfiltered (the form's errors were
    dropped): a script or a typo read the wrong list as the right one. Now the audit page's
    answer: 400, the form naming the filter and why, no jobs listed."""
    new_job(demo, name="mine-core", queue="llm-core")
    client = as_user("researcher")
    assert job_rows(client.get("/jobs/").content.decode()), "the job is listed unfiltered"
    response = client.get(f"/jobs/?{query}")
    body = html.unescape(response.content.decode())
    assert response.status_code == 400, query
    assert job_rows(body) == [] and "0 jobs." in body
    assert re.search(r'<p class="error" role="alert"[^>]*>[^<]*' + re.escape(words), body), body
    if field not in ("page", None):  # the field is marked and points at its error
        assert (
            f'<select name="{field}" aria-invalid="true" aria-describedby="id_{field}_error"'
            in body
        )
        assert f'<p class="error" role="alert" id="id_{field}_error">' in body


def test_a_queue_of_another_line_is_refused_in_the_job_list_filter(demo, as_user):
    """researcher2 may not see the LLM queues: filtering by one listed all of theirs."""
    new_job(demo, "researcher2", name="theirs", queue="search-rec-core")
    client = as_user("researcher2")
    assert job_rows(client.get("/jobs/").content.decode())
    response = client.get(f"/jobs/?queue={queue_id('llm-core')}")
    assert response.status_code == 400 and job_rows(response.content.decode()) == []
    own = client.get(f"/jobs/?queue={queue_id('search-rec-core')}&page=1&state=&mine=0")
    assert own.status_code == 200 and len(job_rows(own.content.decode())) == 1


def test_the_job_list_is_paginated(demo, as_user):
    for i in range(55):
        new_job(demo, name=f"j{i:02d}", gpus=1)
    client = as_user("researcher")
    first = client.get("/jobs/").content.decode()
    assert "55 jobs, page 1 of 2" in first and "j54" in first and "j00" not in first
    second = client.get("/jobs/?page=2").content.decode()
    assert "j00" in second and "j54" not in second and 'rel="prev"' in second


# -- queues ------------------------------------------------------------------------------------


def test_queues_show_contracts_usage_and_eviction_with_numbers(demo, roomy_quotas, as_user):
    BusinessLine.objects.filter(name="llm").update(quota_gpus=8, guarantee_gpus=4)
    Queue.objects.filter(name="llm-core").update(quota_gpus=12, guarantee_gpus=4)
    new_job(demo, name="a", queue="llm-core", gpus=8)
    new_job(demo, name="b", queue="llm-experiment", gpus=8)
    new_job(demo, name="c", queue="llm-core", gpus=8)
    run_cycle()
    core = Queue.objects.get(name="llm-core")
    MetricSample.objects.create(
        at=Job.objects.first().submitted_at,
        gpus_total=32,
        gpus_healthy=32,
        gpus_allocated=16,
        utilization=0.5,
        fragmentation_gpus=0,
        pending_jobs=1,
        pending_by_reason={},
        per_line={},
        per_queue={str(core.pk): {"name": "llm-core", "eviction_ratio": 0.125}},
    )
    response = as_user("researcher2").get("/queues/")
    page = response.content.decode()
    assert response.status_code == 200
    for line in BusinessLine.objects.all():
        assert html.escape(line.display_name) in page
    for queue in Queue.objects.all():
        assert f'<th scope="row">{queue.name}</th>' in page
    llm_id = BusinessLine.objects.get(name="llm").pk
    llm = re.search(rf'data-line-id="{llm_id}".*?</section>', page, re.S).group(0)
    assert "16 of 8 GPUs (200%), over quota" in llm, "line usage in words, not only a bar"
    assert "rp-usage is-over" in llm
    assert '<td data-field="borrowed_gpus">8</td>' in llm
    assert '<td data-field="pending_gpus">8</td>' in llm
    row = re.search(rf'data-queue-id="{core.pk}".*?</tr>', page, re.S).group(0)
    assert "8 of 12 GPUs (67%)" in row and '<td data-field="pending_jobs">1</td>' in row
    assert "12.5%" in row
    assert 'src="/static/js/pages/queues.js"' in page


# -- bounded queries ---------------------------------------------------------------------------


def _many_jobs(demo, n: int) -> None:
    for i in range(n):
        new_job(demo, name=f"bulk{i}", queue="llm-finetune" if i % 2 else "llm-core", gpus=1)


@pytest.mark.parametrize("n", [3, 40])
def test_the_job_list_does_a_fixed_number_of_queries(
    demo, roomy_quotas, as_user, n, django_assert_max_num_queries
):
    _many_jobs(demo, n)
    run_cycle()
    client = as_user("researcher")
    client.get("/jobs/")  # warm the session
    with django_assert_max_num_queries(9):
        assert client.get("/jobs/?mine=0").status_code == 200


@pytest.mark.parametrize("events", [1, 30])
def test_job_detail_does_a_fixed_number_of_queries(
    demo, as_user, events, django_assert_max_num_queries
):
    job = new_job(demo)
    JobEvent.objects.bulk_create(
        [JobEvent(job=job, kind="checkpointed", message=f"c{i}") for i in range(events)]
    )
    client = as_user("researcher")
    client.get("/jobs/")
    # 11 with the queues a waiting job may move to (``move_services``): one query
    with django_assert_max_num_queries(11):
        assert client.get(f"/jobs/{job.pk}/").status_code == 200


def test_queues_and_submit_pages_do_a_fixed_number_of_queries(
    demo, roomy_quotas, as_user, django_assert_max_num_queries
):
    _many_jobs(demo, 30)
    run_cycle()
    client = as_user("researcher")
    client.get("/jobs/")
    with django_assert_max_num_queries(10):
        assert client.get("/queues/").status_code == 200
    with django_assert_max_num_queries(8):
        assert client.get("/jobs/new/").status_code == 200
    data = form_data(action="check", gpus="8", queue=queue_id("llm-core"))
    # the what-if reads the cluster's snapshot once (with borrowing's inputs, #19: the
    # demand peaks, the recent evictions and the queues' eviction ratios; the pending jobs'
    # dependencies on jobs and on arrays and the nodes' scheduled maintenance, one query
    # each), and counts the person's active jobs as the submission would (one query)
    with django_assert_max_num_queries(30):
        assert client.post("/jobs/new/", data).status_code == 200
    with django_assert_max_num_queries(16):  # then keeps it until the cluster changes
        assert client.post("/jobs/new/", data).status_code == 200


# -- at scale ----------------------------------------------------------------------------------


def _renders(client: Client, url: str) -> None:
    assert client.get(url).status_code == 200, url


@pytest.mark.slow
def test_pages_render_with_bounded_queries_at_full_scale(
    db, monkeypatch, django_assert_max_num_queries
):
    """Bulk-loaded (no cycle): 1,250 nodes, 5,000 pending jobs, 1,000 running on 8,000 GPUs.

    Render times are measured by ``manage.py bench_pages`` (docs/benchmarks.md), not here.
    """
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from scheduling.models import Allocation, Node
    from tests.conftest import DEMO_PASSWORD

    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", no_workload=True, stdout=None)
    users = {u.username: u for u in get_user_model().objects.all()}
    queues = list(Queue.objects.all())
    owners = [users["workload"], users["researcher"], users["lead"]]
    verdict = {"code": "PRIORITY", "details": {"ahead_jobs": 12, "ahead_gpus": 96}}

    def job(i: int, **fields) -> Job:
        """The i-th job of a kind: owners and queues taken in turn."""
        return Job(owner=owners[i % 3], queue=queues[i % len(queues)], **fields)

    pending = [
        job(i, name=f"p{i}", tier="finetune", gpus=1 + i % 16, pending_code=verdict["code"],
            pending_message="waiting its turn", pending_details=verdict["details"],
            queue_position=i + 1)
        for i in range(5000)
    ]  # fmt: skip
    running = [job(i, name=f"r{i}", tier="core", gpus=8, state="running") for i in range(1000)]
    Job.objects.bulk_create(pending + running, batch_size=2000)
    nodes = list(Node.objects.order_by("name")[:1000])
    running = list(Job.objects.filter(state="running").order_by("id"))
    Allocation.objects.bulk_create(
        [
            Allocation(job=j, node=n, gpu_index=g)
            for j, n in zip(running, nodes, strict=True)
            for g in range(8)
        ],
        batch_size=4000,
    )
    assert Node.objects.count() == 1250 and Job.objects.filter(state="pending").count() == 5000

    client = Client()
    client.force_login(users["researcher"])
    admin = Client()
    admin.force_login(users["admin"])
    detail = f"/jobs/{pending[0].pk}/"
    for who, url in [
        (client, "/jobs/?mine=0"),
        (admin, "/jobs/"),
        (admin, "/jobs/?state=pending&page=50"),
        (client, detail),
        (client, "/queues/"),
        (client, "/jobs/new/"),
        (client, "/jobs/feasibility/?queue=llm-core&gpus=64"),
        (client, "/jobs/estimate/?params=70B&zero_stage=3"),
    ]:
        _renders(who, url)
    with django_assert_max_num_queries(9):
        admin.get("/jobs/")
    with django_assert_max_num_queries(10):
        client.get("/queues/")


def test_a_running_job_s_progress_counts_to_now_on_its_page_and_in_the_api(demo, as_user, api):
    """The backend's progress reading is written every 5 minutes of work or at a checkpoint,
    so the page read "Started 16:08" and "Progress so far 29 min" at 16:45 (page walk,
    session 42). A run that is on counts its progress to now, on the page and in the API
    (the page's live script rewrites the field from the API)."""
    from datetime import timedelta

    from core import clock

    job = new_job(demo)
    now = clock.now().replace(microsecond=0)
    Job.objects.filter(pk=job.pk).update(
        state="running", started_at=now - timedelta(minutes=37),
        progress_seconds=29 * 60 + 600, run_start_progress_seconds=600,
    )  # fmt: skip
    with clock.pinned(now):
        page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
        data = api("researcher").get(f"/api/v1/jobs/{job.pk}/").data
    assert re.search(r'data-field="progress_seconds">47 min<', page), page
    assert data["progress_seconds"] == 47 * 60
    # a run that ended keeps what the backend read
    Job.objects.filter(pk=job.pk).update(state="pending")
    with clock.pinned(now):
        page = as_user("researcher").get(f"/jobs/{job.pk}/").content.decode()
        data = api("researcher").get(f"/api/v1/jobs/{job.pk}/").data
    assert re.search(r'data-field="progress_seconds">39 min<', page), page
    assert data["progress_seconds"] == 39 * 60


@pytest.mark.parametrize(
    "username, words",
    [
        ("researcher", "Researcher"),
        ("lead", "Team lead"),
        ("oncall", "On-call engineer"),
        ("admin", "Cluster admin"),
    ],
)
def test_the_header_names_the_role_in_words(as_user, username, words):
    page = as_user(username).get("/jobs/").content.decode()
    who = re.search(
        r'<span><a href="/account/" id="menu-account"[^>]*>([^<]+)</a> · ([^<]+)</span>', page
    )
    assert who and who.groups() == (username, words), who


def test_the_queues_page_s_two_tables_put_their_shared_columns_in_one_order(as_user):
    page = as_user("researcher").get("/queues/").content.decode()
    heads = [
        re.findall(r'<th scope="col"[^>]*>([^<]+)</th>', t)
        for t in re.findall(r"<thead>(.*?)</thead>", page)
    ]
    assert len(heads) >= 2
    for line_head, queue_head in zip(heads[::2], heads[1::2], strict=True):
        shared = [h for h in queue_head if h in line_head]
        assert len(shared) >= 6 and shared == [h for h in line_head if h in queue_head], (
            line_head,
            queue_head,
        )
