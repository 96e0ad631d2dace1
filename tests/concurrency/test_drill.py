"""The concurrency drill (#16): cycles back to back while people submit, cancel, ask for
quota, approve, reject, withdraw, cordon, drain and uncordon, break simulated nodes,
acknowledge and resolve alerts, and an admin edits the quota policy's starvation bound in
the Django admin (#19), all at once, on real PostgreSQL.

Zero unexpected errors (a refusal the rules call for, such as cancelling a finished job or
approving a request someone withdrew, is expected and counted apart), zero deadlocks, every
accepted action applied exactly once, and the database and the cluster agree at the end.
``DRILL_SECONDS`` makes it longer (``DRILL_SECONDS=120 pytest tests/concurrency``).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.forms.models import model_to_dict
from django.test import Client

from core.models import AuditRecord
from monitoring.models import Alert
from monitoring.services import acknowledge_alert, raise_alert, resolve_alert
from quotas.models import QuotaPolicy, QuotaRequest
from quotas.services import (
    QuotaRequestInput,
    approve_quota_request,
    create_quota_request,
    reject_quota_request,
    withdraw_quota_request,
)
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, Node
from scheduling.nodes.services import cordon_node, drain_node, inject_fault, uncordon_node
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.sim_services import run_cycle_now
from scheduling.simcore.faults import FAULT_GPU

pytestmark = pytest.mark.django_db(transaction=True)

SECONDS = float(os.environ.get("DRILL_SECONDS", "8"))
REFUSALS = (ValidationError, PermissionDenied)


class Drill:
    """Runs actors until the deadline; counts what each accepted and what it refused."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.accepted: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def act(self, name: str, fn: Callable[[], object]) -> object | None:
        try:
            result = fn()
        except REFUSALS:
            with self.lock:
                self.refused[name] += 1
            return None
        except Exception as exc:  # anything else is a failure of the portal
            with self.lock:
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return None
        with self.lock:
            self.accepted[name] += 1
        return result

    def run(self, actors: list[Callable[[random.Random], None]]) -> None:
        def loop(actor: Callable[[random.Random], None], seed: int) -> None:
            rng = random.Random(seed)
            try:
                while time.monotonic() < self.deadline:
                    actor(rng)
            finally:
                connection.close()

        threads = [threading.Thread(target=loop, args=(a, i)) for i, a in enumerate(actors)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SECONDS + 120)


def test_everyone_acts_while_cycles_run_and_nothing_fails(demo):
    admin, lead, oncall = demo["admin"], demo["lead"], demo["oncall"]
    researchers = [demo["researcher"], demo["lead"]]
    drill = Drill(SECONDS)
    submitted: list[int] = []
    asked: list[int] = []
    nodes = list(Node.objects.values_list("name", flat=True))

    def cycles(rng: random.Random) -> None:
        drill.act("cycle", lambda: run_cycle_now(admin))

    def submitter(rng: random.Random) -> None:
        owner = rng.choice(researchers)
        req = JobRequest(name=f"drill-{rng.randrange(10**6)}", queue="llm-experiment",
                         gpus=rng.choice([1, 2, 4, 8]))  # fmt: skip
        job = drill.act("submit", lambda: submit_job(owner, req))
        if job is not None:
            submitted.append(job.pk)

    def canceller(rng: random.Random) -> None:
        if submitted:
            pk = rng.choice(submitted)
            owner = Job.objects.only("owner").get(pk=pk).owner
            drill.act("cancel", lambda: cancel_job(owner, pk))
        time.sleep(0.005)

    def quota(rng: random.Random) -> None:
        data = QuotaRequestInput(business_line="llm", queue="llm-experiment",
                                 reason="drill", quota_gpus=rng.randrange(8, 33))  # fmt: skip
        made = drill.act("ask", lambda: create_quota_request(lead, data))
        if made is not None:
            asked.append(made.pk)
        if asked:
            pk = rng.choice(asked)
            pick = rng.random()
            if pick < 0.4:
                drill.act("approve", lambda: approve_quota_request(admin, pk, "ok"))
            elif pick < 0.7:
                drill.act("reject", lambda: reject_quota_request(admin, pk, "not now"))
            else:
                drill.act("withdraw", lambda: withdraw_quota_request(lead, pk, "no"))

    def operator(rng: random.Random) -> None:
        name = rng.choice(nodes)
        action = rng.choice([cordon_node, drain_node, uncordon_node])
        drill.act(action.__name__, lambda: action(oncall, name, "drill"))
        time.sleep(0.01)

    def breaker(rng: random.Random) -> None:
        """Simulated faults wait for the cluster lock the cycle holds (never ClusterBusy)."""
        name = rng.choice(nodes)
        drill.act("fault", lambda: inject_fault(oncall, FAULT_GPU, name))
        time.sleep(0.05)

    alerts = [raise_alert("drill", "warning", f"drill-{i}", "a drill alert").pk for i in range(40)]

    def responder(rng: random.Random) -> None:
        """On-call acknowledges and resolves alerts while the cycle raises and clears its own."""
        pk = rng.choice(alerts)
        action = rng.choice([acknowledge_alert, resolve_alert])
        drill.act(action.__name__, lambda: action(oncall, pk))
        time.sleep(0.01)

    policy = QuotaPolicy.load()
    policy_url = f"/admin/quotas/quotapolicy/{policy.pk}/change/"
    policy_form = {k: v for k, v in model_to_dict(policy).items() if k not in ("id", "singleton")}
    bounds: list[int] = []

    def policy_editor(rng: random.Random) -> None:
        browser = Client()
        browser.force_login(admin)
        hours = rng.choice([0, 1, 72, 168])

        def edit() -> None:
            response = browser.post(policy_url, {**policy_form, "starvation_bound_hours": hours})
            if response.status_code != 302:
                raise RuntimeError(f"the admin answered {response.status_code}")
            bounds.append(hours)

        drill.act("policy", edit)
        time.sleep(0.02)

    drill.run([cycles, cycles, submitter, canceller, quota, operator, policy_editor, breaker,
               responder])  # fmt: skip

    print("drill:", dict(drill.accepted), "refused:", dict(drill.refused))
    assert drill.errors == [], drill.errors[:5]
    assert drill.accepted["cycle"] >= 2 and drill.accepted["submit"] >= 5, drill.accepted
    # Exactly once: each accepted submission is one job; each accepted decision one state.
    assert Job.objects.filter(name__startswith="drill-").count() == drill.accepted["submit"]
    decided = Counter(QuotaRequest.objects.filter(pk__in=asked).values_list("state", flat=True))
    assert decided["withdrawn"] == drill.accepted["withdraw"]
    assert decided["approved"] == drill.accepted["approve"]
    assert decided["rejected"] == drill.accepted["reject"]
    audited = Counter(AuditRecord.objects.values_list("action", flat=True))
    for action in ("cordon_node", "drain_node", "uncordon_node"):
        assert audited[f"node.{action.removesuffix('_node')}"] == drill.accepted[action]
    assert drill.accepted["fault"] >= 1 and audited["simulator.fault"] == drill.accepted["fault"]
    for action in ("acknowledge_alert", "resolve_alert"):
        assert (
            audited["alert.ack" if action == "acknowledge_alert" else "alert.resolve"]
            == drill.accepted[action]
        )
    resolved = Alert.objects.filter(pk__in=alerts, status=Alert.Status.RESOLVED).count()
    assert resolved == drill.accepted["resolve_alert"], "each accepted resolve closed one alert"
    edits = AuditRecord.objects.filter(action="admin.change", target_type="quotas.quotapolicy")
    assert drill.accepted["policy"] >= 2 and edits.count() == drill.accepted["policy"]
    assert QuotaPolicy.load().starvation_bound_hours == bounds[-1]  # the last edit stands
    run_cycle_now(admin)
    assert find_inconsistencies() == []
