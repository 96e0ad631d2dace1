"""Drill fault kinds for the portal side: the one list is ``scheduling.simcore.faults``.

The fault API's choices, the node page's drill form and its "injected" message all
read from here, so a kind added to the simulator core is offered everywhere.
"""

from __future__ import annotations

from scheduling.simcore.faults import FAULT_KINDS, FAULT_LABELS


def fault_label(kind: str) -> str:
    """What the pages call ``kind`` (the kind itself when it is not one of ours)."""
    return FAULT_LABELS.get(kind, kind)


def fault_choices() -> list[tuple[str, str]]:
    """``(kind, label)`` pairs in the list's order, for a form's choices."""
    return [(kind, FAULT_LABELS[kind]) for kind in FAULT_KINDS]


__all__ = ["FAULT_KINDS", "FAULT_LABELS", "fault_choices", "fault_label"]
