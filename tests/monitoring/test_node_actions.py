"""``monitoring.node_actions.clean_residual_now``: a sweep run now for one node, its answer
(the node, the sweep, the residual-process alert it raised) and its audit record."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from core.models import AuditRecord
from monitoring.models import Alert
from monitoring.node_actions import SWEEP_WAIT_S, clean_residual_now
from scheduling.models import SchedulingCycle
from scheduling.nodes.services import inject_fault

pytestmark = pytest.mark.django_db

NODE = "r000-n02"


def test_a_residual_process_is_killed_and_its_alert_returned(demo):
    inject_fault(demo["admin"], "residual_process", NODE)
    node, record, alert = clean_residual_now(demo["oncall"], NODE, " stale memory ", "10.1.1.1")
    assert node.name == NODE and node.residual_gpus == 0
    assert record.kind == "sweep" and SchedulingCycle.objects.filter(pk=record.pk).exists()
    assert alert == Alert.objects.get(kind="residual_process", subject=NODE)
    audit = AuditRecord.objects.get(action="node.clean_residual")
    assert audit.reason == "stale memory" and audit.source_ip == "10.1.1.1"
    assert audit.before == {"residual_gpus": 0}  # the portal had not seen it yet
    assert audit.after == {"residual_gpus": 0, "sweep": record.pk, "alert": alert.pk}


def test_a_clean_node_gives_no_alert(demo):
    node, record, alert = clean_residual_now(demo["admin"], NODE, "check")
    assert alert is None and not Alert.objects.exists()
    assert AuditRecord.objects.get().after == {"residual_gpus": 0, "sweep": record.pk,
                                               "alert": None}  # fmt: skip


def test_another_nodes_alert_is_not_this_ones(demo):
    inject_fault(demo["admin"], "residual_process", "r000-n03")
    node, record, alert = clean_residual_now(demo["oncall"], NODE, "check")
    assert alert is None
    assert Alert.objects.filter(subject="r000-n03", kind="residual_process").exists()


def test_a_bumped_alert_counts_as_raised(demo):
    inject_fault(demo["admin"], "residual_process", NODE)
    first = clean_residual_now(demo["oncall"], NODE, "one")[2]
    inject_fault(demo["admin"], "residual_process", NODE)
    second = clean_residual_now(demo["oncall"], NODE, "two")[2]
    assert second is not None and second.pk == first.pk and second.count == first.count + 1


@pytest.mark.parametrize("username", ["researcher", "researcher2", "lead"])
def test_only_oncall_and_admins_may_clean(demo, username):
    with pytest.raises(PermissionDenied):
        clean_residual_now(demo[username], NODE, "why")
    assert not AuditRecord.objects.exists() and not SchedulingCycle.objects.exists()


def test_the_role_is_checked_before_the_reason(demo):
    with pytest.raises(PermissionDenied):
        clean_residual_now(demo["researcher"], NODE, "")


@pytest.mark.parametrize("reason", ["", "  ", None, "x" * 301])
def test_a_missing_or_long_reason_runs_nothing(demo, reason):
    with pytest.raises(ValidationError) as err:
        clean_residual_now(demo["oncall"], NODE, reason)
    assert set(err.value.message_dict) == {"reason"}
    assert not SchedulingCycle.objects.exists() and not AuditRecord.objects.exists()


def test_an_unknown_node_runs_nothing(demo):
    with pytest.raises(ValidationError) as err:
        clean_residual_now(demo["oncall"], "r999-n99", "why")
    assert err.value.message_dict == {"node": ["unknown node 'r999-n99'"]}
    assert not SchedulingCycle.objects.exists()


def test_the_button_waits_at_most_ten_seconds_for_the_loop():
    assert SWEEP_WAIT_S == 10.0
