"""Inputs that crashed the API (500) before core.security's parser and paginator, kept
as plain regression cases next to the generated ones of test_fuzz_api.py."""

from __future__ import annotations

import pytest

from scheduling.models import Job

pytestmark = pytest.mark.django_db

LISTS = ["jobs", "nodes", "queues", "business-lines", "alerts", "quota-requests"]


@pytest.mark.parametrize(
    "body",
    [b"[" * 5000 + b"]" * 5000, b'{"a":' * 3000 + b"1" + b"}" * 3000, b"[" * 100_000],
    ids=["arrays", "objects", "unclosed"],
)
def test_too_deeply_nested_json_is_a_400_and_stores_nothing(api, body):
    response = api("researcher").generic("POST", "/api/v1/jobs/", body,
                                         content_type="application/json")  # fmt: skip
    assert response.status_code == 400
    assert "nested too deeply" in str(response.data["errors"])
    assert Job.objects.count() == 0


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize("query", ["limit=" + "9" * 30, "offset=" + "9" * 30,
                                   "limit=" + "9" * 30 + "&offset=" + "9" * 30])  # fmt: skip
def test_huge_limit_and_offset_are_clamped_not_a_500(api, path, query):
    response = api("admin").get(f"/api/v1/{path}/?{query}")
    assert response.status_code == 200
    assert len(response.data["results"]) <= 1000


def test_a_page_holds_at_most_1000_rows_and_links_to_the_next(api):
    from scheduling.models import Node

    first = Node.objects.first()
    Node.objects.bulk_create(
        [Node(name=f"x{i:05d}", rack=first.rack, block=first.block, gpu_model=first.gpu_model,
              gpus_total=8, gpu_memory_gb=first.gpu_memory_gb, rdma=True) for i in range(1100)]
    )  # fmt: skip
    page = api("admin").get("/api/v1/nodes/?limit=5000").data
    assert len(page["results"]) == 1000 and page["count"] == 1104
    assert "offset=1000" in page["next"]
