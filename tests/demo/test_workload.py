"""The demo workload and the simulator's clock across a restart.

After a long stop the simulator catches up at most MAX_CATCH_UP_S of virtual time;
cluster time must say the same, or the demo workload (which keeps the last minute it
generated) runs ahead of the clock and submits nothing until the clock gets there —
seen in the first session as a demo cluster at 65 % after a restart.
"""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from demo import workload as demo_workload
from scheduling.backend_factory import open_simulator
from scheduling.clock import MAX_CATCH_UP_S, catch_up, cluster_now_ts
from scheduling.models import ClusterSettings, Job, SimulatorState

pytestmark = pytest.mark.django_db


@pytest.fixture
def workload_cluster(db):
    call_command("seed_demo", nodes=64, nodes_per_rack=8, uniform=True, stdout=None)
    settings_row = ClusterSettings.load()
    assert settings_row.workload_enabled
    open_simulator().close()  # the simulator's first save
    SimulatorState.objects.update(speed=60)  # the demo's speed (the tests' default is 0)
    return settings_row


def stopped_for(seconds: float) -> None:
    """As if the portal had been down ``seconds`` (wall clock) since the last save."""
    SimulatorState.objects.update(saved_wall=time.time() - seconds)


def test_the_catch_up_is_the_speed_times_the_gap_up_to_an_hour():
    assert catch_up(10, 60) == 600 and catch_up(-5, 60) == 0
    assert catch_up(3 * 3600, 60) == MAX_CATCH_UP_S


def test_cluster_time_after_a_long_stop_is_what_the_simulator_will_load(workload_cluster):
    stopped_for(5 * 3600)  # five hours at 60x would be 300 virtual hours
    predicted = cluster_now_ts()
    backend = open_simulator()
    assert backend.now() == pytest.approx(predicted, abs=5 * 60)  # 5 s of wall clock at 60x
    assert backend.now() - SimulatorState.objects.get().virtual_now <= MAX_CATCH_UP_S + 5 * 60


def test_the_demo_workload_keeps_arriving_after_a_long_stop(workload_cluster):
    assert demo_workload.generate() > 0, "the first call fills the empty cluster"
    stopped_for(5 * 3600)
    demo_workload.generate()
    open_simulator().close()  # the first cycle after the restart saves the clock
    SimulatorState.objects.update(saved_wall=time.time() - 120)  # two minutes later: 2 h
    Job.objects.filter(state=Job.State.PENDING).delete()  # room under MAX_PENDING
    before = Job.objects.count()
    assert demo_workload.generate() > 0, "arrivals resume at once"
    assert Job.objects.count() > before


def test_a_workload_minute_left_ahead_of_the_clock_is_pulled_back(workload_cluster):
    demo_workload.generate()
    Job.objects.filter(state=Job.State.PENDING).delete()
    ClusterSettings.objects.update(workload_minute=int(cluster_now_ts() // 60) + 10_000)
    before = cluster_now_ts()
    demo_workload.generate()
    now_minute = ClusterSettings.load().workload_minute
    # at 60x a wall second is a cluster minute: the clock read around the call
    assert int(before // 60) <= now_minute <= int(cluster_now_ts() // 60), "back on the clock"
    stopped_for(60)  # a minute of wall clock: an hour of cluster time, all of it generated
    assert demo_workload.generate() > 0
