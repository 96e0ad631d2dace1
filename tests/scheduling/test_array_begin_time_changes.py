"""Changing the earliest start of an array's waiting tasks (``array_services.
change_begin_times``, Slurm's ``scontrol update JobId=<array> StartTime=``) through the
API and the array page, on the small simulated cluster (4 x 8 GPUs): every waiting task
gets it, a task that started is left; cleared, they queue from now; someone else's change
is audited once; no waiting task, a bad time or no change are refused and write nothing;
past the loop's hold of the cluster, a 409 that changes nothing."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import pytest

from core import clock
from core.models import AuditRecord
from scheduling.models import Job, JobEvent
from tests.concurrency.threads import cluster_held
from tests.drills import advance, cycle, make_quotas_roomy
from tests.pages.test_array_after_pages import page, signed_in
from tests.scheduling.test_begin_time import iso, later

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def made(client, spec: str = "0-3", gpus: int = 8) -> int:
    body = {"name": "sweep", "queue": "llm-experiment", "gpus": gpus, "array": spec,
            "sim_duration_minutes": 90}  # fmt: skip
    response = client.post("/api/v1/arrays/", body, format="json")
    assert response.status_code == 201, response.data
    return response.data["id"]


def change(client, array_id: int, begin_at, reason: str | None = None):
    body = {"begin_at": begin_at} | ({} if reason is None else {"reason": reason})
    return client.post(f"/api/v1/arrays/{array_id}/begin-time/", body, format="json")


def tasks(array_id: int) -> list[Job]:
    return list(Job.objects.filter(array_id=array_id).order_by("array_index"))


def test_every_waiting_task_is_put_off_the_running_ones_left(api):
    admin, me = api("admin"), api("researcher")
    array = made(me, "0-5", gpus=8)  # 6 x 8 GPUs on 32: 4 run, 2 wait
    cycle(admin)
    running = [t.pk for t in tasks(array) if t.state == "running"]
    waiting = [t.pk for t in tasks(array) if t.state == "pending"]
    assert len(running) == 4 and len(waiting) == 2
    begin = later(240)
    response = change(me, array, iso(begin), "after the eval")
    assert response.status_code == 200, response.data
    assert response.data["changed"] == waiting
    assert response.data["begin_at"] == begin.isoformat().replace("+00:00", "Z")
    by_id = {t.pk: t for t in tasks(array)}
    assert {by_id[pk].begin_at for pk in waiting} == {begin}
    assert {by_id[pk].begin_at for pk in running} == {None}
    lines = JobEvent.objects.filter(kind="begin_time").values_list("job_id", "message")
    assert sorted(lines) == [
        (pk, f"earliest start changed by researcher from none to {begin:%Y-%m-%d %H:%M} UTC "
             "(Slurm's --begin); it queues from then: after the eval")
        for pk in waiting
    ]  # fmt: skip
    assert not AuditRecord.objects.filter(action="array.begin_time").exists(), "their own"
    # the running tasks end: the waiting ones still wait for their time
    advance(admin, 100 * 60)
    cycle(admin)
    cycle(admin)
    assert {Job.objects.get(pk=pk).pending_code for pk in waiting} == {"BEGIN_TIME"}

    cleared_at = clock.now()
    response = change(api("lead"), array, None)
    assert response.status_code == 200 and response.data == {"changed": waiting, "begin_at": None}
    record = AuditRecord.objects.get(action="array.begin_time")
    assert record.before == {"begin_at": [begin.isoformat()]}
    assert record.after == {"begin_at": None, "tasks": 2}
    assert {(t.begin_at, t.released_at >= cleared_at) for t in tasks(array) if t.pk in waiting} == {
        (None, True)
    }
    cycle(admin)
    assert {Job.objects.get(pk=pk).state for pk in waiting} == {"running"}


def test_refusals_write_nothing(api, demo):
    admin, me = api("admin"), api("researcher")
    array = made(me, "0-1")
    begin = later(60)
    assert change(me, array, iso(begin)).status_code == 200
    same = change(me, array, iso(begin))
    assert same.status_code == 400
    assert same.data["errors"]["begin_at"] == [
        f"every waiting task's earliest start is {begin:%Y-%m-%d %H:%M} UTC"
    ]
    for value, words in (("tomorrow", "not a time"), ("2026-12-08T09:00:00", "say the zone")):
        refused = change(me, array, value)
        assert refused.status_code == 400 and words in str(refused.data)
    assert change(api("researcher2"), array, None).status_code == 404
    assert JobEvent.objects.filter(kind="begin_time").count() == 2
    assert {t.begin_at for t in tasks(array)} == {begin}
    assert change(me, array, None).status_code == 200
    none = change(me, array, "")
    assert none.data["errors"]["begin_at"] == [
        "every waiting task's earliest start is none: they already queue"
    ]
    cycle(admin)
    ended = change(me, array, iso(later(30)))
    assert ended.status_code == 409, ended.data
    assert "no task of array" in str(ended.data) and "waits" in str(ended.data)


@pytest.mark.django_db(transaction=True)
def test_while_the_loop_holds_the_cluster_it_is_a_409_that_changes_nothing(api, monkeypatch):
    from scheduling import array_services

    me = api("researcher")
    array = made(me, "0-2")
    monkeypatch.setattr(array_services, "LOCK_WAIT_S", 0.5)
    with cluster_held():
        response = change(me, array, iso(later(60)))
    assert response.status_code == 409, response.data
    assert "busy" in response.json()["errors"]["non_field_errors"][0]
    assert {t.begin_at for t in tasks(array)} == {None}


def test_the_array_page_form_reads_the_viewer_s_zone_and_says_what_it_did(demo, api):
    from core.models import Profile

    Profile.objects.filter(user=demo["researcher"]).update(time_zone="Asia/Tokyo")
    client = signed_in(demo, "researcher")
    array = made(api("researcher"), "0-2")
    html = page(client, f"/arrays/{array}/")
    assert 'id="array-begin-form"' in html
    response = client.post(f"/arrays/{array}/begin-time/", {"begin_at": "2099-01-01T09:00"},
                           follow=True)  # fmt: skip
    (said,) = re.findall(r'<li class="error">(.*?)</li>', response.content.decode())
    assert said.startswith("Earliest start not changed: at most 366 days ahead"), said
    assert said.endswith(" JST)"), "the cluster time it names, in the viewer's zone"
    tokyo = later(180).astimezone(ZoneInfo("Asia/Tokyo"))
    response = client.post(f"/arrays/{array}/begin-time/",
                           {"begin_at": f"{tokyo:%Y-%m-%dT%H:%M}"}, follow=True)  # fmt: skip
    said = re.findall(r'<li class="success">(.*?)</li>', response.content.decode())
    assert said == [
        f"Array {array}: 3 waiting tasks do not start before {tokyo:%Y-%m-%d %H:%M} JST."
    ]
    assert {t.begin_at for t in tasks(array)} == {tokyo.replace(second=0)}
    # every task runs: no form
    cycle(api("admin"))
    client.post(f"/arrays/{array}/begin-time/", {"begin_at": ""})
    cycle(api("admin"))
    assert {t.state for t in tasks(array)} == {"running"}
    assert 'id="array-begin-form"' not in page(client, f"/arrays/{array}/")
