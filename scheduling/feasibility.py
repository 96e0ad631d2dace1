"""Could a submitted job ever run on this cluster? The shape of the cluster, read once.

The rule is the engine's (``scheduling.engine.feasibility``: the planner reads NEVER_FITS
by it); this module reads the cluster's shape from the ``Node`` table in one grouped query
(per rack and kind of node: how many, whatever their state: a cordoned or failed node still
counts, the cluster "empty and all healthy") and turns a job's resolved fields into the
engine's ``Ask``. The submit service refuses a request the shape could never satisfy, with
a 400 naming the request field and the rule.

One query per submission or per batch (``submit_jobs`` reads it once for thousands of
jobs); checks against one shape are cached (``feasibility.fit`` is memoised on the frozen
shape and ask), so a batch costs one check per distinct kind of request.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from scheduling.engine.feasibility import Ask, ClusterShape, NodeKind, Refusal, check
from scheduling.models import Node

__all__ = ["Ask", "ClusterShape", "Refusal", "ask_for", "read_cluster_shape", "refusal_for"]


def read_cluster_shape() -> ClusterShape:
    """Every node, grouped by rack and kind: one aggregate query (a few hundred rows for
    the 1,250-node demo cluster)."""
    table = Node._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT block, rack, gpus_total, gpu_memory_gb, gpu_model, rdma, inference, "
            f"count(*) FROM {table} "
            "GROUP BY block, rack, gpus_total, gpu_memory_gb, gpu_model, rdma, inference"
        )
        rows = cursor.fetchall()
    return ClusterShape(
        tuple(
            NodeKind(block, rack, gpus, memory, model, rdma, inference, None, count)
            for block, rack, gpus, memory, model, rdma, inference, count in rows
        )
    )


def ask_for(fields: dict[str, Any]) -> Ask:
    """The engine's view of a job's resolved fields (``services.resolve_job_request``): it
    may share an inference node only if preemptible and not ``avoid_inference``."""
    return Ask(
        gpus=fields["gpus"],
        gpus_per_node=fields.get("gpus_per_node"),
        gpu_memory_gb=fields.get("gpu_memory_gb") or None,
        rdma=bool(fields.get("rdma")),
        inference_ok=bool(fields.get("preemptible")) and not fields.get("avoid_inference"),
    )


def refusal_for(fields: dict[str, Any], shape: ClusterShape) -> Refusal | None:
    """None when the job could run on the empty, healthy cluster; else the rule it breaks."""
    return check(shape, ask_for(fields))
