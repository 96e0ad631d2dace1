"""The shipped Prometheus rules and Grafana dashboard, against the real tools and the
live portal: promtool checks and unit-tests the rules; a real Prometheus scrapes the test
portal's /metrics with the bearer token and evaluates a recording rule; every query of
the dashboard and the rules names only metrics /metrics exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import requests
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.integrations.servers import poll, start_prometheus

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/rules.yml"
RULE_TESTS = ROOT / "deploy/prometheus/tests.yml"
DASHBOARD = ROOT / "deploy/grafana/gpu-portal.json"
TOKEN = "prometheus-scrape-" + "t" * 30

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
}  # fmt: skip
# Series Prometheus itself makes (not the portal's).
PROMETHEUS_OWN = {"up"}


def test_promtool_checks_the_rules():
    result = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_of_the_rules_pass():
    result = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], cwd=RULES.parent,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_mirror_every_portal_alert_kind():
    from monitoring.models import Alert

    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    kinds = {r["labels"]["kind"] for r in rules if "alert" in r and "kind" in r.get("labels", {})}
    assert kinds == set(Alert.Kind.values)


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads (not functions, keywords or labels)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[match.end() :].lstrip()
        word = match.group()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function or an aggregation
        if re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names


def _exported(demo) -> set[str]:
    client = Client()
    client.force_login(demo["admin"])
    text = client.get("/metrics").content.decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def _recording_rules() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}


def _reads(expr: str, recorded: dict[str, str]) -> set[str]:
    """Raw series an expression reads, through the recording rules it uses."""
    out = set()
    for name in metric_names(expr):
        out |= _reads(recorded[name], recorded) if ":" in name else {name}
    return out


@pytest.mark.django_db
def test_every_dashboard_and_rule_query_uses_only_exported_metrics(demo):
    exported = _exported(demo) | PROMETHEUS_OWN
    recorded = _recording_rules()
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"], "the dashboard has panels"
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in metric_names(target["expr"]):
                assert ":" not in name or name in recorded, (panel["title"], name)
            missing = _reads(target["expr"], recorded) - exported
            assert not missing, (panel["title"], target["expr"], missing)
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        missing = _reads(rule["expr"], recorded) - exported
        assert not missing, (rule.get("record") or rule.get("alert"), missing)


def test_the_parser_finds_names_and_skips_functions():
    expr = 'histogram_quantile(0.9, sum by (queue, le) (rate(a_bucket{x="y"}[5m]))) / b:c'
    assert metric_names(expr) == {"a_bucket", "b:c"}


def test_the_dashboard_shows_what_the_issue_asks():
    titles = " | ".join(p["title"].lower() for p in json.loads(DASHBOARD.read_text())["panels"])
    for words in ("utilization", "quota, used, borrowed", "pending jobs by reason",
                  "eviction ratio per queue", "cycle time", "wait time percentiles"):  # fmt: skip
        assert words in titles, words


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_real_prometheus_scrapes_the_portal_and_evaluates_a_recording_rule(
    demo, live_server, monkeypatch, tmp_path
):
    from scheduling.models import Node

    monkeypatch.setenv("METRICS_TOKEN", TOKEN)
    prometheus, url = start_prometheus(tmp_path / "prom", live_server.url, TOKEN, RULES)
    try:

        def query(q: str) -> list[dict]:
            r = requests.get(f"{url}/api/v1/query", params={"query": q}, timeout=5)
            r.raise_for_status()
            return r.json()["data"]["result"]

        up = poll(lambda: [s for s in query('up{job="gpu-portal"}') if s["value"][1] == "1"], 60)
        assert up, prometheus.output()
        result = poll(lambda: query("gpuportal:gpus:sum_by_model"), 60)
        assert result, prometheus.output()
        expected = {}
        for node in Node.objects.all():
            expected[node.gpu_model] = expected.get(node.gpu_model, 0) + node.gpus_total
        assert {s["metric"]["gpu_model"]: float(s["value"][1]) for s in result} == expected
        reasons = {s["metric"]["reason"] for s in query("gpuportal:pending_jobs:sum_by_reason")}
        assert {"NEW", "QUOTA_EXCEEDED", "INSUFFICIENT_GPUS"} <= reasons, "zero series from start"
    finally:
        prometheus.stop()
