"""Pages of the dashboard and the on-call console (included at the site root)."""

from django.urls import path

from monitoring import views

app_name = "monitoring"

urlpatterns = [
    path("dashboard/", views.dashboard, name="dashboard"),
    path("dashboard/data/", views.dashboard_data, name="dashboard-data"),
    path("oncall/", views.oncall, name="oncall"),
    path("oncall/alerts/", views.alerts_fragment, name="oncall-alerts"),
    path("oncall/alerts/<int:alert_id>/ack/", views.alert_action, {"action": "ack"},
         name="oncall-alert-ack"),
    path("oncall/alerts/<int:alert_id>/resolve/", views.alert_action, {"action": "resolve"},
         name="oncall-alert-resolve"),
    path("oncall/rack-map/", views.rack_map, name="oncall-rack-map"),
    path("oncall/rack-map/cells/", views.rack_cells, name="oncall-rack-cells"),
    path("oncall/nodes/", views.node_lookup, name="oncall-node-lookup"),
    path("oncall/nodes/<str:name>/", views.node_detail, name="oncall-node"),
    path("oncall/nodes/<str:name>/action/", views.node_action, name="oncall-node-action"),
    path("oncall/nodes/<str:name>/fault/", views.node_fault, name="oncall-node-fault"),
    path("oncall/maintenance/", views.maintenance_create, name="oncall-maintenance"),
    path("oncall/maintenance/<int:window_id>/cancel/", views.maintenance_cancel,
         name="oncall-maintenance-cancel"),
]  # fmt: skip
