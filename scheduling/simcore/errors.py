"""Errors raised by the simulator core.

Every error says whether retrying the same call can help: the scheduling loop
re-plans after a ``PermanentError`` and retries the same call later after a
``TransientError``. Each error carries a short machine-readable ``code``.
"""

from __future__ import annotations


class SimError(Exception):
    """Base class of every simulator error."""

    permanent: bool = True

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class PermanentError(SimError):
    """The call can never succeed as asked (bad placement, busy GPU, unknown job...).

    Codes: ``unknown_node``, ``unknown_job``, ``invalid_placement``, ``gpu_busy``,
    ``node_unhealthy``, ``node_cordoned``, ``duplicate_job``, ``invalid_argument``,
    ``invalid_fault``.
    """

    permanent = True


class TransientError(SimError):
    """The backend could not act right now; the same call may succeed later.

    The simulator raises it only when told to (``Simulator.inject_api_errors``),
    so callers can exercise their retry paths deterministically.
    """

    permanent = False
