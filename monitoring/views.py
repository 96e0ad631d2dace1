"""Pages of admins, leads and on-call: the dashboard, the on-call console, the rack map and
node detail (V2-V5). Thin adapters: reads here are a handful of grouped queries; every
change goes through one service (alerts, node isolation, fault injection) or the loop.

Live: pages render fully on the server, then ``static/js/pages/*.js`` refetch the small
JSON/HTML snapshots below when websocket events arrive (and on reconnect).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from functools import wraps
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Case, Count, IntegerField, Q, When
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_POST

from core import clock, timezones
from core.api import client_ip
from core.confirm import Confirmation, is_confirmed, render_confirmation
from core.models import AuditRecord
from core.query_forms import takes_query
from monitoring import charts
from monitoring.guides import GUIDES, guide_for_alert
from monitoring.metrics import EVICTION_ALERT_RATIO
from monitoring.metrics_api import build_pending_by_reason
from monitoring.models import Alert, MetricSample
from monitoring.node_actions import clean_residual_now
from monitoring.permissions import (
    DASHBOARD_ONLY,
    ONCALL_ONLY,
    may_see_dashboard,
    may_use_oncall_console,
)
from monitoring.rollup import eviction_figures_of
from monitoring.services import acknowledge_alert, resolve_alert
from quotas.models import BusinessLine
from scheduling.blast import BlastRadius, grace_text, node_blast_radius
from scheduling.clock import reading as cluster_reading
from scheduling.cluster_lock import ClusterBusy
from scheduling.cycle.context import shared_nodes_first
from scheduling.engine.explain import count, num, verb
from scheduling.models import MaintenanceWindow, Node, SchedulingCycle
from scheduling.nodes.faults import fault_choices, fault_label
from scheduling.nodes.maintenance import cancel_window, create_window
from scheduling.nodes.selectors import (
    build_blast_radius,
    free_gpus,
    get_inference_forecast,
    get_node,
    list_node_history,
    list_node_jobs,
    list_node_rows,
    maintenance_windows,
    node_exists,
    upcoming_maintenance,
)
from scheduling.nodes.services import cordon_node, drain_node, inject_fault, uncordon_node
from scheduling.selectors import QueueUsage, build_cluster_summary, build_usage

WINDOWS = {
    "1h": ("last hour", timedelta(hours=1)),
    "6h": ("last 6 hours", timedelta(hours=6)),
    "24h": ("last 24 hours", timedelta(hours=24)),
    "7d": ("last 7 days", timedelta(days=7)),
}
DEFAULT_WINDOW = "24h"
ALERTS_SHOWN = 100
AUDIT_SHOWN = 10
OUT_OF_POOL = ("cordoned", "draining", "unhealthy", "down")
# Which buttons the node page offers per state. Display only: the services in
# scheduling/nodes/services.py decide, and refuse anything else with a message.
ACTIONS_BY_STATE = {
    Node.State.READY: ("cordon", "drain"),
    Node.State.CORDONED: ("drain", "uncordon"),
    Node.State.DRAINING: ("uncordon",),
    Node.State.UNHEALTHY: ("uncordon",),
    Node.State.DOWN: ("uncordon",),
}


# -- access ---------------------------------------------------------------------------


def _role_required(check: Callable[[Any], bool], refusal: str) -> Callable:
    """Anonymous users go to the login page; signed-in users without the role get 403."""

    def decorator(view: Callable) -> Callable:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not check(request.user):
                raise PermissionDenied(refusal)
            return view(request, *args, **kwargs)

        return login_required(wrapped)

    return decorator


dashboard_access = _role_required(may_see_dashboard, DASHBOARD_ONLY)
oncall_access = _role_required(may_use_oncall_console, ONCALL_ONLY)


# -- dashboard ------------------------------------------------------------------------


def chart_zone(zone: tzinfo) -> charts.DisplayZone:
    """``zone`` as the figure builders take it: the zone and ``core.timezones.label`` for
    its name (the charts import no Django, so they get both from here)."""
    if timezones.is_utc(zone):
        return charts.IN_UTC

    def name(moment: datetime) -> str:
        return timezones.label(moment, zone)

    return charts.DisplayZone(zone, name)


def build_dashboard(window: str = DEFAULT_WINDOW, zone: tzinfo | None = None) -> dict[str, Any]:
    """Tiles and figures of the dashboard (about ten grouped queries, whatever the scale).

    ``zone``: the viewer's (``request.display_zone``, UTC when None); every time a person
    reads here is in it, named: the latest sample's time, the captions, the charts' axes
    and hovers. The ISO 8601 stamps (``as_of.sample``, ``as_of.cycle_time``) stay UTC.

    "Now" numbers are read live through the selectors every other surface uses (usage and
    borrowing: ``build_usage``; utilization of healthy GPUs: ``build_cluster_summary``;
    pending jobs by reason: ``build_pending_by_reason``, as set by the latest cycle);
    history and eviction ratios (over the portal's one window) come from the rollup's
    samples.
    """
    label, span = WINDOWS[window]  # the views refuse any other window (WindowForm)
    zone = zone or UTC
    drawn_in = chart_zone(zone)
    cluster = build_cluster_summary()
    latest = (
        MetricSample.objects.order_by("-at", "-id")
        .values("at", "per_queue", "fragmentation_gpus")
        .first()
    )
    # The window ends now (cluster time): its axis is the whole span, its series every
    # rollup sample in it (seeded demo history flagged), then the live reading.
    now = clock.now()
    shown = charts.TimeWindow(now - span, now, label)
    series = list(
        MetricSample.objects.filter(at__gte=shown.start, at__lte=now)
        .order_by("at", "id")  # two samples at one instant (a paused clock): written order
        .values_list(
            "at", "utilization", "fragmentation_gpus", "seeded", "idle_gpu_s", "pending_by_reason"
        )
    )
    cycle = (
        SchedulingCycle.objects.filter(kind="cycle")
        .order_by("-started_at", "-id")
        .values("id", "cluster_time", "pending_by_reason", "pending")
        .first()
    )
    usage = build_usage().lines
    eviction = eviction_figures_of(latest)
    lines = [
        charts.LineRow(
            name=line.name,
            label=line.display_name,
            used=u.used_gpus,
            borrowed=u.borrowed_gpus,
            pending_gpus=u.pending_gpus,
            quota=line.quota_gpus,
            guarantee=line.guarantee_gpus,
        )
        for line in BusinessLine.objects.all()
        for u in [usage.get(line.pk, QueueUsage())]
    ]
    queues = [  # queues whose window holds no data yet are not drawn (no 0% that is not)
        charts.QueueEviction(
            name=row.get("name", qid),
            line=row.get("line", ""),
            ratio=float(row["eviction_ratio"]),
            evictions=int(row.get("evictions", 0)),
        )
        for qid, row in ((latest or {}).get("per_queue") or {}).items()
        if row.get("eviction_ratio") is not None
    ]
    pending_by_reason = build_pending_by_reason()
    pending = sum(pending_by_reason.values())
    ready = cluster.nodes_by_state.get(Node.State.READY, 0)
    fragmented = latest["fragmentation_gpus"] if latest else 0
    return {
        "window": window,
        "window_label": label,
        "as_of": {
            "sample": latest["at"].isoformat() if latest else None,
            "sample_text": timezones.written(latest["at"], zone, seconds=True) if latest else None,
            "cycle": cycle["id"] if cycle else None,
            "cycle_time": cycle["cluster_time"].isoformat() if cycle else None,
        },
        "eviction_window": eviction.window_label,
        "tiles": {
            # utilization of healthy GPUs: in use by jobs or by online inference on healthy
            # nodes over healthy GPUs (ClusterSummary.utilization)
            "utilization": f"{cluster.utilization:.1%}",
            "gpus_allocated": num(cluster.gpus_allocated_healthy),
            "gpus_inference": num(cluster.gpus_inference_healthy),
            "gpus_healthy": num(cluster.gpus_healthy),
            "gpus_total": num(cluster.gpus_total),
            "nodes_out": num(cluster.nodes_total - ready),
            "pending_jobs": num(pending),
            "fragmentation": num(fragmented),
            # the words after each count, singular for one (the page's script swaps them too)
            "nodes_out_words": verb(cluster.nodes_total - ready, "node", "nodes")
            + " out of the pool",
            "pending_jobs_words": verb(pending, "job", "jobs") + " pending",
            "fragmentation_words": "fragmented free "
            + verb(fragmented, "GPU", "GPUs")
            + " at the latest sample",
        },
        "figures": {
            "utilization": charts.utilization_figure(
                [(at, u, seeded) for at, u, _, seeded, _, _ in series],
                window=shown,
                now=(now, cluster.utilization),
                zone=drawn_in,
            ),
            "lines": charts.line_usage_figure(lines),
            "pending": charts.pending_by_reason_figure(pending_by_reason),
            "eviction": charts.eviction_ratio_figure(
                queues, EVICTION_ALERT_RATIO, eviction.window_label
            ),
            "fragmentation": charts.fragmentation_figure(
                [(at, f, seeded) for at, _, f, seeded, _, _ in series],
                window=shown,
                zone=drawn_in,
            ),
            "idle": charts.idle_causes_figure(
                [(at, idle, seeded) for at, _, _, seeded, idle, _ in series],
                window=shown,
                zone=drawn_in,
            ),
            # the pending reasons of every rollup sample in the window (the bar chart above
            # is the live reading; this one's caption names its latest sample's time)
            "waiting": charts.waiting_by_reason_figure(
                [(at, reasons, seeded) for at, _, _, seeded, _, reasons in series],
                window=shown,
                zone=drawn_in,
            ),
        },
    }


CHARTS = (
    ("utilization", "Utilization over time"),
    ("lines", "GPUs per line against quota and guarantee"),
    ("pending", "Pending by reason"),
    ("waiting", "Waiting jobs by reason over time"),
    ("eviction", "Eviction ratio per queue"),
    ("fragmentation", "Fragmentation"),
    ("idle", "Why GPUs are idle while jobs wait"),
)


class WindowForm(forms.Form):
    """The dashboard's ``?window=``: absent is the default (24 h); anything but a key of
    ``WINDOWS`` is a 400 naming the choices, never another window drawn in its place."""

    window = forms.ChoiceField(
        label="Time window",
        choices=[(key, words) for key, (words, _span) in WINDOWS.items()],
        error_messages={
            "required": f"choose a time window: one of {', '.join(WINDOWS)}",
            "invalid_choice": f"unknown time window “%(value)s”; one of {', '.join(WINDOWS)}",
        },
    )

    @classmethod
    def of(cls, request: HttpRequest) -> WindowForm:
        return cls({"window": request.GET.get("window", DEFAULT_WINDOW)})


@dashboard_access
@require_GET
@takes_query("window")
def dashboard(request: HttpRequest) -> HttpResponse:
    """The charts and tiles over the chosen window; an unknown window: 400, the window
    form saying why, and nothing drawn (as the audit page answers a bad filter)."""
    form = WindowForm.of(request)
    if not form.is_valid():
        context = {"window_form": form, "windows": WINDOWS, "window": DEFAULT_WINDOW}
        return render(request, "monitoring/dashboard.html", context, status=400)
    payload = build_dashboard(form.cleaned_data["window"], timezones.viewer_zone(request))
    return render(
        request,
        "monitoring/dashboard.html",
        {"payload": payload, "windows": WINDOWS, "window": payload["window"], "window_form": form,
         "charts": [(key, title, payload["figures"][key]["summary"]) for key, title in CHARTS],
         "data_url": reverse("monitoring:dashboard-data") + f"?window={payload['window']}"},
    )  # fmt: skip


@dashboard_access
@require_GET
@takes_query("window", json=True)
def dashboard_data(request: HttpRequest) -> JsonResponse:
    """The dashboard's snapshot as JSON (the page refetches it on live events), in the
    viewer's zone as the page is. An unknown window: 400 ``{"errors": {"window": [...]}}``."""
    form = WindowForm.of(request)
    if not form.is_valid():
        errors = {field: [str(m) for m in msgs] for field, msgs in form.errors.items()}
        return JsonResponse({"errors": errors}, status=400)
    return JsonResponse(
        build_dashboard(form.cleaned_data["window"], timezones.viewer_zone(request))
    )


# -- rack map ---------------------------------------------------------------------------


def build_node_rows(name: str | None = None, zone: tzinfo = UTC) -> list[charts.NodeRow]:
    """Every node (or the one named) with its GPUs in use, in rack order (one grouped
    query), and its next scheduled maintenance as read in ``zone`` (one more)."""
    soon = upcoming_maintenance()
    rows = []
    for row in list_node_rows(name):
        node = charts.NodeRow(*row)
        if node.name in soon:
            node = node._replace(maintenance=maintenance_said(*soon[node.name], zone))
        rows.append(node)
    return rows


def maintenance_said(at: datetime, reason: str, zone: tzinfo) -> str:
    """A node's next maintenance in its cell's sentence: ``2026-12-07 10:27 JST: PDU swap``."""
    return f"{timezones.written(at, zone)}: {reason}"


def _rack_totals(rows: list[charts.NodeRow], counts: dict[str, int]) -> dict[str, int]:
    """The rack map's summary line: the page's first render and every live refresh."""
    return {
        "nodes_out": sum(counts[k] for k in OUT_OF_POOL),
        "gpus_used": sum(r.gpus_used for r in rows),
        "gpus_inference": sum(r.inference_gpus for r in rows),
        "gpus_residual": sum(r.residual_gpus for r in rows),
        "maintenance_soon": sum(bool(r.maintenance) for r in rows),
    }


def _rack_context(zone: tzinfo) -> dict[str, Any]:
    rows = build_node_rows(zone=zone)
    racks, counts = charts.build_rack_map(rows)
    prefix = reverse("monitoring:oncall-node", args=["x"])[:-2]
    # cells_html escapes every value it writes (see monitoring.charts.cells_html)
    racks_html = [
        {
            "name": r.name,
            "summary": r.summary,
            "html": mark_safe(charts.cells_html(r.cells, prefix)),
        }
        for r in racks
    ]
    return {
        "racks": racks_html,
        "counts": counts,
        "legend": [(key, glyph, words, counts[key]) for key, glyph, words in charts.LEGEND],
        "maintenance_mark": charts.MAINTENANCE_MARK,
        "nodes_total": len(rows),
        "gpus_total": sum(r.gpus_total for r in rows),
        **_rack_totals(rows, counts),
        "cells_url": reverse("monitoring:oncall-rack-cells"),
    }


@oncall_access
@require_GET
@takes_query()
def rack_map(request: HttpRequest) -> HttpResponse:
    """The rack map alone, for a wall screen."""
    return render(
        request, "monitoring/rack_map.html", _rack_context(timezones.viewer_zone(request))
    )


@oncall_access
@require_GET
@takes_query("node", json=True)
def rack_cells(request: HttpRequest) -> JsonResponse:
    """Every cell as ``[name, status, glyph, label]`` plus counts (live refresh).

    ``?node=<name>``: that node's cell only (the node page), with the same shape; a name
    of no node (or an empty one) is a 400 ``{"errors": {"node": [...]}}``, not a map of
    no cells (or of every cell).
    """
    name = request.GET.get("node")
    rows = build_node_rows(name, timezones.viewer_zone(request))
    if name is not None and not rows:
        return JsonResponse(
            {"errors": {"node": [f"there is no node named “{name[:80]}”"]}}, status=400
        )
    racks, counts = charts.build_rack_map(rows)
    return JsonResponse(
        {
            "cells": [list(c) for rack in racks for c in rack.cells],
            "racks": {rack.name: rack.summary for rack in racks},
            "counts": counts,
            **_rack_totals(rows, counts),
        }
    )


# -- on-call console ------------------------------------------------------------------


def _alerts_context() -> dict[str, Any]:
    visible = Alert.objects.exclude(status=Alert.Status.RESOLVED)
    ordered = visible.annotate(
        status_rank=Case(When(status=Alert.Status.OPEN, then=0), default=1,
                         output_field=IntegerField()),
        severity_rank=Case(When(severity=Alert.Severity.CRITICAL, then=0),
                           When(severity=Alert.Severity.WARNING, then=1), default=2,
                           output_field=IntegerField()),
    ).order_by("status_rank", "severity_rank", "-updated_at", "-id").select_related(
        "acknowledged_by")  # fmt: skip
    alerts = list(ordered[:ALERTS_SHOWN])
    # Each guide is rendered once, however many alerts share it (100 alerts stay cheap).
    guides: dict[str, str] = {}
    for alert in alerts:
        guide = guide_for_alert(alert.kind)
        if guide and alert.kind not in guides:
            guides[alert.kind] = render_to_string("monitoring/_guide.html", {"guide": guide})
        alert.guide = guide
        alert.guide_html = guides.get(alert.kind, "")
        alert.node_subject = alert.kind in (Alert.Kind.RESIDUAL_PROCESS, Alert.Kind.NODE_UNHEALTHY)
    counts = visible.aggregate(
        total=Count("id"),
        open_critical=Count("id", filter=Q(status="open", severity="critical")),
        open_warning=Count("id", filter=Q(status="open", severity="warning")),
        open_info=Count("id", filter=Q(status="open", severity="info")),
        acknowledged=Count("id", filter=Q(status="acknowledged")),
    )
    return {
        "alerts": alerts,
        "alert_counts": counts,
        "alerts_hidden": counts["total"] - len(alerts),
        "alerts_prefix": reverse("monitoring:oncall-alerts"),
        "node_prefix": reverse("monitoring:oncall-node", args=["x"])[:-2],
    }


def _console(
    request: HttpRequest, status: int = 200, maintenance_form: MaintenanceForm | None = None
) -> HttpResponse:
    context = {**_alerts_context(), **_rack_context(timezones.viewer_zone(request)), "guides": GUIDES,
               **_maintenance_context(None, maintenance_form)}  # fmt: skip
    return render(request, "monitoring/oncall.html", context, status=status)


@oncall_access
@require_GET
@takes_query()
def oncall(request: HttpRequest) -> HttpResponse:
    """Alerts with their guides, the rack map and the guides reference."""
    return _console(request)


@oncall_access
@require_GET
@takes_query()
def alerts_fragment(request: HttpRequest) -> HttpResponse:
    """The alerts list alone (HTML), swapped in by the page on ``alerts`` events."""
    return HttpResponse(render_to_string("monitoring/_alerts.html", _alerts_context(), request))


@oncall_access
@require_POST
def alert_action(request: HttpRequest, alert_id: int, action: str) -> HttpResponse:
    """Acknowledge or resolve one alert (POST + CSRF), then back to the console."""
    service = {"ack": acknowledge_alert, "resolve": resolve_alert}[action]
    try:
        alert = service(request.user, alert_id, client_ip(request))
    except Alert.DoesNotExist:
        messages.error(request, f"There is no alert #{alert_id}; nothing was changed.")
        return _console(request, status=404)
    except ValidationError as err:
        messages.error(request, f"Alert #{alert_id} was not changed: {'; '.join(err.messages)}.")
        return _console(request, status=400)
    messages.success(request, f"Alert #{alert.pk} ({alert.kind}, {alert.subject}) {alert.status}.")
    return redirect(reverse("monitoring:oncall") + "#alerts")


@oncall_access
@require_GET
@takes_query("name")
def node_lookup(request: HttpRequest) -> HttpResponse:
    """The "go to node" box: a name typed by keyboard users instead of tabbing the map."""
    name = request.GET.get("name", "").strip()
    if name and node_exists(name):
        return redirect("monitoring:oncall-node", name=name)
    return _node_missing(request, name or "(empty)")


# -- node detail and actions ---------------------------------------------------------


class NodeActionForm(forms.Form):
    """Cordon, drain, uncordon or clean: the pressed button names the action."""

    action = forms.ChoiceField(
        choices=[("cordon", "Cordon"), ("drain", "Drain"), ("uncordon", "Uncordon"),
                 ("clean", "Clean residual processes")],
        error_messages={"required": "press one of the action buttons",
                        "invalid_choice": "unknown action %(value)s"},
    )  # fmt: skip
    reason = forms.CharField(
        label="Reason (required: shown to users and kept in the audit log)",
        max_length=300,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "say why (it is shown to users and kept in the audit log)"},
    )


class FaultForm(forms.Form):
    kind = forms.ChoiceField(
        label="Fault to inject",
        choices=fault_choices(),
    )


def _node_missing(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "monitoring/node_missing.html", {"name": name[:80]}, status=404)


# What each audited action on a node did, as its page's "Recent changes" says it (the audit
# page keeps the codes, which its filter matches); another action reads as its code.
NODE_ACTION_WORDS: dict[str, str] = {
    "node.cordon": "Cordoned",
    "node.drain": "Drain started",
    "node.uncordon": "Uncordoned",
    "node.isolate": "Isolated",
    "node.clean_residual": "Residual processes cleaned",
    "simulator.fault": "Fault injected (drill)",
    "admin.add": "Added in the admin site",
    "admin.change": "Changed in the admin site",
    "admin.delete": "Deleted in the admin site",
}


def node_history_rows(records: Iterable[AuditRecord]) -> list[dict[str, Any]]:
    """The node's audit records as its page lists them: ``at``, ``actor_name``, ``action``
    in words (``NODE_ACTION_WORDS``) and ``reason``; a fault drill's reason, which is the
    fault's kind (``gpu_failure``), is the drill form's label of that kind."""
    return [
        {
            "at": r.at,
            "actor_name": r.actor_name,
            "action": NODE_ACTION_WORDS.get(r.action, r.action),
            "reason": fault_label(r.reason) if r.action == "simulator.fault" else r.reason,
        }
        for r in records
    ]


def _node_page(request: HttpRequest, node: Node, *, action_form: NodeActionForm | None = None,
               fault_form: FaultForm | None = None, maintenance_form: MaintenanceForm | None = None,
               status: int = 200) -> HttpResponse:  # fmt: skip
    jobs = list_node_jobs(node)
    used = sum(j["gpus_here"] for j in jobs)
    windows = _maintenance_context(node, maintenance_form)  # open ones, soonest first
    soon = next((w for w in windows["maintenance"] if w.state == w.State.SCHEDULED), None)
    said = (
        maintenance_said(soon.starts_at, soon.reason, timezones.viewer_zone(request))
        if soon
        else ""
    )
    cell = charts.node_cell(
        charts.NodeRow(node.name, node.rack, node.state, node.health, node.gpus_total,
                       node.residual_gpus, used, node.inference_gpus, said)
    )  # fmt: skip
    blast = build_blast_radius(node.name)
    header_clock = cluster_reading()  # the header's reading too: one clock query a page
    forecast = get_inference_forecast(node, header_clock.now.timestamp())
    gpus_by_queue: dict[str, int] = {}
    for j in jobs:
        gpus_by_queue[j["job__queue__name"]] = (
            gpus_by_queue.get(j["job__queue__name"], 0) + j["gpus_here"]
        )
    context = {
        "node": node,
        "cell": cell,
        "used": used,
        "free": free_gpus(node.gpus_total, used, node.residual_gpus, node.inference_gpus),
        "jobs": jobs,
        "blast": blast,
        "gpus_by_queue": sorted(gpus_by_queue.items()),
        "actions": ACTIONS_BY_STATE.get(node.state, ()),
        "action_form": action_form or NodeActionForm(),
        "fault_form": fault_form or FaultForm(),
        "simulator": settings.SCHEDULING_BACKEND == "simulator",
        "history": node_history_rows(list_node_history(node, AUDIT_SHOWN)),
        "cluster_clock": header_clock,
        "forecast": forecast,
        "forecast_spans": forecast.spans(_offset_minutes(header_clock.now)) if forecast else [],
        "forecast_zone": timezones.label(header_clock.now, timezone.get_current_timezone()),
        "shared_first": shared_nodes_first(),
        **windows,
    }
    return render(request, "monitoring/node_detail.html", context, status=status)


def _offset_minutes(moment: datetime) -> int:
    """The viewer's zone's offset from UTC at ``moment``, in minutes (east positive)."""
    offset = moment.astimezone(timezone.get_current_timezone()).utcoffset()
    return int(offset.total_seconds() // 60) if offset is not None else 0


@oncall_access
@require_GET
@takes_query()
def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    node = get_node(name)
    if node is None:
        return _node_missing(request, name)
    return _node_page(request, node)


def _form_errors(form: forms.Form, err: ValidationError) -> None:
    for field, msgs in (err.message_dict if hasattr(err, "error_dict") else {None: err.messages}).items():  # fmt: skip
        form.add_error(field if field in form.fields else None, msgs)


NODE_SERVICES = {"cordon": cordon_node, "drain": drain_node, "uncordon": uncordon_node}
DONE = {
    "cordon": "cordoned: no new work lands on it; its jobs keep running",
    "drain": "draining: its jobs are asked to checkpoint and move; the next cycle does it",
    "uncordon": "uncordoned: it returns to the pool at the next cycle",
}


def _node_post(request: HttpRequest, name: str, form_class: type[forms.Form], form_key: str,
               act: Callable[[Node, Any], str], refused: Callable[[Node, Any, ValidationError], None],
               verb: str) -> HttpResponse:  # fmt: skip
    """A POST on a node page: validate ``form_class``, call ``act(node, form)`` (one service
    call, returning the success message), then back to the node page. A refusal of the
    service goes through ``refused``; a busy cluster is a 503 saying nothing was ``verb``."""
    node = get_node(name)
    if node is None:
        return _node_missing(request, name)
    form = form_class(request.POST)
    status = 400
    if form.is_valid():
        try:
            done = act(node, form)
        except ValidationError as err:
            refused(node, form, err)
        except ClusterBusy as err:
            messages.error(request, f"Nothing was {verb}: {err}.")
            status = 503
        else:
            messages.success(request, done)
            return redirect("monitoring:oncall-node", name=node.name)
    return _node_page(request, node, status=status, **{form_key: form})


# Actions that take GPUs away from running or future work: a second step first (#15).
CONFIRMED_NODE_ACTIONS = ("cordon", "drain")


def _node_confirmation(request: HttpRequest, node: Node, action: str, reason: str,
                       blast: BlastRadius) -> HttpResponse:  # fmt: skip
    """What cordoning or draining ``node`` hits, and the form that does it (confirm=1)."""
    jobs = count(blast.job_count, "job")
    queues = ", ".join(blast.queues) or "no queue"
    free = free_gpus(node.gpus_total, blast.gpus_here, node.residual_gpus, node.inference_gpus)
    if action == "drain":
        what = (f"Draining {node.name} asks each of its jobs to checkpoint within "
                f"{grace_text()}, then requeues it to restart elsewhere from that "
                "checkpoint; multi-node jobs stop on all their nodes. No new work lands here.")  # fmt: skip
        figures = [
            (jobs, f"stopped and requeued ({queues})"),
            (count(blast.gpus_hit, "GPU"),
             f"{verb(blast.gpus_hit, 'stops', 'stop')} ({blast.gpus_here:,} here"
             + (", the rest on their other nodes)" if blast.gpus_hit > blast.gpus_here else ")")),
            (f"{blast.gpu_hours_at_risk:.1f} GPU-hours",
             "of work since their last checkpoints are lost if a job fails to checkpoint in time"),
            (f"{node.gpus_total} GPUs", f"of {node.name} leave the pool until it is uncordoned"),
        ]  # fmt: skip
    else:
        what = (f"Cordoning {node.name} lets its jobs run on; no new work lands on it until "
                "it is uncordoned. Nothing running is lost now.")  # fmt: skip
        figures = [
            ("0 GPU-hours", "are lost now: running jobs keep running"),
            (jobs, f"keep running here ({queues}); if the node is drained or fails later, "
                   f"{blast.gpu_hours_at_risk:.1f} GPU-hours since their checkpoints are at risk"),
            (count(free, "free GPU"),
             f"of {node.name} {verb(free, 'stops', 'stop')} taking new work (of {node.gpus_total})"),
        ]  # fmt: skip
    return render_confirmation(request, Confirmation(
        title=f"{action.capitalize()} node {node.name}", what=what,
        button=f"Yes, {action} {node.name}",
        action_url=reverse("monitoring:oncall-node-action", args=[node.name]),
        back_url=reverse("monitoring:oncall-node", args=[node.name]),
        figures=figures, jobs=blast.jobs, show_here=True,
        jobs_caption=f"Jobs on {node.name}" if blast.jobs else "",
        hidden=[("action", action), ("reason", reason)],
        fingerprint=blast.fingerprint(), as_of=blast.now,
    ))  # fmt: skip


@oncall_access
@require_POST
def node_action(request: HttpRequest, name: str) -> HttpResponse:
    """Cordon / drain / uncordon (services) or clean residual processes (a sweep now).

    Cordon and drain go in two steps: a valid post without ``confirm=1`` answers with the
    blast radius (jobs, GPUs, GPU-hours since their checkpoints) and changes nothing; the
    confirmation's post acts, unless the jobs hit changed meanwhile (then it shows them).
    """
    form = NodeActionForm(request.POST)
    node = get_node(name)
    if node is not None and form.is_valid():
        action = form.cleaned_data["action"]
        applicable = action in ACTIONS_BY_STATE.get(node.state, ())
        if action in CONFIRMED_NODE_ACTIONS and applicable:
            blast = node_blast_radius(node.name)
            if not is_confirmed(request.POST, blast.fingerprint()):
                reason = form.cleaned_data["reason"]
                return _node_confirmation(request, node, action, reason, blast)

    def act(node: Node, form: NodeActionForm) -> str:
        action, reason = form.cleaned_data["action"], form.cleaned_data["reason"]
        if action != "clean":
            NODE_SERVICES[action](request.user, node.name, reason, client_ip(request))
            return f"{node.name} {DONE[action]}."
        node, record, raised = clean_residual_now(
            request.user, node.name, reason, source_ip=client_ip(request)
        )
        found = (
            f"residual processes were found and killed ({raised.message})"
            if raised
            else "no residual process was found on it"
        )
        return f"{node.name} was swept now (sweep #{record.pk}): {found}."

    def refused(node: Node, form: NodeActionForm, err: ValidationError) -> None:
        _form_errors(form, err)
        node.refresh_from_db()

    return _node_post(request, name, NodeActionForm, "action_form", act, refused, "done")


@oncall_access
@require_POST
def node_fault(request: HttpRequest, name: str) -> HttpResponse:
    """Drills: break a simulated node on purpose; the next cycle or sweep reacts."""

    def act(node: Node, form: FaultForm) -> str:
        kind = form.cleaned_data["kind"]
        inject_fault(request.user, kind, node.name, source_ip=client_ip(request))
        return (
            f"Drill: {fault_label(kind)} injected on {node.name}; the next cycle "
            "or health sweep reacts (watch the alerts and the rack map)."
        )

    def refused(node: Node, form: FaultForm, err: ValidationError) -> None:
        messages.error(request, f"Nothing was injected: {'; '.join(err.messages)}.")

    return _node_post(request, name, FaultForm, "fault_form", act, refused, "injected")


# -- scheduled maintenance ----------------------------------------------------------------


class MaintenanceForm(forms.Form):
    """Schedule maintenance on nodes (names) and/or a whole rack; times in the viewer's zone
    (``scheduling.nodes.maintenance.create_window`` checks everything else)."""

    nodes = forms.CharField(
        label="Nodes (names, separated by spaces or commas)", required=False, max_length=20000
    )
    rack = forms.CharField(label="and/or every node of rack", required=False, max_length=32)
    starts_at = forms.DateTimeField(
        label="Starts at", widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        error_messages={"required": "say when it starts", "invalid": "not a date and time"},
    )  # fmt: skip
    ends_at = forms.DateTimeField(
        label="Ends at (empty: open-ended, until cancelled)", required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        error_messages={"invalid": "not a date and time"},
    )  # fmt: skip
    reason = forms.CharField(
        label="Reason (required: shown to users and kept in the audit log)", max_length=300,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "say why (it is shown to users and kept in the audit log)"},
    )  # fmt: skip
    back = forms.CharField(required=False, widget=forms.HiddenInput)  # the node page, if any


def _maintenance_context(node: Node | None, form: MaintenanceForm | None) -> dict[str, Any]:
    """The open maintenance windows (of ``node``, or all) and the form to schedule one."""
    initial = {"nodes": node.name, "back": node.name} if node is not None else {}
    return {
        "maintenance": list(maintenance_windows(node=node.name if node else None, open_only=True)),
        "maintenance_form": form or MaintenanceForm(initial=initial),
        "maintenance_node": node,
    }


def _maintenance_back(request: HttpRequest, back: str, form: MaintenanceForm | None = None,
                      status: int = 200) -> HttpResponse:  # fmt: skip
    """To the node page the form was on (``back``), else the console: a redirect after
    success, the page again with the form's errors after a refusal."""
    node = get_node(back) if back else None
    if status == 200:
        if node is not None:
            return redirect(reverse("monitoring:oncall-node", args=[node.name]) + "#maintenance")
        return redirect(reverse("monitoring:oncall") + "#maintenance")
    if node is not None:
        return _node_page(request, node, maintenance_form=form, status=status)
    return _console(request, status=status, maintenance_form=form)


@oncall_access
@require_POST
def maintenance_create(request: HttpRequest) -> HttpResponse:
    """Schedule a maintenance window (one service call), then back where the form was."""
    form = MaintenanceForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            window = create_window(
                request.user, nodes=data["nodes"].replace(",", " ").split(), rack=data["rack"],
                starts_at=data["starts_at"], ends_at=data["ends_at"], reason=data["reason"],
                source_ip=client_ip(request),
            )  # fmt: skip
        except ValidationError as err:
            _form_errors(form, err)
        except ClusterBusy as err:
            messages.error(request, f"Nothing was scheduled: {err}.")
            return _maintenance_back(request, data["back"], form, status=503)
        else:
            nodes = window.nodes.count()
            messages.success(
                request,
                f"Maintenance #{window.pk} scheduled on {count(nodes, 'node')}: until it starts "
                "only work predicted to end before it lands there; at its start the loop drains "
                f"{verb(nodes, 'it', 'them')}, at its end it returns {verb(nodes, 'it', 'them')}.",
            )
            return _maintenance_back(request, data["back"])
    return _maintenance_back(request, form.data.get("back", ""), form, status=400)


@oncall_access
@require_POST
def maintenance_cancel(request: HttpRequest, window_id: int) -> HttpResponse:
    """Cancel a window (one service call), then back where the button was."""
    back = request.POST.get("back", "")
    try:
        window = cancel_window(request.user, window_id, client_ip(request))
    except MaintenanceWindow.DoesNotExist:
        messages.error(request, f"There is no maintenance #{window_id}; nothing was changed.")
        return _maintenance_back(request, back, status=404)
    except ValidationError as err:
        messages.error(
            request, f"Maintenance #{window_id} was not changed: {'; '.join(err.messages)}."
        )
        return _maintenance_back(request, back, status=409)
    except ClusterBusy as err:
        messages.error(request, f"Nothing was cancelled: {err}.")
        return _maintenance_back(request, back, status=503)
    messages.success(request, f"Maintenance #{window.pk} cancelled: {window.note}.")
    return _maintenance_back(request, back)
