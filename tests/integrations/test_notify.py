"""Alert notifications and quota mail leave through Celery, with timeouts and retries,
configured by the environment and off by default."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import redis
from django.conf import settings
from django.core import mail
from django.core.exceptions import ImproperlyConfigured

from monitoring import notify
from monitoring.models import Alert
from monitoring.services import raise_alert
from tests.integrations.servers import Receiver
from tests.quotas.conftest import NOW, ask

pytestmark = pytest.mark.django_db


def _queued(queue: str = "celery") -> list[dict]:
    """Messages waiting in the Celery queue of the test Redis."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    return [json.loads(m) for m in client.lrange(queue, 0, -1)]


@pytest.fixture(autouse=True)
def empty_queue():
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")


def test_off_by_default_nothing_is_queued(demo, django_capture_on_commit_callbacks, monkeypatch):
    for name in ("ALERTMANAGER_URL", "ALERT_WEBHOOK_URLS"):
        monkeypatch.delenv(name, raising=False)
    assert not notify.load_config().enabled
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        raise_alert("node_unhealthy", "critical", "r000-n00", "gone")
    assert [c for c in callbacks if "notify" in getattr(c, "__module__", "")] == []
    assert not any(m["headers"]["task"] == "monitoring.tasks.push_alert" for m in _queued())


def test_an_alert_is_queued_after_commit_not_sent_by_the_writer(
    demo, django_capture_on_commit_callbacks, monkeypatch
):
    hook = Receiver()
    try:
        monkeypatch.setenv("ALERT_WEBHOOK_URLS", hook.url)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            alert = raise_alert("node_unhealthy", "critical", "r000-n00", "gone")
        assert not _queued(), "nothing leaves before the commit"
        for callback in callbacks:
            callback()
        tasks = [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in _queued()]
        assert ("monitoring.tasks.push_alert", f"({alert.pk}, 'raised')") in tasks
        time.sleep(0.3)
        assert hook.bodies == [], "the writer itself sent nothing"
    finally:
        hook.stop()


@pytest.mark.parametrize(
    ("name", "value"),
    [("ALERTMANAGER_URL", "ftp://x"), ("ALERT_WEBHOOK_URLS", "hooks.example.org/x"),
     ("ALERT_NOTIFY_TIMEOUT_SECONDS", "0"), ("ALERT_NOTIFY_MAX_RETRIES", "many")],
)  # fmt: skip
def test_a_bad_setting_names_its_variable(name, value):
    with pytest.raises(ImproperlyConfigured, match=name):
        notify.load_config({name: value})


def test_the_config_reads_the_environment():
    config = notify.load_config({"ALERTMANAGER_URL": "http://am:9093/", "PORTAL_URL": "https://p/",
                                 "ALERT_WEBHOOK_URLS": "https://a/1, https://b/2"})  # fmt: skip
    assert config.alertmanager_url == "http://am:9093" and config.portal_url == "https://p"
    assert config.webhook_urls == ("https://a/1", "https://b/2")
    assert config.targets("repeated") == ["alertmanager"], "chat hears changes, not repeats"
    assert config.targets("raised") == ["alertmanager", "https://a/1", "https://b/2"]


def test_a_slow_webhook_times_out_and_only_failed_targets_are_retried(demo):
    slow, fine = Receiver(delay_s=3.0), Receiver()
    try:
        alert = raise_alert("residual_process", "warning", "r000-n01", "1 GPU held; killed")
        config = notify.NotifyConfig(webhook_urls=(slow.url, fine.url), timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(notify.DeliveryError) as err:
            notify.deliver(alert.pk, notify.RAISED, config=config)
        assert time.monotonic() - started < 2.5, "the timeout bounds the call"
        assert list(err.value.failed) == [slow.url]
        assert len(fine.bodies) == 1 and "r000-n01" in fine.bodies[0]["text"]
    finally:
        slow.stop()
        fine.stop()


def test_the_task_retries_with_backoff_until_the_webhook_accepts(demo, monkeypatch):
    hook = Receiver(fail_first=2)
    try:
        monkeypatch.setenv("ALERT_WEBHOOK_URLS", hook.url)
        from monitoring.tasks import push_alert

        delays = []
        real_retry = push_alert.retry
        monkeypatch.setattr(
            push_alert, "retry",
            lambda *a, countdown=None, **k: (delays.append(countdown),
                                              real_retry(*a, countdown=0, **k))[1],
        )  # fmt: skip
        alert = raise_alert("node_unhealthy", "critical", "r000-n02", "XID 79")
        push_alert.apply((alert.pk, notify.RAISED))
        assert hook.attempts == 3 and len(hook.bodies) == 1
        assert len(delays) == 2 and 1.5 <= delays[0] <= 2.5 and 3 <= delays[1] <= 5, delays
    finally:
        hook.stop()


def test_a_late_retry_of_a_resolved_alert_speaks_for_the_reopened_one(demo):
    first = raise_alert("node_unhealthy", "critical", "r000-n03", "down")
    Alert.objects.filter(pk=first.pk).update(status="resolved")
    again = raise_alert("node_unhealthy", "critical", "r000-n03", "down again")
    assert again.pk != first.pk
    assert notify._current(Alert.objects.get(pk=first.pk)).pk == again.pk


# --- quota mail ----------------------------------------------------------------------------


def test_quota_mail_is_queued_for_celery_not_sent_in_the_request(
    demo, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ask(demo["lead"], quota_gpus=20, guarantee_gpus=6, now=NOW)
    assert mail.outbox == []
    (message,) = [m for m in _queued() if m["headers"]["task"] == "core.tasks.send_mail"]
    assert "admin@example.org" in message["headers"]["argsrepr"]


def test_quota_mail_uses_the_email_settings_of_the_environment_and_times_out(demo, monkeypatch):
    """A mail server that accepts and never speaks costs EMAIL_TIMEOUT per attempt; the
    task retries, then gives up without raising (the decision stands)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(silent.accept()) for _ in range(8)],
                     daemon=True).start()  # fmt: skip
    env = {"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
           "EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(silent.getsockname()[1]),
           "EMAIL_TIMEOUT": "0.3", "DEFAULT_FROM_EMAIL": "gpu-portal@example.org"}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from core import mail as core_mail
    from core.tasks import send_mail

    options = core_mail.mail_settings()
    assert (options["port"], options["timeout"]) == (int(env["EMAIL_PORT"]), 0.3)
    monkeypatch.setattr(send_mail, "max_retries", 2)
    real_retry = send_mail.retry
    monkeypatch.setattr(
        send_mail, "retry", lambda *a, countdown=None, **k: real_retry(*a, countdown=0, **k)
    )
    started = time.monotonic()
    assert send_mail.apply(("s", "b", ["lead@example.org"])).get() == 0
    elapsed = time.monotonic() - started
    assert 0.8 <= elapsed < 5, f"three attempts of 0.3 s each, took {elapsed:.1f} s"
    assert len(held) == 3
    silent.close()


def test_a_bad_email_setting_names_its_variable(monkeypatch):
    from core.mail import mail_settings

    monkeypatch.setenv("EMAIL_PORT", "smtp")
    with pytest.raises(ImproperlyConfigured, match="EMAIL_PORT"):
        mail_settings()


def test_quota_mail_queued_by_an_older_release_under_its_old_task_name_is_still_sent():
    from quotas.tasks import send_quota_mail

    assert send_quota_mail.name == "quotas.tasks.send_quota_mail"
    assert send_quota_mail.apply(("Quota request #1", "b", ["admin@example.org"])).get() == 1
    (sent,) = mail.outbox
    assert (sent.subject, sent.to) == ("Quota request #1", ["admin@example.org"])
