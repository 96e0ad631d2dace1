"""Parallel approvals on the real PostgreSQL: however many admins approve at once, the sum of
guarantees never passes healthy capacity (the contract lock serialises them and each
re-checks after the previous one committed)."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from core.models import LineMembership
from quotas import ledger, services
from quotas.models import BusinessLine, QuotaChange, QuotaRequest
from quotas.selectors import build_contracts
from tests.quotas.conftest import NOW, ask

pytestmark = pytest.mark.django_db(transaction=True)

EXTRA_LINES = 12
GUARANTEE_EACH = 4


def _run_in_threads(targets) -> list:
    barrier = threading.Barrier(len(targets))
    results: list = [None] * len(targets)

    def worker(i: int, target) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = target()
        except Exception as exc:  # noqa: BLE001 - collected and asserted on below
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, t)) for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "an approval hung"
    return results


def test_many_parallel_approvals_never_push_guarantees_past_capacity(demo):
    lead, admin = demo["lead"], demo["admin"]
    requests = []
    for i in range(EXTRA_LINES):
        line = BusinessLine.objects.create(
            name=f"extra-{i}", display_name=f"Extra {i}", quota_gpus=32, guarantee_gpus=0
        )
        LineMembership.objects.create(user=lead, business_line=line, is_lead=True)
        requests.append(ask(lead, line=line.name, guarantee_gpus=GUARANTEE_EACH).pk)
    healthy = services.healthy_gpus()
    start_total = ledger.guarantee_total(build_contracts())
    assert (healthy, start_total) == (32, 11)
    assert start_total + EXTRA_LINES * GUARANTEE_EACH > healthy, "together they cannot all fit"

    results = _run_in_threads(
        [
            lambda pk=pk: services.approve_quota_request(admin, pk, "parallel", now=NOW)
            for pk in requests
        ]
    )

    approved = [r for r in results if isinstance(r, QuotaRequest)]
    refused = [r for r in results if isinstance(r, ValidationError)]
    assert len(approved) + len(refused) == EXTRA_LINES, [r for r in results if not isinstance(r, QuotaRequest | ValidationError)]  # fmt: skip
    fitting = (healthy - start_total) // GUARANTEE_EACH
    assert len(approved) == fitting, "every approval that fitted went through, no more"
    assert all("Does not fit" in str(e) for e in refused)
    final_total = ledger.guarantee_total(build_contracts())
    assert final_total <= healthy
    assert final_total == start_total + fitting * GUARANTEE_EACH
    assert QuotaChange.objects.count() == fitting
    assert QuotaRequest.objects.filter(state="approved").count() == fitting
    assert QuotaRequest.objects.filter(state="pending").count() == EXTRA_LINES - fitting


def test_an_approval_waits_for_a_concurrent_contract_writer_and_rechecks_after_it(demo):
    """Deterministic version of the race: a writer holds the contract lock and fills the
    capacity; an approval started meanwhile must wait, then see the filled capacity."""
    req = ask(demo["lead"], quota_gpus=20, guarantee_gpus=10)  # fits now: 10 + 6 <= 32
    locked = threading.Event()

    def writer():
        with transaction.atomic():
            services._lock_contracts()
            locked.set()
            time.sleep(0.5)  # the approval below starts and must block here
            BusinessLine.objects.filter(name="search-rec").update(quota_gpus=32, guarantee_gpus=20)
        return "written"

    def approver():
        assert locked.wait(timeout=30)
        started = time.monotonic()
        try:
            services.approve_quota_request(demo["admin"], req.pk, now=NOW)
        except ValidationError as exc:
            return time.monotonic() - started, exc
        return time.monotonic() - started, None

    written, (waited, error) = _run_in_threads([writer, approver])
    assert written == "written"
    assert waited >= 0.3, "the approval did not wait for the lock"
    assert error is not None and "Does not fit" in str(error), "it re-checked after the write"
    req.refresh_from_db()
    assert req.state == "pending"
    assert ledger.guarantee_total(build_contracts()) == 5 + 20 + 3
