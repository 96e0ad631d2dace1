"""Fast bulk writes for the loop (PostgreSQL): ``UPDATE ... FROM`` a list of new values.

Django's ``bulk_update`` builds one CASE expression per field and row, which costs
seconds at thousands of rows. ``bulk_set`` sends the new values either inline
(``FROM (VALUES ...)``, for a few rows: one statement) or, from ``COPY_FROM_ROWS`` rows
on, through ``COPY`` into a temporary table that the ``UPDATE`` joins (the verdicts of
thousands of waiting jobs: the values are encoded by psycopg's C code in one stream
instead of being quoted one by one into a statement of tens of thousands of
placeholders). Either way one ``UPDATE`` writes every row, values are converted as
each field's ``get_db_prep_value`` would, and cast to its database type.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from django.db import connection, models, transaction

BATCH = 1000
COPY_FROM_ROWS = 200

# Fields whose ``get_db_prep_value`` passes a value of the right type through unchanged
# (what psycopg adapts by itself): no per-value call needed.
_AS_IS = {
    "AutoField", "BigAutoField", "BigIntegerField", "BooleanField", "CharField",
    "DateTimeField", "FloatField", "ForeignKey", "IntegerField", "PositiveIntegerField",
    "PositiveSmallIntegerField", "SmallIntegerField", "TextField",
}  # fmt: skip
_names = itertools.count()


def _converter(field: models.Field) -> Callable[[Any], Any] | None:
    """How a value of ``field`` is sent: None when as it is, else a function."""
    internal = field.get_internal_type()
    if internal == "JSONField":
        # What ``adapt_json_value`` sends (``Jsonb`` with these dumps), as text; None is
        # SQL NULL, as in ``save`` and ``_set_by_values``.
        encoder = field.encoder  # type: ignore[attr-defined]
        dumps = json.dumps if encoder is None else partial(json.dumps, cls=encoder)
        return lambda value: None if value is None else dumps(value)
    if internal in _AS_IS:
        return None
    return lambda value: field.get_db_prep_value(value, connection, prepared=False)


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
    if len(rows) >= COPY_FROM_ROWS:
        return _set_by_copy(model, fields, rows, where)
    return _set_by_values(model, fields, rows, where)


def _set_by_values(
    model: type[models.Model], fields: Sequence[str], rows: Sequence[tuple[Any, ...]], where: str
) -> int:
    """A few rows: ``UPDATE ... FROM (VALUES (...), ...)`` with each value a parameter."""
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


def _set_by_copy(
    model: type[models.Model], fields: Sequence[str], rows: Sequence[tuple[Any, ...]], where: str
) -> int:
    """Many rows: ``COPY`` them into a temporary table, then one ``UPDATE ... FROM`` it.

    The table lives for this call only (dropped at once, and at commit if the call
    fails half-way); ``transaction.atomic`` gives it a transaction outside one.
    """
    meta = model._meta
    columns = [meta.get_field(name) for name in fields]
    pk = meta.pk
    convert = [_converter(pk)] + [_converter(f) for f in columns]
    temp = f"_bulk_set_{next(_names)}"
    definition = ", ".join(
        [f"pk {pk.db_type(connection)}"]
        + [f"c{i} {f.db_type(connection)}" for i, f in enumerate(columns)]
    )
    sets = ", ".join(f'"{f.column}" = v.c{i}' for i, f in enumerate(columns))
    guard = f" AND {where}" if where else ""
    with transaction.atomic(savepoint=False), connection.cursor() as cur:
        cur.execute(f"CREATE TEMPORARY TABLE {temp} ({definition}) ON COMMIT DROP")
        with cur.copy(f"COPY {temp} FROM STDIN") as copy:
            for row in rows:
                copy.write_row(
                    [v if f is None else f(v) for f, v in zip(convert, row, strict=True)]
                )
        cur.execute(
            f'UPDATE "{meta.db_table}" AS t SET {sets} FROM {temp} AS v '
            f'WHERE t."{pk.column}" = v.pk{guard}'
        )
        updated = cur.rowcount
        cur.execute(f"DROP TABLE {temp}")
    return updated
