"""The resource estimator (scheduling.estimator) as properties: memory only shrinks with
sharding and checkpointing, grows with the model, and the recommended GPU really holds the
run. ("Would it start now?" is the engine's what-if: tests/scheduling/test_whatif*.py.)

Reference points (the ZeRO paper, known shapes, the form's examples) are in
tests/pages/test_estimator.py; these are the laws between them, and the input bounds.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import estimator as est
from scheduling.estimator import (
    EstimateInput,
    GpuOption,
    candidate_counts,
    check_input,
    derive_shape,
    estimate,
    format_params,
    parse_params,
    recommend,
)

FAST = settings(max_examples=80, deadline=None)


@st.composite
def inputs(draw) -> EstimateInput:
    shaped = draw(st.booleans())
    return EstimateInput(
        params=draw(st.sampled_from([1e8, 1.3e9, 7e9, 13e9, 70e9, 175e9]))
        * draw(st.sampled_from([0.5, 1.0, 1.7])),
        precision=draw(st.sampled_from(list(est.PRECISIONS))),
        optimizer=draw(st.sampled_from(list(est.OPTIMIZERS))),
        zero_stage=draw(st.integers(0, 3)),
        data_parallel=draw(st.sampled_from([1, 2, 8, 64])),
        seq_len=draw(st.sampled_from([1, 512, 4096, 32768])),
        micro_batch=draw(st.integers(1, 8)),
        hidden_size=draw(st.sampled_from([1024, 4096, 8192])) if shaped else None,
        num_layers=draw(st.integers(4, 96)) if shaped else None,
        activation_checkpointing=draw(st.booleans()),
        flash_attention=draw(st.booleans()),
        vocab_size=draw(st.sampled_from([1, 32_000, 128_000])),
    )


# -- parameter counts -------------------------------------------------------------------------


@FAST
@given(st.floats(1.0, 999.0), st.sampled_from([1e6, 1e9, 1e12]))
def test_a_formatted_count_reads_back_within_its_three_digits(mantissa, unit):
    params = mantissa * unit
    text = format_params(params)
    assert re.fullmatch(r"\d+(\.\d+)?[MBT]", text), text
    assert parse_params(text) == pytest.approx(params, rel=5e-3)


@pytest.mark.parametrize(
    "params,text", [(1e6, "1M"), (3.5e8, "350M"), (1.3e9, "1.3B"), (7e9, "7B"), (1.25e12, "1.25T"),
                    (5e5, "500000")],
)  # fmt: skip
def test_counts_are_written_in_the_largest_unit_they_reach(params, text):
    assert format_params(params) == text


@pytest.mark.parametrize("params,text", [(999.6e9, "1T"), (999.6e6, "1B")])
def test_counts_just_under_a_unit_are_written_in_the_next_one(params, text):
    assert format_params(params) == text


@pytest.mark.parametrize(
    "text,params",
    [("0.5", 5e8), ("1e6", 1e6), ("999999", 999_999e9), ("2k", 2e3), ("1.5t", 1.5e12),
     ("7 b", 7e9), ("350m", 3.5e8)],
)  # fmt: skip
def test_a_bare_number_below_a_million_is_billions(text, params):
    assert parse_params(text) == pytest.approx(params)


@pytest.mark.parametrize("text", ["7BB", "B7", "1,3B", "1.B", ".5B", "7e-9", "7 000"])
def test_other_spellings_are_refused(text):
    with pytest.raises(ValueError, match="write the parameter count like"):
        parse_params(text)


# -- input bounds -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value,ok",
    [
        ("params", est.PARAMS_MIN, True), ("params", est.PARAMS_MIN * 0.999, False),
        ("params", est.PARAMS_MAX, True), ("params", est.PARAMS_MAX * 1.001, False),
        ("params", math.nan, False), ("params", math.inf, False), ("params", "7e9", False),
        ("data_parallel", 1, True), ("data_parallel", 0, False), ("data_parallel", True, False),
        ("data_parallel", 2.0, False), ("data_parallel", est.DATA_PARALLEL_MAX, True),
        ("data_parallel", est.DATA_PARALLEL_MAX + 1, False),
        ("seq_len", est.SEQ_LEN_MAX, True), ("seq_len", est.SEQ_LEN_MAX + 1, False),
        ("micro_batch", est.MICRO_BATCH_MAX, True), ("micro_batch", 0, False),
        ("vocab_size", est.VOCAB_MAX, True), ("vocab_size", est.VOCAB_MAX + 1, False),
        ("hidden_size", est.HIDDEN_MIN, True), ("hidden_size", est.HIDDEN_MIN - 1, False),
        ("hidden_size", est.HIDDEN_MAX, True), ("hidden_size", est.HIDDEN_MAX + 1, False),
        ("num_layers", 1, True), ("num_layers", 0, False), ("num_layers", est.LAYERS_MAX + 1, False),
        ("precision", "int4", False), ("optimizer", "lion", False), ("zero_stage", 4, False),
        ("zero_stage", -1, False),
    ],
)  # fmt: skip
def test_each_input_is_checked_against_its_inclusive_bounds(field, value, ok):
    errors = check_input(replace(EstimateInput(params=7e9), **{field: value}))
    assert (errors == {}) == ok, errors
    if not ok:
        assert list(errors) == [field] and all(errors[field])


def test_every_bad_field_is_reported_at_once_and_estimate_refuses_them():
    bad = EstimateInput(params=1, precision="x", optimizer="y", zero_stage=9, seq_len=0)
    with pytest.raises(est.EstimateError) as info:
        estimate(bad)
    assert set(info.value.errors) == {"params", "precision", "optimizer", "zero_stage", "seq_len"}
    assert str(info.value).startswith("params: between 1M and 10T parameters; precision: one of")


# -- shapes -----------------------------------------------------------------------------------


@FAST
@given(st.floats(1e6, 1e13), st.none() | st.integers(64, 16384), st.none() | st.integers(1, 200))
def test_a_derived_shape_is_a_whole_decoder_of_about_the_asked_size(params, hidden, layers):
    h, n, derived = derive_shape(params, hidden, layers)
    assert derived == (not (hidden and layers))
    assert h >= est.HIDDEN_MIN and n >= 1
    if hidden:
        assert h == hidden
    if layers:
        assert n == layers
    if not hidden:
        assert h % 128 == 0 or h == est.HIDDEN_MIN
    if (
        not hidden
        and not layers
        and not any(abs(params - r) <= 0.15 * r for r, _, _ in est.KNOWN_SHAPES)
    ):
        assert 12 * n * h * h == pytest.approx(params, rel=0.6)


# -- memory -----------------------------------------------------------------------------------


@FAST
@given(inputs())
def test_the_total_is_the_sum_of_its_parts_and_the_needed_memory_is_the_smallest_that_fits(inp):
    b = estimate(inp)
    assert b.total_gb == pytest.approx(
        b.weights_gb + b.gradients_gb + b.optimizer_gb + b.activations_gb
    )
    assert b.fits(b.needed_memory_gb)
    assert b.needed_memory_gb == 1 or not b.fits(b.needed_memory_gb - 1)
    assert b.states_gb == pytest.approx(inp.params * b.bytes_per_param / 1e9)
    d = b.as_dict()
    assert d["needed_memory_gb"] == b.needed_memory_gb and d["total_gb"] == round(b.total_gb, 2)


@FAST
@given(inputs(), st.integers(0, 3))
def test_more_sharding_never_needs_more_memory_and_never_touches_activations(inp, stage):
    lower, higher = sorted([inp.zero_stage, stage])
    a, b = estimate(replace(inp, zero_stage=lower)), estimate(replace(inp, zero_stage=higher))
    assert b.total_gb <= a.total_gb + 1e-9
    assert b.activations_gb == a.activations_gb
    assert b.states_gb == a.states_gb, "sharding moves states, it does not remove them"


@FAST
@given(inputs(), st.sampled_from([1, 2, 4, 16, 128]))
def test_more_data_parallel_gpus_help_only_when_something_is_sharded(inp, more):
    a = estimate(inp)
    b = estimate(replace(inp, data_parallel=inp.data_parallel * more))
    if inp.zero_stage == 0:
        assert b.total_gb == pytest.approx(a.total_gb)
    else:
        assert b.total_gb <= a.total_gb + 1e-9
        assert b.optimizer_gb == pytest.approx(a.optimizer_gb / more)


@FAST
@given(inputs())
def test_checkpointing_and_flash_attention_never_add_activation_memory(inp):
    off = {"activation_checkpointing": False, "flash_attention": False}
    plain = estimate(replace(inp, **off))
    for on in ({"activation_checkpointing": True}, {"flash_attention": True},
               {"activation_checkpointing": True, "flash_attention": True}):  # fmt: skip
        lighter = estimate(replace(inp, **{**off, **on}))
        assert lighter.activations_gb <= plain.activations_gb + 1e-12
        assert lighter.weights_gb == plain.weights_gb


@FAST
@given(inputs(), st.sampled_from([1.5, 2.0, 10.0]))
def test_a_bigger_model_of_the_same_shape_needs_more_state_memory(inp, factor):
    shaped = replace(inp, hidden_size=inp.hidden_size or 4096, num_layers=inp.num_layers or 32)
    bigger = replace(shaped, params=min(est.PARAMS_MAX, shaped.params * factor))
    a, b = estimate(shaped), estimate(bigger)
    assert (
        b.weights_gb + b.gradients_gb + b.optimizer_gb
        > a.weights_gb + a.gradients_gb + a.optimizer_gb
    )
    assert b.activations_gb == a.activations_gb, "activations follow the shape, not the count"


@pytest.mark.parametrize(
    "precision,optimizer,parts",
    [
        ("fp32", "adam", (4, 4, 8)), ("bf16", "adamw", (2, 2, 12)), ("fp16", "sgd", (2, 2, 8)),
        ("fp8", "sgd", (1, 2, 8)), ("fp32", "sgd", (4, 4, 4)),
    ],
)  # fmt: skip
def test_bytes_per_parameter_by_part(precision, optimizer, parts):
    assert est.bytes_per_param(precision, optimizer, 4096) == parts


def test_adafactor_state_shrinks_with_the_hidden_size():
    small, big = (est.bytes_per_param("fp32", "adafactor", h)[2] for h in (1024, 8192))
    assert small == 8 / 1024 and big == 8 / 8192


# -- GPU counts to try ------------------------------------------------------------------------


@FAST
@given(st.integers(1, 100), st.sampled_from([1, 4, 8]), st.integers(1, 5000))
def test_candidate_counts_grow_stay_under_the_cap_and_span_whole_nodes(start, node_gpus, cap):
    counts = candidate_counts(start, node_gpus, cap)
    assert counts == sorted(set(counts))
    assert all(start <= n <= cap for n in counts)
    assert all(n % node_gpus == 0 for n in counts if n > node_gpus)
    if start <= min(cap, node_gpus):
        assert counts[0] == start


# -- recommendations --------------------------------------------------------------------------

OPTIONS = [
    GpuOption("A100", 40, 8, 64, 32),
    GpuOption("L40S", 48, 8, 16, 0),
    GpuOption("H100", 80, 8, 256, 256),
]


@settings(max_examples=40, deadline=None)
@given(inputs())
def test_a_recommendation_names_a_gpu_that_holds_the_run_in_whole_nodes(inp):
    rec = recommend(inp, OPTIONS)
    data = rec.as_dict()
    if not rec.fits:
        assert rec.gpus is None and len(rec.notes) == 1 and rec.notes[0].startswith("Does not fit")
        assert data["form"] == {"gpus": None, "gpu_memory_gb": None}
        return
    option = next(
        o for o in OPTIONS if (o.model, o.memory_gb) == (rec.gpu_model, rec.gpu_memory_gb)
    )
    assert rec.breakdown.fits(option.memory_gb)
    assert rec.gpus >= inp.data_parallel and rec.breakdown.data_parallel == rec.gpus
    assert rec.nodes == math.ceil(rec.gpus / option.gpus_per_node)
    assert rec.fits_one_node == (rec.nodes == 1)
    assert rec.gpus_per_node == min(rec.gpus, option.gpus_per_node)
    if rec.nodes > 1:
        assert rec.gpus <= option.rdma_gpus, "multi-node runs only on RDMA GPUs"
        assert rec.gpus % option.gpus_per_node == 0
    assert rec.zero_stage >= inp.zero_stage
    assert rec.activation_checkpointing >= inp.activation_checkpointing
    assert data["form"] == {"gpus": rec.gpus, "gpu_memory_gb": rec.breakdown.needed_memory_gb}


def test_without_gpu_nodes_nothing_is_recommended():
    rec = recommend(EstimateInput(params=1e9), [])
    assert not rec.fits and rec.notes == ("no GPU nodes are registered",)


def test_a_run_too_big_for_the_cluster_says_more_gpus_are_needed():
    rec = recommend(
        EstimateInput(params=1e12, seq_len=1, vocab_size=1), [GpuOption("X", 80, 8, 8, 8)]
    )
    assert not rec.fits
    assert rec.notes == ("Does not fit: it would need more X 80 GB GPUs than the cluster has.",)
