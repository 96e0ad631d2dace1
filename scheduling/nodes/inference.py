"""GPUs serving online inference, as the portal reads them (#19).

On a shared node (``Node.inference``) online inference holds some GPUs, following its
traffic: they are neither free for training nor allocated to any job. The backend reports
a node's free GPUs without them, and the engine's snapshot carries those free GPUs and
every running job's placement, so what a shared node holds beyond its jobs and its
residual processes is inference (``inference_held``).

``record_plan`` receives ``scheduling.observers.plan_applied`` (connected in
``SchedulingConfig.ready``) and writes that count to ``Node.inference_gpus`` after every
applied plan, for the shared nodes whose count changed (one statement). It is read by the
one utilization (``scheduling.selectors.ClusterSummary``: GPUs in use by jobs or by
inference on healthy nodes) and by a node's free GPUs (``scheduling.nodes.selectors``).
It also learns the count into ``Node.inference_profile`` (hourly peaks, today's and
yesterday's), from which the snapshot tells the engine how much more inference will want
later in the day (#19).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping

from django.db import transaction

from scheduling.engine import Snapshot
from scheduling.engine.inference_forecast import learn
from scheduling.models import Node
from scheduling.sql import bulk_set

log = logging.getLogger(__name__)


def inference_held(snapshot: Snapshot, residual: Mapping[str, int]) -> dict[str, int]:
    """GPUs held by online inference on each shared node of ``snapshot``: its GPUs less
    the free ones, those of its running (and checkpointing) jobs and ``residual`` (GPUs of
    stale processes per node name), within ``0..gpus_total``."""
    on_node: dict[str, int] = defaultdict(int)
    for job in snapshot.running:
        for slot in job.placement:
            on_node[slot.node] += len(slot.gpus)
    out: dict[str, int] = {}
    for n in snapshot.nodes:
        if not n.inference:
            continue
        held = n.gpus_total - len(n.free_gpus) - on_node[n.name] - residual.get(n.name, 0)
        out[n.name] = max(0, min(n.gpus_total, held))
    return out


def record_inference(snapshot: Snapshot, now: float | None = None) -> int:
    """Write each shared node's inference GPUs (``inference_held``) where they changed and,
    given the cluster time ``now``, learn them into its daily profile
    (``inference_forecast.learn``); returns the nodes updated."""
    rows = list(
        Node.objects.filter(inference=True).values_list(
            "pk", "name", "residual_gpus", "inference_gpus", "inference_profile"
        )
    )
    held = inference_held(snapshot, {row[1]: row[2] for row in rows})
    changed = []
    for pk, name, _res, old, profile in rows:
        if name not in held:
            continue
        new = profile if now is None else learn(profile, now, held[name])
        if held[name] != old or new != profile:
            changed.append((pk, held[name], new))
    return bulk_set(Node, ["inference_gpus", "inference_profile"], changed)


def record_plan(
    sender: object, *, snapshot: Snapshot, now: float | None = None, **_: object
) -> None:
    """Receiver of ``plan_applied``. A failure here is logged and rolled back alone (a
    savepoint): the reading never stops a cycle."""
    try:
        with transaction.atomic():
            record_inference(snapshot, now)
    except Exception:  # noqa: BLE001 - the cycle goes on; the next plan writes again
        log.exception("inference GPUs not recorded for the plan")
