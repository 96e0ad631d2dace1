"""Scheduled maintenance while scheduling cycles run back to back, on real PostgreSQL: on-call
schedules and cancels windows (some start and end during the run, the clock moving fast)
while cycles plan, drain and return nodes. Nothing fails but the refusals the rules call
for, no job is lost, every accepted action is audited once, each node's state agrees with
the windows at the end, and the database and the cluster agree."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from core import clock
from core.models import AuditRecord
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, MaintenanceWindow, Node
from scheduling.nodes.maintenance import cancel_window, create_window, marker
from scheduling.services import JobRequest, submit_job
from scheduling.sim_services import advance_clock, run_cycle_now
from tests.concurrency.test_drill import SECONDS, Drill
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def test_windows_come_and_go_while_cycles_run_and_nothing_is_lost(demo):
    make_quotas_roomy()
    admin, oncall, me = demo["admin"], demo["oncall"], demo["researcher"]
    nodes = sorted(Node.objects.values_list("name", flat=True))
    submitted = [
        submit_job(me, JobRequest(name=f"race-{i}", queue="llm-core", gpus=gpus,
                                  estimated_runtime_minutes=minutes,
                                  sim_duration_minutes=minutes * 2)).pk
        for i, (gpus, minutes) in enumerate([(8, 600), (4, 30), (4, 90), (8, 20), (2, 240),
                                             (8, 45), (4, 15), (2, 60)])
    ]  # fmt: skip
    drill = Drill(SECONDS)
    created: list[int] = []

    def cycles(rng: random.Random) -> None:
        drill.act("cycle", lambda: run_cycle_now(admin))

    def clock_mover(rng: random.Random) -> None:
        drill.act("advance", lambda: advance_clock(admin, rng.choice([60, 300, 900])))

    def scheduler(rng: random.Random) -> None:
        now = clock.now()
        start = now + timedelta(minutes=rng.choice([1, 5, 20, 60]))
        end = None if rng.random() < 0.2 else start + timedelta(minutes=rng.choice([10, 30, 90]))
        chosen = rng.sample(nodes, rng.randint(1, 2))
        window = drill.act("create", lambda: create_window(
            oncall, nodes=chosen, starts_at=start, ends_at=end, reason=f"race {rng.random():.3f}"
        ))  # fmt: skip
        if window is not None:
            created.append(window.pk)

    def canceller(rng: random.Random) -> None:
        if created:
            pk = rng.choice(created)
            drill.act("cancel", lambda: cancel_window(oncall, pk))

    drill.run([cycles, cycles, clock_mover, scheduler, canceller])

    assert drill.errors == [], drill.errors[:5]
    assert drill.accepted["cycle"] >= 2 and drill.accepted["create"] >= 2, drill.accepted
    audited = AuditRecord.objects
    assert audited.filter(action="maintenance.create").count() == drill.accepted["create"]
    assert audited.filter(action="maintenance.cancel").count() == drill.accepted["cancel"]
    assert MaintenanceWindow.objects.count() == drill.accepted["create"]
    print("maintenance race:", dict(drill.accepted), "refused", dict(drill.refused))
    loop = audited.filter(actor_name="system")
    assert loop.filter(action="node.drain").exists(), "no window started during the run"
    run_cycle_now(admin)  # the clock may have moved after the last cycle: catch up
    # no job lost: each is still there, in a state of the machine, its GPUs accounted for
    jobs = Job.objects.filter(pk__in=submitted)
    assert jobs.count() == len(submitted)
    assert set(jobs.values_list("state", flat=True)) <= {"pending", "running", "preempting",
                                                        "succeeded"}  # fmt: skip
    assert find_inconsistencies() == []
    # each node is draining exactly when an active window drained it (nobody else acts here)
    for node in Node.objects.all():
        active = MaintenanceWindow.objects.filter(state="active", nodes=node)
        if node.state == "draining":
            assert [marker(w) for w in active] == [node.state_reason], node.name
        else:
            assert node.state == "ready" and not active.exists(), (node.name, node.state)
    # cancelling what is open returns every node, and the cycles go on
    for pk in MaintenanceWindow.objects.filter(state__in=["scheduled", "active"]).values_list(
        "pk", flat=True
    ):
        cancel_window(oncall, pk)
    run_cycle_now(admin)
    assert set(Node.objects.values_list("state", flat=True)) == {"ready"}
    assert find_inconsistencies() == []
