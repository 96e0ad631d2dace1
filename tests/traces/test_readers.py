"""Trace readers against the vendored files in data/traces/ (never ../shared)."""

from __future__ import annotations

import hashlib
import lzma
from collections import Counter
from pathlib import Path

import pytest

from replay.traces import readers
from replay.traces.readers import (
    TIERS,
    TraceJob,
    infer_attributes,
    read_alibaba,
    read_itp,
    read_philly,
    read_philly_capacities,
    summarize_alibaba,
)

REPO = Path(__file__).resolve().parents[2]
DAY = 86400.0


@pytest.fixture(scope="module")
def philly() -> list[TraceJob]:
    return read_philly()


@pytest.fixture(scope="module")
def itp() -> list[TraceJob]:
    return read_itp()


def _is_sorted(jobs: list[TraceJob]) -> bool:
    keys = [(j.submit_s, j.id) for j in jobs]
    return keys == sorted(keys)


# --------------------------------------------------------------------------- vendoring


def test_vendored_files_live_in_the_repository():
    assert readers.DATA_DIR == REPO / "data" / "traces"
    for name in (
        "philly_pollux_jobs.csv.xz",
        "philly_vc_capacity.csv",
        "elasticflow_itp_jobs.csv.xz",
        "README.md",
        "LICENSE-elasticflow-traces-MIT.txt",
        "LICENSE-adaptdl-Apache-2.0.txt",
    ):
        assert (readers.DATA_DIR / name).is_file(), name
    # Not vendored: no licence upstream (see data/traces/README.md).
    assert not list(readers.DATA_DIR.glob("alibaba*"))


def test_philly_integrity_matches_the_documented_sha256():
    with lzma.open(readers.PHILLY_PATH) as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert digest == "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da"


def test_default_paths_point_inside_the_repository():
    for path in (
        readers.PHILLY_PATH,
        readers.PHILLY_CAPACITY_PATH,
        readers.ITP_PATH,
        readers.ALIBABA_PODS_PATH,
    ):
        assert path.resolve().parent == REPO / "data" / "traces", path


# --------------------------------------------------------------------------- Philly


def test_philly_capacities():
    caps = read_philly_capacities()
    assert len(caps) == 11
    assert sum(caps.values()) == 2816
    assert caps["6214e9"] == 512 and caps["103959"] == 64


def test_philly_default_window_row_counts(philly):
    # 68,510 rows are submitted in [2017-10-01, 2017-12-01); 7 of them sit on the
    # 4 tiny VCs, so the 11 VCs of the capacity file keep 68,503.
    assert len(philly) == 68_503
    assert len(read_philly(vcs="all")) == 68_510
    assert len(read_philly(start=None, end=None, vcs="all")) == 82_247


def test_philly_sorted_windowed_and_on_the_capacity_vcs(philly):
    assert _is_sorted(philly)
    assert philly[0].submit_s >= 0
    assert philly[-1].submit_s < 61 * DAY  # October + November
    assert {j.queue for j in philly} == set(read_philly_capacities())
    assert len({j.id for j in philly}) == len(philly)
    assert all(j.gpus >= 1 and j.duration_s > 0 for j in philly)


def test_philly_submit_time_of_the_readme_example(philly):
    # application_1506638472019_14199: submitted 2017-10-07 01:11:39, 193,256 s.
    expected = 6 * DAY + 1 * 3600 + 11 * 60 + 39
    matches = [j for j in philly if j.submit_s == expected and j.duration_s == 193256.0]
    assert [(j.queue, j.gpus) for j in matches] == [("ee9e8c", 8)]


def test_philly_custom_window_and_vcs():
    day = read_philly(start="2017-11-01", end="2017-11-02", vcs=["6214e9", "11cb48"])
    assert day and _is_sorted(day)
    assert all(0 <= j.submit_s < DAY for j in day)
    assert {j.queue for j in day} <= {"6214e9", "11cb48"}
    # Same jobs as the default window, shifted by 31 days.
    full = {j.id: j for j in read_philly(vcs=["6214e9", "11cb48"])}
    for j in day:
        assert full[j.id].submit_s == pytest.approx(j.submit_s + 31 * DAY)
        assert full[j.id].tier == j.tier  # mapping keyed by job id, not by window


def test_philly_reads_a_plain_csv_slice(tmp_path):
    src = tmp_path / "slice.csv"
    src.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-02 00:00:10,100.0,16,1600.0,6214e9\n"
        "2017-10-01 00:00:05,50.0,1,50.0,b436b2\n"
        "2017-09-30 23:59:59,50.0,1,50.0,b436b2\n"
        "2017-10-01 00:00:07,50.0,1,50.0,23dbec\n"
    )
    jobs = read_philly(src)
    assert [(j.id, j.submit_s, j.queue) for j in jobs] == [
        ("philly-00001", 5.0, "b436b2"),
        ("philly-00000", DAY + 10, "6214e9"),
    ]
    assert jobs[1].rdma and not jobs[0].rdma


# --------------------------------------------------------------------------- ITP


def test_itp_row_counts_and_clusters(itp):
    assert len(itp) == 69_351
    counts = Counter(j.queue for j in itp)
    assert counts == {
        "cluster01": 1595,
        "cluster02": 5778,
        "cluster03": 3011,
        "cluster04": 15802,
        "cluster05": 3629,
        "cluster06": 2396,
        "cluster07": 12699,
        "cluster08": 13047,
        "cluster09": 11134,
        "cluster10": 260,
    }
    assert _is_sorted(itp)
    assert sum(j.gpus * j.duration_s for j in itp) / 3600 == pytest.approx(1_632_720, rel=1e-3)


def test_itp_cluster_filter_and_window(itp):
    c4 = read_itp(clusters=[4, "cluster10"])
    assert len(c4) == 15802 + 260
    lo, hi = 10 * DAY, 11 * DAY
    window = read_itp(start_s=lo, end_s=hi)
    expected = [j for j in itp if lo <= j.submit_s < hi]
    assert [j.id for j in window] == [j.id for j in expected]
    assert all(0 <= j.submit_s < DAY for j in window)  # relative to start_s
    assert _is_sorted(window)


# --------------------------------------------------------------------------- mapping


def test_mapping_is_deterministic_for_a_seed(philly):
    again = read_philly(seed=0)
    assert again == philly
    assert read_itp(seed=7) == read_itp(seed=7)


def test_different_seeds_give_different_mappings(philly):
    other = read_philly(seed=1)
    assert [j.id for j in other] == [j.id for j in philly]
    changed = sum(a.tier != b.tier for a, b in zip(philly, other, strict=True))
    assert changed > 0.2 * len(philly)
    # ...but the same distribution
    mix0, mix1 = Counter(j.tier for j in philly), Counter(j.tier for j in other)
    for t in TIERS:
        assert mix0[t] / len(philly) == pytest.approx(mix1[t] / len(philly), abs=0.01)


def test_mapping_pinned_values():
    # Guards against silent changes of the documented mapping (the shipped
    # workload profile was derived with it).
    assert infer_attributes("philly-31395", 1, 30.0, seed=0) == (
        "experiment",
        False,
        "bert-large",
        True,
    )
    assert infer_attributes("x", 64, 5 * 3600.0, seed=3) == infer_attributes(
        "x", 64, 5 * 3600.0, seed=3
    )


def test_mapping_rules(philly, itp):
    jobs = philly + itp
    assert all(j.tier in TIERS for j in jobs)
    assert all(j.rdma == (j.gpus > 8) for j in jobs)
    assert all(j.model_name in readers.MODEL_CATALOG for j in jobs)
    assert all(j.preemptible for j in jobs if j.tier == "experiment")
    assert not any(j.preemptible for j in jobs if j.tier == "urgent")

    multi = [j for j in jobs if j.gpus > 8 and j.duration_s >= 3600]
    assert sum(j.tier == "core" for j in multi) / len(multi) > 0.6
    tiny = [j for j in jobs if j.gpus == 1 and j.duration_s < 3600]
    assert sum(j.tier == "experiment" for j in tiny) / len(tiny) > 0.75
    big = [j for j in jobs if j.gpus >= 64]
    assert sum(j.model_name == "llama-70b" for j in big) / len(big) > 0.4


def test_tier_table_rows_are_distributions():
    for by_duration in readers.TIER_TABLE.values():
        for probs in by_duration.values():
            assert sum(probs) == pytest.approx(1.0)
    for _, table in readers.MODEL_WEIGHTS_BY_SIZE:
        assert sum(w for _, w in table) == pytest.approx(1.0)


# --------------------------------------------------------------------------- Alibaba

ALIBABA_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def _alibaba_sample(tmp_path: Path) -> Path:
    # Synthetic rows in the upstream schema (the real file is not vendored).
    rows = [
        "pod-a,8000,16384,1,1000,,LS,Running,100,5100,110",  # whole GPU
        "pod-b,4000,8192,1,460,,LS,Running,50,900,50",  # fractional: skipped
        "pod-c,2000,4096,0,0,,BE,Running,10,80,10",  # CPU-only: skipped
        "pod-d,88000,327680,8,1000,,BE,Succeeded,20,7220,20",  # whole node, best effort
        "pod-e,8000,16384,2,1000,,BE,Pending,30,400,",  # never scheduled: skipped
    ]
    path = tmp_path / "openb_pod_list_default.csv"
    path.write_text("\n".join([ALIBABA_HEADER, *rows]) + "\n")
    return path


def test_alibaba_whole_gpu_pods_only(tmp_path):
    path = _alibaba_sample(tmp_path)
    jobs = read_alibaba(path, seed=0)
    assert [(j.id, j.submit_s, j.queue, j.gpus, j.duration_s) for j in jobs] == [
        ("pod-d", 20.0, "BE", 8, 7200.0),
        ("pod-a", 100.0, "LS", 1, 4990.0),
    ]
    assert jobs[0].preemptible  # best effort is always preemptible
    assert read_alibaba(path, seed=0) == jobs
    assert summarize_alibaba(path) == {
        "whole_gpu": 2,
        "fractional": 1,
        "cpu_only": 1,
        "unscheduled": 1,
        "zero_duration": 0,
    }


def test_alibaba_default_path_explains_why_it_is_missing():
    with pytest.raises(FileNotFoundError, match="not vendored"):
        read_alibaba()
