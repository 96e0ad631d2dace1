"""The one websocket consumer: authenticated on connect, checked on subscribe, read-only."""

from __future__ import annotations

import json
import re
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from core.events import client_frame
from core.realtime import group_name
from monitoring.permissions import may_use_oncall_console

PUBLIC_TOPICS = {"queues", "pending", "eviction", "nodes", "cycles"}
ONCALL_TOPICS = {"alerts"}
# ASCII digits (\d takes "٢" too); \Z, not $, which also matches before a final "\n"; no
# leading zero: "job.07" named job 7 but is a topic no event is published to (job.7's are)
JOB_TOPIC = re.compile(r"^job\.([1-9][0-9]{0,17})\Z")
MAX_MESSAGE_BYTES = 4096
MAX_SUBSCRIPTIONS = 50


def _utf8_size(text: str) -> int:
    """Bytes of ``text`` on the wire (UTF-8): the limit is 4 KiB, not 4,096 characters,
    which in "é" or "漢" were 8 or 12 KiB."""
    return len(text.encode("utf-8", "surrogatepass"))


@database_sync_to_async
def _may_subscribe(user: Any, topic: str) -> str | None:
    """None when allowed, else the error to send back."""
    if topic in PUBLIC_TOPICS:
        return None
    if topic in ONCALL_TOPICS:
        return None if may_use_oncall_console(user) else f"no permission for topic {topic!r}"
    match = JOB_TOPIC.match(topic)
    if match:
        from scheduling.selectors import get_job_for_user

        return None if get_job_for_user(user, int(match.group(1))) else "no such job"
    return f"unknown topic {topic[:80]!r}"


class LiveConsumer(AsyncWebsocketConsumer):
    """Pushes ``{"type", "topic", "data"}`` events for the topics a client subscribed to."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.topics: set[str] = set()
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for topic in getattr(self, "topics", set()):
            await self.channel_layer.group_discard(group_name(topic), self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        error = None
        topic = None
        if text_data is None or _utf8_size(text_data) > MAX_MESSAGE_BYTES:
            error = "send one JSON text message of at most 4 KiB"
        else:
            try:
                message = json.loads(text_data)
            except (ValueError, RecursionError):  # deeply nested input overflows the parser
                message = None
            if not isinstance(message, dict):
                error = 'expected a JSON object like {"subscribe": "queues"}'
            elif "unsubscribe" in message and isinstance(message["unsubscribe"], str):
                topic = message["unsubscribe"]
                if topic in self.topics:
                    self.topics.discard(topic)
                    await self.channel_layer.group_discard(group_name(topic), self.channel_name)
                await self.send(json.dumps({"unsubscribed": topic[:80]}))
                return
            elif not isinstance(message.get("subscribe"), str):
                error = 'expected {"subscribe": "<topic>"}'
            else:
                topic = message["subscribe"]
                if len(self.topics) >= MAX_SUBSCRIPTIONS:
                    error = "too many subscriptions"
                else:
                    error = await _may_subscribe(self.scope["user"], topic)
        if error:
            await self.send(json.dumps({"error": error}))
            return
        assert topic is not None
        self.topics.add(topic)
        await self.channel_layer.group_add(group_name(topic), self.channel_name)
        await self.send(json.dumps({"subscribed": topic}))

    async def live_event(self, event: dict[str, Any]) -> None:
        await self.send(json.dumps(client_frame(event)))
