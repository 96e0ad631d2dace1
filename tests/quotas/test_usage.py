"""The usage report's accounting: every run the loop ends is recorded once with its GPUs
and times (``JobRun``), and ``build_usage_report`` sums GPU-hours per line, queue and person,
clipped to the period, with the runs still going counted up to now."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.test import Client

from core import clock
from quotas.usage import build_usage_report
from scheduling.models import Job, JobRun
from tests.drills import advance, cycle, job, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def finish_one_run(admin, me) -> int:
    """The researcher's 4-GPU job of 30 minutes runs and succeeds: one recorded run."""
    job_id = submit(me, gpus=4, queue="llm-finetune", sim_duration_minutes=30)
    cycle(admin)
    advance(admin, 31 * 60)
    cycle(admin)
    return job_id


def day_of(now):
    start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    return start, start + timedelta(days=3)


def test_a_finished_run_is_recorded_once_and_counted_in_its_line_queue_and_owner(api, demo):
    admin, me = api("admin"), api("researcher")
    job_id = finish_one_run(admin, me)
    cycle(admin)  # a later cycle records nothing more
    assert job(me, job_id)["state"] == "succeeded"
    run = JobRun.objects.get()
    assert (run.job_id, run.gpus, run.outcome, run.owner.username) == (
        job_id,
        4,
        "succeeded",
        "researcher",
    )
    assert run.queue.name == "llm-finetune" and run.gpu_model
    minutes = (run.ended_at - run.started_at).total_seconds() / 60
    assert 30 <= minutes <= 31, minutes

    now = clock.now()
    usage = build_usage_report(demo["researcher"], *day_of(now), now)
    hours = 4 * minutes / 60
    assert usage.total.gpu_hours == pytest.approx(hours)
    assert [(r.name, round(r.gpu_hours, 6), r.runs) for r in usage.lines] == [
        ("Large language models", round(hours, 6), 1)
    ]
    assert [r.name for r in usage.queues] == ["llm-finetune"]
    assert [(r.name, r.runs, r.running) for r in usage.people] == [("researcher", 1, 0)]
    # the cluster's first run began inside the period: its GPU-hours count from then
    assert usage.counted_from == run.started_at and usage.recorded_since is None
    assert usage.share(usage.total) == pytest.approx(
        hours / (32 * (now - run.started_at).total_seconds() / 3600)
    )


def test_runs_ended_before_any_was_recorded_are_said_missing_and_shares_span_the_period(api, demo):
    """A job that ran and ended before the portal recorded runs (the upgrade) has no
    record: the report says from when runs are recorded and counts the whole period."""
    admin, me = api("admin"), api("researcher")
    finish_one_run(admin, me)
    JobRun.objects.all().delete()  # as if it ended before the upgrade
    advance(admin, 600)
    finish_one_run(admin, me)
    run = JobRun.objects.get()
    now = clock.now()
    start, end = day_of(now)
    usage = build_usage_report(demo["researcher"], start, end, now)
    assert usage.recorded_since == run.ended_at and usage.counted_from == start
    assert usage.capacity_gpu_hours == pytest.approx(32 * (now - start).total_seconds() / 3600)
    client = Client()
    client.force_login(demo["researcher"])
    status, text = page_text(client, "/usage/", month=run.ended_at.strftime("%Y-%m"))
    assert status == 200 and "Runs are recorded since" in text and "first run began" not in text


def test_the_clusters_gpu_hours_count_a_node_from_when_it_joined(api, demo):
    """A cluster that grew inside the period: a node the loop discovered an hour ago adds
    its GPUs for that hour, not for the whole period; the nodes it was set up with count
    for all of it; one that joined after the period's end, not at all."""
    from scheduling.models import Node

    admin, me = api("admin"), api("researcher")
    finish_one_run(admin, me)
    JobRun.objects.all().delete()  # the whole period counts (no first run inside it)
    advance(admin, 600)
    finish_one_run(admin, me)
    now = clock.now()
    start, end = day_of(now)
    hours = (now - start).total_seconds() / 3600
    before = build_usage_report(demo["admin"], start, end, now)
    assert before.capacity_gpu_hours == pytest.approx(32 * hours), "4 nodes of 8 from the start"
    grown = dict(rack="r9", block="b9", gpu_model="H100", gpu_memory_gb=80, gpus_total=8)
    Node.objects.create(name="new-1", joined_at=now - timedelta(hours=1), **grown)
    Node.objects.create(name="new-2", joined_at=now + timedelta(hours=1), **grown)
    after = build_usage_report(demo["admin"], start, end, now)
    assert after.capacity_gpu_hours == pytest.approx(32 * hours + 8 * 1)
    assert after.share(after.total) == pytest.approx(after.total.gpu_hours / (32 * hours + 8))
    # a period that began after it joined counts it all through
    late = build_usage_report(demo["admin"], now - timedelta(minutes=30), end, now)
    assert late.capacity_gpu_hours == pytest.approx(40 * 0.5)


def test_a_run_still_going_counts_up_to_now_and_only_inside_the_period(api, demo):
    admin, me = api("admin"), api("researcher")
    submit(me, gpus=8, queue="llm-core", sim_duration_minutes=600)
    cycle(admin)
    started = Job.objects.get().started_at
    advance(admin, 2 * 3600)
    cycle(admin)
    now = clock.now()
    assert not JobRun.objects.exists()
    usage = build_usage_report(demo["admin"], *day_of(now), now)
    elapsed = (now - started).total_seconds() / 3600
    assert usage.total.gpu_hours == pytest.approx(8 * elapsed)
    assert (usage.total.runs, usage.total.running) == (0, 1)
    # a period that starts an hour ago counts the last hour only
    later = build_usage_report(
        demo["admin"], now - timedelta(hours=1), now + timedelta(days=1), now
    )
    assert later.total.gpu_hours == pytest.approx(8.0)
    # a period that ended before the run started counts nothing
    before = build_usage_report(demo["admin"], started - timedelta(days=1), started, now)
    assert before.total.gpu_hours == 0 and before.lines == []


def test_a_drained_run_is_stopped_and_a_cancelled_one_cancelled(api, demo):
    admin, oncall, me = api("admin"), api("oncall"), api("researcher")
    moved = submit(me, name="moved", gpus=8, queue="llm-experiment", sim_duration_minutes=600)
    gone = submit(me, name="gone", gpus=8, queue="llm-experiment", sim_duration_minutes=600)
    cycle(admin)
    advance(admin, 600)
    node = job(me, moved)["placement"][0]["node"]
    assert (
        oncall.post(
            f"/api/v1/nodes/{node}/drain/", {"reason": "firmware"}, format="json"
        ).status_code
        == 200
    )
    assert me.post(f"/api/v1/jobs/{gone}/cancel/").status_code == 200
    for _ in range(6):
        cycle(admin)
        advance(admin, 120)
    outcomes = dict(JobRun.objects.values_list("job_id", "outcome"))
    assert outcomes[gone] == "cancelled"
    assert outcomes[moved] == "stopped", job(me, moved)["events"]
    assert JobRun.objects.filter(job_id=moved).count() == 1
    now = clock.now()
    usage = build_usage_report(demo["researcher"], *day_of(now), now)
    assert usage.total.stopped_gpu_hours > 0 and usage.total.runs == 2


def test_people_outside_the_line_see_none_of_its_usage(api, demo):
    admin, me = api("admin"), api("researcher")
    finish_one_run(admin, me)
    now = clock.now()
    period = day_of(now)
    assert build_usage_report(demo["researcher2"], *period, now).total.gpu_hours == 0
    for who in ("lead", "oncall", "admin", "researcher"):
        assert build_usage_report(demo[who], *period, now).total.gpu_hours > 0, who


def page_text(client, url: str, **query) -> tuple[int, str]:
    response = client.get(url, query)
    text = re.sub(r"<[^>]+>", " ", response.content.decode())
    return response.status_code, " ".join(html.unescape(text).split())


def test_the_page_shows_the_months_hours_per_line_queue_and_person(api, demo):
    admin, me = api("admin"), api("researcher")
    finish_one_run(admin, me)
    run = JobRun.objects.get()
    hours = 4 * (run.ended_at - run.started_at).total_seconds() / 3600
    client = Client()
    client.force_login(demo["researcher"])
    status, text = page_text(client, "/usage/", month=run.ended_at.strftime("%Y-%m"))
    assert status == 200, text
    assert f"GPU usage, {run.ended_at:%B %Y} (UTC month)" in text
    assert f"{hours:,.1f} GPU-hours" in text and "1 run ended, 0 still going" in text
    assert "when its first run began" in text and "Runs are recorded since" not in text
    for name in ("Large language models", "llm-finetune", "researcher"):
        assert f"{name} {hours:,.1f} " in text, name
    # another line's member sees the month, without this line's hours
    client.force_login(demo["researcher2"])
    status, text = page_text(client, "/usage/", month=run.ended_at.strftime("%Y-%m"))
    assert status == 200 and "0.0 GPU-hours" in text and "llm-finetune" not in text


@pytest.mark.parametrize(
    "query",
    [
        {"month": "2026-13"},
        {"month": "26-11"},
        {"month": "２０２６-１１"},
        {"month": "2026-11\x00"},
        {"week": "1"},
    ],
)
def test_a_bad_month_or_parameter_is_a_400_naming_it(demo, query):
    client = Client()
    client.force_login(demo["researcher"])
    status, text = page_text(client, "/usage/", **query)
    assert status == 400, text
    assert "YYYY-MM" in text or "week" in text or "NUL" in text or "control" in text, text


def test_anonymous_visitors_are_sent_to_sign_in():
    response = Client().get("/usage/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_api_and_the_csv_give_the_pages_numbers(api, demo):
    admin, me = api("admin"), api("researcher")
    finish_one_run(admin, me)
    run = JobRun.objects.get()
    month = run.ended_at.strftime("%Y-%m")
    hours = round(4 * (run.ended_at - run.started_at).total_seconds() / 3600, 3)
    response = me.get("/api/v1/usage-report/", {"month": month})
    assert response.status_code == 200, response.data
    data = response.json()
    assert data["month"] == month and data["start"].startswith(f"{month}-01T00:00:00")
    assert data["total"]["gpu_hours"] == hours and data["total"]["runs_ended"] == 1
    assert [(r["name"], r["gpu_hours"]) for r in data["people"]] == [("researcher", hours)]
    assert [r["name"] for r in data["lines"]] == ["Large language models"]
    response = me.get("/api/v1/usage-report.csv", {"month": month, "by": "queue"})
    assert response.status_code == 200
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert lines[0] == (
        "name,gpu_hours,share,quota_gpu_hours,runs_ended,running,failed_gpu_hours,stopped_gpu_hours"
    )
    assert lines[1].startswith(f"llm-finetune,{hours},") and len(lines) == 2


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("/api/v1/usage-report/", {"month": "2026-1"}, "month"),
        ("/api/v1/usage-report/", {"month": "2026-00"}, "month"),
        ("/api/v1/usage-report/", {"month": ""}, "month"),
        ("/api/v1/usage-report/", {"by": "line"}, "by"),
        ("/api/v1/usage-report.csv", {"by": "team"}, "by"),
        ("/api/v1/usage-report.csv", {"month": "2026-11", "x": "1"}, "x"),
    ],
)
def test_the_api_refuses_a_bad_query_in_its_envelope(api, path, query, field):
    response = api("researcher").get(path, query)
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()


def test_a_line_and_its_queues_are_read_against_the_quota_they_held(api, demo):
    """llm's quota is 1,000 GPUs (``make_quotas_roomy``) the whole period: its row is its
    GPU-hours against 1,000 times the hours counted (from the cluster's first run); its
    queues have no quota of their own."""
    admin, me = api("admin"), api("researcher")
    finish_one_run(admin, me)
    now = clock.now()
    start, end = day_of(now)
    usage = build_usage_report(demo["researcher"], start, end, now)
    (line,) = usage.lines
    counted = (now - usage.counted_from).total_seconds() / 3600
    assert usage.counted_from == JobRun.objects.get().started_at > start
    assert line.quota_gpu_hours == pytest.approx(1000 * counted)
    assert line.of_quota_percent == pytest.approx(line.gpu_hours / line.quota_gpu_hours * 100)
    assert [q.quota_gpu_hours for q in usage.queues] == [None]
    data = me.get("/api/v1/usage-report/", {"month": now.strftime("%Y-%m")}).json()
    assert data["lines"][0]["quota_gpu_hours"] > 0 and data["queues"][0]["quota_gpu_hours"] is None
    assert data["people"][0]["quota_gpu_hours"] is None
    assert data["counted_from"] == usage.counted_from.isoformat().replace("+00:00", "Z")


def test_a_month_not_begun_says_so_and_the_current_one_has_no_next(demo):
    client = Client()
    client.force_login(demo["researcher"])
    now = clock.now()
    ahead = f"{now.year + 1}-{now.month:02d}"
    status, text = page_text(client, "/usage/", month=ahead)
    assert status == 200 and "This month has not begun: nothing to count yet." in text
    status, text = page_text(client, "/usage/")
    assert status == 200 and f"GPU usage, {now:%B %Y}" in text
    assert "previous month" in text and "next month" not in text and "so far (to " in text


def test_the_line_page_says_who_uses_the_line_now_and_it_adds_up(api, demo):
    """Per person: GPUs held, running and pending jobs, pending GPUs, most held first; the
    GPUs held add up to the line's use on the same page; other lines' people do not see it."""
    admin, me, lead = api("admin"), api("researcher"), api("lead")
    for i in range(3):
        submit(me, name=f"sweep-{i}", gpus=8)
    submit(lead, name="eval", gpus=4)
    cycle(admin)
    submit(me, name="later", gpus=8)  # waiting: pending, not yet seen by a cycle
    client = Client()
    client.force_login(demo["lead"])
    status, text = page_text(client, "/quotas/lines/llm/")
    assert status == 200 and "Who uses the line now" in text
    held = {
        name: Job.objects.filter(owner__username=name, state="running").count()
        for name in ("researcher", "lead")
    }
    assert held == {"researcher": 3, "lead": 1}
    assert "researcher 24 3 1 8" in text and "lead 4 1 0 0" in text
    assert text.index("researcher 24") < text.index("lead 4")  # most GPUs held first
    used = re.search(r"Line llm [\d,]+ [\d,]+ (\d+) ", text)
    assert used and int(used.group(1)) == 28  # the line's Used: 24 + 4
    client.force_login(demo["researcher2"])
    status, text = page_text(client, "/quotas/lines/llm/")
    assert status == 200 and "Who uses the line now" not in text and "sweep" not in text
