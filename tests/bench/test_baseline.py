"""The baseline endpoint of bench_api (#16): a trivial authenticated insert, mounted only with
BENCH_ENDPOINTS=1 and never in the OpenAPI schema."""

from __future__ import annotations

import json

import pytest
from django.urls import Resolver404, resolve
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from bench import baseline
from bench.models import BaselineRow

pytestmark = pytest.mark.django_db

URL = "/" + baseline.ROUTE


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def schema_paths(client: APIClient) -> set[str]:
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return set(json.loads(response.content)["paths"])


@pytest.mark.parametrize(
    ("environ", "on"),
    [({}, False), ({"BENCH_ENDPOINTS": "0"}, False), ({"BENCH_ENDPOINTS": "1"}, True)],
)
def test_the_switch_is_off_unless_set(environ, on):
    assert baseline.enabled(environ) is on
    assert len(baseline.urlpatterns(environ)) == int(on)


def test_not_mounted_by_default(demo):
    with pytest.raises(Resolver404):
        resolve(URL)
    response = token_client(demo["researcher"]).post(URL, {"name": "x"}, format="json")
    assert response.status_code == 404
    assert not BaselineRow.objects.exists()


def test_mounted_it_inserts_one_row_per_authenticated_request(demo, bench_endpoints):
    client = token_client(demo["researcher"])
    first = client.post(URL, {"name": "baseline-0-0"}, format="json")
    second = client.post(URL, {}, format="json")
    assert first.status_code == second.status_code == 201
    rows = list(BaselineRow.objects.order_by("pk").values_list("pk", "user__username", "name"))
    assert rows == [
        (first.json()["id"], "researcher", "baseline-0-0"),
        (second.json()["id"], "researcher", ""),
    ]


def test_mounted_it_takes_the_apis_authentication(demo, bench_endpoints):
    assert APIClient().post(URL, {"name": "x"}, format="json").status_code == 401
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    assert bad.post(URL, {"name": "x"}, format="json").status_code == 401
    assert token_client(demo["researcher"]).get(URL).status_code == 405
    assert not BaselineRow.objects.exists()


@pytest.mark.parametrize("body", [["x"], {"name": 7}, {"name": "x" * 101}, {"name": None}])
def test_mounted_it_refuses_bad_bodies_with_the_error_envelope(demo, bench_endpoints, body):
    response = token_client(demo["researcher"]).post(URL, body, format="json")
    assert response.status_code == 400
    assert "name" in response.json()["errors"]
    assert not BaselineRow.objects.exists()


def test_never_in_the_schema_mounted_or_not(demo, api):
    assert not any("bench" in path for path in schema_paths(api("admin")))


def test_not_in_the_schema_when_mounted_either(demo, api, bench_endpoints):
    assert resolve(URL).url_name == "bench-baseline"
    assert not any("bench" in path for path in schema_paths(api("admin")))
