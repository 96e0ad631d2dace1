"""Online inference's daily demand on a shared node, learned, and what it leaves training.

Online inference follows its traffic: on a shared (``NodeView.inference``) node it takes
GPUs back as the day's load rises, and a training job in its way is stopped (an eviction,
R4). So work placed on a shared node's free GPUs should be predicted to end before
inference wants them (#19: on the live demo most of an experiment queue's evictions were
such stops).

The portal learns the demand from what it observes, whatever the backend: after each
applied plan it records, per shared node, the GPUs inference held in that UTC hour of
cluster time (``learn``). A profile keeps two days, today's hourly peaks and yesterday's,
so a changed pattern is forgotten within two days and the peak of an hour not yet seen
today comes from yesterday. ``hourly_peaks`` reads one peak per hour.

The snapshot gives the engine each shared node's ``inference_rise``: per UTC hour, how
many GPUs more than it holds now inference was seen to want then (empty: nothing learned,
no limit). A job ending at ``end`` may use a shared node's free GPUs less
``rise_until(rise, now, end)``, the largest rise over the hours it would run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DAY_S = 86400.0
HOUR_S = 3600.0
HOURS = 24


def _day_hour(t: float) -> tuple[int, int]:
    return int(t // DAY_S), int((t % DAY_S) // HOUR_S)


def learn(profile: Mapping[str, Any] | None, now: float, held: int) -> dict[str, Any]:
    """``profile`` with ``held`` GPUs recorded at cluster time ``now`` (a new dict).

    The shape is ``{"day": int, "today": [24 ints], "before": [24 ints], "since":
    float}``; an empty or malformed profile starts afresh, a day skipped forgets yesterday.
    ``since`` is when the unbroken observation began (``knows_whole_day``); a profile
    written before it existed starts counting now.
    """
    day, hour = _day_hour(now)
    p = dict(profile) if _valid(profile) else {}
    if not p:
        p = {"day": day, "today": [0] * HOURS, "before": [0] * HOURS, "since": now}
    elif day != p["day"]:
        kept = day == p["day"] + 1
        before = list(p["today"]) if kept else [0] * HOURS
        since = p.get("since", now) if kept else now
        p = {"day": day, "today": [0] * HOURS, "before": before, "since": since}
    else:
        p["today"] = list(p["today"])
    since = p.get("since")
    if not isinstance(since, int | float) or since > now:
        p["since"] = now
    if held > p["today"][hour]:
        p["today"][hour] = int(held)
    return p


def _valid(profile: Mapping[str, Any] | None) -> bool:
    if not isinstance(profile, Mapping):
        return False
    today, before = profile.get("today"), profile.get("before")
    return (
        isinstance(profile.get("day"), int)
        and isinstance(today, list)
        and isinstance(before, list)
        and len(today) == HOURS
        and len(before) == HOURS
    )


def hourly_peaks(profile: Mapping[str, Any] | None) -> tuple[int, ...]:
    """The GPUs inference was seen to want in each UTC hour (today's or yesterday's peak);
    empty when nothing was learned."""
    if not _valid(profile):
        return ()
    assert profile is not None
    peaks = tuple(
        max(int(a), int(b)) for a, b in zip(profile["today"], profile["before"], strict=True)
    )
    return peaks if any(peaks) else ()


def learning_since(profile: Mapping[str, Any] | None) -> float | None:
    """When ``profile``'s unbroken observation began (its first record, or the record
    after a skipped day), in cluster epoch seconds; None for a profile not (validly)
    learnt."""
    if not _valid(profile):
        return None
    assert profile is not None
    since = profile.get("since")
    return float(since) if isinstance(since, int | float) and not isinstance(since, bool) else None


def knows_whole_day(profile: Mapping[str, Any] | None, now: float) -> bool:
    """Whether ``profile`` has seen every UTC hour of the day: it has been learning for at
    least a day, so an hour with no rise is one where inference wanted nothing more, not
    one not seen yet."""
    since = learning_since(profile)
    return since is not None and now - since >= DAY_S


def rise(peaks: Sequence[int], held_now: int) -> tuple[int, ...]:
    """Per UTC hour, GPUs more than ``held_now`` inference was seen to want (empty when
    nothing was learned or it never wanted more)."""
    out = tuple(max(0, p - held_now) for p in peaks)
    return out if any(out) else ()


def rise_until(rise_by_hour: Sequence[int], now: float, end: float) -> int:
    """The largest rise over the UTC hours from ``now`` to ``end`` (0 when unknown)."""
    if not rise_by_hour or end <= now:
        return 0
    if end - now >= DAY_S:
        return max(rise_by_hour)
    first = int((now % DAY_S) // HOUR_S)
    hours = int((end - (now - now % HOUR_S)) // HOUR_S) + 1
    return max(rise_by_hour[(first + i) % HOURS] for i in range(min(hours, HOURS)))
