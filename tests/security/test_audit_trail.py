"""Every privileged action, through the API and through the pages, leaves one audit record
that says who, what (action and target), when, from where, why and before/after."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.test import Client

from core.models import AuditRecord
from scheduling.clock import cluster_now
from tests.security.pages import World

pytestmark = pytest.mark.django_db

CALLER_IP = "192.0.2.44"


@dataclass
class Action:
    role: str
    path: str  # formatted with the world
    action: str  # expected AuditRecord.action
    target_type: str
    body: dict | None = None
    changes: bool = True  # before/after must differ
    page: bool = False  # an HTML form post rather than the API

    def url(self, w: World) -> str:
        return self.path.format(job=w.job, node=w.node, cordoned=w.cordoned_node, alert=w.alert,
                                qr=w.quota_request)  # fmt: skip


ACTIONS = {
    "lead cancels a member's job": Action("lead", "/api/v1/jobs/{job}/cancel/", "job.cancel",
                                          "scheduling.job"),
    "admin cancels a job": Action("admin", "/api/v1/jobs/{job}/cancel/", "job.cancel",
                                  "scheduling.job"),
    "cordon": Action("oncall", "/api/v1/nodes/{node}/cordon/", "node.cordon", "scheduling.node",
                     {"reason": "fan noise"}),
    "drain": Action("oncall", "/api/v1/nodes/{node}/drain/", "node.drain", "scheduling.node",
                    {"reason": "fan noise"}),
    "uncordon": Action("admin", "/api/v1/nodes/{cordoned}/uncordon/", "node.uncordon",
                       "scheduling.node", {"reason": "fixed"}),
    "ack": Action("oncall", "/api/v1/alerts/{alert}/ack/", "alert.ack", "monitoring.alert"),
    "resolve": Action("admin", "/api/v1/alerts/{alert}/resolve/", "alert.resolve",
                      "monitoring.alert"),
    "fault drill": Action("oncall", "/api/v1/simulator/faults/", "simulator.fault",
                          "scheduling.node", {"kind": "residual_process", "node": "{node}"}),
    "advance the clock": Action("admin", "/api/v1/simulator/advance/", "simulator.advance", "",
                                {"seconds": 60}, changes=False),
    "run a cycle": Action("admin", "/api/v1/scheduler/cycle/", "scheduler.cycle",
                          "scheduling.schedulingcycle", changes=False),
    "request quota": Action("lead", "/api/v1/quota-requests/", "quota_request.created",
                            "quotas.quotarequest",
                            {"business_line": "llm", "quota_gpus": 24, "reason": "more"},
                            changes=False),
    "approve": Action("admin", "/api/v1/quota-requests/{qr}/approve/", "quota_request.approved",
                      "quotas.quotarequest", {"note": "ok"}),
    "reject": Action("admin", "/api/v1/quota-requests/{qr}/reject/", "quota_request.rejected",
                     "quotas.quotarequest", {"note": "not now"}),
    "withdraw": Action("lead", "/api/v1/quota-requests/{qr}/withdraw/", "quota_request.withdrawn",
                       "quotas.quotarequest", {"note": "never mind"}),
    "page: cordon": Action("oncall", "/oncall/nodes/{node}/action/", "node.cordon",
                           "scheduling.node", {"action": "cordon", "reason": "fan", "confirm": "1"},
                           page=True),
    "page: ack": Action("oncall", "/oncall/alerts/{alert}/ack/", "alert.ack", "monitoring.alert",
                        {}, page=True),
    "page: lead cancels": Action("lead", "/jobs/{job}/cancel/", "job.cancel", "scheduling.job",
                                 {"confirm": "1"}, page=True),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ACTIONS))
def test_a_privileged_action_leaves_a_complete_audit_record(api, demo, world, name):
    action = ACTIONS[name]
    url = action.url(world)
    body = {k: v.format(node=world.node) if isinstance(v, str) else v
            for k, v in (action.body or {}).items()}  # fmt: skip
    known = set(AuditRecord.objects.values_list("pk", flat=True))
    started = cluster_now()  # audit records are stamped with cluster time (#15)
    if action.page:
        client = Client(REMOTE_ADDR=CALLER_IP)
        client.force_login(demo[action.role])
        response = client.post(url, body)
        assert response.status_code in (200, 302), (response.status_code, response.content[:300])
    else:
        response = api(action.role).post(url, body, format="json", REMOTE_ADDR=CALLER_IP)
        assert response.status_code in (200, 201), response.data
    new = AuditRecord.objects.exclude(pk__in=known).filter(action=action.action)
    assert new.count() == 1, list(AuditRecord.objects.exclude(pk__in=known).values("action"))
    entry = new.get()
    assert entry.actor == demo[action.role] and entry.actor_name == action.role  # who
    if action.target_type:
        assert entry.target_type == action.target_type and entry.target_id  # what
    assert started - timedelta(seconds=1) <= entry.at <= cluster_now()  # when
    assert entry.source_ip == CALLER_IP  # from where
    if "reason" in body or "note" in body:
        assert entry.reason, "the reason given is not recorded"  # why
    if action.changes:
        assert entry.before != entry.after, (entry.before, entry.after)  # what changed


def test_every_privileged_api_post_of_api_md_is_covered_here():
    """The POSTs that act for someone else or on shared state: all audited above."""
    audited = {a.path.split("/api/v1/")[1] for a in ACTIONS.values() if not a.page}
    expected = {"jobs/{job}/cancel/", "nodes/{node}/cordon/", "nodes/{node}/drain/",
                "nodes/{cordoned}/uncordon/", "alerts/{alert}/ack/", "alerts/{alert}/resolve/",
                "simulator/faults/", "simulator/advance/", "scheduler/cycle/", "quota-requests/",
                "quota-requests/{qr}/approve/", "quota-requests/{qr}/reject/",
                "quota-requests/{qr}/withdraw/"}  # fmt: skip
    assert expected <= audited
