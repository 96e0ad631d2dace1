"""An edit in the Django admin never undoes what a service committed meanwhile.

The admin reads the row, then saves it; it used to write every column back, so a quota
approved (Q4) or a node cordoned (V5) between the read and the write was silently
reverted, with the approval's QuotaChange and audit record, or the cordon's, still
claiming otherwise. (Nodes are no longer changed in the admin at all:
``tests/security/test_admin_invariants.py``.) Real PostgreSQL, real threads: the service's transaction commits
while the admin's UPDATE waits for its row lock (``tests/concurrency`` style)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction
from django.forms.models import model_to_dict
from django.test import Client

from quotas import services as quota_services
from quotas.models import BusinessLine
from tests.concurrency.threads import in_thread
from tests.quotas.conftest import NOW, ask

pytestmark = pytest.mark.django_db(transaction=True)


def committed_while_the_admin_saves(service) -> tuple[threading.Event, threading.Thread, list]:
    """Run ``service`` in a transaction that commits half a second after it is done: an
    admin save started meanwhile read the rows before it and writes after it."""
    errors: list[str] = []
    done = threading.Event()

    def run() -> None:
        with transaction.atomic():
            service()
            done.set()
            time.sleep(0.5)

    thread = in_thread(errors, run)
    assert done.wait(30), errors
    return done, thread, errors


def test_an_admin_edit_of_a_line_does_not_revert_an_approval_committed_meanwhile(demo):
    admin = Client()
    admin.force_login(demo["admin"])
    line = BusinessLine.objects.get(name="llm")
    before = line.quota_gpus
    req = ask(demo["lead"], line="llm", quota_gpus=before + 2)
    _, thread, errors = committed_while_the_admin_saves(
        lambda: quota_services.approve_quota_request(demo["admin"], req.pk, "ok", now=NOW)
    )
    form = {k: v for k, v in model_to_dict(line).items()
            if k not in ("id", "quota_gpus", "guarantee_gpus")}  # fmt: skip
    response = admin.post(
        f"/admin/quotas/businessline/{line.pk}/change/",
        {**form, "description": "LLM pre-training and fine-tuning"},
    )
    thread.join(30)
    assert errors == [] and response.status_code == 302
    line.refresh_from_db()
    assert line.description == "LLM pre-training and fine-tuning"
    assert line.quota_gpus == before + 2, "the approved quota was reverted by the admin's save"


def test_a_password_reset_in_the_admin_still_works_outside_a_transaction(demo):
    """The password view is not atomic: reading its row ``FOR UPDATE`` there would fail."""
    admin = Client()
    admin.force_login(demo["admin"])
    user = demo["researcher2"]
    response = admin.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": "Another-secret-42", "password2": "Another-secret-42",
         "usable_password": "true"},
    )  # fmt: skip
    assert response.status_code == 302
    user.refresh_from_db()
    assert user.check_password("Another-secret-42")
