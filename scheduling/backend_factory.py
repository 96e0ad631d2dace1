"""Open the configured cluster backend: the Django side of ``scheduling.backends``.

The backends import no Django; this module reads the settings for them.
``get_backend`` looks SCHEDULING_BACKEND up in the registry
(``scheduling.backends.BACKENDS``, imported lazily) and opens that class with a
``BackendContext``: the Django settings as plain configuration values (then the
environment) and the simulator's database store. Call ``close()`` on the backend
inside the cycle's transaction (the simulator saves its state there).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.conf import settings

from scheduling.backends import backend_class
from scheduling.backends.base import ClusterBackend
from scheduling.backends.config import BackendConfig, BackendContext
from scheduling.backends.simulator import SimulatorBackend
from scheduling.sim_state import DatabaseSimulatorStore, ReadOnlySimulatorStore


class SettingsValues(Mapping[str, Any]):
    """The Django settings as a read-only mapping, read at lookup time (tests override
    settings per test). A setting that is absent or None is not in it."""

    def __getitem__(self, name: str) -> Any:
        value = getattr(settings, name, None) if name.isupper() else None
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return (name for name in dir(settings) if name.isupper() and name in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def backend_context(
    wall_now: float | None = None,
    *,
    advance: bool = True,
    store: DatabaseSimulatorStore | None = None,
) -> BackendContext:
    """What a backend is opened with: the settings, the instant, the simulator's store."""
    return BackendContext(
        config=BackendConfig(SettingsValues()),
        wall_now=wall_now,
        advance=advance,
        simulator_store=store or DatabaseSimulatorStore(),
    )


def get_backend(wall_now: float | None = None, *, advance: bool = True) -> ClusterBackend:
    """The configured backend, opened for one cycle (call ``close()`` inside the transaction).

    ``advance=False`` reads the simulator without moving its clock (read-only checks).
    """
    cls = backend_class(settings.SCHEDULING_BACKEND)
    return cls.open(backend_context(wall_now, advance=advance))


def open_simulator(
    store: DatabaseSimulatorStore | None = None,
    *,
    wall_now: float | None = None,
    advance: bool = True,
) -> SimulatorBackend:
    """The simulator backend whatever SCHEDULING_BACKEND says (drills, demo, tests);
    pass ``store`` to keep a handle on its row."""
    return SimulatorBackend.open(backend_context(wall_now, advance=advance, store=store))


@contextmanager
def read_only_backend() -> Iterator[ClusterBackend]:
    """The configured backend opened to read, changing nothing: the simulator as its last
    save left it (its row not locked, so a running cycle does not hold the reader up; its
    clock not moved; never saved), another backend closed after use."""
    if settings.SCHEDULING_BACKEND == "simulator":
        yield SimulatorBackend.open(backend_context(advance=False, store=ReadOnlySimulatorStore()))
        return
    backend = get_backend(advance=False)
    try:
        yield backend
    finally:
        backend.close()
