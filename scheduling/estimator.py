"""Resource estimator (P6): pure Python, no Django.

Memory per GPU of data-parallel transformer training, as four parts:

- **weights**: parameters in the working precision (fp32 4 bytes, bf16/fp16 2, fp8 1);
- **gradients**: fp32 4 bytes, else 2 (16-bit gradients, fp8 included);
- **optimizer states**: Adam/AdamW keep two moments (8 bytes), SGD one momentum (4),
  Adafactor only factored row/column statistics (about 8 / hidden bytes); in mixed
  precision (anything but fp32) add a 4-byte fp32 master copy of the weights. So
  mixed-precision Adam is 2 + 2 + 12 = 16 bytes per parameter (the ZeRO paper's K = 12);
- **activations**: per layer ``s * b * h * (34 + 5 * a * s / h)`` bytes for 16-bit
  activations (Korthikanti et al., 2022; the ``5as/h`` attention-score term vanishes with
  flash attention, which is assumed by default; doubled for fp32). Activation
  checkpointing keeps only each layer's 16-bit input (``2sbh``) plus one layer being
  recomputed. The logits (16-bit, plus an fp32 copy for the loss) are added.

ZeRO sharding over the data-parallel degree N divides the optimizer states by N (stage 1),
also the gradients (stage 2), also the weights (stage 3). Activations are never sharded
by data parallelism. Tensor/pipeline parallelism and framework overheads are not modelled;
a GPU "fits" when the estimate is at most ``USABLE_FRACTION`` of its memory (the rest is
left for the CUDA context, allocator fragmentation and communication buffers).

GB here are 10**9 bytes, so 7B parameters at 16 bytes each are 112 GB.

The submit form's "would it start now, and when?" is not guessed here: it is the
engine's own plan with the candidate added (``scheduling.whatif``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

GB = 1e9
USABLE_FRACTION = 0.9

PRECISIONS: dict[str, str] = {
    "bf16": "bf16 (mixed precision)",
    "fp16": "fp16 (mixed precision)",
    "fp8": "fp8 (mixed precision)",
    "fp32": "fp32",
}
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
GRAD_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 2.0}
OPTIMIZERS: dict[str, str] = {
    "adamw": "AdamW",
    "adam": "Adam",
    "sgd": "SGD with momentum",
    "adafactor": "Adafactor",
}
ZERO_STAGES: dict[int, str] = {
    0: "none (every GPU holds everything)",
    1: "ZeRO-1: shard optimizer states",
    2: "ZeRO-2: shard optimizer states and gradients",
    3: "ZeRO-3 / FSDP: shard states, gradients and weights",
}

# Inclusive bounds of the inputs (the form and the JSON endpoint use them too).
PARAMS_MIN, PARAMS_MAX = 1e6, 1e13
DATA_PARALLEL_MAX = 10_000
SEQ_LEN_MAX = 1_048_576
MICRO_BATCH_MAX = 4096
HIDDEN_MIN, HIDDEN_MAX = 64, 65_536
LAYERS_MAX = 1000
VOCAB_MAX = 1_000_000

# Published shapes of common sizes (hidden, layers): used when the parameter count is
# within 15% of one of them and no shape is given.
KNOWN_SHAPES: tuple[tuple[float, int, int], ...] = (
    (1.3e9, 2048, 24),
    (2.7e9, 2560, 32),
    (7e9, 4096, 32),
    (13e9, 5120, 40),
    (33e9, 6656, 60),
    (70e9, 8192, 80),
    (175e9, 12288, 96),
)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1e9, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


class EstimateError(ValueError):
    """Bad estimator input: ``errors`` maps field names to messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def parse_params(text: str) -> float:
    """``"7B"`` -> 7e9, ``"350M"`` -> 3.5e8, ``"1.3b"``, ``"7e9"``; a bare number is billions
    unless it is at least a million (then it is a count)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError("write the parameter count like 7B, 70B, 1.3B or 350M")
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit and number >= 1e6:
        return number
    return number * _SCALE[unit]


def format_params(params: float) -> str:
    """7e9 -> ``"7B"``, 3.5e8 -> ``"350M"``."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        # Round to three digits first: 999.6e9 reads "1T", not "1e+03B".
        shown = float(f"{params / scale:.3g}")
        if shown >= 1:
            return f"{shown:g}{unit}"
    return f"{params:.0f}"


@dataclass(frozen=True)
class EstimateInput:
    """What the researcher knows about the training run. ``hidden_size``/``num_layers``
    are derived from ``params`` when not given."""

    params: float
    precision: str = "bf16"
    optimizer: str = "adamw"
    zero_stage: int = 0
    data_parallel: int = 1
    seq_len: int = 4096
    micro_batch: int = 1
    hidden_size: int | None = None
    num_layers: int | None = None
    activation_checkpointing: bool = False
    flash_attention: bool = True
    vocab_size: int = 32_000


def check_input(inp: EstimateInput) -> dict[str, list[str]]:
    """Field errors of an input (empty when valid)."""
    errors: dict[str, list[str]] = {}

    def bad(name: str, msg: str) -> None:
        errors.setdefault(name, []).append(msg)

    if not (isinstance(inp.params, int | float) and math.isfinite(inp.params)) or not (
        PARAMS_MIN <= inp.params <= PARAMS_MAX
    ):
        bad("params", "between 1M and 10T parameters")
    if inp.precision not in PRECISIONS:
        bad("precision", f"one of {', '.join(PRECISIONS)}")
    if inp.optimizer not in OPTIMIZERS:
        bad("optimizer", f"one of {', '.join(OPTIMIZERS)}")
    if inp.zero_stage not in ZERO_STAGES:
        bad("zero_stage", "0, 1, 2 or 3")
    for name, low, high in (
        ("data_parallel", 1, DATA_PARALLEL_MAX),
        ("seq_len", 1, SEQ_LEN_MAX),
        ("micro_batch", 1, MICRO_BATCH_MAX),
        ("vocab_size", 1, VOCAB_MAX),
    ):
        value = getattr(inp, name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            bad(name, f"a whole number from {low} to {high}")
    if inp.hidden_size is not None and not HIDDEN_MIN <= inp.hidden_size <= HIDDEN_MAX:
        bad("hidden_size", f"from {HIDDEN_MIN} to {HIDDEN_MAX}")
    if inp.num_layers is not None and not 1 <= inp.num_layers <= LAYERS_MAX:
        bad("num_layers", f"from 1 to {LAYERS_MAX}")
    return errors


def derive_shape(params: float, hidden: int | None, layers: int | None) -> tuple[int, int, bool]:
    """(hidden, layers, derived?) of a decoder with about ``12 * layers * hidden**2`` params."""
    if hidden and layers:
        return hidden, layers, False
    if hidden:
        return hidden, max(1, round(params / (12 * hidden * hidden))), True
    if layers:
        raw = math.sqrt(params / (12 * layers))
        return max(HIDDEN_MIN, int(round(raw / 128) * 128) or 128), layers, True
    for ref, h, n in KNOWN_SHAPES:
        if abs(params - ref) <= 0.15 * ref:
            return h, n, True
    # Usual aspect ratio: about 128 hidden units per layer.
    h = max(HIDDEN_MIN, int(round((params * 128 / 12) ** (1 / 3) / 128) * 128) or 128)
    return h, max(1, round(params / (12 * h * h))), True


@dataclass(frozen=True)
class Breakdown:
    """Estimated memory per GPU, in GB, and the numbers behind it."""

    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    total_gb: float
    bytes_per_param: float  # weights + gradients + optimizer states, before sharding
    states_gb: float  # the same for the whole model, before sharding
    hidden_size: int
    num_layers: int
    shape_derived: bool
    data_parallel: int
    zero_stage: int

    @property
    def needed_memory_gb(self) -> int:
        """The smallest GPU memory (whole GB) this fits in, headroom included."""
        return max(1, math.ceil(self.total_gb / USABLE_FRACTION - 1e-9))

    def fits(self, gpu_memory_gb: float) -> bool:
        return self.total_gb <= USABLE_FRACTION * gpu_memory_gb + 1e-9

    def as_dict(self) -> dict:
        return {
            "weights_gb": round(self.weights_gb, 2),
            "gradients_gb": round(self.gradients_gb, 2),
            "optimizer_gb": round(self.optimizer_gb, 2),
            "activations_gb": round(self.activations_gb, 2),
            "total_gb": round(self.total_gb, 2),
            "needed_memory_gb": self.needed_memory_gb,
            "bytes_per_param": round(self.bytes_per_param, 3),
            "states_gb": round(self.states_gb, 1),
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "shape_derived": self.shape_derived,
            "data_parallel": self.data_parallel,
            "zero_stage": self.zero_stage,
        }


def bytes_per_param(precision: str, optimizer: str, hidden: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) bytes per parameter, unsharded."""
    moments = {"adam": 8.0, "adamw": 8.0, "sgd": 4.0, "adafactor": 8.0 / hidden}[optimizer]
    master = 0.0 if precision == "fp32" else 4.0
    return WEIGHT_BYTES[precision], GRAD_BYTES[precision], master + moments


def activation_bytes(inp: EstimateInput, hidden: int, layers: int) -> float:
    """Activations held per GPU for one micro-batch (see the module docstring)."""
    s, b, h = inp.seq_len, inp.micro_batch, hidden
    scale = 2.0 if inp.precision == "fp32" else 1.0
    heads = max(1, h // 128)
    per_layer_factor = 34.0 + (0.0 if inp.flash_attention else 5.0 * heads * s / h)
    full_layer = s * b * h * per_layer_factor * scale
    if inp.activation_checkpointing:
        layers_bytes = layers * 2.0 * s * b * h * scale + full_layer
    else:
        layers_bytes = layers * full_layer
    logits = s * b * inp.vocab_size * (2.0 * scale + 4.0)
    return layers_bytes + logits


def estimate(inp: EstimateInput) -> Breakdown:
    """Memory per GPU of one data-parallel rank; raises ``EstimateError`` on bad input."""
    errors = check_input(inp)
    if errors:
        raise EstimateError(errors)
    hidden, layers, derived = derive_shape(inp.params, inp.hidden_size, inp.num_layers)
    w, g, o = bytes_per_param(inp.precision, inp.optimizer, hidden)
    n = inp.data_parallel
    shard_o = n if inp.zero_stage >= 1 else 1
    shard_g = n if inp.zero_stage >= 2 else 1
    shard_w = n if inp.zero_stage >= 3 else 1
    weights = inp.params * w / shard_w / GB
    grads = inp.params * g / shard_g / GB
    opt = inp.params * o / shard_o / GB
    acts = activation_bytes(inp, hidden, layers) / GB
    return Breakdown(
        weights_gb=weights,
        gradients_gb=grads,
        optimizer_gb=opt,
        activations_gb=acts,
        total_gb=weights + grads + opt + acts,
        bytes_per_param=w + g + o,
        states_gb=inp.params * (w + g + o) / GB,
        hidden_size=hidden,
        num_layers=layers,
        shape_derived=derived,
        data_parallel=n,
        zero_stage=inp.zero_stage,
    )


@dataclass(frozen=True)
class GpuOption:
    """One kind of GPU in the cluster: ``gpus`` in all, ``rdma_gpus`` of them on RDMA nodes
    (what multi-node jobs may use), at most ``gpus_per_node`` per node."""

    model: str
    memory_gb: int
    gpus_per_node: int
    gpus: int
    rdma_gpus: int

    @property
    def label(self) -> str:
        return f"{self.model} {self.memory_gb} GB"


@dataclass(frozen=True)
class Recommendation:
    """What to ask for. ``fits`` False: nothing in this cluster holds it (see ``notes``)."""

    fits: bool
    breakdown: Breakdown
    gpus: int | None = None
    gpu_model: str = ""
    gpu_memory_gb: int | None = None
    gpus_per_node: int | None = None
    nodes: int = 0
    fits_one_node: bool = False
    zero_stage: int = 0
    activation_checkpointing: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {
            "fits": self.fits,
            "gpus": self.gpus,
            "gpu_model": self.gpu_model,
            "gpu_memory_gb": self.gpu_memory_gb,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "fits_one_node": self.fits_one_node,
            "zero_stage": self.zero_stage,
            "activation_checkpointing": self.activation_checkpointing,
            "breakdown": self.breakdown.as_dict(),
            "notes": list(self.notes),
            # What the submit form should be filled with.
            "form": {
                "gpus": self.gpus,
                "gpu_memory_gb": self.breakdown.needed_memory_gb if self.fits else None,
            },
        }


def candidate_counts(start: int, node_gpus: int, cap: int) -> list[int]:
    """GPU counts to try, from ``start`` up: doubling, multi-node counts in whole nodes."""
    counts: list[int] = []
    n = start
    while n <= cap:
        counts.append(n)
        n = 1 << n.bit_length() if n & (n - 1) else n * 2  # next power of two
    out = []
    for n in counts:
        if n > node_gpus:
            n = math.ceil(n / node_gpus) * node_gpus
        if n <= cap and n not in out:
            out.append(n)
    return out


def _fit_on(inp: EstimateInput, option: GpuOption) -> tuple[int, Breakdown] | None:
    """The fewest GPUs of this kind (at least the asked data-parallel degree) that hold it."""
    cap = max(option.gpus_per_node, option.rdma_gpus)
    cap = min(cap, option.gpus)
    if inp.zero_stage == 0:
        counts = [inp.data_parallel] if inp.data_parallel <= cap else []
    else:
        counts = candidate_counts(inp.data_parallel, option.gpus_per_node, cap)
    for n in counts:
        if n > option.gpus_per_node and n > option.rdma_gpus:
            continue
        b = estimate(replace(inp, data_parallel=n))
        if b.fits(option.memory_gb):
            return n, b
    return None


def recommend(inp: EstimateInput, options: Sequence[GpuOption]) -> Recommendation:
    """Fewest GPUs that hold the run, then the smallest GPU that does (leave the big ones
    to those who need them), then the kind with the most GPUs.

    Tries the run as asked, then with ZeRO-3, then also with activation checkpointing,
    and says what it changed. Raises ``EstimateError`` on bad input.
    """
    asked = estimate(inp)
    if not options:
        return Recommendation(fits=False, breakdown=asked, notes=("no GPU nodes are registered",))
    ladder = [inp]
    if inp.zero_stage < 3:
        ladder.append(replace(inp, zero_stage=3))
    if not inp.activation_checkpointing:
        ladder.append(replace(inp, zero_stage=3, activation_checkpointing=True))
    best: tuple[tuple, GpuOption, int, Breakdown] | None = None
    trial = inp
    for trial in ladder:
        for option in options:
            found = _fit_on(trial, option)
            if found is None:
                continue
            n, b = found
            key = (n, option.memory_gb, -option.gpus, option.model)
            if best is None or key < best[0]:
                best = (key, option, n, b)
        if best is not None:
            break
    if best is None:
        largest = max(options, key=lambda o: o.memory_gb)
        floor = estimate(replace(trial, data_parallel=DATA_PARALLEL_MAX))
        if floor.activations_gb > USABLE_FRACTION * largest.memory_gb:
            note = (
                f"Does not fit any GPU here: even fully sharded and with activation "
                f"checkpointing, activations take {floor.activations_gb:,.0f} GB per GPU and "
                f"the largest GPUs have {largest.memory_gb} GB. Use a smaller micro-batch or "
                "sequence, or tensor/pipeline parallelism (not modelled here)."
            )
        else:
            note = f"Does not fit: it would need more {largest.label} GPUs than the cluster has."
        return Recommendation(fits=False, breakdown=asked, notes=(note,))
    _, option, n, b = best
    notes: list[str] = []
    changes = []
    if trial.zero_stage != inp.zero_stage:
        changes.append("ZeRO-3 sharding")
    if trial.activation_checkpointing != inp.activation_checkpointing:
        changes.append("activation checkpointing")
    if changes:
        notes.append(
            f"As asked it needs {asked.total_gb:,.0f} GB per GPU"
            + (f" over {inp.data_parallel:,} GPUs" if inp.data_parallel > 1 else "")
            + f" and fits no GPU here; with {' and '.join(changes)} it fits."
        )
    nodes = math.ceil(n / option.gpus_per_node)
    notes.extend(_advice(trial, b))
    return Recommendation(
        fits=True,
        breakdown=b,
        gpus=n,
        gpu_model=option.model,
        gpu_memory_gb=option.memory_gb,
        gpus_per_node=min(n, option.gpus_per_node),
        nodes=nodes,
        fits_one_node=nodes == 1,
        zero_stage=b.zero_stage,
        activation_checkpointing=trial.activation_checkpointing,
        notes=tuple(notes),
    )


def _advice(inp: EstimateInput, b: Breakdown) -> list[str]:
    out = []
    if not inp.activation_checkpointing and b.activations_gb > 0.4 * b.total_gb:
        light = estimate(
            replace(
                inp,
                activation_checkpointing=True,
                zero_stage=b.zero_stage,
                data_parallel=b.data_parallel,
            )
        )
        out.append(
            f"Activation checkpointing would cut activations from {b.activations_gb:,.1f} to "
            f"{light.activations_gb:,.1f} GB per GPU (at about a third more compute)."
        )
    return out
