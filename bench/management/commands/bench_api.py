"""Throughput of the REST API as clients see it: concurrent job submissions, then list latency.

Starts nothing: point it at a running portal (``--url``). It submits real jobs
(pending, 1 GPU by default) and leaves them there, so use a throw-away stack
(docs/api.md, "Throughput"), never a production portal.

The clients are asyncio tasks on one aiohttp session in this process: cheap enough
that the load generator does not take the CPU the server is being measured on.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.cli import add_output_arguments, api_token, write_result
from bench.latency import latency_ms

LIST_ENDPOINTS = (
    "jobs/?state=pending",
    "jobs/",
    "jobs/?mine=1",
    "queues/",
    "business-lines/",
    "nodes/",
    "metrics/summary/",
)


def summarize(latencies_s: list[float]) -> dict:
    ms = [x * 1000 for x in latencies_s]
    return {
        "requests": len(ms),
        **latency_ms(ms),
        "mean_ms": round(statistics.fmean(ms), 1) if ms else 0.0,
    }


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)

    def add(self, seconds: float, error: str | None) -> None:
        if error:
            self.errors[error] += 1
        else:
            self.latencies.append(seconds)


class Command(BaseCommand):
    help = (
        "Benchmark a running portal's API: list-endpoint latency with --pending pending jobs "
        "(topped up through the API first), then --clients concurrent clients submitting jobs "
        "for --seconds (requests/s, p50/p95 latency, errors). Submits real jobs: use a "
        "throw-away stack."
    )

    def add_arguments(self, parser: CommandParser) -> None:
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
        add_output_arguments(parser, url=True)

    # -- helpers ----------------------------------------------------------------------------
    async def _submit(self, http: aiohttp.ClientSession, base: str, opts: dict,
                      seconds: float, budget: int | None = None) -> tuple[Tally, float]:  # fmt: skip
        """``--clients`` tasks POST jobs back to back until ``seconds`` or ``budget`` run out."""
        tally = Tally()
        left = [budget if budget is not None else math.inf]
        deadline = time.perf_counter() + seconds
        url = f"{base}/api/v1/jobs/"

        async def client(number: int) -> None:
            i = 0
            while time.perf_counter() < deadline and left[0] > 0:
                left[0] -= 1
                body = {"name": f"bench-{number}-{i}", "queue": opts["queue"], "gpus": opts["gpus"]}
                i += 1
                started = time.perf_counter()
                try:
                    async with http.post(url, json=body) as response:
                        await response.read()
                        error = None if response.status == 201 else f"HTTP {response.status}"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    error = type(exc).__name__
                tally.add(time.perf_counter() - started, error)

        started = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(opts["clients"])))
        return tally, time.perf_counter() - started

    async def _pending(self, http: aiohttp.ClientSession, base: str) -> int:
        url = f"{base}/api/v1/jobs/?state=pending&limit=1"
        async with http.get(url) as response:
            response.raise_for_status()
            return int((await response.json())["count"])

    async def _lists(self, http: aiohttp.ClientSession, base: str, opts: dict) -> dict:
        """Each list endpoint ``--list-requests`` times, one request at a time."""
        lists = {}
        for path in LIST_ENDPOINTS:
            latencies, statuses = [], Counter()
            for _ in range(opts["list_requests"]):
                started = time.perf_counter()
                async with http.get(f"{base}/api/v1/{path}") as response:
                    await response.read()
                latencies.append(time.perf_counter() - started)
                statuses[response.status] += 1
            lists[path] = {**summarize(latencies), "statuses": dict(statuses)}
        return lists

    async def _run(self, base: str, token: str, opts: dict) -> dict:
        headers = {"Authorization": f"Token {token}", "Accept": "application/json"}
        connector = aiohttp.TCPConnector(limit=opts["clients"])
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(
            headers=headers, connector=connector, timeout=timeout
        ) as http:
            try:
                before = await self._pending(http, base)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise CommandError(f"cannot use the API at {base}: {exc}") from exc

            result: dict = {"url": base, "pending_before": before}
            if opts["pending"] > 0:  # first, so the lists see exactly --pending jobs
                pending = before
                if pending < opts["pending"]:
                    await self._submit(http, base, opts, 3600.0, budget=opts["pending"] - pending)
                    pending = await self._pending(http, base)
                lists = await self._lists(http, base, opts)
                result["lists"] = {"pending_jobs": pending, "endpoints": lists}

            await self._submit(http, base, opts, 2.0)  # warm-up: connections, caches
            tally, elapsed = await self._submit(http, base, opts, opts["seconds"])
            result["submit"] = {
                "clients": opts["clients"],
                "seconds": round(elapsed, 1),
                "ok": len(tally.latencies),
                "per_second": round(len(tally.latencies) / elapsed, 1),
                "errors": dict(tally.errors),
                **summarize(tally.latencies),
            }
        return result

    # -- the benchmark ----------------------------------------------------------------------
    def handle(self, *args, **opts) -> None:
        if opts["clients"] < 1 or opts["seconds"] <= 0:
            raise CommandError("--clients must be >= 1 and --seconds > 0")
        base = opts["url"].rstrip("/")
        token = opts["token"] or api_token(opts["user"])
        write_result(
            self, asyncio.run(self._run(base, token, opts)), opts["json"], report, indent=2
        )


def report(result: dict) -> list[str]:
    """The human lines of a result: submissions, then each list endpoint."""
    submit = result["submit"]
    lines = [
        f"submissions: {submit['ok']} in {submit['seconds']} s with {submit['clients']} "
        f"clients = {submit['per_second']}/s; p50 {submit['p50_ms']} ms, p95 "
        f"{submit['p95_ms']} ms, p99 {submit['p99_ms']} ms; errors {submit['errors'] or 0}"
    ]
    if "lists" in result:
        lines.append(f"lists at {result['lists']['pending_jobs']} pending jobs:")
        lines += [
            f"  GET {path:<22} p50 {row['p50_ms']:>7} ms  p95 {row['p95_ms']:>7} ms  "
            f"statuses {row['statuses']}"
            for path, row in result["lists"]["endpoints"].items()
        ]
    return lines
