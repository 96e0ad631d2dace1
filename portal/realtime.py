"""Publishing live events to websocket subscribers, only after the DB commit.

Event kinds are dotted (``job.updated``); topics are those of API.md
(``queues``, ``pending``, ``eviction``, ``nodes``, ``alerts``, ``cycles``,
``job.<id>``). A failing channel layer (Redis down) never breaks the writer:
the event is dropped and logged, and pages refetch a snapshot on reconnect.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def group_name(topic: str) -> str:
    """Channels group names allow only [a-zA-Z0-9-_.]."""
    return "live." + topic


def publish(topic: str, kind: str, data: dict[str, Any]) -> None:
    """Send now (use ``publish_on_commit`` inside transactions)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "live.event", "kind": kind, "topic": topic, "data": data}
    try:
        async_to_sync(layer.group_send)(group_name(topic), message)
    except Exception:  # noqa: BLE001 - live updates are best effort by design
        log.warning("live event %s on %s dropped", kind, topic, exc_info=True)


def publish_on_commit(topic: str, kind: str, data: dict[str, Any]) -> None:
    """Send after the current transaction commits (immediately outside one)."""
    transaction.on_commit(lambda: publish(topic, kind, data))
