"""Node writers in isolation: every action from every state, every role, the reason rules,
the audit record and the live event; fault drills through the one list of kinds."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import override_settings

from core.models import AuditRecord
from scheduling.models import Node
from scheduling.nodes import services
from scheduling.nodes.faults import FAULT_KINDS
from scheduling.nodes.services import (
    REASON_MAX,
    clean_reason,
    cordon_node,
    drain_node,
    inject_fault,
    uncordon_node,
)

pytestmark = pytest.mark.django_db

NODE = "r000-n01"
# action -> (service, state it leads to, states it may start from)
ACTIONS = {
    "cordon": (cordon_node, "cordoned", {"ready"}),
    "drain": (drain_node, "draining", {"ready", "cordoned"}),
    "uncordon": (uncordon_node, "ready", {"cordoned", "draining", "unhealthy", "down"}),
}
STATES = [s.value for s in Node.State]
OPERATORS = ["oncall", "admin"]
OTHERS = ["researcher", "researcher2", "lead"]


def put(state: str, reason: str = "") -> None:
    Node.objects.filter(name=NODE).update(state=state, state_reason=reason)


# -- transitions: the whole table -----------------------------------------------------------


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_each_action_from_each_state_moves_or_is_refused_with_nothing_changed(
    demo, sent, action, state
):
    service, target, allowed_from = ACTIONS[action]
    put(state, "before")
    with sent:
        if state in allowed_from:
            node = service(demo["oncall"], NODE, "  disk check  ", "10.0.0.7")
        else:
            with pytest.raises(ValidationError) as err:
                service(demo["oncall"], NODE, "disk check", "10.0.0.7")
    stored = Node.objects.get(name=NODE)
    if state not in allowed_from:
        assert err.value.message_dict == {"state": [f"{NODE} is {state}; cannot {action} it"]}
        assert (stored.state, stored.state_reason) == (state, "before")
        assert not AuditRecord.objects.exists() and sent.events == []
        return
    assert node.state == stored.state == target
    assert stored.state_reason == "disk check"  # stripped
    assert stored.uncordon_requested is (target == "ready")
    record = AuditRecord.objects.get()
    assert (record.action, record.actor, record.reason) == (
        f"node.{action}",
        demo["oncall"],
        "disk check",
    )
    assert record.target_type == "scheduling.node" and record.target_id == str(stored.pk)
    assert record.before == {"state": state, "state_reason": "before"}
    assert record.after == {"state": target} and record.source_ip == "10.0.0.7"
    assert sent.events == [
        ("nodes", "node.updated", {"name": NODE, "state": target, "state_reason": "disk check"})
    ]


def test_the_table_covers_every_state_and_only_real_states():
    for _, target, allowed_from in ACTIONS.values():
        assert target in STATES and allowed_from <= set(STATES)
    # every state can be left by some action (no dead end for on-call)
    assert set().union(*(a for _, _, a in ACTIONS.values())) == set(STATES)


def test_a_full_round_cordon_drain_uncordon(demo):
    cordon_node(demo["admin"], NODE, "one")
    drain_node(demo["admin"], NODE, "two")
    node = uncordon_node(demo["admin"], NODE, "three")
    assert node.state == "ready" and node.uncordon_requested
    assert list(AuditRecord.objects.order_by("id").values_list("action", flat=True)) == [
        "node.cordon", "node.drain", "node.uncordon"
    ]  # fmt: skip


def test_cordoning_again_clears_a_pending_uncordon(demo):
    cordon_node(demo["admin"], NODE, "one")
    uncordon_node(demo["admin"], NODE, "two")
    node = cordon_node(demo["admin"], NODE, "three")
    assert node.uncordon_requested is False


def test_other_nodes_are_untouched(demo):
    cordon_node(demo["oncall"], NODE, "one")
    assert set(Node.objects.exclude(name=NODE).values_list("state", flat=True)) == {"ready"}


# -- roles ----------------------------------------------------------------------------------


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("username", OPERATORS + OTHERS + [None])
def test_only_oncall_and_admins_act_on_nodes(demo, action, username):
    from django.contrib.auth.models import AnonymousUser

    service, target, allowed_from = ACTIONS[action]
    start = sorted(allowed_from)[0]
    put(start)
    user = demo[username] if username else AnonymousUser()
    if username in OPERATORS:
        assert service(user, NODE, "why").state == target
        return
    with pytest.raises(PermissionDenied, match="on-call engineers and admins only"):
        service(user, NODE, "why")
    assert Node.objects.get(name=NODE).state == start and not AuditRecord.objects.exists()


def test_a_bad_reason_is_reported_before_the_role(demo):
    # the reason is checked first: a researcher with an empty reason hears about the reason
    with pytest.raises(ValidationError) as err:
        cordon_node(demo["researcher"], NODE, "")
    assert "reason" in err.value.message_dict


# -- reasons and unknown nodes ---------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   ", "\n\t", None, 42, ["why"], "x" * (REASON_MAX + 1)])
def test_a_missing_or_bad_reason_is_refused(demo, reason):
    with pytest.raises(ValidationError) as err:
        cordon_node(demo["oncall"], NODE, reason)
    assert set(err.value.message_dict) == {"reason"}
    assert Node.objects.get(name=NODE).state == "ready" and not AuditRecord.objects.exists()


@pytest.mark.parametrize("reason", ["x", "x" * REASON_MAX, " padded "])
def test_a_reason_up_to_the_limit_is_kept_stripped(demo, reason):
    assert clean_reason(reason) == reason.strip()
    assert cordon_node(demo["oncall"], NODE, reason).state_reason == reason.strip()


def test_the_reason_limit_counts_before_stripping():
    with pytest.raises(ValidationError):
        clean_reason(" " * REASON_MAX + "x")


@pytest.mark.parametrize("name", ["r999-n99", "", "R000-N01", "r000-n01 "])
def test_an_unknown_node_is_refused_by_name(demo, name):
    with pytest.raises(ValidationError) as err:
        drain_node(demo["oncall"], name, "why")
    assert err.value.message_dict == {"node": [f"unknown node {name!r}"]}
    assert not AuditRecord.objects.exists()


def test_a_long_unknown_name_is_cut_in_the_message(demo):
    with pytest.raises(ValidationError) as err:
        cordon_node(demo["oncall"], "n" * 500, "why")
    assert err.value.message_dict == {"node": [f"unknown node {'n' * 80!r}"]}


# -- fault drills ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_kind_of_the_list_can_be_injected_and_is_audited(demo, kind):
    result = inject_fault(demo["oncall"], kind, NODE, source_ip="10.0.0.8")
    assert result == {"kind": kind, "node": NODE}
    record = AuditRecord.objects.get()
    assert (record.action, record.reason, record.after) == (
        "simulator.fault",
        kind,
        {"fault": kind},
    )
    assert record.target_id == str(Node.objects.get(name=NODE).pk)
    assert record.source_ip == "10.0.0.8" and record.actor == demo["oncall"]


@pytest.mark.parametrize("kind", ["meteor", "", None, 3, "Node_Down"])
def test_a_kind_outside_the_list_is_refused_naming_the_list(demo, kind):
    with pytest.raises(ValidationError) as err:
        inject_fault(demo["oncall"], kind, NODE)
    assert err.value.message_dict == {"kind": [f"one of {', '.join(FAULT_KINDS)}"]}
    assert not AuditRecord.objects.exists()


@pytest.mark.parametrize("node", ["r999-n99", None, 7, ""])
def test_a_drill_on_an_unknown_node_is_refused(demo, node):
    with pytest.raises(ValidationError) as err:
        inject_fault(demo["oncall"], "node_down", node)
    assert set(err.value.message_dict) == {"node"}
    assert not AuditRecord.objects.exists()


@pytest.mark.parametrize("username", OTHERS)
def test_drills_are_for_oncall_and_admins(demo, username):
    with pytest.raises(PermissionDenied):
        inject_fault(demo[username], "node_down", NODE)
    assert not AuditRecord.objects.exists()


def test_drills_need_the_simulator_backend(demo):
    with override_settings(SCHEDULING_BACKEND="slurm"), pytest.raises(ValidationError) as err:
        inject_fault(demo["admin"], "node_down", NODE)
    assert err.value.message_dict == {"backend": ["only available with the simulator backend"]}
    assert not AuditRecord.objects.exists()


def test_a_drill_the_simulator_refuses_is_a_node_error_and_nothing_is_audited(demo):
    # the first residual process takes every idle GPU: a second finds none to take
    inject_fault(demo["admin"], "residual_process", NODE)
    AuditRecord.objects.all().delete()
    with pytest.raises(ValidationError) as err:
        inject_fault(demo["admin"], "residual_process", NODE)
    assert set(err.value.message_dict) == {"node"}
    assert not AuditRecord.objects.exists()


def test_drill_constants_are_the_documented_limits():
    assert services.REASON_MAX == 300 and services.LOCK_WAIT_S == 20.0
