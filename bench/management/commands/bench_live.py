"""Live-update latency as viewers see it: N real websocket clients, ``cycle.completed`` vs commit.

Point it at a running portal (``--url``) that shares this command's database
and Redis (a throw-away stack: docs/reliability.md). It signs ``--viewers`` sessions in
(database sessions, as a browser login makes), opens that many real websocket
connections (aiohttp) to ``/ws/live/`` with the session cookie, subscribes each to
``cycles``, then runs ``--cycles`` scheduling cycles in this process, one every
``--interval`` seconds. Each cycle runs inside an outer transaction whose first
on-commit hook stamps the commit time, so the latency measured is commit -> the
viewer's socket has the event (publish, Redis, web server, websocket frame), the path a
Celery worker's cycle takes too. The viewers run on one event loop in a process of their
own, so the cycles run here cannot delay when a viewer reads its socket. Like
``static/js/live.js``, a viewer closed before its subscription is acknowledged tries again
(reported as ``setup_retries``).

``--refetch PATH`` makes each viewer do what a live page in a visible tab does with the
event (``static/js/live.js`` and ``live_parts.js``): after a random wait of up to
``--spread-ms`` (2,000 ms, live.js's ``SPREAD_MS``; 0: every viewer at once, as before
session 44) and 150 ms more, it GETs PATH with its session and ``X-Live-Refresh: 1``; the
command then also reports commit -> page read (and when the last viewer has a fresh
page). Run it with ``/healthz`` as well, in the same run, for the baseline: the same
viewers fetching the cheapest page.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from dataclasses import dataclass, field

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from bench.cli import add_output_arguments, write_result
from bench.latency import latency_ms, percentile

CONNECT_TIMEOUT_S = 30.0
LIVE_SPREAD_MS = 2000.0  # static/js/live.js's SPREAD_MS: what a visible page waits at most
SETUP_ATTEMPTS = 5


def sign_in_sessions(count: int, usernames: list[str]) -> list[str]:
    """``count`` real sessions (round-robin over ``usernames``); returns the session keys."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    users = list(get_user_model().objects.filter(username__in=usernames, is_active=True))
    if not users:
        raise CommandError(f"none of the users {usernames} exists here (seed_demo first?)")
    keys = []
    for i in range(count):
        client = Client()
        client.force_login(users[i % len(users)])
        keys.append(client.cookies[settings.SESSION_COOKIE_NAME].value)
    return keys


@dataclass
class Viewer:
    """One websocket client subscribed to ``cycles``; remembers when each cycle arrived."""

    index: int
    received: dict[int, float] = field(default_factory=dict)
    error: str = ""
    setup_retries: int = 0
    closed: bool = False
    fresh: dict[int, float] = field(default_factory=dict)  # cycle id -> refetched page read
    refetch_errors: list[str] = field(default_factory=list)


class ViewerPool:
    """``count`` websocket viewers on their own event loop (a background thread)."""

    def __init__(
        self, url: str, session_keys: list[str], cookie_name: str = "sessionid",
        topic: str = "cycles", refetch: str = "", spread_ms: float = 0.0,
    ) -> None:  # fmt: skip
        self.base = url.rstrip("/")
        self.ws_url = self.base.replace("http", "ws", 1) + "/ws/live/"
        self.cookie_name = cookie_name
        self.keys = session_keys
        self.topic = topic
        self.refetch = refetch
        self.spread_s = spread_ms / 1000
        self.viewers = [Viewer(i) for i in range(len(session_keys))]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._ready = 0
        self._tasks: list[asyncio.Task] = []
        self._stop: asyncio.Event | None = None
        self._main = None

    # -- in the pool's loop ----------------------------------------------------------------
    async def _viewer(self, viewer: Viewer, key: str, http) -> None:
        """Connect, subscribe and listen; like ``static/js/live.js``, a socket closed before
        its subscription is acknowledged is tried again after a jittered, doubling delay."""
        import aiohttp

        headers = {"Cookie": f"{self.cookie_name}={key}", "Origin": self.base}
        for attempt in range(SETUP_ATTEMPTS):
            subscribed = False
            try:
                async with http.ws_connect(self.ws_url, headers=headers) as ws:
                    await ws.send_str(json.dumps({"subscribe": self.topic}))
                    ack = await asyncio.wait_for(ws.receive(), CONNECT_TIMEOUT_S)
                    if ack.type == aiohttp.WSMsgType.TEXT and json.loads(ack.data) == {
                        "subscribed": self.topic
                    }:
                        subscribed = True
                        self._ready += 1
                        await self._listen(viewer, ws, headers, http)
                        viewer.error = "closed by the server while subscribed"
                        break
                    viewer.error = f"subscription refused: {ack.data!r}"[:200]
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                viewer.error = f"{type(exc).__name__}: {exc}"[:200]
                if subscribed:
                    break
            viewer.setup_retries += 1
            await asyncio.sleep(0.5 * 2**attempt * (0.5 + random.random() / 2))
        viewer.closed = True

    async def _listen(self, viewer: Viewer, ws, headers: dict, http) -> None:
        import aiohttp

        async for msg in ws:
            now = time.time()
            if msg.type != aiohttp.WSMsgType.TEXT:
                return
            event = json.loads(msg.data)
            if event.get("type") == "cycle.completed":
                cycle_id = int(event["data"]["id"])
                viewer.received.setdefault(cycle_id, now)
                if self.refetch:
                    asyncio.ensure_future(self._refetch(viewer, cycle_id, headers, http))

    async def _refetch(self, viewer: Viewer, cycle_id: int, headers: dict, http) -> None:
        """What a visible live page does with the event: GET itself after a random part of
        the spread (``live.js``) and 150 ms more (``live_parts.js``)."""
        await asyncio.sleep(random.random() * self.spread_s + 0.15)
        try:
            async with http.get(self.base + self.refetch,
                                headers={**headers, "X-Live-Refresh": "1"}) as response:  # fmt: skip
                await response.read()
                if response.status != 200:
                    viewer.refetch_errors.append(f"HTTP {response.status}")
                    return
            viewer.fresh.setdefault(cycle_id, time.time())
        except Exception as exc:  # noqa: BLE001 - counted and reported
            viewer.refetch_errors.append(f"{type(exc).__name__}: {exc}"[:200])

    async def _run(self) -> None:
        import aiohttp

        self._stop = asyncio.Event()
        # No connection limit: every viewer holds its socket for the whole run.
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            self._tasks = [
                asyncio.ensure_future(self._viewer(v, k, http))
                for v, k in zip(self.viewers, self.keys, strict=True)
            ]
            await self._stop.wait()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- from the calling thread -------------------------------------------------------------
    def start(self, timeout: float = CONNECT_TIMEOUT_S) -> None:
        """Connect and subscribe every viewer; raise CommandError if some could not."""
        self.thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        deadline = time.monotonic() + timeout
        while self._ready < len(self.viewers):
            failed = [v for v in self.viewers if v.closed]
            if failed or time.monotonic() > deadline:
                self.close()
                why = failed[0].error if failed else "timed out"
                raise CommandError(
                    f"{self._ready} of {len(self.viewers)} viewers subscribed ({why})"
                )
            time.sleep(0.02)

    def close(self) -> None:
        if self._stop is not None and self._main is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            with contextlib.suppress(Exception):  # closing: report what was measured anyway
                self._main.result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def all_received(self, cycle_id: int) -> bool:
        seen = (v.fresh if self.refetch else v.received for v in self.viewers)
        return all(cycle_id in got for got in seen)


def _viewers_in_a_process(
    conn, url: str, keys: list[str], cookie_name: str, refetch: str = "", spread_ms: float = 0
) -> None:
    """Child process: hold the viewers; on ("collect", ids, timeout) send back what arrived."""
    pool = ViewerPool(url, keys, cookie_name, refetch=refetch, spread_ms=spread_ms)
    try:
        pool.start()
    except CommandError as exc:
        conn.send(("error", str(exc)))
        return
    conn.send(("ready", None))
    _, cycle_ids, timeout = conn.recv()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(pool.all_received(c) for c in cycle_ids):
        time.sleep(0.02)
    pool.close()
    conn.send(("done", pool.viewers))


class ViewerProcess:
    """The viewers in a process of their own, so that running cycles here (CPU-bound,
    holding the GIL) cannot delay the moment a viewer's event loop reads its socket."""

    def __init__(
        self, url: str, session_keys: list[str], refetch: str = "", spread_ms: float = 0
    ) -> None:
        import multiprocessing

        from django.conf import settings

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_viewers_in_a_process,
            args=(child, url, session_keys, settings.SESSION_COOKIE_NAME, refetch, spread_ms),
            daemon=True,
        )  # fmt: skip

    def start(self, timeout: float = CONNECT_TIMEOUT_S * 3) -> None:
        self.proc.start()
        if not self.conn.poll(timeout):
            self.proc.kill()
            raise CommandError("the viewers did not connect in time")
        kind, message = self.conn.recv()
        if kind != "ready":
            self.proc.join(10)
            raise CommandError(message)

    def collect(self, cycle_ids: list[int], timeout: float) -> list[Viewer]:
        self.conn.send(("collect", cycle_ids, timeout))
        _, viewers = self.conn.recv()
        self.proc.join(10)
        return viewers

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()


def run_timed_cycle(wait_s: float = 60.0):
    """One scheduling cycle; returns (record, commit time as ``time.time()``).

    The cycle runs in an outer transaction whose first on-commit hook records the
    commit instant; the cycle's own events are sent by the next hook, as usual.
    """
    from scheduling.cycle import run_cycle

    stamp: list[float] = []
    with transaction.atomic():
        transaction.on_commit(lambda: stamp.append(time.time()))
        record = run_cycle(wait_s=wait_s)
    return record, stamp[0]


def measure(
    url: str, viewers: int, cycles: int, interval: float, usernames: list[str],
    deliver_timeout: float = 10.0, workload: bool = False, refetch: str = "",
    spread_ms: float = LIVE_SPREAD_MS,
) -> dict:  # fmt: skip
    """Open the viewers, run the cycles, and summarize commit -> receive latencies (and,
    with ``refetch``, commit -> refetched page read)."""
    keys = sign_in_sessions(viewers, usernames)
    pool = ViewerProcess(url, keys, refetch, spread_ms)
    pool.start()
    commits: dict[int, float] = {}
    durations: list[float] = []
    events: list[int] = []
    try:
        for i in range(cycles):
            if i:
                time.sleep(interval)
            if workload:
                from demo.workload import generate

                generate()
            record, committed = run_timed_cycle()
            commits[record.pk] = committed
            durations.append(record.duration_ms)
            events.append(record.starts + record.finished + record.failed + record.requeued)
        seen = pool.collect(list(commits), deliver_timeout * (3 if refetch else 1))
    finally:
        pool.kill()
    latencies = [
        (v.received[cid] - t) * 1000 for cid, t in commits.items() for v in seen
        if cid in v.received
    ]  # fmt: skip
    expected = len(commits) * viewers
    fresh = [(v.fresh[cid] - t) * 1000 for cid, t in commits.items() for v in seen
             if cid in v.fresh]  # fmt: skip
    refetched = {"refetch": refetch, "spread_ms": spread_ms} if refetch else {}
    if refetch:
        last_fresh = [max((v.fresh[cid] - t) * 1000 for v in seen if cid in v.fresh)
                      for cid, t in commits.items() if any(cid in v.fresh for v in seen)]  # fmt: skip
        refetched.update({
            "pages_read": len(fresh),
            "refetch_errors": sum(len(v.refetch_errors) for v in seen),
            "refetch_error_kinds": sorted({e for v in seen for e in v.refetch_errors})[:3],
            "page_p50_ms": round(percentile(fresh, 50), 1) if fresh else None,
            "page_p95_ms": round(percentile(fresh, 95), 1) if fresh else None,
            "last_page_p50_ms": round(percentile(last_fresh, 50), 1) if last_fresh else None,
            "last_page_max_ms": round(max(last_fresh), 1) if last_fresh else None,
        })  # fmt: skip
    return {
        "url": url,
        "viewers": viewers,
        "cycles": len(commits),
        "cycle_ms_p50": round(percentile(durations, 50), 1),
        "cycle_ms_max": round(max(durations, default=0.0), 1),
        "job_changes_per_cycle_max": max(events, default=0),
        "expected": expected,
        "delivered": len(latencies),
        "lost": expected - len(latencies),
        "setup_retries": sum(v.setup_retries for v in seen),
        "setup_errors": sorted({v.error for v in seen if v.setup_retries})[:3],
        "viewer_errors": sorted({v.error for v in seen if v.closed and v.error})[:5],
        **latency_ms(latencies),
        **refetched,
    }


class Command(BaseCommand):
    help = (
        "Benchmark live updates: --viewers real websocket clients subscribed to `cycles` "
        "on a running portal (--url, same database and Redis as this command); runs --cycles "
        "scheduling cycles here and prints commit -> cycle.completed latency (p50/p95/max)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--viewers", type=int, default=100)
        parser.add_argument("--cycles", type=int, default=20)
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between cycles")
        parser.add_argument(
            "--users", default="researcher,researcher2,lead,oncall,admin",
            help="comma-separated usernames the viewers sign in as (round-robin)",
        )  # fmt: skip
        parser.add_argument(
            "--workload", action="store_true",
            help="submit the simulator demo's arrivals before each cycle (busier cycles)",
        )  # fmt: skip
        parser.add_argument(
            "--refetch", default="", metavar="PATH",
            help="each viewer GETs PATH after each cycle.completed, as a live page in a "
                 "visible tab does (/ for the home page; /healthz for the baseline)",
        )  # fmt: skip
        parser.add_argument(
            "--spread-ms", type=float, default=LIVE_SPREAD_MS,
            help="with --refetch: each viewer first waits a random part of this, as "
                 "static/js/live.js does (0: all at once)",
        )  # fmt: skip
        add_output_arguments(parser, url=True)

    def handle(self, *args, **opts) -> None:
        if opts["viewers"] < 1 or opts["cycles"] < 1 or opts["interval"] < 0:
            raise CommandError("--viewers and --cycles must be >= 1, --interval >= 0")
        if not 0 <= opts["spread_ms"] <= 60_000:
            raise CommandError("--spread-ms must be between 0 and 60000")
        result = measure(
            opts["url"], opts["viewers"], opts["cycles"], opts["interval"],
            [u.strip() for u in opts["users"].split(",") if u.strip()],
            workload=opts["workload"], refetch=opts["refetch"], spread_ms=opts["spread_ms"],
        )  # fmt: skip
        write_result(self, result, opts["json"], report, indent=2)


def report(result: dict) -> list[str]:
    """The human lines of a result: delivery and latency, then any connection trouble."""
    lines = [
        f"{result['viewers']} viewers x {result['cycles']} cycles: "
        f"{result['delivered']}/{result['expected']} cycle.completed delivered "
        f"(lost {result['lost']}); commit -> viewer p50 {result['p50_ms']} ms, "
        f"p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms; "
        f"cycles p50 {result['cycle_ms_p50']} ms, max {result['cycle_ms_max']} ms, "
        f"up to {result['job_changes_per_cycle_max']} job changes"
    ]
    if result.get("refetch"):
        lines.append(
            f"refetch {result['refetch']} (spread {result['spread_ms']:.0f} ms): "
            f"{result['pages_read']}/{result['expected']} pages read "
            f"({result['refetch_errors']} errors {result['refetch_error_kinds']}); commit -> "
            f"page p50 {result['page_p50_ms']} ms, p95 {result['page_p95_ms']} ms; the last "
            f"viewer's page p50 {result['last_page_p50_ms']} ms, max {result['last_page_max_ms']} "
            f"ms"
        )
    if result["setup_retries"]:
        lines.append(
            f"{result['setup_retries']} connections retried while subscribing "
            f"(as the browser client does): {result['setup_errors']}"
        )
    if result["viewer_errors"]:
        lines.append(f"viewer errors: {result['viewer_errors']}")
    return lines
