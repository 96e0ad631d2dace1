"""The replay's online predictor answers exactly as the engine's HistoryPredictor would."""

from __future__ import annotations

import dataclasses
import random

from replay.predictor import OnlinePredictor
from scheduling.engine.predict import FinishedJob, HistoryPredictor

MODELS = ("resnet50", "bert-base", "llama-7b", None)
QUEUES = ("vc-a", "vc-b")


def test_online_predictions_equal_a_rebuilt_history_predictor():
    rng = random.Random(7)
    online = OnlinePredictor()
    history: list[FinishedJob] = []
    for i in range(600):
        job = FinishedJob(
            owner=rng.choice(("", "ann")),
            model_name=rng.choice(MODELS),
            queue=rng.choice(QUEUES),
            gpus=rng.choice((1, 2, 4, 8, 16)),
            runtime_s=rng.lognormvariate(8, 1.5),
            finished_at=float(i),
        )
        history.append(job)
        finished = dataclasses.asdict(job)
        del finished["finished_at"]  # the online predictor is fed in completion order
        online.add(**finished)
        if i % 37 == 0 or i > 580:
            rebuilt = HistoryPredictor(history)
            for owner in ("", "ann", "bob"):
                for model in MODELS:
                    for queue in (*QUEUES, "vc-c"):
                        for gpus in (1, 3, 8, 32):
                            kw = dict(owner=owner, model_name=model, queue=queue, gpus=gpus)
                            assert online.predict(**kw) == rebuilt.predict(**kw), (i, kw)


def test_without_history_it_falls_back_to_the_estimate_then_the_default():
    p = OnlinePredictor(default_s=1234.0)
    assert p.predict(owner="", model_name="x", queue="q", gpus=1).seconds == 1234.0
    assert p.predict(owner="", model_name="x", queue="q", gpus=1, estimate_s=60).seconds == 60
    for _ in range(3):
        p.add(owner="", model_name="x", queue="q", gpus=1, runtime_s=100.0)
    got = p.predict(owner="", model_name="x", queue="q", gpus=1)
    assert got.seconds == 100.0 and got.source.startswith("history:")
