"""Scheduled maintenance (``scheduling.nodes.maintenance``): the input rules, who may, the
audit records, and the loop's start (drain) and end (uncordon) on the simulator, with a
node changed by hand in between left alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from core import clock
from core.models import AuditRecord
from scheduling.models import Job, MaintenanceWindow, Node
from scheduling.nodes.maintenance import MAX_NODES, advance_windows, cancel_window, create_window
from scheduling.nodes.selectors import upcoming_maintenance
from scheduling.nodes.services import cordon_node, uncordon_node
from scheduling.services import JobRequest, submit_job
from scheduling.sim_services import advance_clock, run_cycle_now
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db

NODE = "r000-n01"
HOUR = timedelta(hours=1)


def iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def schedule(user, nodes=(NODE,), start=2 * HOUR, end=4 * HOUR, reason="firmware", **kw):
    now = clock.now()
    return create_window(
        user, nodes=list(nodes), starts_at=iso(now + start),
        ends_at=None if end is None else iso(now + end), reason=reason, **kw,
    )  # fmt: skip


# -- input ----------------------------------------------------------------------------------


def later(now, hours: float) -> str:
    return iso(now + hours * HOUR)


# case -> (the body's changes, given cluster time now; the field the refusal names)
BAD = {
    "ends before it starts": (
        lambda now: dict(starts_at=later(now, 3), ends_at=later(now, 2)),
        "ends_at",
    ),
    "ends as it starts": (
        lambda now: dict(starts_at=later(now, 3), ends_at=later(now, 3)),
        "ends_at",
    ),
    "starts in the past": (lambda now: dict(starts_at=later(now, -2 / 60)), "starts_at"),
    "no zone": (lambda now: dict(starts_at=later(now, 2)[:-1]), "starts_at"),
    "not a time": (lambda now: dict(starts_at="tomorrow 2pm"), "starts_at"),
    "an epoch number": (lambda now: dict(starts_at=1_800_000_000), "starts_at"),
    "a bad end": (lambda now: dict(ends_at="2026-13-01T00:00:00Z"), "ends_at"),
    "an unknown node": (lambda now: dict(nodes=[NODE, "nope-1"]), "nodes"),
    "no node": (lambda now: dict(nodes=[]), "nodes"),
    "too many nodes": (lambda now: dict(nodes=[f"n{i}" for i in range(MAX_NODES + 1)]), "nodes"),
    "a name, not a list": (lambda now: dict(nodes=NODE), "nodes"),
    "NUL in a name": (lambda now: dict(nodes=["r000\x00n01"]), "nodes"),
    "NUL in the reason": (lambda now: dict(reason="fw\x00"), "reason"),
    "an escape in the reason": (lambda now: dict(reason="fw \x1b[31m"), "reason"),
    "no reason": (lambda now: dict(reason="  "), "reason"),
    "an overlong reason": (lambda now: dict(reason="x" * 301), "reason"),
    "an unknown rack": (lambda now: dict(nodes=[], rack="r999"), "rack"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_refused_naming_the_field_and_stores_nothing(demo, case):
    changes, field = BAD[case]
    now = clock.now()
    body = dict(nodes=[NODE], starts_at=later(now, 2), ends_at=None, reason="firmware")
    body.update(changes(now))
    with pytest.raises(ValidationError) as err:
        create_window(demo["oncall"], **body)
    assert field in err.value.message_dict, err.value.message_dict
    assert not MaintenanceWindow.objects.exists()
    assert not AuditRecord.objects.filter(action__startswith="maintenance.").exists()


def test_a_start_less_than_a_minute_ago_is_taken(demo):
    window = schedule(demo["oncall"], start=-HOUR / 120)
    assert window.state == "scheduled"


@pytest.mark.parametrize("who", ["researcher", "researcher2", "lead"])
def test_only_oncall_and_admins_schedule_and_cancel(demo, who):
    with pytest.raises(PermissionDenied):
        schedule(demo[who])
    window = schedule(demo["oncall"])
    with pytest.raises(PermissionDenied):
        cancel_window(demo[who], window.pk)
    assert MaintenanceWindow.objects.get().state == "scheduled"


def test_create_and_cancel_are_audited(demo):
    window = schedule(demo["admin"], nodes=[NODE, "r000-n02"], source_ip="10.0.0.9")
    created = AuditRecord.objects.get(action="maintenance.create")
    assert (created.actor_name, created.reason, created.source_ip) == (
        "admin",
        "firmware",
        "10.0.0.9",
    )
    assert created.after["nodes"] == [NODE, "r000-n02"]
    cancel_window(demo["oncall"], window.pk)
    cancelled = AuditRecord.objects.get(action="maintenance.cancel")
    assert cancelled.actor_name == "oncall" and cancelled.after == {"state": "cancelled"}
    with pytest.raises(ValidationError) as err:
        cancel_window(demo["oncall"], window.pk)
    assert set(err.value.message_dict) == {"state"}


def test_a_rack_takes_every_node_of_it(demo):
    window = create_window(demo["oncall"], rack="r000", starts_at=iso(clock.now() + HOUR),
                           reason="rack power")  # fmt: skip
    assert sorted(n.name for n in window.nodes.all()) == sorted(
        Node.objects.filter(rack="r000").values_list("name", flat=True)
    )
    assert window.ends_at is None


def test_overlapping_windows_on_a_node_are_refused(demo):
    schedule(demo["oncall"], start=2 * HOUR, end=4 * HOUR)
    with pytest.raises(ValidationError) as err:
        schedule(demo["oncall"], start=3 * HOUR, end=5 * HOUR)
    assert "already has maintenance" in err.value.message_dict["nodes"][0]
    schedule(demo["oncall"], start=4 * HOUR, end=5 * HOUR)  # back to back is fine
    schedule(demo["oncall"], nodes=["r000-n02"], start=3 * HOUR, end=5 * HOUR)
    schedule(demo["oncall"], start=6 * HOUR, end=None)  # open-ended, after the others
    with pytest.raises(ValidationError):
        schedule(demo["oncall"], start=30 * HOUR, end=31 * HOUR)  # within the open-ended one


def test_the_snapshot_sees_the_earliest_scheduled_start_per_node(demo):
    first = schedule(demo["oncall"], start=2 * HOUR, end=3 * HOUR)
    second = schedule(demo["oncall"], start=5 * HOUR, end=6 * HOUR)
    assert upcoming_maintenance() == {NODE: (first.starts_at, first.reason)}
    cancel_window(demo["oncall"], first.pk)
    assert upcoming_maintenance() == {NODE: (second.starts_at, second.reason)}


# -- the loop's transitions ------------------------------------------------------------------


def state(name: str = NODE) -> tuple[str, str]:
    return Node.objects.values_list("state", "state_reason").get(name=name)


def test_start_drains_end_returns_and_each_happens_once(demo):
    window = schedule(demo["oncall"], nodes=[NODE, "r000-n02"])
    now = clock.now()
    assert advance_windows(now + HOUR) == 0
    assert advance_windows(now + 2 * HOUR) == 1
    assert state() == ("draining", f"maintenance #{window.pk}: firmware")
    assert advance_windows(now + 2 * HOUR) == 0, "idempotent"
    window.refresh_from_db()
    assert window.state == "active"
    drains = AuditRecord.objects.filter(action="node.drain", actor_name="system")
    assert drains.count() == 2
    assert advance_windows(now + 4 * HOUR) == 1
    assert state()[0] == "ready" and state("r000-n02")[0] == "ready"
    assert Node.objects.get(name=NODE).uncordon_requested
    window.refresh_from_db()
    assert window.state == "done" and "ended: nodes returned" in window.note
    assert AuditRecord.objects.filter(action="node.uncordon", actor_name="system").count() == 2
    assert advance_windows(now + 10 * HOUR) == 0


def test_a_node_changed_by_hand_while_active_is_left_and_the_window_says_so(demo):
    window = schedule(demo["oncall"], nodes=[NODE, "r000-n02"])
    now = clock.now()
    advance_windows(now + 2 * HOUR)
    uncordon_node(demo["oncall"], "r000-n02", "firmware done early")
    cordon_node(demo["oncall"], "r000-n02", "keep it out: fan")
    advance_windows(now + 4 * HOUR)
    assert state()[0] == "ready"
    assert state("r000-n02") == ("cordoned", "keep it out: fan")
    window.refresh_from_db()
    assert "r000-n02 was changed by hand (cordoned): left as it is" in window.note


def test_a_node_not_ready_at_the_start_is_left_as_it_was(demo):
    cordon_node(demo["oncall"], "r000-n02", "bad cable")
    Node.objects.filter(name=NODE).update(state="unhealthy", state_reason="gpu fell off")
    window = schedule(demo["oncall"], nodes=[NODE, "r000-n02"])
    now = clock.now()
    advance_windows(now + 2 * HOUR)
    assert state() == ("unhealthy", "gpu fell off")
    assert state("r000-n02")[0] == "draining", "a cordoned node drains: its jobs must move"
    advance_windows(now + 4 * HOUR)
    assert state() == ("unhealthy", "gpu fell off")
    assert state("r000-n02") == ("cordoned", "bad cable"), "its on-call cordon comes back"
    window.refresh_from_db()
    assert f"{NODE} was unhealthy at the start: left as it was" in window.note
    assert "r000-n02 cordoned again, as before the maintenance" in window.note


def test_cancelled_before_its_start_changes_nothing(demo):
    window = schedule(demo["oncall"])
    cancel_window(demo["oncall"], window.pk)
    assert advance_windows(clock.now() + 3 * HOUR) == 0
    assert state() == ("ready", "")
    assert upcoming_maintenance() == {}


def test_cancelled_while_active_returns_the_nodes(demo):
    window = schedule(demo["oncall"], end=None)
    advance_windows(clock.now() + 2 * HOUR)
    assert state()[0] == "draining"
    cancel_window(demo["oncall"], window.pk)
    assert state()[0] == "ready"
    window.refresh_from_db()
    assert window.state == "cancelled" and "cancelled while active: nodes returned" in window.note


def test_a_window_that_passed_while_the_loop_was_down_touches_nothing(demo):
    window = schedule(demo["oncall"])
    assert advance_windows(clock.now() + 5 * HOUR) == 1
    window.refresh_from_db()
    assert window.state == "done" and "nothing was done" in window.note
    assert state() == ("ready", "")


# -- the cycle on the simulator -------------------------------------------------------------


def test_the_cycle_keeps_long_work_off_drains_at_the_start_and_returns_at_the_end(demo):
    make_quotas_roomy()
    admin, me = demo["admin"], demo["researcher"]
    nodes = list(Node.objects.order_by("name").values_list("name", flat=True))
    window = schedule(demo["oncall"], nodes=nodes, start=2 * HOUR, end=6 * HOUR)
    # a 12-hour job would run past the start; a 1-hour one ends before it (but overruns)
    long = submit_job(
        me,
        JobRequest(
            name="long",
            queue="llm-core",
            gpus=8,
            estimated_runtime_minutes=720,
            sim_duration_minutes=720,
        ),
    )
    short = submit_job(me, JobRequest(name="short", queue="llm-core", gpus=8,
                                      estimated_runtime_minutes=60, sim_duration_minutes=600))  # fmt: skip
    run_cycle_now(admin)
    long.refresh_from_db()
    short.refresh_from_db()
    assert short.state == "running"
    assert (long.state, long.pending_code) == ("pending", "NODES_UNAVAILABLE")
    assert long.pending_details["maintenance_starts_at"] == iso(
        window.starts_at.replace(microsecond=0)
    )
    assert "scheduled maintenance" in long.pending_message
    assert long.pending_details["maintenance_reason"] == window.reason
    assert f": {window.reason})" in long.pending_message
    advance_clock(admin, 2 * 3600 + 60)
    run_cycle_now(admin)
    window.refresh_from_db()
    assert window.state == "active"
    assert set(Node.objects.values_list("state", flat=True)) == {"draining"}
    short.refresh_from_db()
    assert short.state == "preempting" and short.stop_reason == "drain"
    advance_clock(admin, 4 * 3600)
    run_cycle_now(admin)
    window.refresh_from_db()
    assert window.state == "done"
    assert set(Node.objects.values_list("state", flat=True)) == {"ready"}
    run_cycle_now(admin)
    assert set(Job.objects.filter(pk__in=[long.pk, short.pk]).values_list("state", flat=True)) == {
        "running"
    }
