"""The life of a quota request as a pure state machine (no Django).

``pending -> approved | rejected | withdrawn``; the three outcomes are final.
Whether an approved change has taken effect or ended is not a state but two
timestamps (``applied_at``, ``expired_at``) on the request: the decision is
made once, the calendar does the rest.
"""

from __future__ import annotations

PENDING = "pending"
APPROVED = "approved"
REJECTED = "rejected"
WITHDRAWN = "withdrawn"

STATES: tuple[str, ...] = (PENDING, APPROVED, REJECTED, WITHDRAWN)
FINAL_STATES: frozenset[str] = frozenset({APPROVED, REJECTED, WITHDRAWN})

APPROVE = "approve"
REJECT = "reject"
WITHDRAW = "withdraw"

ACTIONS: tuple[str, ...] = (APPROVE, REJECT, WITHDRAW)

# (state, action) -> next state; anything missing is refused.
TRANSITIONS: dict[tuple[str, str], str] = {
    (PENDING, APPROVE): APPROVED,
    (PENDING, REJECT): REJECTED,
    (PENDING, WITHDRAW): WITHDRAWN,
}

_PAST = {APPROVE: "approved", REJECT: "rejected", WITHDRAW: "withdrawn"}


class InvalidTransition(ValueError):
    """An action that the request's current state does not allow (the message says why)."""

    def __init__(self, state: str, action: str, message: str) -> None:
        super().__init__(message)
        self.state = state
        self.action = action


def transition(state: str, action: str) -> str:
    """The state after ``action``; raises ``InvalidTransition`` with a readable reason."""
    if state not in STATES:
        raise InvalidTransition(state, action, f"unknown request state {state!r}")
    if action not in ACTIONS:
        raise InvalidTransition(
            state, action, f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}"
        )
    try:
        return TRANSITIONS[(state, action)]
    except KeyError:
        raise InvalidTransition(
            state,
            action,
            f"this request is already {state}; only a pending request can be {_PAST[action]}",
        ) from None


def allowed_actions(state: str) -> tuple[str, ...]:
    """Actions the state allows, in ``ACTIONS`` order (for pages and API hints)."""
    return tuple(a for a in ACTIONS if (state, a) in TRANSITIONS)
