"""Value types: parsing, defaults and presets the rest of the product relies on."""

from __future__ import annotations

import dataclasses

import pytest

from scheduling.engine import PendingJob, PolicyConfig, QueueView, Tier


@pytest.mark.parametrize(
    "text, tier",
    [
        ("urgent", Tier.URGENT),
        ("core", Tier.CORE),
        ("Finetune", Tier.FINETUNE),
        (" experiment ", Tier.EXPERIMENT),
        (2, Tier.CORE),
        (Tier.URGENT, Tier.URGENT),
    ],
)
def test_tier_parse(text, tier):
    assert Tier.parse(text) is tier


def test_tier_parse_rejects_unknown():
    with pytest.raises(ValueError, match="unknown tier"):
        Tier.parse("vip")


def test_tier_order_and_label():
    assert Tier.URGENT > Tier.CORE > Tier.FINETUNE > Tier.EXPERIMENT
    assert Tier.CORE.label == "core"


def test_urgent_queues_preempt_lower_tiers_by_default_others_nothing():
    assert QueueView("u", "l", "urgent").preempts_tiers == {
        Tier.EXPERIMENT,
        Tier.FINETUNE,
        Tier.CORE,
    }
    assert QueueView("c", "l", Tier.CORE).preempts_tiers == frozenset()
    assert QueueView("c", "l", Tier.CORE, preempts_tiers={0}).preempts_tiers == {Tier.EXPERIMENT}


def test_jobs_below_core_are_preemptible_by_default():
    assert PendingJob(1, "q", "l", "finetune", 1).preemptible is True
    assert PendingJob(1, "q", "l", "core", 1).preemptible is False
    assert PendingJob(1, "q", "l", "core", 1, preemptible=True).preemptible is True


def test_types_are_frozen():
    job = PendingJob(1, "q", "l", "core", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.gpus = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "name, backfill, borrowing, preemption, fifo",
    [
        ("fifo", False, False, False, True),
        ("priority", False, False, False, False),
        ("backfill", True, False, False, False),
        ("full", True, True, True, False),
    ],
)
def test_policy_presets(name, backfill, borrowing, preemption, fifo):
    p = PolicyConfig.preset(name)
    assert (p.backfill, p.borrowing, p.preemption, p.strict_fifo) == (
        backfill,
        borrowing,
        preemption,
        fifo,
    )
    assert PolicyConfig.preset(name, grace_seconds=5).grace_seconds == 5


def test_unknown_preset_is_rejected():
    with pytest.raises(ValueError, match="unknown policy preset"):
        PolicyConfig.preset("magic")


def test_default_policy_matches_the_contract():
    p = PolicyConfig()
    assert (p.backfill, p.borrowing, p.preemption, p.strict_fifo) == (True, True, True, False)
    assert p.grace_seconds == 300 and p.demote_after == 3
    assert p.default_runtime_s >= 6 * 3600
