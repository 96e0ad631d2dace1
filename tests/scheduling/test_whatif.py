"""The what-if behind "would it start now, and when?" (scheduling.whatif, #15).

It is the engine's answer for a candidate built as a submission would be, it writes and
locks nothing, it never waits for a cycle in progress, and its snapshot is rebuilt when
the cluster changes (kept for a few seconds otherwise). The agreement with the next cycle
on a busy cluster is tests/trust/test_whatif_agrees.py.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from quotas.models import BusinessLine, Queue
from scheduling import whatif
from scheduling.clock import cluster_now_ts, to_datetime
from scheduling.cluster_lock import try_cluster_lock
from scheduling.cycle import run_cycle
from scheduling.models import Job, JobEvent, Node, SimulatorState
from scheduling.nodes.services import cordon_node
from scheduling.services import JobRequest, cancel_job, submit_job, submit_jobs
from scheduling.sim_services import advance_clock
from scheduling.sim_state import ReadOnlySimulatorStore

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_cache():
    whatif.clear_cache()
    yield
    whatif.clear_cache()


@pytest.fixture
def roomy(demo):
    """The 4-node x 8-GPU demo cluster with quotas far above it."""
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    return demo


def req(**kw) -> JobRequest:
    values = {"name": "cand", "queue": "llm-core", "gpus": 8, "sim_duration_minutes": 600}
    return JobRequest(**{**values, **kw})


def fill(user, n: int, **kw) -> list[Job]:
    return submit_jobs(user, [req(name=f"fill{i}", **kw) for i in range(n)])


def outcome(user, request: JobRequest) -> tuple[str, str]:
    """Submit, run the next cycle, and say what became of the job (in the what-if's terms)."""
    job = submit_job(user, request)
    run_cycle()
    job.refresh_from_db()
    return whatif.verdict_of(job)


# -- the answers the old guess got wrong ---------------------------------------------------------


def test_a_job_that_starts_at_once_is_not_told_of_work_waiting_for_other_quotas(roomy):
    """Seen live: "620 waiting jobs ahead" for a job that then started at once. Work of the
    same tier waiting for *its own* line's quota is not ahead of this one."""
    BusinessLine.objects.filter(name="multimodal").update(quota_gpus=8)
    fill(roomy["workload"], 12, queue="multimodal-core")
    run_cycle()
    assert Job.objects.filter(state="pending", pending_code="QUOTA_EXCEEDED").count() == 11
    answer = whatif.what_if(roomy["researcher"], req())
    assert answer.starts and answer.code == "" and "waiting" not in answer.message
    assert answer.estimated_start == answer.now and answer.estimated_start_text == "now"
    assert outcome(roomy["researcher"], req()) == ("fits_now", "")


def test_quota_comes_before_free_gpus_as_the_engine_says(roomy):
    """Seen live: "not enough free GPUs" for a job the scheduler then called QUOTA_EXCEEDED.
    Here both are short; the answer is the engine's code, and the cycle's."""
    BusinessLine.objects.filter(name="llm").update(quota_gpus=32)
    fill(roomy["researcher"], 4)
    run_cycle()
    assert Job.objects.filter(state="running").count() == 4
    answer = whatif.what_if(roomy["researcher"], req())
    assert (answer.status, answer.code) == ("would_wait", "QUOTA_EXCEEDED")
    assert "llm holds 32 of its 32 GPU quota" in answer.message
    assert answer.details["requested_gpus"] == 8 and answer.remedy
    assert outcome(roomy["researcher"], req()) == ("would_wait", "QUOTA_EXCEEDED")


def test_a_quota_swap_is_said_and_the_cycle_does_it(roomy):
    """llm's quota of 8 is held by its own experiment; a core job (not preemptible) would
    start within quota on idle GPUs with the experiment as the borrowed part (#19)."""
    BusinessLine.objects.filter(name="llm").update(quota_gpus=8)
    (experiment,) = fill(roomy["researcher"], 1, queue="llm-experiment")
    run_cycle()
    answer = whatif.what_if(roomy["researcher"], req())
    assert answer.starts and answer.code == ""
    assert "within its quota: 1 preemptible job of its queue" in answer.message
    assert outcome(roomy["researcher"], req()) == ("fits_now", "")
    experiment.refresh_from_db()
    assert experiment.state == "running" and experiment.borrowed


def test_a_job_blocked_for_gpus_gets_the_engines_estimated_start_and_place(roomy):
    fill(roomy["lead"], 4, queue="llm-core", estimated_runtime_minutes=120)
    run_cycle()
    answer = whatif.what_if(roomy["researcher"], req())
    assert answer.code == "INSUFFICIENT_GPUS" and answer.position == 1
    assert answer.estimated_start is not None and answer.estimated_start > answer.now
    assert answer.estimated_start_text.endswith("(in 2 h)"), answer.estimated_start_text
    job = submit_job(roomy["researcher"], req())
    run_cycle()
    job.refresh_from_db()
    assert job.estimated_start.timestamp() == answer.estimated_start
    assert (job.pending_code, job.queue_position) == (answer.code, answer.position)


def test_a_request_the_cluster_can_never_hold_is_refused_as_its_submission_would_be(roomy):
    never = req(gpus=8, gpu_memory_gb=141)
    with pytest.raises(ValidationError) as asked:
        whatif.what_if(roomy["researcher"], never)
    with pytest.raises(ValidationError) as submitted:
        submit_job(roomy["researcher"], never)
    assert asked.value.message_dict == submitted.value.message_dict
    assert "141" in str(asked.value.message_dict)


def test_ties_on_a_paused_clock_break_as_the_cycle_breaks_them(roomy):
    """The simulator's clock stands still: jobs submitted now share one instant, stored to
    the microsecond. The candidate is stamped the same way, so it queues behind them (by
    id) as its submission will, not ahead (a float a fraction of a microsecond earlier)."""
    fill(roomy["lead"], 4)
    run_cycle()
    for _ in range(50):  # a clock reading that the database rounds up
        now = cluster_now_ts()
        if to_datetime(now).timestamp() > now:
            break
        advance_clock(roomy["admin"], 0.37)
    else:
        pytest.fail("no clock reading that rounds up")
    # the researcher's own (people of a line take turns: behind the lead's jobs, the
    # researcher's candidate, holding nothing, would go first)
    fill(roomy["researcher"], 2)
    answer = whatif.what_if(roomy["researcher"], req())
    assert answer.position == 3, answer
    job = submit_job(roomy["researcher"], req())
    run_cycle()
    job.refresh_from_db()
    assert (job.pending_code, job.queue_position) == (answer.code, 3)


# -- the candidate is a submission --------------------------------------------------------------


def test_the_candidate_gets_the_defaults_a_submission_gets(roomy):
    """Tier and preemptibility come from the service's rules: an experiment is preemptible
    by default, so beyond its queue's quota it borrows; not preemptible, it waits."""
    Queue.objects.filter(name="llm-experiment").update(quota_gpus=8)
    borrower = whatif.what_if(roomy["researcher"], req(queue="llm-experiment", gpus=16))
    assert borrower.starts and borrower.borrowed and "borrowed" in borrower.message
    firm = whatif.what_if(
        roomy["researcher"], req(queue="llm-experiment", gpus=16, preemptible=False)
    )
    assert firm.code == "QUOTA_EXCEEDED"
    # A core queue at a lower tier: the tier's default (preemptible) applies too.
    Queue.objects.filter(name="llm-core").update(quota_gpus=8)
    lowered = whatif.what_if(roomy["researcher"], req(queue="llm-core", gpus=16, tier="finetune"))
    assert lowered.starts and lowered.borrowed


def test_a_request_the_service_refuses_is_refused_the_same_way(roomy):
    bad = req(queue="llm-finetune", tier="urgent")
    with pytest.raises(ValidationError) as asked:
        whatif.what_if(roomy["researcher"], bad)
    with pytest.raises(ValidationError) as submitted:
        submit_job(roomy["researcher"], bad)
    assert asked.value.message_dict == submitted.value.message_dict
    with pytest.raises(ValidationError, match="may not submit"):
        whatif.what_if(roomy["researcher2"], req(queue="llm-core"))


def test_a_job_after_others_that_have_not_succeeded_would_wait_for_them(roomy):
    """``after``: the what-if answers as the loop does (``DEPENDENCY``, the same message and
    estimated start) while a job named has not succeeded, and as for any job once all did."""
    (first,) = fill(roomy["researcher"], 1, estimated_runtime_minutes=60)
    asked = req(after=(first.pk,))
    answer = whatif.what_if(roomy["researcher"], asked)
    assert (answer.status, answer.code) == ("would_wait", "DEPENDENCY")
    assert f"job {first.pk} (fill0)" in answer.message and "waiting to start" in answer.message
    assert answer.estimated_start is None and answer.estimated_start_text.startswith("unknown")
    run_cycle()  # the first job starts, with a predicted end
    answer = whatif.what_if(roomy["researcher"], asked)
    job = submit_job(roomy["researcher"], asked)
    run_cycle()
    job.refresh_from_db()
    assert (answer.code, answer.message) == (job.pending_code, job.pending_message)
    assert answer.estimated_start == job.estimated_start.timestamp()
    Job.objects.filter(pk=first.pk).update(state=Job.State.SUCCEEDED)
    assert whatif.what_if(roomy["researcher"], asked).starts  # the cluster has room
    # an id the researcher may not name is refused as the submission refuses it
    with pytest.raises(ValidationError, match="unknown job"):
        whatif.what_if(roomy["researcher"], req(after=(first.pk + 1000,)))


# -- a what-if only -----------------------------------------------------------------------------

WRITES = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|TRUNCATE|LOCK)\b|FOR (NO KEY )?UPDATE|FOR (KEY )?SHARE|advisory",
    re.IGNORECASE,
)


def test_it_writes_nothing_and_locks_nothing(roomy):
    fill(roomy["lead"], 3, queue="llm-experiment")
    run_cycle()
    sim_before = SimulatorState.objects.values_list("virtual_now", "saved_wall", "state").get()
    counts = (Job.objects.count(), JobEvent.objects.count(), Node.objects.count())
    with CaptureQueriesContext(connection) as queries:
        whatif.what_if(roomy["researcher"], req(gpus=16))
        whatif.what_if(roomy["researcher"], req(gpus=4, queue="llm-experiment"))
    statements = [q["sql"] for q in queries.captured_queries]
    assert statements and not [s for s in statements if WRITES.search(s)], statements
    assert SimulatorState.objects.values_list("virtual_now", "saved_wall", "state").get() == (
        sim_before
    )
    assert (Job.objects.count(), JobEvent.objects.count(), Node.objects.count()) == counts
    with pytest.raises(RuntimeError, match="never saves"):
        ReadOnlySimulatorStore().save(None)  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_a_cycle_in_progress_does_not_hold_it_up(roomy):
    """Another connection holds what a cycle holds (the cluster lock, the simulator's row,
    every job and node row); the what-if still answers at once, refusing to wait on any lock."""
    fill(roomy["lead"], 2, queue="llm-experiment")
    run_cycle()
    holding, release = threading.Event(), threading.Event()

    def cycle_in_progress() -> None:
        try:
            with transaction.atomic():
                assert try_cluster_lock()
                list(SimulatorState.objects.select_for_update())
                list(Job.objects.select_for_update())
                list(Node.objects.select_for_update())
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    worker = threading.Thread(target=cycle_in_progress)
    worker.start()
    try:
        assert holding.wait(30)
        with connection.cursor() as cur:
            cur.execute("SET lock_timeout = '1s'")  # waiting on any lock would fail the test
        t0 = time.monotonic()
        answer = whatif.what_if(roomy["researcher"], req(gpus=8))
        assert answer.starts and time.monotonic() - t0 < 10
        with connection.cursor() as cur:
            cur.execute("SET lock_timeout = 0")
    finally:
        release.set()
        worker.join(30)


# -- the snapshot cache -------------------------------------------------------------------------


def test_the_snapshot_is_kept_while_nothing_changes_and_rebuilt_when_something_does(
    roomy, monkeypatch
):
    researcher, admin = roomy["researcher"], roomy["admin"]
    run_cycle()
    first = whatif.what_if(researcher, req())
    assert not first.cached and first.snapshot_ms > 0
    again = whatif.what_if(researcher, req(gpus=4, queue="llm-finetune"))
    assert again.cached and again.snapshot_ms == 0 and again.cycle_id == first.cycle_id

    def rebuilt() -> bool:
        return not whatif.what_if(researcher, req()).cached

    job = submit_job(roomy["lead"], req(name="other"))
    assert rebuilt(), "a new submission"
    cancel_job(roomy["lead"], job.pk)
    assert rebuilt(), "a cancel"
    run_cycle()
    assert rebuilt(), "a new cycle"
    cordon_node(admin, Node.objects.first().name, "maintenance")
    assert rebuilt(), "a node action (the paused clock stamps it like the last one)"
    advance_clock(admin, 600)
    assert rebuilt(), "the simulator's clock moved"
    BusinessLine.objects.filter(name="llm").update(quota_gpus=8)
    assert whatif.what_if(researcher, req(gpus=16)).code == "QUOTA_EXCEEDED", "a contract"
    assert not rebuilt()
    monkeypatch.setattr(whatif, "CACHE_SECONDS", 0.0)
    assert rebuilt(), "older than CACHE_SECONDS"


def test_a_cached_snapshot_still_answers_for_the_clock_of_the_question(roomy):
    fill(roomy["lead"], 4, queue="llm-core", estimated_runtime_minutes=120)
    run_cycle()
    first = whatif.what_if(roomy["researcher"], req())
    second = whatif.what_if(roomy["researcher"], req())
    assert second.cached and second.now >= first.now
    assert (second.code, second.estimated_start) == (first.code, first.estimated_start)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "under a minute"), (29, "under a minute"), (31, "1 min"), (7199.9, "2 h"),
     (5400, "1 h 30 min"), (47 * 3600, "47 h"), (200_000, "2 d 7 h"), (3 * 86400, "3 d")],
)  # fmt: skip
def test_durations_read_as_words(seconds, text):
    assert whatif.duration_text(seconds) == text


def test_a_start_reads_as_a_date_and_how_far_off():
    now = 1_796_000_000.0  # 2026-11-30 00:53:20 UTC
    assert whatif.when_text(now, now) == "now"
    assert whatif.when_text(now + 5400, now) == "2026-11-30 02:23 UTC (in 1 h 30 min)"
