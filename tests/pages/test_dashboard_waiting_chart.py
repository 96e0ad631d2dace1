"""The dashboard's "Waiting jobs by reason over time" chart on the page and in its live JSON:
drawn from the rollup samples of the window, next to the live "Pending by reason" bars,
seeded demo history left out, in the viewer's zone."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from core import clock
from core.models import Profile
from monitoring import charts
from monitoring.charts import reason_label
from monitoring.models import MetricSample
from monitoring.views import CHARTS
from tests.conftest import DEMO_PASSWORD
from tests.pages.test_dashboard_pages import embedded

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 3, 40, tzinfo=UTC)  # 12:40 JST


def sample(minutes_ago: int, reasons: dict[str, int], *, seeded: bool = False) -> None:
    MetricSample.objects.create(
        at=NOW - timedelta(minutes=minutes_ago), gpus_total=32, gpus_healthy=32,
        gpus_allocated=16, utilization=0.5, fragmentation_gpus=0,
        pending_jobs=sum(reasons.values()), pending_by_reason=reasons, seeded=seeded,
    )  # fmt: skip


def rollups() -> None:
    """Seeded history 3 hours ago (no reasons), then three measured samples in the hour."""
    sample(180, {}, seeded=True)
    sample(170, {}, seeded=True)
    sample(50, {"QUOTA_EXCEEDED": 4, "TOPOLOGY": 2})  # for 30 minutes: 120 + 60 job-min
    sample(20, {"QUOTA_EXCEEDED": 6})  # for 10 minutes: 60 job-min
    sample(10, {"QUOTA_EXCEEDED": 3, "INSUFFICIENT_GPUS": 3})  # to now: 30 + 30 job-min


def test_the_chart_sits_next_to_the_pending_bars_and_reads_the_samples(client, demo):
    rollups()
    client.force_login(demo["admin"])
    with clock.pinned(NOW):
        page = client.get("/dashboard/?window=6h")
        data = client.get("/dashboard/data/?window=6h").json()
    assert [key for key, _ in CHARTS][2:4] == ["pending", "waiting"]
    html = page.content.decode()
    assert html.index('id="chart-pending"') < html.index('id="chart-waiting"')
    assert html.index('id="chart-waiting"') < html.index('id="chart-eviction"')
    assert re.search(
        r'<figcaption id="summary-waiting"><strong>Waiting jobs by reason over time\.</strong> '
        r'<span class="summary-text">Over the last 6 hours jobs waited 5\.0 job-hours',
        html,
    )
    # 300 job-minutes: QUOTA_EXCEEDED 210 (70%), TOPOLOGY 60 (20%), INSUFFICIENT_GPUS 30
    summary = (
        "Over the last 6 hours jobs waited 5.0 job-hours: quota full 70.0%, topology "
        "(scattered) 20.0%, not enough GPUs 10.0%. At the latest sample (03:30 UTC), 6 jobs were "
        "waiting: 3 quota full, 3 not enough GPUs. 2 samples of seeded demo history (no pending "
        "reasons) left out."
    )
    for figure in (embedded(page)["figures"]["waiting"], data["figures"]["waiting"]):
        assert figure["summary"] == summary
        names = [t["name"] for t in figure["data"]]
        assert names == [
            reason_label(c) for c in ("QUOTA_EXCEEDED", "TOPOLOGY", "INSUFFICIENT_GPUS")
        ]
        quota = figure["data"][0]
        assert quota["x"] == [(NOW - timedelta(minutes=m)).isoformat() for m in (50, 20, 10, 0)]
        assert quota["y"] == [4, 6, 3, 3]
        axis = figure["layout"]["xaxis"]
        assert axis["range"] == [(NOW - timedelta(hours=6)).isoformat(), NOW.isoformat()]
    # the same builder on the same samples (the view adds nothing of its own)
    rows = MetricSample.objects.order_by("at").values_list("at", "pending_by_reason", "seeded")
    window = charts.TimeWindow(NOW - timedelta(hours=6), NOW, "last 6 hours")
    assert data["figures"]["waiting"] == charts.waiting_by_reason_figure(list(rows), window=window)


def test_the_window_limits_the_samples_and_a_tokyo_admin_reads_jst(demo):
    rollups()
    Profile.objects.filter(user=demo["admin"]).update(time_zone="Asia/Tokyo")
    client = Client()
    assert client.login(username="admin", password=DEMO_PASSWORD)
    with clock.pinned(NOW):
        response = client.get("/dashboard/data/?window=1h")
    assert response.status_code == 200
    hour = response.json()["figures"]["waiting"]
    assert hour["summary"].startswith("Over the last hour jobs waited 5.0 job-hours: ")
    assert "At the latest sample (12:30 JST), 6 jobs were waiting" in hour["summary"]
    assert "seeded" not in hour["summary"], "the seeded samples are older than the hour"
    assert hour["layout"]["xaxis"]["title"]["text"] == "cluster time (JST)"
    assert hour["data"][0]["x"][0] == "2026-12-01T11:50:00+09:00"
    assert "UTC" not in str(hour)


def test_no_sample_in_the_window_says_so_on_the_page(client, demo):
    client.force_login(demo["admin"])
    with clock.pinned(NOW):
        data = client.get("/dashboard/data/?window=1h").json()
    figure = data["figures"]["waiting"]
    assert figure["data"] == []
    assert figure["summary"].startswith("No samples of waiting jobs in the last hour yet")
