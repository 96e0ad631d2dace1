"""The scheduling engine: a pure functional core (no Django, no clock, no I/O).

``plan(snapshot, now)`` decides who starts where, who is preempted, which nodes
are reserved, and why every other job waits; ``check_plan(snapshot, plan)``
lists any rule the plan breaks (empty = OK). See docs/engine.md.
"""

from .invariants import check_plan
from .planner import plan
from .predict import FinishedJob, HistoryPredictor, Prediction, fill_predictions
from .types import (
    VERDICT_CODES,
    Code,
    LineView,
    Mark,
    Migration,
    NodeView,
    PendingJob,
    Plan,
    PolicyConfig,
    Preemption,
    QueueView,
    Reservation,
    RunningJob,
    Slot,
    Snapshot,
    Start,
    Swap,
    Tier,
    Verdict,
)

__all__ = [
    "VERDICT_CODES",
    "Code",
    "FinishedJob",
    "HistoryPredictor",
    "LineView",
    "Mark",
    "Migration",
    "NodeView",
    "PendingJob",
    "Plan",
    "Prediction",
    "PolicyConfig",
    "Preemption",
    "QueueView",
    "Reservation",
    "RunningJob",
    "Slot",
    "Snapshot",
    "Start",
    "Swap",
    "Tier",
    "Verdict",
    "check_plan",
    "fill_predictions",
    "plan",
]
