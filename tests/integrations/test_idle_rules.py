"""The shipped Prometheus rules and Grafana dashboard say what the portal says (#19): the
eviction-ratio line is the portal's own (0.15), and the idle-GPUs-by-cause panel reads the
portal's counter through a recording rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from monitoring.idle import CAUSES
from monitoring.metrics import EVICTION_ALERT_RATIO

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/rules.yml"
DASHBOARD = ROOT / "deploy/grafana/gpu-portal.json"


def rules() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r.get("alert") or r["record"]: r for g in groups for r in g["rules"]}


def panels() -> dict[str, dict]:
    return {p["title"]: p for p in json.loads(DASHBOARD.read_text())["panels"]}


def test_the_eviction_alert_and_panel_use_the_portals_line():
    expr = rules()["GpuPortalEvictionRatioHigh"]["expr"]
    assert float(re.search(r">\s*([0-9.]+)", expr).group(1)) == EVICTION_ALERT_RATIO
    (panel,) = [p for t, p in panels().items() if t.startswith("Eviction ratio per queue")]
    assert f"alert line {EVICTION_ALERT_RATIO:g}" in panel["title"]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == EVICTION_ALERT_RATIO


def test_the_idle_panel_stacks_the_causes_from_the_recording_rule():
    rule = rules()["gpuportal:idle_gpus_by_cause:rate5m"]
    assert "rate(gpuportal_idle_gpu_seconds_total[5m])" in rule["expr"]
    panel = panels()["Why GPUs are idle while jobs wait (idle GPUs by cause)"]
    (target,) = panel["targets"]
    assert target["expr"] == "gpuportal:idle_gpus_by_cause:rate5m"
    assert target["legendFormat"] == "{{cause}}"
    assert panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert "cluster seconds" in panel["description"]
    assert "unavailable" in panel["description"] and "unavailable" in CAUSES
