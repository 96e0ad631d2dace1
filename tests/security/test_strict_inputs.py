"""Strict inputs (#16 finding 9): digits 0-9 only for ids and counts, a 400 for unknown or
malformed filters and paging, checkpoint URIs without '.'/'..' segments."""

from __future__ import annotations

import pytest

from monitoring.consumers import JOB_TOPIC
from quotas.models import Queue
from scheduling.models import Job, Node
from scheduling.services import JobRequest, submit_job

pytestmark = pytest.mark.django_db

ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")


def body(**fields) -> dict:
    return {"name": "strict", "queue": "llm-experiment", "gpus": 1, **fields}


def test_an_id_in_other_digits_is_not_found(api, demo):
    job = submit_job(demo["researcher"], JobRequest(name="mine", queue="llm-experiment", gpus=1))
    client = api("researcher")
    assert client.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    for digits in (ARABIC_INDIC, FULL_WIDTH):
        other = str(job.pk).translate(digits)
        response = client.get(f"/api/v1/jobs/{other}/")
        assert response.status_code == 404 and response.json() == {"detail": "Not found."}
        assert client.post(f"/api/v1/jobs/{other}/cancel/").status_code == 404
    assert Job.objects.get(pk=job.pk).state == "pending"
    queue = Queue.objects.first()
    assert client.get(f"/api/v1/queues/{str(queue.pk).translate(ARABIC_INDIC)}/").status_code == 404


@pytest.mark.parametrize("gpus", ["０１", "١", "1\u0660", " ٢ "])
def test_counts_in_other_digits_are_refused(api, gpus):
    count = Job.objects.count()
    response = api("researcher").post("/api/v1/jobs/", body(gpus=gpus), format="json")
    assert response.status_code == 400 and "gpus" in response.json()["errors"]
    assert Job.objects.count() == count


def test_ascii_digit_strings_still_count(api):
    response = api("researcher").post("/api/v1/jobs/", body(gpus="2"), format="json")
    assert response.status_code == 201 and response.json()["gpus"] == 2


def test_a_queue_id_in_other_digits_is_not_a_queue(api):
    queue = Queue.objects.get(name="llm-experiment")
    client = api("researcher")
    assert client.post("/api/v1/jobs/", body(queue=str(queue.pk)), format="json").status_code == 201
    other = str(queue.pk).translate(ARABIC_INDIC)
    response = client.post("/api/v1/jobs/", body(queue=other), format="json")
    assert response.status_code == 400 and "queue" in response.json()["errors"]
    listed = client.get(f"/api/v1/jobs/?queue={other}").json()
    assert listed["count"] == 0, "the filter reads it as a queue name, which no queue has"


@pytest.mark.parametrize(
    "query,param",
    [("?rdma=maybe", "rdma"), ("?bogus=1", "bogus"), ("?limit=abc", "limit"),
     ("?offset=x", "offset"), ("?limit=%D9%A7", "limit"), ("?limit=-5", "limit")],
)  # fmt: skip
def test_malformed_or_unknown_query_parameters_are_a_400_naming_them(api, query, param):
    response = api("oncall").get("/api/v1/nodes/" + query)
    assert response.status_code == 400
    assert param in response.json()["errors"]


@pytest.mark.parametrize("query", ["?rdma=true", "?rdma=0", "?limit=2&offset=1", "?format=json"])
def test_well_formed_queries_still_work(api, query):
    assert api("oncall").get("/api/v1/nodes/" + query).status_code == 200


@pytest.mark.parametrize(
    "word,rdma",
    [("true", True), ("1", True), ("yes", True), ("YES", True), (" true", True),
     ("false", False), ("0", False), ("no", False), ("No", False), ("false ", False)],
)  # fmt: skip
def test_every_yes_no_word_a_filter_takes_filters(api, word, rdma):
    # django-filter reads only true/false/1/0: ``?rdma=no`` was taken and then ignored,
    # listing the RDMA nodes too.
    first = Node.objects.order_by("name").first()
    Node.objects.filter(pk=first.pk).update(rdma=False)
    listed = api("oncall").get("/api/v1/nodes/", {"rdma": word}).json()["results"]
    expected = set(Node.objects.filter(rdma=rdma).values_list("name", flat=True))
    assert expected and {n["name"] for n in listed} == expected


@pytest.mark.parametrize(
    "path,query,param",
    [("/api/v1/nodes/", "state=bogus&state=ready", "state"),
     ("/api/v1/jobs/", "mine=1&mine=0", "mine"),
     ("/api/v1/jobs/", "owner=researcher&owner=lead", "owner"),
     ("/api/v1/alerts/", "status=open&status=resolved", "status"),
     ("/api/v1/quota-requests/", "state=pending&state=pending", "state"),
     ("/api/v1/nodes/", "limit=x&limit=5", "limit"),
     ("/api/v1/queues/", "offset=1&offset=2", "offset"),
     ("/api/v1/jobs.csv", "state=pending&state=running", "state")],
)  # fmt: skip
def test_a_query_parameter_given_twice_is_a_400_naming_it(api, path, query, param):
    # Each takes one value, and django-filter and DRF read the last: the first
    # (``bogus``, ``limit=x``) was silently dropped.
    response = api("admin").get(f"{path}?{query}")
    assert response.status_code == 400, response.content
    assert response.json() == {"errors": {param: ["given 2 times; give it once"]}}


def test_an_unknown_filter_names_the_ones_the_list_takes(api):
    errors = api("researcher").get("/api/v1/jobs/?stat=pending").json()["errors"]
    assert "state" in errors["stat"][0]


@pytest.mark.parametrize(
    "path",
    ["s3:/../../etc", "s3://bucket/../../etc", "s3://../etc", "nfs://host/./x",
     "s3:bucket/x", "s3://", "s3://bucket\\..\\x"],
)  # fmt: skip
def test_checkpoint_uris_with_dot_segments_are_refused(api, path):
    response = api("researcher").post("/api/v1/jobs/", body(checkpoint_path=path), format="json")
    assert response.status_code == 400
    assert "checkpoint_path" in response.json()["errors"]


@pytest.mark.parametrize("path", ["s3://bucket/run-1/", "nfs://filer/ckpt/llama", "gs://b/x..y"])
def test_ordinary_checkpoint_uris_are_taken(api, path):
    response = api("researcher").post("/api/v1/jobs/", body(checkpoint_path=path), format="json")
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize(
    "topic,ok",
    [
        ("job.12", True),
        ("job.١٢", False),
        ("job.１２", False),
        ("job.", False),
        ("job.12\n", False),
        ("job.012", False),
        ("job.0", False),
    ],
)
def test_job_topics_take_ascii_ids_only(topic, ok):
    assert bool(JOB_TOPIC.match(topic)) is ok


def test_the_api_docs_page_is_for_signed_in_people(client, api):
    response = client.get("/api/docs/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert client.get("/api/schema/").status_code == 200, "the schema stays public (API.md)"


def test_a_list_without_filters_still_pages_and_names_what_it_takes():
    from rest_framework import generics, serializers
    from rest_framework.test import APIRequestFactory, force_authenticate

    from core.filters import StrictFilterBackend
    from quotas.models import BusinessLine

    class Plain(generics.ListAPIView):
        queryset = BusinessLine.objects.all()
        serializer_class = type(
            "S", (serializers.ModelSerializer,), {"Meta": type("Meta", (), {
                "model": BusinessLine, "fields": ["name"]})},
        )  # fmt: skip
        filter_backends = [StrictFilterBackend]

    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("plain")
    view = Plain.as_view()
    paged = APIRequestFactory().get("/x/?limit=1")
    force_authenticate(paged, user)
    assert view(paged).status_code == 200
    unknown = APIRequestFactory().get("/x/?state=1")
    force_authenticate(unknown, user)
    answer = view(unknown)
    assert answer.status_code == 400
    assert answer.data["errors"]["state"] == ["unknown filter; this list takes: no filters"]


@pytest.mark.parametrize(
    "field,text,code",
    [("name", "\u202egnp.exe", "U+202E"), ("name", "run\u200b1", "U+200B"),
     ("name", "\u2066isolated\u2069", "U+2066"), ("model_name", "llama\ufeff-7b", "U+FEFF")],
)  # fmt: skip
def test_a_name_with_invisible_formatting_is_refused_through_the_api(api, field, text, code):
    # "\u202egnp.exe" reads "exe.png" on a page; "run\u200b1" looks like "run1"
    count = Job.objects.count()
    response = api("researcher").post("/api/v1/jobs/", body(**{field: text}), format="json")
    assert response.status_code == 400
    (message,) = response.json()["errors"][field]
    assert code in message and "Invisible formatting characters" in message
    assert Job.objects.count() == count


def test_a_name_with_invisible_formatting_is_refused_by_the_form(signed_in):
    count = Job.objects.count()
    response = signed_in("researcher").post(
        "/jobs/new/", {"name": "\u202egnp.exe", "queue": "llm-experiment", "gpus": "1"}
    )
    assert response.status_code == 200  # the form again, with the error on the field
    assert "Invisible formatting characters are not allowed in a name (U+202E" in (
        response.content.decode()
    )
    assert Job.objects.count() == count


def test_names_in_other_scripts_and_emoji_sequences_are_taken(api):
    # the joiners (U+200C, U+200D) are part of scripts and emoji, not tricks
    # and so do the tag characters of a subdivision flag (Scotland: U+1F3F4 and tags)
    scotland = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    for name in ("نام\u200cکار", "👩\u200d💻 run", "日本語のジョブ", "naïve", f"{scotland} run"):
        response = api("researcher").post("/api/v1/jobs/", body(name=name), format="json")
        assert response.status_code == 201 and response.json()["name"] == name


def test_a_token_name_with_invisible_formatting_is_refused(api):
    response = api("researcher").post(
        "/api/v1/tokens/", {"name": "ci\u202e", "expires_in_days": 30}, format="json"
    )
    assert response.status_code == 400 and "U+202E" in response.json()["errors"]["name"][0]


def test_the_schema_s_name_pattern_refuses_exactly_what_the_server_refuses(api):
    """The job body's ``name`` and ``model_name`` and the token's ``name`` carry a pattern
    that names the invisible characters the services refuse: a fuzzer drawing from the
    schema found U+00AD accepted by the pattern and refused by the portal."""
    import re
    import unicodedata

    from core.security import invisible_character_error

    schema = api("researcher").get("/api/schema/?format=json").json()["components"]["schemas"]
    patterns = {
        "name": schema["JobSubmit"]["properties"]["name"]["pattern"],
        "model_name": schema["JobSubmit"]["properties"]["model_name"]["pattern"],
        "token": schema["CreateToken"]["properties"]["name"]["pattern"],
    }
    format_characters = [
        ch for ch in map(chr, range(0x10000)) if unicodedata.category(ch) == "Cf"
    ] + ["\U000e0067", "\U000e0001"]  # beyond the BMP: tags, allowed
    for field, pattern in patterns.items():
        for ch in format_characters:
            refused = invisible_character_error(f"a{ch}b") is not None
            # the rule, from Unicode itself: every Cf of the BMP but the two joiners
            assert refused == (ord(ch) < 0x10000 and ch not in "\u200c\u200d"), f"U+{ord(ch):04X}"
            assert (re.match(pattern, f"a{ch}b") is None) == refused, (field, f"U+{ord(ch):04X}")
