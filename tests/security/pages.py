"""Finding the portal's HTML pages by walking ``portal.urls``, and a world to fill them.

``page_urls(world)`` lists every route outside the API, the Django admin and the
metrics endpoints, with its parameters filled from the world (a job, a node, an alert,
a business line, a quota request), so a page added later is visited without editing
the tests. A route with a parameter nobody knows how to fill fails the test that walks
it: add it to ``FILL``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver

# Hostile job name: markup, an event handler, quotes and an entity; at most 100 chars.
HOSTILE_NAME = "<script>alert('xss')</script><img src=x onerror=alert(1)>\"'&amp;"
HOSTILE_ESCAPED = (
    "&lt;script&gt;alert(&#x27;xss&#x27;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
    "&quot;&#x27;&amp;amp;"
)
# Prefixes that are not HTML pages of the portal (each has its own tests).
NOT_PAGES = ("api/", "admin/", "metrics", "static/", "healthz", "readyz")
PARAM = re.compile(r"<(?:(?P<conv>[^>:]+):)?(?P<name>[^>]+)>")


@dataclass
class World:
    job: int
    node: str
    cordoned_node: str
    alert: int
    line: str
    quota_request: int | None
    token: int | None = None
    maintenance: int | None = None
    array: int | None = None


def routes() -> list[str]:
    """Every route of the URLconf as a string (``jobs/<int:job_id>/``), in order."""
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            route = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                walk(p.url_patterns, route)
            elif isinstance(p, URLPattern):
                found.append(route)

    walk(get_resolver().url_patterns, "")
    return found


# (route prefix, parameter name) -> World attribute; the longest matching prefix wins.
FILL = {
    ("jobs/", "job_id"): "job",
    ("oncall/alerts/", "alert_id"): "alert",
    ("oncall/nodes/", "name"): "node",
    ("quotas/lines/", "name"): "line",
    ("quotas/requests/", "pk"): "quota_request",
    ("account/tokens/", "token_id"): "token",
    ("oncall/maintenance/", "window_id"): "maintenance",
    ("arrays/", "array_id"): "array",
}


def fill(route: str, world: World) -> str:
    def value(match: re.Match) -> str:
        name = match.group("name")
        keys = [(prefix, n) for prefix, n in FILL if n == name and route.startswith(prefix)]
        if not keys:
            raise LookupError(f"no way to fill <{name}> in {route!r}: add it to FILL")
        attr = FILL[max(keys, key=lambda k: len(k[0]))]
        filled = getattr(world, attr)
        if filled is None:
            raise LookupError(f"the world has no {attr} for {route!r}")
        return str(filled)

    return "/" + PARAM.sub(value, route)


def page_urls(world: World) -> list[str]:
    """URLs of every portal route that is not API, admin or metrics, parameters filled."""
    urls = []
    for route in routes():
        if route.startswith(NOT_PAGES) or "(?P" in route or route.startswith("^"):
            continue
        urls.append(fill(route, world))
    return sorted(set(urls))


def build_world(api) -> World:
    """A job with a hostile name, running (placed by a cycle), plus alerts, a cordoned
    node, a pending quota request and a job array with the same name: enough for every
    page to show something."""
    from monitoring.services import raise_alert
    from quotas.models import BusinessLine
    from scheduling.models import Job, Node

    created = api("researcher").post(
        "/api/v1/jobs/",
        {"name": HOSTILE_NAME, "queue": "llm-finetune", "gpus": 4},
        format="json",
    )
    assert created.status_code == 201, created.data
    job = created.data["id"]
    cycle = api("admin").post("/api/v1/scheduler/cycle/", {}, format="json")
    assert cycle.status_code == 200, cycle.data
    placed = Job.objects.get(pk=job)
    assert placed.state == "running", placed.state
    nodes = list(Node.objects.order_by("name").values_list("name", flat=True))
    node = Node.objects.filter(allocations__job_id=job).values_list("name", flat=True).first()
    assert node, "the running job holds no node"
    cordoned = next(n for n in nodes if n != node)
    Node.objects.filter(name=cordoned).update(state="cordoned", state_reason="fan <b>noise</b>")
    alert = raise_alert("node_unhealthy", "warning", node, "GPU 3 XID 79 <i>again</i>").pk
    line = BusinessLine.objects.get(name="llm")
    quota = api("lead").post(
        "/api/v1/quota-requests/",
        {"business_line": line.name, "quota_gpus": 20, "guarantee_gpus": 4,
         "reason": "more fine-tuning <b>this</b> quarter"},
        format="json",
    )  # fmt: skip
    assert quota.status_code == 201, quota.data
    token = api("researcher").post(
        "/api/v1/tokens/", {"name": "laptop", "expires_in_days": 30}, format="json"
    )
    assert token.status_code == 201, token.data
    maintenance = api("oncall").post(
        "/api/v1/maintenance/",
        {"nodes": [node], "starts_at": _hours_ahead(2), "reason": "firmware <b>update</b>"},
        format="json",
    )
    assert maintenance.status_code == 201, maintenance.data
    return World(
        job=job, node=node, cordoned_node=cordoned, alert=alert, line=line.name,
        quota_request=quota.data["id"], token=token.data["id"],
        maintenance=maintenance.data["id"], array=_array(),
    )  # fmt: skip


def _array() -> int:
    """A job array of the researcher's, named as hostilely as the job (the array service:
    no API of it is walked here)."""
    from django.contrib.auth import get_user_model

    from scheduling.array_services import submit_array
    from scheduling.services import JobRequest

    owner = get_user_model().objects.get(username="researcher")
    request = JobRequest(name=HOSTILE_NAME, queue="llm-finetune", gpus=4)
    return submit_array(owner, request, "0-2%1").pk


def _hours_ahead(hours: float) -> str:
    """Cluster time ``hours`` from now, as the API takes it."""
    from datetime import timedelta

    from core import clock

    return (clock.now() + timedelta(hours=hours)).isoformat()


def html_pages(client, world: World) -> dict[str, str]:
    """URL -> body of every page that answers ``client`` with 200 text/html."""
    bodies = {}
    for url in page_urls(world):
        response = client.get(url)
        if response.status_code == 200 and "text/html" in response.get("Content-Type", ""):
            bodies[url] = response.content.decode()
    return bodies
