"""Plans stay the same: the engine still makes the plans recorded in plan_corpus.json.

The fixture was written from the engine before victim selection was split out of
the planner's internals; any refactor must reproduce every plan exactly.
"""

from __future__ import annotations

from scheduling.engine import check_plan, plan

from .corpus import CASES, corpus_snapshot, fingerprint, load
from .strategies import NOW


def test_the_corpus_is_complete_and_exercises_preemption():
    recorded = load()
    assert len(recorded) == CASES
    with_victims = [f for f in recorded if f["preemptions"]]
    assert len(with_victims) >= 200
    # 445 victims before urgent jobs displaced their line's work instead of evicting it
    # for quota room (quota_swap.py), 387 since
    assert sum(len(f["preemptions"]) for f in with_victims) >= 350


def test_every_corpus_plan_is_unchanged_and_valid():
    changed = []
    for case, expected in enumerate(load()):
        s = corpus_snapshot(case)
        p = plan(s, NOW)
        assert check_plan(s, p) == [], case
        got = fingerprint(p)
        if got != expected:
            changed.append((case, expected["preemptions"], got["preemptions"]))
    assert changed == []
