"""gpuctl hold / release against a live portal (as ``test_gpuctl_after.py``): several ids
at once, ``--reason``, each refusal reported with the portal's words and exit code 1 while
the others go through; ``explain`` and ``jobs`` say HELD."""

from __future__ import annotations

import json

import pytest

from scheduling.models import Job
from tests.drills import cycle, make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def roomy(demo):
    make_quotas_roomy()


def submit(gpuctl, name: str) -> int:
    run = gpuctl("researcher", "submit", name, "-q", "llm-core", "-g", "8", "--json")
    assert run.code == 0, run.err
    return json.loads(run.out)["id"]


def test_hold_and_release_several_jobs(gpuctl, roomy, api):
    first, second = submit(gpuctl, "a"), submit(gpuctl, "b")
    run = gpuctl("researcher", "hold", str(first), str(second), "--reason", "new data")
    assert run.code == 0, run.err
    assert run.out.splitlines() == [
        f"job {first} (a): pending, held (user hold)",
        f"job {second} (b): pending, held (user hold)",
    ]
    assert set(Job.objects.values_list("hold_reason", flat=True)) == {"new data"}
    cycle(api("admin"))
    explain = gpuctl("researcher", "explain", str(first))
    assert "HELD: Held by researcher at " in explain.out
    table = gpuctl("researcher", "jobs", "--state", "pending").out.splitlines()
    assert "HELD" in next(line for line in table if line.split()[0] == str(first)).split()

    run = gpuctl("researcher", "release", str(first), "999999")
    assert run.code == 1
    assert run.out.splitlines() == [f"job {first} (a): pending, not held"]
    assert "999999" in run.err
    assert Job.objects.get(pk=first).held_at is None
    assert Job.objects.get(pk=second).held_at is not None


def test_a_running_job_is_suspended_and_refusals_carry_the_portals_words(gpuctl, roomy, api):
    running = submit(gpuctl, "train")
    cycle(api("admin"))
    run = gpuctl("researcher", "hold", str(running))
    assert run.code == 0, run.err
    assert "running, suspending: it checkpoints and stops" in run.out
    run = gpuctl("researcher", "hold", str(running))
    assert run.code == 1 and "already held by researcher" in run.err
    run = gpuctl("researcher", "hold", str(running), "--reason", "bad\u202etext")
    assert run.code == 1
    run = gpuctl("researcher2", "release", str(running))
    assert run.code == 1, "not theirs to see"
    assert Job.objects.get(pk=running).held_at is not None


def test_hold_and_release_choose_jobs_by_filters(gpuctl, roomy, api):
    """``--me``/``-q``/``--state`` as ``cancel``'s: hold chooses jobs not held, release the
    held ones; ``--dry-run`` changes nothing."""
    ids = [submit(gpuctl, f"sweep-{i}") for i in range(3)]
    dry = gpuctl("researcher", "hold", "--me", "--state", "pending", "--dry-run")
    assert dry.code == 0 and [line.split()[3] for line in dry.out.splitlines()] == [
        str(i) for i in ids
    ]
    assert not Job.objects.filter(held_at__isnull=False).exists()
    run = gpuctl("researcher", "hold", "--me", "--state", "pending", "--reason", "bad data")
    assert run.code == 0 and run.out.count("held (user hold)") == 3, run.err
    again = gpuctl("researcher", "hold", "--me")  # all held already: none chosen
    assert again.code == 0 and again.out == "" and "no jobs match" in again.err
    run = gpuctl("researcher", "release", "--me", "-q", "llm-core")
    assert run.code == 0 and run.out.count("not held") == 3, run.err
    assert not Job.objects.filter(held_at__isnull=False).exists()
    refused = gpuctl("researcher", "release")
    assert refused.code == 2 and "gpuctl release: error:" in refused.err
