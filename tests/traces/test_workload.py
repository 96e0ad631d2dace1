"""The seeded demo workload generator and its trace-derived profile."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest

from replay.traces import workload
from replay.traces.profile_table import WORKLOAD_PROFILE
from replay.traces.readers import MODEL_CATALOG, TIERS
from replay.traces.workload import (
    GeneratedJob,
    WorkloadGenerator,
    derive_workload_profile,
)

QUEUES = [
    ("llm-urgent", "urgent"),
    ("llm-core", "core"),
    ("rec-core", "core"),
    ("llm-finetune", "finetune"),
    ("mm-finetune", "finetune"),
    ("llm-exp", "experiment"),
    ("rec-exp", "experiment"),
    ("mm-exp", "experiment"),
]
DAY = 86400.0


@pytest.fixture(scope="module")
def sample() -> tuple[WorkloadGenerator, list[GeneratedJob]]:
    gen = WorkloadGenerator(seed=11)
    return gen, gen.backlog(QUEUES, 250_000)  # about 110k jobs


def test_shipped_profile_matches_derive():
    derived = derive_workload_profile()
    shipped = WORKLOAD_PROFILE
    assert derived["jobs"] == shipped["jobs"] == 68_503 + 69_351
    for t in TIERS:
        assert derived["tier_mix"][t] == pytest.approx(shipped["tier_mix"][t], abs=1e-4)
        d, s = derived["tiers"][t], shipped["tiers"][t]
        assert d["jobs"] == s["jobs"]
        assert d["size_mix"].keys() == s["size_mix"].keys()
        for g in d["size_mix"]:
            assert d["size_mix"][g] == pytest.approx(s["size_mix"][g], abs=1e-4)
        assert len(d["duration_quantiles"]) == len(s["duration_quantiles"])
        for (qd, xd), (qs, xs) in zip(
            d["duration_quantiles"], s["duration_quantiles"], strict=True
        ):
            assert qd == qs
            assert xd == pytest.approx(xs, abs=1)


def test_profile_is_plausible():
    assert sum(WORKLOAD_PROFILE["tier_mix"].values()) == pytest.approx(1.0, abs=1e-3)
    for t in TIERS:
        spec = WORKLOAD_PROFILE["tiers"][t]
        assert sum(spec["size_mix"].values()) == pytest.approx(1.0, abs=1e-3)
        assert all(int(g) <= 8 or int(g) % 8 == 0 for g in spec["size_mix"])
        xs = [x for _, x in spec["duration_quantiles"]]
        assert xs == sorted(xs)
    median = {t: WORKLOAD_PROFILE["tiers"][t]["duration_quantiles"][7][1] for t in TIERS}
    assert median["core"] > median["finetune"] > median["experiment"]


def test_same_seed_same_jobs_and_slicing_does_not_matter():
    a, b = WorkloadGenerator(seed=5), WorkloadGenerator(seed=5)
    one_go = a.next_jobs(1000.0, 3600.0, QUEUES)
    sliced = [j for k in range(60) for j in b.next_jobs(1000.0 + 60 * k, 60.0, QUEUES)]
    assert one_go and one_go == sliced
    assert WorkloadGenerator(seed=5).backlog(QUEUES, 5000) == WorkloadGenerator(seed=5).backlog(
        QUEUES, 5000
    )


def test_different_seeds_differ():
    a = WorkloadGenerator(seed=1).next_jobs(0.0, 3600.0, QUEUES)
    b = WorkloadGenerator(seed=2).next_jobs(0.0, 3600.0, QUEUES)
    assert [(j.queue, j.gpus, j.duration_s) for j in a] != [
        (j.queue, j.gpus, j.duration_s) for j in b
    ]


def test_tier_mix_matches_profile(sample):
    gen, jobs = sample
    counts = Counter(j.tier for j in jobs)
    total = sum(gen.tier_mix.values())
    for t in TIERS:
        assert counts[t] / len(jobs) == pytest.approx(gen.tier_mix[t] / total, abs=0.01)


def test_size_mix_per_tier_matches_profile(sample):
    gen, jobs = sample
    for t in TIERS:
        sizes = Counter(j.gpus for j in jobs if j.tier == t)
        n = sum(sizes.values())
        for g, p in gen.size_mix[t]:
            assert sizes[g] / n == pytest.approx(p, abs=0.015), (t, g)
    # Without scaling, the mix is the profile's own.
    plain = WorkloadGenerator(seed=3, multi_node_scale=1)
    for t in TIERS:
        assert dict(plain.size_mix[t]) == pytest.approx(
            {int(g): p for g, p in WORKLOAD_PROFILE["tiers"][t]["size_mix"].items()}, abs=1e-3
        )


def test_duration_medians_match_profile(sample):
    _, jobs = sample
    for t in TIERS:
        median = statistics.median(j.duration_s for j in jobs if j.tier == t)
        expected = max(WORKLOAD_PROFILE["tiers"][t]["duration_quantiles"][7][1], 60)
        assert median == pytest.approx(expected, rel=0.1), t


def test_job_shapes(sample):
    _, jobs = sample
    assert {j.gpus for j in jobs} >= {1, 2, 4, 8, 64, 128, 256}
    for j in jobs:
        assert 1 <= j.gpus <= 256
        if j.gpus > 8:
            assert j.gpus % 8 == 0 and j.gpus_per_node == 8 and j.rdma
        else:
            assert j.gpus_per_node is None and not j.rdma
        assert j.model_name in MODEL_CATALOG
        assert j.gpu_memory_gb in (None, 32, 40, 80)
        assert 60 <= j.duration_s <= 7 * DAY
        assert j.checkpoint_interval_minutes in (30, 60, 120)
        if j.tier == "experiment":
            assert j.preemptible
        if j.tier == "urgent":
            assert not j.preemptible
    assert len({j.name for j in jobs}) == len(jobs)
    big = [j for j in jobs if j.gpus >= 64]
    assert Counter(j.model_name for j in big).most_common(1)[0][0] == "llama-70b"


def test_arrival_rate_keeps_a_10k_gpu_cluster_busy(sample):
    gen, jobs = sample
    assert gen.rate_per_s * gen.mean_gpu_seconds == pytest.approx(1.05 * 10_000)
    # The analytic mean matches the sampled jobs.
    mean = sum(j.gpus * j.duration_s for j in jobs) / len(jobs)
    assert mean == pytest.approx(gen.mean_gpu_seconds, rel=0.1)
    # Arrivals over one day: Poisson count close to the rate.
    day = WorkloadGenerator(seed=11).next_jobs(0.0, DAY, QUEUES)
    expected = gen.rate_per_s * DAY
    assert abs(len(day) - expected) < 4 * expected**0.5
    # A heavier load asks for proportionally more arrivals.
    assert WorkloadGenerator(seed=11, load=2.1).rate_per_s == pytest.approx(2 * gen.rate_per_s)


def test_queue_skew_puts_some_queues_over_their_share(sample):
    _, jobs = sample
    exp = Counter(j.queue for j in jobs if j.tier == "experiment")
    top, second, third = (n for _, n in exp.most_common(3))
    assert top > 1.7 * second and second > 1.3 * third  # Zipf: 1, 1/2, 1/3
    uniform = WorkloadGenerator(seed=11, queue_skew=0.0).backlog(QUEUES, 50_000)
    exp = Counter(j.queue for j in uniform if j.tier == "experiment")
    assert max(exp.values()) < 1.2 * min(exp.values())


def test_only_the_given_tiers_are_generated():
    gen = WorkloadGenerator(seed=4)
    jobs = gen.backlog([("a", "core"), ("b", "experiment")], 20_000)
    assert {j.tier for j in jobs} == {"core", "experiment"}
    assert {j.queue for j in jobs} == {"a", "b"}
    with pytest.raises(ValueError):
        gen.next_jobs(0.0, 60.0, [("x", "premium")])
    with pytest.raises(ValueError):
        gen.next_jobs(0.0, 60.0, [])


def test_no_burst_after_a_gap():
    gen = WorkloadGenerator(seed=9)
    gen.next_jobs(0.0, 60.0, QUEUES)
    later = gen.next_jobs(30 * DAY, 60.0, QUEUES)
    assert len(later) < gen.rate_per_s * 60 + 6 * (gen.rate_per_s * 60) ** 0.5 + 5


def test_generator_does_not_read_traces(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the generator must not read traces at run time")

    monkeypatch.setattr(workload, "read_philly", boom)
    monkeypatch.setattr(workload, "read_itp", boom)
    assert WorkloadGenerator(seed=0).next_jobs(0.0, 600.0, QUEUES)
