"""The loop never waits for a submission that links a new job to the jobs it waits for.

A submission's links (``Job.after``) reference those jobs; PostgreSQL checks the foreign
keys when the submission commits (Django's constraints are deferred) and takes a key-share
lock on each job waited for. Every lock the loop takes on a job row is FOR NO KEY UPDATE,
which a key-share lock does not block: with FOR UPDATE, the loop launching (or stopping)
two jobs a submission waits for, locked in another order than the submission's checks,
deadlocked (``test_after_failed_races_cycle`` found it). Step by step: another connection
holds the key-share lock a committing submission holds on a job, and the cycle that
launches that job, or stops it at its time limit, ends while the lock is still held.

Real PostgreSQL, a real second connection.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from scheduling.sim_services import advance_clock, run_cycle_now
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def key_share_held(
    job_id: int, held: threading.Event, release: threading.Event, gave_up: threading.Event
) -> None:
    """In its own connection: a submission's commit-time check on ``job_id``, held until
    ``release`` (or 20 s: then ``gave_up``)."""
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SELECT 1 FROM scheduling_job WHERE id = %s FOR KEY SHARE", [job_id])
            held.set()
            if not release.wait(20):
                gave_up.set()
    finally:
        connection.close()


def cycle_beside_a_key_share(admin, job_id: int) -> None:
    """Run one cycle while another connection holds a key-share lock on ``job_id``: the
    cycle must end while the lock is still held (a cycle that waited for it would end only
    once the holder gave up, 20 s later)."""
    held, release, gave_up = threading.Event(), threading.Event(), threading.Event()
    other = threading.Thread(target=key_share_held, args=(job_id, held, release, gave_up))
    other.start()
    assert held.wait(10)
    try:
        run_cycle_now(admin)
        assert not gave_up.is_set(), "the cycle waited for the submission's key-share lock"
    finally:
        release.set()
        other.join(30)


def test_a_launch_does_not_wait_for_a_submission_linking_to_the_job(demo):
    make_quotas_roomy()
    up = submit_job(demo["researcher"], JobRequest(name="up", queue="llm-experiment", gpus=8))
    cycle_beside_a_key_share(demo["admin"], up.pk)
    up.refresh_from_db()
    assert up.state == Job.State.RUNNING


def test_a_stop_at_the_time_limit_does_not_wait_for_one_either(demo):
    make_quotas_roomy()
    up = submit_job(demo["researcher"], JobRequest(
        name="up", queue="llm-experiment", gpus=8, time_limit_minutes=5,
        checkpoint_path="nfs://ckpt/up",
    ))  # fmt: skip
    run_cycle_now(demo["admin"])
    advance_clock(demo["admin"], 6 * 60)
    cycle_beside_a_key_share(demo["admin"], up.pk)
    up.refresh_from_db()
    assert up.state == Job.State.PREEMPTING and up.stop_reason == "time_limit"
