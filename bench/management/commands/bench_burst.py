"""A burst of job submissions through the API: all admitted, within the time allowed?

Point it at a running portal (``--url``) that shares this command's database (a
throw-away stack: docs/reliability.md). ``--clients`` threads POST ``--jobs`` jobs to
``/api/v1/jobs/`` as fast as the portal takes them (or spread evenly over
``--seconds`` with ``--spread``); then the database is checked (every accepted job is
stored, pending, with its ``submitted`` event) and, unless ``--no-cycle``, one
scheduling cycle runs here and every burst job must come out started or waiting with a
reason. Exits with an error when any submission failed, the burst took longer than
``--seconds`` or a job was not admitted. Submits real jobs: never use a production portal.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import requests
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.cli import add_output_arguments, api_token, write_result
from bench.latency import latency_ms


def burst(url: str, token: str, body: dict, jobs: int, clients: int, prefix: str,
          spread_s: float = 0.0) -> dict:  # fmt: skip
    """POST ``jobs`` submissions from ``clients`` threads; latencies and statuses."""
    endpoint = url.rstrip("/") + "/api/v1/jobs/"
    lock = threading.Lock()
    next_index = [0]
    latencies: list[float] = []
    statuses: Counter = Counter()
    errors: Counter = Counter()
    started = time.perf_counter()

    def client() -> None:
        session = requests.Session()
        session.headers.update({"Authorization": f"Token {token}", "Accept": "application/json"})
        while True:
            with lock:
                i = next_index[0]
                if i >= jobs:
                    return
                next_index[0] += 1
            if spread_s:
                delay = started + spread_s * i / jobs - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            sent = time.perf_counter()
            try:
                response = session.post(endpoint, json={**body, "name": f"{prefix}-{i}"},
                                        timeout=60)  # fmt: skip
                status, error = response.status_code, None
                if status != 201:
                    error = f"HTTP {status}: {response.text[:120]}"
            except requests.RequestException as exc:
                status, error = 0, type(exc).__name__
            with lock:
                latencies.append(time.perf_counter() - sent)
                statuses[status] += 1
                if error:
                    errors[error] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    ms = [x * 1000 for x in latencies]
    return {
        "seconds": round(elapsed, 2),
        "per_second": round(len(ms) / elapsed, 1) if elapsed else 0.0,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "errors": dict(errors.most_common(5)),
        **latency_ms(ms),
    }


def admitted(prefix: str) -> dict:
    """What the database holds for this burst's jobs."""
    from scheduling.models import Job, JobEvent

    jobs = Job.objects.filter(name__startswith=prefix + "-")
    return {
        "stored": jobs.count(),
        "states": dict(Counter(jobs.values_list("state", flat=True))),
        "submitted_events": JobEvent.objects.filter(job__in=jobs, kind="submitted").count(),
    }


def judged_by_next_cycle(prefix: str) -> dict:
    """Run one cycle; every burst job must start or wait with a reason."""
    from scheduling.cycle import run_cycle
    from scheduling.models import Job

    record = run_cycle(wait_s=60)
    jobs = Job.objects.filter(name__startswith=prefix + "-")
    return {
        "cycle_ms": round(record.duration_ms, 1),
        "started": jobs.filter(state=Job.State.RUNNING).count(),
        "waiting_with_reason": jobs.filter(state=Job.State.PENDING)
        .exclude(pending_code="")
        .count(),
        "waiting_without_reason": jobs.filter(state=Job.State.PENDING, pending_code="").count(),
    }


class Command(BaseCommand):
    help = (
        "Submit --jobs jobs through a running portal's API (--url, same database) from "
        "--clients threads and check they are all admitted within --seconds; then one "
        "cycle must start or explain every one. Submits real jobs: use a throw-away stack."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=1000)
        parser.add_argument("--seconds", type=float, default=60.0, help="time allowed")
        parser.add_argument("--clients", type=int, default=8)
        parser.add_argument("--spread", action="store_true",
                            help="pace the submissions evenly over --seconds")  # fmt: skip
        parser.add_argument("--user", default="researcher")
        parser.add_argument("--queue", default="llm-experiment")
        parser.add_argument("--gpus", type=int, default=1)
        parser.add_argument("--no-cycle", action="store_true", help="skip the cycle check")
        add_output_arguments(parser, url=True)

    def handle(self, *args, **opts) -> None:
        if opts["jobs"] < 1 or opts["clients"] < 1 or opts["seconds"] <= 0:
            raise CommandError("--jobs and --clients must be >= 1, --seconds > 0")
        prefix = f"burst-{uuid.uuid4().hex[:8]}"
        body = {"queue": opts["queue"], "gpus": opts["gpus"], "sim_duration_minutes": 60}
        result: dict = {
            "url": opts["url"], "jobs": opts["jobs"], "clients": opts["clients"],
            "allowed_s": opts["seconds"], "prefix": prefix,
        }  # fmt: skip
        result["submit"] = burst(
            opts["url"], api_token(opts["user"]), body, opts["jobs"], opts["clients"], prefix,
            opts["seconds"] if opts["spread"] else 0.0,
        )  # fmt: skip
        result["admitted"] = admitted(prefix)
        if not opts["no_cycle"]:
            result["next_cycle"] = judged_by_next_cycle(prefix)
        problems = self._problems(result)
        result["ok"] = not problems

        write_result(self, result, opts["json"], report, indent=2)
        if problems:
            raise CommandError("burst not fully admitted: " + "; ".join(problems))

    @staticmethod
    def _problems(result: dict) -> list[str]:
        s, a, jobs = result["submit"], result["admitted"], result["jobs"]
        problems = []
        if s["errors"]:
            problems.append(f"errors {s['errors']}")
        if s["seconds"] > result["allowed_s"]:
            problems.append(f"took {s['seconds']} s, more than {result['allowed_s']} s")
        if a["stored"] != jobs or a["submitted_events"] != jobs:
            problems.append(f"{a['stored']} stored, {a['submitted_events']} submitted events")
        cycle = result.get("next_cycle")
        if cycle and cycle["waiting_without_reason"]:
            problems.append(f"{cycle['waiting_without_reason']} jobs wait without a reason")
        return problems


def report(result: dict) -> list[str]:
    """The human lines of a result: the burst, then the next cycle's verdicts."""
    s, a = result["submit"], result["admitted"]
    lines = [
        f"{result['jobs']} submissions from {result['clients']} clients in {s['seconds']} s "
        f"({s['per_second']}/s; allowed {result['allowed_s']:.0f} s): statuses {s['statuses']}; "
        f"latency p50 {s['p50_ms']} ms, p95 {s['p95_ms']} ms, p99 {s['p99_ms']} ms, "
        f"max {s['max_ms']} ms; stored {a['stored']} with {a['submitted_events']} "
        f"'submitted' events"
    ]
    if "next_cycle" in result:
        c = result["next_cycle"]
        lines.append(
            f"next cycle: {c['cycle_ms']} ms; {c['started']} started, "
            f"{c['waiting_with_reason']} waiting with a reason, "
            f"{c['waiting_without_reason']} without"
        )
    return lines
