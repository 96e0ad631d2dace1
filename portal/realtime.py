"""Publishing live events to websocket subscribers, only after the DB commit.

Event kinds are dotted (``job.updated``); topics are those of API.md
(``queues``, ``pending``, ``eviction``, ``nodes``, ``alerts``, ``cycles``,
``job.<id>``). Events published inside a transaction are buffered and sent
together, concurrently, once it commits (a cycle can emit thousands); they are
dropped if it rolls back. A failing channel layer (Redis down) never breaks the
writer: the events are dropped and logged, and pages refetch a snapshot on
reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)
_local = threading.local()
MAX_CONCURRENT_SENDS = 8

Event = tuple[str, str, dict[str, Any]]


def group_name(topic: str) -> str:
    """Channels group names allow only [a-zA-Z0-9-_.]."""
    return "live." + topic


def publish_many(events: list[Event]) -> None:
    """Send events now, concurrently, in one trip to the event loop."""
    layer = get_channel_layer()
    if layer is None or not events:
        return

    async def send_all() -> None:
        results = await asyncio.gather(
            *(
                layer.group_send(
                    group_name(topic),
                    {"type": "live.event", "kind": kind, "topic": topic, "data": data},
                )
                for topic, kind, data in events
            ),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.warning("%d of %d live events dropped: %s", len(failed), len(events), failed[0])

    try:
        async_to_sync(send_all)()
    except Exception:  # noqa: BLE001 - live updates are best effort by design
        log.warning("%d live events dropped", len(events), exc_info=True)


def publish(topic: str, kind: str, data: dict[str, Any]) -> None:
    """Send one event now (use ``publish_on_commit`` inside transactions)."""
    publish_many([(topic, kind, data)])


def _flush() -> None:
    events, _local.events, _local.flush = getattr(_local, "events", []), None, None
    publish_many(events or [])


def publish_on_commit(topic: str, kind: str, data: dict[str, Any]) -> None:
    """Send after the current transaction commits (immediately outside one)."""
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        publish(topic, kind, data)
        return
    flush = getattr(_local, "flush", None)
    registered = flush is not None and any(cb is flush for _, cb, _ in connection.run_on_commit)
    if not registered:  # first event of this transaction (or the last one rolled back)

        def flush() -> None:
            _flush()

        _local.events = []
        _local.flush = flush
        transaction.on_commit(flush)
    _local.events.append((topic, kind, data))
