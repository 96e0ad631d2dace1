"""Every page's address takes only the query parameters the page reads, each once.

A page used to ignore what it did not read: ``/oncall/alerts/?severity=critical`` listed
every alert as if filtered, ``/queues/?window=1h`` showed the usual page as if for the last
hour, ``/?page=2`` the first page. Now anything else is a 400 naming the parameter and
what the address takes (``core.query_forms.takes_query``; the list pages' filter forms
say it in the form, ``QueryForm``), and the JSON addresses the pages fetch answer in the
API's shape. Pages are found by walking the URLconf (``tests/security/pages.py``), so a
page added later is checked without editing this file.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tests.security.pages import page_urls

JSON_ADDRESSES = {"/dashboard/data/", "/jobs/estimate/", "/jobs/feasibility/",
                  "/oncall/rack-map/cells/"}  # fmt: skip


def answering_pages(client: Client, world) -> list[str]:
    """The addresses ``client`` may open with GET (the feasibility check answers 400
    without its parameters)."""
    return [url for url in page_urls(world) if client.get(url).status_code not in (403, 404, 405)]


@pytest.mark.parametrize("role", ["admin", "researcher"])
def test_an_unknown_parameter_is_a_400_naming_it_on_every_page(world, signed_in, role):
    client = signed_in(role)
    urls = answering_pages(client, world)
    assert "/" in urls and "/queues/" in urls and "/jobs/new/" in urls, urls
    if role == "admin":
        assert {"/oncall/alerts/", "/dashboard/", *JSON_ADDRESSES} <= set(urls), urls
    else:
        assert {"/jobs/estimate/", "/jobs/feasibility/"} <= set(urls), urls
    answered = {}
    for url in urls:
        response = client.get(url, {"bogus_filter": "1"})
        body = response.content.decode()
        answered[url] = response.status_code
        assert response.status_code == 400, (url, response.status_code)
        if url in JSON_ADDRESSES:
            assert "bogus_filter" in response.json()["errors"], (url, body)
        else:
            assert "“bogus_filter”" in body, (url, body[:300])
    assert set(answered.values()) == {400}


@pytest.mark.parametrize(
    ("url", "query", "words"),
    [
        ("/", "page=2", "“page” is not a parameter of this address (it takes no parameters)"),
        ("/oncall/alerts/", "severity=critical", "“severity” is not a parameter"),
        ("/queues/", "window=1h", "“window” is not a parameter"),
        (
            "/jobs/new/",
            "gpus=abc",
            "“gpus” is not a parameter of this address (it takes queue, like)",
        ),
        ("/dashboard/", "window=1h&window=24h", "“window” is given 2 times; give it once"),
        ("/jobs/", "state=pending&state=running", "“state” is given 2 times; give it once"),
        ("/quotas/requests/new/", "business_line=llm&reason=x", "it takes business_line, queue"),
    ],
)
def test_the_400_page_says_which_parameter_and_what_the_address_takes(
    signed_in, demo, url, query, words
):
    response = signed_in("admin").get(f"{url}?{query}")
    assert response.status_code == 400
    assert words in response.content.decode()


def test_the_json_addresses_name_the_parameter_in_the_api_s_shape(signed_in, demo):
    client = signed_in("admin")
    response = client.get("/dashboard/data/?window=1h&zoom=2")
    assert response.status_code == 400
    assert response.json() == {
        "errors": {"zoom": ["is not a parameter of this address; it takes window"]}
    }
    response = client.get("/oncall/rack-map/cells/?node=r000-n00&node=r000-n01")
    assert response.json() == {
        "errors": {"node": ["is given 2 times; give it once; it takes node"]}
    }


def test_the_parameters_a_page_reads_still_work(world, signed_in, demo, client):
    admin = signed_in("admin")
    assert admin.get("/dashboard/?window=1h").status_code == 200
    assert admin.get("/dashboard/data/?window=1h").status_code == 200
    assert admin.get(f"/oncall/rack-map/cells/?node={world.node}").status_code == 200
    assert admin.get(f"/oncall/nodes/?name={world.node}").status_code == 302
    assert admin.get("/jobs/new/?queue=llm-finetune").status_code == 200
    assert admin.get("/jobs/?state=running&mine=0&page=1").status_code == 200
    lead = signed_in("lead")
    assert lead.get("/quotas/requests/new/?business_line=llm&guarantee_gpus=4").status_code == 200
    assert client.get("/accounts/login/?next=/jobs/").status_code == 200
    # what the submit page's script sends (static/js/pages/jobs_submit.js)
    estimate = admin.get("/jobs/estimate/?params=7B&precision=bf16&optimizer=adamw&seq_len=4096")
    assert estimate.status_code == 200, estimate.content
    from scheduling.models import Queue

    queue = Queue.objects.get(name="llm-finetune").pk
    feasible = admin.get(
        "/jobs/feasibility/",
        {"queue": queue, "gpus": 4, "tier": "finetune", "preemptible": "yes",
         "estimated_runtime_minutes": 60, "model_name": "llama"},
    )  # fmt: skip
    assert feasible.status_code == 200, feasible.content
    assert feasible.json()["status"] in ("fits_now", "would_wait"), feasible.json()


def test_a_live_refetch_of_a_filtered_page_keeps_its_parameters(signed_in, demo):
    response = signed_in("admin").get(
        "/dashboard/?window=6h", HTTP_X_LIVE_REFRESH="1", HTTP_ACCEPT="text/html"
    )
    assert response.status_code == 200
