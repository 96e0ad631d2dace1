"""Scheduled maintenance (Slurm's ``flags=maint`` reservations): on-call engineers and admins
schedule a window on some nodes (or a whole rack); until it starts the engine keeps work
that would run past its start off those nodes; the loop drains them at the start and
returns them at the end.

Writers: ``create_window`` and ``cancel_window`` (``may_operate_nodes``; one audit record
each, ``maintenance.create`` / ``maintenance.cancel``) and ``advance_windows`` (the cycle,
under the cluster lock: single-flight, and idempotent since each window moves on once).
The nodes change state through ``scheduling.nodes.services.set_node_state`` (audit record
and live event as an on-call drain or uncordon). A node someone changed by hand while the
window was active is left as it is, and the window's ``note`` says so: the loop recognises
its own drain by the node's reason (``marker``).

Reads are in ``scheduling.nodes.selectors`` (``upcoming_maintenance``, ``maintenance_windows``).

Locks (docs/architecture.md): ``create_window`` and ``cancel_window`` wait for the cluster
lock first (up to ``LOCK_WAIT_S``, else ``ClusterBusy``), as the cycle holds it: so no cycle
runs meanwhile (a window starts or ends, or its nodes return, in one order with the
cycle's own node locks), and two creates check overlaps one after the other. Then a
window, then its nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from core import audit, clock, events, time_text
from core.realtime import publish_on_commit
from core.security import has_control_characters
from scheduling.cluster_lock import wait_cluster_lock
from scheduling.models import MaintenanceWindow, Node
from scheduling.nodes.services import (
    DRAINABLE,
    LOCK_WAIT_S,
    clean_reason,
    ensure_may_operate,
    set_node_state,
)

State = MaintenanceWindow.State
OPEN = (State.SCHEDULED, State.ACTIVE)
# At most this many nodes in one window (a few racks); more is a typo or a script gone wrong.
MAX_NODES = 256
# A start this far in the past is still taken (the form was filled in a minute ago).
PAST_SLACK = timedelta(minutes=1)
_TEXT_ALLOWED = frozenset("\t\r\n")
TIME_HELP = time_text.TIME_HELP
# No window further ahead (a typo of the year, or a test script's placeholder).
MAX_AHEAD = timedelta(days=2 * 366)


def parse_time(value: Any, field: str) -> datetime:
    """A window's time as UTC (``core.time_text.parse_time``), else a ``ValidationError`` on
    ``field``."""
    return time_text.parse_time(value, field, MAX_AHEAD)


def marker(window: MaintenanceWindow) -> str:
    """The reason a node drained by ``window`` carries (how the loop knows its own drain)."""
    return f"maintenance #{window.pk}: {window.reason}"[:300]


def _names(nodes: Any) -> list[str]:
    if nodes in (None, ""):
        return []
    if isinstance(nodes, str) or not isinstance(nodes, Iterable):
        raise ValidationError({"nodes": ["a list of node names"]})
    names = list(nodes)
    if len(names) > MAX_NODES:
        raise ValidationError({"nodes": [f"at most {MAX_NODES} nodes in one window"]})
    for name in names:
        if not isinstance(name, str) or not name or len(name) > 64 or has_control_characters(name):
            raise ValidationError({"nodes": [f"not a node name: {str(name)[:80]!r}"]})
    return sorted(set(names))


def _clean(nodes: Any, rack: Any, starts_at: Any, ends_at: Any, reason: Any) -> tuple:
    """Every input checked, every error named at once (nothing is stored on any)."""
    errors: dict[str, list[str]] = {}
    out: dict[str, Any] = {}
    for field, check in (
        ("reason", lambda: clean_reason(reason)),
        ("nodes", lambda: _names(nodes)),
        ("starts_at", lambda: parse_time(starts_at, "starts_at")),
        ("ends_at", lambda: None if ends_at in (None, "") else parse_time(ends_at, "ends_at")),
    ):
        try:
            out[field] = check()
        except ValidationError as err:
            for key, messages in err.message_dict.items():
                errors.setdefault(key, []).extend(messages)
    if isinstance(reason, str) and has_control_characters(reason, _TEXT_ALLOWED):
        errors.setdefault("reason", []).append("control characters are not allowed")
    if rack not in (None, "") and (
        not isinstance(rack, str) or len(rack) > 32 or has_control_characters(rack)
    ):
        errors.setdefault("rack", []).append(f"not a rack name: {str(rack)[:80]!r}")
    start, end = out.get("starts_at"), out.get("ends_at")
    now = clock.now()
    if start is not None and start < now - PAST_SLACK:
        errors.setdefault("starts_at", []).append(
            f"in the past (cluster time is {now:%Y-%m-%d %H:%M UTC})"
        )
    for field, moment in (("starts_at", start), ("ends_at", end)):
        if moment is not None and moment > now + MAX_AHEAD:
            errors.setdefault(field, []).append(f"at most {MAX_AHEAD.days} days ahead")
    if start is not None and end is not None and end <= start:
        errors.setdefault("ends_at", []).append("must be after starts_at")
    if not errors and not out["nodes"] and rack in (None, ""):
        errors["nodes"] = ["name at least one node, or a rack"]
    if errors:
        raise ValidationError(errors)
    return out["nodes"], rack or "", start, end, out["reason"]


def _overlaps(nodes: list[Node], start: datetime, end: datetime | None) -> list[str]:
    """The nodes among ``nodes`` with an open window whose time overlaps [start, end)."""
    clash = MaintenanceWindow.nodes.through.objects.filter(
        node__in=nodes, maintenancewindow__state__in=OPEN
    ).filter(Q(maintenancewindow__ends_at__isnull=True) | Q(maintenancewindow__ends_at__gt=start))
    if end is not None:
        clash = clash.filter(maintenancewindow__starts_at__lt=end)
    rows = clash.values_list("maintenancewindow_id", "node__name")
    return [
        f"{name} already has maintenance #{pk} in that time"
        for pk, name in rows.order_by("maintenancewindow_id", "node__name")[:5]
    ]


def _publish(nodes: Iterable[Node]) -> None:
    """The node pages and lists show upcoming maintenance: tell them to refresh."""
    for node in nodes:
        publish_on_commit(*events.node_updated(node.name, node.state, node.state_reason))


def create_window(
    user: Any, *, nodes: Any = (), rack: Any = "", starts_at: Any, ends_at: Any = None,
    reason: Any, source_ip: str | None = None,
) -> MaintenanceWindow:  # fmt: skip
    """Schedule maintenance of ``nodes`` (names) and/or every node of ``rack`` from
    ``starts_at`` until ``ends_at`` (None: open-ended). Refuses with a ``ValidationError``
    naming each field: a missing or long reason, control characters, a bad time (no zone,
    not ISO 8601, a start more than a minute past, an end not after the start), unknown
    nodes or rack, more than ``MAX_NODES`` nodes, or a node with an overlapping open
    window. ``ClusterBusy`` when the loop holds the cluster past ``LOCK_WAIT_S``. One audit
    record ``maintenance.create``."""
    ensure_may_operate(user)
    names, rack, start, end, reason = _clean(nodes, rack, starts_at, ends_at, reason)
    with transaction.atomic():
        wait_cluster_lock(LOCK_WAIT_S)
        if rack:
            in_rack = list(Node.objects.filter(rack=rack).values_list("name", flat=True))
            if not in_rack:
                raise ValidationError({"rack": [f"unknown rack {rack[:80]!r}"]})
            names = sorted(set(names) | set(in_rack))
        if len(names) > MAX_NODES:
            raise ValidationError({"nodes": [f"at most {MAX_NODES} nodes in one window"]})
        locked = list(Node.objects.filter(name__in=names).order_by("name"))
        unknown = sorted(set(names) - {n.name for n in locked})
        if unknown:
            shown = ", ".join(repr(n[:80]) for n in unknown[:5])
            raise ValidationError(
                {"nodes": [f"unknown node{'s' if len(unknown) > 1 else ''} {shown}"]}
            )
        clashes = _overlaps(locked, start, end)
        if clashes:
            raise ValidationError({"nodes": clashes})
        window = MaintenanceWindow.objects.create(
            starts_at=start, ends_at=end, reason=reason, created_by=user
        )
        window.nodes.set(locked)
        audit.record(user, "maintenance.create", window, reason=reason, source_ip=source_ip,
                     after={"nodes": names, "starts_at": start.isoformat(),
                            "ends_at": end.isoformat() if end else None})  # fmt: skip
        _publish(locked)
    return window


def cancel_window(user: Any, window_id: int, source_ip: str | None = None) -> MaintenanceWindow:
    """Cancel a window: before its start nothing changes; while active its nodes return as
    at its end. ``MaintenanceWindow.DoesNotExist`` for an unknown id; a ``ValidationError`` on
    ``state`` (409) when it is already done or cancelled. One audit record
    ``maintenance.cancel``."""
    ensure_may_operate(user)
    with transaction.atomic():
        wait_cluster_lock(LOCK_WAIT_S)
        window = (
            MaintenanceWindow.objects.select_for_update(of=("self",), no_key=True)
            .filter(pk=window_id)
            .first()
        )
        if window is None:
            raise MaintenanceWindow.DoesNotExist(f"no maintenance #{window_id}")
        if window.state not in OPEN:
            raise ValidationError(
                {"state": [f"maintenance #{window.pk} is already {window.state}"]}
            )
        before = window.state
        if before == State.ACTIVE:
            _finish(window, "cancelled while active")
        else:
            window.note = "cancelled before its start: nothing changed"
            _publish(window.nodes.all())
        window.state = State.CANCELLED
        window.save(update_fields=["state", "note", "updated_at"])
        audit.record(user, "maintenance.cancel", window, reason=window.reason,
                     before={"state": before}, after={"state": window.state},
                     source_ip=source_ip)  # fmt: skip
    return window


def _nodes_locked(window: MaintenanceWindow) -> list[Node]:
    return list(
        Node.objects.select_for_update(of=("self",), no_key=True)
        .filter(maintenance_windows=window)
        .order_by("name")
    )


def _begin(window: MaintenanceWindow) -> None:
    """Drain the window's nodes with its reason (a node not ready or cordoned is left); a
    cordoned node's reason is kept (``cordons``) to cordon it again at the end."""
    mark = marker(window)
    left = []
    for node in _nodes_locked(window):
        if node.state == Node.State.CORDONED:  # an on-call cordon: back at the end
            window.cordons[node.name] = node.state_reason
        if node.state in DRAINABLE:
            set_node_state(None, node, "drain", Node.State.DRAINING, mark)
        else:
            left.append(f"{node.name} was {node.state} at the start: left as it was")
    window.state = State.ACTIVE
    window.note = "; ".join(["started: nodes drained", *left])


def _finish(window: MaintenanceWindow, why: str) -> None:
    """Return the nodes it drained as they were (to the pool, or cordoned again), but those
    someone changed by hand."""
    mark = marker(window)
    left = []
    for node in _nodes_locked(window):
        if node.state == Node.State.DRAINING and node.state_reason == mark:
            if node.name in window.cordons:  # cordoned before it: cordoned again, as it was
                set_node_state(None, node, "cordon", Node.State.CORDONED, window.cordons[node.name])
                left.append(f"{node.name} cordoned again, as before the maintenance")
            else:
                set_node_state(None, node, "uncordon", Node.State.READY,
                               f"maintenance #{window.pk} over ({why})")  # fmt: skip
        else:
            left.append(f"{node.name} was changed by hand ({node.state}): left as it is")
    window.note = "; ".join([window.note, f"{why}: nodes returned", *left])


def advance_windows(now: datetime) -> int:
    """The loop's step (``scheduling.cycle.run``, under the cluster lock, at cycle time
    ``now``): windows due start (drain) or end (uncordon). A window whose whole time passed
    while the loop was not running is closed without touching its nodes. Returns how many
    windows moved on; each moves on once (idempotent)."""
    due = (
        MaintenanceWindow.objects.select_for_update(of=("self",), no_key=True)
        .filter(
            Q(state=State.SCHEDULED, starts_at__lte=now) | Q(state=State.ACTIVE, ends_at__lte=now)
        )
        .order_by("pk")
    )
    moved = 0
    for window in due:
        if window.state == State.SCHEDULED and window.ends_at is not None and window.ends_at <= now:
            window.state = State.DONE
            window.note = "its whole window passed while the loop was not running: nothing was done"
        elif window.state == State.SCHEDULED:
            _begin(window)
        else:
            _finish(window, "ended")
            window.state = State.DONE
        window.save(update_fields=["state", "note", "cordons", "updated_at"])
        moved += 1
    return moved
