"""Job mail while the scheduling cycle writes the timeline: no event lost, none mailed twice.

Real PostgreSQL, real threads. Event ids are taken at insert but seen at commit, so they
commit out of order: a digest that moved its watermark to the highest id it saw would
skip an event whose transaction (a cycle's) was still open with a lower id. The digest
reads only up to a settled horizon (``scheduling.job_mail.settled_horizon``).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import pytest
from django.core import mail
from django.db import transaction

from scheduling.job_mail import _says, send_job_digests, set_job_mail_preference
from scheduling.models import JOB_MAIL_EVENTS, Job, JobEvent, JobMailPreference
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.sim_services import advance_clock, run_cycle_now
from tests.concurrency.threads import cycling, in_thread
from tests.drills import make_quotas_roomy

# the mail task runs where the digest commits (as a worker would, right after)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_eager")]

LINE = re.compile(r"  job (\d+) \((.*?)\) (.*)  https?://\S+/jobs/\1/$")


def mailed_lines(to: str) -> Counter:
    """Every event line mailed to ``to``: (job id, what happened), counted."""
    found: Counter = Counter()
    for message in mail.outbox:
        if message.to == [to]:
            for line in message.body.splitlines():
                match = LINE.search(line)
                if match:
                    found[(int(match[1]), match[3])] += 1
    return found


def test_an_event_committed_after_a_later_one_is_mailed_once_not_skipped(demo):
    me = demo["researcher"]
    set_job_mail_preference(me, ["succeeded"])
    job = submit_job(me, JobRequest(name="late", queue="llm-experiment", gpus=1))
    inserted, release = threading.Event(), threading.Event()
    errors: list[str] = []
    held: list[int] = []

    def a_long_cycle() -> None:  # holds a low id while a later event commits
        with transaction.atomic():
            held.append(JobEvent.objects.create(job=job, kind="succeeded", message="early").pk)
            inserted.set()
            release.wait(20)

    writer = in_thread(errors, a_long_cycle)
    assert inserted.wait(10)
    later = JobEvent.objects.create(job=job, kind="succeeded", message="later")
    assert later.pk > held[0]
    digest = in_thread(errors, send_job_digests)
    time.sleep(0.5)
    assert digest.is_alive(), "the digest waits for the writer in progress"
    assert mail.outbox == []
    release.set()
    writer.join(20)
    digest.join(40)
    assert errors == []
    assert mailed_lines(me.email) == {
        (job.pk, "succeeded: early"): 1,
        (job.pk, "succeeded: later"): 1,
    }
    send_job_digests()
    assert len(mail.outbox) == 1, "a second run mails nothing"


def test_digests_running_beside_cycles_mail_every_event_exactly_once(demo):
    make_quotas_roomy()
    me, admin = demo["researcher"], demo["admin"]
    set_job_mail_preference(me, list(JOB_MAIL_EVENTS))
    start = JobMailPreference.objects.get(user=me).last_event_id
    jobs = [
        submit_job(
            me, JobRequest(name=f"race-{i}", queue="llm-experiment", gpus=2,
                           sim_duration_minutes=2 + i % 5),
        ).pk
        for i in range(36)
    ]  # fmt: skip
    errors: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    digests: list[int] = []

    def cycle_loop() -> None:
        for i in range(40):
            cycles.append(run_cycle_now(admin).pk)
            advance_clock(admin, 90)
            if i % 6 == 3:  # someone else cancels one: a line of its own
                victim = Job.objects.filter(owner=me, state__in=["pending", "running"]).first()
                if victim is not None:
                    cancel_job(admin, victim.pk)
        done.set()

    def digest_loop() -> None:
        while not done.is_set():
            report = send_job_digests()
            digests.append(report.mailed)

    looper = in_thread(errors, cycle_loop)
    mailer = in_thread(errors, digest_loop)
    looper.join(240)
    mailer.join(240)
    assert errors == []
    send_job_digests()  # what happened since the last run of the loop

    expected: Counter = Counter()
    kinds_seen: set[str] = set()
    kinds = {kind for group in JOB_MAIL_EVENTS.values() for kind in group}
    rows = JobEvent.objects.filter(job__owner=me, pk__gt=start, kind__in=kinds).order_by("pk")
    for event in rows:
        if event.kind == "cancelled" and event.message == f"cancelled by {me.username}":
            continue
        expected[(event.job_id, _says(event))] += 1
        kinds_seen.add(event.kind)
    assert {"started", "succeeded", "cancelled"} <= kinds_seen, kinds_seen
    assert len(cycles) == 40 and len(digests) >= 3, (len(cycles), len(digests))
    assert sum(1 for m in digests if m) >= 2, "several digests were mailed while cycles ran"
    assert mailed_lines(me.email) == expected
    assert all(j in {job for job, _ in expected} for j in jobs[:4])


def test_turning_mail_on_and_off_beside_cycles_never_fails_and_mails_only_what_came_after(demo):
    """The account page's write (``set_job_mail_preference``) while cycles write the
    timeline back to back: every change succeeds, the watermark only grows, and the digest
    after the last opt-in lists exactly the events with ids past it, once."""
    make_quotas_roomy()
    me, admin = demo["researcher"], demo["admin"]
    for i in range(24):
        submit_job(me, JobRequest(name=f"toggle-{i}", queue="llm-experiment", gpus=2,
                                  sim_duration_minutes=2 + i % 4))  # fmt: skip
    errors: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    watermarks: list[int] = []

    def toggle_loop() -> None:
        while not done.is_set():
            set_job_mail_preference(me, [])
            watermarks.append(set_job_mail_preference(me, ["started", "succeeded"]).last_event_id)

    looper = in_thread(errors, cycling(admin, 20, 90, cycles, done))
    toggler = in_thread(errors, toggle_loop)
    looper.join(240)
    toggler.join(240)
    assert errors == []
    assert len(cycles) == 20 and len(watermarks) >= 3, (len(cycles), len(watermarks))
    assert watermarks == sorted(watermarks), "a watermark never moves back"
    last = JobMailPreference.objects.get(user=me).last_event_id
    assert last == watermarks[-1]
    for i in range(4):  # what happens after the last opt-in
        submit_job(me, JobRequest(name=f"after-{i}", queue="llm-experiment", gpus=2,
                                  sim_duration_minutes=2))  # fmt: skip
    for _ in range(4):
        run_cycle_now(admin)
        advance_clock(admin, 90)
    events = JobEvent.objects.filter(job__owner=me, pk__gt=last, kind__in=["started", "succeeded"])
    expected = Counter((e.job_id, _says(e)) for e in events)
    assert expected, "jobs started or succeeded after the last opt-in"
    before = JobEvent.objects.filter(job__owner=me, pk__lte=last, kind="succeeded").count()
    assert before, "and some before it, which must not be mailed"
    send_job_digests()
    assert mailed_lines(me.email) == expected
