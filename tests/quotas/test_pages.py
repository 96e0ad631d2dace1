"""The quota pages: each role on each page, the lead's form, the admins' approval page with
the impact, the line page with its history; labels and CSRF on every form."""

import html
import re
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.utils.html import escape

from core.models import Profile
from quotas.models import BusinessLine, QuotaChange, QuotaRequest
from tests.quotas.conftest import ask

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "researcher", "researcher2", "lead", "oncall", "admin")


class Inputs(HTMLParser):
    """Collects form controls and the ``for`` targets of labels."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[str] = []
        self.labelled: set[str] = set()
        self.forms: list[bool] = []  # has a CSRF token, per POST form
        self._in_post_form = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and (a.get("method") or "").lower() == "post":
            self.forms.append(False)
            self._in_post_form = True
        if tag == "input" and a.get("name") == "csrfmiddlewaretoken" and self._in_post_form:
            self.forms[-1] = True
        if tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append(a.get("id", "<no id>"))
        if tag == "label" and a.get("for"):
            self.labelled.add(a["for"])

    def handle_endtag(self, tag):
        if tag == "form":
            self._in_post_form = False


def check_forms(html: str) -> None:
    parsed = Inputs()
    parsed.feed(html)
    unlabelled = [c for c in parsed.controls if c not in parsed.labelled]
    assert not unlabelled, f"inputs without a label: {unlabelled}"
    assert all(parsed.forms), "a POST form without a CSRF token"


def browser(client, demo, role):
    if role != "anonymous":
        client.force_login(demo[role])
    return client


@pytest.fixture
def req(demo) -> QuotaRequest:
    return ask(demo["lead"], quota_gpus=20, guarantee_gpus=6, reason="Q3 pretraining")


PAGES = [
    # url, {role: status}; others 403
    ("/quotas/", {r: 200 for r in ROLES[1:]}),
    ("/quotas/lines/llm/", {r: 200 for r in ROLES[1:]}),
    ("/quotas/lines/no-such-line/", {r: 404 for r in ROLES[1:]}),
    ("/quotas/requests/", {r: 200 for r in ROLES[1:]}),
    ("/quotas/requests/new/", {"lead": 200}),
    ("/quotas/requests/{id}/", {"researcher": 200, "lead": 200, "admin": 200, "researcher2": 404, "oncall": 404}),
    ("/quotas/requests/999999/", {r: 404 for r in ROLES[1:]}),
]  # fmt: skip


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("url,allowed", PAGES, ids=lambda v: str(v)[:30])
def test_every_role_on_every_page(client, demo, req, role, url, allowed):
    response = browser(client, demo, role).get(url.format(id=req.pk))
    if role == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
        return
    assert response.status_code == allowed.get(role, 403)
    if response.status_code == 200:
        check_forms(response.content.decode())


ACTIONS = [
    # action, body, {role: status}; others 403
    ("approve", {"note": "ok"}, {"admin": 302, "researcher2": 404, "oncall": 404}),
    (
        "reject",
        {"reject-note": "no", "confirm": "1"},
        {"admin": 302, "researcher2": 404, "oncall": 404},
    ),
    ("withdraw", {}, {"lead": 302, "researcher2": 404, "oncall": 404}),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action,body,allowed", ACTIONS, ids=lambda v: str(v)[:20])
def test_every_role_on_every_action(client, demo, req, role, action, body, allowed):
    response = browser(client, demo, role).post(f"/quotas/requests/{req.pk}/{action}/", body)
    req.refresh_from_db()
    if role == "anonymous":
        assert response.status_code == 302 and req.state == "pending"
        return
    expected = allowed.get(role, 403)
    assert response.status_code == expected
    done = {"approve": "approved", "reject": "rejected", "withdraw": "withdrawn"}[action]
    assert req.state == (done if expected == 302 else "pending")
    assert client.get(f"/quotas/requests/{req.pk}/{action}/").status_code in (405, 404)


def selected(page: str, name: str) -> list[str]:
    """The values the ``<select name=...>`` of ``page`` has selected."""
    import re

    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', page, re.S).group(1)
    return re.findall(r'<option value="([^"]*)"[^>]*selected', select)


@pytest.mark.parametrize(
    ("query", "words"),
    [("business_line=search-rec", "business_line: “search-rec” is not a line you lead"),
     ("business_line=nope&queue=llm-core", "business_line: “nope” is not a line you lead"),
     ("business_line=llm&queue=search-rec-core",
      "queue: “search-rec-core” is not a queue of line llm"),
     ("queue=llm-gone", "queue: “llm-gone” is not a queue of the lines you lead"),
     ("business_line=llm&guarantee_gpus=four", "guarantee_gpus: “four” is not a number of GPUs"),
     ("quota_gpus=%D9%A7", "quota_gpus: “٧” is not a number of GPUs")],
)  # fmt: skip
def test_a_link_s_values_the_form_cannot_offer_are_a_400_saying_so(client, demo, query, words):
    """The form's link (``?business_line=…&queue=…``) silently fell back: a line the lead
    does not lead showed their first line chosen, a queue not in it "the whole line" (a
    request for the line when the queue was meant), a count not digits an empty box."""
    client.force_login(demo["lead"])
    response = client.get(f"/quotas/requests/new/?{query}")
    page = response.content.decode()
    assert response.status_code == 400
    assert 'role="alert" id="prefill-refused"' in page and words in page
    assert 'value="four"' not in page and 'value="٧"' not in page, "left out, not shown"
    assert not QuotaRequest.objects.exists()


def test_a_link_s_values_the_form_can_offer_are_chosen(client, demo):
    client.force_login(demo["lead"])
    response = client.get("/quotas/requests/new/?business_line=llm&queue=llm-core&guarantee_gpus=4")
    page = response.content.decode()
    assert response.status_code == 200 and "prefill-refused" not in page
    assert selected(page, "business_line") == ["llm"] and selected(page, "queue") == ["llm-core"]
    assert 'name="guarantee_gpus" value="4"' in page


def test_the_lead_requests_through_the_form(client, demo):
    client.force_login(demo["lead"])
    page = client.get("/quotas/requests/new/?business_line=llm").content.decode()
    assert "Quota or guarantee?" in page and "is a cap" in page and "is a floor" in page
    assert "line llm" in page and "queue llm-core" in page, "current contracts are shown"
    form = {"business_line": "llm", "queue": "llm-core", "quota_gpus": "", "guarantee_gpus": "4",
            "reason": "protect the core runs", "starts_at": "", "ends_at": ""}  # fmt: skip
    response = client.post("/quotas/requests/new/", form)
    req = QuotaRequest.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/quotas/requests/{req.pk}/"
    assert (req.queue.name, req.quota_gpus, req.guarantee_gpus) == ("llm-core", None, 4)
    listing = client.get("/quotas/requests/").content.decode()
    assert f"#{req.pk}" in listing and "queue llm-core" in listing


NEXT_YEAR = datetime.now(UTC).year + 1  # the demo's cluster clock starts at the wall clock


def test_a_lead_east_of_utc_types_the_start_in_their_zone_as_the_form_says(client, demo):
    """Every time on the page is in the viewer's zone, and so are the form's: a lead in
    Kolkata typed UTC while the page's clock read IST (session 41); the labels name the
    zone, and a time is shown again as typed."""
    Profile.objects.filter(user=demo["lead"]).update(time_zone="Asia/Kolkata")
    client.force_login(demo["lead"])
    page = client.get("/quotas/requests/new/").content.decode()
    assert "Starts at (Asia/Kolkata, cluster time; empty: as soon as approved)" in page
    assert "Ends at (Asia/Kolkata, cluster time; empty: until changed again)" in page
    form = {"business_line": "llm", "queue": "llm-core", "quota_gpus": "", "guarantee_gpus": "4",
            "reason": "protect the core runs", "starts_at": f"{NEXT_YEAR}-01-02T10:00",
            "ends_at": ""}  # fmt: skip
    shown_again = client.post("/quotas/requests/new/", {**form, "guarantee_gpus": "-1"})
    assert shown_again.status_code == 400
    assert f'name="starts_at" value="{NEXT_YEAR}-01-02T10:00"' in shown_again.content.decode()
    assert client.post("/quotas/requests/new/", form).status_code == 302
    assert QuotaRequest.objects.get().starts_at == datetime(NEXT_YEAR, 1, 2, 4, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("zone", "typed", "words"),
    [("Asia/Kolkata", "0001-01-01T00:00", "between the years 2 and 9998"),
     ("America/New_York", "2027-03-14T02:30", "couldn’t be interpreted in time zone")],
)  # fmt: skip
def test_a_time_the_viewers_zone_cannot_place_is_a_400_in_words(client, demo, zone, typed, words):
    """Year 1 in Kolkata is before year 1 in UTC; 02:30 on New York's spring-forward day
    does not exist."""
    Profile.objects.filter(user=demo["lead"]).update(time_zone=zone)
    client.force_login(demo["lead"])
    response = client.post("/quotas/requests/new/", {
        "business_line": "llm", "queue": "llm-core", "quota_gpus": "20", "guarantee_gpus": "",
        "reason": "more", "starts_at": typed, "ends_at": ""})  # fmt: skip
    assert response.status_code == 400
    assert words in html.unescape(response.content.decode())
    assert not QuotaRequest.objects.exists()


BAD_FORMS = [
    ({"quota_gpus": "10", "guarantee_gpus": "12"}, "cannot be above the quota"),
    ({"quota_gpus": "-3"}, "must not be negative"),
    ({"guarantee_gpus": "-1"}, "must not be negative"),
    ({"quota_gpus": "20", "starts_at": f"{NEXT_YEAR}-01-02T10:00", "ends_at": f"{NEXT_YEAR}-01-01T10:00"}, "the end must be after the start"),
    ({"quota_gpus": "20", "ends_at": "9999-12-31T10:00"}, "at most 2 years ahead"),
    ({"quota_gpus": "20", "starts_at": "0001-01-01T00:00"}, "at most 2 years ago"),
    ({"quota_gpus": "500"}, "more than the cluster holds (32 GPUs)"),
    ({"business_line": "no-such-line", "quota_gpus": "20"}, "unknown business line"),
    ({"queue": "search-rec-core", "guarantee_gpus": "2"}, "belongs to the line search-rec, not llm"),
    ({"quota_gpus": "many"}, "Enter a whole number"),
    ({"quota_gpus": "20", "reason": ""}, "say why"),
]  # fmt: skip


@pytest.mark.parametrize("fields,message", BAD_FORMS, ids=lambda v: str(v)[:40])
def test_bad_form_input_is_shown_next_to_the_form_and_nothing_is_stored(
    client, demo, fields, message
):
    client.force_login(demo["lead"])
    form = {"business_line": "llm", "queue": "", "quota_gpus": "", "guarantee_gpus": "",
            "reason": "more", "starts_at": "", "ends_at": "", **fields}  # fmt: skip
    response = client.post("/quotas/requests/new/", form)
    assert response.status_code == 400
    body = response.content.decode()
    assert message in body.replace("&#x27;", "'")
    check_forms(body)
    assert not QuotaRequest.objects.exists()


def test_csrf_is_enforced_on_the_quota_forms(demo, req):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(demo["lead"])
    assert strict.post("/quotas/requests/new/", {"business_line": "llm"}).status_code == 403
    strict.force_login(demo["admin"])
    assert strict.post(f"/quotas/requests/{req.pk}/approve/", {}).status_code == 403
    req.refresh_from_db()
    assert req.state == "pending"


def test_the_admin_sees_the_impact_then_approves_and_the_line_history_shows_it(client, demo, req):
    client.force_login(demo["admin"])
    page = client.get(f"/quotas/requests/{req.pk}/").content.decode()
    assert "Impact if approved" in page and 'id="fit" class="ok"' in page
    assert "guarantees would total 12 GPUs (now 11" in page
    assert 'id="approve-form"' in page and 'id="reject-form"' in page and "Q3 pretraining" in page
    response = client.post(f"/quotas/requests/{req.pk}/approve/", {"note": "go ahead"})
    assert response.status_code == 302
    assert (BusinessLine.objects.get(name="llm").quota_gpus, QuotaChange.objects.count()) == (20, 1)
    after = client.get(f"/quotas/requests/{req.pk}/").content.decode()
    assert "Impact if approved" not in after and 'id="approve-form"' not in after
    assert "go ahead" in after and "14 → 20" in after
    history = client.get("/quotas/lines/llm/").content.decode()
    assert 'id="history"' in history and "14 → 20" in history and "5 → 6" in history
    assert "admin" in history and "Q3 pretraining" in history


def test_the_line_history_names_the_request_once_and_links_it(client, demo, req):
    """Page walk: the history's "Why" read "request #1 by lead takes effect: Q3 pretraining
    (request #1)": the request named twice; now its mention in the reason is the link."""
    client.force_login(demo["admin"])
    assert client.post(f"/quotas/requests/{req.pk}/approve/", {"note": "ok"}).status_code == 302
    page = client.get("/quotas/lines/llm/").content.decode()
    table = page[page.index('<table class="grid" id="history">') :]
    table = table[: table.index("</table>")]
    (why,) = re.findall(r"<td>([^<]*<a [^>]*>[^<]*</a>[^<]*)</td>", table)
    assert why == (
        f'<a href="/quotas/requests/{req.pk}/">request #{req.pk}</a> by lead takes effect: '
        "Q3 pretraining"
    )
    assert table.count(f"request #{req.pk}") == 1


def test_why_parts_split_a_reason_around_its_request_only():
    from quotas.views import why_parts

    assert why_parts("request #12 ended: previous contract restored", 12) == (
        "", "request #12", " ended: previous contract restored"
    )  # fmt: skip
    assert why_parts("request #123 by bob takes effect: x", 12) == (
        "request #123 by bob takes effect: x", "", ""
    )  # fmt: skip
    assert why_parts("set by hand", None) == ("set by hand", "", "")


def test_one_pending_gpu_is_one_gpu_on_the_impact(client, demo, req):
    """A line with one GPU asked by a waiting job read "Pending now: 1 GPUs." on the impact."""
    from quotas.models import Queue
    from scheduling.models import Job

    queue = Queue.objects.get(name="llm-core")
    Job.objects.create(name="w", owner=demo["lead"], queue=queue, tier=queue.tier, gpus=1)
    client.force_login(demo["admin"])
    page = html.unescape(client.get(f"/quotas/requests/{req.pk}/").content.decode())
    assert "Pending now: 1 GPU." in page


def test_history_and_requests_are_for_the_lines_members_and_admins(client, demo, req):
    client.force_login(demo["researcher2"])
    page = client.get("/quotas/lines/llm/").content.decode()
    assert 'id="history"' not in page and "Q3 pretraining" not in page
    assert "shown to its members and to cluster admins" in page
    assert 'id="contract"' in page, "contracts are public"
    client.force_login(demo["researcher"])
    member_page = client.get("/quotas/lines/llm/").content.decode()
    assert 'id="history"' in member_page and f"#{req.pk}<" in member_page
    assert "Request a new quota" not in member_page, "only the lead is offered the form"


def test_a_refused_decision_is_explained_on_the_page(client, demo):
    big = ask(demo["lead"], quota_gpus=30, guarantee_gpus=30)
    client.force_login(demo["admin"])
    page = client.get(f"/quotas/requests/{big.pk}/").content.decode()
    assert 'id="fit" class="error"' in page and "Does not fit" in page
    response = client.post(f"/quotas/requests/{big.pk}/approve/", {"note": "try"})
    assert response.status_code == 400
    assert "Does not fit: guarantees would total 36 GPUs" in response.content.decode()
    no_note = client.post(f"/quotas/requests/{big.pk}/reject/", {"reject-note": ""})
    assert no_note.status_code == 400 and "write a note" in no_note.content.decode()
    big.refresh_from_db()
    assert big.state == "pending"


def test_the_request_list_puts_pending_first_for_admins(client, demo, req):
    other = ask(demo["lead"], quota_gpus=16)
    client.force_login(demo["admin"])
    client.post(f"/quotas/requests/{other.pk}/reject/", {"reject-note": "no", "confirm": "1"})
    page = client.get("/quotas/requests/").content.decode()
    assert page.index(f"#{req.pk}<") < page.index("Decided") < page.index(f"#{other.pk}<")
    assert "Waiting for your decision" in page
    only_rejected = client.get("/quotas/requests/?state=rejected").content.decode()
    assert f"#{other.pk}<" in only_rejected and f"#{req.pk}<" not in only_rejected


@pytest.mark.parametrize("state", ["bogus", "Pending", "pending ", "<b>"])
def test_an_unknown_state_filter_is_a_400_naming_it_not_the_whole_list(client, demo, req, state):
    """``?state=bogus`` listed every request as if unfiltered: now the filter says why, with
    a 400 and nothing listed (as the audit page answers a bad filter)."""
    client.force_login(demo["admin"])
    assert f"#{req.pk}<" in client.get("/quotas/requests/?state=").content.decode(), "any"
    response = client.get("/quotas/requests/", {"state": state})
    body = response.content.decode()
    assert response.status_code == 400 and f"#{req.pk}<" not in body
    assert '<p class="error" role="alert" id="state-error">unknown state' in body
    assert escape(state) in body and "one of pending, approved" in body


def test_a_parameter_the_request_list_does_not_take_is_a_400_naming_it(client, demo, req):
    """``?status=pending`` (the filter is ``state``) listed every request as if filtered."""
    client.force_login(demo["admin"])
    response = client.get("/quotas/requests/?status=pending")
    body = html.unescape(response.content.decode())
    assert response.status_code == 400 and f"#{req.pk}<" not in response.content.decode()
    assert "this page has no filter “status”; it takes state" in body


def test_a_request_stored_with_a_year_1_start_is_shown_west_of_utc(client, demo, req):
    """Stored before its start was bounded (session 39): its pages were a 500 for every
    viewer whose zone cannot hold the year 1 (west of UTC); its start is written in UTC."""
    QuotaRequest.objects.filter(pk=req.pk).update(starts_at=datetime(1, 1, 1, tzinfo=UTC))
    client.force_login(demo["lead"])
    client.cookies["tz"] = "America/New_York"
    for url in ("/quotas/requests/", f"/quotas/requests/{req.pk}/", "/quotas/lines/llm/"):
        response = client.get(url)
        assert response.status_code == 200, url
    assert "0001-01-01 00:00 UTC" in client.get(f"/quotas/requests/{req.pk}/").content.decode()


def test_a_scheduled_request_says_when_it_takes_effect_in_the_viewers_zone(client, demo):
    """Page walk: a request with a future start read "Takes effect at
    2026-12-08T09:00:00+00:00." on its approval page, an ISO string in the sentence and in
    UTC, where its Period row above wrote the same instant in the viewer's zone."""
    starts = datetime(NEXT_YEAR, 1, 2, 9, 0, tzinfo=UTC)
    later = ask(demo["lead"], quota_gpus=20, starts_at=starts, ends_at=starts.replace(day=3))
    Profile.objects.filter(user=demo["admin"]).update(time_zone="Asia/Tokyo")
    client.force_login(demo["admin"])
    page = client.get(f"/quotas/requests/{later.pk}/").content.decode()
    assert f"Takes effect at {NEXT_YEAR}-01-02 18:00 JST." in page
    assert "T09:00:00" not in page
