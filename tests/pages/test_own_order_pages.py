"""Putting a waiting job first among its owner's, and moving it to another queue, on its
page (``own_order_views``, ``move_views``): the top button names whose jobs (mine, or the
owner's for a lead), the move form offers the queues its owner may submit to; posting
either says what it did and writes the timeline; a refusal is said and nothing changes; a
job that started has neither; a GET is refused, someone who may not see the job gets a
404."""

from __future__ import annotations

import re

import pytest

from quotas.models import Queue
from scheduling.models import Job, JobEvent
from tests.drills import cycle, make_quotas_roomy
from tests.pages.test_array_after_pages import form_data, page, signed_in, text
from tests.pages.test_begin_time_change_pages import flash

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def submitted(client, name: str) -> Job:
    client.post("/jobs/new/", form_data(name=name), follow=True)  # its flash read
    return Job.objects.get(name=name)


def test_the_owner_puts_a_job_first_and_the_lead_sees_whose(demo, api):
    client = signed_in(demo, "researcher")
    job = submitted(client, "eval")
    html = page(client, f"/jobs/{job.pk}/")
    assert text(html, "top-button") == "Put it first among my waiting jobs"
    assert text(html, "top-note").startswith(
        "It takes the first of the places your waiting jobs of llm, tier"
    )
    response = client.post(f"/jobs/{job.pk}/top/", follow=True)
    assert response.status_code == 200
    said = flash(response.content.decode())
    assert said[0].startswith(f"Job #{job.pk} is now first among your waiting jobs of llm")
    assert JobEvent.objects.filter(job=job, kind="top").count() == 1
    again = flash(client.post(f"/jobs/{job.pk}/top/", follow=True).content.decode())
    assert again == ["Not put first: it is already the one put first of those jobs"]
    assert JobEvent.objects.filter(job=job, kind="top").count() == 1
    lead = signed_in(demo, "lead")
    assert text(page(lead, f"/jobs/{job.pk}/"), "top-button") == (
        "Put it first among researcher's waiting jobs"
    )
    assert signed_in(demo, "researcher2").post(f"/jobs/{job.pk}/top/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/top/").status_code == 405
    cycle(api("admin"))
    assert Job.objects.get(pk=job.pk).state == "running"
    form = page(client, f"/jobs/{job.pk}/")
    assert 'id="top-form" hidden' in form.replace('id="top-form"\n', 'id="top-form" ')


def test_the_move_form_offers_the_owner_s_queues_and_says_what_it_did(demo, api):
    client = signed_in(demo, "researcher")
    job = submitted(client, "eval")  # form_data submits to llm-core
    html = page(client, f"/jobs/{job.pk}/")
    options = re.findall(r'<option value="\d+">([^<]*)</option>',
                         html[html.index('id="move-queue"'):])  # fmt: skip
    assert options[:3] == ["llm-experiment (llm, tier up to experiment)",
                           "llm-finetune (llm, tier up to finetune)",
                           "llm-urgent (llm, tier up to urgent)"]  # fmt: skip
    finetune = Queue.objects.get(name="llm-finetune").pk
    refused = client.post(f"/jobs/{job.pk}/move/", {"queue": finetune}, follow=True)
    assert flash(refused.content.decode()) == [
        "Not moved: queue llm-finetune allows tiers up to &#x27;finetune&#x27;, not &#x27;core&#x27;"
    ]
    urgent = Queue.objects.get(name="llm-urgent").pk
    moved = client.post(f"/jobs/{job.pk}/move/", {"queue": urgent, "reason": "demo"}, follow=True)
    assert flash(moved.content.decode()) == [
        f"Job #{job.pk} is now in queue llm-urgent; it waits there from the next cycle."
    ]
    assert Job.objects.get(pk=job.pk).queue.name == "llm-urgent"
    assert (
        signed_in(demo, "researcher2").post(f"/jobs/{job.pk}/move/", {"queue": urgent}).status_code
        == 404
    )
    cycle(api("admin"))
    started = page(client, f"/jobs/{job.pk}/")
    assert 'id="move-form" hidden' in started, "it started: hidden (shown again if requeued)"
