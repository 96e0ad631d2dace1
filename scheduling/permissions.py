"""Who may do what with jobs, nodes and the simulator: the scheduling app's role predicates.

Built on ``core.roles`` (a user's role and line memberships, cached on the user object).
Pages, API permissions, services and the live consumer ask these functions; nothing else
in the app compares roles. Each predicate answers for any user, anonymous included
(anonymous users may do nothing here). The services check again whatever a page or an
API permission already checked: hiding a button is never the only guard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.api import RolePermission
from core.roles import is_admin, is_oncall_or_admin, led_line_ids, role_of

if TYPE_CHECKING:
    from scheduling.models import Job, JobArray

OPERATORS_ONLY = "on-call engineers and admins only"
ADMINS_ONLY = "cluster admins only"


def may_submit(user: Any) -> bool:
    """Anyone signed in (the queue they pick decides the rest, in the submit service)."""
    return role_of(user) is not None


def sees_all_jobs(user: Any) -> bool:
    """On-call engineers and admins see every job; others their own and their lines'."""
    return is_oncall_or_admin(user)


def submits_to_any_queue(user: Any) -> bool:
    """Admins may submit to any queue; others to the queues of their lines."""
    return is_admin(user)


def may_cancel(user: Any, job: Job | JobArray) -> bool:
    """The job's owner, a team lead of the job's line, or an admin; the same for a job
    array (``JobArray``: its owner and queue are its tasks')."""
    if job.owner_id == getattr(user, "pk", None) or is_admin(user):
        return True
    return job.queue.business_line_id in led_line_ids(user)


def holds_as_admin(user: Any, job: Job) -> bool:
    """Whether a hold ``user`` puts on ``job`` is an *admin* hold (Slurm's): an admin's
    hold of someone else's job, which only an admin may release (``may_release``)."""
    return job.owner_id != getattr(user, "pk", None) and is_admin(user)


def may_release(user: Any, job: Job) -> bool:
    """Release a held job: whoever may cancel it (``may_cancel``), but an admin hold
    (``Job.hold_kind``, ``holds_as_admin``) only an admin."""
    return may_cancel(user, job) and (job.hold_kind != "admin" or is_admin(user))


def may_raise_time_limit(user: Any) -> bool:
    """Raise a job's time limit, or give one above its queue's max (Slurm's rule: only an
    operator may; other jobs were planned around the run ending by then): admins. Lowering
    it is for whoever may cancel the job (``may_cancel``)."""
    return is_admin(user)


def may_read_output(user: Any, job: Job) -> bool:
    """Read a job's output (the people who troubleshoot it): its owner, a team lead of its
    line, on-call engineers and admins. Others who may see the job (its line's other
    researchers) may not: output can hold what its owner did not mean to publish."""
    if job.owner_id == getattr(user, "pk", None) or is_oncall_or_admin(user):
        return True
    return job.queue.business_line_id in led_line_ids(user)


OUTPUT_READERS = "only the job's owner, a team lead of its line, on-call engineers and admins"


def may_operate_nodes(user: Any) -> bool:
    """Cordon, drain, uncordon, clean residual processes, read the blast radius, inject
    drill faults: on-call engineers and admins."""
    return is_oncall_or_admin(user)


def may_drive_simulator(user: Any) -> bool:
    """Move the simulated clock and run a loop iteration on demand: admins."""
    return is_admin(user)


class OperatesNodes(RolePermission):
    """DRF: ``may_operate_nodes`` (403 with the same words as the services)."""

    check = staticmethod(may_operate_nodes)
    message = OPERATORS_ONLY


class DrivesSimulator(RolePermission):
    """DRF: ``may_drive_simulator``, checked before the body is read (a researcher's bad
    body was a 400 naming the fields before the service's 403)."""

    check = staticmethod(may_drive_simulator)
    message = ADMINS_ONLY
