"""Idle capacity by cause: why GPUs sit idle while jobs wait.

The rule lives in ``monitoring.idle`` (pure: stdlib and engine types), shared with the
live portal (``gpuportal_idle_gpu_seconds_total{cause}`` and the dashboard's chart), so
the replay's report and the portal attribute idle GPUs the same way. Its docstring
states the rule.
"""

from __future__ import annotations

from monitoring.idle import CAUSE_LABELS, CAUSES, claim_rest, idle_claims, may_borrow, table

__all__ = ["CAUSES", "CAUSE_LABELS", "claim_rest", "idle_claims", "may_borrow", "table"]
