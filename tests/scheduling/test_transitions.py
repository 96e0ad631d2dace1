"""The job state machine (``scheduling.transitions``), every pair of states, and its writer."""

from __future__ import annotations

import itertools

import pytest

from scheduling import transitions as t
from scheduling.models import Job

# The moves API.md's "Job states" and the loop make, written out independently of the
# table: a change to TRANSITIONS must be a change here too.
ALLOWED = {
    ("pending", "running"),
    ("pending", "failed"),
    ("pending", "cancelled"),
    ("running", "preempting"),
    ("running", "succeeded"),
    ("running", "pending"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("preempting", "pending"),
    ("preempting", "succeeded"),
    ("preempting", "failed"),
    ("preempting", "cancelled"),
}
PAIRS = list(itertools.product(t.STATES, repeat=2))


class Stub:
    def __init__(self, state: str) -> None:
        self.state = state


def test_the_states_are_the_models():
    assert set(t.STATES) == set(Job.State.values)
    assert set(Job.ACTIVE_STATES) == t.ACTIVE_STATES
    assert set(Job.TERMINAL_STATES) == t.FINAL_STATES


def test_the_models_choices_are_the_state_machines_values_in_order():
    """Job.State takes its values from the table; the choices (so the migrations) stay."""
    api = ["pending", "running", "preempting", "succeeded", "failed", "cancelled"]
    assert list(t.STATES) == list(Job.State.values) == api
    assert Job._meta.get_field("state").choices == [(v, v.title()) for v in api]


def test_the_table_is_exactly_the_allowed_moves():
    assert set(t.TRANSITIONS) == ALLOWED
    assert all(why.strip() for why in t.TRANSITIONS.values()), "every move says who makes it"


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair_of_states_is_allowed_or_refused(old, new):
    job = Stub(old)
    if (old, new) in ALLOWED:
        assert t.set_state(job, new) == old
        assert job.state == new
    else:
        with pytest.raises(t.InvalidTransition) as exc:
            t.set_state(job, new)
        assert job.state == old, "a refused move leaves the job as it was"
        assert (exc.value.state, exc.value.new_state) == (old, new)
        assert f"from {old} to {new}" in str(exc.value)


@pytest.mark.parametrize("final", sorted(t.FINAL_STATES))
def test_final_states_have_no_way_out(final):
    assert t.next_states(final) == ()
    with pytest.raises(t.InvalidTransition, match=f"stays {final}"):
        t.check(final, t.PENDING)


@pytest.mark.parametrize("state", sorted(t.ACTIVE_STATES))
def test_every_active_state_can_end_or_be_cancelled(state):
    assert t.CANCELLED in t.next_states(state)
    assert t.FAILED in t.next_states(state)


def test_next_states_follow_the_table_in_state_order():
    assert t.next_states(t.PENDING) == (t.RUNNING, t.FAILED, t.CANCELLED)
    assert t.next_states(t.RUNNING) == (
        t.PENDING, t.PREEMPTING, t.SUCCEEDED, t.FAILED, t.CANCELLED
    )  # fmt: skip
    assert t.next_states(t.PREEMPTING) == (t.PENDING, t.SUCCEEDED, t.FAILED, t.CANCELLED)


def test_a_move_to_the_same_state_is_refused_and_says_so():
    with pytest.raises(t.InvalidTransition, match="already running"):
        t.check(t.RUNNING, t.RUNNING)


def test_a_refused_move_names_where_the_job_can_go():
    with pytest.raises(t.InvalidTransition, match="can only become running, failed, cancelled"):
        t.check(t.PENDING, t.PREEMPTING)


@pytest.mark.parametrize(("old", "new"), [("queued", "running"), ("pending", "done"), ("", "")])
def test_unknown_states_are_refused(old, new):
    with pytest.raises(t.InvalidTransition, match="unknown job state"):
        t.set_state(Stub(old), new)


def test_an_invalid_transition_is_a_value_error():
    assert issubclass(t.InvalidTransition, ValueError)


def test_the_writer_accepts_the_models_choices_and_a_real_job():
    job = Job(state=Job.State.PENDING)
    t.set_state(job, Job.State.RUNNING)
    assert job.state == "running"
    t.set_state(job, Job.State.PREEMPTING)
    t.set_state(job, Job.State.PENDING)
    assert job.state == Job.State.PENDING


def test_the_state_machine_is_pure_python():
    """It joins the "Pure cores import no Django" contract: standard library only."""
    import ast
    from pathlib import Path

    source = Path(t.__file__).read_text()
    imported = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else a.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for a in node.names
    }
    assert imported <= {"__future__", "typing"}, imported
