from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from bench import baseline as bench_baseline
from core.query_forms import takes_query
from core.tokens_api import ApiTokenViewSet
from monitoring.api import AlertViewSet
from monitoring.metrics_api import MetricsSummaryView
from portal import account_views, audit_views, errors, health, views
from portal.csv_views import JobCSVViewSet, LineUsageCSVView, QueueCSVViewSet
from portal.metrics import metrics_view
from portal.version_api import VersionView
from quotas.api import BusinessLineViewSet, QueueViewSet
from quotas.requests_api import QuotaRequestViewSet
from quotas.usage_api import UsageReportCSVView, UsageReportView
from quotas.usage_views import usage as usage_page
from quotas.views import queue_list
from scheduling.api import JobViewSet, SchedulerCycleView, SimulatorAdvanceView, SimulatorFaultView
from scheduling.array_api import JobArrayViewSet
from scheduling.nodes.api import MaintenanceViewSet, NodeViewSet

router = DefaultRouter()
router.register("business-lines", BusinessLineViewSet, basename="business-line")
router.register("queues", QueueViewSet, basename="queue")
router.register("jobs", JobViewSet, basename="job")
router.register("arrays", JobArrayViewSet, basename="job-array")
router.register("nodes", NodeViewSet, basename="node")
router.register("maintenance", MaintenanceViewSet, basename="maintenance")
router.register("alerts", AlertViewSet, basename="alert")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
router.register("tokens", ApiTokenViewSet, basename="api-token")

CSV = {"format": "csv"}

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/login/", takes_query("next")(auth_views.LoginView.as_view()), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("oidc/", include("mozilla_django_oidc.urls")),  # single sign-on (portal/auth/oidc.py)
    path("admin/", admin.site.urls),
    path("audit/", audit_views.audit_log, name="audit"),
    path("account/", account_views.account, name="account"),
    path("account/tokens/", account_views.token_list, name="account-tokens"),
    path(
        "account/tokens/automation/revoke/",
        account_views.automation_token_revoke,
        name="account-automation-token-revoke",
    ),
    path(
        "account/tokens/<int:token_id>/revoke/",
        account_views.token_revoke,
        name="account-token-revoke",
    ),
    path("", include("monitoring.urls")),
    path("", include("scheduling.urls")),
    path("queues/", queue_list, name="queue-list"),
    path("usage/", usage_page, name="usage"),
    path("quotas/", include("quotas.urls")),
    path("api/v1/simulator/faults/", SimulatorFaultView.as_view(), name="simulator-faults"),
    path("api/v1/simulator/advance/", SimulatorAdvanceView.as_view(), name="simulator-advance"),
    path("api/v1/scheduler/cycle/", SchedulerCycleView.as_view(), name="scheduler-cycle"),
    path("api/v1/version/", VersionView.as_view(), name="version"),
    path("api/v1/metrics/summary/", MetricsSummaryView.as_view(), name="metrics-summary"),
    # CSV exports (portal/csv_views.py), before the router's own format suffixes
    path("api/v1/jobs.csv", JobCSVViewSet.as_view({"get": "list"}), CSV, name="jobs-csv"),
    path("api/v1/queues.csv", QueueCSVViewSet.as_view({"get": "list"}), CSV, name="queues-csv"),
    path("api/v1/usage-report.csv", UsageReportCSVView.as_view(), CSV, name="usage-report-csv"),
    path("api/v1/usage-report/", UsageReportView.as_view(), name="usage-report"),
    path(
        "api/v1/",
        include(
            [
                path(
                    "business-lines/<str:pk>/usage.csv",
                    LineUsageCSVView.as_view(),
                    CSV,
                    name="line-usage-csv",
                )
            ]
        ),
    ),
    path("api/v1/", include(router.urls)),
    # The trivial insert bench_api measures submissions against: only with BENCH_ENDPOINTS=1
    # (a benchmark stack, docs/api.md "Throughput"), never in the schema.
    *bench_baseline.urlpatterns(),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI from local files (drf-spectacular-sidecar); its script is a separate
    # request, so the page runs under the Content-Security-Policy without inline script.
    path(
        "api/docs/",
        # Signed-in people only: the page runs "Try it out" with the visitor's session.
        login_required(
            SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api_docs.html")
        ),
        name="api-docs",
    ),
    path("metrics", metrics_view, name="metrics"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("favicon.ico", errors.favicon, name="favicon"),
]

# The portal's own error answers (pages in its layout; JSON under /api/): portal/errors.py.
handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.page_not_found"
handler500 = "portal.errors.server_error"
