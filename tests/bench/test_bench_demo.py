"""``manage.py bench_demo`` (#19): the live demo headless on a small cluster, through
PostgreSQL, and the figures it prints agree with what the run wrote."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command, get_commands
from django.db import connection

from bench.demo import NOT_PLANNED, DemoRun, human, node_kind
from demo.management.commands.seed_demo import DEMO_URGENT_PATIENCE_MINUTES
from monitoring.idle import CAUSES
from monitoring.models import IdleAccount, MetricSample
from portal.devstack import DEMO_CYCLE_SECONDS
from quotas.models import Queue, QuotaPolicy
from scheduling.engine.types import Code
from scheduling.models import Eviction, Job, Node, SchedulingCycle, SimulatorState

pytestmark = pytest.mark.django_db(transaction=True)


def bench(*args: str) -> dict:
    out = io.StringIO()
    call_command("bench_demo", *args, "--json", "--quiet", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def test_it_belongs_to_the_bench_app():
    assert get_commands()["bench_demo"] == "bench"


def test_a_small_demo_runs_here_and_reports_what_it_wrote():
    got = bench("--here", "--nodes", "8", "--nodes-per-rack", "4", "--cluster-hours", "3",
                "--warmup-hours", "1", "--step-seconds", "300")  # fmt: skip
    run = got["run"]
    assert (run["gpus"], run["steps"], run["measured_hours"]) == (64, 36, 2.0)
    # the clock moved exactly the run's length, in steps, from the fixed start
    state = SimulatorState.objects.get()
    assert state.speed == 0.0
    assert state.virtual_now == pytest.approx(1767571200.0 + 3 * 3600)
    assert SchedulingCycle.objects.filter(kind="cycle").count() == 1 + 36 + 1
    # one clock: nothing seeded is stamped in the cluster's future (a node page read
    # "Last change ... in 331 d" on a kept run: seeded with the wall clock)
    cluster_now = datetime.fromtimestamp(state.virtual_now, UTC)
    assert Node.objects.filter(updated_at__gt=cluster_now).count() == 0
    assert SchedulingCycle.objects.filter(kind="sweep").count() == 5  # every 30 minutes
    assert MetricSample.objects.filter(seeded=False).count() == 1 + 36
    # the workload offered and the cluster ran
    jobs = got["jobs"]
    assert jobs["submitted"] > 0 and jobs["finished"] > 0 and jobs["offered_load"] > 1
    assert jobs["waiting_end"] == Job.objects.filter(state=Job.State.PENDING).count()
    # utilization: both readings are shares of healthy GPUs
    assert 0 < got["utilization"]["portal_pct"] <= 100
    assert 0 < got["utilization"]["simulated_pct"] <= got["utilization"]["portal_pct"] + 1e-9
    assert 0 <= got["utilization"]["simulated_inference_pct"] < 100
    # inference is part of the use (the portal's one definition), not beside it
    assert got["utilization"]["simulated_inference_pct"] <= got["utilization"]["simulated_pct"]
    frag = got["fragmented_free_gpus"]
    assert 0 <= frag["mean_pct_of_cluster"] <= frag["p95_pct_of_cluster"] <= 100
    shared, simulated = (frag["simulated_on_shared_nodes_pct_of_cluster"],
                         frag["simulated_mean_pct_of_cluster"])  # fmt: skip
    assert 0 <= shared <= simulated <= 100
    # the split by node kind names real kinds and adds up to the whole (to rounding)
    by_kind = frag["simulated_by_node_kind_pct_of_cluster"]
    kinds = {node_kind(n) for n in Node.objects.all()}
    assert set(by_kind) <= kinds
    assert sum(by_kind.values()) == pytest.approx(simulated, abs=0.01 * max(1, len(by_kind)))
    # one eviction figure per queue, and the idle causes the portal counted
    assert set(got["eviction"]["queues"]) == set(Queue.objects.values_list("name", flat=True))
    warm = got["eviction"]["evictions"]
    assert warm <= Eviction.objects.count()
    idle = got["idle_while_waiting"]
    assert set(idle["gpu_hours"]) == set(CAUSES)
    counted = sum(IdleAccount.objects.get().totals.values())
    assert 0 < sum(idle["gpu_hours"].values()) * 3600 <= counted + 3600 * 0.05 * len(CAUSES)
    assert got["cycles"]["count"] == 24 + 1, "the cycles after the warm-up hour, and the last"
    # the estimated starts, settled for the jobs submitted after the warm-up that started
    shown = got["start_estimates"]
    warm_at = datetime.fromtimestamp(1767571200.0 + 3600, UTC)
    started_since_warm = Job.objects.filter(submitted_at__gte=warm_at, started_at__isnull=False)
    assert 0 < shown["jobs"] <= started_since_warm.count()
    assert 0 <= shown["with_estimate_share"] <= 1
    # by what the jobs waited for: API codes (or none yet), their shares of the whole
    codes = {v for k, v in vars(Code).items() if k.isupper()}
    assert shown["by_code"] and set(shown["by_code"]) <= codes | {NOT_PLANNED}
    assert sum(c["time_share"] for c in shown["by_code"].values()) == pytest.approx(1, abs=0.01)


def test_here_refuses_a_database_with_a_cluster(demo):
    with pytest.raises(CommandError, match="empty database"):
        bench("--here", "--cluster-hours", "1", "--warmup-hours", "0")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--cluster-hours", "0"), "--cluster-hours"),
        (("--step-seconds", "5"), "--step-seconds"),
        (("--cluster-hours", "2", "--warmup-hours", "2"), "--warmup-hours"),
        (("--start", "yesterday"), "--start"),
        (("--quota-policy", "borrow_cap"), "NAME=VALUE with NAME one of"),
        (("--quota-policy", "singleton=false"), "NAME=VALUE with NAME one of"),
        (("--quota-policy", "borrow_cap=maybe"), "borrow_cap: .*True or False"),
        (("--quota-policy", "preempt_after_minutes=-5"), "preempt_after_minutes: "),
        (("--quota-policy", "eviction_target=2"), "--quota-policy: .*quota_policy_target"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(args, message):
    with pytest.raises(CommandError, match=message):
        bench(*args)
    assert not Job.objects.exists()


def test_by_default_it_runs_on_a_scratch_database_and_drops_it():
    name = connection.settings_dict["NAME"]
    got = bench("--nodes", "4", "--nodes-per-rack", "4", "--cluster-hours", "0.5",
                "--warmup-hours", "0")  # fmt: skip
    assert got["run"]["gpus"] == 32 and got["jobs"]["submitted"] > 0
    assert connection.settings_dict["NAME"] == name, "back on this database"
    assert not Job.objects.exists(), "nothing was written here"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", [f"{name}_bench_demo"]
        )
        assert cursor.fetchone()[0] == 0, "dropped"


def test_a_quota_policy_against_the_model_s_constraints_changes_nothing_here():
    with pytest.raises(CommandError, match="--quota-policy: .*quota_policy_target"):
        bench("--here", "--nodes", "4", "--cluster-hours", "1", "--warmup-hours", "0",
              "--quota-policy", "eviction_target=1.5")  # fmt: skip
    assert not Job.objects.exists() and not Queue.objects.exists()
    assert not QuotaPolicy.objects.exists()


def test_the_quota_policy_of_the_run_is_the_one_asked_for():
    got = bench("--here", "--nodes", "4", "--nodes-per-rack", "4", "--cluster-hours", "0.5",
                "--warmup-hours", "0", "--quota-policy", "borrow_cap=false",
                "--quota-policy", "preempt_after_minutes=180")  # fmt: skip
    assert got["run"]["quota_policy"] == {"borrow_cap": False, "preempt_after_minutes": 180}
    policy = QuotaPolicy.objects.get()
    assert (policy.borrow_cap, policy.preempt_after_minutes) == (False, 180)
    # applied over the demo's seed: the rest as the seed left it
    assert policy.urgent_preempt_after_minutes == DEMO_URGENT_PATIENCE_MINUTES
    assert policy.predictive_patience is False
    assert "quota policy: borrow_cap=False, preempt_after_minutes=180" in human(got)


def test_by_default_a_step_is_make_runs_cycle_period_at_60x():
    assert DemoRun().step_s == float(DEMO_CYCLE_SECONDS) * 60


def test_an_alert_open_in_the_measured_hours_counts_even_if_raised_in_the_warm_up():
    """``eviction_alerts``: raised since the warm-up ended, or raised before and still open
    then (session 22: one raised at 01:52 and resolved at 02:32 was missed)."""
    from datetime import UTC, datetime, timedelta

    from bench.demo import eviction_alerts
    from monitoring.models import Alert

    since = datetime(2026, 1, 5, 2, tzinfo=UTC)
    rows = {
        "resolved-in-warm-up": (since - timedelta(hours=1), since - timedelta(minutes=5)),
        "open-across-the-end-of-warm-up": (since - timedelta(minutes=8), since + timedelta(minutes=40)),
        "never-resolved": (since - timedelta(hours=1), None),
        "raised-after": (since + timedelta(hours=3), since + timedelta(hours=4)),
    }  # fmt: skip
    for subject, (created, resolved) in rows.items():
        alert = Alert.objects.create(kind=Alert.Kind.EVICTION_RATIO, severity="warning",
                                     subject=subject, message="m", dedupe_key=subject)  # fmt: skip
        Alert.objects.filter(pk=alert.pk).update(created_at=created, resolved_at=resolved)
    Alert.objects.create(kind=Alert.Kind.PENDING_TOO_LONG, severity="warning", subject="q",
                         message="m", dedupe_key="q")  # fmt: skip
    assert eviction_alerts(since) == [
        "never-resolved", "open-across-the-end-of-warm-up", "raised-after"]  # fmt: skip


def test_moved_restarts_are_timed_from_the_stop_and_checked_against_the_kept_room(demo):
    """``moved_restarts``: each move stopped after ``since`` is timed to the job's next
    start, which counts as in its room when it names the node the ``moving`` event kept."""
    from datetime import UTC, datetime, timedelta

    from django.contrib.auth import get_user_model

    from bench.demo import moved_restarts
    from scheduling.cycle.stops import moved_to
    from scheduling.models import JobEvent

    since = datetime(2026, 1, 5, 2, tzinfo=UTC)
    owner, queue = get_user_model().objects.get(username="researcher"), Queue.objects.first()

    def make_job() -> Job:
        return Job.objects.create(name="moved", owner=owner, queue=queue, tier=queue.tier, gpus=1)

    def timeline(job, *lines):
        for minutes, kind, message in lines:
            e = JobEvent.objects.create(job=job, kind=kind, message=message)
            JobEvent.objects.filter(pk=e.pk).update(at=since + timedelta(minutes=minutes))

    def kept(node: str) -> str:  # the words of ``cycle.stops.migrate``
        return (
            f"asked to checkpoint and move ...: it restarts from its checkpoint on {moved_to(node)}"
        )

    timeline(make_job(), (1, "moving", kept("n07")),
             (5, "moved", "moved ..."), (5, "started", "started on n07[3]"))  # fmt: skip
    timeline(make_job(), (10, "moving", kept("n07")),
             (14, "moved", "moved ..."), (44, "started", "started on n1[0], n17[0]"))  # fmt: skip
    # not restarted yet, then one moved before ``since``
    timeline(make_job(), (20, "moving", kept("n3")),
             (24, "moved", "moved ..."))  # fmt: skip
    timeline(make_job(), (-30, "moving", kept("n3")),
             (-25, "moved", "moved ..."), (-20, "started", "started on n3[1]"))  # fmt: skip
    got = moved_restarts(since)
    assert got == {"moves": 3, "restarted": 2, "avg_restart_s": 900.0, "p90_restart_s": 1800.0,
                   "max_restart_s": 1800.0, "in_kept_room_pct": 50.0}  # fmt: skip
