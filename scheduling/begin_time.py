"""A job's earliest start (Slurm's ``sbatch --begin``): it is not started before
``Job.begin_at`` (cluster time).

Until then the loop holds it from the engine exactly as a job waiting for others
(``scheduling.snapshot``): no reservation, no quota room, no demand, no place in the fair
order; its verdict is ``BEGIN_TIME`` (``verdict``), its estimated start the begin time at
the earliest. From then it queues like any other job, and its wait counts from then
(Slurm's eligible time: the fair order, the starvation bound, ``gpuportal_job_wait_seconds``
and the pending-too-long alert), not from its submission. A job that also waits for other
jobs reads ``DEPENDENCY``, its estimated start no earlier than its begin time.

Given at submission (``of_request``): a time with a zone (the API's RFC 3339 text, the
form's time in the viewer's zone), at most ``MAX_AHEAD`` ahead; a time already past is no
wait at all (as Slurm takes it), and is not kept.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError

from core import time_text
from scheduling.engine import explain
from scheduling.engine import types as et

BEGIN_CODE = "BEGIN_TIME"
#: No earliest start further ahead than this (a typo of the year).
MAX_AHEAD = timedelta(days=366)
REMEDY = "Nothing to do: it queues like any other job from then."


def of_request(value: Any, now: Callable[[], datetime]) -> datetime | None:
    """The ``begin_at`` a job submitted now (``now``: the cluster clock, read only when a
    time is given) gets: None when none is given or it is already past (no wait), else the
    time in UTC; a ``ValidationError`` on ``begin_at`` when it is not a time with a zone,
    or further ahead than ``MAX_AHEAD``."""
    if value in (None, ""):
        return None
    begin = time_text.parse_time(value, "begin_at", MAX_AHEAD)
    at = now()
    if begin - at > MAX_AHEAD:
        raise ValidationError(
            {
                "begin_at": [
                    f"at most {MAX_AHEAD.days} days ahead (cluster time is {at:%Y-%m-%d %H:%M UTC})"
                ]
            }
        )
    return begin if begin > at else None


def waits(begin_ts: float | None, now: float) -> bool:
    """Is a job with this earliest start (epoch seconds; None: none) held at ``now``?"""
    return begin_ts is not None and begin_ts > now


def verdict(begin_ts: float) -> et.Verdict:
    """``BEGIN_TIME``: the verdict of a job held until its earliest start (epoch seconds),
    its estimated start that time (at the earliest: it then queues)."""
    return et.Verdict(
        BEGIN_CODE,
        f"Asked not to start before {explain.when(begin_ts)} (Slurm's --begin): it queues "
        "from then.",
        {"begin_at": explain.iso(begin_ts)},
        REMEDY,
        estimated_start=begin_ts,
    )
