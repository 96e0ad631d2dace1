"""Trace replay: real GPU-cluster traces through the portal's engine and simulator core.

``python -m replay TRACE ...`` or ``python manage.py replay TRACE ...``; see
docs/replay.md. Its own package beside the Django apps: standard library, Plotly and
the two pure cores (``scheduling.engine``, ``scheduling.simcore``) only, never Django
(an import-linter contract in pyproject.toml). ``replay.traces`` reads the vendored
traces in ``data/traces/`` and derives the demo's workload profile from them.
"""

from .replay import POLICIES, Replay, ReplayConfig, policy_config, run_replay
from .results import TIMING_KEYS
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
