"""Publishing live events to websocket subscribers, only after the DB commit.

Event kinds are dotted (``job.updated``); topics are those of API.md
(``queues``, ``pending``, ``eviction``, ``nodes``, ``alerts``, ``cycles``,
``job.<id>``). Events published inside a transaction are buffered and sent
together, concurrently, once it commits (a cycle can emit thousands); they are
dropped if it rolls back. A failing channel layer (Redis down) never breaks the
writer: the events are dropped and logged, and pages refetch a snapshot on
reconnect. A Redis that does not answer is given ``PUBLISH_TIMEOUT_S``, then
skipped for ``PUBLISH_PAUSE_S``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from core.events import channel_message

log = logging.getLogger(__name__)
_local = threading.local()
MAX_CONCURRENT_SENDS = 8
# A Redis that accepts connections but never answers (frozen, partitioned) would
# otherwise hold the caller forever: an API request, or a worker after its commit.
# A flush is allowed PUBLISH_TIMEOUT_S plus 1 s per 2,000 events (about 5,000 are sent
# per second here). After a timeout this process drops events at once for a while, so
# a frozen Redis costs one caller five seconds rather than every caller.
PUBLISH_TIMEOUT_S = 5.0
PUBLISH_MIN_RATE = 2000.0
PUBLISH_PAUSE_S = 10.0
_paused_until = 0.0

Event = tuple[str, str, dict[str, Any]]


def group_name(topic: str) -> str:
    """Channels group names allow only [a-zA-Z0-9-_.]."""
    return "live." + topic


def publish_many(events: list[Event]) -> None:
    """Send events now, concurrently, in one trip to the event loop."""
    global _paused_until
    layer = get_channel_layer()
    if layer is None or not events:
        return
    if time.monotonic() < _paused_until:
        log.warning("%d live events dropped: Redis timed out a moment ago", len(events))
        return

    async def send_all() -> None:
        # At most MAX_CONCURRENT_SENDS at a time: each send holds a connection of the
        # layer's pool, and redis-py refuses (does not queue) beyond its 100 connections.
        gate = asyncio.Semaphore(MAX_CONCURRENT_SENDS)

        async def send(topic: str, kind: str, data: dict[str, Any]) -> None:
            async with gate:
                await layer.group_send(group_name(topic), channel_message(topic, kind, data))

        # Page-wide topics (cycles, queues, pending, nodes, alerts: a few events that every
        # dashboard waits for) go before the per-job ones (thousands after a big cycle);
        # the order within each topic is kept.
        page_wide = [e for e in events if not e[0].startswith("job.")]
        per_job = [e for e in events if e[0].startswith("job.")]

        async def send_in_two_waves() -> list:
            first: list = []
            for e in page_wide:  # few, and in publication order
                try:
                    first.append(await send(*e))
                except Exception as exc:  # noqa: BLE001 - reported with the rest
                    first.append(exc)
            rest = await asyncio.gather(*(send(*e) for e in per_job), return_exceptions=True)
            return [*first, *rest]

        results = await asyncio.wait_for(
            send_in_two_waves(), PUBLISH_TIMEOUT_S + len(events) / PUBLISH_MIN_RATE
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.warning("%d of %d live events dropped: %s", len(failed), len(events), failed[0])

    try:
        _run_from_sync_code(send_all)
    except TimeoutError:
        _paused_until = time.monotonic() + PUBLISH_PAUSE_S
        log.warning(
            "%d live events dropped: Redis did not answer in time; not trying again for %.0f s",
            len(events), PUBLISH_PAUSE_S,
        )  # fmt: skip
    except Exception:  # noqa: BLE001 - live updates are best effort by design
        log.warning("%d live events dropped", len(events), exc_info=True)


def _run_from_sync_code(coroutine_function: Any) -> None:
    """Run ``coroutine_function`` to its end from synchronous code. A thread that already
    runs an event loop (a test driving Playwright's sync API; asgiref refuses it) hands the
    work to a short-lived thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async_to_sync(coroutine_function)()
        return
    errors: list[BaseException] = []

    def run() -> None:
        try:
            async_to_sync(coroutine_function)()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller
            errors.append(exc)

    worker = threading.Thread(target=run, name="realtime-publish")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]


def publish(topic: str, kind: str, data: dict[str, Any]) -> None:
    """Send one event now (use ``publish_on_commit`` inside transactions)."""
    publish_many([(topic, kind, data)])


COALESCE_WINDOW_S = 0.5
_coalesce_lock = threading.Lock()
_last_sent: dict[str, float] = {}
_trailing: dict[str, Event] = {}


def publish_coalesced(topic: str, kind: str, data: dict[str, Any]) -> None:
    """After commit, send a "refetch" event at most once per topic per COALESCE_WINDOW_S.

    For events that only tell pages to refetch (``queues.updated`` after each of 200
    submissions a second): the first of a burst goes at once, the rest fold into one
    that goes at the end of the window with the latest data, so the last change is
    never lost. Per process.
    """
    transaction.on_commit(lambda: _coalesce((topic, kind, data)))


def _coalesce(event: Event) -> None:
    topic = event[0]
    with _coalesce_lock:
        if topic in _trailing:  # a send is already scheduled; it will carry this one
            _trailing[topic] = event
            return
        wait = _last_sent.get(topic, float("-inf")) + COALESCE_WINDOW_S - time.monotonic()
        if wait > 0:
            _trailing[topic] = event
            timer = threading.Timer(wait, _send_trailing, args=(topic,))
            timer.daemon = True
            timer.start()
            return
        _last_sent[topic] = time.monotonic()
    publish_many([event])


def _send_trailing(topic: str) -> None:
    with _coalesce_lock:
        event = _trailing.pop(topic, None)
        _last_sent[topic] = time.monotonic()
    if event is not None:
        publish_many([event])


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


# -- ending a person's live connections ----------------------------------------------------
#
# A websocket is authenticated once, when it connects; what it may then receive (every
# public topic, the on-call alerts, the jobs it may see) was decided from the session and
# role of that moment. So each connection also listens on two private groups, its
# person's and its session's, which no client can subscribe to, and the writers of
# access ask them to close: ``core.people`` (a sign-in's new role or lines, an offboarded
# account), the Django admin (a user, role, line membership or password changed), and
# sign-out. The consumer (``monitoring.consumers``) then checks the session again and
# closes with ``CLOSE_SIGNED_OUT`` (no reconnect: the page says so) or
# ``CLOSE_RECONNECT`` (the page reconnects at once and subscribes anew, each topic checked
# against the role as it now is).

ACCESS_MESSAGE = "live.access"
CLOSE_RECONNECT = 4000
CLOSE_SIGNED_OUT = 4401


def person_group(user_pk: Any) -> str:
    """The private group of every live connection signed in as ``user_pk``."""
    return f"access.person.{int(user_pk)}"


def session_group(session_key: str) -> str:
    """The private group of the connections of one session (its key is a credential, so
    the group carries a digest of it, not the key)."""
    return "access.session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def close_live_connections(
    *, user_pk: Any = None, session_key: str | None = None, reason: str
) -> None:
    """Once the current transaction commits (at once outside one), ask the live connections
    of person ``user_pk`` (each checks its session again) or of one ended session (closed
    outright) to close. Best effort as every live send: a Redis that is down loses the
    message, and a connection then keeps its subscriptions until it reconnects."""
    if (user_pk is None) == (session_key is None):
        raise ValueError("name a person or a session, not both")
    group = person_group(user_pk) if user_pk is not None else session_group(str(session_key))
    message = {"type": ACCESS_MESSAGE, "recheck": user_pk is not None, "reason": reason}
    transaction.on_commit(lambda: _send_control(group, message))


def _send_control(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None or time.monotonic() < _paused_until:
        log.warning("live connections not asked to close (%s): Redis is unavailable", group)
        return

    async def send() -> None:
        await asyncio.wait_for(layer.group_send(group, message), PUBLISH_TIMEOUT_S)

    try:
        _run_from_sync_code(send)
    except Exception:  # noqa: BLE001 - best effort, as every live send
        log.warning("live connections not asked to close (%s)", group, exc_info=True)
