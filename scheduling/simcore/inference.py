"""The daily load curve of online inference (S4), as a pure function of time.

Load is a smooth day/night cosine (peak in the afternoon, trough at night)
plus smooth per-node noise. The noise comes from hashing (seed, node, hour),
not from the simulator's RNG, so asking for the load any number of times
never changes the simulation's future.
"""

from __future__ import annotations

import math
import zlib

DAY_S = 86400.0
NOISE_PERIOD_S = 3600.0
_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _unit(seed: int, key: int, bucket: int) -> float:
    """A deterministic number in [-1, 1) for (seed, key, bucket)."""
    h = _splitmix64((seed & _MASK64) ^ _splitmix64(key ^ _splitmix64(bucket & _MASK64)))
    return (h >> 11) / float(1 << 52) - 1.0


def node_key(name: str) -> int:
    """A stable integer for a node name (``hash()`` is salted per process)."""
    return zlib.crc32(name.encode())


def inference_load(
    t: float,
    *,
    seed: int,
    key: int,
    trough: float,
    peak: float,
    peak_hour: float,
    noise: float,
) -> float:
    """Fraction (0..1) of a node's GPUs online inference wants at virtual time ``t``.

    ``t`` = 0 is midnight of day 0. Each node's peak is shifted by up to +-1 h
    (from its key) so the pool does not move in lockstep.
    """
    shift = _unit(seed, key, -1) * 3600.0
    phase = 2.0 * math.pi * (t - peak_hour * 3600.0 - shift) / DAY_S
    base = trough + (peak - trough) * (1.0 + math.cos(phase)) / 2.0
    if noise:
        pos = t / NOISE_PERIOD_S
        b = math.floor(pos)
        frac = pos - b
        s = frac * frac * (3.0 - 2.0 * frac)  # smoothstep: no kinks between hours
        v0 = _unit(seed, key, b)
        v1 = _unit(seed, key, b + 1)
        base += noise * (v0 + (v1 - v0) * s)
    return min(1.0, max(0.0, base))
