"""The resource estimator (P6): pure functions, known reference points.

("Would it start now?" is the engine's own what-if: tests/scheduling/test_whatif*.py.)"""

import math
from dataclasses import replace

import pytest

from scheduling import estimator as est
from scheduling.estimator import (
    EstimateError,
    EstimateInput,
    GpuOption,
    estimate,
    parse_params,
    recommend,
)

# A cluster like the demo's: mostly H100 80 GB, some A100 80/40 GB, L40S 48 GB without RDMA.
DEMO_GPUS = [
    GpuOption("A100", 40, 8, 1000, 600),
    GpuOption("L40S", 48, 8, 1000, 0),
    GpuOption("A100", 80, 8, 2000, 2000),
    GpuOption("H100", 80, 8, 6000, 6000),
]
STATES_ONLY = {"seq_len": 1, "micro_batch": 1, "vocab_size": 1}  # activations ~ 0


def states(**kw) -> float:
    b = estimate(EstimateInput(**{**STATES_ONLY, **kw}))
    return b.weights_gb + b.gradients_gb + b.optimizer_gb


@pytest.mark.parametrize(
    ("text", "params"),
    [
        ("7B", 7e9),
        ("70b", 70e9),
        ("1.3B", 1.3e9),
        ("350M", 3.5e8),
        ("7", 7e9),
        ("7e9", 7e9),
        ("1T", 1e12),
        (" 13 B ", 13e9),
        ("125000000", 1.25e8),
    ],
)
def test_parameter_counts_are_read_as_people_write_them(text, params):
    assert parse_params(text) == pytest.approx(params)


@pytest.mark.parametrize("text", ["", "seven", "7X", "-7B", "7B7", "1e400x"])
def test_unreadable_parameter_counts_are_refused(text):
    with pytest.raises(ValueError):
        parse_params(text)


@pytest.mark.parametrize(
    ("precision", "optimizer", "bytes_per_param"),
    [
        ("bf16", "adam", 16),  # 2 weights + 2 grads + 4 master + 8 moments (ZeRO's K=12)
        ("fp16", "adamw", 16),
        ("fp32", "adamw", 16),  # 4 + 4 + 8 moments, no separate master copy
        ("bf16", "sgd", 12),  # 2 + 2 + 4 master + 4 momentum
        ("fp32", "sgd", 12),  # 4 + 4 + 4
        ("fp8", "adamw", 15),  # 1 + 2 + 12
    ],
)
def test_bytes_per_parameter_per_precision_and_optimizer(precision, optimizer, bytes_per_param):
    b = estimate(EstimateInput(params=7e9, precision=precision, optimizer=optimizer))
    assert b.bytes_per_param == pytest.approx(bytes_per_param)
    assert b.states_gb == pytest.approx(7 * bytes_per_param)


def test_adafactor_keeps_almost_no_optimizer_state_beyond_the_master_copy():
    b = estimate(EstimateInput(params=7e9, optimizer="adafactor"))
    assert 8.0 < b.bytes_per_param < 8.01  # 2 + 2 + 4 master + ~0.002 factored statistics


def test_7b_bf16_adam_unsharded_holds_112_gb_of_states_and_fits_no_80_gb_gpu():
    b = estimate(EstimateInput(params=7e9, precision="bf16", optimizer="adam"))
    assert b.weights_gb + b.gradients_gb + b.optimizer_gb == pytest.approx(112.0)
    assert (b.weights_gb, b.gradients_gb, b.optimizer_gb) == pytest.approx((14, 14, 84))
    assert not b.fits(80)


def test_7b_with_zero3_over_8_gpus_fits_one_80_gb_gpu():
    b = estimate(EstimateInput(params=7e9, optimizer="adam", zero_stage=3, data_parallel=8))
    assert b.weights_gb + b.gradients_gb + b.optimizer_gb == pytest.approx(14.0)
    assert b.fits(80)


@pytest.mark.parametrize(
    ("stage", "gb"),
    # The ZeRO paper's Figure 1: 7.5B parameters, Adam, mixed precision, 64 GPUs.
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
)
def test_zero_stages_match_the_zero_paper(stage, gb):
    assert states(params=7.5e9, zero_stage=stage, data_parallel=64) == pytest.approx(gb, abs=0.06)


def test_activations_follow_korthikanti_and_checkpointing_keeps_layer_inputs():
    s, b, h, layers = 2048, 4, 4096, 32
    base = EstimateInput(
        params=7e9, seq_len=s, micro_batch=b, hidden_size=h, num_layers=layers, vocab_size=1
    )
    logits = s * b * 1 * 6
    no_flash = estimate(replace(base, flash_attention=False)).activations_gb * 1e9
    heads = h // 128
    assert no_flash == pytest.approx(layers * s * b * h * (34 + 5 * heads * s / h) + logits)
    flash = estimate(base).activations_gb * 1e9
    assert flash == pytest.approx(layers * s * b * h * 34 + logits)
    ckpt = estimate(replace(base, activation_checkpointing=True)).activations_gb * 1e9
    assert ckpt == pytest.approx(layers * 2 * s * b * h + s * b * h * 34 + logits)
    assert ckpt < flash / 5


def test_activations_grow_with_micro_batch_and_sequence_and_do_not_shard():
    base = EstimateInput(params=7e9)
    a = estimate(base).activations_gb
    assert estimate(replace(base, micro_batch=2)).activations_gb == pytest.approx(2 * a)
    assert estimate(replace(base, seq_len=8192)).activations_gb == pytest.approx(2 * a)
    sharded = estimate(replace(base, zero_stage=3, data_parallel=64))
    assert sharded.activations_gb == pytest.approx(a)


def test_fp32_doubles_activations():
    base = EstimateInput(params=1.3e9, vocab_size=1)
    bf16 = estimate(base).activations_gb
    fp32 = estimate(replace(base, precision="fp32")).activations_gb
    assert fp32 == pytest.approx(2 * bf16, rel=1e-3)


@pytest.mark.parametrize(
    ("params", "shape"),
    [
        (7e9, (4096, 32)),
        (6.7e9, (4096, 32)),
        (13e9, (5120, 40)),
        (70e9, (8192, 80)),
        (65e9, (8192, 80)),
        (175e9, (12288, 96)),
    ],
)
def test_the_shape_of_well_known_sizes_is_derived(params, shape):
    b = estimate(EstimateInput(params=params))
    assert (b.hidden_size, b.num_layers) == shape and b.shape_derived


def test_other_sizes_get_a_shape_with_about_the_right_parameter_count():
    for params in (5e8, 3.5e9, 20e9, 400e9):
        hidden, layers, derived = est.derive_shape(params, None, None)
        assert derived and hidden % 128 == 0
        assert 12 * layers * hidden**2 == pytest.approx(params, rel=0.3)
    assert est.derive_shape(7e9, 4096, None) == (4096, 35, True)
    assert est.derive_shape(7e9, None, 32)[0] == 4224  # sqrt(7e9 / (12 * 32)) to 128
    assert est.derive_shape(7e9, 4000, 30) == (4000, 30, False)


def test_bad_input_is_refused_with_every_field_named():
    with pytest.raises(EstimateError) as info:
        estimate(
            EstimateInput(
                params=1e3,
                precision="fp4",
                optimizer="lion",
                zero_stage=4,
                data_parallel=0,
                seq_len=0,
                micro_batch=10**9,
                hidden_size=1,
                num_layers=0,
            )
        )
    assert set(info.value.errors) == {
        "params",
        "precision",
        "optimizer",
        "zero_stage",
        "data_parallel",
        "seq_len",
        "micro_batch",
        "hidden_size",
        "num_layers",
    }


# -- recommendations -----------------------------------------------------------------------


def test_a_small_model_gets_one_of_the_smallest_gpus_that_hold_it():
    rec = recommend(EstimateInput(params=1.3e9, seq_len=2048), DEMO_GPUS)
    assert rec.fits and rec.gpus == 1 and rec.fits_one_node
    assert (rec.gpu_model, rec.gpu_memory_gb) == ("A100", 40)
    assert rec.breakdown.total_gb <= 0.9 * 40


def test_7b_unsharded_is_told_to_shard_and_gets_the_fewest_gpus_that_hold_it():
    rec = recommend(EstimateInput(params=7e9), DEMO_GPUS)
    assert rec.fits and rec.zero_stage == 3
    assert rec.gpus == 4 and rec.gpu_memory_gb == 80 and rec.fits_one_node
    assert "ZeRO-3" in rec.notes[0] and "131 GB" in rec.notes[0]


def test_7b_zero3_over_8_fits_on_one_node_of_the_smallest_gpu_that_holds_it():
    rec = recommend(EstimateInput(params=7e9, zero_stage=3, data_parallel=8), DEMO_GPUS)
    assert rec.fits and rec.gpus == 8 and rec.fits_one_node and rec.nodes == 1
    assert rec.gpu_memory_gb == 40
    assert rec.as_dict()["form"] == {"gpus": 8, "gpu_memory_gb": rec.breakdown.needed_memory_gb}
    assert rec.breakdown.needed_memory_gb <= 40


def test_70b_needs_several_nodes_and_activation_checkpointing():
    rec = recommend(EstimateInput(params=70e9, zero_stage=3, data_parallel=8), DEMO_GPUS)
    assert rec.fits and rec.activation_checkpointing
    assert rec.gpus == 32 and rec.nodes == 4 and not rec.fits_one_node
    assert rec.gpu_memory_gb == 80 and rec.gpus_per_node == 8
    assert "activation checkpointing" in rec.notes[0]


def test_multi_node_recommendations_use_whole_nodes_of_rdma_gpus():
    no_rdma = [GpuOption("L40S", 48, 8, 1000, 0)]
    rec = recommend(
        EstimateInput(params=33e9, zero_stage=3, activation_checkpointing=True), no_rdma
    )
    assert not rec.fits, "33B needs more than a node of 48 GB GPUs, and these lack RDMA"
    rec = recommend(
        EstimateInput(params=13e9, zero_stage=3, data_parallel=12, activation_checkpointing=True),
        DEMO_GPUS,
    )
    assert rec.fits and rec.gpus % 8 == 0 and rec.gpus >= 12


def test_the_asked_data_parallel_degree_is_kept_when_it_fits():
    rec = recommend(EstimateInput(params=1.3e9, data_parallel=64), DEMO_GPUS)
    assert rec.gpus == 64 and rec.nodes == 8


def test_what_no_gpu_can_hold_is_said_so():
    rec = recommend(EstimateInput(params=70e9, seq_len=65536), DEMO_GPUS)
    assert not rec.fits and rec.gpus is None
    assert "activations" in rec.notes[0] and "80 GB" in rec.notes[0]
    assert rec.as_dict()["form"]["gpus"] is None
    tiny = [GpuOption("T4", 16, 4, 8, 0)]
    rec = recommend(EstimateInput(params=70e9, zero_stage=3, activation_checkpointing=True), tiny)
    assert not rec.fits and "more T4 16 GB GPUs than the cluster has" in rec.notes[0]
    assert not recommend(EstimateInput(params=7e9), []).fits


def test_recommendation_needs_no_more_memory_than_the_gpu_it_names():
    for params in (3.5e8, 1.3e9, 7e9, 13e9, 33e9, 70e9):
        for ckpt in (False, True):
            rec = recommend(EstimateInput(params=params, activation_checkpointing=ckpt), DEMO_GPUS)
            if rec.fits:
                assert rec.breakdown.needed_memory_gb <= rec.gpu_memory_gb
                assert rec.breakdown.fits(rec.gpu_memory_gb)
                assert rec.gpus_per_node * rec.nodes >= rec.gpus


def test_candidate_counts_double_and_use_whole_nodes():
    assert est.candidate_counts(1, 8, 64) == [1, 2, 4, 8, 16, 32, 64]
    assert est.candidate_counts(3, 8, 40) == [3, 4, 8, 16, 32]
    assert est.candidate_counts(12, 8, 64) == [16, 32, 64]


def test_the_estimator_stays_pure():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(est.__file__).read_text())
    imported = {
        (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in (n.names if isinstance(n, ast.Import) else [n])
    }
    assert "django" not in imported
    assert math.isclose(est.USABLE_FRACTION, 0.9)
