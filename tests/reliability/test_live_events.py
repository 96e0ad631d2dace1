"""A big cycle's live events: none is refused, and the page-wide ones are not kept waiting.

A cycle that starts or ends many jobs emits one event per job, then ``cycle.completed``
and ``queues.updated`` last. redis-py's asyncio pool refuses (it does not queue) a 101st
concurrent connection, so an unbounded burst of sends lost everything past the first
hundred, ``cycle.completed`` included; and sent in publication order, the few events every
dashboard waits for would queue behind thousands of per-job ones.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from core import realtime
from core.realtime import group_name, publish_many

JOB_EVENTS = 5000
WATCHED_JOBS = 50  # a channel holds at most 100 messages: watch a few of the job topics
STEP = JOB_EVENTS // WATCHED_JOBS


@pytest.fixture(autouse=True)
def patient_publisher(monkeypatch):
    """What these tests check is that no event is refused and the order, not Redis's speed:
    on a loaded 2-core machine 5,000 sends took longer than the publisher's time budget
    (then the pause it starts leaked into the next test)."""
    monkeypatch.setattr(realtime, "PUBLISH_TIMEOUT_S", 60.0)
    monkeypatch.setattr(realtime, "_paused_until", 0.0)


def receive_a_big_flush() -> list[dict]:
    """Publish a cycle's worth of events; what a channel watching some of them receives."""
    layer = get_channel_layer()
    events = [(f"job.{i}", "job.updated", {"id": i}) for i in range(JOB_EVENTS)]
    events += [("cycles", "cycle.completed", {"id": 1}), ("queues", "queues.updated", {})]

    async def run() -> list[dict]:
        channel = await layer.new_channel()
        for topic in ["cycles", "queues", *(f"job.{i}" for i in range(0, JOB_EVENTS, STEP))]:
            await layer.group_add(group_name(topic), channel)
        await sync_to_async(publish_many)(events)
        received: list[dict] = []
        # Until every watched job's event is in: a stray page-wide event (a coalesced
        # ``queues.updated`` an earlier test left on its timer) may come in between.
        while sum(m["kind"] == "job.updated" for m in received) < WATCHED_JOBS:
            received.append(await asyncio.wait_for(layer.receive(channel), 5))
            assert len(received) < 2 * WATCHED_JOBS, "far more messages than were sent"
        return received

    return async_to_sync(run)()


def test_a_flush_of_thousands_of_events_loses_none(on_own_redis, caplog):
    caplog.set_level(logging.WARNING, logger="core.realtime")
    received = receive_a_big_flush()
    assert "dropped" not in caplog.text
    jobs = [m["data"]["id"] for m in received if m["kind"] == "job.updated"]
    assert jobs == list(range(0, JOB_EVENTS, STEP)), "all of them, in order"
    assert {m["kind"] for m in received} == {"job.updated", "cycle.completed", "queues.updated"}


def test_page_wide_events_are_sent_before_the_per_job_ones(on_own_redis):
    kinds = [m["kind"] for m in receive_a_big_flush()]
    first_job = kinds.index("job.updated")
    assert {"cycle.completed", "queues.updated"} <= set(kinds[:first_job]), kinds[:5]
    assert kinds.index("cycle.completed") < kinds.index("queues.updated"), kinds[:5]


def test_a_thread_running_an_event_loop_still_publishes(on_own_redis, caplog):
    """Synchronous code called from a thread that runs a loop (a test driving Playwright's
    sync API seeds a demo that way): asgiref's ``async_to_sync`` refuses that thread, and
    the events were dropped with a warning ("You cannot use AsyncToSync ...")."""
    caplog.set_level(logging.WARNING, logger="core.realtime")
    layer = get_channel_layer()

    async def run() -> dict:
        channel = await layer.new_channel()
        await layer.group_add(group_name("cycles"), channel)
        publish_many([("cycles", "cycle.completed", {"id": 7})])  # sync, inside this loop
        return await asyncio.wait_for(layer.receive(channel), 5)

    received = asyncio.run(run())
    assert received["kind"] == "cycle.completed" and received["data"] == {"id": 7}
    assert "dropped" not in caplog.text
