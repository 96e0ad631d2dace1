"""Quota pages (mounted at ``/quotas/``)."""

from django.urls import path

from quotas import views

app_name = "quotas"

urlpatterns = [
    path("", views.index, name="index"),
    path("lines/<slug:name>/", views.line_detail, name="line-detail"),
    path("requests/", views.request_list, name="requests"),
    path("requests/new/", views.request_new, name="request-new"),
    path("requests/<int:pk>/", views.request_detail, name="request-detail"),
    path("requests/<int:pk>/approve/", views.request_approve, name="request-approve"),
    path("requests/<int:pk>/reject/", views.request_reject, name="request-reject"),
    path("requests/<int:pk>/withdraw/", views.request_withdraw, name="request-withdraw"),
]
