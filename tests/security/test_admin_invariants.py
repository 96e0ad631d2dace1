"""The Django admin cannot bypass the services' invariants: what an admin saves there is
either refused as a form error (nothing stored) or something the scheduling loop and the
quota services can live with."""

from __future__ import annotations

import pytest
from django.forms.models import model_to_dict
from django.test import Client

from core.models import AuditRecord
from quotas.models import Queue
from scheduling.sim_services import run_cycle_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def site_admin(signed_in) -> Client:
    return signed_in("admin")


def queue_form(queue: Queue, **changes) -> dict:
    form = {k: "" if v is None else v for k, v in model_to_dict(queue).items()
            if k not in ("id", "quota_gpus", "guarantee_gpus")}  # fmt: skip
    form["preempts_tiers"] = '["experiment"]' if queue.tier != "experiment" else "[]"
    return {**form, **changes}


@pytest.mark.parametrize(
    "bad",
    ['["bogus"]', '"experiment"', "5", '{"experiment": 1}', "[1.5]", "[null]", '["core"]'],
)
def test_a_queue_s_preempted_tiers_are_known_lower_tiers_or_a_form_error(site_admin, demo, bad):
    """``preempts_tiers`` is read by every cycle (``scheduling.snapshot``): an unknown tier,
    a JSON value that is not a list of tiers, or a tier not strictly below the queue's was
    saved, and every cycle after it failed (``ValueError: unknown tier``)."""
    queue = Queue.objects.get(name="llm-core")
    url = f"/admin/quotas/queue/{queue.pk}/change/"
    response = site_admin.post(url, queue_form(queue, preempts_tiers=bad))
    assert response.status_code == 200 and b"errornote" in response.content, bad
    assert Queue.objects.get(pk=queue.pk).preempts_tiers == queue.preempts_tiers
    assert not AuditRecord.objects.filter(action="admin.change").exists()
    assert run_cycle_now(demo["admin"]) is not None


def test_a_queue_s_preempted_tiers_may_be_set_to_lower_tiers(site_admin, demo):
    queue = Queue.objects.get(name="llm-core")
    url = f"/admin/quotas/queue/{queue.pk}/change/"
    response = site_admin.post(url, queue_form(queue, preempts_tiers='["experiment", "finetune"]'))
    assert response.status_code == 302
    assert sorted(Queue.objects.get(pk=queue.pk).preempts_tiers) == ["experiment", "finetune"]
    assert run_cycle_now(demo["admin"]) is not None


def test_a_queue_s_time_limits_are_set_in_the_admin_audited_and_a_default_above_the_max_is_refused(
    site_admin, demo
):
    """Slurm's partition MaxTime and DefaultTime (``scheduling.time_limits.of_request``): set
    here, audited; a default above the max is a form error that saves nothing."""
    queue = Queue.objects.get(name="llm-experiment")
    url = f"/admin/quotas/queue/{queue.pk}/change/"
    refused = site_admin.post(url, queue_form(queue, max_time_limit_minutes="60",
                                              default_time_limit_minutes="120"))  # fmt: skip
    assert refused.status_code == 200 and b"at most the max time limit (60 min)" in refused.content
    assert Queue.objects.get(pk=queue.pk).max_time_limit_minutes is None
    assert not AuditRecord.objects.filter(action="admin.change").exists()
    saved = site_admin.post(url, queue_form(queue, max_time_limit_minutes="1440",
                                            default_time_limit_minutes="480"))  # fmt: skip
    assert saved.status_code == 302
    queue.refresh_from_db()
    assert (queue.max_time_limit_minutes, queue.default_time_limit_minutes) == (1440, 480)
    record = AuditRecord.objects.get(action="admin.change")
    assert (
        record.before.get("max_time_limit_minutes"),
        record.after.get("max_time_limit_minutes"),
    ) == (None, 1440), (record.before, record.after)
    assert run_cycle_now(demo["admin"]) is not None


def test_a_queue_cannot_be_moved_to_another_line_in_the_admin(site_admin, demo):
    """A queue's quota and guarantee were approved against its line (Q4, Q6: a queue's
    quota within its line's, its guarantee counted in its line's): moving the queue in the
    admin put a 12-GPU queue quota into an 8-GPU line, with its running and waiting work,
    and no request, no QuotaChange."""
    from quotas import services
    from quotas.models import BusinessLine
    from tests.quotas.conftest import NOW, ask

    req = ask(demo["lead"], line="llm", queue="llm-core", quota_gpus=12, guarantee_gpus=6)
    services.approve_quota_request(demo["admin"], req.pk, "ok", now=NOW)
    queue = Queue.objects.get(name="llm-core")
    small = BusinessLine.objects.get(name="search-rec")
    assert queue.quota_gpus > small.quota_gpus
    url = f"/admin/quotas/queue/{queue.pk}/change/"
    site_admin.post(url, queue_form(queue, business_line=small.pk))
    assert Queue.objects.get(pk=queue.pk).business_line.name == "llm"
    assert b'name="business_line"' not in site_admin.get(url).content


def test_a_new_queue_is_added_in_the_admin_without_a_contract(site_admin, demo):
    line = Queue.objects.get(name="llm-core").business_line
    response = site_admin.post(
        "/admin/quotas/queue/add/",
        {"name": "llm-eval", "business_line": line.pk, "nature": "experiments",
         "tier": "experiment", "preempts_tiers": "[]"},
    )  # fmt: skip
    assert response.status_code == 302
    added = Queue.objects.get(name="llm-eval")
    assert (added.business_line, added.quota_gpus, added.guarantee_gpus) == (line, None, 0)


def node_form(client: Client, node, **changes) -> dict:
    """The node's change form as the admin page offers it, with ``changes``."""
    import json

    from django.forms.models import model_to_dict

    fields = client.get(f"/admin/scheduling/node/{node.pk}/change/").context["adminform"].form
    form = {k: v for k, v in model_to_dict(node).items() if k in fields.fields}
    form.update({k: json.dumps(v) for k, v in form.items() if isinstance(v, dict | list)})
    form = {k: v for k, v in form.items() if v is not False}
    return {k: ("on" if v is True else v) for k, v in {**form, **changes}.items()}


@pytest.mark.parametrize(
    "field, value",
    [("recent_models", "5"), ("inference_profile", '"busy"'), ("inference_gpus", "8"),
     ("uncordon_requested", "on")],
)  # fmt: skip
def test_a_node_s_loop_state_is_not_edited_in_the_admin(site_admin, demo, field, value):
    """The admin corrects a node's labels; what the loop learns or acts on (the models it
    ran, its inference load and profile, an uncordon on its way to the backend) is the
    loop's and the on-call services': ``recent_models`` set to ``5`` there stopped every
    cycle (``TypeError`` in ``scheduling.snapshot``), and ``uncordon_requested`` sent an
    uncordon to the backend with no on-call action, its reason or its audit record."""
    from scheduling.models import Node

    node = Node.objects.order_by("name").first()
    before = Node.objects.values(field).get(pk=node.pk)
    url = f"/admin/scheduling/node/{node.pk}/change/"
    site_admin.post(url, node_form(site_admin, node, **{field: value}))
    assert Node.objects.values(field).get(pk=node.pk) == before
    assert run_cycle_now(demo["admin"]) is not None


# What the backend reports of a node (``scheduling.cycle.reconcile.sync_nodes`` creates the
# row from it; the simulator's inventory, ``sim_state.INVENTORY_FIELDS``, is these columns).
BACKEND_CHANGES = {"name": "node-renamed", "rack": "r09", "block": "b9", "gpu_model": "H200",
                   "gpu_memory_gb": "141", "gpus_total": "4", "rdma": "", "inference": "on"}  # fmt: skip


def test_the_test_changes_every_column_the_backend_reports():
    from scheduling.sim_state import INVENTORY_FIELDS

    assert set(BACKEND_CHANGES) == set(INVENTORY_FIELDS)


@pytest.mark.parametrize("field", sorted(BACKEND_CHANGES))
def test_what_the_backend_reports_of_a_node_is_not_edited_in_the_admin(site_admin, demo, field):
    """A node's name, size, GPU kind, RDMA, inference role, rack and block are the backend's:
    the loop plans with what it observes and finds the row by the backend's name. Renamed
    here, the row no longer named its node (on Slurm or Kubernetes the next cycle registers
    that node again beside it); its GPU count changed here, the pages, the submit checks and
    the quota capacity counted GPUs the plan does not have; a rack "corrected" here put the
    node elsewhere on the rack map than in the verdicts. Here on a node running a job."""
    from scheduling.models import Allocation, Node
    from scheduling.services import JobRequest, submit_job

    job = submit_job(demo["researcher"], JobRequest(name="on-it", queue="llm-finetune", gpus=8))
    run_cycle_now(demo["admin"])
    node = Node.objects.get(allocations__job=job.pk, allocations__gpu_index=0)
    before = Node.objects.values().get(pk=node.pk)
    url = f"/admin/scheduling/node/{node.pk}/change/"
    page = site_admin.get(url)
    assert page.status_code == 200 and f'name="{field}"'.encode() not in page.content
    form = {k: ("on" if v is True else v) for k, v in model_to_dict(node).items()
            if k in BACKEND_CHANGES and v is not False}  # fmt: skip
    site_admin.post(url, {**form, field: BACKEND_CHANGES[field]})
    assert Node.objects.values().get(pk=node.pk) == before
    assert not AuditRecord.objects.filter(action="admin.change").exists()
    run_cycle_now(demo["admin"])
    assert Allocation.objects.filter(job=job.pk, node=node).count() == 8


@pytest.mark.parametrize(
    "field, bad", [("eviction_window_hours", 2_147_483_647), ("eviction_window_hours", 721),
                   ("borrow_cooldown_minutes", 2_147_483_647),
                   ("borrow_cooldown_minutes", 30 * 24 * 60 + 1)],
)  # fmt: skip
def test_the_quota_policy_s_windows_are_bounded_so_the_loop_keeps_running(
    site_admin, demo, field, bad
):
    """A huge eviction window or borrowing cool-down was saved, and then every metrics
    rollup (the live eviction ratio, R4) or every scheduling cycle failed with
    ``OverflowError: date value out of range`` (cluster time minus the window). Both read
    at most the 30 days of samples the portal keeps (``USAGE_RETENTION_DAYS``)."""
    from monitoring.tasks import metrics_rollup
    from quotas.models import USAGE_RETENTION_DAYS, QuotaPolicy
    from scheduling.services import JobRequest, submit_job

    policy = QuotaPolicy.load()
    url = f"/admin/quotas/quotapolicy/{policy.pk}/change/"
    form = {k: v for k, v in model_to_dict(policy).items() if k not in ("id", "singleton")}
    form = {k: v for k, v in form.items() if v is not False}
    response = site_admin.post(url, {**form, field: bad})
    assert response.status_code == 200 and b"errornote" in response.content
    assert not AuditRecord.objects.filter(action="admin.change").exists()
    submit_job(demo["researcher"], JobRequest(name="runs", queue="llm-experiment", gpus=8))
    assert run_cycle_now(demo["admin"]) is not None
    metrics_rollup()
    longest = {"eviction_window_hours": USAGE_RETENTION_DAYS * 24,
               "borrow_cooldown_minutes": USAGE_RETENTION_DAYS * 24 * 60}[field]  # fmt: skip
    assert site_admin.post(url, {**form, field: longest}).status_code == 302
    assert run_cycle_now(demo["admin"]) is not None
    metrics_rollup()


def test_a_new_line_is_added_in_the_admin_with_no_contract_yet(site_admin, demo):
    """Its quota is read-only there (Q4: it comes from an approved request), and the line
    had no default for it: adding a line answered 500 (IntegrityError, quota_gpus null)."""
    from quotas.models import BusinessLine

    response = site_admin.post(
        "/admin/quotas/businessline/add/",
        {"name": "robotics", "display_name": "Robotics", "description": ""},
    )
    assert response.status_code == 302
    line = BusinessLine.objects.get(name="robotics")
    assert (line.quota_gpus, line.guarantee_gpus) == (0, 0)
    [entry] = AuditRecord.objects.filter(action="admin.add")
    assert entry.target_type == "quotas.businessline" and entry.after["name"] == "robotics"
