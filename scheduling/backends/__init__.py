"""Cluster backends behind one interface (``base.ClusterBackend``), chosen by SCHEDULING_BACKEND."""

from __future__ import annotations

from django.conf import settings

from scheduling.backends.base import ClusterBackend


def open_backend(wall_now: float | None = None, *, advance: bool = True) -> ClusterBackend:
    """The configured backend, opened for one cycle (call ``close()`` inside the transaction).

    ``advance=False`` reads the simulator without moving its clock (read-only checks).
    """
    kind = settings.SCHEDULING_BACKEND
    if kind == "simulator":
        from scheduling.backends.simulator import SimulatorBackend

        return SimulatorBackend(wall_now, advance=advance)
    if kind == "slurm":
        from scheduling.backends.slurm import SlurmBackend  # type: ignore[import-not-found]

        return SlurmBackend()
    from scheduling.backends.kubernetes import KubernetesBackend  # type: ignore[import-not-found]

    return KubernetesBackend()
