"""CSV exports (#18): jobs, queues and a line's usage history, from the API and the pages;
the list's filters apply, every selected row comes out, text cells that could start a
spreadsheet formula are escaped, times are ISO 8601 UTC."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from core.csv_export import escape_formula, write_csv
from quotas.models import BusinessLine, UsageSample
from scheduling.clock import cluster_now
from tests.conftest import DEMO_PASSWORD

pytestmark = pytest.mark.django_db


def rows_of(response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith("attachment;")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.DictReader(io.StringIO(body.decode("utf-8"))))


def submit(api, user: str, name: str, queue: str = "llm-finetune", gpus: int = 1) -> dict:
    response = api(user).post(
        "/api/v1/jobs/", {"name": name, "queue": queue, "gpus": gpus}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def llm_queue(api) -> str:
    queues = api("researcher").get("/api/v1/queues/?business_line__name=llm").json()["results"]
    return queues[0]["name"] if queues else "llm-finetune"


def test_formula_cells_are_escaped_and_numbers_kept():
    assert escape_formula("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    for text in ("+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"):
        assert escape_formula(text).startswith("'")
    assert escape_formula("plain = text") == "plain = text"
    text = write_csv(
        [{"a": -5, "b": "=1+1", "t": "2026-12-01T04:10:00+01:00", "d": {"x": 1}}],
        ["a", "b", "t", "d"],
        ["t"],
    )
    assert text.splitlines()[1] == '-5,\'=1+1,2026-12-01T03:10:00Z,"{""x"": 1}"'


def test_jobs_csv_has_every_row_the_filters_select_with_escaped_names(demo, api):
    queue = llm_queue(api)
    evil = submit(api, "researcher", "=cmd|' /C calc'!A0", queue)
    for i in range(3):
        submit(api, "researcher", f"-run-{i}", queue)
    rows = rows_of(api("researcher").get("/api/v1/jobs.csv?mine=1"))
    assert len(rows) == 4
    by_id = {int(r["id"]): r for r in rows}
    assert by_id[evil["id"]]["name"] == "'=cmd|' /C calc'!A0"
    assert all(r["name"].startswith("'-run-") for r in rows if int(r["id"]) != evil["id"])
    submitted = by_id[evil["id"]]["submitted_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", submitted)
    assert rows[0]["state"] == "pending" and rows[0]["owner"] == "researcher"
    # the same filters as the list: state, and nobody else's jobs for a researcher
    assert rows_of(api("researcher").get("/api/v1/jobs.csv?state=running")) == []
    assert rows_of(api("researcher2").get("/api/v1/jobs.csv?mine=1")) == []
    # more rows than one page of the JSON list come out (not paginated)
    json_count = api("researcher").get("/api/v1/jobs/?mine=1&limit=2").json()
    assert len(json_count["results"]) == 2 and json_count["count"] == 4


def test_bad_filters_are_json_400_not_csv(demo, api):
    for url in (
        "/api/v1/jobs.csv?nope=1",
        "/api/v1/jobs.csv?state=",
        "/api/v1/queues.csv?tier=x",
        "/api/v1/queues.csv?format=json",
        "/api/v1/business-lines/1/usage.csv?format=AAA",
    ):
        response = api("researcher").get(url)
        assert response.status_code == 400, url
        assert response["Content-Type"].startswith("application/json")
        assert "errors" in response.json()
    assert api(None).get("/api/v1/jobs.csv").status_code in (401, 403)


def test_queues_csv_matches_the_json_list(demo, api):
    listed = api("lead").get("/api/v1/queues/").json()
    rows = rows_of(api("lead").get("/api/v1/queues.csv"))
    assert [int(r["id"]) for r in rows] == [q["id"] for q in listed["results"]]
    for row, queue in zip(rows, listed["results"], strict=True):
        for column in ("name", "tier", "quota_gpus", "used_gpus", "pending_jobs"):
            assert row[column] == ("" if queue[column] is None else str(queue[column]))
    one = rows_of(api("lead").get(f"/api/v1/queues.csv?name={rows[0]['name']}"))
    assert len(one) == 1


def test_line_usage_csv(demo, api):
    line = BusinessLine.objects.get(name="llm")
    now = cluster_now()
    queue = line.queues.order_by("name").first()
    UsageSample.objects.create(
        at=now - timedelta(hours=1), business_line=line, used_gpus=8, pending_gpus=2
    )
    UsageSample.objects.create(
        at=now - timedelta(hours=1), business_line=line, queue=queue, used_gpus=5
    )
    UsageSample.objects.create(at=now - timedelta(days=20), business_line=line, used_gpus=99)
    rows = rows_of(api("researcher2").get(f"/api/v1/business-lines/{line.pk}/usage.csv?days=7"))
    assert [(r["queue"], r["used_gpus"]) for r in rows] == [("", "8"), (queue.name, "5")]
    at = datetime.fromisoformat(rows[0]["at"].replace("Z", "+00:00"))
    assert rows[0]["at"].endswith("Z") and at.tzinfo is not None
    assert abs(at - (now - timedelta(hours=1)).astimezone(UTC)) < timedelta(seconds=1)
    wide = rows_of(api("researcher").get(f"/api/v1/business-lines/{line.pk}/usage.csv?days=30"))
    assert len(wide) == 3
    for bad in ("days=0", "days=91", "days=x", "days=٧", "days=99999999999999999999", "who=me"):
        response = api("researcher").get(f"/api/v1/business-lines/{line.pk}/usage.csv?{bad}")
        assert response.status_code == 400, bad
    for missing in ("999999", "99999999999999999999999", "x"):
        response = api("researcher").get(f"/api/v1/business-lines/{missing}/usage.csv")
        assert response.status_code == 404, missing


def test_pages_link_their_csv_with_their_filters(demo, api):
    client = Client()
    assert client.login(username="admin", password=DEMO_PASSWORD)
    page = client.get("/jobs/?state=pending&queue=&mine=1").content.decode()
    link = re.search(r'<a href="([^"]+)" id="jobs-csv"', page).group(1).replace("&amp;", "&")
    assert link.startswith("/api/v1/jobs.csv?") and "state=pending" in link and "queue=" not in link
    assert client.get(link).status_code == 200  # the session is enough
    # a filter given twice: the page reads the last, and so does its link (the API
    # refuses a filter given twice)
    page = client.get("/jobs/?state=running&state=pending").content.decode()
    link = re.search(r'<a href="([^"]+)" id="jobs-csv"', page).group(1).replace("&amp;", "&")
    assert link == "/api/v1/jobs.csv?state=pending&mine=0"
    assert client.get(link).status_code == 200
    assert 'id="queues-csv"' in client.get("/queues/").content.decode()
    line = BusinessLine.objects.get(name="llm")
    detail = client.get(f"/quotas/lines/{line.name}/").content.decode()
    usage = re.search(r'<a href="([^"]+)" id="usage-csv"', detail).group(1)
    assert rows_of(client.get(usage)) == []


def test_an_export_cut_at_the_row_cap_says_so(demo, api, monkeypatch):
    """``every row`` up to MAX_ROWS; past it the CSV is cut and the header says so, never
    silently (a million-job history exported whole would be cut without a word)."""
    from core import csv_export

    queue = llm_queue(api)
    for i in range(3):
        submit(api, "researcher", f"run-{i}", queue)
    monkeypatch.setattr(csv_export, "MAX_ROWS", 2)
    response = api("researcher").get("/api/v1/jobs.csv?mine=1")
    assert len(rows_of(response)) == 2
    assert response[csv_export.TRUNCATED_HEADER].startswith("2 rows; more matched")
    monkeypatch.setattr(csv_export, "MAX_ROWS", 3)
    response = api("researcher").get("/api/v1/jobs.csv?mine=1")
    assert len(rows_of(response)) == 3 and csv_export.TRUNCATED_HEADER not in response


def test_an_export_is_streamed_a_batch_at_a_time_in_the_lists_order(demo, api, monkeypatch):
    """The CSV is read and written ``EXPORT_BATCH`` rows at a time (a 100,000-row export
    built whole held 577 MiB): the rows are the JSON list's, in its order, and the
    queries grow with the batches, not the rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from core import csv_export

    queue = llm_queue(api)
    for i in range(7):
        submit(api, "researcher", f"batch-{i}", queue)
    listed = [j["id"] for j in api("researcher").get("/api/v1/jobs/?mine=1").json()["results"]]
    monkeypatch.setattr(csv_export, "EXPORT_BATCH", 3)
    with CaptureQueriesContext(connection) as queries:
        response = api("researcher").get("/api/v1/jobs.csv?mine=1")
        chunks = list(response.streaming_content)
    assert response.streaming and len(chunks) == 1 + 3  # the header, then 3 + 3 + 1 rows
    rows = list(csv.DictReader(io.StringIO(b"".join(chunks).decode("utf-8"))))
    assert [int(r["id"]) for r in rows] == listed and len(listed) == 7
    with CaptureQueriesContext(connection) as fewer:
        monkeypatch.setattr(csv_export, "EXPORT_BATCH", 7)
        list(api("researcher").get("/api/v1/jobs.csv?mine=1").streaming_content)
    assert len(queries) - len(fewer) == 2  # two more batches, one query each


def test_the_usage_export_has_every_sample_of_its_period_past_the_row_cap(demo, api, monkeypatch):
    """Samples are kept 30 days, so the usage export is not cut at ``MAX_ROWS``: with the
    cap at 100,000 it kept the oldest rows, under 14 days of a line with four queues, and
    said nothing."""
    from core import csv_export
    from portal import csv_views

    monkeypatch.setattr(csv_export, "MAX_ROWS", 2)
    monkeypatch.setattr(csv_views, "MAX_ROWS", 2, raising=False)  # where it was read before
    line = BusinessLine.objects.get(name="llm")
    now = cluster_now()
    for minutes in (40, 30, 20, 10):
        UsageSample.objects.create(
            at=now - timedelta(minutes=minutes), business_line=line, used_gpus=minutes
        )
    response = api("researcher").get(f"/api/v1/business-lines/{line.pk}/usage.csv?days=1")
    assert [r["used_gpus"] for r in rows_of(response)] == ["40", "30", "20", "10"]
    assert csv_export.TRUNCATED_HEADER not in response
