"""The parts that make the API fast (docs/api.md, "Throughput"), each still correct:
coalesced refetch events, one Redis pool per process for the cache, the web server's
settings, and job serializers that share their fields."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.cache import caches
from django.db import transaction
from rest_framework import serializers

from core import realtime
from core.env import env_int
from portal.web import default_workers
from scheduling.api import (
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
)
from scheduling.models import Job
from tests.drills import make_quotas_roomy, submit


@pytest.fixture
def sent(monkeypatch) -> list[tuple[float, list]]:
    """What publish_many was asked to send, with when; coalescing state reset."""
    calls: list[tuple[float, list]] = []
    monkeypatch.setattr(
        realtime, "publish_many", lambda events: calls.append((time.monotonic(), events))
    )
    monkeypatch.setattr(realtime, "COALESCE_WINDOW_S", 0.3)
    monkeypatch.setattr(realtime, "_last_sent", {})
    monkeypatch.setattr(realtime, "_trailing", {})
    return calls


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_refetch_events_sends_the_first_at_once_and_the_last_at_the_end(sent):
    started = time.monotonic()
    for n in range(10):
        realtime.publish_coalesced("queues", "queues.updated", {"n": n})
    assert [events for _, events in sent] == [[("queues", "queues.updated", {"n": 0})]]
    deadline = time.monotonic() + 5
    while len(sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [events for _, events in sent] == [
        [("queues", "queues.updated", {"n": 0})],
        [("queues", "queues.updated", {"n": 9})],
    ], "the burst folds into one trailing event with the latest data"
    assert sent[1][0] - started >= 0.25, "the trailing one waits for the window"
    time.sleep(0.35)
    realtime.publish_coalesced("queues", "queues.updated", {"n": 10})
    assert len(sent) == 3, "after a quiet window the next event goes at once"


@pytest.mark.django_db(transaction=True)
def test_a_coalesced_event_waits_for_the_commit_and_dies_with_a_rollback(sent):
    with transaction.atomic():
        realtime.publish_coalesced("queues", "queues.updated", {"n": 1})
        assert sent == []
    assert len(sent) == 1
    with pytest.raises(RuntimeError), transaction.atomic():
        realtime.publish_coalesced("queues", "queues.updated", {"n": 2})
        raise RuntimeError("rolled back")
    time.sleep(0.4)
    assert len(sent) == 1


def test_every_cache_client_of_a_process_shares_one_redis_pool():
    pools = []

    def use_the_cache() -> None:  # a new thread: Django gives it its own cache client
        cache = caches["default"]
        cache.set("pool-probe", 1)
        pools.append(cache._cache.get_client(write=True).connection_pool)

    threads = [threading.Thread(target=use_the_cache) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(pools) == 3 and all(pool is pools[0] for pool in pools)


def test_web_workers_default_to_the_cpus_and_refuse_nonsense(monkeypatch):
    monkeypatch.delenv("WEB_WORKERS", raising=False)
    assert default_workers() >= 1
    monkeypatch.setenv("WEB_WORKERS", "3")
    assert default_workers() == 3
    for bad in ("0", "two", "2.5", "100"):
        monkeypatch.setenv("WEB_WORKERS", bad)
        with pytest.raises(SystemExit, match="WEB_WORKERS"):
            default_workers()


def test_whole_numbers_from_the_environment():
    assert env_int("N", 4, {}) == 4 and env_int("N", 4, {"N": " 7 "}) == 7
    with pytest.raises(Exception, match="N must be a whole number"):
        env_int("N", 4, {"N": "4.5"})
    with pytest.raises(Exception, match="N must be between 1 and 8"):
        env_int("N", 4, {"N": "9"}, minimum=1, maximum=8)


class PlainJobDetail(serializers.ModelSerializer):
    """DRF's usual, per-use field building: the reference the shared fields must match."""

    owner = serializers.CharField(source="owner.username", read_only=True)
    queue = serializers.CharField(source="queue.name", read_only=True)
    business_line = serializers.CharField(source="queue.business_line.name", read_only=True)
    pending_reason = serializers.SerializerMethodField()
    placement = serializers.SerializerMethodField()
    events = JobEventSerializer(many=True, read_only=True)
    after = serializers.SerializerMethodField()
    waiting_for = serializers.SerializerMethodField()
    after_arrays = serializers.SerializerMethodField()
    waiting_for_arrays = serializers.SerializerMethodField()
    hold = serializers.SerializerMethodField()

    class Meta(JobDetailSerializer.Meta):
        pass

    get_pending_reason = JobSerializer.get_pending_reason
    get_placement = JobDetailSerializer.get_placement
    get_after = JobDetailSerializer.get_after
    get_waiting_for = JobDetailSerializer.get_waiting_for
    get_after_arrays = JobDetailSerializer.get_after_arrays
    get_waiting_for_arrays = JobDetailSerializer.get_waiting_for_arrays
    get_hold = JobDetailSerializer.get_hold
    _after = JobDetailSerializer._after


@pytest.mark.django_db
def test_jobs_serialize_as_drf_would_build_them_each_time(api, demo):
    make_quotas_roomy()
    ids = [submit(api("researcher"), name=f"s{i}", gpus=1 + i) for i in range(3)]
    ids.append(submit(api("researcher"), name="after", gpus=1, after=ids[:2]))
    assert (
        api("researcher").post(f"/api/v1/jobs/{ids[0]}/hold/", {"reason": "r"}).status_code == 200
    )
    jobs = list(Job.objects.select_related("queue__business_line", "owner").filter(pk__in=ids))
    for job in jobs:
        assert JobDetailSerializer(job).data == PlainJobDetail(job).data
    assert JobSerializer(jobs, many=True).data == [
        {
            k: v
            for k, v in PlainJobDetail(j).data.items()
            if k
            not in (
                "placement",
                "events",
                "after",
                "waiting_for",
                "after_arrays",
                "waiting_for_arrays",
                "after_condition",
                "singleton",
                "hold",
                "time_limit_at",
            )
        }
        for j in jobs
    ]
    first, second = JobSerializer(jobs[0]), JobSerializer(jobs[1])
    assert first.fields is second.fields, "built once per class"
    assert JobDetailSerializer(jobs[0]).fields is not first.fields


def test_the_submission_body_shares_its_fields_and_keeps_no_state_in_them():
    """``JobSubmitSerializer`` builds its fields once (``core.api.SharedFields``); a bad
    body validated between two good ones leaves nothing behind in the shared fields."""
    good = {"name": "a", "queue": "llm-core", "gpus": 8, "model_name": "llama"}
    first = JobSubmitSerializer(data=good)
    assert first.is_valid(), first.errors
    bad = JobSubmitSerializer(data={"name": "", "queue": "q", "gpus": 0})
    assert not bad.is_valid() and {"name", "gpus"} <= set(bad.errors)
    second = JobSubmitSerializer(data={"name": "b", "queue": "llm-core", "gpus": 2})
    assert second.is_valid(), second.errors
    assert first.fields is bad.fields is second.fields, "built once per class"
    assert first.validated_data["model_name"] == "llama"
    assert second.validated_data["name"] == "b" and second.validated_data["model_name"] == ""
    assert second.validated_data["gpus"] == 2 and "gpus" not in second.errors
