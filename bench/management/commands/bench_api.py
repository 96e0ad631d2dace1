"""Throughput of the REST API as clients see it: list latency, then concurrent job
submissions side by side with a baseline, a trivial authenticated insert on the same stack.

Starts nothing: point it at a running portal (``--url``). It submits real jobs
(pending, 1 GPU by default) and leaves them there, so use a throw-away stack
(docs/api.md, "Throughput"), never a production portal.

The baseline is ``POST /api/v1/bench/baseline/`` (``bench.baseline``: token auth, one tiny
INSERT), which the web server mounts only with ``BENCH_ENDPOINTS=1``. Submissions and
baseline inserts alternate in ``--rounds`` rounds each (S B, then B S, ...), so a machine
whose load changes during the run slows both alike, and the figure is reported as the
ratio "submissions/s ÷ trivial inserts/s" as well as in requests/s. ``--cpu-pid`` (the web
server's pid, PostgreSQL's postmaster) adds the server CPU spent per request of each kind,
read from ``/proc`` around each phase.

The clients are asyncio tasks on one aiohttp session in this process: cheap enough
that the load generator does not take the CPU the server is being measured on.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import cpu
from bench.baseline import ENV_VAR as BENCH_ENDPOINTS
from bench.baseline import ROUTE as BASELINE_ROUTE
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
    """The answers of one kind of request over all its phases, and what they cost."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    cpu_s: Counter = field(default_factory=Counter)  # by --cpu-pid

    def add(self, seconds: float, error: str | None) -> None:
        if error:
            self.errors[error] += 1
        else:
            self.latencies.append(seconds)

    @property
    def answered(self) -> int:
        return len(self.latencies) + sum(self.errors.values())

    def summary(self, clients: int) -> dict:
        """requests/s of 201 answers, latency percentiles, errors, server CPU per request."""
        per_second = len(self.latencies) / self.seconds if self.seconds else 0.0
        return {
            "clients": clients,
            "seconds": round(self.seconds, 1),
            "ok": len(self.latencies),
            "per_second": round(per_second, 1),
            "errors": dict(self.errors),
            **summarize(self.latencies),
            "cpu_ms_per_request": {
                str(pid): round(1000 * spent / max(1, self.answered), 2)
                for pid, spent in self.cpu_s.items()
            },
        }


Body = Callable[[int, int], dict]  # (client number, request number) -> JSON body


class Command(BaseCommand):
    help = (
        "Benchmark a running portal's API: list-endpoint latency with --pending pending jobs "
        "(topped up through the API first), then --clients concurrent clients submitting jobs "
        "for --seconds, alternating with as long of trivial authenticated inserts on the same "
        "stack (requests/s, their ratio, p50/p95 latency, errors, server CPU per request "
        "with --cpu-pid). Submits real jobs: use a throw-away stack started with "
        "BENCH_ENDPOINTS=1."
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
        parser.add_argument(
            "--rounds", type=int, default=3,
            help="submission and baseline phases alternate, --seconds split into this many each",
        )  # fmt: skip
        parser.add_argument(
            "--no-baseline", action="store_true",
            help=f"skip the trivial-insert baseline (a server started without {BENCH_ENDPOINTS}=1)",
        )  # fmt: skip
        parser.add_argument(
            "--cpu-pid", type=int, action="append", default=[], metavar="PID",
            help="a process tree on this machine whose CPU is read around each phase (the web "
            "server's pid, PostgreSQL's postmaster); repeatable",
        )  # fmt: skip
        add_output_arguments(parser, url=True)

    # -- helpers ----------------------------------------------------------------------------
    async def _drive(self, http: aiohttp.ClientSession, url: str, body: Body, opts: dict,
                     seconds: float, budget: int | None = None,
                     tally: Tally | None = None) -> Tally:  # fmt: skip
        """``--clients`` tasks POST ``body(...)`` to ``url`` back to back until ``seconds``
        or ``budget`` run out; the answers and the CPU the ``--cpu-pid`` trees spent meanwhile
        are added to ``tally``."""
        tally = tally if tally is not None else Tally()
        left = [budget if budget is not None else math.inf]
        deadline = time.perf_counter() + seconds

        async def client(number: int) -> None:
            i = 0
            while time.perf_counter() < deadline and left[0] > 0:
                left[0] -= 1
                payload = body(number, i)
                i += 1
                started = time.perf_counter()
                try:
                    async with http.post(url, json=payload) as response:
                        await response.read()
                        error = None if response.status == 201 else f"HTTP {response.status}"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    error = type(exc).__name__
                tally.add(time.perf_counter() - started, error)

        cpu_before = {pid: cpu.tree_cpu_seconds(pid) for pid in opts["cpu_pid"]}
        started = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(opts["clients"])))
        tally.seconds += time.perf_counter() - started
        for pid, before in cpu_before.items():
            tally.cpu_s[pid] += cpu.tree_cpu_seconds(pid) - before
        return tally

    async def _submit(self, http: aiohttp.ClientSession, base: str, opts: dict,
                      seconds: float, budget: int | None = None,
                      tally: Tally | None = None) -> Tally:  # fmt: skip
        """Job submissions (``--queue``, ``--gpus``) for ``seconds`` or ``budget`` jobs."""

        def body(number: int, i: int) -> dict:
            return {"name": f"bench-{number}-{i}", "queue": opts["queue"], "gpus": opts["gpus"]}

        url = f"{base}/api/v1/jobs/"
        return await self._drive(http, url, body, opts, seconds, budget, tally)

    async def _baseline(self, http: aiohttp.ClientSession, base: str, opts: dict,
                        seconds: float, tally: Tally | None = None) -> Tally:  # fmt: skip
        """Trivial authenticated inserts (``bench.baseline``) for ``seconds``."""

        def body(number: int, i: int) -> dict:
            return {"name": f"baseline-{number}-{i}"}

        url = f"{base}/{BASELINE_ROUTE}"
        return await self._drive(http, url, body, opts, seconds, None, tally)

    async def _check_baseline(self, http: aiohttp.ClientSession, base: str) -> None:
        """One baseline insert, or a clear error when the server does not mount it."""
        async with http.post(f"{base}/{BASELINE_ROUTE}", json={"name": "probe"}) as response:
            await response.read()
            if response.status == 404:
                raise CommandError(
                    f"{base} has no {BASELINE_ROUTE}: start its web server with "
                    f"{BENCH_ENDPOINTS}=1 (docs/api.md, Throughput), or pass --no-baseline"
                )
            if response.status != 201:
                raise CommandError(f"the baseline endpoint answered HTTP {response.status}")

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

            baseline = not opts["no_baseline"]
            if baseline:
                await self._check_baseline(http, base)
            await self._submit(http, base, opts, 2.0)  # warm-up: connections, caches
            if baseline:
                await self._baseline(http, base, opts, 2.0)
            result["load_average_before"] = round(os.getloadavg()[0], 2)
            rounds = opts["rounds"] if baseline else 1
            phase = opts["seconds"] / rounds
            submits, inserts = Tally(), Tally()
            for number in range(rounds):  # S B, B S, S B, ...: drift hits both alike
                if baseline and number % 2:
                    await self._baseline(http, base, opts, phase, inserts)
                await self._submit(http, base, opts, phase, tally=submits)
                if baseline and not number % 2:
                    await self._baseline(http, base, opts, phase, inserts)
            result["load_average_after"] = round(os.getloadavg()[0], 2)
            result["submit"] = submits.summary(opts["clients"])
            if baseline:
                result["baseline"] = inserts.summary(opts["clients"])
                result["rounds"] = rounds
                rate = result["baseline"]["per_second"]
                result["ratio"] = round(result["submit"]["per_second"] / rate, 3) if rate else None
            result["cpu_pids"] = {str(pid): cpu.command(pid) for pid in opts["cpu_pid"]}
        return result

    # -- the benchmark ----------------------------------------------------------------------
    def handle(self, *args, **opts) -> None:
        if opts["clients"] < 1 or opts["seconds"] <= 0:
            raise CommandError("--clients must be >= 1 and --seconds > 0")
        if opts["rounds"] < 1:
            raise CommandError("--rounds must be >= 1")
        for pid in opts["cpu_pid"]:
            if not cpu.readable(pid):
                raise CommandError(f"--cpu-pid {pid}: no such process on this machine")
        base = opts["url"].rstrip("/")
        token = opts["token"] or api_token(opts["user"])
        write_result(
            self, asyncio.run(self._run(base, token, opts)), opts["json"], report, indent=2
        )


def _line(what: str, row: dict) -> str:
    return (
        f"{what}: {row['ok']} in {row['seconds']} s with {row['clients']} clients = "
        f"{row['per_second']}/s; p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, p99 "
        f"{row['p99_ms']} ms; errors {row['errors'] or 0}"
    )


def report(result: dict) -> list[str]:
    """The human lines of a result: submissions, the baseline and their ratio, the server CPU
    per request, then each list endpoint."""
    submit = result["submit"]
    lines = [_line("submissions", submit)]
    if "baseline" in result:
        lines.append(_line("baseline (trivial authenticated insert)", result["baseline"]))
        lines.append(
            f"ratio submissions/s / inserts/s = {result['ratio']} "
            f"({result['rounds']} alternating rounds of each)"
        )
    for pid, name in result.get("cpu_pids", {}).items():
        costs = f"submission {submit['cpu_ms_per_request'][pid]} ms"
        if "baseline" in result:
            costs += f", baseline insert {result['baseline']['cpu_ms_per_request'][pid]} ms"
        lines.append(f"CPU per request of {pid} ({name}): {costs}")
    if "load_average_before" in result:
        lines.append(
            f"load average (1 min): {result['load_average_before']} before, "
            f"{result['load_average_after']} after"
        )
    if "lists" in result:
        lines.append(f"lists at {result['lists']['pending_jobs']} pending jobs:")
        lines += [
            f"  GET {path:<22} p50 {row['p50_ms']:>7} ms  p95 {row['p95_ms']:>7} ms  "
            f"statuses {row['statuses']}"
            for path, row in result["lists"]["endpoints"].items()
        ]
    return lines
