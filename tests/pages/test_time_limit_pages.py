"""Time limits on the pages: the submit form's "Time limit (minutes)" among the hints for
the scheduler, stored on the job and on every task of an array, refused on its field
(nothing stored) when out of range or shorter than the runtime estimate; copied by "Submit
a job like this one"; the job page's Status says the limit and, while a run is on, when it
is asked to stop; the what-if plans the job no longer than its limit."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest

from quotas.models import Queue
from scheduling.models import Job, JobArray
from scheduling.services import JobRequest, submit_job
from tests.drills import cycle, make_quotas_roomy
from tests.pages.test_array_after_pages import form_data, page, signed_in, text

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def test_the_form_offers_the_field_among_the_hints(demo):
    html = page(signed_in(demo, "researcher"), "/jobs/new/")
    start = html.index("<legend>Hints for the scheduler</legend>")
    hints = html[start : html.index("</fieldset>", start)]
    assert re.search(
        r'<label for="id_time_limit_minutes">Time limit \(minutes\)</label>\s*'
        r'<input type="number" name="time_limit_minutes" min="1" max="129600"',
        hints,
    ), hints
    assert "as Slurm&#x27;s --time" in text(html, "id_time_limit_minutes_helptext")


def test_the_form_stores_the_limit_on_a_job_and_on_every_task(demo):
    client = signed_in(demo, "researcher")
    response = client.post("/jobs/new/", form_data(name="bounded", time_limit_minutes="45"))
    job = Job.objects.get(name="bounded")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.time_limit_minutes == 45
    client.post("/jobs/new/", form_data(name="swept", time_limit_minutes="20", array="0-2"))
    tasks = JobArray.objects.get(name="swept").tasks.values_list("time_limit_minutes", flat=True)
    assert list(tasks) == [20, 20, 20]
    copy = page(client, f"/jobs/new/?like={job.pk}")
    assert re.search(r'name="time_limit_minutes" value="45"', copy), "copied"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"time_limit_minutes": "0"}, "time_limit_minutes", "greater than or equal to 1"),
        ({"time_limit_minutes": "4:00:00"}, "time_limit_minutes", "Enter a whole number."),
        ({"time_limit_minutes": "129601"}, "time_limit_minutes", "less than or equal to 129600"),
        (
            {"time_limit_minutes": "30", "estimated_runtime_minutes": "45"},
            "estimated_runtime_minutes",
            "your estimate (45 min) is longer than the time limit (30 min)",
        ),
    ],
)
def test_bad_limits_are_refused_on_their_field_and_nothing_is_stored(demo, fields, field, message):
    client = signed_in(demo, "researcher")
    before = Job.objects.count()
    response = client.post("/jobs/new/", form_data(name="bad", **fields))
    assert response.status_code == 200
    assert message in text(response.content.decode(), f"id_{field}_error"), field
    assert Job.objects.count() == before


def test_the_job_page_says_the_limit_and_when_the_run_is_asked_to_stop(demo, api):
    me, admin = demo["researcher"], api("admin")
    bounded = submit_job(me, JobRequest(name="bounded", queue="llm-core", gpus=8,
                                        sim_duration_minutes=90, time_limit_minutes=150))  # fmt: skip
    free = submit_job(me, JobRequest(name="free", queue="llm-core", gpus=8))
    client = signed_in(demo, "researcher")
    html = page(client, f"/jobs/{bounded.pk}/")
    assert "<dt>Time limit</dt>" in html
    assert re.search(r'data-field="time_limit">2 h 30 min a run</dd>', html), "waiting: no run"
    cycle(admin)
    bounded.refresh_from_db()
    assert bounded.state == "running"
    stop = bounded.started_at + timedelta(minutes=150)
    html = page(client, f"/jobs/{bounded.pk}/")
    assert (
        f'data-field="time_limit">2 h 30 min a run: this run is asked to stop at '
        f"{stop:%Y-%m-%d %H:%M} UTC if still running</dd>"
    ) in html
    assert 'data-field="time_limit">none</dd>' in page(client, f"/jobs/{free.pk}/")


def test_the_what_if_plans_the_job_no_longer_than_its_limit(demo, api):
    """A full cluster whose running job's limit ends it in 50 minutes: the what-if's start
    for the next job is then, not at the 12-hour default of an unknown run."""
    me, admin = demo["researcher"], api("admin")
    submit_job(me, JobRequest(name="all", queue="llm-core", gpus=32, sim_duration_minutes=600,
                              time_limit_minutes=50))  # fmt: skip
    cycle(admin)
    running = Job.objects.get(name="all")
    assert running.state == "running"
    client = signed_in(demo, "researcher")
    queue = Queue.objects.get(name="llm-core").pk
    response = client.get("/jobs/feasibility/", {"queue": queue, "gpus": 32, "name": "next"})
    assert response.status_code == 200
    answer = response.json()
    ends = running.started_at + timedelta(minutes=50)
    assert answer["estimated_start"].startswith(f"{ends:%Y-%m-%dT%H:%M}"), answer


def test_the_queues_page_says_each_queue_s_limits(demo):
    Queue.objects.filter(name="llm-experiment").update(
        max_time_limit_minutes=1440, default_time_limit_minutes=480
    )
    Queue.objects.filter(name="llm-finetune").update(max_time_limit_minutes=2880)
    Queue.objects.filter(name="llm-core").update(default_time_limit_minutes=90)
    html = page(signed_in(demo, "researcher"), "/queues/")
    assert '<th scope="col">Time limit of a run</th>' in html

    def cell(name: str) -> str:
        row = re.search(rf'<th scope="row">{name}</th>.*?</tr>', html, re.S)[0]
        return re.search(r'data-field="time_limit">([^<]*)</td>', row)[1]

    assert cell("llm-experiment") == "at most 24 h; 8 h if the job gives none"
    assert cell("llm-finetune") == "at most 2 d; 2 d if the job gives none"
    assert cell("llm-core") == "no bound; 1 h 30 min if the job gives none"
    assert cell("llm-urgent") == "no bound"


def test_the_job_page_changes_the_limit_lower_for_the_owner_higher_for_an_admin(demo):
    me = demo["researcher"]
    job = submit_job(me, JobRequest(name="bounded", queue="llm-core", gpus=8,
                                    time_limit_minutes=240))  # fmt: skip
    client = signed_in(demo, "researcher")
    html = page(client, f"/jobs/{job.pk}/")
    assert 'id="time-limit-form"' in html and 'name="time_limit_minutes"' in html
    assert "You may lower it (or give one); only an admin may raise it." in html
    url = f"/jobs/{job.pk}/time-limit/"
    done = client.post(url, {"time_limit_minutes": "120", "reason": "shorter eval"}, follow=True)
    assert f"Job #{job.pk}'s time limit is now 2 h a run." in unescape(done.content.decode())
    job.refresh_from_db()
    assert job.time_limit_minutes == 120
    for value, words in (("180", "only a cluster admin may raise a time limit"),
                         ("٩٠", "a whole number of minutes"), ("", "a whole number of minutes"),
                         ("120", "the time limit is already 2 h")):  # fmt: skip
        refused = unescape(
            client.post(url, {"time_limit_minutes": value}, follow=True).content.decode()
        )
        assert "Time limit not changed: " + words in refused, value
    job.refresh_from_db()
    assert job.time_limit_minutes == 120
    admin = signed_in(demo, "admin")
    assert "As an admin you may raise it or lower it." in page(admin, f"/jobs/{job.pk}/")
    admin.post(url, {"time_limit_minutes": "600"})
    job.refresh_from_db()
    assert job.time_limit_minutes == 600
    assert client.post(url, {"time_limit_minutes": "60"}).status_code == 302
    other = signed_in(demo, "researcher2")
    assert other.post(url, {"time_limit_minutes": "60"}).status_code == 404, "not theirs"


def test_an_ended_job_shows_no_time_limit_form(demo):
    me = demo["researcher"]
    job = submit_job(me, JobRequest(name="gone", queue="llm-core", gpus=8))
    from scheduling.services import cancel_job

    cancel_job(me, job.pk)
    html = page(signed_in(demo, "researcher"), f"/jobs/{job.pk}/")
    assert re.search(r'id="time-limit-form" hidden', html)


def test_a_job_above_its_queue_s_lowered_max_reads_so_on_its_page_and_in_the_list(demo, api):
    me = demo["researcher"]
    waiting = submit_job(
        me, JobRequest(name="long", queue="llm-core", gpus=8, time_limit_minutes=600)
    )
    Queue.objects.filter(name="llm-core").update(max_time_limit_minutes=300)
    cycle(api("admin"))
    client = signed_in(demo, "researcher")
    html = page(client, f"/jobs/{waiting.pk}/")
    assert text(html, "verdict-code") == "QUEUE_TIME_LIMIT"
    assert text(html, "verdict-title") == "Its time limit is longer than its queue allows now"
    assert text(html, "verdict-message").startswith(
        "Its time limit (10 h a run) is longer than queue llm-core lets a run last now (5 h)"
    )
    rows = dict(re.findall(r"<dt>([^<]*)</dt>\s*<dd>([^<]*)</dd>", html))
    assert rows["Its time limit (a run)"] == "10 h"
    assert rows["The longest run its queue allows now"] == "5 h"
    listed = page(client, "/jobs/?mine=1")
    assert "Its time limit is longer than its queue allows now" in listed
