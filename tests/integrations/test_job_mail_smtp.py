"""Job mail leaves through Celery to a real SMTP server (aiosmtpd): the beat's task run by
a real worker finds the new events, queues the digest, and the worker delivers it; a
refusing server is retried until it accepts."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
import redis
from django.conf import settings

from core.models import Profile
from scheduling.job_mail import send_job_digests, set_job_mail_preference
from scheduling.models import JobEvent, JobMailPreference
from scheduling.services import JobRequest, submit_job
from tests.integrations.servers import MailServer, poll, start_worker

TOKYO = ZoneInfo("Asia/Tokyo")
# 23:30 UTC is the next day in Tokyo: the date, the hour and the zone's name all show it
AT = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)


def _news(user) -> int:
    """A researcher in Tokyo, opted in for succeeded and preempted, with new events."""
    Profile.objects.filter(user=user).update(time_zone="Asia/Tokyo")
    set_job_mail_preference(user, ["succeeded", "preempted"])
    job = submit_job(user, JobRequest(name="llama-sft", queue="llm-experiment", gpus=1))
    events = [
        JobEvent.objects.create(job=job, kind="preempted", message="preempted for job #3"),
        JobEvent.objects.create(job=job, kind="started", message="not chosen"),
        JobEvent.objects.create(job=job, kind="succeeded", message="finished successfully"),
    ]
    JobEvent.objects.filter(pk__in=[e.pk for e in events]).update(at=AT)
    return job.pk


def _assert_the_digest(received, job_id: int) -> None:
    (rcpt, message), = received  # fmt: skip
    assert rcpt == ["researcher@example.org"]
    assert message["To"] == "researcher@example.org"
    assert message["From"] == "gpu-portal@example.org"
    assert message["Subject"] == f"Your job {job_id} (llama-sft) changed"
    body = message.get_payload(decode=True).decode()
    link = f"https://portal.example.org/jobs/{job_id}/"
    assert [line for line in body.splitlines() if line.endswith(link)] == [
        f"2026-12-02 08:30 JST  job {job_id} (llama-sft) preempted for job #3  {link}",
        f"2026-12-02 08:30 JST  job {job_id} (llama-sft) succeeded: finished successfully  {link}",
    ]  # fmt: skip
    assert "not chosen" not in body
    assert "https://portal.example.org/account/" in body


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_real_worker_runs_the_beat_task_and_delivers_the_digest_over_smtp(
    demo, tmp_path, monkeypatch
):
    server = MailServer()
    env = {**server.env(), "PORTAL_URL": "https://portal.example.org"}
    job_id = _news(demo["researcher"])
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")  # nothing queued by others
    worker = start_worker(tmp_path / "worker", **env)
    try:
        from scheduling.tasks import job_mail

        job_mail.delay()  # what the beat entry "job-mail" sends every minute
        assert poll(lambda: server.received, timeout_s=60), worker.output()
        _assert_the_digest(server.received, job_id)
        pref = JobMailPreference.objects.get(user=demo["researcher"])
        assert pref.last_event_id >= JobEvent.objects.latest("pk").pk
        job_mail.delay()  # a second run: nothing new
        assert poll(lambda: worker.output().count("scheduling.tasks.job_mail") >= 4, 30)
        assert len(server.received) == 1, worker.output()
    finally:
        worker.stop()
        server.stop()


@pytest.mark.django_db
def test_a_refused_mail_is_retried_until_the_server_accepts_it(
    demo, monkeypatch, django_capture_on_commit_callbacks
):
    server = MailServer(refuse_first=2)
    for name, value in {**server.env(), "PORTAL_URL": "https://portal.example.org"}.items():
        monkeypatch.setenv(name, value)
    from core.tasks import send_mail

    delays = []
    real_retry = send_mail.retry
    monkeypatch.setattr(
        send_mail, "retry",
        lambda *a, countdown=None, **k: (delays.append(countdown),
                                          real_retry(*a, countdown=0, **k))[1],
    )  # fmt: skip
    try:
        job_id = _news(demo["researcher"])
        queue = redis.Redis.from_url(settings.REDIS_URL)
        queue.delete("celery")
        with django_capture_on_commit_callbacks(execute=True):
            assert send_job_digests().mailed == 1
        (queued,) = [json.loads(m) for m in queue.lpop("celery", 10)]  # taken, as a worker does
        assert queued["headers"]["task"] == "core.tasks.send_mail"
        args, kwargs, _ = json.loads(base64.b64decode(queued["body"]))
        assert send_mail.apply(args, kwargs).get() == 1  # as the worker runs it, retries too
        assert server.attempts == 3 and delays == [30, 60]
        _assert_the_digest(server.received, job_id)
    finally:
        server.stop()
