"""Pure-Python core of the cluster simulator (the standard library and the engine's value
types only: no Django, no Celery).

The Django simulator backend and the trace replay both drive it in memory.

The package exports the simulator, its nodes, errors and observation types. The
vocabulary of what it reports (job states such as ``RUNNING``, event kinds such as
``JOB_FAILED``) lives in one place, :mod:`scheduling.simcore.observation`: import it
from there.
"""

from .cluster import (
    HEALTH_DOWN,
    HEALTH_GPU_FAILURE,
    HEALTH_OK,
    HEALTH_RDMA_DEGRADED,
    HEALTH_STATES,
    SimNode,
    build_demo_cluster,
)
from .errors import PermanentError, SimError, TransientError
from .observation import ClusterObservation, JobObservation, NodeObservation, SimEvent
from .simulator import FAULT_KINDS, SimConfig, SimJob, Simulator

__all__ = [
    "FAULT_KINDS",
    "HEALTH_DOWN",
    "HEALTH_GPU_FAILURE",
    "HEALTH_OK",
    "HEALTH_RDMA_DEGRADED",
    "HEALTH_STATES",
    "ClusterObservation",
    "JobObservation",
    "NodeObservation",
    "PermanentError",
    "SimConfig",
    "SimError",
    "SimEvent",
    "SimJob",
    "SimNode",
    "Simulator",
    "TransientError",
    "build_demo_cluster",
]
