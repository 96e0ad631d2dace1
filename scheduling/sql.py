"""Fast bulk writes for the loop (PostgreSQL): ``UPDATE ... FROM (VALUES ...)``.

Django's ``bulk_update`` builds one CASE expression per field and row, which costs
seconds at thousands of rows; this costs milliseconds. Values go through each
field's ``get_db_prep_value`` and are cast to its database type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, models

BATCH = 1000


def bulk_set(
    model: type[models.Model],
    fields: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    *,
    where: str = "",
) -> int:
    """Set ``fields`` on rows given as ``(pk, value, ...)`` tuples; returns rows updated.

    ``where`` is an extra SQL condition on the target alias ``t`` (a compare-and-set guard,
    e.g. ``"t.state = 'pending'"``); it must be a constant written by the caller.
    """
    if not rows:
        return 0
    meta = model._meta
    columns = [meta.get_field(name) for name in fields]
    pk = meta.pk
    casts = [pk.db_type(connection)] + [f.db_type(connection) for f in columns]
    placeholder = "(" + ", ".join(f"%s::{cast}" for cast in casts) + ")"
    names = ["pk"] + [f"c{i}" for i in range(len(columns))]
    sets = ", ".join(f'"{f.column}" = v.c{i}' for i, f in enumerate(columns))
    guard = f" AND {where}" if where else ""
    updated = 0
    with connection.cursor() as cur:
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            params: list[Any] = []
            for row in batch:
                params.append(pk.get_db_prep_value(row[0], connection))
                for field, value in zip(columns, row[1:], strict=True):
                    params.append(field.get_db_prep_value(value, connection, prepared=False))
            cur.execute(
                f'UPDATE "{meta.db_table}" AS t SET {sets} '
                f"FROM (VALUES {', '.join([placeholder] * len(batch))}) AS v({', '.join(names)}) "
                f'WHERE t."{pk.column}" = v.pk{guard}',
                params,
            )
            updated += cur.rowcount
    return updated
