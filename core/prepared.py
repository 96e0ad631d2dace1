"""Querysets compiled to SQL once and run many times: the lookups every API request makes.

Django compiles a QuerySet to SQL each time it is evaluated. For the lookups on the hot
path (the token with its user and role on every API request, the queue a job is submitted
to), compiling costs three to four times what running the query does: about 1 ms of CPU
a lookup on the 2-core benchmark machine, against 0.3 ms for the same SQL run as it is
(docs/api.md, "Throughput"). ``Prepared`` compiles the queryset once per thread, with
marker values standing in for the lookup's values, and each call puts the real values in
the markers' places, runs that SQL and builds the model instances exactly as iterating
the queryset does (``django.db.models.query.ModelIterable``: the compiler's columns,
converters, ``select_related`` populators and annotations). The queryset is written once,
as an ordinary queryset, so the rules it encodes (who may see what) stay in one place.

What may be prepared: a queryset of model instances (not ``values()``), without
``prefetch_related``, whose lookup values reach the SQL parameters unchanged: exact lookups
on plain fields and foreign keys (``key=``, ``pk=``, ``name=``, ``user=<id>``). ``Prepared``
refuses anything else when it compiles (a marker that does not reach the parameters as
given raises ``ValueError``), so a lookup that would transform its value fails loudly, at
the first call, never silently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable, get_related_populators

# Stand-ins for the lookup values while compiling: values no lookup is ever made with.
_MARKERS: dict[type, Callable[[int], Any]] = {
    str: lambda i: f"\x00prepared-marker-{i}\x00",
    int: lambda i: -(2**62) - i,
}


@dataclass(frozen=True)
class _Compiled:
    """One thread's compiled form of the queryset: SQL, parameters, where the values go,
    and how rows become instances."""

    sql: str
    params: tuple
    slots: tuple[tuple[int, int], ...]  # (parameter index, value index)
    compiler: Any
    model: type[Model]
    init_list: tuple[str, ...]
    start: int
    end: int
    populators: tuple
    annotations: tuple[tuple[str, int], ...]


class Prepared:
    """``build(*values)``'s queryset, compiled once per thread; ``prepared(*values)`` returns
    its instances as ``list(build(*values))`` would, in one query and without compiling.

    ``types`` are the types of the values (``str`` or ``int``), in ``build``'s order.
    """

    def __init__(self, build: Callable[..., QuerySet], *types: type) -> None:
        _check_types(types)
        self.build = build
        self.types = types
        self._local = threading.local()

    def __call__(self, *values: Any) -> list[Any]:
        _check_values(self.types, values)
        compiled = getattr(self._local, "compiled", None) or self._compile()
        params = _filled(compiled.params, compiled.slots, values)
        alias = compiled.compiler.using
        with connections[alias].cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall()
        found = []
        for row in compiled.compiler.results_iter(results=[rows]):
            obj = compiled.model.from_db(
                alias, compiled.init_list, row[compiled.start : compiled.end]
            )
            for populator in compiled.populators:
                populator.populate(row, obj)
            for name, position in compiled.annotations:
                setattr(obj, name, row[position])
            found.append(obj)
        return found

    def first(self, *values: Any) -> Any | None:
        """The first instance, or None."""
        found = self(*values)
        return found[0] if found else None

    def _compile(self) -> _Compiled:
        markers = _markers(self.types)
        queryset = self.build(*markers)
        if queryset._iterable_class is not ModelIterable or queryset._prefetch_related_lookups:
            raise ValueError("Prepared runs querysets of model instances, without prefetches")
        if queryset._known_related_objects:
            raise ValueError("Prepared runs querysets without known related objects")
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        slots = _slots(sql, params, markers)
        klass_info, select = compiler.klass_info, compiler.select
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        compiled = _Compiled(
            sql=sql,
            params=tuple(params),
            slots=slots,
            compiler=compiler,
            model=klass_info["model"],
            init_list=tuple(column[0].target.attname for column in select[start:end]),
            start=start,
            end=end,
            populators=tuple(get_related_populators(klass_info, select, queryset.db)),
            annotations=tuple((compiler.annotation_col_map or {}).items()),
        )
        self._local.compiled = compiled
        return compiled


def _check_types(types: tuple[type, ...]) -> None:
    """A TypeError unless every one of ``types`` has a marker (``str``, ``int``)."""
    unknown = [t for t in types if t not in _MARKERS]
    if unknown:
        raise TypeError(f"prepared queries take str and int values, not {unknown}")


def _check_values(types: tuple[type, ...], values: tuple) -> None:
    """A TypeError unless there is one value for each of ``types``."""
    if len(values) != len(types):
        raise TypeError(f"{len(types)} values expected, {len(values)} given")


def _filled(params: tuple, slots: tuple[tuple[int, int], ...], values: tuple) -> list:
    """The compiled ``params`` with ``values`` in their ``slots`` (``_slots``)."""
    filled = list(params)
    for position, index in slots:
        filled[position] = values[index]
    return filled


def _markers(types: tuple[type, ...]) -> list[Any]:
    """The stand-ins for values of ``types``, in order."""
    return [_MARKERS[t](i) for i, t in enumerate(types)]


def _slots(sql: str, params: Any, markers: list[Any]) -> tuple[tuple[int, int], ...]:
    """Where each marker's value goes among ``params``: ``(parameter index, value index)``;
    a ValueError when one does not reach them unchanged."""
    slots = tuple(
        (position, index)
        for position, param in enumerate(params)
        for index, marker in enumerate(markers)
        if type(param) is type(marker) and param == marker
    )
    if {index for _, index in slots} != set(range(len(markers))):
        raise ValueError(f"not every value reaches the SQL parameters unchanged: {sql}")
    return slots


class PreparedCount:
    """``build(*values).count()``, its SQL compiled once per thread (per database alias):
    ``prepared(*values)`` runs ``SELECT COUNT(*)`` over the queryset's rows (its ordering
    dropped, as ``count()`` drops it) in one query, without compiling. The values reach
    the SQL as ``Prepared``'s do (``types``: ``str`` or ``int``, checked when compiled)."""

    def __init__(self, build: Callable[..., QuerySet], *types: type) -> None:
        _check_types(types)
        self.build = build
        self.types = types
        self._local = threading.local()

    def __call__(self, *values: Any) -> int:
        _check_values(self.types, values)
        compiled = getattr(self._local, "compiled", None)
        if compiled is None:
            markers = _markers(self.types)
            queryset = self.build(*markers).order_by()
            inner, params = queryset.values("pk").query.sql_with_params()
            sql = f"SELECT COUNT(*) FROM ({inner}) counted"
            compiled = self._local.compiled = (sql, tuple(params), _slots(sql, params, markers),
                                               queryset.db)  # fmt: skip
        sql, params, slots, alias = compiled
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, _filled(params, slots, values))
            return int(cursor.fetchone()[0])


@dataclass(frozen=True)
class _CompiledInsert:
    sql: str
    fields: tuple
    compiler: Any


class PreparedInsert:
    """The INSERT ``Model.save()`` makes for a new ``model`` row (every concrete field but an
    automatic primary key, ``RETURNING`` it), its SQL compiled once per thread.

    ``prepared(obj)`` returns ``(sql, params)`` for ``obj``: the values go through each
    field's ``pre_save`` and database preparation as Django's compiler does them (a
    ``ClusterTimeField`` stamps, a JSON field adapts), only the SQL text is not rebuilt.
    The caller runs it (alone, or inside a larger statement). A value that is an SQL
    expression (``F()``, a database default) needs its own SQL: that row is compiled in full.
    """

    def __init__(self, model: type[Model]) -> None:
        self.model = model
        meta = model._meta
        self.fields = tuple(
            f for f in meta.local_concrete_fields if not f.generated and f is not meta.auto_field
        )
        self._local = threading.local()

    def _compiler(self, obj: Model, alias: str) -> Any:
        from django.db.models.sql import InsertQuery

        query = InsertQuery(self.model)
        query.insert_values(list(self.fields), [obj])
        compiler = query.get_compiler(using=alias)
        compiler.returning_fields = [self.model._meta.pk]
        return compiler

    def __call__(self, obj: Model, using: str = "default") -> tuple[str, list]:
        compiled = getattr(self._local, "compiled", None)
        if compiled is None or compiled.compiler.using != using:
            compiler = self._compiler(obj, using)
            ((sql, params),) = compiler.as_sql()
            if sql.count("%s") == len(self.fields) == len(params):  # plain placeholders only
                self._local.compiled = _CompiledInsert(sql, self.fields, compiler)
            return sql, list(params)
        compiler = compiled.compiler
        values = [compiler.prepare_value(f, compiler.pre_save_val(f, obj)) for f in compiled.fields]
        if any(hasattr(value, "as_sql") for value in values):
            ((sql, params),) = self._compiler(obj, using).as_sql()
            return sql, list(params)
        return compiled.sql, values
