"""One verdict, said the same way everywhere (#15): the job page, the API and ``gpuctl explain``
show the same estimated start (or "unknown" with the same reason) and every number of the
verdict with its unit, never an epoch or a float. The live portal, a real HTTP server.
"""

from __future__ import annotations

import html
import json
import re

import pytest

from quotas.models import BusinessLine, Queue
from scheduling.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

RAW = re.compile(r"\d{9,}|\d\.\d{2,}|\d[eE][+-]\d")


def verdict_section(page: str) -> str:
    start = page.index('<section id="verdict"')
    return html.unescape(page[start : page.index("</section>", start)])


def surfaces(gpuctl, api, client, job_id: int) -> tuple[dict, str, str]:
    reason = api("researcher").get(f"/api/v1/jobs/{job_id}/").json()
    page = verdict_section(client.get(f"/jobs/{job_id}/").content.decode())
    explained = gpuctl("researcher", "explain", str(job_id))
    assert explained.code == 0, explained.err
    return reason, page, explained.out


def submit(gpuctl, name: str, queue: str, gpus: int, runtime: int) -> int:
    run = gpuctl("researcher", "submit", name, "-q", queue, "-g", str(gpus),
                 "--sim-duration-minutes", str(runtime), "--runtime", str(runtime), "--json")  # fmt: skip
    assert run.code == 0, run.err
    return json.loads(run.out)["id"]


def test_a_quota_verdict_has_one_estimate_on_every_surface(gpuctl, api, client, demo):
    BusinessLine.objects.filter(name="llm").update(quota_gpus=16, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    client.force_login(demo["researcher"])
    for i in range(2):
        submit(gpuctl, f"fill{i}", "llm-core", 8, 90)
    waits = submit(gpuctl, "waits", "llm-core", 8, 30)
    response = api("admin").post("/api/v1/scheduler/cycle/")
    assert response.status_code == 200
    job = Job.objects.get(pk=waits)
    assert job.pending_code == "QUOTA_EXCEEDED" and job.estimated_start is not None
    shown = f"{job.estimated_start:%Y-%m-%d %H:%M} UTC"

    got, page, out = surfaces(gpuctl, api, client, waits)
    reason = got["pending_reason"]
    assert reason["estimated_start_text"] == shown
    assert reason["details"]["quota_room_at"].startswith(f"{job.estimated_start:%Y-%m-%dT%H:%M}")
    assert f"predicted by {shown}" in reason["remedy"]
    assert {"label": "Quota room predicted at", "text": shown, "key": "quota_room_at"} in (
        reason["facts"]
    )
    assert f'id="estimated-start">{shown}</strong>' in page
    assert f"<dt>Quota room predicted at</dt><dd>{shown}</dd>" in page
    assert f"predicted by {shown}" in page
    assert f"estimated start  {shown}" in out
    assert f"Quota room predicted at: {shown}" in out and f"predicted by {shown}" in out
    for text in (json.dumps(reason), page, out.split("events:")[0]):
        assert not RAW.search(text.replace(str(waits), "")), RAW.search(text)


def test_no_estimate_says_why_on_every_surface(gpuctl, api, client, demo):
    Queue.objects.filter(name="llm-core").update(quota_gpus=4)  # core: not preemptible
    client.force_login(demo["researcher"])
    big = submit(gpuctl, "too-big", "llm-core", 8, 30)
    assert api("admin").post("/api/v1/scheduler/cycle/").status_code == 200
    assert Job.objects.get(pk=big).estimated_start is None
    got, page, out = surfaces(gpuctl, api, client, big)
    text = "unknown: it is larger than the whole queue quota"
    assert got["estimated_start"] is None
    assert got["pending_reason"]["estimated_start_text"] == text
    assert got["pending_reason"]["details"]["no_estimate_reason"] == (
        "it is larger than the whole queue quota"
    )
    assert f'id="estimated-start">{text}</strong>' in page
    assert "no_estimate_reason" not in page and "No estimate reason" not in page
    assert f"estimated start  {text}" in out


def test_the_line_s_estimate_is_the_same_date_everywhere_and_says_what_it_is(
    gpuctl, api, client, demo
):
    # 32 GPUs held for 90 min; six 4-GPU jobs wait: the first four reserve nodes, the
    # other two are dated by their turn in the line (line_estimate.py)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    BusinessLine.objects.update(quota_gpus=64, guarantee_gpus=0)
    client.force_login(demo["researcher"])
    for i in range(4):
        submit(gpuctl, f"fill{i}", "llm-core", 8, 90)
    assert api("admin").post("/api/v1/scheduler/cycle/").status_code == 200
    waiting = [submit(gpuctl, f"w{i}", "llm-core", 4, 30) for i in range(6)]
    assert api("admin").post("/api/v1/scheduler/cycle/").status_code == 200
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=waiting)}
    assert all(j.estimated_start is not None for j in jobs.values())
    lined = [pk for pk in waiting if jobs[pk].pending_details.get("estimate_basis") == "line"]
    assert lined == waiting[4:]
    job = jobs[lined[-1]]
    shown = f"{job.estimated_start:%Y-%m-%d %H:%M} UTC"
    got, page, out = surfaces(gpuctl, api, client, job.pk)
    reason = got["pending_reason"]
    assert reason["estimated_start_text"] == shown
    fact = next(f for f in reason["facts"] if f["key"] == "estimate_basis")
    assert fact["label"] == "Estimated start from"
    assert fact["text"].startswith("its turn for the GPUs the running work")
    assert f'id="estimated-start">{shown}</strong>' in page
    assert f"<dt>Estimated start from</dt><dd>{fact['text']}</dd>" in page
    assert f"estimated start  {shown}" in out and "Estimated start from: its turn" in out
    for text in (json.dumps(reason), page, out.split("events:")[0]):
        assert not RAW.search(text), RAW.search(text)
