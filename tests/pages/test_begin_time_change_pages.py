"""Changing a waiting job's earliest start on its page (``begin_time_views``): the form
reads the time in the viewer's zone (a researcher in Tokyo types 09:00, the job waits until
00:00 UTC) and shows the one it has the same way; the flash and the timeline say it in that
zone; emptied it clears it; a refused change is said on the page and writes nothing; the
form is only for a waiting job and those who may act on it; a GET is refused."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from core import clock
from scheduling.models import Job, JobEvent
from tests.drills import cycle
from tests.pages.test_array_after_pages import form_data, page, signed_in, text
from tests.pages.test_begin_time_pages import TOKYO, in_tokyo  # noqa: F401 (autouse)

pytestmark = pytest.mark.django_db


def nine_in_tokyo(days: int) -> datetime:
    day = clock.now().astimezone(TOKYO).date() + timedelta(days=days)
    return datetime(day.year, day.month, day.day, 9, 0, tzinfo=TOKYO)


def submitted(client, **fields: str) -> Job:
    client.post("/jobs/new/", form_data(**fields), follow=True)  # its flash read
    return Job.objects.get(name=fields.get("name", "aggregate"))


def flash(html: str) -> list[str]:
    found = re.search(r'<ul class="messages">(.*?)</ul>', html, re.S)
    return [" ".join(m.split()) for m in re.findall(r"<li[^>]*>(.*?)</li>", found[1], re.S)]


def test_a_time_typed_in_the_viewer_s_zone_puts_the_job_off_until_that_instant(demo):
    client = signed_in(demo, "researcher")
    job = submitted(client)
    html = page(client, f"/jobs/{job.pk}/")
    form = html[
        html.index('id="begin-time-form"') : html.index(
            "</form>", html.index('id="begin-time-form"')
        )
    ]
    assert f'action="/jobs/{job.pk}/begin-time/"' in html
    assert "hidden" not in form.split(">")[0], "a waiting job's form is shown"
    nine = nine_in_tokyo(1)
    response = client.post(f"/jobs/{job.pk}/begin-time/", {"begin_at": f"{nine:%Y-%m-%dT%H:%M}",
                                                           "reason": "after the refresh"})  # fmt: skip
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert job.begin_at == nine.astimezone(UTC) and job.begin_at.hour == 0
    html = page(client, f"/jobs/{job.pk}/")
    assert flash(html) == [f"Job #{job.pk} does not start before {nine:%Y-%m-%d %H:%M} JST."]
    assert re.search(r'<dd data-field="begin_at">(.*?)</dd>', html)[1] == (
        f"{nine:%Y-%m-%d %H:%M} JST (asked: Slurm's --begin)"
    )
    assert f'value="{nine:%Y-%m-%dT%H:%M}"' in html, "the form shows it in the viewer's zone"
    line = [li for li in re.findall(r"<li><time[^>]*>.*?</li>", html, re.S) if "begin_time" in li]
    assert len(line) == 1 and f"to {nine:%Y-%m-%d %H:%M} JST (Slurm" in line[0]


def test_emptied_it_clears_it_and_the_job_queues_from_now(demo, api):
    client = signed_in(demo, "researcher")
    job = submitted(client, begin_at=f"{nine_in_tokyo(2):%Y-%m-%dT%H:%M}")
    response = client.post(f"/jobs/{job.pk}/begin-time/", {"begin_at": ""})
    assert response.status_code == 302
    html = page(client, f"/jobs/{job.pk}/")
    assert flash(html) == [f"Job #{job.pk} has no earliest start: it queues from now."]
    assert Job.objects.get(pk=job.pk).begin_at is None
    cycle(api("admin"))
    job.refresh_from_db()
    assert job.state == "running"
    html = page(client, f"/jobs/{job.pk}/")
    form = html[html.index('id="begin-time-form"') :].split(">")[0]
    assert "hidden" in form, "a job that started has no earliest start to change"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("tomorrow", "not a date and time"),
        ("2026-02-30T09:00", "not a date and time"),
        ("2099-01-01T09:00", "at most 366 days ahead"),
        ("", "it has no earliest start: it already queues"),
    ],
)
def test_a_refused_change_is_said_and_writes_nothing(demo, value, words):
    client = signed_in(demo, "researcher")
    job = submitted(client)
    response = client.post(f"/jobs/{job.pk}/begin-time/", {"begin_at": value}, follow=True)
    assert response.status_code == 200
    (said,) = flash(response.content.decode())
    assert said.startswith("Earliest start not changed: ") and words in said, said
    assert Job.objects.get(pk=job.pk).begin_at is None
    assert not JobEvent.objects.filter(job=job, kind="begin_time").exists()


def test_only_those_who_may_act_see_the_form_and_may_post(demo):
    job = submitted(signed_in(demo, "researcher"))
    other = signed_in(demo, "researcher2")
    assert other.post(f"/jobs/{job.pk}/begin-time/", {"begin_at": ""}).status_code == 404
    lead = signed_in(demo, "lead")
    assert 'id="begin-time-form"' in page(lead, f"/jobs/{job.pk}/")
    assert signed_in(demo, "researcher").get(f"/jobs/{job.pk}/begin-time/").status_code == 405
    assert text(page(lead, f"/jobs/{job.pk}/"), "begin-time-note").startswith("Put later")
