"""Trace replay: real GPU-cluster traces through the portal's engine and simulator core.

``python -m scheduling.replay TRACE ...`` or ``python manage.py replay TRACE ...``;
see docs/replay.md. Standard library and Plotly only (no Django).
"""

from .replay import POLICIES, TIMING_KEYS, Replay, ReplayConfig, policy_config, run_replay
from .workload import Layout, Workload, build_layout, load_workload

__all__ = [
    "POLICIES",
    "TIMING_KEYS",
    "Layout",
    "Replay",
    "ReplayConfig",
    "Workload",
    "build_layout",
    "load_workload",
    "policy_config",
    "run_replay",
]
