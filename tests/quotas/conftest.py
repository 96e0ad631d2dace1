"""Quota fixtures: a fixed clock, requests made through the service, running jobs with GPUs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.models import LineMembership
from quotas.services import QuotaRequestInput, create_quota_request

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def lead_everywhere(demo):
    """``lead`` also leads search-rec and multimodal (to reach several lines' guarantees)."""
    from quotas.models import BusinessLine

    for line in BusinessLine.objects.all():
        LineMembership.objects.update_or_create(
            user=demo["lead"], business_line=line, defaults={"is_lead": True}
        )
    return demo["lead"]


def ask(user, line="llm", *, now=NOW, reason="more fine-tuning this quarter", **fields):
    """A request made through the service (fields as in QuotaRequestInput)."""
    return create_quota_request(
        user, QuotaRequestInput(business_line=line, reason=reason, **fields), now=now
    )


def run_job(owner, queue_name: str, gpus: int, *, preemptible=True, started_at=NOW, name="job"):
    """A running job holding ``gpus`` GPUs on the first free GPUs of the cluster."""
    from quotas.models import Queue
    from scheduling.models import Allocation, Job, Node

    queue = Queue.objects.get(name=queue_name)
    job = Job.objects.create(
        name=name, owner=owner, queue=queue, tier=queue.tier, gpus=gpus,
        preemptible=preemptible, state=Job.State.RUNNING, started_at=started_at,
    )  # fmt: skip
    taken = set(Allocation.objects.values_list("node_id", "gpu_index"))
    free = [
        (n.pk, i) for n in Node.objects.order_by("name") for i in range(n.gpus_total)
        if (n.pk, i) not in taken
    ]  # fmt: skip
    Allocation.objects.bulk_create(
        [Allocation(job=job, node_id=node, gpu_index=i) for node, i in free[:gpus]]
    )
    return job


@pytest.fixture
def people(db):
    """The personas of the permission tables (``tests/security/people.py``)."""
    from tests.security.people import make_people

    return make_people()


@pytest.fixture(autouse=True)
def quota_mail_eager(celery_eager) -> None:
    """Quota mail goes through Celery (core.mail); here its task runs in the test."""
