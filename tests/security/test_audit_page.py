"""/audit/: admins read every privileged action (who, what, when, from where, why,
before/after), filtered and paginated; everybody else is refused."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from core.audit import record
from core.models import AuditRecord
from portal.audit_views import RECORDS_PER_PAGE
from quotas.models import BusinessLine
from scheduling.models import Job, Node

pytestmark = pytest.mark.django_db


def as_user(demo, role: str | None) -> Client:
    client = Client()
    if role:
        client.force_login(demo[role])
    return client


def rows(response) -> list[str]:
    return re.findall(r'<tr id="audit-(\d+)">', response.content.decode())


@pytest.mark.parametrize("role", ["researcher", "researcher2", "lead", "oncall"])
def test_only_admins_may_read_the_audit_log(demo, role):
    record(demo["admin"], "node.cordon", Node.objects.first(), reason="secret reason")
    response = as_user(demo, role).get("/audit/")
    assert response.status_code == 403
    assert b"secret reason" not in response.content
    assert as_user(demo, role).get("/audit/?actor=admin").status_code == 403


def test_anonymous_callers_are_sent_to_the_login_page(demo):
    response = Client().get("/audit/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_a_privileged_action_shows_who_what_when_where_why_and_the_change(demo, api):
    node = Node.objects.order_by("name").first()
    oncall = api("oncall")
    response = oncall.post(f"/api/v1/nodes/{node.name}/cordon/", {"reason": "fan noise"},
                           format="json", REMOTE_ADDR="10.1.2.3")  # fmt: skip
    assert response.status_code == 200, response.data
    entry = AuditRecord.objects.get(action="node.cordon")
    page = as_user(demo, "admin").get("/audit/")
    assert page.status_code == 200
    html = page.content.decode()
    row = html[html.index(f'<tr id="audit-{entry.pk}">') : html.index('<nav aria-label="Audit')
               if '<nav aria-label="Audit' in html else None]  # fmt: skip
    row = row[: row.index("</tbody>\n</table>")]
    assert "oncall" in row  # who
    assert "node.cordon" in row and f"scheduling.node:{entry.target_id}" in row  # what
    assert entry.at.strftime("%Y-%m-%d %H:%M") in row  # when (UTC)
    assert "10.1.2.3" in row  # from where
    assert "fan noise" in row  # why
    assert "(changed)" in row and "cordoned" in row  # before -> after


def test_filters_by_actor_action_target_and_dates(demo):
    node = Node.objects.order_by("name").first()
    a = record(demo["admin"], "node.cordon", node, reason="a")
    b = record(demo["oncall"], "node.drain", node, reason="b")
    c = record(demo["oncall"], "alert.ack", "monitoring.alert", reason="c")
    AuditRecord.objects.filter(pk=c.pk).update(at=timezone.now() - timedelta(days=3))
    admin = as_user(demo, "admin")

    def ids(query: str) -> set[int]:
        response = admin.get("/audit/" + query)
        assert response.status_code == 200, response.content[:500]
        return {int(i) for i in rows(response)}

    assert ids("") == {a.pk, b.pk, c.pk}
    assert ids("?actor=ONCALL") == {b.pk, c.pk}
    assert ids("?action=node.") == {a.pk, b.pk}
    assert ids("?action=node.drain") == {b.pk}
    assert ids(f"?target=scheduling.node:{node.pk}") == {a.pk, b.pk}
    assert ids(f"?target={node.pk}") == {a.pk, b.pk}
    assert ids("?target=scheduling.node") == {a.pk, b.pk}
    today = timezone.now().date()
    assert ids(f"?since={today}") == {a.pk, b.pk}
    assert ids(f"?until={today - timedelta(days=1)}") == {c.pk}
    assert ids("?actor=oncall&action=alert.") == {c.pk}


@pytest.mark.parametrize(
    "query",
    ["?since=yesterday", "?since=2026-02-30", "?actor=" + "x" * 200, "?since=2026-05-02&until=2026-05-01",
     "?page=-1", "?page=abc", "?page=99999999999999999999", "?target=%00", "?actor=%00"],
)  # fmt: skip
def test_bad_filters_are_a_400_or_a_clamped_page_never_a_500(demo, query):
    record(demo["admin"], "node.cordon", Node.objects.first())
    response = as_user(demo, "admin").get("/audit/" + query)
    assert response.status_code in (200, 400)
    if response.status_code == 400:
        assert 'role="alert"' in response.content.decode() and rows(response) == []


@pytest.mark.parametrize(("query", "words"), [("?page=abc", "a page number"),
                                              ("?page=0", "pages start at 1"),
                                              ("?action=node.&page=-1", "pages start at 1"),
                                              ("?page=%D9%A7", "a page number")])  # fmt: skip
def test_a_page_number_that_is_not_one_is_a_400_not_the_first_page(demo, query, words):
    """``?page=abc`` showed the first page as if asked for it."""
    record(demo["admin"], "node.cordon", Node.objects.first())
    response = as_user(demo, "admin").get("/audit/" + query)
    body = response.content.decode()
    assert response.status_code == 400 and rows(response) == []
    assert f'<p class="error" role="alert" id="page-error">Page: {words}' in body
    assert 'name="page"' not in body, "the page number is not a filter to fill in"
    last = as_user(demo, "admin").get("/audit/?page=99999999999999999999")
    assert last.status_code == 200 and len(rows(last)) == 1, "past the last page: the last"


def test_pages_of_fifty_newest_first(demo):
    node = Node.objects.first()
    made = [record(demo["admin"], "node.cordon", node, reason=f"r{i}").pk for i in range(120)]
    admin = as_user(demo, "admin")
    first = admin.get("/audit/?action=node.")
    assert [int(i) for i in rows(first)] == sorted(made, reverse=True)[:RECORDS_PER_PAGE]
    assert "page 1 of 3" in first.content.decode()
    assert "action=node.&amp;page=2" in first.content.decode()  # paging keeps the filters
    last = admin.get("/audit/?action=node.&page=3")
    assert [int(i) for i in rows(last)] == sorted(made, reverse=True)[100:]


def test_the_page_costs_the_same_few_queries_however_many_records(
    demo, django_assert_max_num_queries
):
    node = Node.objects.first()
    for _ in range(60):
        record(demo["admin"], "node.cordon", node, before={"state": "ready"}, after={"state": "x"})
    admin = as_user(demo, "admin")
    with django_assert_max_num_queries(8):
        assert admin.get("/audit/").status_code == 200


def test_the_before_after_table_names_each_field_in_words_and_keeps_the_values(demo):
    """Page walk: the table read the model's field names (``quota_gpus``, ``state_reason``);
    it reads each field's ``verbose_name`` (a key that is no field: the same plain form)."""
    node = Node.objects.order_by("name").first()
    record(demo["oncall"], "node.cordon", node, before={"state": "ready", "state_reason": ""},
           after={"state": "cordoned", "state_reason": "fan noise"})  # fmt: skip
    line = BusinessLine.objects.order_by("name").first()
    record(demo["admin"], "quota.applied", line, before={"quota_gpus": 1200, "guarantee_gpus": 0},
           after={"quota_gpus": 2750, "guarantee_gpus": 0})  # fmt: skip
    record(demo["admin"], "node.fault", node, after={"fault": "gpu_failure"})
    html = as_user(demo, "admin").get("/audit/").content.decode()
    fields = re.findall(r'<th scope="row">(.*?)</th><td><code>(.*?)</code></td><td><code>(.*?)'
                        r"</code></td>", html)  # fmt: skip
    assert fields == [
        ("Fault <small>(changed)</small>", "—", "&quot;gpu_failure&quot;"),
        ("Guarantee (GPUs)", "0", "0"),
        ("Quota (GPUs) <small>(changed)</small>", "1200", "2750"),
        ("State <small>(changed)</small>", "&quot;ready&quot;", "&quot;cordoned&quot;"),
        ("State reason <small>(changed)</small>", "&quot;&quot;", "&quot;fan noise&quot;"),
    ]


def test_recorded_text_is_shown_escaped(demo):
    record(demo["admin"], "node.cordon", Node.objects.first(),
           reason="<script>alert(1)</script>", before={"name": "<img src=x onerror=alert(2)>"},
           after={"name": "ok"})  # fmt: skip
    html = as_user(demo, "admin").get("/audit/").content.decode()
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_audit_log_is_read_only_in_the_page_and_the_admin(demo):
    entry = record(demo["admin"], "node.cordon", Node.objects.first())
    admin = as_user(demo, "admin")
    assert admin.post("/audit/", {"actor": "x"}).status_code == 405
    change = admin.post(f"/admin/portal/auditrecord/{entry.pk}/change/", {"reason": "edited"})
    delete = admin.post(f"/admin/portal/auditrecord/{entry.pk}/delete/", {"post": "yes"})
    assert change.status_code in (302, 403) and delete.status_code == 403
    entry.refresh_from_db()
    assert entry.reason == "" and AuditRecord.objects.filter(pk=entry.pk).exists()


def test_a_parameter_the_page_does_not_take_is_a_400_naming_it_not_the_whole_log(demo):
    """``?who=admin`` (the filter is ``actor``) listed every record as if filtered."""
    record(demo["admin"], "node.cordon", Node.objects.first())
    response = as_user(demo, "admin").get("/audit/?who=admin")
    body = html.unescape(response.content.decode())
    assert response.status_code == 400 and rows(response) == []
    assert (
        "this page has no filter “who”; it takes actor, action, target, since, until, page" in body
    )


def test_a_target_reads_by_its_name_and_links_to_its_page(demo, api):
    """It read ``scheduling.node:3``, a number nobody knows a node by (session 41)."""
    from quotas.models import BusinessLine

    node = Node.objects.order_by("name").first()
    job_id = (
        api("researcher")
        .post("/api/v1/jobs/", {"name": "tokenizer", "queue": "llm-core", "gpus": 1}, format="json")
        .data["id"]
    )
    line = BusinessLine.objects.get(name="llm")
    record(demo["oncall"], "node.cordon", node, reason="fan noise")
    record(demo["researcher"], "job.cancel", Job.objects.get(pk=job_id))
    record(demo["admin"], "admin.change", line)
    record(demo["admin"], "admin.change", demo["researcher2"])
    gone = record(demo["admin"], "node.drain", "scheduling.node")  # a target by type only
    page = as_user(demo, "admin").get("/audit/").content.decode()
    node_url = f"/oncall/nodes/{node.name}/"
    assert f'<a href="{node_url}">node {node.name}</a>' in page
    assert f"scheduling.node:{node.pk}" in page, "the type:id stays, for the filter"
    assert f'<a href="/jobs/{job_id}/">job #{job_id} tokenizer</a>' in page
    assert '<a href="/quotas/lines/llm/">line llm</a>' in page
    assert "user researcher2" in page
    assert f'<tr id="audit-{gone.pk}">' in page


def test_a_target_with_no_words_of_its_own_reads_by_its_model_and_links_to_the_admin(demo):
    """The walk read ``scheduling.simulatorstate:1`` alone: a kind the page has no words for
    reads by its model's name, linked to the admin's page for it, without loading the row
    (the simulator's state is the whole simulated cluster)."""
    from quotas.models import QuotaPolicy
    from scheduling.models import SimulatorState

    policy = QuotaPolicy.objects.get_or_create(pk=1)[0]
    state = SimulatorState.objects.create(state={}, virtual_now=0.0, saved_wall=0.0)
    record(demo["admin"], "admin.change", policy)
    record(None, "simulator.advance", state)
    page = as_user(demo, "admin").get("/audit/").content.decode()
    assert (
        f'<a href="/admin/quotas/quotapolicy/{policy.pk}/change/">quota policy #{policy.pk}</a>'
        in page
    )
    assert f"simulator state #{state.pk}" in page


def test_the_target_filter_takes_a_node_or_user_name(demo):
    first, second = Node.objects.order_by("name")[:2]
    a = record(demo["admin"], "node.cordon", first)
    record(demo["admin"], "node.cordon", second)
    c = record(demo["admin"], "admin.change", demo["researcher"])
    admin = as_user(demo, "admin")
    assert {int(i) for i in rows(admin.get(f"/audit/?target={first.name}"))} == {a.pk}
    assert {int(i) for i in rows(admin.get("/audit/?target=researcher"))} == {c.pk}
    assert rows(admin.get("/audit/?target=no-such-node")) == []


def test_the_date_filters_are_days_in_the_viewers_zone_as_the_times_shown(demo):
    """A Tokyo admin read a record at 08:00 JST on the 6th and filtered "From" the 6th: the
    filter took UTC days, so the record (23:00 UTC on the 5th) was left out (session 41)."""
    from datetime import UTC, datetime

    from core.models import Profile

    Profile.objects.filter(user=demo["admin"]).update(time_zone="Asia/Tokyo")
    late = record(demo["admin"], "node.cordon", Node.objects.first())
    AuditRecord.objects.filter(pk=late.pk).update(at=datetime(2026, 12, 5, 23, 0, tzinfo=UTC))
    admin = as_user(demo, "admin")
    page = admin.get("/audit/?since=2026-12-06")
    assert [int(i) for i in rows(page)] == [late.pk]
    assert "2026-12-06 08:00:00 JST" in page.content.decode()
    assert "From (date, Asia/Tokyo)" in page.content.decode()
    assert rows(admin.get("/audit/?until=2026-12-05")) == []


def test_the_last_day_there_is_is_a_bound_not_a_500(demo):
    record(demo["admin"], "node.cordon", Node.objects.first())
    admin = as_user(demo, "admin")
    assert len(rows(admin.get("/audit/?until=9999-12-31"))) == 1
    assert len(rows(admin.get("/audit/?since=0001-01-01"))) == 1
