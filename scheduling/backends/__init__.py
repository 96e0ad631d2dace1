"""The backend registry: SCHEDULING_BACKEND names one of :data:`BACKENDS`.

Each entry is the dotted path of a ``base.ClusterBackend`` subclass, imported on
first use only: a portal on the simulator never imports the Slurm or Kubernetes
modules (nor the ``kubernetes`` client). ``portal/settings.py`` validates
SCHEDULING_BACKEND against these names at start-up, so this module imports nothing
heavy at import time. The factory that opens the configured backend with the Django
settings is ``scheduling/backend_factory.py`` (backends import no Django).

Adding a backend: write the subclass (``open(context)`` builds it from plain
configuration values), add its dotted path here, pass the contract suite
(``tests/backends/contract.py``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduling.backends.base import ClusterBackend

BACKENDS: dict[str, str] = {
    "simulator": "scheduling.backends.simulator.SimulatorBackend",
    "slurm": "scheduling.backends.slurm.SlurmBackend",
    "kubernetes": "scheduling.backends.kubernetes.KubernetesBackend",
}


class UnknownBackendError(LookupError):
    """A backend name that is not in :data:`BACKENDS`."""


def unknown_backend_message(name: object) -> str:
    """The one wording for an unknown backend (the start-up check says the same)."""
    return f"SCHEDULING_BACKEND must be one of {', '.join(BACKENDS)}; got {name!r}"


def backend_class(name: str) -> type[ClusterBackend]:
    """The backend class registered as ``name`` (its module is imported on the first call).

    Raises :class:`UnknownBackendError` for a name not registered and ``TypeError`` for
    a path that does not name a ``ClusterBackend`` subclass.
    """
    from scheduling.backends.base import ClusterBackend  # engine types: not at import time

    try:
        path = BACKENDS[name]
    except (KeyError, TypeError):
        raise UnknownBackendError(unknown_backend_message(name)) from None
    module, _, attr = path.rpartition(".")
    cls = getattr(import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, ClusterBackend)):
        raise TypeError(f"{path} (backend {name!r}) is not a ClusterBackend subclass")
    return cls
