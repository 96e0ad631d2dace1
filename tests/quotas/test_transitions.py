"""The request state machine: every (state, action) pair, table-driven."""

import pytest

from quotas import transitions as t
from quotas.models import QuotaRequest

TABLE = [
    # state, action, next state or None (refused)
    (t.PENDING, t.APPROVE, t.APPROVED),
    (t.PENDING, t.REJECT, t.REJECTED),
    (t.PENDING, t.WITHDRAW, t.WITHDRAWN),
    (t.APPROVED, t.APPROVE, None),
    (t.APPROVED, t.REJECT, None),
    (t.APPROVED, t.WITHDRAW, None),
    (t.REJECTED, t.APPROVE, None),
    (t.REJECTED, t.REJECT, None),
    (t.REJECTED, t.WITHDRAW, None),
    (t.WITHDRAWN, t.APPROVE, None),
    (t.WITHDRAWN, t.REJECT, None),
    (t.WITHDRAWN, t.WITHDRAW, None),
]


def test_the_table_covers_every_state_and_action():
    assert {(s, a) for s, a, _ in TABLE} == {(s, a) for s in t.STATES for a in t.ACTIONS}


@pytest.mark.parametrize("state,action,expected", TABLE)
def test_each_transition_is_allowed_or_refused_with_a_reason(state, action, expected):
    if expected is not None:
        assert t.transition(state, action) == expected
        return
    with pytest.raises(t.InvalidTransition) as exc:
        t.transition(state, action)
    message = str(exc.value)
    assert f"already {state}" in message and "only a pending request" in message
    assert exc.value.state == state and exc.value.action == action


@pytest.mark.parametrize(
    "state,action,fragment",
    [("lost", t.APPROVE, "unknown request state 'lost'"), (t.PENDING, "veto", "unknown action")],
)
def test_unknown_states_and_actions_are_refused_clearly(state, action, fragment):
    with pytest.raises(t.InvalidTransition, match=fragment):
        t.transition(state, action)


def test_only_pending_allows_actions_and_final_states_are_final():
    assert t.allowed_actions(t.PENDING) == (t.APPROVE, t.REJECT, t.WITHDRAW)
    for state in t.FINAL_STATES:
        assert t.allowed_actions(state) == ()


def test_the_model_states_are_the_machine_states():
    assert set(QuotaRequest.State.values) == set(t.STATES)
    assert QuotaRequest.State.PENDING == t.PENDING
