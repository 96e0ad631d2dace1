"""How a backend gets its configuration: plain values, handed in by the factory.

Backends import no Django (the import-linter contract "Backends speak engine types,
not models"). ``scheduling/backend_factory.py`` reads the Django settings and hands a
backend class a :class:`BackendContext` whose :class:`BackendConfig` looks a name up in
those values first, then in the environment, then takes the default. Tests (and
scripts) build the same objects from plain dicts.

Invariant: an unset value and an empty string are the same ("not configured"),
unless the caller says ``keep_empty`` (``KUBERNETES_RDMA_RESOURCE=""`` switches RDMA
requests off, which is not the same as leaving it unset).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduling.backends.sim_store import SimulatorStore


def _is_set(value: Any, keep_empty: bool) -> bool:
    return value is not None and (keep_empty or value != "")


@dataclass(frozen=True)
class BackendConfig:
    """Named configuration values: ``values`` first, then ``environ``, then the default.

    ``environ=None`` reads ``os.environ`` at lookup time (so a test's ``setenv`` counts).
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None

    def get(self, name: str, default: Any = None, *, keep_empty: bool = False) -> Any:
        """The configured value of ``name``, or ``default`` when neither source sets it."""
        environ = os.environ if self.environ is None else self.environ
        for source in (self.values, environ):
            value = source.get(name)
            if _is_set(value, keep_empty):
                return value
        return default

    def pick(self, given: Any, name: str, default: Any = None, *, keep_empty: bool = False) -> Any:
        """``given`` (a keyword argument of the backend) unless it is None, else :meth:`get`."""
        return given if given is not None else self.get(name, default, keep_empty=keep_empty)


@dataclass(frozen=True)
class BackendContext:
    """Everything a backend class is opened with for one cycle (``ClusterBackend.open``).

    ``wall_now`` is the wall-clock instant the cycle runs at (None: now); ``advance=False``
    opens the backend read-only as far as time goes (the simulator's clock stays put).
    ``simulator_store`` is where the simulator keeps its state between cycles; the
    real backends keep nothing (the cluster stores it) and ignore it.
    """

    config: BackendConfig = field(default_factory=BackendConfig)
    wall_now: float | None = None
    advance: bool = True
    simulator_store: SimulatorStore | None = None
