"""“Submit a job like this one”: ``/jobs/new/?like=<id>`` fills the submit form as that job
was asked for, and submitting the form unchanged asks for the same job again."""

from __future__ import annotations

import html
from html.parser import HTMLParser

import pytest
from django.test import Client

from quotas.models import BusinessLine, Queue
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job

pytestmark = pytest.mark.django_db

# What a job was asked for: every field of the submission but its name and queue.
ASKED = (
    "tier", "gpus", "gpus_per_node", "gpu_memory_gb", "rdma", "exclusive_node",
    "avoid_inference", "preemptible", "max_retries", "checkpoint_path",
    "checkpoint_interval_minutes", "estimated_runtime_minutes", "model_name",
    "sim_duration_minutes",
)  # fmt: skip


class SubmittedValues(HTMLParser):
    """What a browser submits for the form ``form_id`` left as it is: each input's value
    (checkboxes only when checked), each select's selected option (else its first)."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id, self.inside, self.values = form_id, False, {}
        self._select: str | None = None
        self._first: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        name = a.get("name")
        if tag == "input" and name and name != "csrfmiddlewaretoken":
            if a.get("type") != "checkbox" or "checked" in a:
                self.values[name] = a.get("value") or ("on" if a.get("type") == "checkbox" else "")
        elif tag == "select" and name:
            self._select, self._first = name, None
        elif tag == "option" and self._select:
            if self._first is None:
                self._first = a.get("value", "")
            if "selected" in a:
                self.values[self._select] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select" and self._select:
            self.values.setdefault(self._select, self._first or "")
            self._select = None


def form_values(page: str) -> dict[str, str]:
    parser = SubmittedValues("submit-form")
    parser.feed(page)
    return parser.values


def signed_in(demo, username: str) -> Client:
    client = Client()
    client.force_login(demo[username])
    return client


@pytest.fixture
def roomy(demo):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)


def asked_for(job: Job) -> dict:
    return {name: getattr(job, name) for name in ASKED}


CHOSEN = {  # every field chosen away from its default
    "tier": "finetune", "gpus": 16, "gpus_per_node": 4, "gpu_memory_gb": 80, "rdma": False,
    "exclusive_node": True, "avoid_inference": True, "preemptible": False, "max_retries": 7,
    "checkpoint_path": "s3://ckpt/run-9", "checkpoint_interval_minutes": 120,
    "estimated_runtime_minutes": 95, "model_name": "llama-7b", "sim_duration_minutes": 40,
}  # fmt: skip


@pytest.mark.parametrize(
    "asked",
    [
        pytest.param({"gpus": 8}, id="defaults"),
        pytest.param({"gpus": 16}, id="multi-node-defaults"),
        pytest.param(CHOSEN, id="everything-chosen"),
        pytest.param(
            {"gpus": 2, "rdma": True, "preemptible": True, "tier": "experiment"}, id="mixed"
        ),
    ],
)
def test_the_copy_submitted_unchanged_asks_for_the_same_job(demo, roomy, asked):
    original = submit_job(demo["researcher"], JobRequest(name="sft-run", queue="llm-core", **asked))
    client = signed_in(demo, "researcher")
    response = client.get("/jobs/new/", {"like": original.pk})
    page = response.content.decode()
    assert response.status_code == 200, page
    assert 'id="prefill-like"' in page and f"job #{original.pk} (sft-run)" in html.unescape(page)

    values = form_values(page)
    assert values["name"] == "sft-run" and values["queue"] == str(original.queue_id)
    response = client.post("/jobs/new/", {**values, "action": "submit"})
    assert response.status_code == 302, response.content.decode()
    copy = Job.objects.exclude(pk=original.pk).get()
    assert copy.name == original.name and copy.queue_id == original.queue_id
    assert asked_for(copy) == asked_for(original)
    assert copy.state == Job.State.PENDING and copy.owner == demo["researcher"]


def test_what_was_left_to_a_default_stays_a_default_on_the_copy(demo, roomy):
    """A 16-GPU job left RDMA and GPUs per node to their defaults: its copy, asked at 4
    GPUs, is a one-node job without RDMA, not a 4-GPU job pinned to RDMA nodes."""
    original = submit_job(demo["researcher"], JobRequest(name="big", queue="llm-core", gpus=16))
    assert original.rdma and original.gpus_per_node == 8
    client = signed_in(demo, "researcher")
    values = form_values(client.get("/jobs/new/", {"like": original.pk}).content.decode())
    assert values["rdma"] == "" and values["gpus_per_node"] == "" and values["tier"] == ""
    assert values["preemptible"] == ""
    client.post("/jobs/new/", {**values, "gpus": "4", "action": "submit"})
    copy = Job.objects.exclude(pk=original.pk).get()
    assert (copy.gpus, copy.gpus_per_node, copy.rdma) == (4, 4, False)


def test_the_copy_fills_the_form_and_submits_nothing(demo, roomy):
    original = submit_job(demo["researcher"], JobRequest(name="a", queue="llm-core", gpus=8))
    signed_in(demo, "researcher").get("/jobs/new/", {"like": original.pk})
    assert Job.objects.count() == 1


def test_a_colleague_copies_into_their_own_queues_only(demo, roomy):
    """researcher2 (another line) may not see the LLM line's job: the link is a 400 and the
    form starts empty. The team lead may see it and copies it."""
    original = submit_job(demo["researcher"], JobRequest(name="a", queue="llm-core", gpus=8))
    response = signed_in(demo, "researcher2").get("/jobs/new/", {"like": original.pk})
    page = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert f"“{original.pk}” is not a job you may see; the form starts empty" in page
    assert "sft" not in form_values(page).get("name", "") and form_values(page)["queue"] == ""

    values = form_values(
        signed_in(demo, "lead").get("/jobs/new/", {"like": original.pk}).content.decode()
    )
    assert values["name"] == "a" and values["queue"] == str(original.queue_id)


def test_a_job_whose_queue_the_viewer_may_not_submit_to_leaves_the_queue_to_choose(demo, roomy):
    """On-call sees every job but may submit to no queue: the form is filled, the queue is
    not, and the page says why."""
    original = submit_job(demo["researcher"], JobRequest(name="a", queue="llm-core", gpus=8))
    response = signed_in(demo, "oncall").get("/jobs/new/", {"like": original.pk})
    page = html.unescape(response.content.decode())
    assert response.status_code == 200
    values = form_values(page)
    assert values["queue"] == "" and values["gpus"] == "8"
    assert "Its queue, llm-core, is not one you may submit to: choose one below." in page


@pytest.mark.parametrize("asked", ["abc", "-1", "١٢", "99999999999999999999", "1 ", ""])
def test_a_bad_or_unknown_like_is_refused_and_changes_nothing(demo, asked):
    response = signed_in(demo, "researcher").get("/jobs/new/", {"like": asked})
    if asked == "":
        assert response.status_code == 200  # an empty parameter asks for nothing
        return
    page = html.unescape(response.content.decode())
    assert response.status_code == 400 and 'id="prefill-refused"' in page
    assert "is not a job you may see" in page
    assert not Job.objects.exists()


def test_a_queue_in_the_link_wins_over_the_copied_jobs(demo, roomy):
    original = submit_job(demo["researcher"], JobRequest(name="a", queue="llm-core", gpus=8))
    other = Queue.objects.get(name="llm-finetune")
    page = signed_in(demo, "researcher").get(
        "/jobs/new/", {"like": original.pk, "queue": "llm-finetune"}
    )
    assert form_values(page.content.decode())["queue"] == str(other.pk)


def test_the_job_page_links_to_the_copy(demo):
    original = submit_job(demo["researcher"], JobRequest(name="a", queue="llm-core", gpus=8))
    page = signed_in(demo, "researcher").get(f"/jobs/{original.pk}/").content.decode()
    assert f'href="/jobs/new/?like={original.pk}" id="submit-like"' in page
