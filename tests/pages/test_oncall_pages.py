"""The on-call console, rack map and node page: role checks on every page and POST, alerts
with their guides, node isolation with the blast radius first, residual cleaning, fault
drills, bad input refused with a clear message and nothing changed, bounded queries."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from core import audit, clock, timezones
from core.models import AuditRecord
from monitoring.guides import GUIDES, guide_for_alert
from monitoring.models import Alert
from monitoring.services import acknowledge_alert, raise_alert
from quotas.models import BusinessLine, Queue
from scheduling.cycle.context import shared_nodes_first
from scheduling.engine.inference_forecast import DAY_S, learn
from scheduling.models import Node
from scheduling.nodes.maintenance import create_window
from scheduling.nodes.selectors import InferenceForecast
from scheduling.nodes.services import inject_fault
from tests.drills import cycle, submit

pytestmark = pytest.mark.django_db

NODE = "r000-n01"
GET_PAGES = ["/oncall/", "/oncall/alerts/", "/oncall/rack-map/", "/oncall/rack-map/cells/",
             f"/oncall/nodes/{NODE}/", f"/oncall/nodes/?name={NODE}"]  # fmt: skip
NOT_ONCALL = ["researcher", "researcher2", "lead"]


@pytest.fixture
def alert(demo) -> Alert:
    return raise_alert("node_unhealthy", "critical", NODE, f"{NODE} reports gpu_failure")


def as_user(client, demo, username):
    client.force_login(demo[username])
    return client


def posts(alert_id: int) -> list[tuple[str, dict]]:
    return [
        (f"/oncall/alerts/{alert_id}/ack/", {}),
        (f"/oncall/alerts/{alert_id}/resolve/", {}),
        (
            f"/oncall/nodes/{NODE}/action/",
            {"action": "cordon", "reason": "disk check", "confirm": "1"},
        ),
        (f"/oncall/nodes/{NODE}/action/", {"action": "clean", "reason": "stale GPU memory"}),
        (f"/oncall/nodes/{NODE}/fault/", {"kind": "node_down"}),
    ]


def unchanged(alert: Alert) -> None:
    alert.refresh_from_db()
    assert alert.status == "open"
    assert Node.objects.get(name=NODE).state == "ready"
    assert not AuditRecord.objects.exists()


# -- role checks --------------------------------------------------------------------------


@pytest.mark.parametrize("path", GET_PAGES)
def test_anonymous_visitors_are_sent_to_login(client, demo, path):
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("path", GET_PAGES)
@pytest.mark.parametrize("username", NOT_ONCALL)
def test_researchers_and_leads_may_not_see_the_console(client, demo, path, username):
    assert as_user(client, demo, username).get(path).status_code == 403


@pytest.mark.parametrize("path", GET_PAGES)
@pytest.mark.parametrize("username", ["oncall", "admin"])
def test_oncall_and_admins_see_every_page(client, demo, path, username):
    response = as_user(client, demo, username).get(path)
    assert response.status_code == (302 if "?name=" in path else 200)


def test_anonymous_posts_change_nothing(client, alert):
    for path, body in posts(alert.pk):
        response = client.post(path, body)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    unchanged(alert)


@pytest.mark.parametrize("username", NOT_ONCALL)
def test_posts_of_researchers_and_leads_are_refused_and_change_nothing(client, demo, alert,
                                                                       username):  # fmt: skip
    as_user(client, demo, username)
    for path, body in posts(alert.pk):
        assert client.post(path, body).status_code == 403, path
    unchanged(alert)


@pytest.mark.parametrize("username", ["oncall", "admin"])
def test_oncall_and_admins_may_post(client, demo, alert, username):
    as_user(client, demo, username)
    statuses = [client.post(path, body).status_code for path, body in posts(alert.pk)]
    assert statuses == [302] * 5
    alert.refresh_from_db()
    assert alert.status == "resolved" and alert.resolved_by == demo[username]
    assert Node.objects.get(name=NODE).state == "cordoned"
    actions = set(AuditRecord.objects.values_list("action", flat=True))
    assert {"alert.ack", "alert.resolve", "node.cordon", "node.clean_residual",
            "simulator.fault"} <= actions  # fmt: skip


def test_forms_need_the_csrf_token(demo, alert):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(demo["oncall"])
    for path, body in posts(alert.pk):
        assert strict.post(path, body).status_code == 403
    unchanged(alert)
    page = strict.get("/oncall/").content.decode()
    assert page.count("csrfmiddlewaretoken") >= 2


def test_get_is_not_a_way_to_act(client, demo, alert):
    as_user(client, demo, "oncall")
    assert client.get(f"/oncall/alerts/{alert.pk}/ack/").status_code == 405
    assert client.get(f"/oncall/nodes/{NODE}/action/?action=cordon&reason=x").status_code == 405
    unchanged(alert)


# -- alerts -----------------------------------------------------------------------------


def test_alerts_are_listed_with_their_guide_and_buttons(client, demo, alert):
    raise_alert("quota_near_limit", "info", "llm", "line llm holds 14 of its 14 GPU quota")
    body = as_user(client, demo, "oncall").get("/oncall/").content.decode()
    assert f'id="alert-{alert.pk}"' in body and "reports gpu_failure" in body
    assert "CRITICAL" in body, "severity is written, not only coloured"
    assert "Troubleshooting: Unhealthy node" in body
    assert "Troubleshooting: Frequent quota alerts" in body
    # raised from 95% of the quota on, over it as well (page walk: "Quota Near Limit" over
    # a line holding 118% of its quota)
    assert '<strong class="alert-kind">Quota Near or Over Limit</strong>' in body
    assert f'action="/oncall/alerts/{alert.pk}/ack/"' in body
    assert f'href="/oncall/nodes/{NODE}/"' in body
    critical_first = body.index(f'id="alert-{alert.pk}"') < body.index("holds 14 of its")
    assert critical_first


def test_an_alert_raised_again_says_how_many_times_since_when(client, demo, alert):
    """Page walk: a repeated alert read "×151" beside "raised 02:51 JST", which nobody could
    read as "raised 151 times since 02:51"."""
    once = as_user(client, demo, "oncall").get("/oncall/").content.decode()
    assert re.search(rf"#{alert.pk} · raised \d{{4}}-\d\d-\d\d \d\d:\d\d UTC \(", once)
    for _ in range(150):
        raise_alert("node_unhealthy", "critical", NODE, f"{NODE} reports gpu_failure")
    again = client.get("/oncall/").content.decode()
    assert re.search(
        rf"#{alert.pk} · raised 151 times since \d{{4}}-\d\d-\d\d \d\d:\d\d UTC", again
    )
    assert "×" not in again.split(f'id="alert-{alert.pk}"')[1].split("</li>")[0]


def test_acknowledging_then_resolving_an_alert(client, demo, alert):
    as_user(client, demo, "oncall")
    response = client.post(f"/oncall/alerts/{alert.pk}/ack/", follow=True)
    assert response.redirect_chain[-1][0] == "/oncall/#alerts"
    assert f"Alert #{alert.pk} (node_unhealthy, {NODE}) acknowledged." in response.content.decode()
    alert.refresh_from_db()
    assert alert.status == "acknowledged" and alert.acknowledged_by == demo["oncall"]
    fragment = client.get("/oncall/alerts/").content.decode()
    assert f'id="ack-{alert.pk}"' not in fragment and f'id="resolve-{alert.pk}"' in fragment
    client.post(f"/oncall/alerts/{alert.pk}/resolve/")
    alert.refresh_from_db()
    assert alert.status == "resolved"
    assert f'id="alert-{alert.pk}"' not in client.get("/oncall/alerts/").content.decode()


def test_acting_twice_on_an_alert_is_refused_with_a_message(client, demo, alert):
    as_user(client, demo, "oncall")
    client.post(f"/oncall/alerts/{alert.pk}/ack/")
    response = client.post(f"/oncall/alerts/{alert.pk}/ack/")
    assert response.status_code == 400
    assert f"Alert #{alert.pk} was not changed: alert is already acknowledged" in (
        response.content.decode()
    )
    assert AuditRecord.objects.filter(action="alert.ack").count() == 1


def test_an_unknown_alert_is_refused_with_a_message(client, demo, alert):
    as_user(client, demo, "oncall")
    for action in ("ack", "resolve"):
        response = client.post(f"/oncall/alerts/999999/{action}/")
        assert response.status_code == 404
        assert "There is no alert #999999; nothing was changed." in response.content.decode()
    unchanged(alert)


def test_every_alert_kind_has_a_guide_and_every_guide_is_complete():
    for kind in Alert.Kind.values:
        assert guide_for_alert(kind) is not None, kind
    titles = {g.title for g in GUIDES}
    for wanted in ("Pending for hours", "A job was killed half-way", "Node idle but unschedulable",
                   "Urgent work keeps evicting the same jobs",
                   "Slow training from scattered placement", "Frequent quota alerts",
                   "Residual processes hold GPUs", "Unhealthy node"):  # fmt: skip
        assert wanted in titles
    for guide in GUIDES:
        assert guide.symptom and len(guide.causes) >= 2 and len(guide.first_actions) >= 2


def test_the_console_lists_every_guide(client, demo):
    body = as_user(client, demo, "oncall").get("/oncall/").content.decode()
    for guide in GUIDES:
        assert f'id="guide-{guide.slug}"' in body


# -- rack map ---------------------------------------------------------------------------


def cell(body: str, name: str) -> re.Match:
    match = re.search(
        rf'<a class="n k-(?P<status>[a-z]+)(?: (?P<mark>m-soon))?" href="/oncall/nodes/{name}/" '
        rf'data-n="{name}" '
        rf'title="(?P<title>[^"]*)" aria-label="(?P<label>[^"]*)">(?P<glyph>[^<]*)</a>', body
    )  # fmt: skip
    assert match, f"no cell for {name}"
    return match


def test_the_rack_map_shows_every_node_with_a_glyph_and_a_sentence(client, demo, api):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    submit(api("researcher"), name="half", queue="llm-core", gpus=4)
    cycle(api("admin"))
    Node.objects.filter(name="r000-n03").update(state="cordoned", state_reason="maintenance")
    body = as_user(client, demo, "oncall").get("/oncall/").content.decode()
    assert body.count('class="n k-') - 9 == Node.objects.count(), "one cell per node (+ legend)"
    cordoned = cell(body, "r000-n03")
    assert cordoned["status"] == "cordoned" and cordoned["glyph"] == "C"
    assert cordoned["label"] == "r000-n03: cordoned, 0/8 GPUs used" == cordoned["title"]
    busy = [cell(body, n.name) for n in Node.objects.exclude(name="r000-n03")]
    assert sorted(m["glyph"] for m in busy) == ["0", "0", "4"]
    assert any(m["label"].endswith("ready, partly used, 4/8 GPUs used") for m in busy)
    assert 'aria-label="rack r000"' in body
    assert "cordoned: no new work" in body, "the legend explains letters and colours"


def test_the_rack_map_alone_and_its_live_cells(client, demo):
    Node.objects.filter(name=NODE).update(state="draining")
    as_user(client, demo, "admin")
    assert cell(client.get("/oncall/rack-map/").content.decode(), NODE)["glyph"] == "D"
    data = client.get("/oncall/rack-map/cells/").json()
    assert [NODE, "draining", "D", f"{NODE}: draining, 0/8 GPUs used", ""] in data["cells"]
    assert data["counts"]["draining"] == 1 and data["counts"]["idle"] == 3
    assert data["racks"] == {"r000": "4 nodes, 1 out of the pool"}
    one = client.get(f"/oncall/rack-map/cells/?node={NODE}").json()
    assert [c[0] for c in one["cells"]] == [NODE]


def test_a_node_with_maintenance_scheduled_is_marked_with_its_time_and_reason(client, demo):
    """The on-call engineer sees on the map which nodes leave soon, not only those already
    out: a dashed outline (whatever the node's status) and, in its sentence, when (in the
    viewer's zone, the cluster clock's instant) and why."""
    start = clock.now().replace(microsecond=0) + timedelta(hours=2)
    create_window(demo["oncall"], nodes=[NODE], starts_at=start.isoformat(), reason="PDU swap")
    user = demo["oncall"]
    user.profile.time_zone = "Asia/Tokyo"
    user.profile.save()
    as_user(client, demo, "oncall")
    when = timezones.written(start, timezones.zone_named("Asia/Tokyo"))
    assert when.endswith(" JST")
    body = client.get("/oncall/").content.decode()
    marked = cell(body, NODE)
    assert (marked["status"], marked["mark"]) == ("idle", "m-soon")
    assert (
        marked["label"] == f"{NODE}: ready, idle, 0/8 GPUs used; maintenance from {when}: PDU swap"
    )
    assert cell(body, "r000-n00")["mark"] is None
    assert '<span id="rm-maintenance-soon">1</span>' in body, "the legend counts them"
    data = client.get("/oncall/rack-map/cells/").json()
    assert [NODE, "idle", "0", marked["label"], "m-soon"] in data["cells"]
    node_page = client.get(f"/oncall/nodes/{NODE}/").content.decode()
    assert f'<p id="node-label" aria-live="polite">{marked["label"]}</p>' in node_page, (
        "the node page says the same sentence"
    )
    assert 'class="n k-idle m-soon big-cell"' in node_page
    assert data["maintenance_soon"] == 1


@pytest.mark.parametrize("name", ["r999-n99", "", " " + NODE])
def test_the_live_cells_of_a_node_that_is_not_there_are_a_400_not_an_empty_map(client, demo, name):
    """``?node=<name>`` of no node answered a map of no cells (zero nodes, zero GPUs), as if
    the node were gone; an empty ``?node=`` answered every cell."""
    as_user(client, demo, "oncall")
    response = client.get("/oncall/rack-map/cells/", {"node": name})
    assert response.status_code == 400
    assert response.json() == {"errors": {"node": [f"there is no node named “{name}”"]}}


def test_the_go_to_node_box(client, demo):
    as_user(client, demo, "oncall")
    response = client.get(f"/oncall/nodes/?name={NODE}")
    assert response.status_code == 302 and response["Location"] == f"/oncall/nodes/{NODE}/"
    missing = client.get("/oncall/nodes/?name=r999-n99")
    assert missing.status_code == 404 and "There is no node named “r999-n99”" in (
        missing.content.decode()
    )
    body = client.get("/oncall/").content.decode()
    assert '<label for="id_node_name">Go to node</label>' in body


# -- node page and actions ------------------------------------------------------------


def test_the_node_page_shows_its_jobs_and_the_blast_radius_before_the_forms(client, demo, api):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    me = api("researcher")
    for i in range(4):
        submit(me, name=f"big{i}", queue="llm-core", gpus=8)
    submit(me, name="exp", queue="llm-experiment", gpus=8)
    cycle(api("admin"))
    node = Node.objects.filter(allocations__isnull=False).distinct().first()
    body = as_user(client, demo, "oncall").get(f"/oncall/nodes/{node.name}/").content.decode()
    job = node.allocations.first().job
    assert f"#{job.pk} {job.name}" in body
    assert (
        "1 job</strong> in <strong>1 queue</strong> runs here" in body
        and "llm-core (8 GPUs)" in body
    )
    assert body.index('id="blast-radius"') < body.index('id="node-action-form"')
    assert f"{node.name}: ready, full, 8/8 GPUs used" in body
    # labels on every input; only applicable buttons
    assert 'for="id_reason"' in body and 'for="id_kind"' in body
    assert 'value="cordon"' in body and 'value="drain"' in body and 'value="uncordon"' not in body


def test_the_node_page_counts_gpus_serving_inference_as_not_free(client, demo):
    Node.objects.filter(name="r000-n01").update(inference=True, inference_gpus=3,
                                                residual_gpus=1)  # fmt: skip
    page = as_user(client, demo, "oncall")
    body = page.get("/oncall/nodes/r000-n01/").content.decode()
    assert re.search(r'id="node-gpus">0 used, 4 free, .*>1</span> held by residual processes, '
                     r'<span id="node-inference">3</span> serving online inference, of 8', body)  # fmt: skip
    # the status line and the rack map's cell say the same (before, they left inference out)
    said = "r000-n01: ready, GPUs held by residual processes, 0/8 GPUs used, 3 serving inference"
    assert said in body
    rack_map = page.get("/oncall/rack-map/").content.decode()
    assert said in rack_map
    assert '<strong id="rm-gpus-inference">3</strong> serving online inference' in rack_map
    assert page.get("/oncall/rack-map/cells/").json()["gpus_inference"] == 3
    plain = page.get("/oncall/nodes/r000-n02/").content.decode()
    assert 'id="node-inference"' not in plain and "0 used, 8 free" in plain


def test_the_node_page_does_not_call_the_gpus_of_a_node_out_of_the_pool_free(client, demo):
    """Page walk: an isolated node read "0 used, 8 free", while no job may use them."""
    Node.objects.filter(name="r000-n02").update(state="unhealthy", health="down")
    body = as_user(client, demo, "oncall").get("/oncall/nodes/r000-n02/").content.decode()
    assert 'id="node-gpus">0 used, 8 idle, out of the pool (unhealthy), ' in body


def test_the_node_pages_note_on_its_buttons_reads_as_english(client, demo):
    """Page walk: an isolated node's page said "the buttons are those that apply to a
    unhealthy node"."""
    Node.objects.filter(name="r000-n01").update(state="unhealthy", health="gpu_failure")
    page = as_user(client, demo, "oncall")
    body = page.get("/oncall/nodes/r000-n01/").content.decode()
    assert "apply to an unhealthy node." in body and "a unhealthy" not in body
    assert "apply to a ready node." in page.get("/oncall/nodes/r000-n02/").content.decode()


@pytest.mark.parametrize(
    ("health", "detail", "shown"),
    [
        ("gpu_failure", "GPU reports uncorrectable ECC / Xid errors",
         "GPU failure: GPU reports uncorrectable ECC / Xid errors"),
        ("rdma_degraded", "packet loss on the RDMA fabric",
         "RDMA degraded: packet loss on the RDMA fabric"),
        ("down", "no heartbeat from the node", "Down: no heartbeat from the node"),
        ("ok", "", "OK"),
    ],
)  # fmt: skip
def test_the_node_pages_health_is_in_words_with_its_detail(client, demo, health, detail, shown):
    """Page walk: "Health" read the code, ``gpu_failure: GPU reports ...``."""
    Node.objects.filter(name=NODE).update(health=health, health_detail=detail)
    body = as_user(client, demo, "oncall").get(f"/oncall/nodes/{NODE}/").content.decode()
    assert f'<dd id="node-health">{shown}</dd>' in body


def test_an_unhealthy_nodes_sentence_names_its_health_in_the_same_words(client, demo):
    """The node page's status line and its rack-map cell read "unhealthy (GPU failure)", as
    its Health row does, not the code's "unhealthy (gpu failure)"."""
    Node.objects.filter(name=NODE).update(state="unhealthy", health="rdma_degraded")
    page = as_user(client, demo, "oncall")
    said = f"{NODE}: unhealthy (RDMA degraded), 0/8 GPUs used"
    assert (
        f'<p id="node-label" aria-live="polite">{said}</p>'
        in page.get(f"/oncall/nodes/{NODE}/").content.decode()
    )
    assert f'aria-label="{said}"' in page.get("/oncall/rack-map/").content.decode()


def test_the_node_pages_recent_changes_say_what_was_done_in_words(client, demo):
    """Page walk: "Recent changes" read the audit codes ("simulator.fault", "node.isolate")
    and a drill's reason read the fault's kind ("gpu_failure")."""
    node = Node.objects.get(name=NODE)
    with clock.pinned(datetime(2030, 1, 7, 9, 10, tzinfo=UTC)):
        audit.record(demo["oncall"], "simulator.fault", node, reason="gpu_failure",
                     after={"fault": "gpu_failure"})  # fmt: skip
    with clock.pinned(datetime(2030, 1, 7, 9, 20, tzinfo=UTC)):
        audit.record(
            None, "node.isolate", node, reason="isolated automatically: GPU reports errors"
        )
    with clock.pinned(datetime(2030, 1, 7, 9, 30, tzinfo=UTC)):
        audit.record(demo["oncall"], "node.uncordon", node, reason="repaired")
        audit.record(demo["oncall"], "node.made_up", node, reason="kept as is")
    body = as_user(client, demo, "oncall").get(f"/oncall/nodes/{NODE}/").content.decode()
    table = body[body.index('<section aria-labelledby="history-h"') :]
    cells = re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td></tr>",
                       table[: table.index("</table>")])  # fmt: skip
    assert cells == [
        ("oncall", "node.made_up", "kept as is"),
        ("oncall", "Uncordoned", "repaired"),
        ("system", "Isolated", "isolated automatically: GPU reports errors"),
        ("oncall", "Fault injected (drill)", "GPU failure (uncorrectable ECC / Xid errors)"),
    ]


def _forecast_text(page, name: str) -> str:
    body = page.get(f"/oncall/nodes/{name}/").content.decode()
    found = re.search(r'id="node-forecast">(.*?)</dd>', body, re.S)
    return re.sub(r"<[^>]+>|\s+", " ", found.group(1)).strip() if found else ""


def test_the_node_page_tells_what_the_inference_forecast_has_learnt(client, demo):
    """A shared node's page says whether its forecast is learnt, since when (a cluster
    time, never an epoch) and what inference held hour by hour (#19); a node without
    inference has no such line."""
    now = clock.now().timestamp()
    page = as_user(client, demo, "oncall")
    Node.objects.filter(name=NODE).update(inference=True, inference_gpus=2, inference_profile={})
    assert _forecast_text(page, NODE).startswith("nothing learnt yet")

    since = now - 3600.0
    learning = learn(learn({}, since, 2), now, 5)
    Node.objects.filter(name=NODE).update(inference_profile=learning)
    text = _forecast_text(page, NODE)
    assert text.startswith(f"learning since {written(since)}, every hour of the day seen at "
                           f"{written(since + DAY_S)}, when single-node jobs start to come here "
                           "first.")  # fmt: skip
    assert "Inference held at most (hours in UTC, today or yesterday): 00:00–" in text
    assert re.search(r"\b5 GPUs\b", text) and not re.search(r"\d{9,}", text)

    since = now - DAY_S - 60.0
    Node.objects.filter(name=NODE).update(inference_profile={**learning, "since": since})
    text = _forecast_text(page, NODE)
    assert text.startswith(f"learnt hour by hour since {written(since)}: training takes only")
    assert "a single-node job comes here before it breaks a node without inference" in text
    assert _forecast_text(page, "r000-n02") == ""


def test_the_forecast_line_promises_shared_nodes_first_only_when_the_loop_does_it(
    client, demo, monkeypatch
):
    assert shared_nodes_first() is True  # the live loop's preset
    monkeypatch.setattr("monitoring.views.shared_nodes_first", lambda: False)
    now = clock.now().timestamp()
    page = as_user(client, demo, "oncall")
    learnt = {**learn({}, now, 2), "since": now - DAY_S - 60.0}
    Node.objects.filter(name=NODE).update(inference=True, inference_profile=learnt)
    text = _forecast_text(page, NODE)
    assert text.startswith("learnt hour by hour since") and "comes here" not in text
    Node.objects.filter(name=NODE).update(inference_profile={**learnt, "since": now - 60.0})
    assert "come here first" not in _forecast_text(page, NODE)


def written(ts: float) -> str:
    return timezones.written(datetime.fromtimestamp(ts, UTC), UTC, seconds=False)


def test_forecast_spans_group_equal_hours():
    peaks = (1,) * 6 + (4,) * 12 + (2,) * 6
    fc = InferenceForecast(peaks=peaks, since=None, learnt=False)
    assert fc.spans() == [("00:00", "06:00", 1), ("06:00", "18:00", 4), ("18:00", "24:00", 2)]
    assert InferenceForecast((), None, False).spans() == []
    # Tokyo (UTC+9): UTC 18:00-24:00 is 03:00-09:00 there, listed from Tokyo's midnight.
    assert fc.spans(9 * 60) == [("00:00", "03:00", 4), ("03:00", "09:00", 2),
                                ("09:00", "15:00", 1), ("15:00", "24:00", 4)]  # fmt: skip
    # New York in winter (UTC-5), and India (UTC+5:30): runs start on the half hour.
    assert fc.spans(-5 * 60) == [("00:00", "01:00", 1), ("01:00", "13:00", 4),
                                 ("13:00", "19:00", 2), ("19:00", "24:00", 1)]  # fmt: skip
    assert fc.spans(330) == [("00:30", "05:30", 2), ("05:30", "11:30", 1),
                             ("11:30", "23:30", 4), ("23:30", "00:30", 2)]  # fmt: skip


def test_the_forecast_hours_are_the_viewers(client, demo):
    """The forecast's hours are written in the viewer's zone, named, as every other time on
    the page: a person in Tokyo does not convert UTC hours."""
    from core.models import Profile

    Profile.objects.filter(user=demo["oncall"]).update(time_zone="Asia/Tokyo")
    now = clock.now().timestamp()
    hour = int(now // 3600) % 24
    Node.objects.filter(name=NODE).update(
        inference=True, inference_gpus=2, inference_profile=learn({}, now, 6)
    )
    text = _forecast_text(as_user(client, demo, "oncall"), NODE)
    tokyo = (hour + 9) % 24
    assert "Inference held at most (hours in JST, today or yesterday): " in text
    assert f"{tokyo:02d}:00–{tokyo + 1:02d}:00 6 GPUs" in text


def test_cordon_drain_and_uncordon_from_the_node_page(client, demo):
    as_user(client, demo, "oncall")
    url = f"/oncall/nodes/{NODE}/action/"
    response = client.post(
        url, {"action": "cordon", "reason": "fan noise", "confirm": "1"}, follow=True
    )  # confirmed (the first step: tests/pages/test_confirmations.py)
    assert response.redirect_chain[-1][0] == f"/oncall/nodes/{NODE}/"
    body = response.content.decode()
    assert f"{NODE} cordoned: no new work lands on it" in body
    assert 'value="uncordon"' in body and 'value="cordon"' not in body
    node = Node.objects.get(name=NODE)
    assert node.state == "cordoned" and node.state_reason == "fan noise"
    client.post(url, {"action": "drain", "reason": "move jobs off", "confirm": "1"})
    assert Node.objects.get(name=NODE).state == "draining"
    client.post(url, {"action": "uncordon", "reason": "fixed"})
    assert Node.objects.get(name=NODE).state == "ready"
    record = AuditRecord.objects.get(action="node.cordon")
    assert record.actor == demo["oncall"] and record.reason == "fan noise"
    history = client.get(f"/oncall/nodes/{NODE}/").content.decode()
    assert "<td>Uncordoned</td>" in history and "fan noise" in history


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_missing_reason_is_refused_and_nothing_changes(client, demo, reason):
    as_user(client, demo, "oncall")
    response = client.post(f"/oncall/nodes/{NODE}/action/", {"action": "cordon", "reason": reason})
    assert response.status_code == 400
    body = response.content.decode()
    assert "say why (it is shown to users and kept in the audit log)" in body
    assert 'aria-invalid="true"' in body
    assert Node.objects.get(name=NODE).state == "ready" and not AuditRecord.objects.exists()


def test_an_overlong_reason_or_unknown_action_is_refused(client, demo):
    as_user(client, demo, "oncall")
    url = f"/oncall/nodes/{NODE}/action/"
    long = client.post(url, {"action": "cordon", "reason": "x" * 301})
    assert long.status_code == 400 and "at most 300 characters" in long.content.decode()
    bad = client.post(url, {"action": "reboot", "reason": "why not"})
    assert bad.status_code == 400 and "unknown action reboot" in bad.content.decode()
    none = client.post(url, {"reason": "forgot the button"})
    assert none.status_code == 400 and "press one of the action buttons" in none.content.decode()
    assert Node.objects.get(name=NODE).state == "ready" and not AuditRecord.objects.exists()


def test_an_impossible_transition_is_refused_with_the_services_message(client, demo):
    as_user(client, demo, "oncall")
    response = client.post(f"/oncall/nodes/{NODE}/action/",
                           {"action": "uncordon", "reason": "already fine"})  # fmt: skip
    assert response.status_code == 400
    assert f"{NODE} is ready; cannot uncordon it" in response.content.decode()
    assert not AuditRecord.objects.exists()


def test_an_unknown_node_is_refused_with_a_message(client, demo):
    as_user(client, demo, "oncall")
    for path, body in [("/oncall/nodes/r999-n99/", None),
                       ("/oncall/nodes/r999-n99/action/", {"action": "cordon", "reason": "x"}),
                       ("/oncall/nodes/r999-n99/fault/", {"kind": "node_down"})]:  # fmt: skip
        response = client.post(path, body) if body else client.get(path)
        assert response.status_code == 404
        assert "There is no node named “r999-n99”; nothing was changed." in (
            response.content.decode()
        )
    assert not AuditRecord.objects.exists()


def test_clean_residual_processes_runs_a_sweep_now_and_is_audited(client, demo):
    inject_fault(demo["admin"], "residual_process", NODE)
    as_user(client, demo, "oncall")
    response = client.post(f"/oncall/nodes/{NODE}/action/",
                           {"action": "clean", "reason": "GPU memory held"}, follow=True)  # fmt: skip
    body = response.content.decode()
    assert "residual processes were found and killed" in body
    alert = Alert.objects.get(kind="residual_process", subject=NODE)
    assert "returned to the pool" in alert.message
    record = AuditRecord.objects.get(action="node.clean_residual")
    assert record.reason == "GPU memory held" and record.after["alert"] == alert.pk
    assert record.after["residual_gpus"] == 0 and record.actor == demo["oncall"]
    again = client.post(f"/oncall/nodes/{NODE}/action/",
                        {"action": "clean", "reason": "check again"}, follow=True)  # fmt: skip
    assert "no residual process was found on it" in again.content.decode()


def test_clean_needs_a_reason_too(client, demo):
    as_user(client, demo, "oncall")
    response = client.post(f"/oncall/nodes/{NODE}/action/", {"action": "clean", "reason": ""})
    assert response.status_code == 400 and not AuditRecord.objects.exists()


def test_a_fault_drill_is_injected_and_the_next_cycle_isolates_the_node(client, demo, api):
    as_user(client, demo, "oncall")
    response = client.post(f"/oncall/nodes/{NODE}/fault/", {"kind": "gpu_failure"}, follow=True)
    assert "Drill: GPU failure (uncorrectable ECC / Xid errors) injected on" in (
        response.content.decode()
    )
    assert AuditRecord.objects.get(action="simulator.fault").reason == "gpu_failure"
    cycle(api("admin"))
    assert Node.objects.get(name=NODE).state == "unhealthy"
    body = client.get("/oncall/").content.decode()
    assert cell(body, NODE)["glyph"] == "U"
    assert "Troubleshooting: Unhealthy node" in body


def test_a_bad_fault_kind_is_refused(client, demo):
    as_user(client, demo, "oncall")
    response = client.post(f"/oncall/nodes/{NODE}/fault/", {"kind": "meteor"})
    assert response.status_code == 400
    assert "Select a valid choice. meteor is not one of the available choices." in (
        response.content.decode()
    )
    assert not AuditRecord.objects.exists()


def test_fault_drills_are_offered_only_on_the_simulator(client, demo, settings):
    as_user(client, demo, "oncall")
    assert 'id="fault-form"' in client.get(f"/oncall/nodes/{NODE}/").content.decode()
    settings.SCHEDULING_BACKEND = "slurm"
    assert 'id="fault-form"' not in client.get(f"/oncall/nodes/{NODE}/").content.decode()
    response = client.post(f"/oncall/nodes/{NODE}/fault/", {"kind": "node_down"})
    assert response.status_code == 400
    assert "only available with the simulator backend" in response.content.decode()


# -- queries ----------------------------------------------------------------------------


def test_the_pages_query_count_does_not_grow_with_the_cluster(client, demo, api,
                                                              django_assert_max_num_queries):  # fmt: skip
    from django.core.management import call_command

    as_user(client, demo, "oncall")
    # the console and the node page: one more for scheduled maintenance, one more again for
    # the windows' nodes when there are some; the rack map (on the console too): one for the
    # nodes' next maintenance (its marks)
    pages = {"/oncall/": 10, "/oncall/rack-map/": 6, "/oncall/rack-map/cells/": 6,
             "/oncall/alerts/": 6, f"/oncall/nodes/{NODE}/": 10}  # fmt: skip
    for path, bound in pages.items():
        with django_assert_max_num_queries(bound):
            assert client.get(path).status_code == 200
    call_command("seed_demo", nodes=160, nodes_per_rack=32, uniform=True, no_workload=True,
                 stdout=None)  # fmt: skip
    BusinessLine.objects.update(quota_gpus=10_000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    me = api("researcher")
    for i in range(12):
        submit(me, name=f"j{i}", queue="llm-core", gpus=4)
    cycle(api("admin"))
    for i in range(30):
        raised = raise_alert("residual_process", "warning", f"r000-n{i:02d}", "2 GPU(s) held")
        if i % 2:
            acknowledge_alert(demo["admin" if i % 4 == 1 else "oncall"], raised.pk)
    for i in range(3):
        client.post(
            f"/oncall/nodes/r000-n{i:02d}/action/",
            {"action": "cordon", "reason": "r", "confirm": "1"},
        )
    for i in range(5):  # scheduled maintenance, on the node of the page too
        create_window(demo["oncall"], nodes=[NODE, f"r001-n{i:02d}"], reason="fw",
                      starts_at=clock.now() + timedelta(hours=2 + 2 * i),
                      ends_at=clock.now() + timedelta(hours=3 + 2 * i))  # fmt: skip
    for path, bound in pages.items():
        with django_assert_max_num_queries(bound):
            assert client.get(path).status_code == 200
