"""Researcher pages: /jobs/… and /arrays/… (included from portal.urls)."""

from django.urls import path

from scheduling import (
    array_views,
    begin_time_views,
    hold_views,
    move_views,
    output_views,
    own_order_views,
    time_limit_views,
    views,
)

app_name = "scheduling"

urlpatterns = [
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.submit, name="job-submit"),
    path("jobs/estimate/", views.estimate, name="job-estimate"),
    path("jobs/feasibility/", views.feasibility, name="job-feasibility"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("jobs/<int:job_id>/hold/", hold_views.job_hold, name="job-hold"),
    path("jobs/<int:job_id>/release/", hold_views.job_release, name="job-release"),
    path("jobs/<int:job_id>/time-limit/", time_limit_views.job_time_limit, name="job-time-limit"),
    path("jobs/<int:job_id>/begin-time/", begin_time_views.job_begin_time, name="job-begin-time"),
    path("jobs/<int:job_id>/top/", own_order_views.job_top, name="job-top"),
    path("jobs/<int:job_id>/move/", move_views.job_move, name="job-move"),
    path("jobs/<int:job_id>/output/", output_views.job_output, name="job-output"),
    path("arrays/<int:array_id>/", array_views.array_detail, name="array-detail"),
    path("arrays/<int:array_id>/bound/", array_views.array_bound, name="array-bound"),
    path("arrays/<int:array_id>/cancel/", array_views.array_cancel, name="array-cancel"),
    path(
        "arrays/<int:array_id>/begin-time/", array_views.array_begin_time, name="array-begin-time"
    ),
]
