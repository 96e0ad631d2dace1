"""One clock (#15): every time the portal records or shows is cluster time.

On the simulator at 60x with its virtual clock a day ahead of the wall clock, every stamp
(job submission and timeline, quota request, decision and contract change, alert, audit
record, node change) falls between two readings of the cluster clock taken around the
action, and is nowhere near the wall clock; timelines never go back; the header says once
that the cluster is simulated and how fast; relative times are measured from cluster now.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.template import Context, Template
from django.test import override_settings

from core import clock
from core.models import AuditRecord
from monitoring.models import Alert
from monitoring.services import raise_alert, resolve_quiet
from quotas.models import QuotaChange, QuotaRequest
from scheduling.clock import cluster_now, reading
from scheduling.cycle.run import run_cycle
from scheduling.models import Job, JobEvent, Node, SimulatorState
from tests.drills import advance, cycle, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db

AHEAD = timedelta(days=1)  # the virtual clock, ahead of the wall clock
SPEED = 60.0


def wall() -> datetime:
    return datetime.now(UTC)


def on_cluster_clock(stamp: datetime | None, before: datetime, after: datetime) -> None:
    """``stamp`` was read from the cluster clock between ``before`` and ``after``."""
    assert stamp is not None
    assert before <= stamp <= after, f"{stamp} not within cluster time [{before}, {after}]"
    assert stamp - wall() > AHEAD - timedelta(hours=1), f"{stamp} is wall time"


@pytest.fixture
def ahead(api) -> None:
    """The demo cluster on the simulator, its clock a day ahead and running at 60x."""
    make_quotas_roomy()
    admin = api("admin")
    cycle(admin)  # the simulator's state exists
    advance(admin, AHEAD.total_seconds())
    SimulatorState.objects.update(speed=SPEED, saved_wall=time.time())
    assert clock.provider() is not None and clock.now() - wall() > AHEAD - timedelta(minutes=5)


def test_the_cluster_clock_is_the_portals_clock(ahead):
    before = cluster_now()
    now = clock.now()
    assert before <= now <= cluster_now(), "core.clock reads scheduling's cluster clock"
    with clock.pinned() as pinned:
        time.sleep(0.05)  # 3 cluster seconds
        assert clock.now() == pinned, "pinned: one reading for the whole block"
    assert clock.now() > pinned


def test_a_jobs_submission_and_timeline_are_cluster_time_and_in_order(api, ahead):
    me, admin = api("researcher"), api("admin")
    before = cluster_now()
    job_id = submit(me, name="timeline", queue="llm-experiment", gpus=8)
    job = Job.objects.get(pk=job_id)
    on_cluster_clock(job.submitted_at, before, cluster_now())

    cycle(admin)
    job.refresh_from_db()
    assert job.state == "running"
    on_cluster_clock(job.started_at, before, cluster_now())

    time.sleep(0.05)
    assert me.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
    cycle(admin)
    cycle(admin)
    job.refresh_from_db()
    assert job.state == "cancelled"
    on_cluster_clock(job.finished_at, before, cluster_now())
    assert job.submitted_at <= job.started_at <= job.finished_at

    events = list(JobEvent.objects.filter(job_id=job_id).order_by("id"))
    assert [e.kind for e in events][:3] == ["submitted", "started", "cancelled"]
    times = [e.at for e in events]
    assert times == sorted(times), f"the timeline goes back: {events}"
    assert events[0].at == job.submitted_at and events[1].at == job.started_at
    assert times[2] <= job.finished_at, "released after it was cancelled"
    for at in times:
        on_cluster_clock(at, before, cluster_now())
    shown = me.get(f"/api/v1/jobs/{job_id}/").data
    assert [e["at"] for e in shown["events"]] == sorted(e["at"] for e in shown["events"])


def test_a_cycle_that_read_the_clock_before_a_submission_never_starts_it_before_it(api, ahead):
    """The race: a cycle reads cluster time, then a job is submitted (a later reading) and
    lands in the cycle's snapshot. Its start is not before its submission."""
    state = SimulatorState.objects.get()
    time.sleep(0.2)  # 12 cluster seconds after the cycle below reads the clock
    job_id = submit(api("researcher"), name="race", queue="llm-experiment", gpus=8)
    record = run_cycle(wall_now=state.saved_wall)  # opened at the save: before the submit
    job = Job.objects.get(pk=job_id)
    assert record.cluster_time < job.submitted_at, "the race happened"
    assert job.state == "running"
    assert job.started_at >= job.submitted_at
    started = JobEvent.objects.get(job_id=job_id, kind="started")
    assert started.at == job.started_at
    times = list(JobEvent.objects.filter(job_id=job_id).order_by("id").values_list("at", flat=True))
    assert times == sorted(times)


def test_quota_request_decision_and_contract_change_are_cluster_time(api, ahead):
    before = cluster_now()
    body = {"business_line": "llm", "quota_gpus": 20, "reason": "Q3 pretraining"}
    created = api("lead").post("/api/v1/quota-requests/", body, format="json")
    assert created.status_code == 201, created.data
    time.sleep(0.05)
    approved = api("admin").post(
        f"/api/v1/quota-requests/{created.data['id']}/approve/", {"note": "ok"}, format="json"
    )
    assert approved.status_code == 200, approved.data
    after = cluster_now()

    req = QuotaRequest.objects.get(pk=created.data["id"])
    change = QuotaChange.objects.get(request=req)
    for stamp in (req.created_at, req.decided_at, req.applied_at, change.changed_at):
        on_cluster_clock(stamp, before, after)
    assert req.created_at < req.decided_at == req.applied_at == change.changed_at
    records = AuditRecord.objects.filter(at__gte=before).order_by("id")
    assert {"quota_request.created", "quota_request.approved", "quota.applied"} <= {
        r.action for r in records
    }
    for r in records:
        on_cluster_clock(r.at, before, after)
    shown = api("lead").get(f"/api/v1/quota-requests/{req.pk}/").data
    assert datetime.fromisoformat(shown["created_at"].replace("Z", "+00:00")) == req.created_at


def test_alert_times_are_cluster_time(api, ahead):
    before = cluster_now()
    alert = raise_alert("backend_error", "warning", "slurm", "1 call(s) failed")
    on_cluster_clock(alert.created_at, before, cluster_now())
    on_cluster_clock(alert.updated_at, before, cluster_now())
    time.sleep(0.05)
    again = raise_alert("backend_error", "warning", "slurm", "2 call(s) failed")
    again.refresh_from_db()
    assert again.pk == alert.pk and again.count == 2 and again.updated_at > alert.updated_at
    on_cluster_clock(again.updated_at, before, cluster_now())

    resolved = api("oncall").post(f"/api/v1/alerts/{alert.pk}/resolve/")
    assert resolved.status_code == 200, resolved.data
    alert.refresh_from_db()
    on_cluster_clock(alert.resolved_at, before, cluster_now())
    assert alert.created_at <= alert.updated_at and alert.created_at <= alert.resolved_at
    audit = AuditRecord.objects.get(action="alert.resolve", target_id=str(alert.pk))
    on_cluster_clock(audit.at, before, cluster_now())


def test_quiet_periods_are_measured_on_the_cluster_clock(ahead):
    quiet = raise_alert("residual_process", "warning", "r000-n01", "1 GPU held; killed")
    loud = raise_alert("residual_process", "warning", "r000-n02", "1 GPU held; killed")
    Alert.objects.filter(pk=quiet.pk).update(updated_at=cluster_now() - timedelta(minutes=11))
    Alert.objects.filter(pk=loud.pk).update(updated_at=cluster_now() - timedelta(minutes=5))
    assert resolve_quiet("residual_process", timedelta(minutes=10), "quiet") == 1
    quiet.refresh_from_db()
    loud.refresh_from_db()
    assert quiet.status == "resolved" and loud.status == "open"
    assert quiet.resolved_at - quiet.updated_at < timedelta(minutes=1)


def test_node_changes_and_their_audit_records_are_cluster_time(api, ahead):
    node = Node.objects.order_by("name").first()
    before = cluster_now()
    response = api("oncall").post(f"/api/v1/nodes/{node.name}/cordon/", {"reason": "fan noise"})
    assert response.status_code == 200, response.data
    node.refresh_from_db()
    on_cluster_clock(node.updated_at, before, cluster_now())
    record = AuditRecord.objects.filter(target_id__in=[node.name, str(node.pk)]).latest("id")
    on_cluster_clock(record.at, before, cluster_now())


def test_the_demo_workload_stamps_its_jobs_with_cluster_time(ahead):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from demo.workload import generate
    from scheduling.models import ClusterSettings

    ClusterSettings.objects.update(workload_enabled=True)
    before = cluster_now()
    with CaptureQueriesContext(connection) as queries:
        created = generate()
    after = cluster_now()
    assert created > 3
    jobs = Job.objects.filter(owner__username="workload")
    for job in jobs:
        on_cluster_clock(job.submitted_at, before, after)
        on_cluster_clock(job.updated_at, before, after)
    clock_reads = [q for q in queries.captured_queries if "simulatorstate" in q["sql"].lower()]
    assert len(clock_reads) <= 2, f"{len(clock_reads)} clock reads for {created} jobs"


# -- what people see --------------------------------------------------------------------


def badge_of(html: str) -> list[str]:
    return re.findall(r'<span id="sim-badge"[^>]*>([^<]*)</span>', html)


def test_every_page_says_once_that_the_cluster_is_simulated_and_how_fast(client, demo, ahead):
    client.force_login(demo["researcher"])
    for path in ("/", "/jobs/", "/queues/"):
        html = client.get(path).content.decode()
        assert badge_of(html) == ["simulated cluster · 60×"], path
    client.logout()
    assert badge_of(client.get("/accounts/login/").content.decode()) == ["simulated cluster · 60×"]


def test_the_header_shows_cluster_time_in_utc_for_the_pages_script(client, demo, ahead):
    client.force_login(demo["researcher"])
    before = cluster_now()
    html = client.get("/").content.decode()
    after = cluster_now()
    now_ms = int(re.search(r'data-now-ms="(\d+)"', html).group(1))
    assert before.timestamp() * 1000 - 1 <= now_ms <= after.timestamp() * 1000 + 1
    assert re.search(r'data-speed="60(\.0)?"', html)
    shown = re.search(r'<time id="cluster-time"[^>]*>([^<]*)</time>', html).group(1)
    assert shown.endswith(" UTC")
    at = datetime.strptime(shown, "%Y-%m-%d %H:%M UTC").replace(tzinfo=UTC)
    assert before - timedelta(minutes=1) <= at <= after, "cluster time, not the wall clock"


def test_the_badge_says_when_the_clock_is_paused_or_stopped(client, demo, ahead):
    client.force_login(demo["researcher"])
    SimulatorState.objects.update(speed=0.0)
    assert badge_of(client.get("/").content.decode()) == ["simulated cluster · clock paused"]
    assert 'data-speed="0' in client.get("/").content.decode()
    # At 60x the simulator catches up an hour at most: 2 wall minutes without a cycle
    # use it up, and cluster time stands still until the loop runs again.
    SimulatorState.objects.update(speed=SPEED, saved_wall=time.time() - 120)
    (badge,) = badge_of(client.get("/").content.decode())
    assert badge == "simulated cluster · 60× · stopped: no cycle for 2 min"
    assert reading().ticking == 0.0


def test_no_badge_on_a_real_backend_and_the_wall_clock_is_cluster_time(client, demo):
    with override_settings(SCHEDULING_BACKEND="slurm"):
        html = client.get("/accounts/login/").content.decode()
        assert badge_of(html) == [] and 'id="cluster-time"' in html
        assert abs(cluster_now() - wall()) < timedelta(seconds=5)
        assert reading().state == "wall" and reading().ticking == 1.0


def test_relative_times_are_measured_from_cluster_now(ahead):
    template = Template("{% load cluster_time %}{% ago when %}|{{ when|utc }}")
    when = cluster_now() - timedelta(minutes=5, seconds=20)
    out = template.render(Context({"when": when, "cluster_clock": reading()}))
    relative, absolute = out.split("|")
    assert relative == "5 min ago", "measured from cluster now, not the wall clock"
    assert absolute == when.strftime("%Y-%m-%d %H:%M UTC")
    no_reading = Template("{% load cluster_time %}{% ago when %}").render(
        Context({"when": cluster_now() + timedelta(hours=2, minutes=30)})
    )
    assert no_reading in ("in 2 h 29 min", "in 2 h 30 min")


def test_the_oncall_console_says_how_long_ago_an_alert_was_raised(client, demo, ahead):
    alert = raise_alert("backend_error", "warning", "slurm", "1 call(s) failed")
    Alert.objects.filter(pk=alert.pk).update(created_at=cluster_now() - timedelta(minutes=42))
    client.force_login(demo["oncall"])
    html = client.get("/oncall/").content.decode()
    assert "(42 min ago)" in html or "(43 min ago)" in html
    assert re.search(r"raised \d{4}-\d\d-\d\d \d\d:\d\d UTC", html)


def test_quota_pages_show_their_times_on_the_cluster_clock_in_utc(api, client, demo, ahead):
    body = {"business_line": "llm", "quota_gpus": 20, "reason": "Q3 pretraining"}
    created = api("lead").post("/api/v1/quota-requests/", body, format="json")
    api("admin").post(f"/api/v1/quota-requests/{created.data['id']}/approve/", {"note": "ok"},
                      format="json")  # fmt: skip
    req = QuotaRequest.objects.get(pk=created.data["id"])
    change = QuotaChange.objects.get(request=req)
    client.force_login(demo["admin"])
    page = client.get(f"/quotas/requests/{req.pk}/").content.decode()
    for stamp in (req.created_at, req.decided_at, req.applied_at, change.changed_at):
        assert stamp.strftime("%Y-%m-%d %H:%M UTC") in page
    line_page = client.get("/quotas/lines/llm/").content.decode()
    assert change.changed_at.strftime("%Y-%m-%d %H:%M UTC") in line_page
