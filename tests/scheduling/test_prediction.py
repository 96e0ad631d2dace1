"""The loop's runtime predictor (scheduling.prediction): job rows to the engine's history
predictor, finished jobs to history, and the once-a-minute rebuild."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling import prediction
from scheduling.engine.predict import DEFAULT_RUNTIME_S, FinishedJob, HistoryPredictor
from scheduling.prediction import RuntimePredictor, load_history


def history(n: int, runtime: float, **kw) -> list[FinishedJob]:
    base = {"owner": "ann", "model_name": "llama-7b", "queue": "llm-core", "gpus": 8}
    return [
        FinishedJob(runtime_s=runtime + i, finished_at=float(i), **{**base, **kw}) for i in range(n)
    ]


def row(**kw) -> dict:
    return {"owner__username": "ann", "model_name": "llama-7b", "gpus": 8,
            "estimated_runtime_minutes": None, **kw}  # fmt: skip


@pytest.mark.parametrize(
    "fields,seconds",
    [
        ({}, DEFAULT_RUNTIME_S),  # no history, no estimate: the conservative default
        ({"estimated_runtime_minutes": 90}, 5400.0),  # the user's estimate, in seconds
        ({"estimated_runtime_minutes": 0}, DEFAULT_RUNTIME_S),  # zero is no estimate
        ({"model_name": "", "owner__username": None}, DEFAULT_RUNTIME_S),
    ],
)
def test_without_history_a_row_falls_back_to_its_estimate_then_the_default(fields, seconds):
    assert RuntimePredictor(HistoryPredictor()).predict_row(row(**fields), "llm-core") == seconds


def test_history_of_the_same_owner_model_queue_and_size_wins_over_the_estimate():
    p = RuntimePredictor(HistoryPredictor(history(5, 1000.0)))
    predicted = p.predict_row(row(estimated_runtime_minutes=10), "llm-core")
    assert predicted == pytest.approx(1003.2), "p80 of 1000..1004"


def test_the_queue_name_is_the_one_passed_not_a_field_of_the_row():
    p = RuntimePredictor(HistoryPredictor(history(5, 1000.0, owner="bob", model_name=None)))
    assert p.predict_row(row(model_name=""), "llm-core") == pytest.approx(1003.2)
    other = p.predictor.predict(owner="ann", model_name=None, queue="other-queue", gpus=8)
    assert other.source == "history:global", "another queue: only the global level knows"


def test_a_blank_model_name_is_no_model_and_does_not_match_model_history():
    p = RuntimePredictor(HistoryPredictor(history(5, 1000.0, queue="q1")))
    assert p.predict_row(row(), "q2") == pytest.approx(1003.2), "owner + model, any queue"
    blank = p.predictor.predict(owner="ann", model_name=None, queue="q2", gpus=8)
    assert blank.source == "history:owner", "no model: the owner's own runs, not the model's"


def test_the_predictor_is_rebuilt_from_history_at_most_once_a_minute(monkeypatch):
    loads = []
    monkeypatch.setattr(prediction, "_cache", {})
    monkeypatch.setattr(prediction, "load_history", lambda: loads.append(1) or history(3, 60.0))
    clock = [500.0]
    monkeypatch.setattr(prediction.time, "monotonic", lambda: clock[0])
    first = RuntimePredictor.from_history()
    clock[0] += prediction.REFRESH_S
    second = RuntimePredictor.from_history()
    assert len(loads) == 1 and second.predictor is first.predictor
    clock[0] += 0.001
    third = RuntimePredictor.from_history()
    assert len(loads) == 2 and third.predictor is not first.predictor
    assert third.predict_row(row(), "llm-core") == pytest.approx(61.6)


@pytest.mark.django_db
def test_history_is_the_newest_successful_runs_with_progress(demo):
    from quotas.models import Queue
    from scheduling.models import Job

    queue = Queue.objects.get(name="llm-core")
    t0 = datetime(2026, 3, 1, tzinfo=UTC)

    def job(state: str, progress: float, finished: datetime | None, model: str = "m") -> Job:
        return Job.objects.create(
            name="j", owner=demo["researcher"], queue=queue, tier="core", gpus=4, state=state,
            progress_seconds=progress, finished_at=finished, model_name=model,
        )  # fmt: skip

    job("succeeded", 100.0, t0)
    job("succeeded", 300.0, t0 + timedelta(hours=2), model="")
    job("succeeded", 200.0, t0 + timedelta(hours=1))
    job("succeeded", 0.0, t0 + timedelta(hours=3))  # no progress: not a run
    job("failed", 50.0, t0 + timedelta(hours=4))
    job("cancelled", 50.0, t0 + timedelta(hours=5))
    job("running", 50.0, None)
    got = load_history()
    assert [(j.runtime_s, j.model_name) for j in got] == [(300.0, None), (200.0, "m"), (100.0, "m")]
    assert got[0] == FinishedJob(
        owner="researcher", model_name=None, queue="llm-core", gpus=4, runtime_s=300.0,
        finished_at=(t0 + timedelta(hours=2)).timestamp(),
    )  # fmt: skip


@pytest.mark.django_db
def test_history_is_capped_at_its_size(demo, monkeypatch):
    from quotas.models import Queue
    from scheduling.models import Job

    monkeypatch.setattr(prediction, "HISTORY_SIZE", 2)
    queue = Queue.objects.get(name="llm-core")
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    for i in range(4):
        Job.objects.create(name="j", owner=demo["researcher"], queue=queue, tier="core", gpus=1,
                           state="succeeded", progress_seconds=10.0 + i,
                           finished_at=t0 + timedelta(minutes=i))  # fmt: skip
    assert [j.runtime_s for j in load_history()] == [13.0, 12.0]


def test_no_run_is_predicted_longer_than_its_time_limit():
    """A time limit counts each run (``scheduling.time_limits``): a new job runs at most the
    limit, one restarted from a checkpoint at most the limit again (not the limit less its
    progress), and a run on ends by its start plus the limit."""
    p = RuntimePredictor(HistoryPredictor(history(5, 7200.0)))  # p80 about 2 h
    fields = {"progress_seconds": 0.0, "run_start_progress_seconds": 0.0,
              "last_checkpoint_at_ts": None}  # fmt: skip
    bounded = row(time_limit_minutes=30, **fields)
    free = row(time_limit_minutes=None, **fields)
    assert p.new_run_s(bounded, "llm-core") == 1800.0
    assert p.new_run_s(free, "llm-core") == pytest.approx(7203.2)
    assert p.waiting_s(bounded, "llm-core", 600.0) == 1800.0
    resumed = {**bounded, "progress_seconds": 3000.0}
    assert p.waiting_s(resumed, "llm-core", 600.0) == 1800.0, "the whole limit again"
    assert p.waiting_s({**free, "progress_seconds": 3000.0}, "llm-core", 600.0) == (
        pytest.approx(4203.2)
    )
    assert p.run_end(bounded, "llm-core", 1000.0, 1100.0) == 1000.0 + 1800.0
    assert p.run_end(free, "llm-core", 1000.0, 1100.0) == pytest.approx(1000.0 + 7203.2)
