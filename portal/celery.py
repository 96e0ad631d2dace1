"""The Celery app and the one beat schedule of the scheduling loop.

Each entry says why it runs at its cadence. Every task is idempotent and takes
a single-flight lock, so a duplicated beat or a retried delivery is harmless.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _every(task: str, seconds: float, expires: float) -> dict:
    """A beat entry: ``task`` every ``seconds``; a run not started within ``expires`` is
    dropped (the next one is due anyway), so a busy worker never works through a backlog."""
    return {"task": task, "schedule": seconds, "options": {"expires": expires}}


def beat_schedule(
    cycle_seconds: float,
    directory_sweep_seconds: float = 900.0,
    provider_sweep_seconds: float = 900.0,
) -> dict:
    """The beat schedule; ``cycle_seconds`` comes from SCHEDULER_CYCLE_SECONDS,
    ``directory_sweep_seconds`` from LDAP_SWEEP_SECONDS, ``provider_sweep_seconds`` from
    OIDC_SWEEP_SECONDS."""
    return {
        # The scheduling cycle: observe, reconcile, plan, apply. A few seconds keeps
        # waits short; single-flight, so a slow cycle is skipped rather than stacked.
        "scheduling-cycle": _every(
            "scheduling.tasks.scheduling_cycle", cycle_seconds, expires=cycle_seconds
        ),
        # Demo workload (simulator only, when enabled): new arrivals every few seconds.
        "demo-workload": _every("demo.tasks.demo_workload", 5.0, expires=5.0),
        # Metrics rollup: one sample per cluster minute feeds the charts, the eviction
        # ratio (R4) and the windowed alerts. Asked every 5 s, it writes only when a
        # cluster minute has passed (monitoring.rollup.sample_due): one a minute on real
        # backends, one every 5 s (5 simulated minutes) on the simulator at 60x, so the
        # dashboard's last hour has points to draw there too.
        "metrics-rollup": _every("monitoring.tasks.metrics_rollup", 5.0, expires=5.0),
        # Health sweep: residual processes and sick nodes must leave the pool
        # within a minute (R6, R7) without costing a DB scan every cycle.
        "health-sweep": _every("monitoring.tasks.health_sweep", 30.0, expires=25.0),
        # Quota activation: approved contracts start and end on their dates (Q4, Q6);
        # a minute is finer than anyone schedules a contract, and it samples line use.
        "quota-activation": _every("quotas.tasks.quota_activation", 60.0, expires=55.0),
        # Job mail (scheduling.job_mail): one digest per opted-in person of their jobs' new
        # events (started, ended, preempted...). A minute: news while it is news, at most
        # one mail a minute per person, and no work in the cycle (it reads the timeline).
        "job-mail": _every("scheduling.tasks.job_mail", 60.0, expires=55.0),
        # Retention: cycles, resolved alerts and audit records past their period go
        # (portal/retention.py). Often enough that each run deletes a few hundred rows, and
        # that a beat restarted by every deploy still prunes (a new beat waits one period).
        "retention": _every("portal.tasks.prune_history", 900.0, expires=840.0),
        # Alerts to Alertmanager (when ALERTMANAGER_URL is set; a no-op otherwise): open
        # alerts are re-sent each minute, or Alertmanager ends them after four minutes
        # (monitoring.notify.FIRING_FOR), as it does with Prometheus's.
        "alerts-resend": _every("monitoring.tasks.resend_alerts", 60.0, expires=55.0),
        # Directory sweep (when LDAP_SERVER_URI is set; a no-op otherwise): people deleted
        # from the directory lose their account, sessions and tokens, and group changes take
        # effect, without a sign-in (portal/auth/sweep.py). 15 minutes by default: offboarding
        # within the quarter hour, ~2 directory queries per account per run.
        "directory-sweep": _every(
            "portal.auth.tasks.directory_sweep",
            directory_sweep_seconds,
            expires=directory_sweep_seconds * 0.9,
        ),
        # Provider sweep (when OIDC_ISSUER is set and OIDC_SWEEP on; a no-op otherwise):
        # people deleted or disabled at the OpenID Connect provider lose their account,
        # sessions and tokens without opening a page: each one's refresh token is used, and
        # the provider refuses it; the others' groups are read from the user info and
        # applied (portal/auth/provider_sweep.py). 15 minutes by default: offboarding and
        # group changes within the quarter hour, two requests per account per run.
        "provider-sweep": _every(
            "portal.auth.tasks.provider_sweep",
            provider_sweep_seconds,
            expires=provider_sweep_seconds * 0.9,
        ),
    }


@app.on_after_finalize.connect
def _install_schedule(sender: Celery, **_: object) -> None:
    from django.conf import settings

    from portal.auth.config import DEFAULT_OIDC_SWEEP_SECONDS, DEFAULT_SWEEP_SECONDS

    sweep_seconds = getattr(
        settings, "LDAP_SWEEP_SECONDS", DEFAULT_SWEEP_SECONDS
    )  # LDAP off: unset
    provider_seconds = getattr(
        settings, "OIDC_SWEEP_SECONDS", DEFAULT_OIDC_SWEEP_SECONDS
    )  # OpenID Connect off: unset
    sender.conf.beat_schedule = beat_schedule(
        settings.SCHEDULER_CYCLE_SECONDS, sweep_seconds, provider_seconds
    )
