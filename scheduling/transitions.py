"""The life of a job as a pure state machine (no Django), and the one writer of its state.

``pending -> running -> succeeded | failed | cancelled``; a stop the portal asks for
goes ``running -> preempting -> pending`` (progress kept); a failed run with retries
left goes back to ``pending``; a launch the cluster refuses for good fails a pending
job. ``succeeded``, ``failed`` and ``cancelled`` are final. ``TRANSITIONS`` lists every
allowed move with who makes it; anything missing is refused.

``set_state`` is the only code that assigns ``Job.state`` (a test scans the source tree
for any other): it checks the move and assigns it on the object, in memory. Persisting
is the caller's (a ``save(update_fields=[...])`` or a bulk write of the same field), so
it commits or rolls back with the caller's transaction. It takes any object with a
``state`` attribute, so this module stays free of Django (import-linter: "Pure cores
import no Django").
"""

from __future__ import annotations

from typing import Protocol

PENDING = "pending"
RUNNING = "running"
PREEMPTING = "preempting"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"

STATES: tuple[str, ...] = (PENDING, RUNNING, PREEMPTING, SUCCEEDED, FAILED, CANCELLED)
ACTIVE_STATES: frozenset[str] = frozenset({PENDING, RUNNING, PREEMPTING})
FINAL_STATES: frozenset[str] = frozenset({SUCCEEDED, FAILED, CANCELLED})

# (from, to) -> what makes the move (and where). Anything missing is refused.
TRANSITIONS: dict[tuple[str, str], str] = {
    (PENDING, RUNNING): "launched by the loop, or a lost launch adopted (cycle.launch, .reconcile)",
    (PENDING, FAILED): "the cluster refused the launch for good (cycle.launch)",
    (PENDING, CANCELLED): "cancelled by its owner, their team lead or an admin (services), "
    "or by the loop when a job it waits for ended failed or cancelled (cycle.dependencies)",
    (RUNNING, PREEMPTING): "asked to checkpoint and stop: preemption, drain, health, "
    "inference (cycle.stops)",
    (RUNNING, SUCCEEDED): "the run finished successfully (cycle.finished)",
    (RUNNING, PENDING): "the run failed or vanished; an automatic retry is left (cycle.finished)",
    (RUNNING, FAILED): "the run failed or vanished; no retries left (cycle.finished)",
    (RUNNING, CANCELLED): "cancelled while running; the loop kills the run (services)",
    (PREEMPTING, PENDING): "stopped after its checkpoint and requeued, or failed with a retry "
    "left (cycle.finished)",
    (PREEMPTING, SUCCEEDED): "finished before the stop took effect (cycle.finished)",
    (PREEMPTING, FAILED): "failed while stopping; no retries left (cycle.finished)",
    (PREEMPTING, CANCELLED): "cancelled while checkpointing (services)",
}


class InvalidTransition(ValueError):
    """A move the job's current state does not allow (the message says why)."""

    def __init__(self, state: str, new_state: str, message: str) -> None:
        super().__init__(message)
        self.state = state
        self.new_state = new_state


class HasState(Protocol):
    """Anything with a job state: a ``scheduling.models.Job``, or a stand-in in tests."""

    state: str


def check(state: str, new_state: str) -> None:
    """Raise ``InvalidTransition`` unless a job in ``state`` may move to ``new_state``."""
    for value in (state, new_state):
        if value not in STATES:
            raise InvalidTransition(
                state, new_state, f"unknown job state {value!r}; one of {', '.join(STATES)}"
            )
    if (state, new_state) in TRANSITIONS:
        return
    if state in FINAL_STATES:
        why = f"a job that {_FINAL_WORDS[state]} stays {state}"
    elif state == new_state:
        why = f"the job is already {state}"
    else:
        allowed = ", ".join(next_states(state))
        why = f"a {state} job can only become {allowed}"
    raise InvalidTransition(
        state, new_state, f"cannot move a job from {state} to {new_state}: {why}"
    )


_FINAL_WORDS = {SUCCEEDED: "succeeded", FAILED: "failed", CANCELLED: "was cancelled"}


def next_states(state: str) -> tuple[str, ...]:
    """The states a job in ``state`` may move to, in ``STATES`` order."""
    return tuple(s for s in STATES if (state, s) in TRANSITIONS)


def set_state(job: HasState, new_state: str) -> str:
    """Move ``job`` to ``new_state`` in memory after checking the move; returns the old state.

    The one assignment of a job's state in the code base. Raises ``InvalidTransition``
    (the job unchanged) for a move ``TRANSITIONS`` does not list.
    """
    old = job.state
    check(old, new_state)
    job.state = new_state
    return old
