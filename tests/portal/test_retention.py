"""Retention (#17): cycles, resolved alerts and audit records past their period are pruned
(portal/retention.py) by a beat task and by ``manage.py prune``; ``--dry-run`` says what it
would delete and deletes nothing; open alerts, jobs and their events are kept."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from core import clock
from core.models import AuditRecord
from monitoring.models import Alert
from portal import retention
from portal.celery import beat_schedule
from portal.tasks import prune_history
from scheduling.models import Job, JobEvent, SchedulingCycle

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def cycle(age: timedelta, kind: str = "cycle") -> SchedulingCycle:
    """A cycle (or sweep) row that started ``age`` ago on the wall clock (its own clock)."""
    at = timezone.now() - age
    return SchedulingCycle.objects.create(kind=kind, started_at=at, cluster_time=at, duration_ms=1)


def alert(status: str, resolved_age: timedelta | None, key: str) -> Alert:
    """An alert; resolved ``resolved_age`` ago in cluster time when given."""
    row = Alert.objects.create(kind="node_unhealthy", severity="warning", status=status,
                               subject=key, message="m", dedupe_key=key)  # fmt: skip
    if resolved_age is not None:
        Alert.objects.filter(pk=row.pk).update(resolved_at=clock.now() - resolved_age)
    return row


def audit_record(age: timedelta, action: str = "node.cordon") -> AuditRecord:
    row = AuditRecord.objects.create(actor_name="admin", action=action,
                                     target_type="node", target_id="n1")  # fmt: skip
    AuditRecord.objects.filter(pk=row.pk).update(at=clock.now() - age)  # past auto stamps
    return row


@pytest.fixture
def history(cluster_job):
    """Rows on both sides of every default period, and an old job with its events."""
    rows = {
        "old_cycles": [cycle(15 * DAY), cycle(30 * DAY, kind="sweep"), cycle(400 * DAY)],
        "new_cycles": [cycle(13 * DAY), cycle(timedelta(seconds=5)), cycle(DAY, kind="sweep")],
        "old_resolved": [alert("resolved", 91 * DAY, "a1"), alert("resolved", 500 * DAY, "a2")],
        "new_resolved": [alert("resolved", 89 * DAY, "a3")],
        "old_open": [alert("open", None, "a4"), alert("acknowledged", None, "a5")],
        "old_audit": [audit_record(366 * DAY), audit_record(3 * 365 * DAY)],
        "new_audit": [audit_record(364 * DAY), audit_record(DAY)],
    }
    Alert.objects.filter(pk__in=[a.pk for a in rows["old_open"]]).update(
        created_at=clock.now() - 900 * DAY, updated_at=clock.now() - 900 * DAY
    )
    rows["job"] = cluster_job
    return rows


@pytest.fixture
def cluster_job(demo):
    """A job that finished two years ago, with events just as old: job history is kept."""
    from quotas.models import Queue

    queue = Queue.objects.first()
    long_ago = clock.now() - 730 * DAY
    job = Job.objects.create(name="old", owner=demo["researcher"], queue=queue, tier=queue.tier,
                             gpus=1, gpus_per_node=1, state="succeeded", submitted_at=long_ago,
                             started_at=long_ago, finished_at=long_ago)  # fmt: skip
    JobEvent.objects.create(job=job, at=long_ago, kind="submitted", message="submitted")
    JobEvent.objects.create(job=job, at=long_ago, kind="succeeded", message="done")
    return job


def ids(rows) -> set[int]:
    return {row.pk for row in rows}


def test_prune_deletes_exactly_what_outlived_its_period(history):
    audit_before = set(AuditRecord.objects.values_list("pk", flat=True))
    findings = {f.name: f.count for f in retention.prune()}

    assert findings == {"cycles": 3, "alerts": 2, "audit": 2}
    assert set(SchedulingCycle.objects.values_list("pk", flat=True)) == ids(history["new_cycles"])
    assert set(Alert.objects.values_list("pk", flat=True)) == ids(
        history["new_resolved"] + history["old_open"]
    )  # open and acknowledged alerts stay, whatever their age
    kept_audit = set(AuditRecord.objects.values_list("pk", flat=True))
    assert audit_before - kept_audit == ids(history["old_audit"])
    # the job and its events (two years old) are untouched
    job = history["job"]
    assert Job.objects.filter(pk=job.pk).exists()
    assert JobEvent.objects.filter(job=job).count() == 2


def test_a_prune_that_deleted_rows_writes_one_audit_record_with_the_counts(history):
    retention.prune()
    record = AuditRecord.objects.get(action="retention.prune")
    assert record.actor is None and record.actor_name == "system"
    assert record.before == {"cycles": 3, "alerts": 2, "audit": 2}
    assert "older than 14 days" in record.reason and "older than 365 days" in record.reason
    # nothing left to delete: a second prune deletes nothing and records nothing
    assert {f.name: f.count for f in retention.prune()} == {"cycles": 0, "alerts": 0, "audit": 0}
    assert AuditRecord.objects.filter(action="retention.prune").count() == 1


def test_periods_come_from_the_settings_and_zero_keeps_forever(history, settings):
    settings.RETENTION_CYCLE_DAYS = 0
    settings.RETENTION_RESOLVED_ALERT_DAYS = 1000
    settings.RETENTION_AUDIT_DAYS = 2
    findings = {f.name: f for f in retention.prune()}
    assert findings["cycles"].count == 0 and findings["cycles"].cutoff is None
    assert findings["alerts"].count == 0
    assert findings["audit"].count == 3  # 366 days, 3 years and 364 days; 1 day stays
    assert SchedulingCycle.objects.count() == 6


def test_prune_deletes_in_batches(history):
    for n in range(7):
        cycle(20 * DAY + n * timedelta(minutes=1))
    findings = {f.name: f.count for f in retention.prune(batch_size=2)}
    assert findings["cycles"] == 10
    assert SchedulingCycle.objects.count() == 3


def test_dry_run_says_what_it_would_delete_and_deletes_nothing(history):
    counts = (SchedulingCycle.objects.count(), Alert.objects.count(), AuditRecord.objects.count())
    out = StringIO()
    call_command("prune", "--dry-run", stdout=out)
    text = out.getvalue()
    assert (
        "scheduling cycles and sweeps older than 14 days" in text and ": 3 would be deleted" in text
    )
    assert "resolved alerts older than 90 days" in text and ": 2 would be deleted" in text
    assert "audit records older than 365 days" in text
    assert "job events: kept as long as their job" in text
    assert "dry run: nothing was deleted" in text
    assert counts == (
        SchedulingCycle.objects.count(),
        Alert.objects.count(),
        AuditRecord.objects.count(),
    )


def test_the_command_prunes_and_says_what_it_deleted(history):
    out = StringIO()
    call_command("prune", stdout=out)
    assert ": 3 deleted" in out.getvalue() and ": 2 deleted" in out.getvalue()
    assert SchedulingCycle.objects.count() == 3


def test_a_bad_batch_size_is_refused(history):
    with pytest.raises(SystemExit) as stop:
        call_command("prune", "--batch-size", "0", stdout=StringIO(), stderr=StringIO())
    assert stop.value.code == 2
    assert SchedulingCycle.objects.count() == 6


def test_beat_runs_the_prune_task(history):
    entry = beat_schedule(5.0)["retention"]
    assert entry["task"] == prune_history.name == "portal.tasks.prune_history"
    assert prune_history() == {"cycles": 3, "alerts": 2, "audit": 2}
