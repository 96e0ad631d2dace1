"""Throughput of the REST API as clients see it: concurrent job submissions, then list latency.

Starts nothing: point it at a running portal (``--url``). It submits real jobs
(pending, 1 GPU by default) and leaves them there, so use a throw-away stack
(docs/api.md, "Throughput"), never a production portal.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import requests
from django.core.management.base import BaseCommand, CommandError, CommandParser

LIST_ENDPOINTS = (
    "jobs/?state=pending",
    "jobs/",
    "jobs/?mine=1",
    "queues/",
    "business-lines/",
    "nodes/",
    "metrics/summary/",
)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def summarize(latencies_s: list[float]) -> dict:
    ms = [x * 1000 for x in latencies_s]
    return {
        "requests": len(ms),
        "p50_ms": round(percentile(ms, 50), 1),
        "p95_ms": round(percentile(ms, 95), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "max_ms": round(max(ms, default=0.0), 1),
        "mean_ms": round(statistics.fmean(ms), 1) if ms else 0.0,
    }


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seconds: float, error: str | None) -> None:
        with self.lock:
            if error:
                self.errors[error] += 1
            else:
                self.latencies.append(seconds)


class Command(BaseCommand):
    help = (
        "Benchmark a running portal's API: concurrent job submissions for --seconds with "
        "--clients threads (requests/s, p50/p95 latency, errors), then list-endpoint latency "
        "with at least --pending pending jobs. Submits real jobs: use a throw-away stack."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="portal base URL")
        who = parser.add_mutually_exclusive_group()
        who.add_argument("--token", help="API token to use")
        who.add_argument(
            "--user", default="researcher", help="create/get this user's token in the database"
        )
        parser.add_argument("--seconds", type=float, default=30.0)
        parser.add_argument("--clients", type=int, default=16)
        parser.add_argument("--queue", default="llm-experiment")
        parser.add_argument("--gpus", type=int, default=1)
        parser.add_argument(
            "--pending", type=int, default=5000,
            help="top up to this many pending jobs before timing the lists (0: skip lists)",
        )  # fmt: skip
        parser.add_argument("--list-requests", type=int, default=50, help="per list endpoint")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    # -- helpers ----------------------------------------------------------------------------
    def _token(self, opts: dict) -> str:
        if opts["token"]:
            return opts["token"]
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        user = get_user_model().objects.filter(username=opts["user"]).first()
        if user is None:
            raise CommandError(f"no user {opts['user']!r} in this database (seed_demo first?)")
        return Token.objects.get_or_create(user=user)[0].key

    def _session(self, token: str) -> requests.Session:
        session = requests.Session()
        session.headers.update({"Authorization": f"Token {token}", "Accept": "application/json"})
        return session

    def _submit_loop(self, base: str, token: str, opts: dict, client: int, deadline: float,
                     tally: Tally, budget: list[int] | None = None) -> None:  # fmt: skip
        session = self._session(token)
        url = f"{base}/api/v1/jobs/"
        i = 0
        while time.perf_counter() < deadline:
            if budget is not None:
                with tally.lock:
                    if budget[0] <= 0:
                        return
                    budget[0] -= 1
            body = {"name": f"bench-{client}-{i}", "queue": opts["queue"], "gpus": opts["gpus"]}
            i += 1
            started = time.perf_counter()
            try:
                response = session.post(url, json=body, timeout=30)
                error = None if response.status_code == 201 else f"HTTP {response.status_code}"
            except requests.RequestException as exc:
                error = type(exc).__name__
            tally.add(time.perf_counter() - started, error)

    def _submit(self, base: str, token: str, opts: dict, seconds: float,
                budget: int | None = None) -> tuple[Tally, float]:  # fmt: skip
        tally = Tally()
        shared = [budget] if budget is not None else None
        deadline = time.perf_counter() + seconds
        threads = [
            threading.Thread(
                target=self._submit_loop, args=(base, token, opts, c, deadline, tally, shared)
            )  # fmt: skip
            for c in range(opts["clients"])
        ]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return tally, time.perf_counter() - started

    def _pending(self, session: requests.Session, base: str) -> int:
        response = session.get(f"{base}/api/v1/jobs/", params={"state": "pending", "limit": 1})
        response.raise_for_status()
        return int(response.json()["count"])

    # -- the benchmark ----------------------------------------------------------------------
    def handle(self, *args, **opts) -> None:
        if opts["clients"] < 1 or opts["seconds"] <= 0:
            raise CommandError("--clients must be >= 1 and --seconds > 0")
        base = opts["url"].rstrip("/")
        token = self._token(opts)
        session = self._session(token)
        try:
            before = self._pending(session, base)
        except requests.RequestException as exc:
            raise CommandError(f"cannot use the API at {base}: {exc}") from exc

        self._submit(base, token, opts, 2.0)  # warm-up: connections, caches, JIT-free paths
        tally, elapsed = self._submit(base, token, opts, opts["seconds"])
        submit = {
            "clients": opts["clients"],
            "seconds": round(elapsed, 1),
            "ok": len(tally.latencies),
            "per_second": round(len(tally.latencies) / elapsed, 1),
            "errors": dict(tally.errors),
            **summarize(tally.latencies),
        }
        result: dict = {"url": base, "pending_before": before, "submit": submit}

        if opts["pending"] > 0:
            pending = self._pending(session, base)
            if pending < opts["pending"]:
                self._submit(base, token, opts, 3600.0, budget=opts["pending"] - pending)
                pending = self._pending(session, base)
            lists = {}
            for path in LIST_ENDPOINTS:
                latencies, statuses = [], Counter()
                for _ in range(opts["list_requests"]):
                    started = time.perf_counter()
                    response = session.get(f"{base}/api/v1/{path}")
                    latencies.append(time.perf_counter() - started)
                    statuses[response.status_code] += 1
                lists[path] = {**summarize(latencies), "statuses": dict(statuses)}
            result["lists"] = {"pending_jobs": pending, "endpoints": lists}

        if opts["json"]:
            self.stdout.write(json.dumps(result, indent=2))
            return
        self.stdout.write(
            f"submissions: {submit['ok']} in {submit['seconds']} s with {submit['clients']} "
            f"clients = {submit['per_second']}/s; p50 {submit['p50_ms']} ms, p95 "
            f"{submit['p95_ms']} ms, p99 {submit['p99_ms']} ms; errors {submit['errors'] or 0}"
        )
        if "lists" in result:
            self.stdout.write(f"lists at {result['lists']['pending_jobs']} pending jobs:")
            for path, row in result["lists"]["endpoints"].items():
                self.stdout.write(
                    f"  GET {path:<22} p50 {row['p50_ms']:>7} ms  p95 {row['p95_ms']:>7} ms  "
                    f"statuses {row['statuses']}"
                )
