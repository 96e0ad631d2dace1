"""One submission of a person at a time: a PostgreSQL advisory lock held by its transaction.

What a submission checks against the person's other jobs (the bound on their active jobs,
``services.check_active_jobs``; the older jobs a ``singleton`` job waits for,
``services.check_dependencies``) must still hold when its rows commit. Two submissions of
one person at the same instant would otherwise both count before either wrote, and pass
the bound together, or both start as the only job of their name. The lock is keyed by the
person (two-integer keys, a space apart from the cluster lock's one ``bigint``), so other
people's submissions never wait for it; it lives exactly as long as the transaction, so a
request that dies releases it at once. The scheduling loop never takes it.
"""

from __future__ import annotations

from django.db import connection

# "subm" as a 32-bit key: the first of the two keys, the person's id the second
SUBMISSION_LOCK_KEY = int.from_bytes(b"subm", "big")  # fits a signed int4


def hold_submissions_of(user_id: int) -> None:
    """Wait for the person's other submissions to commit, then hold theirs until the
    current transaction ends (its rows counted and written under the lock)."""
    if not connection.in_atomic_block:
        raise RuntimeError("the submission lock must be taken inside transaction.atomic()")
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)", [SUBMISSION_LOCK_KEY, user_id & 0x7FFFFFFF]
        )
        # (an id past an int4 shares its key with another person's: both wait, nothing worse)
