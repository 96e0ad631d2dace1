"""/metrics (Prometheus text, scraped and parsed with the official parser) and metrics/summary/."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token

from monitoring.rollup import get_eviction_figures, rollup
from quotas.models import Queue
from scheduling.models import Eviction, Job, SchedulingCycle
from tests.drills import advance, cycle, make_quotas_roomy, submit
from tests.monitoring.scenarios import an_hour_of_experiments

pytestmark = pytest.mark.django_db

METRICS_TOKEN = "scrape-me-" + "s" * 30


def scrape(client: Client, **headers) -> dict[str, dict[tuple, float]]:
    """``{sample name: {sorted label items: value}}`` from a /metrics scrape."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        assert family.name.startswith("gpuportal_"), family.name
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples[name][tuple(sorted(labels.items()))]


@pytest.fixture(autouse=True)
def fresh_counters():
    """Counters and histograms are recorded in this process as the loop works
    (core.telemetry): each test starts from zero, as a freshly started portal does."""
    from core import telemetry

    telemetry.reset()


@pytest.fixture
def busy_cluster(api, django_capture_on_commit_callbacks):
    """4 x 8 GPUs filled by experiments, then an urgent job evicting one of them (the
    loop's counters are recorded on commit: the callbacks run as a commit would)."""
    make_quotas_roomy()
    Queue.objects.filter(name="llm-finetune").update(quota_gpus=40, guarantee_gpus=8)
    with django_capture_on_commit_callbacks(execute=True):
        admin, me, lead = an_hour_of_experiments(api)
        submit(lead, name="hotfix", queue="llm-urgent", gpus=8, sim_duration_minutes=10)
        cycle(admin)
        advance(admin, 600)
        cycle(admin)
    submit(me, name="waits", queue="llm-finetune", gpus=4)
    rollup()
    assert Eviction.objects.count() >= 1
    return admin


def test_the_scrape_reports_queues_lines_pending_evictions_cycles_and_nodes(busy_cluster, demo):
    client = Client()
    client.force_login(demo["admin"])
    m = scrape(client)

    labels = {"queue": "llm-finetune", "business_line": "llm", "tier": "finetune"}
    assert value(m, "gpuportal_queue_quota_gpus", **labels) == 40
    assert value(m, "gpuportal_queue_guarantee_gpus", **labels) == 8
    assert value(m, "gpuportal_queue_pending_jobs", **labels) == 1
    assert value(m, "gpuportal_queue_pending_gpus", **labels) == 4
    assert (("business_line", "llm"), ("queue", "llm-core"), ("tier", "core")) not in m[
        "gpuportal_queue_quota_gpus"
    ], "a queue without its own quota exports no quota sample"
    running = Job.objects.filter(state__in=["running", "preempting"])
    exp = {"queue": "llm-experiment", "business_line": "llm", "tier": "experiment"}
    assert value(m, "gpuportal_queue_used_gpus", **exp) == sum(
        j.gpus for j in running.filter(queue__name="llm-experiment")
    )
    assert value(m, "gpuportal_line_used_gpus", business_line="llm") == sum(j.gpus for j in running)
    assert value(m, "gpuportal_line_quota_gpus", business_line="llm") == 1000
    assert value(m, "gpuportal_line_borrowed_gpus", business_line="search-rec") == 0

    experiment = Queue.objects.get(name="llm-experiment")
    ratio = value(m, "gpuportal_queue_eviction_ratio", **exp)
    assert ratio == get_eviction_figures().ratio(experiment.pk) and ratio > 0

    evictions = Eviction.objects.filter(queue=experiment, reason="preemption").count()
    assert value(m, "gpuportal_preemptions_total", queue="llm-experiment", reason="preemption") == (
        evictions
    )
    assert value(m, "gpuportal_evicted_gpu_seconds_total", queue="llm-experiment") == pytest.approx(
        sum(e.gpu_seconds for e in Eviction.objects.filter(queue=experiment))
    )

    pending = m["gpuportal_pending_jobs"]
    assert sum(pending.values()) == Job.objects.filter(state="pending").count()
    assert value(m, "gpuportal_pending_jobs", reason="NEW") == 1, "the finetune job is unexplained"
    assert (
        value(m, "gpuportal_jobs", state="pending") == Job.objects.filter(state="pending").count()
    )

    cycles = SchedulingCycle.objects.filter(kind="cycle")
    assert value(m, "gpuportal_scheduling_cycle_duration_seconds_count", kind="cycle") == (
        cycles.count()
    )
    assert (
        value(m, "gpuportal_scheduling_cycle_duration_seconds_bucket", kind="cycle", le="+Inf")
        == cycles.count()
    )
    assert value(m, "gpuportal_scheduling_cycle_duration_seconds_sum", kind="cycle") == (
        pytest.approx(sum(c.duration_ms for c in cycles) / 1000)
    )

    assert value(m, "gpuportal_cluster_gpus") == 32
    assert value(m, "gpuportal_cluster_allocated_gpus") == 32
    assert value(m, "gpuportal_gpu_utilization_ratio") == 1.0
    assert value(m, "gpuportal_healthy_nodes") == 4 and value(m, "gpuportal_isolated_nodes") == 0
    assert value(m, "gpuportal_nodes", state="ready", health="ok") == 4
    assert "gpuportal_metrics_rollup_timestamp_seconds" in m


def test_cordoned_and_failed_nodes_count_as_isolated(api, demo):
    oncall, admin = api("oncall"), api("admin")
    names = [n["name"] for n in oncall.get("/api/v1/nodes/").data["results"]]
    assert (
        oncall.post(f"/api/v1/nodes/{names[0]}/cordon/", {"reason": "bad fan"}).status_code == 200
    )
    fault = {"kind": "gpu_failure", "node": names[1]}
    assert oncall.post("/api/v1/simulator/faults/", fault, format="json").status_code == 200
    cycle(admin)
    client = Client()
    client.force_login(demo["admin"])
    m = scrape(client)
    assert value(m, "gpuportal_healthy_nodes") == 2
    assert value(m, "gpuportal_isolated_nodes") == 2
    assert value(m, "gpuportal_nodes", state="cordoned", health="ok") == 1
    assert value(m, "gpuportal_cluster_healthy_gpus") == 16
    assert "gpuportal_metrics_rollup_timestamp_seconds" not in m, "no rollup yet, no timestamp"


def test_only_admins_or_the_metrics_token_may_scrape(demo, monkeypatch):
    anonymous = Client()
    assert anonymous.get("/metrics").status_code == 401
    assert anonymous.get("/metrics")["WWW-Authenticate"].startswith("Bearer")
    # no METRICS_TOKEN configured: no bearer token works, not even an empty one
    monkeypatch.delenv("METRICS_TOKEN", raising=False)
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    monkeypatch.setenv("METRICS_TOKEN", METRICS_TOKEN)
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    # a header is Latin-1 text: hmac.compare_digest refuses non-ASCII str (TypeError)
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer caf\xe9").status_code == 401
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Token caf\xe9").status_code == 401
    assert "gpuportal_cluster_gpus" in scrape(
        anonymous, HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}"
    )

    for username in ("researcher", "researcher2", "lead", "oncall"):
        client = Client()
        client.force_login(demo[username])
        assert client.get("/metrics").status_code == 403, username
        key = Token.objects.create(user=demo[username]).key
        assert anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Token {key}").status_code == 403

    admin_key = Token.objects.create(user=demo["admin"]).key
    assert "gpuportal_nodes" in scrape(anonymous, HTTP_AUTHORIZATION=f"Token {admin_key}")
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Token wrong").status_code == 401
    assert anonymous.post("/metrics", HTTP_AUTHORIZATION=f"Token {admin_key}").status_code == 405

    from core.tokens import create_token, revoke_token  # self-service tokens (#18)

    own, secret = create_token(demo["admin"], "prometheus", 30)
    assert "gpuportal_nodes" in scrape(anonymous, HTTP_AUTHORIZATION=f"Token {secret}")
    revoke_token(demo["admin"], own.pk)
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 401
    _, researcher_secret = create_token(demo["researcher"], "mine", 30)
    assert (
        anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Token {researcher_secret}").status_code
        == 403
    )


def test_the_summary_matches_the_cluster(busy_cluster, api):
    body = api("researcher").get("/api/v1/metrics/summary/").data
    assert body["gpus_total"] == 32 and body["gpus_allocated"] == 32 and body["gpus_healthy"] == 32
    assert body["utilization"] == 1.0
    assert sum(body["pending_by_reason"].values()) == Job.objects.filter(state="pending").count()
    assert body["pending_by_reason"]["NEW"] == 1
    experiment = Queue.objects.get(name="llm-experiment")
    assert body["eviction_ratio_by_queue"]["llm-experiment"] == get_eviction_figures().ratio(
        experiment.pk
    )
    assert set(body["eviction_ratio_by_queue"]) == set(Queue.objects.values_list("name", flat=True))
    assert body["eviction_window_seconds"] == 72 * 3600 and body["eviction_sampled_at"] is not None
    assert body["eviction_window"] == "last 72 h", "the quota policy's window, named"
    assert api(None).get("/api/v1/metrics/summary/").status_code == 401


def test_the_summary_of_an_idle_cluster_is_all_zeros(api):
    body = api("admin").get("/api/v1/metrics/summary/").data
    assert body["utilization"] == 0.0 and body["pending_by_reason"] == {}
    assert set(body["eviction_ratio_by_queue"].values()) == {None}, "no data yet, not 0.0"
    assert body["eviction_sampled_at"] is None
