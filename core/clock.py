"""The portal's one clock: every time it records or shows is ``now()``.

``now()`` is cluster time: the wall clock on real backends, the simulator's virtual
clock on the simulator (which runs ``SIMULATOR_SPEED`` times faster than the wall).
``core`` is the bottom layer and knows no cluster, so the clock is a provider registered
at start-up: ``SchedulingConfig.ready`` registers ``scheduling.clock.cluster_now``.
Before that (or in a process without the scheduling app) it is the wall clock,
``django.utils.timezone.now``.

How models stamp with it:

- a creation time: ``ClusterTimeField(auto_now_add=True)``, stamped at insert unless
  the caller gave one (e.g. the demo generator's arrival minute);
- a last-change time: ``ClusterTimeField(auto_now=True)``, Django's ``auto_now`` on this
  clock (stamped by every ``save()`` that writes the field, ``update_fields`` included);
- ``objects = ClockManager()``: a ``bulk_create`` reads the clock once for all its rows.

``pinned(at)`` makes every ``now()`` inside the block return ``at``: the scheduling
cycle pins its own cluster time (so all it writes carries one instant and no write reads
the clock again), and bulk writers pin one reading for thousands of rows. Each web
request is ``one_instant()`` (``ClockMiddleware``): the first stamp it writes reads the
clock and the rest reuse that reading, so an action's rows agree to the microsecond and
a timeline never shows an action's own lines out of order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

Provider = Callable[[], datetime]


class _Pin:
    """An instant held for a block; ``at`` None: read on first use (``one_instant``)."""

    __slots__ = ("at",)

    def __init__(self, at: datetime | None) -> None:
        self.at = at


_provider: Provider = timezone.now
_pinned: ContextVar[_Pin | None] = ContextVar("core_clock_pinned", default=None)


def set_provider(provider: Provider | None) -> None:
    """Make ``provider`` the clock (None: back to the wall clock). Called at start-up."""
    global _provider
    _provider = provider or timezone.now


def provider() -> Provider:
    """The registered clock (for tests and for code that must say which clock it read)."""
    return _provider


def now() -> datetime:
    """Cluster time, aware (UTC): the pinned instant inside ``pinned``/``one_instant``,
    else a fresh reading of the provider."""
    pin = _pinned.get()
    if pin is None:
        return _provider()
    if pin.at is None:
        pin.at = _provider()
    return pin.at


@contextmanager
def pinned(at: datetime | None = None) -> Iterator[datetime]:
    """Within the block ``now()`` is ``at`` (default: one reading of the clock, now)."""
    pin = _Pin(at if at is not None else now())
    token = _pinned.set(pin)
    try:
        yield pin.at  # type: ignore[misc]
    finally:
        _pinned.reset(token)


@contextmanager
def one_instant() -> Iterator[None]:
    """Within the block every ``now()`` is the first one's reading: one action, one time
    (a job and its ``submitted`` event; a cancel, its event and its audit record). The
    clock is read only if something stamps. Inside ``pinned`` it changes nothing."""
    if _pinned.get() is not None:
        yield
        return
    token = _pinned.set(_Pin(None))
    try:
        yield
    finally:
        _pinned.reset(token)


class ClockMiddleware:
    """Each request is one instant on the cluster clock (``one_instant``): what an action
    writes carries one time, read when it first stamps (after its locks, not before)."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        with one_instant():
            return self.get_response(request)


class ClusterTimeField(models.DateTimeField):
    """A ``DateTimeField`` stamped with ``core.clock.now()`` (Django's ``auto_now`` and
    ``auto_now_add`` stamp with the wall clock, ``timezone.now()``).

    ``auto_now=True``: every ``save()`` that writes the field (a last-change time).
    ``auto_now_add=True``: at insert, unless the row already has a time (a creation time
    a caller may give: the demo generator's arrival minute, a test's fixture). The clock is
    read when the row is written, not when the object is built, so building one in memory
    reads nothing.
    """

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        given = getattr(model_instance, self.attname)
        if self.auto_now or (self.auto_now_add and add and given is None):
            value = now()
            setattr(model_instance, self.attname, value)
            return value
        return given


class OneInstantQuerySet(models.QuerySet):
    """``bulk_create`` in one instant: the rows inserted together carry one time, read once
    (not once per row)."""

    def bulk_create(self, *args: Any, **kwargs: Any) -> list:
        with one_instant():
            return super().bulk_create(*args, **kwargs)


class ClockManager(models.Manager.from_queryset(OneInstantQuerySet)):  # type: ignore[misc]
    """The default manager of models stamped with ``ClusterTimeField``."""
