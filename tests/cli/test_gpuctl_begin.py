"""gpuctl and a job's earliest start: ``submit --begin`` (``-b``) in Slurm's forms
(``now+90minutes``, ``16:00``, ``2026-12-08T09:00``), sent as ``begin_at`` in RFC 3339 with
the zone; a form it does not read is a usage error (exit 2), naming the forms; against a
live portal the job waits (``BEGIN_TIME``) and ``explain`` has a ``not before`` row."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuctl.client import slurm_begin
from scheduling.models import Job
from tests.cli.test_gpuctl_after_arrays import rows
from tests.cli.test_gpuctl_commands import JOB, explained, posted
from tests.drills import cycle, make_quotas_roomy

TOKYO = timezone(timedelta(hours=9))
NOW = datetime(2026, 12, 7, 18, 0, 0, tzinfo=TOKYO)


@pytest.mark.parametrize(
    ("text", "sent"),
    [
        ("now", "2026-12-07T18:00:00+09:00"),
        ("now+90", "2026-12-07T18:01:30+09:00"),  # seconds, as Slurm's default
        ("now+90minutes", "2026-12-07T19:30:00+09:00"),
        ("now+2hours", "2026-12-07T20:00:00+09:00"),
        ("NOW+1day", "2026-12-08T18:00:00+09:00"),
        ("now+1w", "2026-12-14T18:00:00+09:00"),
        ("19:30", "2026-12-07T19:30:00+09:00"),  # later today
        ("16:00", "2026-12-08T16:00:00+09:00"),  # passed today: tomorrow, as Slurm
        ("2026-12-08T09:00:00Z", "2026-12-08T09:00:00+00:00"),
        ("2026-12-08T09:00+02:00", "2026-12-08T09:00:00+02:00"),
    ],
)
def test_slurm_s_forms_are_read_into_rfc_3339_with_the_zone(text, sent):
    assert slurm_begin(text, NOW) == sent


def test_a_time_without_a_zone_is_this_machine_s(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert slurm_begin("2026-12-08T09:00") == "2026-12-08T09:00:00+09:00"
        assert slurm_begin("2026-12-08") == "2026-12-08T00:00:00+09:00"
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(
    "bad", ["tomorrow", "now-5", "now+2fortnights", "25:00", "9:7", "2026-13-01", "١٦:٠٠", ""]
)
def test_a_form_it_does_not_read_is_refused_naming_the_forms(bad):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        slurm_begin(bad, NOW)
    assert str(caught.value) == (
        f"invalid begin time {bad!r}: now+90minutes, now+2hours, 16:00, 2026-12-08, "
        "2026-12-08T09:00, or with a zone: 2026-12-08T09:00:00Z"
    )


def test_submit_sends_begin_at_only_when_given(cli, portal):
    portal.answers[("post", "jobs/")] = JOB
    assert cli("submit", "a", "-q", "q", "-g", "8").code == 0
    assert "begin_at" not in posted(portal, "jobs/")
    portal.calls.clear()
    assert cli("submit", "a", "-q", "q", "-g", "8", "-b", "2026-12-08T09:00:00Z").code == 0
    assert posted(portal, "jobs/")["begin_at"] == "2026-12-08T09:00:00+00:00"


def test_a_bad_begin_is_a_usage_error_and_sends_nothing(cli, portal):
    run = cli("submit", "a", "-q", "q", "-g", "8", "--begin", "tomorrow")
    assert run.code == 2
    assert "argument --begin/-b: invalid begin time 'tomorrow'" in run.err
    assert portal.calls == []


def test_explain_says_not_before(cli, portal):
    lines = explained(cli, portal, begin_at="2026-12-08T09:00:00Z")
    assert [line for line in lines if line.startswith("not before")] == [
        "not before       2026-12-08 09:00 UTC (Slurm's --begin)"
    ]


@pytest.mark.django_db(transaction=True)
def test_a_job_submitted_to_begin_later_waits_and_says_so(gpuctl, demo, api):
    make_quotas_roomy()
    run = gpuctl("researcher", "submit", "tonight", "-q", "llm-core", "-g", "8",
                 "--begin", "now+2hours", "--json")  # fmt: skip
    assert run.code == 0, run.err
    then = json.loads(run.out)["id"]
    begin = Job.objects.get(pk=then).begin_at
    assert begin is not None
    cycle(api("admin"))
    shown = rows(gpuctl("researcher", "explain", str(then)).out)
    assert shown["state"] == "pending"
    assert shown["not before"] == f"{begin.astimezone(UTC):%Y-%m-%d %H:%M} UTC (Slurm's --begin)"
    assert shown["verdict"].startswith("BEGIN_TIME: Asked not to start before ")


# -- gpuctl begin: a waiting job's earliest start changed (scontrol update StartTime=) -------


@pytest.mark.parametrize(
    ("given", "sent"),
    [("now", None), ("NONE", None), ("2026-12-08T09:00:00Z", "2026-12-08T09:00:00+00:00")],
)
def test_begin_sends_the_time_or_null_for_now(cli, portal, given, sent):
    portal.answers[("post", "jobs/42/begin-time/")] = {**JOB, "begin_at": sent}
    assert cli("begin", "42", given, "--reason", "later").code == 0
    assert posted(portal, "jobs/42/begin-time/") == {"begin_at": sent, "reason": "later"}


def test_begin_with_a_form_it_does_not_read_sends_nothing(cli, portal):
    run = cli("begin", "42", "tomorrow")
    assert run.code == 2 and "invalid begin time 'tomorrow'" in run.err
    assert portal.calls == []


@pytest.mark.django_db(transaction=True)
def test_begin_puts_a_waiting_job_off_and_now_clears_it(gpuctl, demo, api):
    make_quotas_roomy()
    run = gpuctl("researcher", "submit", "eval", "-q", "llm-core", "-g", "8", "--json")
    mine = json.loads(run.out)["id"]
    put_off = gpuctl("researcher", "begin", str(mine), "2099-01-01T00:00:00Z")
    assert put_off.code == 1 and "at most 366 days ahead" in put_off.err
    put_off = gpuctl("researcher", "begin", str(mine), "now+3hours", "--reason", "after lunch")
    assert put_off.code == 0, put_off.err
    begin = Job.objects.get(pk=mine).begin_at
    assert begin is not None
    assert put_off.out.strip() == (
        f"job {mine} (eval): not before {begin.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    )
    cycle(api("admin"))
    assert rows(gpuctl("researcher", "explain", str(mine)).out)["verdict"].startswith(
        "BEGIN_TIME: "
    )
    cleared = gpuctl("researcher", "begin", str(mine), "now")
    assert cleared.code == 0, cleared.err
    assert cleared.out.strip() == f"job {mine} (eval): no earliest start, it queues from now"
    cycle(api("admin"))
    assert Job.objects.get(pk=mine).state == "running"
    started = gpuctl("researcher", "begin", str(mine), "now+1hour")
    assert started.code == 1 and "it has started" in started.err


def test_begin_array_posts_to_the_array_and_says_what_changed(cli, portal):
    portal.answers[("post", "arrays/7/begin-time/")] = {
        "changed": [51, 52, 53], "begin_at": "2026-12-08T09:00:00Z",
    }  # fmt: skip
    run = cli("begin", "--array", "7", "2026-12-08T09:00:00Z")
    assert run.code == 0, run.err
    assert posted(portal, "arrays/7/begin-time/") == {"begin_at": "2026-12-08T09:00:00+00:00"}
    assert run.out.strip() == (
        "array 7: 3 waiting tasks changed: not before 2026-12-08 09:00 UTC (jobs 51-53)"
    )
    portal.answers[("post", "arrays/7/begin-time/")] = {"changed": [51], "begin_at": None}
    assert cli("begin", "--array", "7", "now").out.strip() == (
        "array 7: 1 waiting task changed: no earliest start, queued from now (jobs 51)"
    )


# -- gpuctl top: a waiting job first among its owner's (scontrol top) -------------------------


def test_top_posts_and_says_where_the_job_goes(cli, portal):
    portal.answers[("post", "jobs/42/top/")] = {**JOB, "business_line": "llm", "tier": "finetune"}
    run = cli("top", "42")
    assert run.code == 0, run.err
    assert ("post", "jobs/42/top/") in [(m, p) for m, p, _ in portal.calls]
    assert run.out.strip() == (
        "job 42 (llama-ft): first among ann's waiting jobs of llm, tier finetune; the next cycle "
        "places it"
    )


@pytest.mark.django_db(transaction=True)
def test_top_against_a_live_portal(gpuctl, demo):
    make_quotas_roomy()
    first = json.loads(gpuctl("researcher", "submit", "a", "-q", "llm-core", "-g", "8",
                              "--json").out)["id"]  # fmt: skip
    run = gpuctl("researcher", "top", str(first))
    assert run.code == 0, run.err
    assert Job.objects.get(pk=first).first_among_own_at is not None
    again = gpuctl("researcher", "top", str(first))
    assert again.code == 1 and "it is already the one put first" in again.err
    assert gpuctl("researcher2", "top", str(first)).code == 1


# -- gpuctl move: a waiting job to another queue (scontrol update Partition=) ---------------


def test_move_posts_the_queue_and_says_where_it_is(cli, portal):
    portal.answers[("post", "jobs/42/move/")] = {**JOB, "queue": "llm-finetune",
                                                 "business_line": "llm"}  # fmt: skip
    run = cli("move", "42", "llm-finetune", "--reason", "quota full")
    assert run.code == 0, run.err
    assert posted(portal, "jobs/42/move/") == {"queue": "llm-finetune", "reason": "quota full"}
    assert run.out.strip() == (
        "job 42 (llama-ft): now in queue llm-finetune (llm); it waits there from the next cycle"
    )


@pytest.mark.django_db(transaction=True)
def test_move_against_a_live_portal(gpuctl, demo):
    make_quotas_roomy()
    mine = json.loads(gpuctl("researcher", "submit", "a", "-q", "llm-experiment", "-g", "8",
                             "--json").out)["id"]  # fmt: skip
    run = gpuctl("researcher", "move", str(mine), "llm-finetune")
    assert run.code == 0, run.err
    assert Job.objects.get(pk=mine).queue.name == "llm-finetune"
    refused = gpuctl("researcher", "move", str(mine), "search-rec-core")
    assert refused.code == 1 and "you may not submit to this queue" in refused.err
