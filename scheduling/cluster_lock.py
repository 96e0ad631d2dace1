"""One writer of the cluster at a time: a PostgreSQL advisory lock held by the cycle's transaction.

The lock lives exactly as long as the transaction: commit, rollback or a worker
dying (its connection drops) all release it at once, so a killed worker never
blocks the loop. Beat-driven cycles *try* the lock and skip when it is taken
(a slow cycle is skipped, not stacked); API-driven actions wait a bounded time.
"""

from __future__ import annotations

from django.db import OperationalError, connection, transaction

# "gpuloop" as a 63-bit key; any constant works as long as it is the only user.
CLUSTER_LOCK_KEY = int.from_bytes(b"gpuloop", "big")


class ClusterBusy(Exception):
    """Another loop iteration holds the cluster for longer than we wait."""


def try_cluster_lock() -> bool:
    """Take the lock for the current transaction if free; False if another holds it."""
    if not connection.in_atomic_block:
        raise RuntimeError("the cluster lock must be taken inside transaction.atomic()")
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [CLUSTER_LOCK_KEY])
        return bool(cur.fetchone()[0])


def wait_cluster_lock(timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for the lock (current transaction); raise ClusterBusy after."""
    if not connection.in_atomic_block:
        raise RuntimeError("the cluster lock must be taken inside transaction.atomic()")
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = %s", [f"{int(timeout_s * 1000)}ms"])
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [CLUSTER_LOCK_KEY])
    except OperationalError as exc:
        raise ClusterBusy("the scheduling loop is busy; try again in a few seconds") from exc
    with connection.cursor() as cur:
        cur.execute("SET LOCAL lock_timeout = 0")
