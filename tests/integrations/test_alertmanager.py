"""Portal alerts reach a real Alertmanager (Debian's prometheus-alertmanager) and chat
webhooks through a real Celery worker: raised by a simulator fault, resolved in the portal.
"""

from __future__ import annotations

import pytest
import requests

from monitoring import notify
from monitoring.models import Alert
from portal.devservices import free_port
from scheduling.models import Node
from tests.drills import cycle, make_quotas_roomy
from tests.integrations.servers import Receiver, poll, start_alertmanager, start_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _am_alerts(url: str, **filters: str) -> list[dict]:
    matchers = [f'{k}="{v}"' for k, v in filters.items()]
    response = requests.get(f"{url}/api/v2/alerts", params={"filter": matchers}, timeout=5)
    response.raise_for_status()
    return response.json()


@pytest.fixture
def am_port():
    return free_port()


def test_a_fault_alert_reaches_alertmanager_and_resolves_there(api, tmp_path, monkeypatch,
                                                                am_port):  # fmt: skip
    make_quotas_roomy()
    am_url = f"http://127.0.0.1:{am_port}"
    hook = Receiver()
    env = {
        "ALERTMANAGER_URL": am_url,
        "ALERT_WEBHOOK_URLS": hook.url,
        "PORTAL_URL": "https://portal.example.org",
        "ALERT_NOTIFY_TIMEOUT_SECONDS": "2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    worker = start_worker(tmp_path / "worker", **env)
    alertmanager = None
    try:
        admin, oncall = api("admin"), api("oncall")
        node = Node.objects.order_by("name").first().name
        response = oncall.post("/api/v1/simulator/faults/",
                               {"kind": "gpu_failure", "node": node}, format="json")  # fmt: skip
        assert response.status_code == 200, response.data
        cycle(admin)  # isolates the node and raises the critical node_unhealthy alert
        alert = Alert.objects.get(kind="node_unhealthy", subject=node)

        # Alertmanager is not up yet: the worker's first pushes fail and are retried
        # with backoff; once it starts, the alert arrives.
        assert poll(lambda: hook.bodies, timeout_s=60), worker.output()
        # The webhook may answer before the same task's push to the absent Alertmanager
        # fails: start Alertmanager only once that failure is scheduled for a retry.
        assert poll(lambda: "retry in" in worker.output(), timeout_s=60), worker.output()
        alertmanager, am_url2 = start_alertmanager(tmp_path / "am", am_port)
        assert am_url2 == am_url
        found = poll(lambda: _am_alerts(am_url, alertname="node_unhealthy", node=node), 60)
        assert found, worker.output()
        (firing,) = found
        assert firing["labels"] == {
            "alertname": "node_unhealthy", "kind": "node_unhealthy", "severity": "critical",
            "node": node, "source": "gpu-portal",
        }  # fmt: skip
        assert firing["status"]["state"] == "active"
        assert firing["generatorURL"] == f"https://portal.example.org/oncall/#alert-{alert.pk}"
        assert node in firing["annotations"]["summary"]
        assert firing["annotations"]["portal_alert_id"] == str(alert.pk)
        # the whole log: ``output()`` is its last 3,000 characters, which later lines push on
        retried = "retry in" in worker.log.read_text(errors="replace")
        assert retried, "the first delivery failed and was retried"

        # Resolved on the on-call console: resolved in Alertmanager too.
        assert oncall.post(f"/api/v1/alerts/{alert.pk}/resolve/").status_code == 200
        gone = poll(lambda: not _am_alerts(am_url, alertname="node_unhealthy", node=node), 60)
        assert gone, worker.output()

        texts = [b["text"] for b in poll(lambda: len(hook.bodies) >= 2 and hook.bodies, 30)]
        assert texts[0].startswith("[FIRING] critical node_unhealthy on " + node)
        assert (
            f"<https://portal.example.org/oncall/#alert-{alert.pk}|alert #{alert.pk}>" in texts[0]
        )
        assert texts[1].startswith("[RESOLVED] critical node_unhealthy on " + node)
        assert set(hook.bodies[0]) == {"text"}, "a Slack-compatible body"
    finally:
        worker.stop()
        hook.stop()
        if alertmanager:
            alertmanager.stop()


def test_a_queue_alert_carries_its_queue_and_line_and_resend_keeps_it(
    tmp_path, demo, monkeypatch, celery_eager
):
    from monitoring.services import raise_alert, resolve_cleared

    alertmanager, url = start_alertmanager(tmp_path / "am")
    try:
        monkeypatch.setenv("ALERTMANAGER_URL", url)
        alert = raise_alert("pending_too_long", "warning", "llm-core", "3 job(s) waited")
        (got,) = poll(lambda: _am_alerts(url, alertname="pending_too_long"), 20)
        assert got["labels"]["queue"] == "llm-core" and got["labels"]["line"] == "llm"
        assert notify.resend_unresolved() == 1
        assert resolve_cleared("pending_too_long", [], "no job waits that long now") == 1
        assert poll(lambda: not _am_alerts(url, alertname="pending_too_long"), 20)
        assert Alert.objects.get(pk=alert.pk).status == "resolved"
    finally:
        alertmanager.stop()
