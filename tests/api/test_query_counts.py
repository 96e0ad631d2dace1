"""Query counts of the hot API paths stay flat: the throughput target (200 submissions/s,
lists under 100 ms at 5,000 pending jobs, docs/api.md) depends on it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db

SUBMIT = {"name": "q", "queue": "llm-experiment", "gpus": 1}


def queries(client, method: str, path: str, body: dict | None = None) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = getattr(client, method)(path, body, format="json")
    assert response.status_code in (200, 201), response.data
    return len(ctx.captured_queries)


def test_a_submission_takes_a_fixed_small_number_of_queries(api):
    client = api("researcher")
    client.post("/api/v1/jobs/", SUBMIT, format="json")
    # queue, cluster size (one aggregate), savepoint + job + event + release (the test's
    # transaction; BEGIN/COMMIT in production), placement and events of the answer. The
    # caller's role and lines are cached on the (shared) user object here; a token request
    # adds the token+user, profile and membership reads: 11 in all.
    assert queries(api("researcher"), "post", "/api/v1/jobs/", SUBMIT) <= 8


@pytest.mark.parametrize(
    "path", ["/api/v1/jobs/", "/api/v1/jobs/?state=pending", "/api/v1/queues/",
             "/api/v1/business-lines/", "/api/v1/nodes/", "/api/v1/metrics/summary/"],
)  # fmt: skip
def test_list_queries_do_not_grow_with_the_number_of_jobs(api, path):
    client = api("researcher")
    for _ in range(3):
        client.post("/api/v1/jobs/", SUBMIT, format="json")
    few = queries(api("researcher"), "get", path)
    for _ in range(30):
        client.post("/api/v1/jobs/", SUBMIT, format="json")
    assert queries(api("researcher"), "get", path) == few
