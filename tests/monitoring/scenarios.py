"""Cluster histories the monitoring tests share, driven through the API (tests/drills.py)."""

from __future__ import annotations

from typing import Any

from monitoring.rollup import rollup
from tests.drills import advance, cycle, submit


def an_hour_of_experiments(api: Any) -> tuple[Any, Any, Any]:
    """``researcher`` fills the four 8-GPU nodes with experiments that run an hour of
    cluster time, with a rollup sample at its start and end. Returns the API clients of
    admin, researcher and lead."""
    admin, me, lead = api("admin"), api("researcher"), api("lead")
    for i in range(4):
        submit(me, name=f"exp{i}", gpus=8)
    cycle(admin)
    rollup()
    advance(admin, 3600)
    rollup()
    return admin, me, lead
