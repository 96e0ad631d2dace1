"""A person's own order among their waiting jobs (Slurm's ``scontrol top``).

A person may put one of their waiting jobs first among their own (``PendingJob.
first_among_own``: when they did; the latest goes first). It changes nothing for anyone
else: once the order is made (``aging.order``, people's turns included), the places that
the person's jobs of one line, tier and demotion hold (``group``, as ``user_turns`` groups
them) are handed out again among those same jobs: the ones put first, latest first, then
the others in their order. Every other job keeps its place; jobs of another tier, line or
demotion are never swapped with them; overdue jobs (the starvation bound, ``aging``) are
not reordered. Without any job put first, the order is exactly as it was.

Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from .types import PendingJob


def own_first(order: Sequence[PendingJob], groups: Sequence[Hashable | None]) -> list[PendingJob]:
    """``order`` with each person's jobs of a group (``groups[i]``: the group of
    ``order[i]``; None for a job left in place) in their own order (the module's rule)."""
    out = list(order)
    places: dict[tuple[Hashable, str], list[int]] = {}
    for i, key in enumerate(groups):
        if key is not None and order[i].first_among_own:
            places.setdefault((key, order[i].owner), [])
    if not places:
        return out
    for i, key in enumerate(groups):
        if key is not None and (key, order[i].owner) in places:
            places[(key, order[i].owner)].append(i)
    for spots in places.values():
        jobs = sorted((out[i] for i in spots), key=lambda j: -j.first_among_own)  # stable
        for i, job in zip(spots, jobs, strict=True):
            out[i] = job
    return out
