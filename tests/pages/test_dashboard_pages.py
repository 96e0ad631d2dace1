"""The dashboard (admins and team leads): role checks, server-rendered figures, the live JSON
snapshot, the time window, the vendored Plotly and a bounded number of queries."""

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils.html import escape

from monitoring import charts
from monitoring.models import MetricSample
from quotas.models import Queue
from scheduling.clock import cluster_now
from scheduling.models import Job, Node, SchedulingCycle

pytestmark = pytest.mark.django_db

PAGES = ["/dashboard/", "/dashboard/data/"]


def add_samples(n: int, *, every=timedelta(minutes=1), end=None, utilization=0.5) -> None:
    end = end or cluster_now()
    queues = {
        str(q.pk): {"name": q.name, "line": q.business_line.name, "used": 8,
                    "pending_jobs": 1, "evicted_gpu_s": 3600.0, "evictions": 2,
                    "eviction_ratio": 0.25 if q.name == "llm-experiment" else 0.01}
        for q in Queue.objects.select_related("business_line")
    }  # fmt: skip
    MetricSample.objects.bulk_create(
        MetricSample(
            at=end - every * (n - 1 - i), gpus_total=32, gpus_healthy=32, gpus_allocated=16,
            utilization=utilization + i / (10 * n), fragmentation_gpus=i % 5, pending_jobs=3,
            pending_by_reason={"QUOTA_EXCEEDED": 3}, per_line={}, per_queue=queues,
        )
        for i in range(n)
    )  # fmt: skip


def embedded(response) -> dict:
    body = response.content.decode()
    match = re.search(r'<script id="dashboard-data" type="application/json">(.*?)</script>', body,
                      re.S)  # fmt: skip
    assert match, "the figures are embedded with json_script"
    return json.loads(match.group(1))


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_visitors_are_sent_to_login(client, demo, path):
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize(("username", "status"),
                         [("researcher", 403), ("researcher2", 403), ("oncall", 403),
                          ("lead", 200), ("admin", 200)])  # fmt: skip
def test_only_admins_and_team_leads_see_the_dashboard(client, demo, path, username, status):
    client.force_login(demo[username])
    assert client.get(path).status_code == status


def test_the_dashboard_embeds_every_figure_and_loads_plotly_locally(client, demo):
    add_samples(30)
    client.force_login(demo["admin"])
    response = client.get("/dashboard/")
    body = response.content.decode()
    data = embedded(response)
    assert set(data["figures"]) == {
        "utilization",
        "lines",
        "pending",
        "waiting",
        "eviction",
        "fragmentation",
        "idle",
    }
    for key in data["figures"]:
        assert f'id="chart-{key}"' in body
        assert escape(data["figures"][key]["summary"]) in body, "each chart has a text alternative"
    # the partial bundle and the page's script, deferred (static/vendor/README.md)
    assert '<script defer src="/static/vendor/plotly-partial.min.js">' in body
    # nothing loads from another origin (not "cdn" anywhere: a CSRF token may hold it)
    sources = re.findall(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="([^"]*)"', body)
    assert sources and all(u.startswith("/") and not u.startswith("//") for u in sources), sources
    assert "cdn.plot.ly" not in body
    assert '<script defer src="/static/js/pages/dashboard.js">' in body
    assert 'data-url="/dashboard/data/?window=24h"' in body


def test_the_figures_are_the_chart_functions_applied_to_the_samples(client, demo):
    add_samples(3, utilization=0.6)
    client.force_login(demo["lead"])
    data = embedded(client.get("/dashboard/"))
    samples = list(MetricSample.objects.order_by("at").values_list("at", "utilization"))
    expected = charts.utilization_figure(samples)
    # the samples, then the live reading the tile shows (tests/monitoring/test_dashboard_windows.py)
    trace = data["figures"]["utilization"]["data"][0]
    assert (
        trace["x"][:-1] == expected["data"][0]["x"] and trace["y"][:-1] == expected["data"][0]["y"]
    )
    eviction = data["figures"]["eviction"]["data"][0]
    ratios = dict(zip(eviction["x"], eviction["y"], strict=True))
    assert ratios["llm-experiment"] == 25.0 and ratios["llm-core"] == 1.0
    assert "llm-experiment 25.0%" in data["figures"]["eviction"]["summary"]
    lines = data["figures"]["lines"]["data"]
    assert lines[0]["x"] == ["Large language models", "Multimodal", "Search & Recommendation"]
    assert data["tiles"]["gpus_total"] == "32" and data["tiles"]["utilization"] == "0.0%"


def test_pending_reasons_come_from_the_latest_cycle(client, demo):
    """The codes the latest cycle gave the pending jobs, counted live (#15: the same counts
    as the API and /metrics; NEW: submitted since that cycle)."""
    add_samples(2)
    SchedulingCycle.objects.create(
        kind="cycle", cluster_time=cluster_now(), duration_ms=5, pending=7,
        pending_by_reason={"PRIORITY": 4, "TOPOLOGY": 3},
    )  # fmt: skip
    SchedulingCycle.objects.create(kind="sweep", cluster_time=cluster_now(), duration_ms=1)
    queue = Queue.objects.get(name="llm-core")
    Job.objects.bulk_create(
        Job(name=f"w{i}", owner=demo["researcher"], queue=queue, tier="core", gpus=8,
            pending_code=code)
        for i, code in enumerate(["PRIORITY"] * 4 + ["TOPOLOGY"] * 3 + [""])
    )  # fmt: skip
    client.force_login(demo["admin"])
    data = client.get("/dashboard/data/").json()
    trace = data["figures"]["pending"]["data"][0]
    assert trace["x"] == [4, 3, 1] and data["tiles"]["pending_jobs"] == "8"
    api = client.get("/api/v1/metrics/summary/").json()
    assert api["pending_by_reason"] == {"PRIORITY": 4, "TOPOLOGY": 3, "NEW": 1}
    assert data["as_of"]["cycle"] == SchedulingCycle.objects.get(kind="cycle").pk


def test_the_pending_caption_words_each_reason_as_the_bars_do(client, demo):
    """The text under "Pending by reason" counts in the bars' words ("quota full"), never a
    bare code ("QUOTA_EXCEEDED"), with thousands separators."""
    queue = Queue.objects.get(name="llm-core")
    codes = ["QUOTA_EXCEEDED"] * 1_068 + ["TOPOLOGY"] * 2
    Job.objects.bulk_create(
        Job(name=f"w{i}", owner=demo["researcher"], queue=queue, tier="core", gpus=8,
            pending_code=code)
        for i, code in enumerate(codes)
    )  # fmt: skip
    client.force_login(demo["admin"])
    body = client.get("/dashboard/").content.decode()
    caption = re.search(
        r'<figcaption id="summary-pending">.*?<span class="summary-text">(.*?)</span>', body, re.S
    )
    assert caption, "the bars have a caption"
    assert caption.group(1) == "1,070 jobs pending: 1,068 quota full, 2 topology (scattered)"
    assert "QUOTA_EXCEEDED" not in caption.group(1)


def test_the_live_snapshot_changes_when_the_cluster_does(client, demo):
    client.force_login(demo["admin"])
    before = client.get("/dashboard/data/").json()
    assert before["as_of"]["sample"] is None
    assert (
        "no rollup sample in the last 24 hours yet" in before["figures"]["utilization"]["summary"]
    )
    Node.objects.filter(name="r000-n00").update(state="cordoned")
    add_samples(5)
    after = client.get("/dashboard/data/").json()
    assert after["as_of"]["sample"] is not None
    assert len(after["figures"]["utilization"]["data"][0]["x"]) == 5 + 1  # and now
    assert after["tiles"]["nodes_out"] == "1" and after["tiles"]["gpus_healthy"] == "24"


def test_the_tiles_say_one_job_and_one_node_in_the_singular(client, demo):
    """Page walk: with one job waiting and one node out the tiles read "1 jobs pending" and
    "1 nodes out of the pool"; the words come with the counts, so the live rewrite swaps
    them too (static/js/pages/dashboard.js writes every tile)."""
    client.force_login(demo["admin"])
    Node.objects.filter(name="r000-n00").update(state="cordoned")
    Job.objects.create(name="w", owner=demo["researcher"], queue=Queue.objects.get(name="llm-core"),
                       tier="core", gpus=8, pending_code="PRIORITY")  # fmt: skip
    add_samples(1, utilization=0.1)  # fragmentation 0 GPUs at that sample
    body = client.get("/dashboard/").content.decode()
    assert '<span id="tile-pending_jobs_words">job pending</span>' in body
    assert '<span id="tile-nodes_out_words">node out of the pool</span>' in body
    assert "fragmented free GPUs at the latest sample" in body
    Node.objects.filter(name="r000-n01").update(state="cordoned")
    tiles = client.get("/dashboard/data/").json()["tiles"]
    assert (tiles["nodes_out"], tiles["nodes_out_words"]) == ("2", "nodes out of the pool")


def test_the_time_window_limits_the_series(client, demo):
    add_samples(48, every=timedelta(minutes=30))  # 23.5 hours
    client.force_login(demo["admin"])
    one_hour = client.get("/dashboard/data/?window=1h").json()
    # the window ends now, a moment after the last sample: -30 and 0 min, then now
    assert len(one_hour["figures"]["utilization"]["data"][0]["x"]) == 3
    day = client.get("/dashboard/data/?window=24h").json()
    assert len(day["figures"]["utilization"]["data"][0]["x"]) == 48 + 1
    assert client.get("/dashboard/data/").json()["window"] == "24h", "absent: the default"
    page = client.get("/dashboard/?window=6h").content.decode()
    assert 'for="id_window"' in page and '<option value="6h" selected>' in page


@pytest.mark.parametrize("window", ["junk", "<script>", "", "24H", "1h ", "30d"])
def test_an_unknown_window_is_a_400_naming_the_choices_not_the_24_hours(client, demo, window):
    """``?window=junk`` drew the last 24 hours as if asked for them (``WINDOWS.get(window,
    default)``): the JSON in the API's error envelope, the page with the form's error."""
    add_samples(3)
    client.force_login(demo["admin"])
    data = client.get("/dashboard/data/", {"window": window})
    assert data.status_code == 400
    assert set(data.json()) == {"errors"} and list(data.json()["errors"]) == ["window"]
    assert "one of 1h, 6h, 24h, 7d" in data.json()["errors"]["window"][0]
    page = client.get("/dashboard/", {"window": window})
    body = page.content.decode()
    assert page.status_code == 400
    error = re.search(r'<p class="error" role="alert" id="window-error">(.*?)</p>', body, re.S)
    assert error and "one of 1h, 6h, 24h, 7d" in error.group(1)
    assert escape(window) in error.group(1) or not window, "it names what was sent, escaped"
    assert 'id="dashboard-data"' not in body and 'id="dash-tiles"' not in body, "nothing drawn"
    assert 'for="id_window"' in body and '<option value="24h" selected>' in body


def test_the_dashboard_query_count_does_not_grow_with_the_cluster(
    client, demo, django_assert_max_num_queries
):
    from django.core.management import call_command

    add_samples(500)
    client.force_login(demo["admin"])
    with django_assert_max_num_queries(17):
        assert client.get("/dashboard/").status_code == 200
    call_command("seed_demo", nodes=96, nodes_per_rack=32, uniform=True, no_workload=True,
                 stdout=None)  # fmt: skip
    owner = demo["researcher"]
    queue = Queue.objects.get(name="llm-core")
    Job.objects.bulk_create(
        Job(name=f"p{i}", owner=owner, queue=queue, tier="core", gpus=8) for i in range(300)
    )
    with django_assert_max_num_queries(17):
        assert client.get("/dashboard/").status_code == 200
    with django_assert_max_num_queries(16):
        assert client.get("/dashboard/data/").status_code == 200


def test_plotly_is_vendored_with_its_version_and_licence_noted():
    vendor = Path(settings.BASE_DIR) / "static" / "vendor"
    head = (vendor / "plotly-partial.min.js").read_text(encoding="utf-8")[:300]
    version = re.search(r"plotly\.js [^\n]*v(\d+\.\d+\.\d+)", head).group(1)
    readme = (vendor / "README.md").read_text(encoding="utf-8")
    assert version in readme and "MIT" in readme and "Licensed under the MIT license" in head
