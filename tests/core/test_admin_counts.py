"""The Django admin writes counts and times as the portal's pages do: thousands separators
("1,205 audit records", "All 1,100 selected") and ``2026-12-01 03:10 UTC``, so an admin
reads the same digits and the same shape of time as on the dashboard
(tests/browser/test_counts_walk.py reads the pages)."""

from __future__ import annotations

import re
from datetime import UTC

from django.contrib.auth.models import Group
from django.test import Client

from core import timezones
from core.admin import ReadCount
from core.models import AuditRecord
from tests.browser.trust_checks import unseparated


def admin_client(demo) -> Client:
    client = Client()
    client.force_login(demo["admin"])
    return client


def test_a_read_count_is_an_int_that_prints_with_separators():
    n = ReadCount(68503)
    # the admin writes "All %(total_count)s selected" with %
    assert str(n) == "68,503" and "%s selected" % n == "68,503 selected"  # noqa: UP031
    assert n == 68503 and n + 1 == 68504 and n != 1 and isinstance(n, int)
    assert str(ReadCount(1)) == "1" and str(ReadCount(0)) == "0"


def test_the_list_and_its_search_count_with_separators(demo):
    AuditRecord.objects.all().delete()
    AuditRecord.objects.bulk_create(
        AuditRecord(actor_name="ops", action="demo.seed", target_type="node",
                    target_id=f"n{i:04d}", reason="wiped" if i < 1_010 else "")
        for i in range(1_205)
    )  # fmt: skip
    client = admin_client(demo)
    page = client.get("/admin/portal/auditrecord/").content.decode()
    assert "1,205 audit records" in page
    searched = client.get("/admin/portal/auditrecord/", {"q": "wiped"}).content.decode()
    assert "1,010 results" in searched and "1,205 total" in searched
    assert "1,010 audit records" in searched
    for text in (page, searched):  # links name rows by id: not counts
        assert not [s for s in unseparated(re.sub(r'href="[^"]*"', "", text))
                    if "1205" in s or "1010" in s]  # fmt: skip


def test_selecting_across_pages_counts_with_separators(demo):
    Group.objects.bulk_create(Group(name=f"team-{i:04d}") for i in range(1_100))
    total = Group.objects.count()
    page = admin_client(demo).get("/admin/auth/group/").content.decode()
    assert f"{total:,} groups" in page
    assert f"Select all {total:,} groups" in page and f"All {total:,} selected" in page
    assert str(total) not in page.replace(f"{total:,}", "")


def test_the_admin_writes_times_as_the_pages_do(demo):
    """A time in the admin reads as on every page (``{{ when|utc }}``): 2026-12-01 03:10 UTC,
    not Django's "Dec. 1, 2026, 3:10 a.m." without a zone."""
    record = AuditRecord.objects.create(actor_name="ops", action="demo.seed",
                                        target_type="node", target_id="n1")  # fmt: skip
    written = timezones.written(record.at, UTC)
    client = admin_client(demo)
    listed = client.get("/admin/portal/auditrecord/").content.decode()
    shown = client.get(f"/admin/portal/auditrecord/{record.pk}/change/").content.decode()
    for page in (listed, shown):
        assert written in page
        assert not re.search(r"\b(?:a|p)\.m\.", page)
