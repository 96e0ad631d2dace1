"""Mail about one's jobs (scheduling.job_mail): one digest per person per run, of the
kinds they chose, of their own jobs, of what happened after they opted in, never twice."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest
from django.core import mail
from django.core.exceptions import ValidationError

from core.models import Profile
from scheduling.job_mail import (
    MAX_LISTED,
    newest_event_id,
    send_job_digests,
    set_job_mail_preference,
    settled_horizon,
)
from scheduling.models import JobEvent, JobMailPreference
from scheduling.services import JobRequest, cancel_job, submit_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("celery_eager")]
TOKYO = ZoneInfo("Asia/Tokyo")


@pytest.fixture(autouse=True)
def portal_url(monkeypatch):
    monkeypatch.setenv("PORTAL_URL", "https://gpu.example.org/")


def job(user, name: str, queue: str = "llm-experiment"):
    return submit_job(user, JobRequest(name=name, queue=queue, gpus=1))


def happen(j, kind: str, message: str = "") -> JobEvent:
    """A line of ``j``'s timeline, as the cycle writes it."""
    return JobEvent.objects.create(job=j, kind=kind, message=message or f"it {kind}")


def run(capture) -> list:
    """One digest run, its mail sent after commit; the messages it sent."""
    before = len(mail.outbox)
    with capture(execute=True):
        send_job_digests()
    return mail.outbox[before:]


def test_a_person_gets_one_mail_of_exactly_their_new_events_of_the_kinds_they_chose(
    demo, django_capture_on_commit_callbacks
):
    me, other = demo["researcher"], demo["lead"]
    mine, theirs = job(me, "llama-sft"), job(other, "lead-run")
    happen(mine, "succeeded", "before opting in")
    set_job_mail_preference(me, ["succeeded", "preempted"])
    set_job_mail_preference(other, ["succeeded"])
    done = happen(mine, "succeeded", "finished successfully")
    happen(mine, "started", "started on n1")  # a kind not chosen
    happen(mine, "failed", "a kind not chosen")
    preempted = happen(mine, "preempted", "preempted gracefully to make room for job #9")
    requeued = happen(mine, "requeued", "back in the queue with 10 min of progress kept")
    happen(theirs, "preempted", "someone else's job")

    sent = run(django_capture_on_commit_callbacks)

    mine_mail = [m for m in sent if m.to == ["researcher@example.org"]]
    assert len(mine_mail) == 1
    body = mine_mail[0].body
    assert mine_mail[0].subject == f"Your job {mine.pk} (llama-sft) changed"
    listed = [line for line in body.splitlines() if f"job {mine.pk} (llama-sft)" in line]
    # what happened, said once: the message alone when it says it first
    assert [line.split("(llama-sft) ")[1].split("  https")[0] for line in listed] == [
        "succeeded: finished successfully",
        "preempted gracefully to make room for job #9",
        "was requeued: back in the queue with 10 min of progress kept",
    ]
    for event, line in zip([done, preempted, requeued], listed, strict=True):
        assert event.message in line
        assert line.endswith(f"https://gpu.example.org/jobs/{mine.pk}/")
        assert line.startswith(event.at.strftime("%Y-%m-%d %H:%M UTC"))
    assert "before opting in" not in body and "someone else" not in body
    assert "started on" not in body and "a kind not chosen" not in body
    assert [m.to for m in sent if m is not mine_mail[0]] == [], "the lead had no succeeded"
    assert JobMailPreference.objects.get(user=me).last_event_id >= requeued.pk


def test_a_second_run_sends_nothing_new_and_a_later_event_is_mailed_once(
    demo, django_capture_on_commit_callbacks
):
    me = demo["researcher"]
    mine = job(me, "sweep")
    set_job_mail_preference(me, ["failed"])
    happen(mine, "failed", "out of memory")
    assert len(run(django_capture_on_commit_callbacks)) == 1
    assert run(django_capture_on_commit_callbacks) == []
    happen(mine, "failed", "again")
    (again,) = run(django_capture_on_commit_callbacks)
    assert "again" in again.body and "out of memory" not in again.body


def test_several_jobs_are_counted_in_the_subject_and_times_are_in_the_persons_zone(
    demo, django_capture_on_commit_callbacks
):
    me = demo["researcher"]
    Profile.objects.filter(user=me).update(time_zone="Asia/Tokyo")
    set_job_mail_preference(me, ["started"])
    jobs = [job(me, f"run-{i}") for i in range(3)]
    events = [happen(j, "started") for j in jobs]
    (sent,) = run(django_capture_on_commit_callbacks)
    assert sent.subject == "3 of your jobs changed"
    lines = [line for line in sent.body.splitlines() if " started" in line]
    assert len(lines) == 3
    for event, line in zip(events, lines, strict=True):
        assert line.startswith(event.at.astimezone(TOKYO).strftime("%Y-%m-%d %H:%M JST  job "))


def test_deactivated_people_and_people_without_an_address_get_nothing(
    demo, django_capture_on_commit_callbacks
):
    gone, silent = demo["researcher"], demo["lead"]
    set_job_mail_preference(gone, ["succeeded"])
    set_job_mail_preference(silent, ["succeeded"])
    type(gone).objects.filter(pk=gone.pk).update(is_active=False)
    type(silent).objects.filter(pk=silent.pk).update(email="")
    happen(job(gone, "a"), "succeeded")
    happen(job(silent, "b"), "succeeded")
    assert run(django_capture_on_commit_callbacks) == []
    # back, with an address: what happened meanwhile is not mailed later either
    type(gone).objects.filter(pk=gone.pk).update(is_active=True)
    type(silent).objects.filter(pk=silent.pk).update(email="lead@example.org")
    assert run(django_capture_on_commit_callbacks) == []


def test_nothing_is_mailed_until_a_person_opts_in(demo, django_capture_on_commit_callbacks):
    happen(job(demo["researcher"], "a"), "succeeded")
    assert run(django_capture_on_commit_callbacks) == []
    assert not JobMailPreference.objects.exists()


def test_a_mail_lists_at_most_fifty_events_then_counts_the_rest(
    demo, django_capture_on_commit_callbacks
):
    me = demo["researcher"]
    set_job_mail_preference(me, ["started"])
    mine = job(me, "many")
    JobEvent.objects.bulk_create(
        [JobEvent(job=mine, kind="started", message=f"run {i}") for i in range(MAX_LISTED + 12)]
    )
    (sent,) = run(django_capture_on_commit_callbacks)
    listed = [line for line in sent.body.splitlines() if line.endswith(f"/jobs/{mine.pk}/")]
    assert len(listed) == MAX_LISTED
    assert "run 0" in listed[0] and f"run {MAX_LISTED - 1}  " in listed[-1]
    assert "and 12 more: https://gpu.example.org/jobs/?mine=1" in sent.body
    assert run(django_capture_on_commit_callbacks) == [], "the rest are counted, not re-sent"


def test_a_cancel_is_mailed_only_when_someone_else_cancelled(
    demo, django_capture_on_commit_callbacks
):
    me = demo["researcher"]
    set_job_mail_preference(me, ["cancelled"])
    mine, theirs = job(me, "mine-cancelled"), job(me, "lead-cancelled")
    cancel_job(me, mine.pk)
    cancel_job(demo["admin"], theirs.pk)
    (sent,) = run(django_capture_on_commit_callbacks)
    assert "lead-cancelled) cancelled by admin" in sent.body
    assert "mine-cancelled" not in sent.body


def test_a_suspension_is_mailed_only_when_someone_else_suspended(
    demo, django_capture_on_commit_callbacks
):
    me = demo["researcher"]
    set_job_mail_preference(me, ["preempted"])
    mine, theirs = job(me, "mine-suspended"), job(me, "lead-suspended")
    happen(mine, "suspended", "suspended by researcher: stopped after its checkpoint and held")
    happen(theirs, "suspended", "suspended by lead: stopped after its checkpoint and held")
    (sent,) = run(django_capture_on_commit_callbacks)
    assert "lead-suspended) suspended by lead: stopped" in sent.body
    assert "mine-suspended" not in sent.body


def test_turning_mail_on_sets_the_watermark_and_a_change_of_kinds_keeps_it(demo):
    me = demo["researcher"]
    happen(job(me, "a"), "started")
    pref = set_job_mail_preference(me, ["started"])
    assert pref.last_event_id == newest_event_id() > 0
    happen(job(me, "b"), "started")
    kept = set_job_mail_preference(me, ["started", "failed"]).last_event_id
    assert kept == pref.last_event_id
    set_job_mail_preference(me, [])
    assert set_job_mail_preference(me, ["failed"]).last_event_id == newest_event_id()


@pytest.mark.parametrize("kinds", [["exploded"], ["started", "started; DROP"]])
def test_an_unknown_kind_is_refused_and_nothing_is_written(demo, kinds):
    with pytest.raises(ValidationError, match="unknown kind"):
        set_job_mail_preference(demo["researcher"], kinds)
    assert not JobMailPreference.objects.exists()


def test_mail_cannot_be_turned_on_without_an_address(demo):
    me = demo["researcher"]
    me.email = ""
    with pytest.raises(ValidationError, match="no email address"):
        set_job_mail_preference(me, ["started"])
    assert not JobMailPreference.objects.exists()
    assert set_job_mail_preference(me, []).kinds == []


def test_the_horizon_is_the_newest_event_id_once_no_writer_is_in_progress(demo):
    happen(job(demo["researcher"], "a"), "started")
    assert settled_horizon(wait_s=1.0) == newest_event_id()


def test_with_nobody_opted_in_a_run_reads_nothing_and_waits_for_no_writer(
    demo, django_assert_max_num_queries
):
    """Every deployment runs the beat entry each minute, most with no job mail at all: it
    must not wait on the cycles' transactions (the horizon) for nobody."""
    set_job_mail_preference(demo["researcher"], [])  # a row, but off
    with django_assert_max_num_queries(1):
        assert send_job_digests().horizon is None


def test_a_job_the_loop_cancelled_for_its_dependency_is_mailed_as_cancelled_by_someone_else(
    demo, django_capture_on_commit_callbacks
):
    """Its owner cancelled the first job; the loop cancelled the one after it: that one is
    news (the pipeline broke), mailed with why."""
    from scheduling.cycle import run_cycle

    me = demo["researcher"]
    set_job_mail_preference(me, ["cancelled"])
    first = job(me, "pretrain")
    then = submit_job(me, JobRequest(name="eval", queue="llm-experiment", gpus=1,
                                     after=[first.pk]))  # fmt: skip
    cancel_job(me, first.pk)
    run_cycle(wait_s=10)
    (sent,) = run(django_capture_on_commit_callbacks)
    assert (
        f"job {then.pk} (eval) cancelled: job {first.pk} it waited for was cancelled" in sent.body
    )
    assert "pretrain) cancelled by" not in sent.body, "their own cancel is not news"
