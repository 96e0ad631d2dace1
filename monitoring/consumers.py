"""The one websocket consumer: authenticated on connect, checked on subscribe, read-only,
and closed when its session ends or its person's access changes (``core.realtime``,
"ending a person's live connections")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from datetime import datetime, timedelta
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.sessions.models import Session
from django.utils import timezone

from core.events import client_frame
from core.realtime import (
    CLOSE_RECONNECT,
    CLOSE_SIGNED_OUT,
    group_name,
    person_group,
    session_group,
)
from monitoring.permissions import may_use_oncall_console

log = logging.getLogger(__name__)
# channels-redis drops a group member it has not seen joined for its group_expiry (a day):
# a dashboard left open on a wall display went quiet after a day, its badge still "live".
GROUP_REFRESH_S = 3600.0
SESSION_RETRY_S = 60.0  # a session that could not be read is read again this much later
DATABASE_SESSION_ENGINES = (
    "django.contrib.sessions.backends.db",
    "django.contrib.sessions.backends.cached_db",
)
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


@database_sync_to_async
def _signed_in_until(session_key: str | None, user_pk: Any) -> datetime | None:
    """When the session ``session_key`` expires if it is still signed in as ``user_pk``
    (the account active, the password it signed in with unchanged), else None. Read
    afresh from the session store, not from the connection's copy."""
    if not session_key:
        return None
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(SimpleNamespace(session=session))
    if not user.is_authenticated or user.pk != user_pk:
        return None
    if settings.SESSION_ENGINE not in DATABASE_SESSION_ENGINES:
        return session.get_expiry_date()  # a store that keeps no expiry of its own
    return (
        Session.objects.filter(session_key=session_key, expire_date__gt=timezone.now())
        .values_list("expire_date", flat=True)
        .first()
    )


class LiveConsumer(AsyncWebsocketConsumer):
    """Pushes ``{"type", "topic", "data"}`` events for the topics a client subscribed to.

    Closes with ``CLOSE_SIGNED_OUT`` when its session expires or is signed out, and with
    ``CLOSE_RECONNECT`` when its person's role, lines or account changed while the session
    stays valid: the client reconnects and subscribes anew, each topic checked again. Joins
    its groups again every hour, so a page left open for days keeps receiving."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_SIGNED_OUT)
            return
        self.topics: set[str] = set()
        session_key = self.scope["session"].session_key
        self.access_groups = [person_group(user.pk), session_group(session_key or "")]
        await self.accept()
        for group in self.access_groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.keeper = asyncio.create_task(self._keep_up())

    async def disconnect(self, code: int) -> None:
        keeper = getattr(self, "keeper", None)
        if keeper is not None and keeper is not asyncio.current_task():
            keeper.cancel()
        for group in getattr(self, "access_groups", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        for topic in getattr(self, "topics", set()):
            await self.channel_layer.group_discard(group_name(topic), self.channel_name)

    async def _keep_up(self) -> None:
        """Until the connection ends: close it once its session has expired (read again at
        each wake: a request may have renewed it), and join its groups again every
        ``GROUP_REFRESH_S``, since the channel layer drops a member it has not seen joined
        for its ``group_expiry`` (a day)."""
        while True:
            try:
                until = await _signed_in_until(
                    self.scope["session"].session_key, self.scope["user"].pk
                )
            except Exception:  # noqa: BLE001 - a database hiccup must not end the connection
                log.warning("live connection: its session could not be read", exc_info=True)
                until = timezone.now() + timedelta(seconds=SESSION_RETRY_S)
            if until is None:
                await self.close(code=CLOSE_SIGNED_OUT)
                return
            await asyncio.sleep(
                min(GROUP_REFRESH_S, max(1.0, (until - timezone.now()).total_seconds()))
            )
            groups = [*self.access_groups, *(group_name(t) for t in list(self.topics))]
            try:
                for group in groups:
                    await self.channel_layer.group_add(group, self.channel_name)
            except Exception:  # noqa: BLE001 - Redis away: joined again at the next wake
                log.warning("live connection: its groups could not be joined again", exc_info=True)

    async def live_access(self, message: dict[str, Any]) -> None:
        """The person's access changed (``recheck``: the session may still be valid) or
        this session ended."""
        still = message.get("recheck") and await _signed_in_until(
            self.scope["session"].session_key, self.scope["user"].pk
        )
        with contextlib.suppress(Exception):  # the client may be gone already
            await self.close(code=CLOSE_RECONNECT if still else CLOSE_SIGNED_OUT)

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
