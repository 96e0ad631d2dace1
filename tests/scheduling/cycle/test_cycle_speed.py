"""What makes the cycle fast without changing what it does (#16): its phases are timed, the
garbage collector rests while it runs, predictions are asked once per kind of job, and
the snapshot reads times as epoch seconds computed by PostgreSQL, to the microsecond."""

from __future__ import annotations

import gc
import weakref
from datetime import UTC, datetime

import pytest
from django.db import connection

from scheduling.cycle import run, run_cycle
from scheduling.cycle.phases import PHASES, CycleTrace
from scheduling.engine import types as et
from scheduling.engine.predict import FinishedJob, HistoryPredictor
from scheduling.models import Job
from scheduling.prediction import RuntimePredictor
from scheduling.snapshot import EPOCH_FIELDS, JOB_FIELDS, Epoch, active_job_rows, build_snapshot
from tests.scheduling.cycle.conftest import T0

pytestmark = pytest.mark.django_db


@pytest.fixture
def on_fake(monkeypatch, backend):
    monkeypatch.setattr(run, "get_backend", lambda wall_now=None: backend)
    return backend


def test_a_traced_cycle_reports_every_phase_and_the_snapshot_it_planned(on_fake, make_job):
    make_job(gpus=8)
    make_job(gpus=16)
    trace = CycleTrace()
    record = run_cycle(trace=trace)
    assert set(trace.phases) <= set(PHASES) and set(trace.cpu) == set(trace.phases)
    assert {"lock", "observe", "reconcile", "snapshot", "plan", "check", "verdicts"} <= set(
        trace.phases
    )
    assert all(ms >= 0 for ms in trace.phases.values())
    assert trace.snapshot is not None and trace.now == on_fake.now
    assert {j.gpus for j in trace.snapshot.pending} == {8, 16}
    # The summary row keeps its three figures, made of the phases.
    assert record.plan_ms == pytest.approx(
        trace.phases["snapshot"] + trace.phases["plan"] + trace.phases["check"]
    )
    during = sum(ms for name, ms in trace.phases.items() if name not in ("record", "collect"))
    assert record.duration_ms >= during
    assert trace.phases["collect"] >= 0, "the collection after the commit is timed apart"


def test_a_sweep_is_traced_without_a_snapshot(on_fake):
    trace = CycleTrace()
    run_cycle(kind="sweep", trace=trace)
    assert trace.snapshot is None and "plan" not in trace.phases


def test_the_collector_rests_during_a_cycle_and_is_back_after(on_fake, make_job, monkeypatch):
    make_job()
    seen = []
    reconcile = run.reconcile
    monkeypatch.setattr(run, "reconcile", lambda cycle: seen.append(gc.isenabled()) or
                        reconcile(cycle))  # fmt: skip
    assert gc.isenabled()
    run_cycle()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        run_cycle()
        assert not gc.isenabled(), "a collector paused by the caller stays paused"
    finally:
        gc.enable()


class Knot:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.django_db(transaction=True)
def test_the_garbage_of_a_cycle_is_collected_once_it_has_committed(on_fake, make_job, monkeypatch):
    make_job()
    knots, collections = [], []
    reconcile, collect = run.reconcile, gc.collect

    def knotted(cycle):
        knots.extend(weakref.ref(Knot()) for _ in range(10))
        return reconcile(cycle)

    def watched(generation: int = 2) -> int:
        collections.append((generation, connection.in_atomic_block))
        return collect(generation)

    monkeypatch.setattr(run, "reconcile", knotted)
    monkeypatch.setattr(gc, "collect", watched)
    run_cycle()
    assert collections == [(0, False)], "one young collection, after the commit"
    assert knots and all(k() is None for k in knots)


def test_the_collector_is_back_after_a_cycle_that_failed(on_fake, make_job, monkeypatch):
    make_job()
    monkeypatch.setattr(run, "request_stops", lambda cycle: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run_cycle()
    assert gc.isenabled()


class CountingHistory(HistoryPredictor):
    """The engine's predictor, counting how often it is asked."""

    asked = 0

    def predict(self, **kwargs):  # type: ignore[override]
        CountingHistory.asked += 1
        return super().predict(**kwargs)


def test_a_prediction_is_asked_once_per_kind_of_job_with_the_same_answers():
    runs = [FinishedJob(owner="ann", model_name="llama", queue="q", gpus=8, runtime_s=600.0 * k,
                        finished_at=float(k)) for k in range(1, 11)]  # fmt: skip
    memoized = RuntimePredictor(CountingHistory(runs))
    plain = HistoryPredictor(runs)
    rows = [{"owner__username": owner, "model_name": model, "gpus": gpus,
             "estimated_runtime_minutes": minutes}
            for owner in ("ann", "bob") for model in ("llama", "")
            for gpus in (8, 16) for minutes in (None, 30)] * 5  # fmt: skip
    CountingHistory.asked = 0
    got = [memoized.predict_row(r, "q") for r in rows]
    assert CountingHistory.asked == len(rows) // 5
    assert got == [
        plain.predict(owner=r["owner__username"], model_name=r["model_name"] or None, queue="q",
                      gpus=r["gpus"], estimate_s=r["estimated_runtime_minutes"] and
                      r["estimated_runtime_minutes"] * 60.0).seconds
        for r in rows
    ]  # fmt: skip


def test_the_predictor_of_a_process_shares_its_answers_until_it_is_rebuilt(monkeypatch):
    from scheduling import prediction

    monkeypatch.setattr(prediction, "_cache", {})
    first, second = RuntimePredictor.from_history(), RuntimePredictor.from_history()
    assert first.memo is second.memo
    monkeypatch.setattr(prediction, "REFRESH_S", -1.0)
    assert RuntimePredictor.from_history().memo is not first.memo


class FixedPrediction(RuntimePredictor):
    """Every job takes ``seconds``, whatever it is and however long it has run."""

    def __init__(self, seconds: float) -> None:
        super().__init__(HistoryPredictor())
        self.seconds = seconds

    def predict_row(self, row: dict, queue_name: str, elapsed_s: float = 0.0) -> float:
        return self.seconds


@pytest.mark.parametrize("micro", [0, 1, 123456, 499999, 500000, 999999])
def test_times_reach_the_engine_to_the_microsecond(make_job, running_job, backend, micro):
    submitted = datetime.fromtimestamp(T0 - 3600, UTC).replace(microsecond=micro)
    started = datetime.fromtimestamp(T0 - 600, UTC).replace(microsecond=(micro * 7) % 10**6)
    checkpoint = datetime.fromtimestamp(T0 - 60, UTC).replace(microsecond=(micro * 3) % 10**6)
    deadline = datetime.fromtimestamp(T0 + 300, UTC).replace(microsecond=(micro * 9) % 10**6)
    make_job(submitted_at=submitted)
    running_job(started_at=started, last_checkpoint_at=checkpoint, preempt_deadline=deadline,
                state="preempting", submitted_at=submitted)  # fmt: skip
    snap = build_snapshot(backend.observe(), et.PolicyConfig(), FixedPrediction(3600.0)).snapshot
    (pending,) = snap.pending
    (held,) = snap.running
    assert pending.submitted_at == submitted.timestamp()
    assert (held.started_at, held.last_checkpoint_at, held.preempt_deadline) == (
        started.timestamp(), checkpoint.timestamp(), deadline.timestamp()
    )  # fmt: skip


def test_the_snapshot_reads_its_rows_as_values_would(make_job, running_job):
    make_job(name="a", pending_code="TOPOLOGY", pending_message="scattered",
             pending_details={"where": "r1: 3", "free": [1, 2.5], "n": None, "é": True},
             queue_position=3, estimated_start=datetime.fromtimestamp(T0 + 60.5, UTC),
             model_name="llama", estimated_runtime_minutes=30)  # fmt: skip
    make_job(name="b", gpus_per_node=None, gpu_memory_gb=40, rdma=True)
    running_job(last_checkpoint_at=datetime.fromtimestamp(T0 - 60, UTC), borrowed=True)
    make_job(name="done", state="succeeded")
    epochs = {f"{name}_ts": Epoch(name) for name in EPOCH_FIELDS}
    expected = list(Job.objects.filter(state__in=Job.ACTIVE_STATES).values(*JOB_FIELDS, **epochs))
    assert list(active_job_rows().values()) == expected and len(expected) == 3


def test_the_snapshot_decodes_each_distinct_verdict_once(make_job):
    """Waiting jobs held by the same cause say the same: one decoded dict for equal texts."""
    same = {"queue": "q", "short_gpus": 8, "room": [1, 2]}
    for name in ("a", "b", "c"):
        make_job(name=name, pending_code="QUOTA_EXCEEDED", pending_details=dict(same))
    make_job(name="d", pending_code="TOPOLOGY", pending_details={"where": "r1"})
    make_job(name="e")  # no verdict yet: {}
    by_name = {r["name"]: r["pending_details"] for r in active_job_rows().values()}
    assert by_name == {"a": same, "b": same, "c": same, "d": {"where": "r1"}, "e": {}}
    assert by_name["a"] is by_name["b"] is by_name["c"], "one decoding for one text"
    assert by_name["d"] is not by_name["a"]


def test_the_snapshot_rows_come_in_the_model_order_with_exact_estimated_starts(make_job):
    """Sorted in Python as ``Job.Meta.ordering`` sorts (equal submissions: highest id first,
    whatever order the server sends them in); estimated starts read as epochs come back as
    the stored microsecond."""
    same = datetime.fromtimestamp(T0 - 300, UTC).replace(microsecond=123457)
    for i, pk in enumerate((500, 100, 900, 300, 700, 200)):
        micro = (pk * 7919) % 10**6
        make_job(id=pk, name=f"j{i}", submitted_at=same if i < 4 else same.replace(microsecond=micro),
                 estimated_start=datetime.fromtimestamp(T0 + 3600 * i, UTC).replace(
                     microsecond=(micro * 13) % 10**6))  # fmt: skip
    make_job(name="none", estimated_start=None)
    epochs = {f"{name}_ts": Epoch(name) for name in EPOCH_FIELDS}
    expected = list(Job.objects.filter(state__in=Job.ACTIVE_STATES).values(*JOB_FIELDS, **epochs))
    got = list(active_job_rows().values())
    assert [r["id"] for r in expected if r["id"] in (100, 300, 500, 900)] == [900, 500, 300, 100]
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    assert got == expected
    assert [r["estimated_start"] for r in got] == [r["estimated_start"] for r in expected]


def test_the_next_snapshot_reuses_what_did_not_change_and_rebuilds_the_rest(
    make_job, backend, cluster
):
    """Unchanged rows and waiting jobs come back as the same objects; a changed row, queue,
    line or prediction gives a new view, equal to one built afresh."""
    from dataclasses import replace

    from quotas.models import BusinessLine

    kept, verdict, moved = make_job(name="kept"), make_job(name="verdict"), make_job(name="moved")
    prediction = FixedPrediction(3600.0)

    def views() -> dict[str, et.PendingJob]:
        ctx = build_snapshot(backend.observe(), et.PolicyConfig(), prediction)
        return {ctx.jobs[p.id]["name"]: p for p in ctx.snapshot.pending}

    first = views()
    rows = active_job_rows()
    second = views()
    assert all(second[name] is first[name] for name in first), "nothing changed: all reused"
    assert active_job_rows()[kept.pk] is rows[kept.pk]

    Job.objects.filter(pk=verdict.pk).update(pending_code="TOPOLOGY", pending_details={"a": 1})
    other = BusinessLine.objects.create(name="cv", display_name="CV", quota_gpus=10)
    queue = cluster["queue"]
    queue.business_line = other
    queue.save()
    third = views()
    assert active_job_rows()[verdict.pk]["pending_details"] == {"a": 1}
    assert third["moved"] is not second["moved"] and third["moved"].line == "cv"
    assert third["moved"] == replace(second["moved"], line="cv")

    queue.business_line = BusinessLine.objects.get(name="llm")
    queue.save()
    views()
    prediction.seconds = 60.0
    fourth = views()
    assert {p.predicted_runtime_s for p in fourth.values()} == {60.0}
    assert fourth["kept"] == replace(first["kept"], predicted_runtime_s=60.0)
    assert moved.pk in {p.id for p in fourth.values()}
