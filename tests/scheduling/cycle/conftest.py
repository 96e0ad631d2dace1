"""A small cluster for the loop's steps one at a time: two 8-GPU nodes, one queue, a backend.

``FakeBackend`` keeps the cluster in memory (nodes, runs) and records every call; a test
makes the next call of a method fail with ``fail_next``. A ``Cycle`` opened on it runs
one step of the loop at a time (``make_cycle``), inside the test's transaction.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from quotas.models import BusinessLine, Queue, Tier
from scheduling.backends.base import (
    ENDED,
    RUNNING,
    STOPPED,
    STOPPING,
    BackendError,
    LaunchRequest,
    Observation,
    ObservedJob,
    ObservedNode,
    run_ref,
)
from scheduling.cycle.context import Cycle
from scheduling.engine.types import Slot
from scheduling.models import Allocation, Job, Node

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC).timestamp()


class FakeBackend:
    """A cluster in memory behind the backend interface (engine types only)."""

    name = "fake"

    def __init__(self, nodes: list[ObservedNode], now: float = T0) -> None:
        self.now = now
        self.nodes = {n.name: n for n in nodes}
        self.runs: dict[str, ObservedJob] = {}
        self.pressure: dict[str, tuple[str, ...]] = {}
        self.calls: list[tuple] = []
        self.errors: dict[str, list[BackendError]] = defaultdict(list)

    @classmethod
    def of_database(cls, now: float = T0) -> FakeBackend:
        """Every ``Node`` row, healthy and idle."""
        return cls([observed_node(n.name, n.gpus_total) for n in Node.objects.all()], now)

    # -- test controls ---------------------------------------------------------------
    def fail_next(self, method: str, error: BackendError) -> None:
        self.errors[method].append(error)

    def set_node(self, name: str, **changes) -> None:
        self.nodes[name] = replace(self.nodes[name], **changes)

    def end(self, ref: str, state: str, progress_s: float, reason: str = "") -> None:
        self.runs[ref] = replace(self.runs[ref], state=state, progress_s=progress_s,
                                 end_reason=reason)  # fmt: skip

    def start(self, job_id: int, attempt: int, placement: tuple[Slot, ...]) -> str:
        """A run the backend has that the database may not know (a lost launch)."""
        ref = run_ref(job_id, attempt)
        self.runs[ref] = ObservedJob(ref=ref, job_id=job_id, state=RUNNING, placement=placement)
        return ref

    def called(self, method: str) -> list[tuple]:
        return [c[1:] for c in self.calls if c[0] == method]

    # -- the interface -------------------------------------------------------------------
    def _call(self, method: str, *args) -> None:
        self.calls.append((method, *args))
        if self.errors[method]:
            raise self.errors[method].pop(0)

    def observe(self) -> Observation:
        busy: dict[str, set[int]] = defaultdict(set)
        for run in self.runs.values():
            if run.state not in ENDED:
                for s in run.placement:
                    busy[s.node].update(s.gpus)
        nodes = tuple(
            replace(n, free_gpus=tuple(g for g in range(n.gpus_total)
                                       if g not in busy[n.name] and g not in n.residual_gpus))
            for n in self.nodes.values()
        )  # fmt: skip
        return Observation(self.now, nodes, tuple(self.runs.values()), dict(self.pressure))

    def launch(self, request: LaunchRequest) -> None:
        self._call("launch", request.ref)
        self.runs[request.ref] = ObservedJob(
            ref=request.ref, job_id=request.job_id, state=RUNNING,
            placement=request.placement, progress_s=request.progress_s,
        )  # fmt: skip

    def checkpoint_and_stop(self, ref: str, grace_s: float) -> None:
        self._call("checkpoint_and_stop", ref, grace_s)
        self.runs[ref] = replace(self.runs[ref], state=STOPPING)

    def kill(self, ref: str) -> None:
        self._call("kill", ref)
        if ref in self.runs:
            self.runs[ref] = replace(self.runs[ref], state=STOPPED, end_reason="killed")

    def cordon(self, node: str, reason: str) -> None:
        self._call("cordon", node, reason)
        self.set_node(node, cordoned=True)

    def uncordon(self, node: str) -> None:
        self._call("uncordon", node)
        self.set_node(node, cordoned=False, health="ok", health_detail="")

    def clean_residual(self, node: str) -> int:
        self._call("clean_residual", node)
        held = len(self.nodes[node].residual_gpus)
        self.set_node(node, residual_gpus=())
        return held

    def close(self) -> None:
        self.calls.append(("close",))


def observed_node(name: str, gpus: int = 8, **changes) -> ObservedNode:
    node = ObservedNode(
        name=name, rack="r0", block="b0", gpu_model="H100", gpu_memory_gb=80, gpus_total=gpus,
        rdma=True, inference=False, health="ok", health_detail="", cordoned=False,
        free_gpus=tuple(range(gpus)),
    )  # fmt: skip
    return replace(node, **changes)


def counter(metric, *labels: str) -> float:
    """The value of a ``core.telemetry`` counter's series in this process."""
    return metric.labels(*labels)._value.get()


def make_cycle(backend: FakeBackend, kind: str = "cycle") -> Cycle:
    """A cycle on the backend's current observation (as ``run_cycle`` opens one)."""
    return Cycle(backend, backend.observe(), kind)


@pytest.fixture(autouse=True)
def one_clock():
    """The portal's clock agrees with the backend's (#15): what the tests create here was
    stamped an hour before ``T0``, the fake backend's time."""
    from core import clock

    with clock.pinned(datetime.fromtimestamp(T0 - 3600, tz=UTC)):
        yield


@pytest.fixture
def cluster(db):
    """Two 8-GPU nodes (n0, n1), one line and one experiment queue, one owner."""
    from django.contrib.auth import get_user_model

    line = BusinessLine.objects.create(name="llm", display_name="LLM", quota_gpus=100)
    queue = Queue.objects.create(name="llm-experiment", business_line=line,
                                 nature=Queue.Nature.EXPERIMENTS, tier=Tier.EXPERIMENT)  # fmt: skip
    for name in ("n0", "n1"):
        Node.objects.create(name=name, rack="r0", block="b0", gpu_model="H100",
                            gpu_memory_gb=80, gpus_total=8)  # fmt: skip
    owner = get_user_model().objects.create(username="owner")
    return {"queue": queue, "owner": owner}


@pytest.fixture
def backend(cluster) -> FakeBackend:
    return FakeBackend.of_database()


@pytest.fixture
def make_job(cluster):
    """``make_job(gpus=8, state="pending", **fields)``: a job row in the test queue."""

    def make(gpus: int = 8, **fields) -> Job:
        values = {"name": "job", "owner": cluster["owner"], "queue": cluster["queue"],
                  "tier": Tier.EXPERIMENT, "gpus": gpus, "gpus_per_node": min(gpus, 8)}  # fmt: skip
        return Job.objects.create(**{**values, **fields})

    return make


@pytest.fixture
def running_job(make_job, backend):
    """``running_job(node="n0", gpus=(0..7), **fields)``: a job running on the backend,
    with its run, its allocations and ``attempt`` 1, as a cycle that started it leaves it."""

    def make(node: str = "n0", gpus: tuple[int, ...] = tuple(range(8)), **fields) -> Job:
        fields.setdefault("started_at", datetime.fromtimestamp(T0 - 600, tz=UTC))
        fields.setdefault("state", "running")
        job = make_job(gpus=len(gpus), attempt=1, **fields)
        job.backend_ref = backend.start(job.pk, 1, (Slot(node, gpus),))
        job.save(update_fields=["backend_ref"])
        node_id = Node.objects.get(name=node).pk
        Allocation.objects.bulk_create(
            Allocation(job=job, node_id=node_id, gpu_index=g) for g in gpus
        )
        return job

    return make


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, str, dict]]:
    """The live events the cycle's steps publish, as (topic, kind, payload), in order."""
    from scheduling.cycle import context, reconcile, run, verdicts

    published: list[tuple[str, str, dict]] = []
    for module in (context, reconcile, run, verdicts):
        monkeypatch.setattr(module, "publish_on_commit", lambda *e: published.append(e))
    return published
