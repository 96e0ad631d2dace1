"""The metrics rollup: samples, eviction ratio and windowed alerts."""

from datetime import timedelta

import pytest

from monitoring import metrics
from monitoring.models import Alert, MetricSample
from monitoring.rollup import get_eviction_figures, get_eviction_readings, rollup
from quotas.models import BusinessLine, Queue
from scheduling.clock import cluster_now
from scheduling.models import CONSOLIDATION, Eviction, Job
from tests.drills import advance, cycle, make_quotas_roomy, submit
from tests.monitoring.scenarios import an_hour_of_experiments

pytestmark = pytest.mark.django_db


def test_pure_arithmetic():
    assert metrics.utilization(50, 100) == 0.5 and metrics.utilization(5, 0) == 0.0
    assert metrics.fragmentation([8, 0, 3, 7, 1]) == 11  # full and empty nodes don't count
    # 4 GPUs for 100 s then 8 GPUs for 50 s
    assert metrics.delivered_gpu_seconds([(0, 4), (100, 8)], 150) == 4 * 100 + 8 * 50
    assert metrics.eviction_ratio(30, 120) == 0.25 and metrics.eviction_ratio(5, 0) == 0.0


def test_a_sample_counts_gpus_and_pending_reasons(api):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    admin, me = api("admin"), api("researcher")
    for i in range(5):
        submit(me, name=f"s{i}", queue="llm-core", gpus=8)
    cycle(admin)
    cycle(admin)
    sample = rollup()
    assert sample.gpus_total == 32 and sample.gpus_allocated == 32 and sample.utilization == 1.0
    assert sample.pending_jobs == 1 and sum(sample.pending_by_reason.values()) == 1
    assert sample.per_line["llm"]["used"] == 32
    assert MetricSample.objects.count() == 1


def test_evictions_raise_the_ratio_and_an_alert(api, monkeypatch):
    monkeypatch.setattr("monitoring.metrics.EVICTION_ALERT_RATIO", 0.10)
    make_quotas_roomy()
    admin, me, lead = an_hour_of_experiments(api)
    for i in range(3):  # three urgent waves, each evicting an experiment
        submit(lead, name=f"u{i}", queue="llm-urgent", gpus=8, sim_duration_minutes=10)
        cycle(admin)
        advance(admin, 120)
        cycle(admin)
        advance(admin, 900)
        cycle(admin)
    assert Eviction.objects.count() >= 3
    rollup()
    experiment = Queue.objects.get(name="llm-experiment")
    ratio = get_eviction_figures().ratio(experiment.pk)
    assert ratio > 0.10
    # what the loop reads (the swap's eviction budget): the ratio's two sides
    reading = get_eviction_readings()[experiment.pk]
    rows = Eviction.objects.filter(queue=experiment).exclude(reason=CONSOLIDATION)
    evicted = sum(rows.values_list("gpu_seconds", flat=True))
    assert reading.ratio == ratio and reading.evicted_gpu_s == pytest.approx(evicted)
    assert reading.evicted_gpu_s / reading.delivered_gpu_s == pytest.approx(ratio, abs=1e-4)
    alert = Alert.objects.get(kind="eviction_ratio", subject="llm-experiment")
    assert "guarantee" in alert.message
    queues = {q["name"]: q for q in api("researcher").get("/api/v1/queues/").data["results"]}
    assert queues["llm-experiment"]["eviction_ratio"] == ratio


def test_long_waits_and_full_quotas_raise_alerts(api):
    BusinessLine.objects.filter(name="llm").update(quota_gpus=8)
    admin, me = api("admin"), api("researcher")
    submit(me, name="fits", queue="llm-core", gpus=8)
    submit(me, name="stuck", queue="llm-core", gpus=8)
    cycle(admin)
    Job.objects.filter(state="pending").update(submitted_at=cluster_now() - timedelta(hours=7))
    rollup()
    waiting = Alert.objects.get(kind="pending_too_long", subject="llm-core")
    # One job is "its pending reason", not "their pending reasons" (page walk, the console)
    assert waiting.message == (
        "1 job in llm-core has waited more than 6 h; check its pending reason."
    )
    near = Alert.objects.get(kind="quota_near_limit", subject="llm")
    assert near.message == "line llm holds 8 of its 8 GPU quota (100%)."
    rollup()
    assert Alert.objects.filter(kind="quota_near_limit").get().count == 2, "deduplicated"


def test_a_line_past_its_quota_is_said_to_be_past_it():
    """A line running on borrowed capacity read "holds 3,038 of its 2,750 GPU quota
    (110%)" (page walk, session 41)."""
    from monitoring.rollup import _quota_use

    assert _quota_use("search-rec", 3038, 2750) == (
        "line search-rec holds 3,038 GPUs, 288 more than its 2,750 GPU quota (110%)."
    )
    assert _quota_use("llm", 2700, 2750) == "line llm holds 2,700 of its 2,750 GPU quota (98%)."


def test_condition_alerts_resolve_themselves_once_the_condition_clears(api):
    BusinessLine.objects.filter(name="llm").update(quota_gpus=8)
    admin, me = api("admin"), api("researcher")
    submit(me, name="fits", queue="llm-core", gpus=8)
    stuck = submit(me, name="stuck", queue="llm-core", gpus=8)
    cycle(admin)
    Job.objects.filter(state="pending").update(submitted_at=cluster_now() - timedelta(hours=7))
    rollup()
    waiting = Alert.objects.get(kind="pending_too_long", subject="llm-core")
    quota = Alert.objects.get(kind="quota_near_limit", subject="llm")
    api("oncall").post(f"/api/v1/alerts/{waiting.pk}/ack/")

    assert me.post(f"/api/v1/jobs/{stuck}/cancel/").status_code == 200
    rollup()
    waiting.refresh_from_db()
    quota.refresh_from_db()
    assert waiting.status == "resolved" and waiting.resolved_by is None
    assert waiting.message.endswith("[resolved: the condition cleared]")
    assert quota.status == "open", "the line still holds its whole quota"
    visible = api("oncall").get("/api/v1/alerts/?status=open").data["results"]
    assert [a["kind"] for a in visible] == ["quota_near_limit"]


def test_a_residual_process_alert_closes_when_its_node_stays_clean(api, monkeypatch):
    from django.utils import timezone

    from monitoring.services import raise_alert

    once = raise_alert("residual_process", "warning", "r000-n00", "1 GPU held; killed")
    again = raise_alert("residual_process", "warning", "r000-n01", "1 GPU held; killed")
    long_ago = timezone.now() - timedelta(minutes=31)
    Alert.objects.filter(pk__in=[once.pk, again.pk]).update(updated_at=long_ago)
    raise_alert("residual_process", "warning", "r000-n01", "2 GPUs held; killed")  # recurs
    rollup()
    once.refresh_from_db()
    again.refresh_from_db()
    assert once.status == "resolved" and "not seen again for 30 min" in once.message
    assert again.status == "open" and again.count == 2, "a recurring one stays, counted"
    reopened = raise_alert("residual_process", "warning", "r000-n00", "1 GPU held; killed")
    assert reopened.pk != once.pk and reopened.count == 1, "a new one after the close"


def test_a_backend_error_alert_closes_after_ten_quiet_minutes(api):
    from django.utils import timezone

    from monitoring.services import raise_alert

    alert = raise_alert("backend_error", "warning", "slurm", "1 call(s) failed")
    rollup()
    alert.refresh_from_db()
    assert alert.status == "open"
    Alert.objects.filter(pk=alert.pk).update(updated_at=timezone.now() - timedelta(minutes=11))
    rollup()
    alert.refresh_from_db()
    assert alert.status == "resolved" and "no failed backend call for 10 min" in alert.message


def test_quiet_periods_are_cluster_time(api):
    """Alert stamps are cluster time, so the quiet period is 30 cluster minutes whatever
    the simulator's speed (not 30 cluster minutes turned into 30 wall seconds)."""
    from monitoring.services import raise_alert
    from scheduling.models import SimulatorState

    cycle(api("admin"))  # the simulator's state exists
    SimulatorState.objects.update(speed=60)  # the demo: 30 cluster minutes in 30 s
    alert = raise_alert("residual_process", "warning", "r000-n02", "1 GPU held; killed")
    stamped = alert.updated_at
    Alert.objects.filter(pk=alert.pk).update(updated_at=stamped - timedelta(minutes=29))
    rollup()
    alert.refresh_from_db()
    assert alert.status == "open", "29 quiet cluster minutes are not 30"
    Alert.objects.filter(pk=alert.pk).update(updated_at=stamped - timedelta(minutes=31))
    rollup()
    alert.refresh_from_db()
    assert alert.status == "resolved"


def test_a_job_waiting_for_others_has_waited_only_since_the_last_of_them_ended(api):
    """``pending_too_long`` counts a job with ``after`` from when its last dependency ended
    (it queued from then), not from its submission: a 7-hour pretraining did not keep an
    evaluation waiting 7 hours in the queue."""
    make_quotas_roomy()
    admin, me = api("admin"), api("researcher")
    blockers = [submit(me, name=f"full-{i}", queue="llm-core", gpus=8) for i in range(3)]
    first = submit(me, name="pretrain", queue="llm-core", gpus=8, sim_duration_minutes=30)
    cycle(admin)
    then = submit(me, name="eval", queue="llm-core", gpus=16, after=[first])
    seven_hours_ago = cluster_now() - timedelta(hours=7)
    Job.objects.filter(pk=then).update(submitted_at=seven_hours_ago)
    rollup()
    assert not Alert.objects.filter(kind="pending_too_long").exists(), "it waits for pretrain"
    advance(admin, 31 * 60)
    cycle(admin)  # pretrain succeeded: eval queues behind the three blockers, from now
    assert Job.objects.get(pk=then).state == "pending"
    rollup()
    assert not Alert.objects.filter(kind="pending_too_long").exists(), "released just now"
    Job.objects.filter(pk=first).update(finished_at=seven_hours_ago)
    rollup()
    assert Alert.objects.get(kind="pending_too_long", subject="llm-core")
    assert len(blockers) == 3


def test_a_job_waiting_for_an_array_has_waited_only_since_its_last_task_ended(api):
    """The same for ``after_arrays``: a job after a whole array queued from when the
    array's last task ended."""
    make_quotas_roomy()
    admin, me = api("admin"), api("researcher")
    [submit(me, name=f"full-{i}", queue="llm-core", gpus=8) for i in range(3)]
    body = {"name": "sweep", "queue": "llm-core", "gpus": 4, "sim_duration_minutes": 30,
            "array": "0-1"}  # fmt: skip
    made = me.post("/api/v1/arrays/", body, format="json")
    assert made.status_code == 201, made.data
    array_id = made.data["id"]
    cycle(admin)
    then = submit(me, name="eval", queue="llm-core", gpus=16, after_arrays=[array_id])
    seven_hours_ago = cluster_now() - timedelta(hours=7)
    Job.objects.filter(pk=then).update(submitted_at=seven_hours_ago)
    rollup()
    assert not Alert.objects.filter(kind="pending_too_long").exists(), "it waits for the sweep"
    advance(admin, 31 * 60)
    cycle(admin)  # the sweep succeeded: eval queues behind the three blockers, from now
    assert Job.objects.get(pk=then).state == "pending"
    rollup()
    assert not Alert.objects.filter(kind="pending_too_long").exists(), "released just now"
    Job.objects.filter(array_id=array_id).update(finished_at=seven_hours_ago)
    rollup()
    assert Alert.objects.get(kind="pending_too_long", subject="llm-core")
