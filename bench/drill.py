"""The concurrency drill through the web server (#16): scheduling cycles back to back in
this process while people act at once through a running portal's API, then a check that
nothing failed and that every accepted action was applied exactly once.

Who acts (each a thread with its own HTTP session and API token, as separate people are):

* the loop: ``run_cycle_now`` back to back, here (as the Celery worker runs it);
* researchers (``researcher``, ``researcher2``): submit jobs to their lines' queues and
  cancel their own;
* the team lead (``lead``): asks for quota, withdraws their requests, cancels their line's
  jobs;
* an admin: approves and rejects the requests, and now and then asks for a cycle over the
  API as well;
* on-call: cordons, drains and uncordons nodes.

An answer is *accepted* (2xx), a *refusal* the rules call for (400 a rule, 403, 404, 409 a
state or a busy cluster: cancelling a job someone else just cancelled, approving a
request its lead just withdrew), or an *error*: any other status (a 500 above all), a
connection failure, or an answer mentioning a deadlock. ``verify`` then reads the
database: the jobs are exactly the accepted submissions, each accepted cancel cancelled
its job once, each quota request is in the state of its one accepted decision, every
accepted node action wrote its one audit record, and ``check_cluster`` finds nothing
after a last cycle.

Used by ``tests/concurrency/test_http_drill.py`` (bounded, in CI) and by
``manage.py drill --http --seconds N`` (longer, against a portal at ``--url``).
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
from django.db import close_old_connections, connection

# Refusals the rules call for: bad input by a rule, not allowed, gone, the state or a busy
# cluster refuses. Anything else is an error of the portal.
REFUSALS = frozenset({400, 403, 404, 409})
# Who submits where (the demo's lines: researcher and lead in llm, researcher2 in search-rec).
QUEUES = {"researcher": "llm-experiment", "researcher2": "search-rec-experiment"}
NODE_ACTIONS = ("cordon", "drain", "uncordon")


@dataclass
class Ledger:
    """What every actor was told, shared by the threads (under ``lock``)."""

    accepted: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    jobs: dict[int, str] = field(default_factory=dict)  # submitted job -> owner
    cancelled: Counter[int] = field(default_factory=Counter)  # job -> accepted cancels
    asked: list[int] = field(default_factory=list)  # quota requests made
    decided: dict[int, list[str]] = field(default_factory=dict)  # request -> accepted decisions
    node_actions: Counter[str] = field(default_factory=Counter)  # "cordon" -> accepted
    lock: threading.Lock = field(default_factory=threading.Lock)
    # This run's mark: its jobs' name prefix, its requests' reason, its actions' reason (a
    # database may hold an earlier run's).
    tag: str = field(default_factory=lambda: f"drill-http-{secrets.token_hex(4)}")

    def summary(self) -> dict[str, Any]:
        return {
            "accepted": dict(sorted(self.accepted.items())),
            "refused": dict(sorted(self.refused.items())),
            "errors": len(self.errors),
            "tag": self.tag,
        }


class Client:
    """One person's HTTP session against the portal's API."""

    def __init__(self, base: str, token: str, ledger: Ledger, timeout: float = 60) -> None:
        self.base = base.rstrip("/") + "/api/v1/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"
        self.ledger = ledger
        self.timeout = timeout

    def call(self, action: str, method: str, path: str, body: dict | None = None) -> Any:
        """The answer's JSON when accepted; None when refused or failed (both counted)."""
        try:
            response = self.session.request(
                method, self.base + path, json=body, timeout=self.timeout
            )
        except requests.RequestException as exc:
            return self._error(f"{action} {path}: {type(exc).__name__}: {exc}")
        text = response.text
        if "deadlock" in text.lower():
            return self._error(f"{action} {path}: {response.status_code} {text[:300]}")
        if 200 <= response.status_code < 300:
            with self.ledger.lock:
                self.ledger.accepted[action] += 1
            return response.json()
        if response.status_code in REFUSALS:
            with self.ledger.lock:
                self.ledger.refused[f"{action} {response.status_code}"] += 1
            return None
        return self._error(f"{action} {path}: {response.status_code} {text[:300]}")

    def _error(self, message: str) -> None:
        with self.ledger.lock:
            self.ledger.errors.append(message)
        return None


class HttpDrill:
    """The actors of the module docstring, run for ``seconds`` against ``base``."""

    def __init__(self, base: str, tokens: dict[str, str], nodes: list[str], seconds: float,
                 seed: int = 16) -> None:  # fmt: skip
        self.base, self.tokens, self.nodes = base, tokens, nodes
        self.seconds, self.seed = seconds, seed
        self.ledger = Ledger()
        self.deadline = 0.0

    def client(self, username: str) -> Client:
        return Client(self.base, self.tokens[username], self.ledger)

    # -- the actors: each one step, called until the deadline -------------------------------

    def researcher(self, username: str) -> Callable[[random.Random], None]:
        client = self.client(username)

        def step(rng: random.Random) -> None:
            body = {"name": f"{self.ledger.tag}-{rng.randrange(10**6)}", "queue": QUEUES[username],
                    "gpus": rng.choice([1, 2, 4, 8]), "sim_duration_minutes": rng.choice([1, 30])}  # fmt: skip
            made = client.call("submit", "POST", "jobs/", body)
            if made is not None:
                with self.ledger.lock:
                    self.ledger.jobs[made["id"]] = username
            mine = self._jobs(lambda owner: owner == username)
            if mine and rng.random() < 0.5:
                self._cancel(client, rng.choice(mine))

        return step

    def _jobs(self, owned: Callable[[str], bool]) -> list[int]:
        """The submitted jobs whose owner passes ``owned``, read under the ledger's lock (the
        submitting threads add to it meanwhile)."""
        with self.ledger.lock:
            return [pk for pk, owner in self.ledger.jobs.items() if owned(owner)]

    def _cancel(self, client: Client, pk: int) -> None:
        if client.call("cancel", "POST", f"jobs/{pk}/cancel/") is not None:
            with self.ledger.lock:
                self.ledger.cancelled[pk] += 1

    def lead(self) -> Callable[[random.Random], None]:
        client = self.client("lead")

        def step(rng: random.Random) -> None:
            body = {"business_line": "llm", "quota_gpus": rng.randrange(8, 33),
                    "reason": self.ledger.tag}  # fmt: skip
            made = client.call("ask", "POST", "quota-requests/", body)
            if made is not None:
                with self.ledger.lock:
                    self.ledger.asked.append(made["id"])
            if self.ledger.asked and rng.random() < 0.4:
                self._decide(client, "withdraw", rng.choice(self.ledger.asked))
            line_jobs = self._jobs(lambda owner: owner != "researcher2")
            if line_jobs and rng.random() < 0.2:
                self._cancel(client, rng.choice(line_jobs))
            time.sleep(0.01)

        return step

    def _decide(self, client: Client, decision: str, pk: int) -> None:
        body = {"note": self.ledger.tag}
        if client.call(decision, "POST", f"quota-requests/{pk}/{decision}/", body) is not None:
            with self.ledger.lock:
                self.ledger.decided.setdefault(pk, []).append(decision)

    def admin(self) -> Callable[[random.Random], None]:
        client = self.client("admin")

        def step(rng: random.Random) -> None:
            if self.ledger.asked:
                decision = rng.choice(["approve", "approve", "reject"])
                self._decide(client, decision, rng.choice(self.ledger.asked))
            if rng.random() < 0.1:
                client.call("cycle (API)", "POST", "scheduler/cycle/")
            time.sleep(0.01)

        return step

    def oncall(self) -> Callable[[random.Random], None]:
        client = self.client("oncall")

        def step(rng: random.Random) -> None:
            action = rng.choice(NODE_ACTIONS)
            body = {"reason": self.ledger.tag}
            node = rng.choice(self.nodes)
            if client.call(action, "POST", f"nodes/{node}/{action}/", body) is not None:
                with self.ledger.lock:
                    self.ledger.node_actions[action] += 1
            time.sleep(0.02)

        return step

    def cycles(self, admin_user: Any) -> Callable[[random.Random], None]:
        from scheduling.cluster_lock import ClusterBusy
        from scheduling.sim_services import run_cycle_now

        def step(rng: random.Random) -> None:
            try:
                run_cycle_now(admin_user)
            except ClusterBusy:  # the API's cycle holds the lock: the loop waits its turn
                with self.ledger.lock:
                    self.ledger.refused["cycle busy"] += 1
                return
            except Exception as exc:  # noqa: BLE001 - any other failure is the drill's finding
                with self.ledger.lock:
                    self.ledger.errors.append(f"cycle: {type(exc).__name__}: {exc}")
                close_old_connections()
                return
            with self.ledger.lock:
                self.ledger.accepted["cycle"] += 1

        return step

    # -- running and checking ---------------------------------------------------------------

    def run(self, admin_user: Any) -> Ledger:
        """All actors at once until ``seconds`` have passed; returns the ledger."""
        actors = [
            self.cycles(admin_user), self.researcher("researcher"),
            self.researcher("researcher2"), self.lead(), self.admin(), self.oncall(),
        ]  # fmt: skip
        self.deadline = time.monotonic() + self.seconds

        def loop(actor: Callable[[random.Random], None], seed: int) -> None:
            rng = random.Random(seed)
            try:
                while time.monotonic() < self.deadline:
                    actor(rng)
            except Exception as exc:  # noqa: BLE001 - an actor's own bug is an error too
                with self.ledger.lock:
                    self.ledger.errors.append(f"actor: {type(exc).__name__}: {exc}")
            finally:
                connection.close()

        threads = [
            threading.Thread(target=loop, args=(actor, self.seed + i), daemon=True)
            for i, actor in enumerate(actors)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.seconds + 180)
        return self.ledger


def verify(ledger: Ledger, admin_user: Any) -> list[str]:
    """What the database says against what the clients were told: each problem as a line
    (none when every accepted action was applied exactly once and the cluster is clean)."""
    from core.models import AuditRecord
    from quotas.models import QuotaRequest
    from scheduling.consistency import find_inconsistencies
    from scheduling.models import Job, JobEvent
    from scheduling.sim_services import run_cycle_now

    problems = list(ledger.errors)
    mine = f"{ledger.tag}-"
    made = set(Job.objects.filter(name__startswith=mine).values_list("pk", flat=True))
    if made != set(ledger.jobs):
        problems.append(
            f"jobs: {len(made)} in the database, {len(ledger.jobs)} submissions accepted "
            f"(extra {sorted(made - set(ledger.jobs))[:5]}, missing "
            f"{sorted(set(ledger.jobs) - made)[:5]})"
        )
    twice = sorted(pk for pk, n in ledger.cancelled.items() if n > 1)
    if twice:
        problems.append(f"cancels accepted twice for jobs {twice[:5]}")
    events = Counter(
        JobEvent.objects.filter(job__in=list(ledger.cancelled), kind="cancelled")
        .values_list("job_id", flat=True)
    )  # fmt: skip
    states = dict(Job.objects.filter(pk__in=list(ledger.cancelled)).values_list("pk", "state"))
    for pk in ledger.cancelled:
        if states.get(pk) != "cancelled" or events[pk] != 1:
            problems.append(f"job {pk}: cancel accepted, state {states.get(pk)}, "
                            f"{events[pk]} cancel events")  # fmt: skip
    asked = set(QuotaRequest.objects.filter(reason=ledger.tag).values_list("pk", flat=True))
    if asked != set(ledger.asked):
        problems.append(f"quota requests: {len(asked)} stored, {len(ledger.asked)} accepted")
    final = {"approve": "approved", "reject": "rejected", "withdraw": "withdrawn"}
    stored = dict(QuotaRequest.objects.filter(pk__in=list(asked)).values_list("pk", "state"))
    for pk in ledger.asked:
        decisions = ledger.decided.get(pk, [])
        want = final[decisions[0]] if decisions else "pending"
        if len(decisions) > 1 or stored.get(pk) != want:
            problems.append(f"quota request {pk}: decisions {decisions}, state {stored.get(pk)}")
    audited = Counter(
        AuditRecord.objects.filter(actor_name="oncall", reason=ledger.tag)
        .values_list("action", flat=True)
    )  # fmt: skip
    for action in NODE_ACTIONS:
        if audited[f"node.{action}"] != ledger.node_actions[action]:
            problems.append(f"node.{action}: {ledger.node_actions[action]} accepted, "
                            f"{audited[f'node.{action}']} audit records")  # fmt: skip
    run_cycle_now(admin_user)  # settles what the last actions left (a cancel's GPUs)
    problems.extend(f"check_cluster: {p}" for p in find_inconsistencies())
    return problems
