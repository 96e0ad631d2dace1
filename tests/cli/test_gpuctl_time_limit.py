"""gpuctl and time limits: ``submit --time`` / ``-t`` takes Slurm's forms (``90``,
``4:00:00``, ``2-12``, ``2-12:30:00``; seconds round up to a minute, as Slurm rounds them)
and sends ``time_limit_minutes`` only when given; anything else is a usage error (exit 2)
with nothing sent; ``explain`` says the limit and, while a run is on, when it is asked to
stop; against a live portal (as ``test_gpuctl_singleton.py``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.models import Job
from tests.cli.test_gpuctl_after_arrays import rows
from tests.cli.test_gpuctl_after_condition import submit
from tests.cli.test_gpuctl_commands import JOB, posted
from tests.drills import cycle, make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("given", "minutes"),
    [("90", 90), ("90:30", 91), ("4:00:00", 240), ("2-12", 3600), ("2-12:30", 3630),
     ("2-12:30:01", 3631), ("0:0:59", 1)],
)  # fmt: skip
def test_slurm_forms_become_minutes(cli, portal, given, minutes):
    portal.answers[("post", "jobs/")] = JOB
    assert cli("submit", "a", "-q", "q", "-g", "8", "--time", given).code == 0
    assert posted(portal, "jobs/")["time_limit_minutes"] == minutes


def test_the_body_carries_the_limit_only_when_given_and_bad_forms_send_nothing(cli, portal):
    portal.answers[("post", "jobs/")] = JOB
    assert cli("submit", "a", "-q", "q", "-g", "8").code == 0
    assert "time_limit_minutes" not in posted(portal, "jobs/")
    portal.calls.clear()
    for bad in ("4h", "UNLIMITED", "1-", "٤:00:00", "-5", ""):
        run = cli("submit", "a", "-q", "q", "-g", "8", "-t", bad)
        assert run.code == 2, bad
        assert "invalid time limit" in run.err and "4:00:00, 2-12" in run.err, run.err
    assert portal.calls == [], "nothing sent"


def test_explain_says_the_limit_and_when_the_run_stops(gpuctl, demo, api):
    make_quotas_roomy()
    admin = api("admin")
    limited = submit(gpuctl, "bounded", "--time", "2:30:00", "--sim-duration-minutes", "600")
    assert Job.objects.get(pk=limited).time_limit_minutes == 150
    wide = gpuctl("researcher", "jobs", "--me", "-o", "wide").out.splitlines()
    assert wide[0].split()[-1] == "TIME.LIMIT" and wide[1].rstrip().endswith(" 2 h 30 min")
    assert (
        rows(gpuctl("researcher", "explain", str(limited)).out)["time limit"] == "2 h 30 min a run"
    )
    cycle(admin)
    started = Job.objects.get(pk=limited).started_at
    stop = started + timedelta(minutes=150)
    shown = rows(gpuctl("researcher", "explain", str(limited)).out)["time limit"]
    assert shown == f"2 h 30 min a run; this run is asked to stop at {stop:%Y-%m-%d %H:%M} UTC"
    refused = gpuctl("researcher", "submit", "x", "-q", "llm-core", "-g", "8", "-t", "30",
                     "--runtime", "45")  # fmt: skip
    assert refused.code == 1
    assert "your estimate (45 min) is longer than the time limit (30 min)" in refused.err


def test_time_limit_lowers_for_the_owner_and_raises_for_an_admin(gpuctl, demo):
    make_quotas_roomy()
    limited = submit(gpuctl, "bounded", "--time", "4:00:00")
    run = gpuctl("researcher", "time-limit", str(limited), "2:00:00", "--reason", "shorter")
    assert run.code == 0, run.err
    assert run.out.strip() == f"job {limited} (bounded): time limit 2 h a run"
    refused = gpuctl("researcher", "time-limit", str(limited), "3:00:00")
    assert refused.code == 1 and "only a cluster admin may raise a time limit" in refused.err
    assert len(refused.err.strip().splitlines()) == 1
    assert gpuctl("admin", "time-limit", str(limited), "1-00:00:00").code == 0
    assert Job.objects.get(pk=limited).time_limit_minutes == 1440
    bad = gpuctl("researcher", "time-limit", str(limited), "4h")
    assert bad.code == 2 and "invalid time limit" in bad.err
