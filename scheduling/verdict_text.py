"""A waiting job's verdict for people: each number of ``pending_details`` with its label and
unit, and the one estimated start (or why there is none).

One formatter for every surface that shows a verdict: the job page renders these rows, and
the API adds them to ``pending_reason`` (``facts``, ``estimate``) so the page's live updates
and ``gpuctl explain`` say exactly the same. ``details`` stay machine fields (counts as
ints, times as ISO 8601 ``..._at``, durations as ``..._seconds``); this turns them into
``2026-12-01 00:30 UTC`` and ``2 h 10 min``, never an epoch or a float dump.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from scheduling.engine import borrowing
from scheduling.engine.explain import NO_ESTIMATE, duration, num, when
from scheduling.engine.line_estimate import BORROWING, ESTIMATE_BASIS, LINE
from scheduling.engine.overrun_note import OVERRUN_JOB, OVERRUN_RAN

# Words for the keys of ``pending_details`` (an unknown key reads as itself, capitalised).
LABELS: dict[str, str] = {
    "scope": "Limited by",
    "name": "Name",
    "held_gpus": "GPUs held now",
    "quota_gpus": "Quota (GPUs)",
    "requested_gpus": "GPUs this job asks",
    "room_gpus": "Room left under the quota (GPUs)",
    "short_gpus": "GPUs short",
    "waiting_ahead_gpus": "GPUs the jobs ahead of it wait for",
    "quota_room_at": "Quota room predicted at",
    "reservation_starts_at": "Nodes reserved for it from",
    "constraint": "Rule it breaks",
    "nodes_needed": "Nodes needed",
    "gpus_per_node": "GPUs per node",
    "largest_node_gpus": "Largest node (GPUs)",
    "max_gpu_memory_gb": "Largest GPU memory (GB)",
    "matching_nodes": "Nodes of the kind it asks",
    "qualifying_nodes": "Of those, with enough GPUs",
    "max_rack_nodes": "Most such nodes in one rack",
    "max_block_nodes": "Most such nodes in one block",
    "healthy_matching_nodes": "Healthy matching nodes",
    "unavailable_nodes": "Matching nodes unavailable",
    "maintenance_nodes": "Of those, entering scheduled maintenance",
    "maintenance_node_names": "Nodes entering maintenance",
    "maintenance_starts_at": "Maintenance starts at",
    "maintenance_reason": "Maintenance reason",
    "ahead_jobs": "Jobs ahead still waiting",
    "ahead_gpus": "GPUs they wait for",
    "reservations_ahead": "Reservations holding nodes",
    "overdue_reservations_ahead": "Of those, for jobs waiting past the starvation bound",
    "overdue_at": "Past the starvation bound since",
    "strict_order": "Strict order policy",
    "victims": "Jobs checkpointing to make room",
    "victim_gpus": "GPUs they free",
    "victims_stop_at": "They stop by",
    "deadline": "They stop by",
    "moving_off": "They move off",
    "consolidation": "Room made by moving jobs (they restart elsewhere)",
    "free_gpus": "Matching GPUs left free",
    "best_node_free": "Most free GPUs on one node",
    "best_rack": "Best rack",
    "best_rack_nodes": "Nodes with room in the best rack",
    "best_block_nodes": "Nodes with room in the best block",
    "where": "Free GPUs by rack",
    "underlying_code": "Underlying reason",
    "demoted": "Demoted",
    "preemption_count": "Times preempted",
    "attempts": "Launch attempts failed in a row",
    "failing_for_seconds": "Failing for",
    "backoff_seconds": "Wait before the next attempt",
    "next_attempt_at": "Next attempt",
    "error": "Error from the cluster",
    "borrow_refused": "Not borrowing idle capacity because",
    "quota_held_for": "Quota room held for job",
    "inference_reclaims_gpus": "Free GPUs online inference will want back before it ends",
    "predicted_end_at": "It would end by",
    "may_preempt_at": "May preempt from",
    "held_by": "Held by",
    "held_at": "Held since",
    "hold_reason": "Reason given",
    "hold_kind": "Kind of hold (admin: only an admin may release it)",
    # BEGIN_TIME (``scheduling.begin_time``), and DEPENDENCY of a job also asked to start later
    "begin_at": "Not before",
    # QUEUE_TIME_LIMIT (``scheduling.time_limits``)
    "time_limit_seconds": "Its time limit (a run)",
    "queue_max_time_limit_seconds": "The longest run its queue allows now",
    "waiting_for": "Waits for jobs",
    "waiting_for_arrays": "Waits for every task of arrays",
    "after_condition": "Starts once they have",
    "dependencies_end_at": "They are predicted to end by",
    # ARRAY_LIMIT (``scheduling.arrays``)
    "array": "Its array",
    "array_index": "Its index in the array",
    "max_running": "Most of its tasks at once",
    "tasks_holding_gpus": "Its tasks holding GPUs",
    "tasks_waiting_to_start": "Its tasks about to start",
    "tasks_before": "Its waiting tasks before this one",
    "place_opens_at": "A place opens at",
    ESTIMATE_BASIS: "Estimated start from",
    OVERRUN_JOB: "Its estimate waits for job",
    OVERRUN_RAN: "That job has run (past its predicted end)",
}

# ``details.estimate_basis`` (``scheduling.engine.line_estimate``), in words.
ESTIMATE_BASES: dict[str, str] = {
    LINE: (
        "its turn for the GPUs the running work and the jobs ahead of it release, not where "
        "they are: no nodes are reserved for it yet, so it is rougher than a reservation's"
    ),
    BORROWING: (
        "its turn to borrow idle capacity: when the GPUs the running work and the jobs ahead "
        "of it release come round to it, before its own quota room; it borrows then if the "
        "borrowing rules still allow it"
    ),
}

# ``details.borrow_refused`` of QUOTA_EXCEEDED (#19, ``scheduling.engine.borrowing``), in words.
BORROW_RULES: dict[str, str] = {
    borrowing.COOLDOWN: "it was preempted recently (cool-down)",
    borrowing.QUEUE_COOLDOWN: "its queue had work preempted recently (cool-down)",
    borrowing.EVICTION_CAP: "its queue's eviction ratio is above target (borrowing capped)",
    borrowing.EVICTION_BUDGET: (
        "the work that would be borrowed in its place would take its queue past the "
        "eviction target if reclaimed"
    ),
    borrowing.LENDERS_RETURN: "the lenders are predicted to need the GPUs back before it ends",
    borrowing.SWAP_RISK: (
        "the work that would be borrowed in its place is too big or has run too long to be put "
        "at risk for it"
    ),
}

# ``details.constraint`` of NEVER_FITS, in words.
CONSTRAINTS: dict[str, str] = {
    "gpus": "no GPUs asked",
    "no_nodes": "the cluster has no nodes",
    "gpus_per_node": "more GPUs per node than any node has",
    "gpu_memory": "more GPU memory than any GPU has",
    "rdma": "RDMA, which no node has",
    "gpu_model": "a GPU model no node has",
    "pool": "a pool no node is in",
    "inference": "only inference nodes match, which it may not share",
    "combination": "no node has all it asks together",
    "node_count": "more matching nodes than the cluster has",
    "block_size": "more matching nodes than any network block has",
}

# ``details.after_condition`` of DEPENDENCY (only when not the default, "succeeded"), in words.
AFTER_CONDITIONS: dict[str, str] = {
    "ended": "ended, whatever the outcome",
    "failed": "ended without succeeding (failed or cancelled)",
    "succeeded": "succeeded",
}

YES_NO = {"strict_order", "demoted", "consolidation"}
IDS = {"quota_held_for", OVERRUN_JOB}  # a job's id, not a count: "#27077", no separators
NUMBERS = {"array", "array_index"}  # an array's id, a task's index: "12345", no separators
ID_LISTS = {"waiting_for"}  # jobs' ids: "#12, #13"
ARRAY_LISTS = {"waiting_for_arrays"}  # arrays' ids: "array 42, array 43"
# How a verdict's texts name a job: "job 7905" in its message and estimate, "#7905" in its
# facts (``IDS``); and an array: "array 42" (``ARRAY_LISTS``, an ``ARRAY_LIMIT`` task's own).
# The job page links the ones the viewer may see (``job_refs``, ``array_refs``), and so does
# its live script (static/js/pages/jobs_detail.js, the same pattern): group 1 a job's id,
# group 2 an array's.
REFERENCE = re.compile(r"(?<![\w#])(?:(?:job #?|#)([0-9]+)|array ([0-9]+))\b", re.ASCII)


def _time(value: Any) -> str | None:
    """An ISO 8601 string (or, from rows written before #15, epoch seconds) as a date."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return when(value) if value else "unknown"
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return None


def format_value(key: str, value: Any) -> str:
    """One detail for people: dates, durations, yes/no, counts; never an epoch or a float."""
    if key.endswith("_at") or key == "deadline":
        text = _time(value)
        if text is not None:
            return text
    if key.endswith("_seconds") and isinstance(value, int | float) and not isinstance(value, bool):
        return duration(value)
    if key == "constraint" and isinstance(value, str):
        return CONSTRAINTS.get(value, value)
    if key == "borrow_refused" and isinstance(value, str):
        return BORROW_RULES.get(value, value)
    if key == ESTIMATE_BASIS and isinstance(value, str):
        return ESTIMATE_BASES.get(value, value)
    if key == "after_condition" and isinstance(value, str):
        return AFTER_CONDITIONS.get(value, value)
    if key in YES_NO or isinstance(value, bool):
        return "yes" if value else "no"
    if key in IDS:
        return f"#{value}"  # as the job's page names it: "Job #27077"
    if key in NUMBERS and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # as the array's page names it: "Array 12345", "task 7"
    if key in ID_LISTS and isinstance(value, list | tuple):
        return ", ".join(f"#{v}" for v in value) or "none"
    if key in ARRAY_LISTS and isinstance(value, list | tuple):
        return ", ".join(f"array {v}" for v in value) or "none"
    if isinstance(value, float):
        return num(round(value)) if value == int(value) else f"{value:,.1f}"
    if isinstance(value, int):
        return num(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return (
            ", ".join(f"{k}: {num(v) if isinstance(v, int) else v}" for k, v in value.items())
            or "none"
        )
    if value is None or value == "":
        return "none"
    return str(value)


def label(key: str) -> str:
    return LABELS.get(key) or key.replace("_", " ").capitalize()


# A row's place: the order of LABELS (what limits the job, then its numbers, then when and
# why), not the stored order, which the database's JSON does not keep; unknown keys last.
_RANK = {key: i for i, key in enumerate(LABELS)}


def facts(details: Any) -> list[dict[str, str]]:
    """``pending_details`` as rows ``{key, label, text}``, in the order of ``LABELS`` (keys
    it does not know last, in their own order); the reason for no estimate is not a row
    (``estimate`` says it)."""
    if not isinstance(details, dict):
        return []
    keys = sorted(
        (str(k) for k in details if k != NO_ESTIMATE), key=lambda k: _RANK.get(k, len(_RANK))
    )
    return [{"key": k, "label": label(k), "text": format_value(k, details[k])} for k in keys]


def job_refs(details: Any) -> list[int]:
    """The ids of the jobs a verdict names in its details (``IDS``: the job whose start
    holds the quota room, the overrunning run its estimate waits for; ``ID_LISTS``: the
    jobs it waits for), in order."""
    if not isinstance(details, dict):
        return []
    ids = {details.get(key) for key in IDS}
    for key in ID_LISTS:
        listed = details.get(key)
        ids.update(listed if isinstance(listed, list) else ())
    return sorted(i for i in ids if isinstance(i, int) and not isinstance(i, bool) and i > 0)


def array_refs(details: Any) -> list[int]:
    """The ids of the arrays a verdict names in its details (``ARRAY_LISTS``: the arrays
    it waits for; ``array``: an ``ARRAY_LIMIT`` task's own), in order."""
    if not isinstance(details, dict):
        return []
    ids = {details.get("array")}
    for key in ARRAY_LISTS:
        listed = details.get(key)
        ids.update(listed if isinstance(listed, list) else ())
    return sorted(i for i in ids if isinstance(i, int) and not isinstance(i, bool) and i > 0)


def estimate(estimated_start: datetime | None, details: Any) -> str:
    """The one estimated start: ``2026-12-01 00:30 UTC``, or ``unknown: <why>``."""
    if estimated_start is not None:
        return estimated_start.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    why = details.get(NO_ESTIMATE) if isinstance(details, dict) else None
    return f"unknown: {why}" if why else "unknown"
