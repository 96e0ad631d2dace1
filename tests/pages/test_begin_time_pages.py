"""A job's earliest start on the pages: the submit form's "Not before" in its Pipeline, read
in the viewer's zone (a researcher in Tokyo types 09:00, the job waits until 00:00 UTC),
stored on the job and on every task of an array; refused on its field when it is not a
time (nothing stored); the what-if under the form waits for it; the job page's Status row
and its verdict."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from core import clock
from core.models import Profile
from quotas.models import Queue
from scheduling.models import Job, JobArray
from tests.drills import cycle, make_quotas_roomy
from tests.pages.test_array_after_pages import form_data, page, signed_in, text

pytestmark = pytest.mark.django_db

TOKYO = ZoneInfo("Asia/Tokyo")


@pytest.fixture(autouse=True)
def in_tokyo(demo):
    make_quotas_roomy()
    Profile.objects.filter(user=demo["researcher"]).update(time_zone="Asia/Tokyo")


def tomorrow_nine_in_tokyo() -> datetime:
    """09:00 Tokyo time on the cluster's next day there (00:00 UTC)."""
    day = clock.now().astimezone(TOKYO).date() + timedelta(days=1)
    return datetime(day.year, day.month, day.day, 9, 0, tzinfo=TOKYO)


def test_the_form_offers_it_in_the_pipeline(demo):
    html = page(signed_in(demo, "researcher"), "/jobs/new/")
    start = html.index("<legend>Pipeline</legend>")
    pipeline = html[start : html.index("</fieldset>", start)]
    assert re.search(
        r'<label for="id_begin_at">Not before</label>\s*<input type="datetime-local" '
        r'name="begin_at"', pipeline
    ), pipeline  # fmt: skip
    assert "as Slurm&#x27;s --begin" in text(html, "id_begin_at_helptext")


def test_a_time_typed_in_the_viewer_s_zone_is_stored_as_that_instant(demo):
    nine = tomorrow_nine_in_tokyo()
    client = signed_in(demo, "researcher")
    response = client.post("/jobs/new/", form_data(begin_at=f"{nine:%Y-%m-%dT%H:%M}"))
    job = Job.objects.get(name="aggregate")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.begin_at == nine.astimezone(UTC)
    assert job.begin_at.hour == 0, "09:00 in Tokyo is 00:00 UTC"
    # an array: every task
    client.post("/jobs/new/", form_data(name="sweep", array="0-2",
                                        begin_at=f"{nine:%Y-%m-%dT%H:%M}"))  # fmt: skip
    tasks = JobArray.objects.get(name="sweep").tasks
    assert set(tasks.values_list("begin_at", flat=True)) == {nine.astimezone(UTC)}


@pytest.mark.parametrize("value", ["tomorrow", "2026-02-30T09:00", "9"])
def test_a_value_that_is_not_a_time_is_refused_on_the_field(demo, value):
    response = signed_in(demo, "researcher").post("/jobs/new/", form_data(begin_at=value))
    assert response.status_code == 200
    html = response.content.decode()
    assert "The job was not submitted" in html and 'href="#id_begin_at"' in html
    assert text(html, "id_begin_at_error") == "not a date and time"
    assert not Job.objects.filter(name="aggregate").exists()


def test_the_what_if_and_the_job_page_say_it_waits_until_then(demo, api):
    nine = tomorrow_nine_in_tokyo()
    client = signed_in(demo, "researcher")
    queue = Queue.objects.get(name="llm-core").pk
    answer = client.get(
        f"/jobs/feasibility/?queue={queue}&gpus=8&begin_at={nine:%Y-%m-%dT%H:%M}"
    ).json()
    assert answer["code"] == "BEGIN_TIME"
    assert answer["title"] == "Would wait until the time you gave"
    utc = nine.astimezone(UTC)
    assert answer["message"] == (
        f"Asked not to start before {utc:%Y-%m-%d %H:%M} UTC (Slurm's --begin): it queues "
        "from then."
    )
    client.post("/jobs/new/", form_data(begin_at=f"{nine:%Y-%m-%dT%H:%M}"))
    job = Job.objects.get(name="aggregate")
    cycle(api("admin"))
    html = page(client, f"/jobs/{job.pk}/")
    assert text(html, "verdict-code") == "BEGIN_TIME"
    assert text(html, "verdict-title") == "Asked to start later"
    row = re.search(r'<dd data-field="begin_at">(.*?)</dd>', html)[1]
    assert row == f"{nine:%Y-%m-%d %H:%M} JST (asked: Slurm's --begin)", "in the viewer's zone"
    rows = dict(re.findall(r"<dt>([^<]*)</dt>\s*<dd>([^<]*)</dd>", html))
    assert rows["Not before"] == f"{nine:%Y-%m-%d %H:%M} JST"
    assert text(html, "verdict-message").startswith(
        f"Asked not to start before {nine:%Y-%m-%d %H:%M} JST"
    )
    # a waiting job without one reads none (it may be given one: the form below); one that
    # started without one has no such row
    client.post("/jobs/new/", form_data(name="plain"))
    plain = Job.objects.get(name="plain")
    assert plain.begin_at is None
    html = page(client, f"/jobs/{plain.pk}/")
    assert re.search(r'<dd data-field="begin_at">(.*?)</dd>', html)[1] == "none"
    cycle(api("admin"))
    assert Job.objects.get(pk=plain.pk).state == "running"
    assert 'data-field="begin_at"' not in page(client, f"/jobs/{plain.pk}/")
