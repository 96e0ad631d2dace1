"""Launch backoff stored on the job (``launch_*``) instead of rebuilt from its timeline.

Waiting jobs in the middle of a failure streak keep it: their streak is read once from
the timeline the old way (the latest run of ``launch_retry`` events; the error from the
newest one's words), so an upgrade during a backend outage does not retry them early.
"""

import re

from django.db import migrations, models

LAUNCH_RETRY = "launch_retry"
_RETRY_ERROR = re.compile(r"right now \((.*)\); still waiting", re.S)


def streaks_from_timelines(apps, schema_editor):
    Job = apps.get_model("scheduling", "Job")
    JobEvent = apps.get_model("scheduling", "JobEvent")
    retrying = set(
        JobEvent.objects.filter(kind=LAUNCH_RETRY, job__state="pending").values_list(
            "job_id", flat=True
        )
    )
    streaks: dict[int, dict] = {}
    ended: set[int] = set()
    for job_id, kind, at, message in (
        JobEvent.objects.filter(job_id__in=retrying)
        .order_by("job_id", "-id")  # newest first by insertion, as the loop read them
        .values_list("job_id", "kind", "at", "message")
    ):
        if job_id in ended:
            continue
        if kind != LAUNCH_RETRY:
            ended.add(job_id)
            continue
        streak = streaks.get(job_id)
        if streak is None:
            found = _RETRY_ERROR.search(message)
            streaks[job_id] = {
                "launch_attempts": 1, "launch_first_failed_at": at, "launch_last_failed_at": at,
                "launch_error": found.group(1) if found else message,
            }  # fmt: skip
        else:
            streak["launch_attempts"] += 1
            streak["launch_first_failed_at"] = at
    for job_id, fields in streaks.items():
        Job.objects.filter(pk=job_id).update(**fields)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0002_loop_models")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="launch_attempts",
            field=models.PositiveIntegerField(
                default=0, help_text="launches that failed transiently in a row (cleared at start)"
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="launch_error",
            field=models.TextField(blank=True, help_text="the backend's words, last failure"),
        ),
        migrations.AddField(
            model_name="job",
            name="launch_first_failed_at",
            field=models.DateTimeField(blank=True, help_text="cluster time", null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="launch_last_failed_at",
            field=models.DateTimeField(blank=True, help_text="cluster time", null=True),
        ),
        migrations.RunPython(streaks_from_timelines, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(launch_attempts=0)
                | (
                    models.Q(launch_first_failed_at__isnull=False)
                    & models.Q(launch_last_failed_at__isnull=False)
                ),
                name="job_launch_streak_has_times",
            ),
        ),
    ]
