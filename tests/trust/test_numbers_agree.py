"""Every number the portal shows agrees on every surface at the same cycle (#15).

A busy simulated cluster (the demo seed's mixed 64-node layout with its workload
generator) runs scheduling cycles and metrics rollups; then, with the clock standing
still (SIMULATOR_SPEED=0), each number is read from every surface that shows it:
``/queues/``, the line pages, ``/quotas/``, the approval impact (page and API), the
REST API (business lines, queues, metrics summary), ``/metrics`` and the dashboard's
data. They must be equal to each other and to the numbers recomputed here from the
jobs, the allocations and the evictions themselves, and obey the definitions of
docs/quotas.md: used = what running and checkpointing jobs hold; borrowed =
max(0, used - own quota), 0 without a quota of its own; within quota = used - borrowed;
utilization = GPUs in use by jobs or by online inference on healthy nodes over healthy GPUs
(inference as the simulated cluster itself holds it); one eviction window,
named everywhere, and "no data yet" rather than 0.0% while it holds nothing.
"""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import F, Value
from django.db.models.functions import Least
from django.test import Client
from rest_framework.test import APIClient

from core.models import LineMembership
from demo.workload import generate
from monitoring.models import MetricSample
from monitoring.rollup import rollup
from quotas import advice
from quotas.models import BusinessLine, Queue, QuotaPolicy
from scheduling.backend_factory import open_simulator
from scheduling.cycle import run_cycle
from scheduling.models import CONSOLIDATION, Allocation, Eviction, Job, Node
from scheduling.sim_services import advance_clock
from tests.conftest import DEMO_PASSWORD
from tests.drills import start_busy_cluster

pytestmark = pytest.mark.django_db

HELD = ("running", "preempting")
WINDOW_S = 72 * 3600  # the quota policy's default eviction window
WINDOW = "last 72 h"


# -- the cluster ------------------------------------------------------------------------------


@pytest.fixture
def users(monkeypatch):
    """The demo seed on its mixed layout at 64 nodes (512 GPUs), workload generator on."""
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", nodes=64, nodes_per_rack=8, seed=3, stdout=None)
    people = {u.username: u for u in get_user_model().objects.all()}
    for line in BusinessLine.objects.all():  # the lead may ask for every line (impacts)
        LineMembership.objects.update_or_create(
            user=people["lead"], business_line=line, defaults={"is_lead": True}
        )
    return people


def busy(admin, hours: int = 6, step_s: int = 600) -> None:
    """Arrivals, cycles and a rollup sample every ``step_s`` of cluster time; then, whatever
    the generator made of it, contracts that put one line above its quota, another within
    its quota with one of its queues above the queue's, as a quota cut would."""
    start_busy_cluster()
    for _ in range(hours * 3600 // step_s):
        generate()
        run_cycle()
        rollup()
        advance_clock(admin, step_s)
    generate()
    run_cycle()  # the cycle every surface is read at
    used = {line.pk: 0 for line in BusinessLine.objects.all()}
    by_queue: dict[int, int] = {}
    for queue_id, line_id, gpus in Job.objects.filter(state__in=HELD).values_list(
        "queue_id", "queue__business_line_id", "gpus"
    ):
        used[line_id] += gpus
        by_queue[queue_id] = by_queue.get(queue_id, 0) + gpus
    over, within = sorted(used, key=used.get, reverse=True)[:2]
    assert used[over] > 16 and used[within] > 0, used
    set_quota(BusinessLine, over, used[over] - 16)
    set_quota(BusinessLine, within, used[within] + 64)
    queue = max(
        Queue.objects.filter(business_line_id=within).exclude(quota_gpus=None),
        key=lambda q: by_queue.get(q.pk, 0),
    )
    assert by_queue.get(queue.pk, 0) >= 2, "a queue of the line within quota runs work"
    set_quota(Queue, queue.pk, by_queue[queue.pk] // 2)
    rollup()


def set_quota(model, pk: int, quota: int) -> None:
    """A new quota, the guarantee lowered with it in the same row (never above the quota:
    a check constraint; how far depends on the workload the demo offered)."""
    model.objects.filter(pk=pk).update(
        quota_gpus=quota, guarantee_gpus=Least(F("guarantee_gpus"), Value(quota))
    )


# -- the truth, recomputed from the rows --------------------------------------------------------


def truth() -> dict:
    """Per queue and line: quota, guarantee, used, borrowed, within quota, pending GPUs and
    jobs, running jobs, straight from the jobs (not through the portal's selectors)."""
    out: dict[str, dict] = {"queue": {}, "line": {}}
    held: dict[int, int] = {}
    running: dict[int, int] = {}
    pending_gpus: dict[int, int] = {}
    pending_jobs: dict[int, int] = {}
    for queue_id, state, gpus in Job.objects.values_list("queue_id", "state", "gpus"):
        if state in HELD:
            held[queue_id] = held.get(queue_id, 0) + gpus
            running[queue_id] = running.get(queue_id, 0) + 1
        elif state == "pending":
            pending_gpus[queue_id] = pending_gpus.get(queue_id, 0) + gpus
            pending_jobs[queue_id] = pending_jobs.get(queue_id, 0) + 1

    def row(quota, guarantee, used, p_gpus, p_jobs, r_jobs) -> dict:
        borrowed = 0 if quota is None else max(0, used - quota)
        return {"quota_gpus": quota, "guarantee_gpus": guarantee, "used_gpus": used,
                "borrowed_gpus": borrowed, "within_quota_gpus": used - borrowed,
                "pending_gpus": p_gpus, "pending_jobs": p_jobs, "running_jobs": r_jobs}  # fmt: skip

    for q in Queue.objects.all():
        out["queue"][q.name] = row(q.quota_gpus, q.guarantee_gpus, held.get(q.pk, 0),
                                   pending_gpus.get(q.pk, 0), pending_jobs.get(q.pk, 0),
                                   running.get(q.pk, 0))  # fmt: skip
    for line in BusinessLine.objects.all():
        ids = list(line.queues.values_list("pk", flat=True))
        out["line"][line.name] = row(
            line.quota_gpus, line.guarantee_gpus, sum(held.get(i, 0) for i in ids),
            sum(pending_gpus.get(i, 0) for i in ids), sum(pending_jobs.get(i, 0) for i in ids),
            sum(running.get(i, 0) for i in ids),
        )  # fmt: skip
    healthy = Node.objects.filter(state="ready", health="ok")
    out["gpus_healthy"] = sum(healthy.values_list("gpus_total", flat=True))
    out["gpus_allocated_healthy"] = Allocation.objects.filter(node__in=healthy).count()
    names = set(healthy.values_list("name", flat=True))
    out["gpus_inference_healthy"] = sum(
        len(n.inference_gpus)
        for n in open_simulator(advance=False).sim.observe().nodes
        if n.name in names
    )
    return out


# -- reading the surfaces -----------------------------------------------------------------------


def cells(fragment: str) -> dict[str, str]:
    """``data-field`` -> text of the cells in one table row (tags stripped)."""
    found = re.findall(r'<td[^>]*data-field="([a-z_]+)"[^>]*>(.*?)</td>', fragment, re.S)
    return {k: html.unescape(re.sub(r"<[^>]+>", " ", v)).strip() for k, v in found}


def number(text: str) -> int | None:
    return None if text == "line's" else int(text)


def queues_page(client: Client) -> dict:
    """/queues/: each line's totals and each queue's row."""
    page = client.get("/queues/").content.decode()
    out: dict[str, dict] = {"line": {}, "queue": {}, "page": page}
    for line in BusinessLine.objects.all():
        section = re.search(rf'data-line-id="{line.pk}".*?</section>', page, re.S).group(0)
        totals = cells(re.search(r"<tbody><tr>.*?</tr>", section, re.S).group(0))
        used = re.search(r"(\d+) of (\d+) GPUs", totals["used"])
        out["line"][line.name] = {**totals, "used_gpus": int(used.group(1)),
                                  "usage_quota": int(used.group(2))}  # fmt: skip
        for q in line.queues.all():
            row = cells(re.search(rf'data-queue-id="{q.pk}".*?</tr>', section, re.S).group(0))
            used = re.match(r"(\d+)", row["used"])
            out["queue"][q.name] = {**row, "used_gpus": int(used.group(1))}
    return out


def line_page(client: Client, line: BusinessLine) -> dict:
    page = client.get(f"/quotas/lines/{line.name}/").content.decode()
    table = re.search(r'<table class="grid" id="contract">.*?</table>', page, re.S).group(0)
    out = {"line": cells(re.search(r"<tr data-line=.*?</tr>", table, re.S).group(0)), "queue": {}}
    for q in line.queues.all():
        out["queue"][q.name] = cells(
            re.search(rf'<tr data-queue="{q.name}">.*?</tr>', table, re.S).group(0)
        )
    out["page"] = page
    return out


def metrics_samples(client: Client) -> tuple[dict, str]:
    """``/metrics`` as {(name, frozenset(labels)): value}, and the raw text."""
    text = client.get("/metrics").content.decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or ""))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples, text


def api_rows(api: APIClient, path: str) -> dict[str, dict]:
    return {r["name"]: r for r in api.get(f"/api/v1/{path}/?limit=1000").json()["results"]}


def impact_of(api: APIClient, lead: APIClient, client: Client, line: str, queue=None) -> tuple:
    """A fresh request's impact from the API and from its approval page."""
    body = {"business_line": line, "reason": "numbers check"}
    if queue is None:
        body["quota_gpus"] = BusinessLine.objects.get(name=line).quota_gpus + 8
    else:
        body["queue"] = queue.name
        body["guarantee_gpus"] = queue.guarantee_gpus + 1
    created = lead.post("/api/v1/quota-requests/", body, format="json")
    assert created.status_code == 201, created.content
    rid = created.json()["id"]
    impact = api.get(f"/api/v1/quota-requests/{rid}/impact/").json()
    page = client.get(f"/quotas/requests/{rid}/").content.decode()
    rows = {
        when: cells(row)
        for when, row in re.findall(r'<tr data-when="([^"]+)">(.*?)</tr>', page, re.S)
    }
    return impact, rows


# -- the test -----------------------------------------------------------------------------------

NUMBERS = ("used_gpus", "borrowed_gpus", "within_quota_gpus", "pending_gpus", "pending_jobs",
           "running_jobs", "quota_gpus", "guarantee_gpus")  # fmt: skip


def test_every_number_agrees_on_every_surface_at_the_same_cycle(users):
    admin = users["admin"]
    busy(admin)
    t = truth()

    # the cluster is busy and borrows: the definitions are exercised, not vacuous
    assert Job.objects.filter(state="pending").count() > 0, "work waits"
    lines = t["line"].values()
    assert any(r["borrowed_gpus"] > 0 for r in lines), "a line above its quota"
    assert any(r["used_gpus"] and not r["borrowed_gpus"] for r in lines), "one within it"
    assert any(
        t["queue"][q.name]["borrowed_gpus"] > 0 and not t["line"][line.name]["borrowed_gpus"]
        for line in BusinessLine.objects.all()
        for q in line.queues.all()
    ), "a queue above its own quota while its line is within the line's"
    assert Eviction.objects.exclude(reason=CONSOLIDATION).exists(), "preemptions happened"

    web = Client()
    web.force_login(admin)
    api = APIClient()
    api.force_authenticate(admin)
    lead = APIClient()
    lead.force_authenticate(users["lead"])

    # the definitions hold on the truth itself
    for scope in ("queue", "line"):
        for name, r in t[scope].items():
            assert r["within_quota_gpus"] + r["borrowed_gpus"] == r["used_gpus"], name
            assert 0 <= r["borrowed_gpus"] <= r["used_gpus"], name
            if r["quota_gpus"] is None or r["used_gpus"] <= r["quota_gpus"]:
                assert r["borrowed_gpus"] == 0, name

    # REST API
    api_lines, api_queues = api_rows(api, "business-lines"), api_rows(api, "queues")
    for name, r in t["line"].items():
        assert {k: api_lines[name][k] for k in NUMBERS} == r, f"API line {name}"
    for name, r in t["queue"].items():
        assert {k: api_queues[name][k] for k in NUMBERS} == r, f"API queue {name}"

    # /queues/
    qp = queues_page(web)
    for name, r in t["line"].items():
        row = qp["line"][name]
        assert row["used_gpus"] == r["used_gpus"] and row["usage_quota"] == r["quota_gpus"], name
        for k in ("borrowed_gpus", "within_quota_gpus", "pending_gpus", "pending_jobs",
                  "running_jobs"):  # fmt: skip
            assert int(row[k]) == r[k], f"/queues/ line {name} {k}"
    for name, r in t["queue"].items():
        row = qp["queue"][name]
        assert number(row["quota_gpus"]) == r["quota_gpus"], name
        for k in ("used_gpus", "borrowed_gpus", "pending_gpus", "pending_jobs", "running_jobs",
                  "guarantee_gpus"):  # fmt: skip
            assert int(row[k]) == r[k], f"/queues/ queue {name} {k}"
    assert f"Eviction ratio, {WINDOW}" in qp["page"]

    # the line pages
    for line in BusinessLine.objects.all():
        lp = line_page(web, line)
        for k in ("used_gpus", "within_quota_gpus", "borrowed_gpus", "running_jobs",
                  "pending_jobs", "pending_gpus"):  # fmt: skip
            assert int(lp["line"][k]) == t["line"][line.name][k], f"line page {line.name} {k}"
            for q in line.queues.all():
                assert int(lp["queue"][q.name][k]) == t["queue"][q.name][k], f"{q.name} {k}"
        assert f"Eviction ratio, {WINDOW}" in lp["page"]

    # /metrics
    samples, text = metrics_samples(web)
    for q in Queue.objects.select_related("business_line"):
        labels = frozenset({("queue", q.name), ("business_line", q.business_line.name),
                            ("tier", q.tier)})  # fmt: skip
        for k in ("used_gpus", "borrowed_gpus", "pending_gpus", "pending_jobs", "running_jobs"):
            assert samples[(f"gpuportal_queue_{k}", labels)] == t["queue"][q.name][k], q.name
    for name, r in t["line"].items():
        labels = frozenset({("business_line", name)})
        for k in ("used_gpus", "borrowed_gpus", "pending_gpus", "quota_gpus"):
            assert samples[(f"gpuportal_line_{k}", labels)] == r[k], f"/metrics {name} {k}"
    assert samples[("gpuportal_eviction_window_seconds", frozenset())] == WINDOW_S
    assert f"Eviction ratio of the queue, {WINDOW} of cluster time" in text

    # utilization of healthy GPUs, everywhere
    in_use = t["gpus_allocated_healthy"] + t["gpus_inference_healthy"]
    assert t["gpus_inference_healthy"] > 0, "the shared nodes serve inference at this hour"
    utilization = round(in_use / t["gpus_healthy"], 4)
    summary = api.get("/api/v1/metrics/summary/").json()
    assert summary["utilization"] == utilization
    assert summary["gpus_allocated_healthy"] == t["gpus_allocated_healthy"]
    assert summary["gpus_inference_healthy"] == t["gpus_inference_healthy"]
    assert summary["gpus_healthy"] == t["gpus_healthy"]
    assert samples[("gpuportal_gpu_utilization_ratio", frozenset())] == utilization
    dash = web.get("/dashboard/data/").json()
    assert dash["tiles"]["utilization"] == f"{utilization:.1%}"
    # the tiles are written as the page shows them, with thousands separators
    assert (
        dash["tiles"]["gpus_allocated"],
        dash["tiles"]["gpus_inference"],
        dash["tiles"]["gpus_healthy"],
    ) == (
        f"{t['gpus_allocated_healthy']:,}",
        f"{t['gpus_inference_healthy']:,}",
        f"{t['gpus_healthy']:,}",
    )
    pending_jobs = Job.objects.filter(state="pending").count()
    assert dash["tiles"]["pending_jobs"] == f"{sum(summary['pending_by_reason'].values()):,}"
    assert dash["tiles"]["pending_jobs"] == f"{pending_jobs:,}"
    assert sum(r["pending_jobs"] for r in t["line"].values()) == pending_jobs

    # the dashboard's per-line chart: used within quota + borrowed, against the quota
    by_name = {t_["name"]: t_ for t_ in dash["figures"]["lines"]["data"]}
    labels = dict(BusinessLine.objects.values_list("display_name", "name"))
    within = dict(zip(by_name["used within quota"]["x"], by_name["used within quota"]["y"],
                      strict=True))  # fmt: skip
    lent = dict(zip(by_name["borrowed (idle capacity)"]["x"],
                    by_name["borrowed (idle capacity)"]["y"], strict=True))  # fmt: skip
    for label, name in labels.items():
        assert within[label] == t["line"][name]["within_quota_gpus"], f"dashboard {name}"
        assert lent[label] == t["line"][name]["borrowed_gpus"], f"dashboard {name}"
        assert within[label] <= t["line"][name]["quota_gpus"]

    # the approval impact, API and page: the line's and each queue's numbers now
    for line in BusinessLine.objects.all():
        impact, rows = impact_of(api, lead, web, line.name)
        r = t["line"][line.name]
        for k in ("used_gpus", "borrowed_gpus", "within_quota_gpus", "quota_gpus"):
            assert impact["before"][k] == r[k], f"impact {line.name} {k}"
            assert int(rows[f"line {line.name} now"][k]) == r[k], f"impact page {line.name} {k}"
        assert impact["before"]["entitled_gpus"] == r["within_quota_gpus"]
        queue = line.queues.exclude(quota_gpus=None).order_by("name").first()
        impact, rows = impact_of(api, lead, web, line.name, queue)
        q = t["queue"][queue.name]
        for k in ("used_gpus", "borrowed_gpus", "within_quota_gpus"):
            assert impact["before"][k] == q[k], f"impact {queue.name} {k}"
            assert impact["line_before"][k] == r[k], f"impact {line.name} via {queue.name} {k}"
            assert int(rows[f"queue {queue.name} now"][k]) == q[k]
            assert int(rows[f"line {line.name} now"][k]) == r[k]
        assert impact["demand_gpus"] == q["pending_gpus"]

    # the eviction ratio: the same figure for the same window on every surface
    ratios = {name: row["eviction_ratio"] for name, row in api_queues.items()}
    assert any(v for v in ratios.values()), "some queue lost GPU time to preemption"
    assert all(row["eviction_window_seconds"] == WINDOW_S for row in api_queues.values())
    assert summary["eviction_ratio_by_queue"] == ratios
    assert (summary["eviction_window_seconds"], summary["eviction_window"]) == (WINDOW_S, WINDOW)
    drawn = dict(zip(dash["figures"]["eviction"]["data"][0]["x"],
                     dash["figures"]["eviction"]["data"][0]["y"], strict=True))  # fmt: skip
    assert WINDOW in dash["figures"]["eviction"]["layout"]["title"]["text"]
    for q in Queue.objects.select_related("business_line"):
        ratio = ratios[q.name]
        text = "no data yet" if ratio is None else f"{100 * ratio:.1f}%"
        assert qp["queue"][q.name]["eviction_ratio"] == text, q.name
        lp = line_page(web, q.business_line)
        assert lp["queue"][q.name]["eviction_ratio"] == text, q.name
        labels = frozenset({("queue", q.name), ("business_line", q.business_line.name),
                            ("tier", q.tier)})  # fmt: skip
        if ratio is None:
            assert ("gpuportal_queue_eviction_ratio", labels) not in samples
            assert q.name not in drawn
        else:
            assert samples[("gpuportal_queue_eviction_ratio", labels)] == ratio
            assert drawn[q.name] == round(ratio * 100, 2)
            assert 0.0 <= ratio <= 1.0
    # ... and it is the evicted over the delivered GPU time of the window, recomputed; a
    # migration (consolidation) is counted apart, never in the ratio
    evicted: dict[int, float] = {}
    stops = Eviction.objects.exclude(reason=CONSOLIDATION)
    for queue_id, gpu_s in stops.values_list("queue_id", "gpu_seconds"):
        evicted[queue_id] = evicted.get(queue_id, 0.0) + gpu_s
    for q in Queue.objects.all():
        if evicted.get(q.pk):
            assert ratios[q.name] is not None and ratios[q.name] > 0, q.name
    policy_hours = QuotaPolicy.objects.values_list("eviction_window_hours", flat=True).first()
    assert policy_hours in (None, 72), "the window the pages name is the policy's"

    # the guarantee advice shows what replaying the window's evictions gives
    for line in BusinessLine.objects.all():
        page = line_page(web, line)["page"]
        for queue_name, card in re.findall(r'id="suggestion-([a-z-]+)"(.*?)</div>', page, re.S):
            queue = Queue.objects.get(name=queue_name)
            suggested = int(re.search(r"→ <strong>(\d+)</strong>", card).group(1))
            shown = re.search(r'data-field="prevented_evictions">(\d+) of (\d+)', card)
            events = window_evictions(queue)
            assert int(shown.group(2)) == len(events)
            prevented = advice.replay_guarantee(events, suggested)
            assert int(shown.group(1)) == len(prevented) > 0, queue_name
            ratio = ratios[queue_name]
            assert f"{100 * ratio:.1f}%" in card and f"Eviction ratio, {WINDOW}" in card
    # (a queue above target may get none: when no guarantee within its quota would have
    # prevented an eviction; tests/quotas/test_suggestion_replay.py has both cases)


def window_evictions(queue: Queue) -> list[advice.EvictionEvent]:
    """The queue's evictions in the latest sample's window, with its sampled use then."""
    latest = MetricSample.objects.order_by("-at").first()
    since = latest.at - timedelta(seconds=WINDOW_S)
    series = [
        (at, per_queue.get(str(queue.pk), {}).get("used", 0))
        for at, per_queue in MetricSample.objects.filter(at__gte=since, at__lte=latest.at)
        .order_by("at")
        .values_list("at", "per_queue")
    ]
    out = []
    for at, gpus, gpu_s in (
        Eviction.objects.filter(queue=queue, at__gte=since, at__lte=latest.at)
        .exclude(reason=CONSOLIDATION)
        .order_by("at", "id")
        .values_list("at", "gpus", "gpu_seconds")
    ):
        before = [used for t, used in series if t <= at]
        used = before[-1] if before else (series[0][1] if series else 0)
        out.append(advice.EvictionEvent(gpus, gpu_s, used, at=at.timestamp()))
    return out


def test_at_start_up_the_eviction_ratio_says_no_data_yet(users):
    """No rollup sample yet (or a window with nothing delivered): never "0.0%"."""
    web = Client()
    web.force_login(users["admin"])
    api = APIClient()
    api.force_authenticate(users["admin"])
    for step in ("no sample", "first sample"):
        page = web.get("/queues/").content.decode()
        assert "0.0%" not in page, step
        assert page.count(">no data yet<") == Queue.objects.count(), step
        assert {r["eviction_ratio"] for r in api_rows(api, "queues").values()} == {None}, step
        summary = api.get("/api/v1/metrics/summary/").json()
        assert set(summary["eviction_ratio_by_queue"].values()) == {None}, step
        assert summary["eviction_window"] == WINDOW, step
        samples, _ = metrics_samples(web)
        assert not any(name == "gpuportal_queue_eviction_ratio" for name, _ in samples), step
        assert samples[("gpuportal_eviction_window_seconds", frozenset())] == WINDOW_S
        line = BusinessLine.objects.get(name="llm")
        # (the line's eviction target reads "10.0%": a zero ratio is "0.0%" on its own)
        assert not re.search(r"(?<![\d.])0\.0%", line_page(web, line)["page"]), step
        rollup()  # the first sample covers no time yet: still no data
    generate()
    run_cycle()
    rollup()
    advance_clock(users["admin"], 600)
    rollup()  # ten minutes delivered to the queues that run something
    for name, row in api_rows(api, "queues").items():
        ran = row["used_gpus"] > 0
        assert (row["eviction_ratio"] is not None) == ran, name
        stops = Eviction.objects.filter(queue__name=name).exclude(reason=CONSOLIDATION)
        if ran and not stops.exists():
            assert row["eviction_ratio"] == 0.0, name


def test_a_window_of_other_length_is_named_so_everywhere(users):
    """Admins change the window in the quota policy: every surface follows and says so."""
    QuotaPolicy.objects.update_or_create(singleton=True, defaults={"eviction_window_hours": 24})
    generate()
    run_cycle()
    rollup()
    advance_clock(users["admin"], 600)
    rollup()  # ten minutes delivered: ratios to show, so the dashboard's caption has figures
    web = Client()
    web.force_login(users["admin"])
    api = APIClient()
    api.force_authenticate(users["admin"])
    assert "Eviction ratio, last 24 h" in web.get("/queues/").content.decode()
    assert api.get("/api/v1/metrics/summary/").json()["eviction_window"] == "last 24 h"
    row = next(iter(api_rows(api, "queues").values()))
    assert row["eviction_window_seconds"] == 24 * 3600
    _, text = metrics_samples(web)
    assert "last 24 h of cluster time" in text
    dash = web.get("/dashboard/data/").json()
    assert "last 24 h" in dash["eviction_window"]
    # the words under the chart say it too, not only its title
    caption = dash["figures"]["eviction"]["summary"]
    assert "alert line, last 24 h" in caption, caption
    assert "alert line, last 24 h" in html.unescape(web.get("/dashboard/").content.decode())
